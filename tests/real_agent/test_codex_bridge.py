"""The real agent through the real daemon: codex-acp 2.6.0 (codex 0.166.0), driven
by ``lmbridge serve`` over the wire protocol exactly as the VS Code shim drives it, with
Copilot-shaped requests (tests/real_agent/copilot.py: system prompt, global context,
scaffolded turns, cache_control parts, Agent mode's tools), against the fake OpenAI
Responses API (tests/fakes/fake_openai_responses.py).

Each test asserts on real effects: a file the command made (or did not), and what the
fake model received (the user's words, ``function_call_output`` items, earlier turns).

codex-acp 2.6.0 starts each session in mode ``agent`` ("Auto review"); lmbridge sets a new
session to ``read-only`` (docs/agents.md, "Modes: who approves"). There codex asks
``session/request_permission`` before an edit, and before a command only when the model asks
to leave the sandbox (``exec_command`` with ``sandbox_permissions: "require_escalated"`` and
a ``justification``, as a real model does for a command that must write or reach the
network): so the fake model's commands that should show a card ask so
(:func:`escalated_command`). A plain command runs unasked in the read-only sandbox, where it
can read but not write (the documented gap, "The gap with codex": pinned here, not a pass).
Options ``allow_once``/``accept_execpolicy_amendment``/``cancel`` (allow_once, allow_always,
reject_once); a reject ends the whole turn ``cancelled`` (the daemon ends the response
``end_turn``, with a line); a ``session/cancel`` ends the turn without waiting for the
permission's answer; the daemon answers codex's approvals for its own VS Code tools;
``mcpCapabilities.http``; ``loadSession`` and sessionCapabilities list/resume/close (a
restart, an eviction, a crash all resume); images. The tests "on the wire" pin 2.6.0 without
the daemon.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.core.permissions import ACTION_TOOL as AGENT_ACTION_TOOL  # noqa: E402
from lmbridge.devtools.client import DaemonClient, SentRequest, approve, skip, text_of, tool_calls, tool_result  # noqa: E402
from lmbridge.tools.mcp_bridge import STOPPED_TEXT  # noqa: E402
from tests.conftest import children  # noqa: E402
from tests.fakes.fake_openai_responses import FakeResponses, escalated_command, exec_command, input_texts, namespaces  # noqa: E402
from tests.real_agent.acp_probe import AcpProbe, AgentError, initialize_params  # noqa: E402
from tests.real_agent.codex import codex_agent_launch, codex_bridge, is_installed  # noqa: E402
from tests.real_agent.copilot import Conversation, options  # noqa: E402

pytestmark = [
    pytest.mark.real_agent,
    pytest.mark.anyio,
    pytest.mark.skipif(not is_installed(), reason="codex-acp (linux-x64) is not installed: make real-agent-deps"),
]
TIMEOUT = 300  # seconds per test body: ≥10x idle (the agent's start and a few turns, 5-20 s idle)
MODEL = "codex"
# Copilot's scaffolding around the user's words: none of it may reach the model.
SCAFFOLDING = ("<userRequest>", "<reminderInstructions>", "<environment_info>", "<workspace_info>", "<context>")


def bridge(tmp_path: Path, fake: FakeResponses, *args: str, logged_in: bool = True) -> Any:
    return codex_bridge(tmp_path, fake.url, *args, logged_in=logged_in)


def workspace(tmp_path: Path) -> Path:
    return tmp_path / "work"


def log_of(tmp_path: Path) -> str:
    return (tmp_path / "daemon.stderr").read_text(errors="replace")


def user_words(body: dict[str, Any]) -> list[str]:
    """The user messages the model got, without codex's own (AGENTS.md, environment)."""
    return [t for t in input_texts(body, "user") if not t.lstrip().startswith(("<environment_context>", "# AGENTS.md", "<user_instructions>"))]


async def chat(client: DaemonClient, messages: list[dict[str, Any]], extra_tools: list[dict[str, Any]] | None = None, **kw: Any) -> SentRequest:
    return await client.chat(MODEL, messages, timeout=TIMEOUT, options=options(extra_tools or []), **kw)


async def ask_for_command(client: DaemonClient, conv: Conversation, text: str, marker: Path) -> dict[str, Any]:
    """Ask for something that makes codex want to run a command; returns the permission's
    tool call part (the response ended ``tool_calls``, nothing ran yet)."""
    call = await chat(client, conv.ask(text))
    assert call.error is None, call.error
    assert call.result == {"stopReason": "tool_calls"}, (call.result, text_of(call))
    (perm,) = tool_calls(call)
    assert perm["name"] == AGENT_ACTION_TOOL
    card = perm["input"]["message"]
    assert "**run a command**" in card and "```sh\n" in card and f"touch {marker}\n```" in card
    assert "/bin/bash" not in card  # codex's ["/bin/bash", "-lc", script] is shown as the script
    assert "The agent offered: " in card
    assert not marker.exists()  # nothing runs before the user answers
    conv.answered(call)
    return perm


