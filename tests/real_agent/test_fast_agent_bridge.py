"""The real agent through the real daemon: fast-agent (fast-agent-mcp 0.10.48,
``fast-agent-acp``) driven by ``lmbridge serve`` over the wire protocol exactly as the
VS Code shim drives it, every request shaped as Copilot's Agent mode sends it
(``copilot.py``), against the fake OpenAI Chat Completions API.

fast-agent asks permission for MCP tools: its ``shell`` server's ``run_command``
(``tests/fakes/shell_mcp.py``) is the action the user approves, skips or stops; the
VS Code tools reach it through lmbridge's ``vscode`` MCP server.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.core.permissions import ACTION_TOOL as AGENT_ACTION_TOOL  # noqa: E402
from lmbridge.devtools.client import DaemonClient, SentRequest, approve, skip, text_of, tool_calls, tool_result  # noqa: E402
from tests.fakes.fake_openai_chat import FakeOpenAIChat, message_text  # noqa: E402
from tests.real_agent import copilot  # noqa: E402
from tests.real_agent.fast_agent import fast_agent_bridge  # noqa: E402

# Not installed: the launcher fails the test saying so (cache.missing: `make real-agent-deps`).
pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
MODEL = "fast-agent"
TIMEOUT = 300  # seconds per test body: ≥10x idle (the agent's start and a few turns, 5-20 s idle)
SCAFFOLDING = ("<userRequest>", "<environment_info>", "<workspace_info>", "<reminderInstructions>", "<context>")


def bridge(tmp_path: Path, fake: FakeOpenAIChat) -> Any:
    return fast_agent_bridge(tmp_path, fake.url)


def run_command(command: str, call_id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"name": "shell__run_command", "arguments": {"command": command}}
    if call_id:
        call["id"] = call_id
    return {"tool_call": call}


async def send(client: DaemonClient, messages: Sequence[dict], extra_tools: Sequence[dict] = (), on_part: Callable[[dict], None] | None = None) -> SentRequest:
    return await client.chat(MODEL, messages, on_part=on_part, timeout=TIMEOUT, options=copilot.options(extra_tools))


async def ask_to_run(client: DaemonClient, conv: copilot.Conversation, marker: Path, text: str = "Please create the marker file") -> dict:
    """The first request: the agent asks to run a command; returns the permission part."""
    call = await send(client, conv.ask(text))
    assert call.error is None, call.error
    assert call.result == {"stopReason": "tool_calls"}, call.result
    (perm,) = tool_calls(call)
    assert perm["name"] == AGENT_ACTION_TOOL
    card = perm["input"]["message"]
    assert perm["input"]["title"] == "shell/run_command" and "**run a command**" in card
    assert "```sh\n" in card and str(marker) in card and "The agent offered: " in card
    assert not marker.exists()  # nothing runs before the user answers
    conv.answered(call)
    return perm


def user_texts(fake: FakeOpenAIChat, index: int) -> list[str]:
    return fake.user_texts(index)


async def test_plain_chat_the_model_gets_the_users_words(tmp_path: Path) -> None:
    with FakeOpenAIChat([[{"text": "Two plus two is four."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                call = await send(client, conv.ask("What is two plus two?"))
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            assert "Two plus two is four." in text_of(call)
            (request,) = fake.completions()
            assert request["stream"] is True
            (said,) = user_texts(fake, 0)
            assert "What is two plus two?" in said
            assert not any(tag in said for tag in SCAFFOLDING), said
            # Copilot's system prompt is not forwarded: the system message is fast-agent's own.
            system = [message_text(m) for m in request["messages"] if m.get("role") == "system"]
            assert not any("GitHub Copilot" in s for s in system)
            # fast-agent keeps its sessions in --home: nothing of it in the workspace.
            assert list((tmp_path / "workspace").iterdir()) == []


async def test_approve_runs_the_command_and_the_model_gets_its_output(tmp_path: Path) -> None:
    marker = tmp_path / "workspace" / "ran.txt"
    script = [[{"text": "I'll create it."}, run_command(f"echo hi > {marker}; echo out-ok")], [{"text": "Created the file."}]]
    with FakeOpenAIChat(script) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                perm = await ask_to_run(client, conv, marker)
                call = await send(client, conv.result(approve(perm)))
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            assert marker.read_text() == "hi\n"
            assert "Created the file." in text_of(call)
            (result,) = fake.tool_messages()
            assert result["text"] == "out-ok\n"


async def test_skip_does_not_run_and_the_turn_finishes(tmp_path: Path) -> None:
    marker = tmp_path / "workspace" / "ran.txt"
    script = [[run_command(f"touch {marker}")], [{"text": "Understood, I did not run it."}]]
    with FakeOpenAIChat(script) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                perm = await ask_to_run(client, conv, marker)
                call = await send(client, conv.result(skip(perm)))
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            assert not marker.exists()
            assert "I did not run it." in text_of(call)
            (result,) = fake.tool_messages()
            assert "declined permission" in result["text"]


async def test_stop_at_a_permission_then_the_next_message(tmp_path: Path) -> None:
    marker = tmp_path / "workspace" / "ran.txt"
    with FakeOpenAIChat([[run_command(f"touch {marker}")]], done_text="Fine, moving on.") as fake:
        async with bridge(tmp_path, fake) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                await ask_to_run(client, conv, marker)
                conv.stopped()  # Stop at the confirmation: VS Code drops the round
                started = time.monotonic()
                call = await send(client, conv.ask("Never mind, just say hi."))
                elapsed = time.monotonic() - started
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            assert "Fine, moving on." in text_of(call)
            assert elapsed < 60, f"took {elapsed:.1f} s"  # ~2-5 s idle
            assert "cancelled turn did not end" not in (tmp_path / "daemon.stderr").read_text(errors="replace")  # promptly: the stopped turn ended, no drain deadline (10 s) waited
            assert not marker.exists()
            # The model's last request holds the new message, and never a successful run.
            assert "Never mind, just say hi." in user_texts(fake, -1)[-1]
            stopped = ("Permission request cancelled", "**The user interrupted this tool call**")
            log = (tmp_path / "daemon.stderr").read_text(errors="replace")
            # lmbridge sends session/cancel before the permission's cancelled answer: fast-agent
            # pairs the stopped call with "**The user interrupted this tool call**" (or
            # "Permission request cancelled") and the same ACP session answers. (When the answer
            # went first, fast-agent sometimes went back to the model with the call's result, the
            # cancel stopped that model call, and its history kept an empty assistant message
            # the API refused: the chat fell back to a fresh session.)
            assert not fake.refused(), [r.body["messages"] for r in fake.refused()]
            (result,) = fake.tool_messages()
            assert result["text"] in stopped, result
            assert log.count("acp session ") == 1 and "how=new" in log, log


async def test_a_second_turn_keeps_the_context(tmp_path: Path) -> None:
    script = [[{"text": "Nice to meet you, Ada."}], [{"text": "Your name is Ada."}]]
    with FakeOpenAIChat(script) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                first = await send(client, conv.ask("My name is Ada."))
                assert first.result == {"stopReason": "end_turn"}, (first.error, first.result)
                conv.answered(first)
                second = await send(client, conv.ask("What is my name?"))
            assert second.error is None and second.result == {"stopReason": "end_turn"}
            assert "Your name is Ada." in text_of(second)
            messages = fake.completions()[1]["messages"]
            turns = [(m["role"], message_text(m)) for m in messages if m["role"] in ("user", "assistant")]
            # The agent's own memory of turn 1, and the new turn alone (no context re-sent).
            assert turns == [("user", "My name is Ada."), ("assistant", "Nice to meet you, Ada."), ("user", "What is my name?")], turns


async def test_two_actions_in_one_turn(tmp_path: Path) -> None:
    first, second = tmp_path / "workspace" / "one.txt", tmp_path / "workspace" / "two.txt"
    script = [
        [{"text": "Two files."}, run_command(f"touch {first}; echo made-one"), run_command(f"touch {second}; echo made-two")],
        [{"text": "Both done."}],
    ]
    with FakeOpenAIChat(script) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                call = await send(client, conv.ask("Create both files"))
                assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, call.result)
                perms = tool_calls(call)
                # fast-agent runs a response's tool calls in parallel: both asked at once, one response.
                assert len(perms) == 2 and {p["name"] for p in perms} == {AGENT_ACTION_TOOL}
                assert len({p["callId"] for p in perms}) == 2
                assert not first.exists() and not second.exists()
                conv.answered(call)
                for perm in perms:
                    conv.result(approve(perm))
                done = await send(client, conv.messages)
            assert done.error is None and done.result == {"stopReason": "end_turn"}, (done.error, done.result)
            assert first.exists() and second.exists()
            assert "Both done." in text_of(done)
            assert sorted(m["text"] for m in fake.tool_messages()) == ["made-one\n", "made-two\n"]


async def test_cancel_mid_stream_then_the_next_message(tmp_path: Path) -> None:
    """A Stop while the answer streams, then a new message: it is answered, and the chat's
    earlier turns are still known.

    fast-agent 0.10.48 keeps the stopped answer as an empty assistant message, which model
    APIs refuse (HTTP 400: "all messages must have non-empty content …"; the fake refuses it
    too). The first prompt after the Stop fails in that session, and would again if the
    session were taken up again: its profile (``cancel_breaks_history``) sends the chat on in
    a fresh session told the conversation. The user reads the answer, not the 400."""
    script = [
        [{"text": "Noted: kiwi."}],
        [{"text": "Streaming the first part. "}, {"sleep": 8}, {"text": "SECRET-TAIL never shown."}],
        [{"text": "A fresh answer."}],
    ]
    with FakeOpenAIChat(script) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                first = await send(client, conv.ask("Remember the word kiwi."))
                assert first.result == {"stopReason": "end_turn"}, (first.error, first.result)
                conv.answered(first)
                first_text = anyio.Event()
                streamed: list[str] = []

                def on_part(part: dict) -> None:
                    streamed.append(part.get("value", "") if part["type"] == "text" else "")
                    if "the first part." in "".join(streamed):
                        first_text.set()

                call = await client.start(
                    "lm/provideLanguageModelChatResponse",
                    {"modelId": MODEL, "messages": conv.ask("Tell me a long story"), "options": copilot.options()},
                    on_part=on_part,
                )
                await first_text.wait()
                await client.cancel(call)  # Stop while the text streams
                await call.done.wait()
                assert call.result == {"stopReason": "cancelled"}, (call.error, call.result)
                assert "Streaming the first part." in text_of(call)
                conv.stopped()
                started = time.monotonic()
                nxt = await send(client, conv.ask("Just say something short: which word?"))
                elapsed = time.monotonic() - started
            assert nxt.error is None and nxt.result == {"stopReason": "end_turn"}, (nxt.error, nxt.result)
            assert text_of(nxt).strip() == "A fresh answer.", text_of(nxt)
            assert "SECRET" not in text_of(nxt) and "first part" not in text_of(nxt) and "400" not in text_of(nxt)
            assert elapsed < 60, f"took {elapsed:.1f} s"  # ~2-5 s idle
            assert "cancelled turn did not end" not in (tmp_path / "daemon.stderr").read_text(errors="replace")  # promptly: the stopped turn ended, no drain deadline (10 s) waited
            assert not fake.snapshot()[1].finished  # the stopped stream was cut off by the agent
            # The quirk, as the API met it: the first prompt after the Stop carried fast-agent's
            # empty assistant message and was refused, once.
            (refused,) = fake.refused()
            assert {"role": "assistant", "content": ""} in refused.body["messages"], refused.body["messages"]
            # The answer came from a fresh session told the conversation: the earlier turn, the
            # stopped request marked as such, no empty message, nothing of the stopped answer.
            last = fake.completions()[-1]["messages"]
            said = "\n".join(message_text(m) for m in last if m.get("role") == "user")
            assert "<conversation-so-far>" in said and "Remember the word kiwi." in said and "Noted: kiwi." in said, said
            assert "Tell me a long story" in said and "[stopped by the user" in said, said
            assert "Just say something short: which word?" in said
            assert not [m for m in last if m.get("role") == "assistant" and not message_text(m).strip() and not m.get("tool_calls")], last
            assert "first part" not in str(last)
    log = (tmp_path / "daemon.stderr").read_text(errors="replace")
    taken = [line for line in log.splitlines() if "acp session" in line and "how=" in line]
    assert len(taken) == 2 and all("how=new" in line for line in taken), "\n".join(taken)  # never resumed into the same failure


SEARCH_TOOL = {
    "name": "search_workspace",
    "description": "Search the workspace for text",
    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


def vscode_tool(tools: list[dict], name: str) -> str:
    """The name fast-agent gives the model for VS Code tool ``name``: ``<server>__<name>``,
    the server being ``vscode-<session>`` (one name per session: fast-agent keeps one MCP
    registry for all its sessions)."""
    (full,) = [t["function"]["name"] for t in tools if t["function"]["name"].endswith(f"__{name}") and t["function"]["name"].startswith("vscode")]
    return full


def call_vscode_tool(name: str, arguments: dict, text: str = "Let me search.") -> Callable[[dict], list[dict]]:
    return lambda body: [{"text": text}, {"tool_call": {"name": vscode_tool(body["tools"], name), "arguments": arguments}}]


async def test_a_vscode_tool_through_the_mcp_server(tmp_path: Path) -> None:
    script = [call_vscode_tool("search_workspace", {"q": "TODO"}), [{"text": "Found one TODO."}]]
    with FakeOpenAIChat(script) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                call = await send(client, conv.ask("Find the TODOs"), extra_tools=[SEARCH_TOOL])
                assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, call.result)
                # VS Code confirms and runs its own tool: no agent-action card for it.
                (part,) = tool_calls(call)
                assert (part["name"], part["input"]) == ("search_workspace", {"q": "TODO"})
                conv.answered(call)
                done = await send(client, conv.result(tool_result(part["callId"], "a.py:3: # TODO fix")), extra_tools=[SEARCH_TOOL])
            assert done.error is None and done.result == {"stopReason": "end_turn"}, (done.error, done.result)
            assert "Found one TODO." in text_of(done)
            tools = {t["function"]["name"] for t in fake.completions()[0]["tools"]}
            assert "vscode-s1__search_workspace" in tools and "shell__run_command" in tools
            (result,) = fake.tool_messages()
            assert "a.py:3: # TODO fix" in result["text"]


async def test_two_actions_with_the_placeholder_id_pending(tmp_path: Path) -> None:
    """When the model's answer does not stream (fast-agent falls back to a non-streamed
    request after an empty stream), fast-agent announces no tool_call first and asks both
    permissions with the placeholder toolCallId "pending" (docs/agents.md): each is still its
    own card, and each answer reaches its own call."""
    allowed, skipped = tmp_path / "workspace" / "allowed.txt", tmp_path / "workspace" / "skipped.txt"
    script = [
        [{"empty_stream": True}],
        [run_command(f"touch {allowed}; echo made-allowed"), run_command(f"touch {skipped}; echo made-skipped")],
        [{"text": "One of two."}],
    ]
    with FakeOpenAIChat(script) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                call = await send(client, conv.ask("Create both files"))
                assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, call.result)
                perms = tool_calls(call)
                assert len(perms) == 2 and len({p["callId"] for p in perms}) == 2
                by_file = {("allowed" if str(allowed) in p["input"]["message"] else "skipped"): p for p in perms}
                assert set(by_file) == {"allowed", "skipped"}
                conv.answered(call)
                conv.result(approve(by_file["allowed"]))
                conv.result(skip(by_file["skipped"]))
                done = await send(client, conv.messages)
            assert done.error is None and done.result == {"stopReason": "end_turn"}, (done.error, done.result)
            assert allowed.exists() and not skipped.exists()
            assert "One of two." in text_of(done)
            # The placeholder is no tool call of its own: no note that it "ended without a
            # result"; the allowed call is shown under its real id, started and completed.
            assert "without a result" not in text_of(call) + text_of(done), text_of(done)
            assert "✓ **shell/run_command** (execute) completed" in text_of(done)
            assert [r.body.get("stream") for r in fake.snapshot() if r.reply is not None] == [True, False, True]
            texts = sorted(m["text"] for m in fake.tool_messages())
            assert texts == ["The user has declined permission to use this tool: shell__run_command", "made-allowed\n"], texts


# ---------------------------------------------------------------- sessions kept (docs/sessions.md)


def remembers_first_turn(body: dict[str, Any], command: str) -> bool:
    """The model request holds the first turn's run_command call and its output."""
    ids = [c["id"] for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or [] if command in c["function"]["arguments"]]
    outputs = [message_text(m) for m in body["messages"] if m["role"] == "tool" and m.get("tool_call_id") in ids]
    return bool(ids) and outputs == ["out-ok\n"]


