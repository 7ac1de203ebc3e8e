"""The turn lifecycle's bugs, each through the daemon as a subprocess with a scripted agent.

Each of these failed before the turn lifecycle became ``lmbridge.core.turn``:
1. a Stop poisoned the next turn (the cancelled turn's drain deadline ended it);
2. a ``cache_control`` data part beside a tool result turned Allow into a cancel;
3. an agent still starting kept the daemon (and itself) alive after stdin EOF;
5. an error on the first prompt after a cancel reached the user;
6. after a Stop, a fresh session got the stopped request as the new request.
(4, the non-JSON flood, is in tests/test_framing.py.) Plus the no-tool decline and
the start notice.
"""

from __future__ import annotations

import base64
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import alive, children
from test_daemon import LIMIT, eventually, ok, only, write_turn

from lmbridge.core.transcript import CONTEXT_OPEN, STOPPED_NOTE
from lmbridge.devtools.client import approve, assistant, text_of, tool_calls, user

pytestmark = pytest.mark.anyio

CHAT = "lm/provideLanguageModelChatResponse"


async def stop_while_streaming(c: Any, agent: Any, text: str = "one") -> Any:
    """A request that streams, stopped by the user; returns its Call."""
    call = await c.start(CHAT, {"modelId": agent.id, "messages": [user(text)], "options": {}})
    await eventually(lambda: call.parts, what="the first part")
    await c.cancel(call)
    with anyio.fail_after(10):  # ms idle
        await call.done.wait()
    assert call.result == {"stopReason": "cancelled"}
    return call


async def test_bug1_a_stop_does_not_end_the_next_turn_after_the_drain_deadline(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [
        [{"text": "Streaming..."}, {"sleep": 30}],
        [{"text": "Slow "}, {"sleep": 1.5}, {"text": "answer."}],  # outlives the old deadline
    ]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], env={"LMBRIDGE_DRAIN_TIMEOUT": "0.5"}) as c:
            first = await stop_while_streaming(c, agent)
            second = await c.chat(agent.id, [user("one"), assistant(first.parts), user("two")])
            ok(second)
            assert text_of(second) == "Slow answer."
    assert [e["sessionId"] for e in agent.events("session_new")] == ["s1"]  # no abandoned session


async def test_bug1_a_permission_answered_after_the_old_deadline_still_reaches_the_agent(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [[{"text": "Streaming..."}, {"sleep": 30}], write_turn()]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], env={"LMBRIDGE_DRAIN_TIMEOUT": "0.5"}) as c:
            first = await stop_while_streaming(c, agent)
            history = [user("one"), assistant(first.parts), user("write my notes")]
            second = await c.chat(agent.id, history)
            ok(second, "tool_calls")
            await anyio.sleep(1.0)  # the user reads the card past the cancelled turn's deadline
            third = await c.chat(agent.id, [*history, assistant(second.parts), approve(only(tool_calls(second)))])
            ok(third)
            assert text_of(third).endswith("Wrote the file.")
    assert (tmp_path / "notes.txt").read_text() == "approved notes"
    assert [o["kind"] for o in agent.outcomes()] == ["allow_once"]


