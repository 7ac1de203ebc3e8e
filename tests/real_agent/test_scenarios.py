"""What a new user gets with each real agent as installed today (claude-agent-acp 0.101.0,
codex-acp 2.6.0 over codex 0.166.0, gemini-cli 0.61.0, fast-agent 0.10.48), through the
real daemon, with Copilot-shaped requests (tests/real_agent/copilot.py), each against its
fake model API, the agent's own defaults untouched (no mode chosen by the test):

* an edit and a command each show a card first: the permission reaches VS Code's side
  before anything is written or run (the file unchanged, the command's marker absent);
* Allow runs it once (the marker holds one line; the model gets the command's output);
* Skip stops it and the agent carries on (nothing ran; the model is called again, with a
  result that is not the command's output, and its answer ends the turn; codex, whose one
  reject ends its turn, carries on at the next message);
* Stop ends a running command (its process is gone).

The fakes answer side requests as permissive real ones would (auto mode's classifier and
codex's reviewer allow), so an agent's self-approving default shows here as what it is:
no card. Where that is lmbridge's to fix (the session's mode), the test is a strict xfail
naming what is missing. Other files cover the same scenarios in more depth for one agent
(test_gemini_bridge.py, test_gemini_files.py, test_fast_agent_bridge.py,
test_live_output.py); fast-agent has no edit tool of its own.

codex's model asks to leave the sandbox for its command (``sandbox_permissions:
"require_escalated"``), as a real model does for a command that writes: in codex's
``read-only``, where lmbridge starts it, that is the command codex asks about; a plain one
runs unasked in its read-only sandbox (pinned in test_codex_bridge.py).
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.devtools.client import DaemonClient, SentRequest, approve, is_agent_action, skip, text_of, tool_calls  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.fakes.fake_gemini import FakeGemini  # noqa: E402
from tests.fakes.fake_openai_chat import FakeOpenAIChat, message_text  # noqa: E402
from tests.fakes.fake_openai_responses import FakeResponses, apply_patch, escalated_command  # noqa: E402
from tests.real_agent import claude, codex, fast_agent, gemini  # noqa: E402
from tests.real_agent.copilot import Conversation, options  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds a test: ≥10x idle (an agent's start and two or three turns, 5-20 s idle)


@dataclass(frozen=True)
class Agent:
    """How one agent is driven: its bridge, fake model API and the model's tool calls."""

    model: str
    installed: Callable[[], bool]
    bridge: Callable[[Path, Any], Any]  # (tmp_path, fake) -> async context manager of a DaemonClient
    fake: Callable[..., Any]  # (script, done_text=...) -> the fake model API
    workspace: Callable[[Path], Path]
    command: Callable[[str], dict[str, Any]]  # a model's call of its shell
    edit: Callable[[Path, str, str], list[list[dict[str, Any]]]] | None  # the model's replies that edit a file's line (old → new)
    outputs: Callable[[Any], list[str]]  # the tool results the model was sent, as text
    # A Skip ends the agent's turn: its only reject is one that stops the turn (codex 0.166
    # offers no "decline" for a command leaving the sandbox or an edit; docs/agents.md).
    reject_ends_turn: bool = False


def _claude_outputs(fake: FakeAnthropic) -> list[str]:
    return [r["text"] for r in fake.tool_results()]


def _codex_outputs(fake: FakeResponses) -> list[str]:
    return [o["text"] for o in fake.function_call_outputs()]


def _gemini_outputs(fake: FakeGemini) -> list[str]:
    return [json.dumps(r["response"]) for r in fake.function_responses()]


def _fast_agent_outputs(fake: FakeOpenAIChat) -> list[str]:
    return [message_text(m) for m in fake.tool_messages()]