async def approved_first_turn(client: DaemonClient, conv: copilot.Conversation, marker: Path) -> None:
    perm = await ask_to_run(client, conv, marker)
    done = await send(client, conv.result(approve(perm)))
    assert done.error is None and done.result == {"stopReason": "end_turn"}, (done.error, done.result)
    assert marker.exists()
    conv.answered(done)


def first_turn_script(marker: Path) -> list:
    return [[{"text": "Creating it."}, run_command(f"touch {marker}; echo out-ok")], [{"text": "Created."}]]


async def test_after_a_daemon_restart_the_agent_still_holds_the_first_turn(tmp_path: Path) -> None:
    marker = tmp_path / "workspace" / "one.txt"
    with FakeOpenAIChat(first_turn_script(marker), done_text="Still here.") as fake:
        conv = copilot.Conversation(tmp_path / "workspace")
        with anyio.fail_after(TIMEOUT):
            async with bridge(tmp_path, fake) as client:
                await approved_first_turn(client, conv, marker)
            async with bridge(tmp_path, fake) as client:  # VS Code reloaded: a new daemon
                call = await send(client, conv.ask("And now?"))
        assert call.error is None and "Still here." in text_of(call), (call.error, text_of(call))
        last = fake.completions()[-1]
        assert remembers_first_turn(last, f"touch {marker}")
        # Continued, not told: the new user message alone, no transcript of the conversation.
        assert last["messages"][-1] == {"role": "user", "content": "And now?"}, last["messages"][-1]
    assert (tmp_path / "daemon.stderr").read_text(errors="replace").count("how=session/resume") == 1


