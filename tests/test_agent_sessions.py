"""docs/sessions.md through the daemon with scripted agents: one process per agent, and a chat
that keeps its agent session (the agent's own memory) wherever it cannot simply continue.

Recovery order, per what the agent offers in ``initialize``: ``session/resume``
(``sessionCapabilities.resume``), else ``session/load`` (``loadSession``; the history it
replays is not shown), else a fresh session told the conversation. Each case below runs
for the three combinations: the stale turn after a Stop, a daemon restart with the same
state folder, an eviction, a crash of the shared process.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import alive
from test_daemon import LIMIT, eventually, ok
from test_lifecycle import CHAT, stop_while_streaming

from lmbridge.core.transcript import CONTEXT_OPEN
from lmbridge.devtools.client import assistant, text_of, user

pytestmark = pytest.mark.anyio

CAPS = {
    "resume": {"agentCapabilities": {"sessionCapabilities": {"resume": {}, "close": {}}}},
    "load": {"agentCapabilities": {"loadSession": True}},
    "neither": {},
}
#: The ACP method each combination takes a session up with (None: a fresh session).
TAKE_UP = {"resume": "session/resume", "load": "session/load", "neither": None}


def taken_up(agent: Any) -> list[dict[str, Any]]:
    return agent.frames("session/resume") + agent.frames("session/load")


def assert_recovered(agent: Any, caps: str, prompt: dict[str, Any], old: str, new_text: str) -> None:
    """``prompt`` went to the chat's own session, taken up as ``caps`` allows, and holds
    only what that session has not seen; or, with neither offered, to a fresh session
    told the conversation."""
    method = TAKE_UP[caps]
    if method is None:
        assert not taken_up(agent)
        assert len(agent.events("session_new")) == 2  # a fresh session for the rest of the chat
        assert prompt["blocks"][0]["text"].startswith(CONTEXT_OPEN) and prompt["blocks"][-1]["text"] == new_text
    else:
        (frame,) = taken_up(agent)
        assert frame["method"] == method and frame["params"]["sessionId"] == old
        assert prompt["sessionId"] == old
        assert [b["text"] for b in prompt["blocks"]] == [new_text]  # the agent remembers the rest


@pytest.mark.parametrize("caps", list(CAPS))
async def test_the_stale_turn_after_a_stop_keeps_the_agent_session(scripted: Any, shared: Any, caps: str) -> None:
    agent = scripted({"initialize": CAPS[caps], "turns": [
        [{"text": "Streaming..."}, {"sleep": 30}],
        # claude-agent-acp after a cancel: the next prompt ends at once, empty (docs/agents.md).
        [{"stop": "end_turn"}],
        [{"text": "Recovered answer."}],
    ]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await stop_while_streaming(c, agent)
            second = await c.chat(agent.id, [user("one"), assistant(first.parts), user("two")])
            ok(second)
            assert text_of(second) == "Recovered answer."  # not REPLAYED-*: session/load's replay is not shown
    prompts = agent.prompts()
    assert len(prompts) == 3 and len(agent.pids()) == 1
    assert_recovered(agent, caps, prompts[2], "s1", "two")
    if caps == "resume":
        (close,) = agent.frames("session/close")
        assert close["params"] == {"sessionId": "s1"} and close["t"] < taken_up(agent)[0]["t"]


@pytest.mark.parametrize("name", ["fast-agent-acp", "gemini-cli"])
async def test_an_agent_whose_history_a_cancel_breaks_goes_on_in_a_fresh_session(scripted: Any, shared: Any, name: str) -> None:
    """fast-agent and gemini-cli (their ``agentInfo.name``, so their profiles'
    ``cancel_breaks_history``): after a Stop the next prompt fails (the history holds an
    empty assistant message, or a function call without its response, that the model API
    refuses), and would again in the same session taken up again. Though the agent offers
    resume and load, the chat goes on in a fresh session told the conversation."""
    caps = {"agentCapabilities": {"loadSession": True, "sessionCapabilities": {"resume": {}}}, "agentInfo": {"name": name}}
    agent = scripted({"initialize": caps, "turns": [
        [{"text": "Streaming..."}, {"sleep": 30}],
        [{"error": {"code": -32603, "message": "Internal error", "data": {"details": "Error code: 400 - all messages must have non-empty content"}}}],
        [{"text": "Recovered answer."}],
    ]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await stop_while_streaming(c, agent)
            second = await c.chat(agent.id, [user("one"), assistant(first.parts), user("two")])
            ok(second)
            assert text_of(second) == "Recovered answer." and "400" not in text_of(second)
    prompts = agent.prompts()
    assert len(prompts) == 3 and len(agent.pids()) == 1
    assert not taken_up(agent)  # never resumed into the same failure
    assert [e["sessionId"] for e in agent.events("session_new")] == ["s1", "s2"]
    assert prompts[2]["sessionId"] == "s2"
    told = prompts[2]["blocks"][0]["text"]
    assert told.startswith(CONTEXT_OPEN) and "one" in told and prompts[2]["blocks"][-1]["text"] == "two"


@pytest.mark.parametrize("caps", list(CAPS))
async def test_a_restarted_daemon_continues_the_agent_session(scripted: Any, daemon: Any, tmp_path: Path, caps: str) -> None:
    """VS Code reloaded: a new daemon with the same state folder, a new agent process."""
    agent = scripted({"initialize": CAPS[caps], "turns": [[{"text": "First answer."}]]})
    secret = "my-private-question-text"
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user(secret)])
            ok(first)
        index = tmp_path / "state" / "lmbridge" / "sessions.json"
        if caps != "neither":
            assert stat.S_IMODE(os.stat(index).st_mode) == 0o600
            data = index.read_text()
            assert secret not in data and "First answer" not in data  # digests and ids only
            assert [e["resume"] for e in json.loads(data)["sessions"]] == ["s1"]
        agent.write({"initialize": CAPS[caps], "turns": [[{"text": "Second answer."}]]})  # for the new process
        async with daemon([agent]) as c:
            second = await c.chat(agent.id, [user(secret), assistant(first.parts), user("and then?")])
            ok(second)
            assert text_of(second) == "Second answer."
    assert len(agent.pids()) == 2
    assert_recovered(agent, caps, agent.prompts()[-1], "s1", "and then?")


@pytest.mark.parametrize("caps", ["resume", "neither"])
async def test_an_evicted_chat_continues_the_agent_session(scripted: Any, daemon: Any, caps: str) -> None:
    agent = scripted({"initialize": CAPS[caps], "default_turn": [{"text": "An answer."}]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], args=["--idle-timeout", "0.3"]) as c:
            first = await c.chat(agent.id, [user("question one")])
            ok(first)
            if caps == "resume":
                await eventually(lambda: agent.frames("session/close"), what="the evicted session closed")
            # With no session left, the process itself exits after the idle timeout.
            (pid,) = agent.pids()
            await eventually(lambda: not alive(pid), what="the idle agent process stopped")
            second = await c.chat(agent.id, [user("question one"), assistant(first.parts), user("question two")])
            ok(second)
    assert_recovered(agent, caps, agent.prompts()[-1], "s1", "question two")


async def test_a_crash_of_the_shared_process_recovers_every_chat(scripted: Any, daemon: Any) -> None:
    """Two chats on one process; it crashes in one chat's turn: that request gets an error
    naming the agent; the next request of each chat restarts it and resumes its session."""
    agent = scripted({"initialize": CAPS["resume"], "turns": [
        [{"text": "Answer A."}], [{"text": "Answer B."}],
        [{"text": "Working..."}, {"stderr": "fatal: out of cheese"}, {"crash": 3}],
    ]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            a = [user("chat A")]
            b = [user("chat B")]
            first_a = await c.chat(agent.id, a)
            first_b = await c.chat(agent.id, b)
            a += [assistant(first_a.parts), user("A crashes now")]
            b += [assistant(first_b.parts)]
            crashed = await c.chat(agent.id, a)
            assert crashed.error is not None
            assert agent.id in crashed.error.message and "out of cheese" in crashed.error.message
            agent.write({"initialize": CAPS["resume"], "default_turn": [{"text": "After the restart."}]})
            for history, new in ((a, "A again"), (b, "B again")):
                again = await c.chat(agent.id, [*history, user(new)])
                ok(again)
                assert text_of(again) == "After the restart."
    assert len(agent.pids()) == 2  # the crashed process and the one that replaced it
    resumed = {f["params"]["sessionId"] for f in agent.frames("session/resume")}
    assert resumed == {"s1", "s2"}
    after = [p for p in agent.prompts() if p["pid"] == agent.pids()[1]]
    assert {p["sessionId"]: p["blocks"][-1]["text"] for p in after} == {"s1": "A again", "s2": "B again"}


async def test_a_cancel_in_one_chat_leaves_the_other_streaming(scripted: Any, shared: Any, tmp_path: Path) -> None:
    gate = tmp_path / "part-two"  # both turns wait here: A is cancelled mid-turn however slow the machine
    agent = scripted({"turns_per_session": True, "turns": [[{"text": "Part one. "}, {"gate": str(gate)}, {"text": "Part two."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            a = await c.start(CHAT, {"modelId": agent.id, "messages": [user("chat A")], "options": {}})
            b = await c.start(CHAT, {"modelId": agent.id, "messages": [user("chat B")], "options": {}})
            await eventually(lambda: a.parts and b.parts, what="both chats streaming")
            await c.cancel(a)
            await a.done.wait()
            gate.touch()
            with anyio.fail_after(30):  # ms idle
                await b.done.wait()
    assert a.result == {"stopReason": "cancelled"}
    ok(b)
    assert text_of(b) == "Part one. Part two."
    (cancel,) = agent.frames("session/cancel")
    a_session = next(p["sessionId"] for p in agent.prompts() if p["text"] == "chat A")
    assert cancel["params"] == {"sessionId": a_session} and len(agent.pids()) == 1


@pytest.mark.parametrize("prewarm", [True, False])
async def test_the_agent_used_last_starts_right_after_initialize(scripted: Any, daemon: Any, prewarm: bool) -> None:
    """Pre-warming (docs/sessions.md): a new daemon starts the agents used last (remembered in
    the state folder) before any chat; ``LMBRIDGE_PREWARM=0`` (the shim's ``lmbridge.prewarm``) turns it off."""
    agent = scripted({})
    env = {} if prewarm else {"LMBRIDGE_PREWARM": "0"}
    with anyio.fail_after(LIMIT):
        async with daemon([agent], env=env) as c:
            ok(await c.chat(agent.id, [user("hello")]))
        async with daemon([agent], env=env):
            if prewarm:
                await eventually(lambda: len(agent.pids()) == 2 and agent.frames("initialize")[1:], what="the agent pre-warmed")
            else:
                await anyio.sleep(1.0)
                assert len(agent.pids()) == 1
    # Pre-warming opens no session: no spare asked, and the agent's options (none) are known
    # from the first daemon's session, so no probe either.
    assert len(agent.events("session_new")) == 1


def _tools(schema: dict[str, Any]) -> dict[str, Any]:
    return {"tools": [{"name": "search_workspace", "description": "Search", "inputSchema": schema}], "toolMode": "auto"}


#: Tests that count the sessions opened keep one spare (by default each agent keeps its ``AgentProfile.spares``).
ONE_SPARE = {"LMBRIDGE_SPARE_SESSIONS": "1"}


def _spare_endpoint(event: dict[str, Any]) -> bool:
    """Whether a session/new was a spare's (its tools relay names a spare endpoint)."""
    return any(s["args"][s["args"].index("--session") + 1].startswith("spare") for s in event["mcpServers"])


@pytest.mark.parametrize("how", ["env", "option"])
async def test_a_spare_session_is_ready_for_the_next_new_chat(scripted: Any, daemon: Any, how: str) -> None:
    """The spare session (``$LMBRIDGE_SPARE_SESSION=1``, or ``--spare-session``, which wins
    over ``$LMBRIDGE_SPARE_SESSION=0``): after a chat opens its session, one more is opened
    ahead, its tools endpoint serving the tools that chat offered from the start (agents
    list them once); the next new chat offering the same tools takes it (no session/new
    while it waits), and the agent lists them there."""
    listed = [{"mcp_connect": {}}, {"mcp_list": True}, {"text": "listed"}]
    agent = scripted({"initialize": CAPS["resume"], "turns": [[{"text": "first"}], listed]})
    tools = _tools({"type": "object", "properties": {"q": {"type": "string"}}})
    with anyio.fail_after(LIMIT):
        # The fixture sets $LMBRIDGE_SPARE_SESSION=0.
        args, env = (["--spare-session"], {}) if how == "option" else ([], {"LMBRIDGE_SPARE_SESSION": "1"})
        async with daemon([agent], args=args, env={**env, **ONE_SPARE}) as c:
            ok(await c.chat(agent.id, [user("first chat")], options=tools))
            await eventually(lambda: len(agent.events("session_new")) == 2, what="the spare session")
            spare = agent.events("session_new")[1]
            assert _spare_endpoint(spare)
            second = await c.chat(agent.id, [user("second chat")], options=tools)
            ok(second)
            assert text_of(second) == "listed"
    prompts = agent.prompts()
    assert prompts[1]["sessionId"] == spare["sessionId"]
    # Nothing was opened for the second chat while it waited: every session but the first
    # chat's was opened ahead, as a spare (the one opened once the second chat took its
    # spare may come before or after its prompt).
    assert [_spare_endpoint(e) for e in agent.events("session_new")][:2] == [False, True]
    assert not [e for e in agent.events("session_new")[1:] if not _spare_endpoint(e)]
    assert [e["names"] for e in agent.events("mcp_tools")] == [["search_workspace"]]
    second_sent = agent.frames("session/prompt")[1]["t"]
    assert not [e for e in agent.events("session_close") if e["t"] < second_sent]  # the spare was taken, not closed


async def test_new_chats_back_to_back_each_take_a_spare_ready_before_they_were_sent(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """docs/sessions.md, "Pre-warming and the spare session": the daemon keeps two spares
    for an agent with no number of its own (its default); a spare taken while the other is
    still ready (or being opened) is replaced once the process is quiet, after the chat's
    answer, not while that chat answers; and two new chats sent back to back each take a spare whose
    session/new was answered before the chat was sent. Every session/new after the first
    three waits at a gate the test opens only after the third chat, so no replacement can
    serve the chats measured here."""
    gate, hold = tmp_path / "new-gate", tmp_path / "hold"
    turns = [[{"text": "first"}], [{"gate": str(hold)}, {"text": "second"}], [{"text": "third"}], [{"text": "fourth"}]]
    agent = scripted({"initialize": CAPS["resume"], "new_gate": {"after": 3, "path": str(gate)}, "turns": turns})
    answers: list[Any] = []
    with anyio.fail_after(LIMIT):
        async with daemon([agent], args=["--spare-session"]) as c:  # no LMBRIDGE_SPARE_SESSIONS: the default count
            ok(await c.chat(agent.id, [user("first chat")]))  # its own session/new, then the two spares
            await eventually(lambda: len(agent.events("session_new")) == 3, what="two spares ready")

            async def second() -> None:
                answers.append(await c.chat(agent.id, [user("second chat")]))

            async with anyio.create_task_group() as tg:
                tg.start_soon(second)
                await eventually(lambda: agent.prompts()[1:], what="the second chat's prompt")
                await anyio.sleep(0.5)  # a replacement asked for at the take would have reached the agent by now
                # Not while its answer is held back: the other spare is ready for the next chat.
                assert len(agent.frames("session/new")) == 3
                hold.touch()
            ok(answers[0])
            await eventually(lambda: len(agent.frames("session/new")) == 4, what="the taken spare replaced after the answer")
            answers.append(await c.chat(agent.id, [user("third chat")]))  # back to back: sent as soon as the second was answered
            ok(answers[1])
            await eventually(lambda: len(agent.frames("session/new")) == 5, what="the third chat's spare replaced after its answer")
            gate.touch()  # the replacements are answered from now on
            ok(await c.chat(agent.id, [user("fourth chat")]))
    news = {e["sessionId"]: e for e in agent.events("session_new")}
    prompts = [p["sessionId"] for p in agent.prompts()]
    second_sent = agent.frames("session/prompt")[1]["t"]
    answered = [e["t"] for e in agent.events("prompt_answered")]
    # Each chat its own session; the chats offer no tools, so a spare has no tools endpoint
    # to tell it by (docs/sessions.md): before the second chat was sent, only the first
    # chat's session and the two spares had been opened.
    assert len(set(prompts)) == 4
    assert len([e for e in news.values() if e["t"] < second_sent]) == 3
    assert not _spare_endpoint(news[prompts[1]]) and not _spare_endpoint(news[prompts[2]])
    # Both back-to-back chats took a spare answered before the second chat's prompt: not one
    # opened for them (those waited at the gate until after the third chat).
    assert news[prompts[1]]["t"] < second_sent and news[prompts[2]]["t"] < second_sent
    # Each replacement asked for only once the chat that took a spare had been answered.
    replacements = [f["t"] for f in agent.frames("session/new")[3:5]]
    assert replacements[0] > answered[1] and replacements[1] > answered[2]
    assert len(agent.events("session_new_gated")) >= 2  # the replacements for chats 2 and 3 waited
    assert [text_of(a) for a in answers] == ["second", "third"]


async def test_a_burst_of_new_chats_takes_the_spares_left_and_none_is_opened_beside_it(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """docs/sessions.md, "When they are opened" (``core.spares.to_open``): with four spares
    kept (claude-agent-acp's number), chats sent back to back take the ones left, and no
    session/new reaches the agent while they answer or between them: the spares taken are
    replaced once the process is quiet (``$LMBRIDGE_SPARE_QUIET``, 3 s here, far more than a
    client takes to send the next chat), the last one left at once. Every session/new after
    the first five waits at a gate, opened only at the end."""
    gate = tmp_path / "new-gate"
    turns = [[{"text": f"chat {i}"}] for i in range(1, 6)]
    agent = scripted({"initialize": CAPS["resume"], "new_gate": {"after": 5, "path": str(gate)}, "turns": turns})
    env = {"LMBRIDGE_SPARE_SESSIONS": "4", "LMBRIDGE_SPARE_QUIET": "3"}
    with anyio.fail_after(LIMIT * 2):
        async with daemon([agent], args=["--spare-session"], env=env) as c:
            ok(await c.chat(agent.id, [user("chat 1")]))  # its own session/new, then two spares at once
            first_answered = agent.events("prompt_answered")[0]["t"]
            await eventually(lambda: len(agent.events("session_new")) == 5, what="four spares ready")
            answers = [await c.chat(agent.id, [user(f"chat {i}")]) for i in (2, 3, 4)]  # back to back
            burst_sent = agent.frames("session/prompt")[1]["t"]
            burst_answered = agent.events("prompt_answered")[3]["t"]
            quiet = len(agent.frames("session/new"))
            ok(await c.chat(agent.id, [user("chat 5")]))  # takes the last: the next ones asked for at once
            await eventually(lambda: len(agent.events("session_new_gated")) >= 2, what="the spares asked for once none was left")
            gate.touch()
            await eventually(lambda: len(agent.events("session_new")) == 9, what="four spares again")
    news = agent.frames("session/new")
    prompts = [p["sessionId"] for p in agent.prompts()]
    opened = {e["sessionId"]: e["t"] for e in agent.events("session_new")}
    assert [text_of(a) for a in answers] == ["chat 2", "chat 3", "chat 4"] and len(set(prompts)) == 5
    # Two spares at once after the first chat's session/new, the other two once it was quiet.
    assert len([f for f in news[1:5] if f["t"] < first_answered]) >= 1
    assert len([f for f in news[1:5] if f["t"] > first_answered + 2.5]) == 2
    # Chats 2-5 each took a spare opened before chat 2 was sent; nothing was opened from the
    # burst's first prompt to its last answer, nor while chat 5 took the last spare's place.
    assert all(opened[sid] < burst_sent for sid in prompts[1:])
    assert quiet == 5 and not [f for f in news if burst_sent <= f["t"] <= burst_answered]


async def test_a_chat_that_takes_the_spare_gets_the_older_modes(scripted: Any, daemon: Any) -> None:
    """The spare keeps all its session/new answered: an agent offering the older ``modes``
    (no mode among its configOptions) has its mode control in the chat that takes the spare,
    so the agent's ``mode`` setting is set there as on a session opened for the chat: ahead,
    once the spare is opened (``acp.session.start_in_mode``)."""
    modes = {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}]}
    agent = scripted({"initialize": CAPS["resume"], "modes": modes, "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT):
        async with daemon([{**agent.spec, "mode": "code"}], args=["--spare-session"], env=ONE_SPARE) as c:
            ok(await c.chat(agent.id, [user("first chat")]))
            await eventually(lambda: len(agent.events("session_new")) == 2, what="the spare session")
            spare = agent.events("session_new")[1]
            assert spare["mcpServers"] == []  # no chat offered tools: no endpoint, as a fresh session's
            await eventually(lambda: len(agent.events("set_mode")) == 2, what="the spare set to the mode ahead")
            sent = time.monotonic()  # the scripted agent logs CLOCK_MONOTONIC times
            ok(await c.chat(agent.id, [user("second chat")]))
    assert [p["sessionId"] for p in agent.prompts()] == [agent.events("session_new")[0]["sessionId"], spare["sessionId"]]
    # Set ahead, before the chat that took it was sent (then the replacement spare's, so too).
    assert [(e["sessionId"], e["modeId"]) for e in agent.events("set_mode")][:2] == [
        (agent.events("session_new")[0]["sessionId"], "code"), (spare["sessionId"], "code"),
    ]
    assert not [e for e in agent.events("set_mode") if e["sessionId"] == spare["sessionId"] and e["t"] >= sent]


async def test_a_chat_waiting_on_a_spare_whose_process_is_stuck_opens_its_session_on_a_new_one(scripted: Any, daemon: Any) -> None:
    """docs/sessions.md, "A stuck agent process": a new chat waits on the spare being opened;
    its session/new freezes the process, which is stopped as stuck; the chat then opens its
    session on a new process and is answered (not failed with the old process's end). The
    spare is the pre-warmed process's (the agent was used last by an earlier daemon): a spare
    offering no tools is asked for at once, so a process frozen by it would not answer a
    chat's prompt sent after it either."""
    agent = scripted({"initialize": CAPS["resume"], "pid_session_ids": True, "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:  # the agent is used last: the next daemon pre-warms it
            ok(await c.chat(agent.id, [user("first chat")]))
        agent.write({"initialize": CAPS["resume"], "freeze_at_new": 1, "pid_session_ids": True, "default_turn": [{"text": "ok"}]})
        async with daemon([agent], args=["--spare-session"], env={"LMBRIDGE_SESSION_TIMEOUT": "3", **ONE_SPARE}) as c:
            await eventually(lambda: agent.events("frozen"), what="the pre-warmed spare's session/new freezing the process")
            agent.write({"initialize": CAPS["resume"], "pid_session_ids": True, "default_turn": [{"text": "ok"}]})  # the next process does not freeze
            second = await c.chat(agent.id, [user("second chat")])
            ok(second)
            assert text_of(second) == "ok"
    frozen_pid, new_pid = agent.pids()[1:3]
    assert [e["pid"] for e in agent.events("frozen")] == [frozen_pid]
    assert [p["pid"] for p in agent.prompts()][1:] == [new_pid] and agent.prompts()[1]["text"] == "second chat"


async def test_a_chat_offering_other_tools_than_the_spare_gets_a_fresh_session(scripted: Any, daemon: Any) -> None:
    """A spare opened before any chat offered tools carries none: a chat offering some does
    not take it (the agent would never list them), it is closed (session/close) and the chat
    gets a fresh session with its own tools; the next spare carries those tools and a chat
    offering them takes it; one offering the same tool with another schema does not."""
    listed = [{"mcp_connect": {}}, {"mcp_list": True}, {"text": "listed"}]
    agent = scripted({"initialize": CAPS["resume"], "turns": [[{"text": "first"}], listed, listed, listed]})
    one = _tools({"type": "object", "properties": {"q": {"type": "string"}}})
    other = _tools({"type": "object", "properties": {"query": {"type": "string"}}})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], args=["--spare-session"], env=ONE_SPARE) as c:
            ok(await c.chat(agent.id, [user("first chat: no tools")]))
            await eventually(lambda: len(agent.events("session_new")) == 2, what="the first spare")
            empty = agent.events("session_new")[1]["sessionId"]
            ok(await c.chat(agent.id, [user("second chat: tools")], options=one))
            await eventually(lambda: len(agent.events("session_new")) == 4, what="the second spare")
            ok(await c.chat(agent.id, [user("third chat: the same tools")], options=one))
            ok(await c.chat(agent.id, [user("fourth chat: another schema")], options=other))
    opened = agent.events("session_new")
    prompts = [p["sessionId"] for p in agent.prompts()]
    second_sent = agent.frames("session/prompt")[1]["t"]
    assert empty in [e["sessionId"] for e in agent.events("session_close") if e["t"] < second_sent]  # not taken: closed
    assert prompts[1] != empty and not _spare_endpoint(next(e for e in opened if e["sessionId"] == prompts[1]))
    third = next(e for e in opened if e["sessionId"] == prompts[2])
    assert _spare_endpoint(third) and third["sessionId"] != empty  # the spare opened with the second chat's tools
    fourth = next(e for e in opened if e["sessionId"] == prompts[3])
    assert not _spare_endpoint(fourth)  # another schema: a fresh session
    assert [e["names"] for e in agent.events("mcp_tools")] == [["search_workspace"]] * 3
    assert len(set(prompts)) == 4


# ---------------------------------------------------------------- the agent's models and modes

CONFIG = [  # claude-agent-acp 0.23.1's, trimmed (docs/agents.md)
    {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "default",
     "options": [{"value": "default", "name": "Default"}, {"value": "plan", "name": "Plan Mode"}]},
    {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "default",
     "options": [{"value": "default", "name": "Default (recommended)"}, {"value": "opus[1m]", "name": "Opus (1M context)"},
                 {"value": "haiku", "name": "Haiku"}]},
]  # fmt: skip


def models_changed(c: Any) -> int:
    return len([f for f in c.notifications if f.get("method") == "lm/modelsChanged"])


async def test_the_agents_own_models_are_learnt_listed_and_set_before_the_prompt(scripted: Any, daemon: Any) -> None:
    agent = scripted({"config_options": CONFIG, "default_turn": [{"text": "ok"}]})
    spec = {**agent.spec, "name": "Scripted", "mode": "plan"}
    with anyio.fail_after(LIMIT):
        async with daemon([spec]) as c:
            listed = await c.request("lm/provideLanguageModelChatInformation", {})
            assert [m["id"] for m in listed["models"]] == [agent.id]  # nothing learnt yet
            first = await c.chat(agent.id, [user("hello")])
            ok(first)
            await eventually(lambda: models_changed(c), what="lm/modelsChanged")
            listed = await c.request("lm/provideLanguageModelChatInformation", {})
            models = {m["id"]: m["name"] for m in listed["models"]}
            assert models == {agent.id: "Scripted", f"{agent.id}/default": "Scripted · Default (recommended)",
                              f"{agent.id}/opus[1m]": "Scripted · Opus (1M context)", f"{agent.id}/haiku": "Scripted · Haiku"}  # fmt: skip
            # The same chat switched to Opus: same session, the option set before the prompt.
            history = [user("hello"), assistant(first.parts), user("now with opus")]
            ok(await c.chat(f"{agent.id}/opus[1m]", history))
            bad = await c.chat(f"{agent.id}/gpt-9", [user("x")])
            assert bad.error is not None and "unknown model" in bad.error.message
    sets = [(e["configId"], e["value"], e["sessionId"]) for e in agent.events("set_config_option")]
    assert sets == [("mode", "plan", "s1"), ("model", "opus[1m]", "s1")]  # the mode once, then the model
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s1"]
    model_set = agent.events("set_config_option")[1]
    assert model_set["t"] < agent.frames("session/prompt")[1]["t"]
    assert models_changed(c) == 1  # learnt once; the same options again change nothing


async def test_pre_warming_probes_the_models_of_an_agent_it_does_not_know(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """No chat yet and no cached options: a probe session, closed at once, fills the picker."""
    agent = scripted({"config_options": CONFIG, "initialize": CAPS["resume"]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            ok(await c.chat(agent.id, [user("hello")]))
        (tmp_path / "state" / "lmbridge" / "models.json").unlink()
        async with daemon([agent]) as c:
            await eventually(lambda: models_changed(c), what="lm/modelsChanged after the probe")
            listed = await c.request("lm/provideLanguageModelChatInformation", {})
            assert f"{agent.id}/haiku" in [m["id"] for m in listed["models"]]
    probe = agent.events("session_new")[-1]
    assert [f["params"]["sessionId"] for f in agent.frames("session/close")][-1] == probe["sessionId"]
    assert len(agent.prompts()) == 1  # the probe was never prompted


async def test_the_index_keeps_when_each_chat_was_last_used(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """A restored entry nobody used keeps its time; the chat used now gets a new one (the
    newest 200 are kept, so the oldest must be the least recently used)."""
    from lmbridge.daemon.session_index import SessionIndex, entry

    agent = scripted({"initialize": CAPS["resume"]})
    index = SessionIndex(tmp_path / "state" / "lmbridge")
    old = entry({"model": agent.id, "resume": "old-session", "items": [["u", []], ["a", "00" * 16, "", []]], "last": "done"}, agent.id, "/elsewhere", 1000.0)
    index.save([old])
    with anyio.fail_after(LIMIT):
        async with daemon([agent], env={"LMBRIDGE_PREWARM": "0"}) as c:
            ok(await c.chat(agent.id, [user("hello")]))
    saved = {e["resume"]: e["saved"] for e in index.load()}
    assert saved["old-session"] == 1000.0 and saved["s1"] > 1000.0


# ---------------------------------------------------------------- which chat a request belongs to


def rendered(words: str, *, current: bool) -> dict[str, Any]:
    """A user message as Copilot renders it (the current one in full scaffolding, an earlier
    one with less): every turn of every chat shares most of its lines with the others."""
    from tests.real_agent import copilot

    return copilot.user_message(words, current=current)


def copilot_request(turns: list[tuple[str, Any]], new: str, workspace: Path) -> list[dict[str, Any]]:
    """What Copilot sends: its system prompt, its global context, each earlier (words,
    answer) pair replayed, and the new words as the current turn."""
    from tests.real_agent import copilot

    messages = [copilot.system_message(), copilot.global_context(workspace)]
    for words, answer in turns:
        messages += [rendered(words, current=False), assistant(answer.parts)]
    return [*messages, rendered(new, current=True)]


async def test_two_chats_with_identical_answers_never_swap_sessions(scripted: Any, shared: Any, tmp_path: Path) -> None:
    """Chat A says "remember alpha", chat B "remember bravo", the agent answers "OK" to
    both; each chat's next turn goes to its own session, which remembers its own word."""
    agent = scripted({"turns_per_session": True, "turns": [[{"text": "OK"}], [{"recall": "You told me: "}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = {}
            for name in ("alpha", "bravo"):
                first[name] = await c.chat(agent.id, copilot_request([], f"remember {name}", tmp_path))
                ok(first[name])
                assert text_of(first[name]) == "OK"
            for name in ("alpha", "bravo"):  # A first: B is the more recent session
                second = await c.chat(agent.id, copilot_request([(f"remember {name}", first[name])], "what did I ask you to remember?", tmp_path))
                ok(second)
                assert text_of(second) == f"You told me: remember {name}", name
    sessions = {p["text"]: p["sessionId"] for p in agent.prompts()}
    assert sessions["remember alpha"] != sessions["remember bravo"]
    assert len(agent.events("session_new")) == 2  # no fresh session either: each chat kept its own


async def test_two_identical_chats_never_continue_each_others_session(scripted: Any, shared: Any, tmp_path: Path) -> None:
    """Same words, same answers: nothing byte-stable tells the chats apart, so their next
    requests go to fresh sessions told the conversation, never to the other's session."""
    agent = scripted({"turns_per_session": True, "turns": [[{"text": "OK"}]], "default_turn": [{"recall": "Told: "}]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            a = await c.chat(agent.id, copilot_request([], "hello", tmp_path))
            b = await c.chat(agent.id, copilot_request([], "hello", tmp_path))
            ok(a), ok(b)
            again = await c.chat(agent.id, copilot_request([("hello", a)], "and now?", tmp_path))
            ok(again)
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s2", "s3"]
    assert prompts[2]["blocks"][0]["text"].startswith(CONTEXT_OPEN) and prompts[2]["blocks"][-1]["text"] == "and now?"


# ---------------------------------------------------------------- a session is never lost by a classification


def asking_turn() -> list[dict[str, Any]]:
    return [{"text": "May I?"}, {"permission": {"toolCall": {"toolCallId": "x1", "title": "Run make", "kind": "execute"}}, "id": "p1"},
            {"branch": "p1", "allow": [{"text": "Ran it."}], "reject": [{"text": "Did not run it."}], "cancelled": []}]  # fmt: skip


async def late_answer(c: Any, agent: Any, first: Any, how: str) -> Any:
    from lmbridge.devtools.client import approve, skip, tool_calls

    (part,) = tool_calls(first)
    result = approve(part) if how == "allow" else skip(part)
    return await c.chat(agent.id, [user("run make"), assistant(first.parts), result])


def assert_woken(agent: Any, how: str) -> None:
    """The late answer went to the chat's own session, taken up again (session/resume of s1),
    with a prompt saying what became of the card and no token; nothing was approved."""
    (resumed,) = agent.frames("session/resume")
    assert resumed["params"]["sessionId"] == "s1" and len(agent.events("session_new")) == 1
    last = agent.prompts()[-1]
    assert last["sessionId"] == "s1" and len(last["blocks"]) == 1
    assert ("approved it" if how == "allow" else "declined it") in last["text"] and CONTEXT_OPEN not in last["text"]
    assert all(o["kind"] != "allow_once" for o in agent.outcomes())


@pytest.mark.parametrize("how", ["allow", "skip"])
async def test_a_late_answer_after_an_eviction_wakes_the_dormant_session(scripted: Any, daemon: Any, how: str) -> None:
    agent = scripted({"initialize": CAPS["resume"], "turns": [asking_turn()], "default_turn": [{"text": "Woken."}]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], args=["--idle-timeout", "0.3"]) as c:
            first = await c.chat(agent.id, [user("run make")])
            ok(first, "tool_calls")
            await eventually(lambda: agent.frames("session/close"), what="the session evicted with its card shown")
            second = await late_answer(c, agent, first, how)
            ok(second)
            assert text_of(second) == "Woken."
    assert_woken(agent, how)


async def test_a_late_answer_after_a_crash_wakes_the_dormant_session(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    agent = scripted({"initialize": CAPS["resume"], "turns": [asking_turn()], "default_turn": [{"text": "Woken."}]})
    log = tmp_path / "daemon.stderr"
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user("run make")])
            ok(first, "tool_calls")
            (pid,) = agent.pids()
            os.kill(pid, 9)
            # The user answers the card after the daemon has seen the crash (a moment later).
            await eventually(lambda: "session asleep" in log.read_text(), what="the session asleep after the crash")
            agent.write({"initialize": CAPS["resume"], "default_turn": [{"text": "Woken."}]})  # for the new process
            second = await late_answer(c, agent, first, "allow")
            ok(second)
            assert text_of(second) == "Woken."
    assert len(agent.pids()) == 2
    assert_woken(agent, "allow")


async def test_a_late_answer_after_a_daemon_restart_wakes_the_dormant_session(scripted: Any, daemon: Any) -> None:
    agent = scripted({"initialize": CAPS["resume"], "turns": [asking_turn()], "default_turn": [{"text": "Woken."}]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user("run make")])
            ok(first, "tool_calls")
        agent.write({"initialize": CAPS["resume"], "default_turn": [{"text": "Woken."}]})  # for the new process
        async with daemon([agent]) as c:
            second = await late_answer(c, agent, first, "skip")
            ok(second)
            assert text_of(second) == "Woken."
    assert_woken(agent, "skip")