# ---------------------------------------------------------------- chat


async def test_plain_chat_the_model_gets_the_users_words(tmp_path: Path) -> None:
    with FakeResponses([[{"text": "Four, as always."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                call = await chat(client, conv.ask("What is 2 + 2?"))
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
            assert text_of(call).endswith("Four, as always.")  # maybe after "_Starting Codex…_"
            (request,) = fake.responses_requests()
            assert user_words(request) == ["What is 2 + 2?"]
            sent = json.dumps(request["input"])
            assert not any(marker in sent for marker in SCAFFOLDING), "Copilot's scaffolding reached the model"
            assert "You are an expert AI programming assistant" not in sent  # Copilot's system prompt


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="  # a 1×1 PNG


async def test_an_image_reaches_the_model_and_its_reasoning_shows_as_thinking(tmp_path: Path) -> None:
    """codex-acp's promptCapabilities.image is true: an image part of the user's turn goes
    as an ACP image block, and the model gets it as ``input_image``. The model's reasoning
    summary comes back as thinking parts."""
    with FakeResponses([[{"reasoning": "Looking at the picture."}, {"text": "A single pixel."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            messages = conv.ask("What is in this image?")
            messages[-1]["content"].insert(1, {"type": "data", "mimeType": "image/png", "data": PIXEL})
            with anyio.fail_after(TIMEOUT):
                call = await chat(client, messages)
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
            assert text_of(call).endswith("A single pixel.")
            assert "Looking at the picture." in "".join(p["value"] for p in call.parts if p["type"] == "thinking")
            (request,) = fake.responses_requests()
            (turn,) = [i for i in request["input"] if i.get("role") == "user" and "What is in this image?" in json.dumps(i)]
            assert [c["type"] for c in turn["content"]] == ["input_text", "input_image"]
            assert turn["content"][1]["image_url"] == f"data:image/png;base64,{PIXEL}"


async def test_a_second_turn_keeps_the_context(tmp_path: Path) -> None:
    with FakeResponses([[{"text": "Noted: pineapple."}], [{"text": "It was pineapple."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                first = await chat(client, conv.ask("Remember the word pineapple."))
                assert first.result == {"stopReason": "end_turn"}, first.error
                conv.answered(first)
                second = await chat(client, conv.ask("Which word did I ask you to remember?"))
            assert second.error is None and second.result == {"stopReason": "end_turn"}
            assert "It was pineapple." in text_of(second)
            last = fake.responses_requests()[-1]
            assert user_words(last) == ["Remember the word pineapple.", "Which word did I ask you to remember?"]
            assert "Noted: pineapple." in input_texts(last, "assistant")
            # Continued in the same agent session: no transcript of the conversation resent.
            assert "conversation-so-far" not in json.dumps(last["input"])


async def test_codex_models_in_the_picker_reach_the_model_api(tmp_path: Path) -> None:
    """codex's ``model`` config option (category model) becomes models ``codex/<value>``;
    a chat on one sets it (session/set_config_option) and the API gets that model."""
    with FakeResponses([[{"text": "From the default."}], [{"text": "From luna."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                first = await chat(client, Conversation(workspace(tmp_path)).ask("Hello"))
                assert first.result == {"stopReason": "end_turn"}, first.error
                models = (await client.request("lm/provideLanguageModelChatInformation", {"silent": True}))["models"]
                ids = [m["id"] for m in models]
                assert "codex" in ids and "codex/gpt-5.6-luna" in ids, ids  # codex 0.166's catalogue
                call = await client.chat("codex/gpt-5.6-luna", Conversation(workspace(tmp_path)).ask("Hello, luna"), timeout=TIMEOUT, options=options())
            assert call.error is None and "From luna." in text_of(call), call.error
            assert [r["model"] for r in fake.responses_requests()] == ["gpt-5.5", "gpt-5.6-luna"]


async def test_a_fresh_session_is_told_the_conversation_without_copilots_cache_control_markers(tmp_path: Path) -> None:
    """A chat begun with another model comes to codex: a fresh session, told the
    conversation in one context block. Copilot's ``cache_control`` data parts (9 bytes,
    ``ephemeral``: beside the current turn and every tool result) are its own prompt-cache
    markers, nothing anyone said or attached: they are not in that context."""
    with FakeResponses([[{"text": "The word was kiwi."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            # The earlier turns, answered by another model: a VS Code tool call and its result.
            conv.ask("Remember the word kiwi, then search for TODOs.")
            conv.answered(SentRequest(0, parts=[{"type": "text", "value": "Noted: kiwi."}, {"type": "tool_call", "callId": "call-other-1", "name": "search_workspace", "input": {"q": "TODO"}}]))
            conv.result(tool_result("call-other-1", "a.py:3: # TODO"))
            conv.answered(SentRequest(0, parts=[{"type": "text", "value": "One TODO, in a.py."}]))
            with anyio.fail_after(TIMEOUT):
                call = await chat(client, conv.ask("Which word did I ask you to remember?"), [SEARCH_TOOL])
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
            (request,) = fake.responses_requests()
            told = "\n".join(user_words(request))
            assert "<conversation-so-far>" in told and "Remember the word kiwi" in told and "a.py:3: # TODO" in told, told
            assert "cache_control" not in json.dumps(request["input"]), told
            assert "[attachment:" not in told, told


# ---------------------------------------------------------------- permissions


async def test_approve_runs_the_command_and_the_model_gets_its_output(tmp_path: Path) -> None:
    marker = workspace(tmp_path) / "ran.txt"
    cmd = f"echo approved-output-7 && touch {marker}"
    with FakeResponses([[{"text": "I'll create it."}, escalated_command(cmd)], [{"text": "Created the file."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                perm = await ask_for_command(client, conv, "Please create ran.txt", marker)
                call = await chat(client, conv.result(approve(perm)))
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
            assert marker.exists()
            assert "Created the file." in text_of(call)
            (output,) = fake.function_call_outputs()
            assert output["call_id"] == fake.call_ids()[0]
            assert "approved-output-7" in output["text"] and "exited with code 0" in output["text"]
            # What the chat shows as the command's output is its output (codex's rawOutput),
            # never codex's approval prompt (the permission's content: "Proposed Amendment …").
            shown = text_of(call)
            assert "Proposed Amendment" not in shown and "Available Decisions" not in shown, shown
            assert "approved-output-7" in shown, shown


async def test_a_plain_command_runs_unasked_in_the_read_only_sandbox(tmp_path: Path) -> None:
    """The documented gap (docs/agents.md, "The gap with codex"), pinned so a change shows:
    in ``read-only`` a command that does not ask to leave the sandbox runs with no card. It
    can read the workspace (the file's content reaches the model) but writes nothing."""
    marker = workspace(tmp_path) / "ran.txt"
    workspace(tmp_path).mkdir(parents=True)
    (workspace(tmp_path) / "notes.txt").write_text("readable-7\n")
    with FakeResponses([[exec_command(f"cat {workspace(tmp_path) / 'notes.txt'} && touch {marker}")], [{"text": "Tried."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                call = await chat(client, conv.ask("Please create ran.txt"))
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            assert tool_calls(call) == []  # no card
            assert "Tried." in text_of(call)
            assert not marker.exists()  # the sandbox writes nothing
            (output,) = fake.function_call_outputs()
            assert "readable-7" in output["text"], output  # but what it read reached the model
    assert [line for line in log_of(tmp_path).splitlines() if "config option set" in line and "configId=mode" in line and "value=read-only" in line], log_of(tmp_path)


async def test_skip_does_not_run_and_the_turn_finishes(tmp_path: Path) -> None:
    """codex ends the whole turn ``cancelled`` on a reject (docs/agents.md): the model is not
    called again in that turn, and VS Code must see a finished turn, not an error."""
    marker = workspace(tmp_path) / "ran.txt"
    with FakeResponses([[escalated_command(f"touch {marker}")]], done_text="Understood, I did not run it.") as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                perm = await ask_for_command(client, conv, "Please create ran.txt", marker)
                call = await chat(client, conv.result(skip(perm)))
                assert call.error is None, call.error
                assert call.result == {"stopReason": "end_turn"}, call.result
                # Not empty (Copilot shows "Sorry, no response was returned." for a response with
                # no text), and it says what happened: the user declined the command, which
                # codex took as the end of its turn. Not "ended without a result".
                shown = text_of(call)
                assert f"touch {marker}" in shown and "declined" in shown, shown
                assert "ended without a result" not in shown, shown
                assert not marker.exists()
                assert len(fake.responses_requests()) == 1  # codex did not go back to the model
                conv.answered(call)
                # The chat goes on: the next turn is answered, and the model learns the call was refused.
                nxt = await chat(client, conv.ask("OK, what now?"))
            assert nxt.error is None and nxt.result == {"stopReason": "end_turn"}, nxt.error
            assert "Understood, I did not run it." in text_of(nxt)
            assert not marker.exists()
            (output,) = fake.function_call_outputs()
            assert "aborted" in output["text"].lower()


async def test_stop_at_a_permission_then_the_next_message(tmp_path: Path) -> None:
    marker = workspace(tmp_path) / "ran.txt"
    with FakeResponses([[escalated_command(f"touch {marker}")]], done_text="Fine, moving on.") as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                await ask_for_command(client, conv, "Please create ran.txt", marker)
                conv.stopped()  # Stop at the card: VS Code drops the round, keeps the user message
                started = time.monotonic()
                call = await chat(client, conv.ask("Never mind, just say hi."))
                elapsed = time.monotonic() - started
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
            assert "Fine, moving on." in text_of(call)
            assert elapsed < 60, f"took {elapsed:.1f} s"  # ~2-5 s idle
            assert "cancelled turn did not end" not in (tmp_path / "daemon.stderr").read_text(errors="replace")  # promptly: the stopped turn ended, no drain deadline (10 s) waited
            assert not marker.exists()
            last = fake.responses_requests()[-1]
            assert user_words(last)[-1] == "Never mind, just say hi."
            # The model got the stopped call as aborted, and the turn as interrupted.
            (output,) = fake.function_call_outputs()
            assert aborted(output["text"]), output
            assert any("<turn_aborted>" in t for t in input_texts(last, "user"))
    log = log_of(tmp_path)
    # How the daemon went on after the Stop (docs/sessions.md): codex ends a cancelled turn at
    # once and answers the next prompt normally, so the same ACP session simply continues.
    taken = [line for line in log.splitlines() if "acp session" in line and "how=" in line]
    assert len(taken) == 1 and "how=new" in taken[0], "the session was taken up again:\n" + "\n".join(taken)


async def test_two_actions_in_one_turn(tmp_path: Path) -> None:
    one, two = workspace(tmp_path) / "one.txt", workspace(tmp_path) / "two.txt"
    with FakeResponses(
        [[{"text": "Two steps."}, escalated_command(f"echo first-7 && touch {one}")], [escalated_command(f"echo second-7 && touch {two}")], [{"text": "Both made."}]]
    ) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                perm = await ask_for_command(client, conv, "Create one.txt and two.txt", one)
                call = await chat(client, conv.result(approve(perm)))
                assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, call.result)
                assert one.exists() and not two.exists()
                (perm2,) = tool_calls(call)
                assert str(two) in perm2["input"]["message"]
                conv.answered(call)
                last = await chat(client, conv.result(approve(perm2)))
            assert last.error is None and last.result == {"stopReason": "end_turn"}, last.error
            assert two.exists() and "Both made." in text_of(last)
            outputs = fake.function_call_outputs()
            assert [o["call_id"] for o in outputs] == fake.call_ids()
            assert "first-7" in outputs[0]["text"] and "second-7" in outputs[1]["text"]


async def test_two_commands_in_one_model_reply(tmp_path: Path) -> None:
    """Two function calls in ONE model reply (parallel tool calls): each asks on its own."""
    one, two = workspace(tmp_path) / "one.txt", workspace(tmp_path) / "two.txt"
    with FakeResponses([[escalated_command(f"touch {one}"), escalated_command(f"touch {two}")], [{"text": "Both made."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            asked: list[dict[str, Any]] = []
            with anyio.fail_after(TIMEOUT):
                call = await chat(client, conv.ask("Create one.txt and two.txt"))
                while call.result == {"stopReason": "tool_calls"}:
                    perms = tool_calls(call)  # codex asks both at once: one response, two cards (seen)
                    asked += perms
                    conv.answered(call)
                    for perm in perms:
                        messages = conv.result(approve(perm))
                    call = await chat(client, messages)
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
            assert one.exists() and two.exists()
            assert len(asked) == 2
            assert "Both made." in text_of(call)
            assert {o["call_id"] for o in fake.function_call_outputs()} == set(fake.call_ids())


async def test_without_the_action_tools_the_command_is_declined_and_the_turn_finishes(tmp_path: Path) -> None:
    """A request that offers no agent-action tool (Ask mode; docs/vscode.md, "The Chat view") cannot ask the
    user: the daemon gives codex its reject option, codex ends the turn (cancelled), and
    the answer says what codex wanted to do."""
    marker = workspace(tmp_path) / "ran.txt"
    with FakeResponses([[escalated_command(f"touch {marker}")]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            ask_mode = options()
            ask_mode["tools"] = [t for t in ask_mode["tools"] if not t["name"].startswith("symposium-agent-action")]
            with anyio.fail_after(TIMEOUT):
                call = await client.chat(MODEL, conv.ask("Please create ran.txt"), timeout=TIMEOUT, options=ask_mode, agent_mode=False)
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            assert f"Codex wanted to run a command: `touch {marker}`. Declined: approving agent actions needs Agent mode." in text_of(call)
            assert not marker.exists() and tool_calls(call) == []
            assert len(fake.responses_requests()) == 1  # the turn ended at the reject


# ---------------------------------------------------------------- sessions (docs/sessions.md)


async def test_after_a_daemon_restart_codex_still_holds_the_first_turn(tmp_path: Path) -> None:
    """VS Code reloaded: a new daemon (same state folder, same codex HOME) takes the chat's
    ACP session up with ``session/resume`` and sends only the new turn; the model's next
    request still holds the first turn's command and its output."""
    marker = workspace(tmp_path) / "ran.txt"
    cmd = f"echo first-turn-7 && touch {marker}"
    with FakeResponses([[escalated_command(cmd)], [{"text": "Created."}]], done_text="Still here.") as fake:
        conv = Conversation(workspace(tmp_path))
        with anyio.fail_after(TIMEOUT):
            async with bridge(tmp_path, fake) as client:
                perm = await ask_for_command(client, conv, "Please create ran.txt", marker)
                done = await chat(client, conv.result(approve(perm)))
                assert done.result == {"stopReason": "end_turn"} and marker.exists(), done.error
                conv.answered(done)
            async with bridge(tmp_path, fake) as client:
                call = await chat(client, conv.ask("And now?"))
        assert call.error is None and "Still here." in text_of(call), call.error
        last = fake.responses_requests()[-1]
        assert remembers(last, "first-turn-7")
        assert "conversation-so-far" not in json.dumps(last["input"]) and user_words(last)[-1] == "And now?"
    assert log_of(tmp_path).count("how=session/resume") == 1, log_of(tmp_path)


async def test_after_an_eviction_codex_still_holds_the_first_turn(tmp_path: Path) -> None:
    """An idle chat's session is closed (``session/close``); its next request resumes it."""
    marker = workspace(tmp_path) / "ran.txt"
    with FakeResponses([[escalated_command(f"echo first-turn-8 && touch {marker}")], [{"text": "Created."}]], done_text="Back again.") as fake:
        async with bridge(tmp_path, fake, "--idle-timeout", "2") as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                perm = await ask_for_command(client, conv, "Please create ran.txt", marker)
                done = await chat(client, conv.result(approve(perm)))
                assert done.result == {"stopReason": "end_turn"}, done.error
                conv.answered(done)
                while "session asleep" not in log_of(tmp_path):
                    await anyio.sleep(0.2)
                call = await chat(client, conv.ask("Still there?"))
            assert call.error is None and "Back again." in text_of(call), call.error
            assert remembers(fake.responses_requests()[-1], "first-turn-8")
    assert "how=session/resume" in log_of(tmp_path)


async def test_after_a_crash_codex_still_holds_the_first_turn(tmp_path: Path) -> None:
    """The agent process is killed between turns: the next request starts codex again and
    resumes the chat's session (codex keeps its sessions on disk under CODEX_HOME)."""
    marker = workspace(tmp_path) / "ran.txt"
    with FakeResponses([[escalated_command(f"echo first-turn-9 && touch {marker}")], [{"text": "Created."}]], done_text="Recovered.") as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                perm = await ask_for_command(client, conv, "Please create ran.txt", marker)
                done = await chat(client, conv.result(approve(perm)))
                assert done.result == {"stopReason": "end_turn"}, done.error
                conv.answered(done)
                (pid,) = children(client.process.pid)
                os.kill(pid, signal.SIGKILL)
                while "agent ended" not in log_of(tmp_path):
                    await anyio.sleep(0.1)
                call = await chat(client, conv.ask("Are you back?"))
            assert call.error is None and "Recovered." in text_of(call), call.error
            assert remembers(fake.responses_requests()[-1], "first-turn-9")
    assert "how=session/resume" in log_of(tmp_path)


def aborted(output: str) -> bool:
    """codex told the model the call did not run: its output ends ``aborted by user`` (for an
    escalated command after a ``Wall time: … seconds`` line, codex 0.166)."""
    return output.splitlines()[-1:] == ["aborted by user"]


def remembers(body: dict[str, Any], output: str) -> bool:
    """The model request holds the first turn's command output (codex's own memory of it)."""
    return any(output in json.dumps(i) for i in body.get("input") or [] if i.get("type") == "function_call_output")


async def test_two_commands_one_allowed_one_skipped(tmp_path: Path) -> None:
    """Two cards in one response; the user allows one and skips the other. codex ends the
    whole turn at the reject (docs/agents.md), and (seen every time) the allowed command does
    not run either: both calls reach the model as "aborted by user". VS Code sees a
    finished answer, and the chat goes on."""
    one, two = workspace(tmp_path) / "one.txt", workspace(tmp_path) / "two.txt"
    with FakeResponses([[escalated_command(f"touch {one}"), escalated_command(f"touch {two}")]], done_text="Next.") as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                call = await chat(client, conv.ask("Create one.txt and two.txt"))
                perms = {("one" if str(one) in p["input"]["message"] else "two"): p for p in tool_calls(call)}
                assert set(perms) == {"one", "two"}  # asked in either order
                conv.answered(call)
                conv.result(approve(perms["one"]))
                call = await chat(client, conv.result(skip(perms["two"])))
                assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
                assert text_of(call).strip()
                conv.answered(call)
                nxt = await chat(client, conv.ask("What happened?"))
            assert nxt.error is None and "Next." in text_of(nxt)
            assert not two.exists()
            outputs = {o["call_id"]: o["text"] for o in fake.function_call_outputs()}
            call_one, call_two = fake.call_ids()
            assert aborted(outputs[call_two]), outputs[call_two]
            assert one.exists() == (not aborted(outputs[call_one]))  # what ran is what the model was told


# ---------------------------------------------------------------- cancel


async def test_cancel_mid_stream_then_the_next_message(tmp_path: Path) -> None:
    replies = [[{"text": "Here is the beginning of a long answer."}, {"sleep": 8}, {"text": "SECRET-TAIL"}], [{"text": "Fresh answer."}]]
    with FakeResponses(replies) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            got_text = anyio.Event()
            with anyio.fail_after(TIMEOUT):
                call = await client.start(
                    "lm/provideLanguageModelChatResponse",
                    {"modelId": MODEL, "messages": conv.ask("Tell me a long story."), "options": _with_actions(options())},
                    # The model's own words (not "_Starting Codex…_"): the turn is at the model.
                    on_part=lambda part: got_text.set() if "beginning" in str(part.get("value")) else None,
                )
                await got_text.wait()
                await client.cancel(call)  # Stop while text streams
                await call.done.wait()
                assert call.result == {"stopReason": "cancelled"}, (call.result, call.error)
                conv.stopped()
                started = time.monotonic()
                nxt = await chat(client, conv.ask("Just say something short."))
                elapsed = time.monotonic() - started
            assert nxt.error is None and nxt.result == {"stopReason": "end_turn"}, nxt.error
            assert text_of(nxt).endswith("Fresh answer.")
            assert "SECRET-TAIL" not in text_of(call) + text_of(nxt)
            assert elapsed < 60, f"took {elapsed:.1f} s"  # ~2-5 s idle
            assert "cancelled turn did not end" not in (tmp_path / "daemon.stderr").read_text(errors="replace")  # promptly: the stopped turn ended, no drain deadline (10 s) waited
            last = fake.responses_requests()[-1]
            assert user_words(last)[-1] == "Just say something short."
            assert "SECRET-TAIL" not in json.dumps(last["input"])
            assert "beginning of a long answer" not in text_of(nxt)  # nothing of the stopped turn leaks into this answer
            # codex keeps what it had said and tells the model the turn was interrupted.
            assert any("<turn_aborted>" in t for t in input_texts(last, "user"))


def _with_actions(opts: dict[str, Any]) -> dict[str, Any]:
    from lmbridge.devtools.client import chat_options

    return chat_options(opts)


# ---------------------------------------------------------------- VS Code tools


SEARCH_TOOL = {
    "name": "search_workspace",
    "description": "Search the workspace for text",
    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


async def test_a_vscode_tool_through_the_mcp_server(tmp_path: Path) -> None:
    """codex takes HTTP MCP servers (mcpCapabilities.http): the daemon's synthetic server
    offers VS Code's tools, which codex shows the model as the namespace ``mcp__vscode``.
    The model calls one (codex 0.166 defers MCP tools: the fake searches for it with
    ``tool_search`` first, as a real model does); codex asks before the MCP call, naming the
    tool only in the ``tool_call`` before it, so lmbridge shows a card (docs/tools.md); once
    allowed, VS Code runs the tool, and the model gets its result."""
    answer = "a.py:3: # TODO fix the frobnicator"
    call_search = [{"function_call": {"name": "search_workspace", "namespace": "mcp__vscode", "arguments": {"q": "TODO"}}}]

    with FakeResponses([call_search, [{"text": "Found the TODO."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                _, part = await vscode_tool(client, conv, conv.ask("Find the TODOs"), [SEARCH_TOOL])
                call = await chat(client, conv.result(tool_result(part["callId"], answer)), [SEARCH_TOOL])
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
            assert "Found the TODO." in text_of(call)
            (output,) = fake.function_call_outputs()
            assert output["call_id"] == fake.call_ids()[-1] and answer in output["text"]
            # The model was offered the VS Code tool (loaded by its tool_search) before it called it.
            assert any("search_workspace" in vscode_namespace(body) for body in fake.responses_requests())


async def vscode_tool(client: DaemonClient, conv: Conversation, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[SentRequest, dict[str, Any]]:
    """The turn up to a VS Code tool's call: codex-acp 2.6 in ``read-only`` asks before an
    MCP call (kind ``execute``, the tool named only in the ``tool_call`` before it), which
    lmbridge puts to the user as a card (docs/tools.md); Allow it, and the VS Code tool call
    itself comes (VS Code confirms its own tool as it runs it). Returns that response and
    its tool call part; the rounds are added to ``conv``."""
    call = await chat(client, messages, tools)
    assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, text_of(call))
    (card,) = tool_calls(call)
    assert card["name"] == AGENT_ACTION_TOOL and "search_workspace" in json.dumps(card["input"]), card
    conv.answered(call)
    call = await chat(client, conv.result(approve(card)), tools)
    assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, text_of(call))
    (part,) = tool_calls(call)
    assert (part["name"], part["input"]) == ("search_workspace", {"q": "TODO"}), part
    conv.answered(call)
    return call, part


def vscode_namespace(body: dict[str, Any]) -> list[str]:
    """The VS Code tools (the ``mcp__vscode`` namespace) one Responses API request offers the
    model: in its tools, or loaded by a ``tool_search`` (codex 0.166 defers MCP tools)."""
    return namespaces(body).get("mcp__vscode", [])


async def test_a_chat_that_takes_the_spare_session_sees_its_vscode_tools(tmp_path: Path) -> None:
    """The spare session (on by default) is opened with the VS Code tools the previous new
    chat offered, served from the start (codex-acp lists an MCP server's tools once, at
    session start): a chat offering the same tools takes it, and its model finds them. A
    chat offering other tools does not take the spare (it is closed): it gets a fresh
    session whose model finds its own tools, not the other chat's. (codex 0.166 defers MCP
    tools: a model finds them with ``tool_search``, so each chat's model searches.)"""
    search = {"tool_search_call": {"query": "search_workspace search the workspace for text", "limit": 50}}

    def say_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"text": f"TOOLS: search={'search_workspace' in vscode_namespace(body)} n={len(vscode_namespace(body))}"}]

    with FakeResponses([[{"text": "Hi."}], [{"function_call": {"name": "search_workspace", "namespace": "mcp__vscode", "arguments": {"q": "TODO"}}}], [search], say_tools]) as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                first = await chat(client, Conversation(workspace(tmp_path)).ask("Hello"), [SEARCH_TOOL])
                assert first.error is None and "Hi." in text_of(first), (first.error, text_of(first))
                while log_of(tmp_path).count("spare session ready") < 1:
                    await anyio.sleep(0.1)
                conv = Conversation(workspace(tmp_path))
                await vscode_tool(client, conv, conv.ask("Find the TODOs"), [SEARCH_TOOL])
                assert log_of(tmp_path).count("how=spare") == 1  # the second chat took the spare
                assert "search_workspace" in vscode_namespace(fake.responses_requests()[2])  # found by its tool_search
                while log_of(tmp_path).count("spare session ready") < 2:
                    await anyio.sleep(0.1)
                other = await chat(client, Conversation(workspace(tmp_path)).ask("Which tools?"))
                assert other.error is None, other.error
            shown = text_of(other)
            assert "TOOLS: search=False n=" in shown and "n=0" not in shown, shown  # its own tools, not search_workspace
    assert log_of(tmp_path).count("how=spare") == 1 and "spare session not taken: other tools" in log_of(tmp_path)


async def test_a_skipped_vscode_tool_reaches_the_model_as_declined(tmp_path: Path) -> None:
    call_search = {"function_call": {"name": "search_workspace", "namespace": "mcp__vscode", "arguments": {"q": "TODO"}}}
    with FakeResponses([[call_search], [{"text": "Understood, no search."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                _, part = await vscode_tool(client, conv, conv.ask("Find the TODOs"), [SEARCH_TOOL])
                call = await chat(client, conv.result(skip(part)), [SEARCH_TOOL])  # VS Code's own Skip of its tool
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
            assert "Understood, no search." in text_of(call)
            (output,) = fake.function_call_outputs()
            assert "The user declined to run this tool." in output["text"]


async def test_stop_with_a_vscode_tool_call_pending(tmp_path: Path) -> None:
    """Stop while VS Code has codex's MCP call: the call gets an error result, codex's turn
    is cancelled, and the next message is answered promptly in the same session."""
    call_search = {"function_call": {"name": "search_workspace", "namespace": "mcp__vscode", "arguments": {"q": "TODO"}}}
    with FakeResponses([[call_search]], done_text="OK, stopped.") as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                await vscode_tool(client, conv, conv.ask("Find the TODOs"), [SEARCH_TOOL])
                conv.stopped()
                started = time.monotonic()
                call = await chat(client, conv.ask("Stop that, just say OK."), [SEARCH_TOOL])
                elapsed = time.monotonic() - started
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
            assert "OK, stopped." in text_of(call) and elapsed < 60, f"took {elapsed:.1f} s"  # ~2-5 s idle
            assert "cancelled turn did not end" not in (tmp_path / "daemon.stderr").read_text(errors="replace")  # promptly: the stopped turn ended, no drain deadline (10 s) waited
            last = fake.responses_requests()[-1]
            assert user_words(last)[-1] == "Stop that, just say OK."
            # Nothing ran. Which of two "not run" answers the model gets is a race: codex
            # aborting the call at session/cancel, or the MCP error result lmbridge gives the
            # pending call at the Stop reaching codex first (seen in CI).
            (output,) = fake.function_call_outputs()
            assert output["text"].startswith("aborted by user") or STOPPED_TEXT in output["text"], output["text"]
    taken = [line for line in log_of(tmp_path).splitlines() if "acp session" in line and "how=" in line]
    assert len(taken) == 1, taken


# ---------------------------------------------------------------- failures


async def test_a_failed_model_call_shows_the_apis_message(tmp_path: Path) -> None:
    """codex-acp 2.6 ends a turn whose model call failed (HTTP 400) with ``end_turn``, the
    API's error body as its text (0.16.0 answered -32603): the chat shows the API's message
    as the answer, and nothing else comes of the turn."""
    reason = "Rate limit reached for gpt-5.5 (fake-failure-31)"
    with FakeResponses([[{"fail": {"status": 400, "message": reason, "code": "rate_limit_exceeded"}}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                call = await chat(client, conv.ask("Hello?"))
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            shown = text_of(call)
            assert reason in shown and "rate_limit_exceeded" in shown, shown  # the API's body, as codex-acp passes it on
            assert tool_calls(call) == []
            assert len(fake.responses_requests()) == 1  # no retry (the fake provider's request_max_retries = 0)


async def test_without_a_key_the_chat_says_authentication_is_required(tmp_path: Path) -> None:
    with FakeResponses() as fake:
        async with bridge(tmp_path, fake, logged_in=False) as client:
            conv = Conversation(workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                call = await chat(client, conv.ask("Hello?"))
            assert call.error is not None, call.result
            assert "Authentication required" in call.error.message, call.error.message
            assert fake.responses_requests() == []


# What codex-acp 2.6.0 says it needs to log in, as ``initialize`` returns it (for the
# daemon's authentication UX): docs/agents.md. (0.16.0 offered "chatgpt" and two env_var
# methods, "codex-api-key" and "openai-api-key".)
AUTH_METHODS = [
    {"id": "api-key", "name": "API Key", "description": "Use an API key to authenticate", "_meta": {"api-key": {"provider": "openai"}}},
    {"id": "chat-gpt", "name": "ChatGPT", "description": "Use ChatGPT to authenticate"},
]


async def test_on_the_wire_auth_methods_and_session_new_without_a_key(tmp_path: Path) -> None:
    """codex-acp directly (no daemon): what ``initialize`` offers, and ``session/new`` refused."""
    with FakeResponses() as fake:
        argv, env = codex_agent_launch(tmp_path / "home", fake.url, logged_in=False)
        (tmp_path / "work").mkdir()
        async with AcpProbe.spawn(argv, env=env, cwd=tmp_path / "work") as probe:
            with anyio.fail_after(TIMEOUT):
                init = await probe.request("initialize", initialize_params())
                with pytest.raises(AgentError) as refused:
                    await probe.request("session/new", {"cwd": str(tmp_path / "work"), "mcpServers": []})
    assert init["authMethods"] == AUTH_METHODS
    assert init["agentInfo"] == {"name": "@agentclientprotocol/codex-acp", "title": "Codex", "version": "2.6.0"}
    caps = init["agentCapabilities"]
    assert caps["loadSession"] is True
    assert {"list", "resume", "close"} <= set(caps["sessionCapabilities"])
    assert caps["mcpCapabilities"] == {"http": True, "sse": False, "acp": False}
    assert caps["promptCapabilities"] == {"image": True, "embeddedContext": True}
    assert "Authentication required" in refused.value.error["message"], refused.value.error
    assert fake.snapshot() == []


# ---------------------------------------------------------------- on the wire (no daemon)
# What lmbridge absorbs (docs/agents.md). If one of these fails after an upgrade of codex-acp,
# its behaviour changed: update docs/agents.md and the daemon, not just the test.


async def test_on_the_wire_the_session_starts_in_auto_review_and_a_command_runs_unasked(tmp_path: Path) -> None:
    """codex-acp 2.6 starts each session in mode ``agent`` ("Auto review"; modes ``read-only``,
    ``workspace-write``, ``agent``, ``agent-full-access``): a command runs in its sandbox with
    no ``session/request_permission``, its output only as ``_meta.terminal_output`` (no
    ``rawOutput``). This is why lmbridge must choose the session's mode. (codex-acp 0.16.0
    under approval_policy "untrusted", which codex 0.166 refuses, asked before every command.)"""
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "ran.txt"
    with FakeResponses([[exec_command(f"echo made-7 && touch {marker}")], [{"text": "Created."}]]) as fake:
        argv, env = codex_agent_launch(tmp_path / "home", fake.url)
        async with AcpProbe.spawn(argv, env=env, cwd=work) as probe:
            with anyio.fail_after(TIMEOUT):
                await probe.request("initialize", initialize_params())
                new = await probe.request("session/new", {"cwd": str(work), "mcpServers": []})
                result = await probe.request("session/prompt", {"sessionId": new["sessionId"], "prompt": [{"type": "text", "text": "go"}]})
    assert new["modes"]["currentModeId"] == "agent"
    assert [m["id"] for m in new["modes"]["availableModes"]] == ["read-only", "workspace-write", "agent", "agent-full-access"]
    assert result["stopReason"] == "end_turn" and marker.exists()
    assert not [m for _, _, m in probe.log if m.get("method") == "session/request_permission"]
    updates = [u for u in probe.updates(new["sessionId"]) if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    assert updates[0]["sessionUpdate"] == "tool_call" and updates[-1]["status"] == "completed"
    assert not any("rawOutput" in u for u in updates)
    assert "made-7" in (fake.function_call_outputs()[0]["text"])