AGENTS = {
    "claude": Agent(
        "claude",
        claude.is_installed,
        lambda tmp, fake: claude.claude_bridge(tmp, fake.url),
        lambda script, **kw: FakeAnthropic(script, **kw),
        lambda tmp: tmp,
        lambda cmd: {"tool_use": {"name": "Bash", "input": {"command": cmd, "description": "Run it"}}},
        lambda path, old, new: [  # Claude Code edits only a file read first
            [{"tool_use": {"name": "Read", "input": {"file_path": str(path)}}}],
            [{"text": "Editing it."}, {"tool_use": {"name": "Edit", "input": {"file_path": str(path), "old_string": old, "new_string": new}}}],
        ],
        _claude_outputs,
    ),
    "codex": Agent(
        "codex",
        codex.is_installed,
        lambda tmp, fake: codex.codex_bridge(tmp, fake.url),
        lambda script, **kw: FakeResponses(script, **kw),
        lambda tmp: tmp / "work",
        escalated_command,  # in read-only, the command codex asks about (see the module docstring)
        lambda path, old, new: [[{"text": "Editing it."}, apply_patch(f"*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n")]],
        _codex_outputs,
        reject_ends_turn=True,
    ),
    "gemini": Agent(
        "gemini",
        gemini.is_installed,
        lambda tmp, fake: gemini.gemini_bridge(tmp, fake.url),
        lambda script, **kw: FakeGemini(script, **kw),
        lambda tmp: tmp / "ws",
        lambda cmd: {"call": {"name": "run_shell_command", "args": {"command": cmd}}},
        lambda path, old, new: [[{"text": "Editing it."}, {"call": {"name": "write_file", "args": {"file_path": str(path), "content": f"{new}\n"}}}]],
        _gemini_outputs,
    ),
    "fast-agent": Agent(
        "fast-agent",
        fast_agent.is_installed,
        lambda tmp, fake: fast_agent.fast_agent_bridge(tmp, fake.url),
        lambda script, **kw: FakeOpenAIChat(script, **kw),
        lambda tmp: tmp / "workspace",
        lambda cmd: {"tool_call": {"name": "shell__run_command", "arguments": {"command": cmd}}},
        None,
        _fast_agent_outputs,
    ),
}

# Where lmbridge is not right yet for today's release of an agent:
XFAIL: dict[tuple[str, str], Any] = {
    # gemini-cli 0.61 ends the command at Stop, but its next prompt sends the stopped call
    # without its response, which the Gemini API refuses (HTTP 400, function call parts
    # unpaired). The daemon then takes the chat up in a new session, but not every time:
    # of two runs on a loaded machine, one answered, one showed the API's refusal. Not
    # strict until that race is found.
    ("gemini", "stop"): pytest.mark.xfail(
        strict=False,
        reason="after a Stop while gemini-cli runs a command, the Gemini API sometimes refuses the next prompt (a call without its response) before lmbridge goes on in a fresh session",
    ),
}


def cases(scenario: str, *, edits: bool = False) -> list[Any]:
    out = []
    for name, agent in AGENTS.items():
        if edits and agent.edit is None:
            continue
        marks = [pytest.mark.skipif(not agent.installed(), reason=f"{name} is not installed: make real-agent-deps")]
        if (name, scenario) in XFAIL:
            marks.append(XFAIL[(name, scenario)])
        out.append(pytest.param(agent, id=name, marks=marks))
    return out


async def send(client: DaemonClient, agent: Agent, messages: list[dict[str, Any]]) -> SentRequest:
    call = await client.chat(agent.model, messages, timeout=TIMEOUT, options=options([]))
    assert call.error is None, call.error
    return call


async def card_first(client: DaemonClient, agent: Agent, conv: Conversation, ask: str) -> dict[str, Any]:
    """The first response ends at one card (an agent action for the user to answer); the
    round is added to ``conv``. Returns the card's tool call part."""
    call = await send(client, agent, conv.ask(ask))
    assert call.result == {"stopReason": "tool_calls"}, f"no card: the turn ended {call.result}: {text_of(call)[-600:]!r}"
    (perm,) = tool_calls(call)
    assert is_agent_action(perm), perm
    conv.answered(call)
    return perm