@pytest.mark.parametrize("marker", ["cache_control", "stateful_marker"])
async def test_bug2_copilot_data_parts_beside_an_allow_do_not_cancel_it(scripted: Any, shared: Any, tmp_path: Path, marker: str) -> None:
    agent = scripted({"turns": [write_turn()]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            history = [user("please write my notes")]
            first = await c.chat(agent.id, history)
            ok(first, "tool_calls")
            allow = approve(only(tool_calls(first)))
            # As Copilot sends it (docs/vscode.md, "Copilot's data parts"): a data part of its own in the result's message.
            allow["content"].append({"type": "data", "mimeType": marker, "data": base64.b64encode(b'{"type":"ephemeral"}').decode()})
            second = await c.chat(agent.id, [*history, assistant(first.parts), allow])
            ok(second)
    assert [o["kind"] for o in agent.outcomes()] == ["allow_once"]
    assert (tmp_path / "notes.txt").exists()


async def test_bug3_eof_while_an_agent_starts_answers_the_request_and_stops_the_agent(tmp_path: Path, daemon: Any) -> None:
    pidfile = tmp_path / "agent.pid"
    # An agent that never answers initialize and ignores stdin EOF.
    script = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(3600)"
    agent = {"id": "mute", "command": sys.executable, "args": ["-c", script]}
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            call = await c.start(CHAT, {"modelId": "mute", "messages": [user("hello?")]})
            await eventually(pidfile.exists, what="the agent started")
            pid = int(pidfile.read_text())
            started = time.monotonic()
            code = await c.close(timeout=50)
            took = time.monotonic() - started
    assert call.done.is_set() and call.error is not None, "the request read before EOF was never answered"
    # ~2 s idle (stdin closed, 2 s, SIGTERM); not when the agent's 60 s start bound ends
    assert code == 0 and took < 50, f"the daemon took {took:.1f} s to exit after EOF"
    await eventually(lambda: not alive(pid), what="the agent to be gone")


async def test_bug5_an_error_on_the_first_prompt_after_a_stop_is_absorbed(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [
        [{"text": "Streaming..."}, {"sleep": 30}],
        # gemini-cli after a Stop at a permission: the model API refuses its history (docs/agents.md).
        [{"error": {"code": -32603, "message": "Internal error", "data": {"message": "HTTP 400 function call without response"}}}],
        [{"text": "Recovered answer."}],
    ]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await stop_while_streaming(c, agent)
            second = await c.chat(agent.id, [user("one"), assistant(first.parts), user("two")])
            ok(second)
            assert text_of(second) == "Recovered answer."
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s1", "s2"] and len(agent.pids()) == 1
    assert prompts[2]["blocks"][0]["text"].startswith(CONTEXT_OPEN) and prompts[2]["blocks"][-1]["text"] == "two"


async def test_bug6_a_fresh_session_after_a_stop_gets_the_new_request_only(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [write_turn()]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user("please write my notes")])
            ok(first, "tool_calls")
        agent.write({"turns": [[{"text": "Hi."}]]})
        # Stop at the card, then VS Code is reloaded: a new daemon, the stopped turn's
        # answer absent from the history, and a new message.
        async with daemon([agent]) as c:
            second = await c.chat(agent.id, [user("please write my notes"), user("never mind; say hi")])
            ok(second)
            assert text_of(second) == "Hi."
    assert not (tmp_path / "notes.txt").exists()
    prompt = agent.prompts()[-1]
    # Two blocks: the context (the stopped turn, marked) and the new request alone.
    assert [b["type"] for b in prompt["blocks"]] == ["text", "text"]
    assert prompt["blocks"][-1]["text"] == "never mind; say hi"
    context = prompt["blocks"][0]["text"]
    assert context.startswith(CONTEXT_OPEN)
    assert f"please write my notes\n{STOPPED_NOTE}" in context
    assert "never mind" not in context


async def test_no_action_tool_offered_declines_the_permission_with_a_line(scripted: Any, shared: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [write_turn()]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            # Ask mode: Copilot offers read-only tools, none of lmbridge's edit tool.
            reply = await c.chat(agent.id, [user("please write my notes")], agent_mode=False,
                                 options={"tools": [{"name": "symposium-agent-action-read"}, {"name": "copilot_readFile"}]})
            ok(reply)
    assert not tool_calls(reply)
    assert "wanted to edit files: `Write notes.txt`. Declined: approving agent actions needs Agent mode." in text_of(reply)
    assert text_of(reply).endswith("Not writing it; carrying on without the file.")
    assert [o["kind"] for o in agent.outcomes()] == ["reject_once"] and not (tmp_path / "notes.txt").exists()


async def test_a_slow_start_says_the_agent_is_starting(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [[{"text": "Ready."}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([{**agent.spec, "name": "Scripted Agent"}], env={"LMBRIDGE_START_NOTICE": "0"}) as c:
            reply = await c.chat(agent.id, [user("hello")])
            ok(reply)
    assert text_of(reply) == "_Starting Scripted Agent…_\n\nReady."


async def test_bug4_an_agent_flooding_stdout_with_non_json_is_logged_bounded(tmp_path: Path, daemon: Any) -> None:
    # `yes` never answers initialize and writes ~y lines as fast as the pipe takes them.
    agent = {"id": "yes", "command": "yes", "args": []}
    log = tmp_path / "daemon.stderr"
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            call = await c.start(CHAT, {"modelId": "yes", "messages": [user("hello?")]})
            # Once the flood has begun (a busy machine may take seconds to start the agent):
            await eventually(lambda: "agent 'yes' stdout" in log.read_text(), what="the first skipped line logged")
            await anyio.sleep(2.0)  # tens of thousands of lines
            # Responsive: answered in ms on an idle machine; the bound is for a busy one.
            assert await c.request("lm/provideTokenCount", {"modelId": "yes", "text": "still here"}, timeout=20)
            code = await c.close(timeout=10)
    assert call.done.is_set() and call.error is not None, "the request was never answered"
    assert code == 0
    text = log.read_text()
    skipped = [line for line in text.splitlines() if "agent 'yes' stdout" in line]
    assert 5 <= len(skipped) <= 10, f"{len(skipped)} log lines about skipped lines"
    assert "Traceback" not in text and "Event loop is closed" not in text


async def test_sigterm_ends_the_daemon_like_eof(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [[{"text": "Streaming..."}, {"sleep": 30}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            call = await c.start(CHAT, {"modelId": agent.id, "messages": [user("stream please")], "options": {}})
            await eventually(lambda: call.parts, what="the first part")
            pids = agent.pids()
            started = time.monotonic()
            c.process.terminate()
            with anyio.fail_after(25):
                await call.done.wait()
                code = await c.process.wait()
            took = time.monotonic() - started
    assert call.error is not None  # answered, not left hanging
    assert code == 0 and took < 25  # ~0.3 s idle; not when the turn's sleep 30 ends
    assert not [p for p in pids if alive(p)]


@pytest.mark.parametrize("how", ["option", "env"])
async def test_agent_processes_stay_under_the_cap_and_an_evicted_chat_continues(scripted: Any, daemon: Any, how: str) -> None:
    """The session cap (docs/sessions.md): new chats close the least recently used idle session of the
    agent; the closed chat, when it comes back, continues in a fresh session told the
    conversation; when every session is busy the new chat is told so. The demo agent
    answers each chat differently ("You said: ..."), so each chat is told apart. The cap
    comes as ``--max-agent-processes`` or as the shim passes it, ``$LMBRIDGE_MAX_AGENT_PROCESSES``."""
    # No wait for a free session: the third busy chat below is refused at once (its wait:
    # tests/test_session_cap.py).
    args, env = (["--max-agent-processes", "2", "--session-wait", "0"], {}) if how == "option" else ([], {"LMBRIDGE_MAX_AGENT_PROCESSES": "2", "LMBRIDGE_SESSION_WAIT": "0"})
    with anyio.fail_after(LIMIT * 2):
        async with daemon([], args=args, env=env) as c:
            first = await c.chat("demo", [user("chat 0")])
            ok(first)
            most = 0
            for i in range(1, 6):
                ok(await c.chat("demo", [user(f"chat {i}")]))
                most = max(most, len(children(c.process.pid)))
            assert most <= 2, f"{most} agent processes alive with a cap of 2"
            again = await c.chat("demo", [user("chat 0"), assistant(first.parts), user("and more")])
            ok(again)
            # A fresh session, told the conversation (the demo agent echoes all it got): "chat 0" is context.
            assert "You said:" in text_of(again) and "chat 0" in text_of(again) and "and more" in text_of(again)
            assert len(children(c.process.pid)) <= 2
            # Two busy chats: a third cannot be served now, and is told so.
            busy = [await c.start(CHAT, {"modelId": "demo", "messages": [user(f"something slow {i}")]}) for i in range(2)]
            for call in busy:
                await eventually(lambda call=call: call.parts, what="the busy chats streaming")
            third = await c.chat("demo", [user("one more")])
            assert third.error is not None and "busy with other chats" in third.error.message
            for call in busy:
                await c.cancel(call)


@pytest.mark.parametrize("offered", [True, False])
async def test_a_session_closed_for_the_cap_gets_session_close_where_offered(scripted: Any, daemon: Any, offered: bool) -> None:
    """The cap and the session index: the least recently used idle session closed to make room is closed
    on the agent's side (ACP ``session/close``) when the agent offers it, before the new
    chat's session opens; the agent's one process serves both chats."""
    caps = {"agentCapabilities": {"sessionCapabilities": {"close": {}}}} if offered else {}
    agent = scripted({"initialize": caps})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], args=["--max-agent-processes", "1"]) as c:
            ok(await c.chat(agent.id, [user("first chat")]))
            ok(await c.chat(agent.id, [user("second chat")]))  # the first chat's session is closed
            first, second = (e["sessionId"] for e in agent.events("session_new"))
            assert len(agent.pids()) == 1
            closes = agent.frames("session/close")
            if offered:
                (close,) = await eventually(lambda: agent.frames("session/close"), what="session/close")
                assert close["params"] == {"sessionId": first}
                (opened,) = [f for f in agent.frames("session/new")][1:]
                assert close["t"] < opened["t"], "the closed session was closed before the new one opened"
            else:
                assert not closes
            assert first != second