async def test_after_an_eviction_the_agent_still_holds_the_first_turn(tmp_path: Path) -> None:
    marker = tmp_path / "workspace" / "one.txt"
    with FakeOpenAIChat(first_turn_script(marker), done_text="Back again.") as fake:
        conv = copilot.Conversation(tmp_path / "workspace")
        async with fast_agent_bridge(tmp_path, fake.url, "--idle-timeout", "2") as client:
            with anyio.fail_after(TIMEOUT):
                await approved_first_turn(client, conv, marker)
                while "session asleep" not in (tmp_path / "daemon.stderr").read_text(errors="replace"):
                    await anyio.sleep(0.2)
                call = await send(client, conv.ask("Still there?"))
            assert call.error is None and "Back again." in text_of(call), (call.error, text_of(call))
            assert remembers_first_turn(fake.completions()[-1], f"touch {marker}")
    assert "how=session/resume" in (tmp_path / "daemon.stderr").read_text(errors="replace")


async def test_two_chats_share_one_process_each_with_the_vscode_tools(tmp_path: Path) -> None:
    """Two chats of one VS Code window: one fast-agent process, an ACP session each, each
    offered the VS Code tools by its own MCP endpoint."""
    with FakeOpenAIChat([[{"text": "Apples are red."}], [{"text": "Bananas are yellow."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                one = await send(client, copilot.Conversation(tmp_path / "workspace").ask("Apples?"), extra_tools=[SEARCH_TOOL])
                two = await send(client, copilot.Conversation(tmp_path / "workspace").ask("Bananas?"), extra_tools=[SEARCH_TOOL])
            assert one.error is None and "Apples are red." in text_of(one), (one.error, text_of(one))
            assert two.error is None and "Bananas are yellow." in text_of(two), (two.error, text_of(two))
            # Each session's VS Code tools server has its own name (a second "vscode" with
            # another URL and secret is refused by fast-agent: one registry per process).
            names = [vscode_tool(body["tools"], "search_workspace") for body in fake.completions()]
            assert names == ["vscode-s1__search_workspace", "vscode-s2__search_workspace"], names
    log = (tmp_path / "daemon.stderr").read_text(errors="replace")
    assert log.count("agent started") == 1 and log.count("how=new") == 2


async def test_a_vscode_tool_after_an_eviction(tmp_path: Path) -> None:
    """The chat's tools endpoint closes at an eviction and opens again, same URL and
    secret, when the chat wakes: fast-agent's resumed session calls it again."""
    script = [[{"text": "Hello."}], call_vscode_tool("search_workspace", {"q": "TODO"}), [{"text": "Found it after waking."}]]
    with FakeOpenAIChat(script) as fake:
        async with fast_agent_bridge(tmp_path, fake.url, "--idle-timeout", "2") as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                first = await send(client, conv.ask("Hi"), extra_tools=[SEARCH_TOOL])
                assert first.result == {"stopReason": "end_turn"}, (first.error, first.result)
                conv.answered(first)
                while "session asleep" not in (tmp_path / "daemon.stderr").read_text(errors="replace"):
                    await anyio.sleep(0.2)
                call = await send(client, conv.ask("Find the TODOs"), extra_tools=[SEARCH_TOOL])
                assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, call.result)
                (part,) = tool_calls(call)
                assert part["name"] == "search_workspace"
                conv.answered(call)
                done = await send(client, conv.result(tool_result(part["callId"], "b.py:9: # TODO later")), extra_tools=[SEARCH_TOOL])
            assert done.error is None and "Found it after waking." in text_of(done), (done.error, text_of(done))
            (result,) = fake.tool_messages()
            assert "b.py:9: # TODO later" in result["text"]
    assert "how=session/resume" in (tmp_path / "daemon.stderr").read_text(errors="replace")


async def test_without_an_api_key_the_user_reads_why(tmp_path: Path) -> None:
    """``openai.<model>`` with no OPENAI_API_KEY: session/new works, the prompt fails
    -32000 "Authentication required" with the reason in data.message: one actionable error
    (auth.py) naming fast-agent and its own way to sign in."""
    with FakeOpenAIChat() as fake:
        async with fast_agent_bridge(tmp_path, fake.url, model="openai.gpt-4.1-mini") as client:
            with anyio.fail_after(TIMEOUT):
                call = await send(client, copilot.Conversation(tmp_path / "workspace").ask("Hello?"))
        assert call.error is not None and call.result is None
        assert call.error.message == (
            "fast-agent needs you to sign in (OpenAI API key not configured): Configure fast-agent (Set provider keys in "
            "fast-agent.secrets.yaml or env vars. See docs: [Configuration Reference](https://fast-agent.ai/ref/config_file/)). "
            "Then send your message again."
        ), call.error.message
        assert call.error.data["reason"] == "auth_required" and call.error.data["login"] is None
        assert fake.completions() == []


async def test_its_shell_asks_first_and_runs_through_lmbridges_terminal(tmp_path: Path) -> None:
    """With ``--shell``, fast-agent runs commands through the client's terminals when the client
    offers them (lmbridge does: ``terminal/*``, docs/agents.md): its shell tool is then
    ``execute``, not ``bash``, and it asks first (session/request_permission: a card). Nothing
    runs before the user answers; approved, the command runs in the workspace through
    lmbridge's terminal. A preset must not pass --shell; --no-shell keeps skills from turning it on."""
    marker = tmp_path / "workspace" / "shell-ran.txt"
    script = [[{"tool_call": {"name": "execute", "arguments": {"command": f"touch {marker}; echo did"}}}], [{"text": "Ran it."}]]
    with FakeOpenAIChat(script) as fake:
        async with fast_agent_bridge(tmp_path, fake.url, shell=True) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                call = await send(client, conv.ask("Create it"))
                assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, call.result)
                (perm,) = tool_calls(call)
                assert perm["name"] == AGENT_ACTION_TOOL
                assert not marker.exists()  # nothing runs before the user answers
                conv.answered(call)
                call = await send(client, conv.result(approve(perm)))
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            assert marker.exists()
            assert "Ran it." in text_of(call)
            assert "execute" in {t["function"]["name"] for t in fake.completions()[0]["tools"]}


async def test_its_shell_runs_a_command_of_plain_words_as_its_words_once_approved(tmp_path: Path) -> None:
    """fast-agent runs a command without shell syntax as its words (``touch <path>`` becomes
    ``terminal/create {command: "touch", args: [<path>]}``), a line with shell syntax as
    ``/bin/sh -lc LINE`` (the test above): both match the card the user approved, so both
    run (lmbridge runs only what an approved card showed: docs/agents.md, "What protects
    what"). Each approval runs its command once."""
    first, second = tmp_path / "workspace" / "first.txt", tmp_path / "workspace" / "second.txt"
    script = [
        [{"tool_call": {"name": "execute", "arguments": {"command": f"touch {first}"}}}],
        [{"tool_call": {"name": "execute", "arguments": {"command": f"touch {second}"}}}],
        [{"text": "Both made."}],
    ]
    with FakeOpenAIChat(script) as fake:
        async with fast_agent_bridge(tmp_path, fake.url, shell=True) as client:
            conv = copilot.Conversation(tmp_path / "workspace")
            with anyio.fail_after(TIMEOUT):
                call = await send(client, conv.ask("Make both"))
                for marker in (first, second):
                    assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, call.result)
                    (perm,) = tool_calls(call)
                    assert f"touch {marker}" in perm["input"]["message"] and not marker.exists()
                    conv.answered(call)
                    call = await send(client, conv.result(approve(perm)))
                    assert marker.exists()
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            assert "Both made." in text_of(call)
    log = (tmp_path / "daemon.stderr").read_text(errors="replace")
    assert "refused" not in log, log


# A 1x1 PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@pytest.mark.parametrize(("model", "vision"), [("generic.gpt-4o", True), ("generic.fake-model", False)])
async def test_an_image_reaches_the_model_if_fast_agent_knows_it_sees(tmp_path: Path, model: str, vision: bool) -> None:
    """fast-agent offers promptCapabilities.image whatever the model: an image the user
    attached goes as an ACP image block; it reaches the model as an image_url part when
    fast-agent's model database says the model takes images (gpt-4o), and is dropped
    silently otherwise (a model it does not know)."""
    with FakeOpenAIChat([[{"text": "A single pixel."}]]) as fake:
        async with fast_agent_bridge(tmp_path, fake.url, model=model) as client:
            messages = copilot.Conversation(tmp_path / "workspace").ask("What is in this image?")
            messages[-1]["content"].insert(1, {"type": "data", "mimeType": "image/png", "data": PNG})
            with anyio.fail_after(TIMEOUT):
                call = await send(client, messages)
            assert call.error is None and "A single pixel." in text_of(call), (call.error, text_of(call))
            (said,) = [m for m in fake.completions()[0]["messages"] if m["role"] == "user"]
            parts = said["content"] if isinstance(said["content"], list) else [{"type": "text", "text": said["content"]}]
            assert any(p.get("type") == "text" and "What is in this image?" in p["text"] for p in parts), parts
            images = [p["image_url"]["url"] for p in parts if p.get("type") == "image_url"]
            assert images == ([f"data:image/png;base64,{PNG}"] if vision else []), parts


async def test_no_spare_session_for_fast_agent_so_each_chat_keeps_its_tools(tmp_path: Path) -> None:
    """Spare sessions on (the default): fast-agent 0.10.48 is kept none (its profile's
    ``keeps_spare`` off: with a spare open beside a chat's session, that session could not be
    taken up again after an eviction or a restart, seen in this file's eviction and restart
    tests). Each chat opens its own session, with its own tools server (vscode-<session>),
    and the chat's VS Code tools reach the model."""
    with FakeOpenAIChat([call_vscode_tool("search_workspace", {"q": "one"}), [{"text": "First done."}], [{"text": "Second chat."}]]) as fake:
        async with fast_agent_bridge(tmp_path, fake.url) as client:
            with anyio.fail_after(TIMEOUT):
                conv = copilot.Conversation(tmp_path / "workspace")
                call = await send(client, conv.ask("Search"), extra_tools=[SEARCH_TOOL])
                assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, call.result)
                (part,) = tool_calls(call)
                conv.answered(call)
                done = await send(client, conv.result(tool_result(part["callId"], "one.py:1")), extra_tools=[SEARCH_TOOL])
                assert "First done." in text_of(done), (done.error, text_of(done))
                second = await send(client, copilot.Conversation(tmp_path / "workspace").ask("Another chat"), extra_tools=[SEARCH_TOOL])
            assert second.error is None and "Second chat." in text_of(second), (second.error, text_of(second))
            names = {vscode_tool(body["tools"], "search_workspace") for body in fake.completions()}
            assert len(names) == 2 and not [n for n in names if n.startswith("vscode-spare")], names
            assert "one.py:1" in fake.tool_messages()[0]["text"]
    log = (tmp_path / "daemon.stderr").read_text(errors="replace")
    assert "how=spare" not in log and "spare session ready" not in log and "refused" not in log, log