@pytest.mark.parametrize("agent", cases("edit", edits=True))
async def test_an_edit_shows_a_card_first_and_allow_writes_it(tmp_path: Path, agent: Agent) -> None:
    assert agent.edit is not None
    path = agent.workspace(tmp_path) / "notes.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("the user's line\n")
    script = [*agent.edit(path, "the user's line", "the agent's line"), [{"text": "Edited it."}]]
    with agent.fake(script) as fake:
        async with agent.bridge(tmp_path, fake) as client:
            conv = Conversation(agent.workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                perm = await card_first(client, agent, conv, f"Edit {path.name}")
                assert path.read_text() == "the user's line\n", "the file was written before the user answered"
                call = await send(client, agent, conv.result(approve(perm)))
            assert call.result == {"stopReason": "end_turn"}, call.result
            assert path.read_text() == "the agent's line\n"
            assert "Edited it." in text_of(call)


@pytest.mark.parametrize("agent", cases("command"))
async def test_a_command_shows_a_card_first_and_allow_runs_it_once(tmp_path: Path, agent: Agent) -> None:
    token = f"ran-{uuid.uuid4().hex[:8]}"
    marker = agent.workspace(tmp_path) / "marker.txt"
    with agent.fake([[{"text": "Running it."}, agent.command(f"echo {token}; echo once >> {marker}")], [{"text": "It ran."}]]) as fake:
        async with agent.bridge(tmp_path, fake) as client:
            conv = Conversation(agent.workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                perm = await card_first(client, agent, conv, "Run the command")
                assert not marker.exists(), "the command ran before the user answered"
                call = await send(client, agent, conv.result(approve(perm)))
            assert call.result == {"stopReason": "end_turn"}, call.result
            assert marker.read_text() == "once\n"  # it ran, once
            assert "It ran." in text_of(call)
            assert any(token in out for out in agent.outputs(fake)), agent.outputs(fake)


@pytest.mark.parametrize("agent", cases("skip"))
async def test_skip_stops_it_and_the_agent_carries_on(tmp_path: Path, agent: Agent) -> None:
    token = f"ran-{uuid.uuid4().hex[:8]}"
    marker = agent.workspace(tmp_path) / "marker.txt"
    with agent.fake([[agent.command(f"echo {token}; touch {marker}")], [{"text": "Carrying on without it."}]]) as fake:
        async with agent.bridge(tmp_path, fake) as client:
            conv = Conversation(agent.workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                perm = await card_first(client, agent, conv, "Run the command")
                call = await send(client, agent, conv.result(skip(perm)))
                assert call.result == {"stopReason": "end_turn"}, call.result
                assert not marker.exists()
                if agent.reject_ends_turn:  # the answer says what was declined; the chat goes on
                    assert "declined" in text_of(call) and "Carrying on without it." not in text_of(call), text_of(call)
                    conv.answered(call)
                    call = await send(client, agent, conv.ask("Carry on."))
                    assert call.result == {"stopReason": "end_turn"}, call.result
            assert not marker.exists()
            # The model was called again, told the call did not run, and its answer ended the turn.
            assert "Carrying on without it." in text_of(call)
            results = agent.outputs(fake)
            assert results and not any(token in out for out in results), results


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.parametrize("agent", cases("stop"))
async def test_stop_ends_a_running_command(tmp_path: Path, agent: Agent) -> None:
    """The command writes its process id, then becomes a one-minute ``sleep`` (≥10x the few
    seconds a Stop takes idle): Stop while it runs, and that process is gone (the agents run
    a command in a shell of their own, some through a terminal: its id is the one thing
    every way of running it shows)."""
    pidfile = agent.workspace(tmp_path) / "command.pid"
    with agent.fake([[agent.command(f"echo $$ > {pidfile}; exec sleep 60")]], done_text="After the stop.") as fake:
        async with agent.bridge(tmp_path, fake) as client:
            conv = Conversation(agent.workspace(tmp_path))
            with anyio.fail_after(TIMEOUT):
                perm = await card_first(client, agent, conv, "Run the slow command")
                turn = await client.start("lm/provideLanguageModelChatResponse", {"modelId": agent.model, "messages": conv.result(approve(perm)), "options": options([])})
                while not (pidfile.exists() and pidfile.read_text().strip()):
                    await anyio.sleep(0.2)
                pid = int(pidfile.read_text())
                await anyio.sleep(1.0)  # it runs
                assert alive(pid) and turn.result is None, turn.result
                await client.cancel(turn)
                while alive(pid):
                    await anyio.sleep(0.2)
                conv.stopped()
                after = await send(client, agent, conv.ask("Are you there?"))
            assert "After the stop." in text_of(after), text_of(after)
