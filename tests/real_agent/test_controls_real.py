"""Per-chat controls with the real agents, through the real daemon (docs/protocol.md,
"Per-chat controls"): claude-agent-acp 0.23.1's plan mode chosen for one chat and left
by the agent itself (current_mode_update), its /compact typed as //compact; codex-acp
0.16.0's reasoning_effort reaching the model API."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.core.permissions import MODE_TOOL  # noqa: E402
from lmbridge.devtools.client import DaemonClient, approve, assistant, text_of, tool_calls, user  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.fakes.fake_openai_responses import FakeResponses  # noqa: E402
from tests.real_agent.claude import claude_bridge  # noqa: E402
from tests.real_agent.codex import codex_bridge  # noqa: E402
from tests.real_agent.copilot import Conversation, options  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds per test body: ≥10x idle (the agent's start and a few turns, 5-20 s idle)


async def with_session_state(client: DaemonClient, workspace: Path) -> None:
    """``initialize`` again, now saying ``sessionState`` (as the VS Code extension does)."""
    await client.request("initialize", {"protocolVersion": 1, "workspaceFolders": [str(workspace)], "clientCapabilities": {"sessionState": True}})


def states(client: DaemonClient) -> list[dict[str, Any]]:
    return [f["params"] for f in client.notifications if f.get("method") == "client/sessionState"]


def mode_of(state: dict[str, Any]) -> str | None:
    return next((c.get("current") for c in state["controls"] if c.get("category") == "mode"), None)


async def until(predicate: Any, what: str) -> Any:
    while not (value := predicate()):
        await anyio.sleep(0.05)  # polling the client's notifications: there is no event to wait on
    return value


async def test_claude_plan_mode_for_one_chat_and_the_agent_leaving_it(tmp_path: Path) -> None:
    exit_plan = {"tool_use": {"name": "ExitPlanMode", "input": {"plan": "1. Write the file."}}}
    with FakeAnthropic([[{"text": "Here is my plan."}, exit_plan], [{"text": "Plan approved."}], [{"text": "Hello from the other chat."}]]) as fake:
        async with claude_bridge(tmp_path, fake.url) as client:
            await with_session_state(client, tmp_path)
            with anyio.fail_after(TIMEOUT):
                # VS Code's model configuration says plan for this chat's first request: set on its new session.
                history = [user("Plan the change, do not make it yet")]
                call = await client.chat("claude", history, timeout=TIMEOUT, options={"configuration": {"mode": "plan"}})
                assert call.error is None, call.error
                planned = [s for s in states(client) if mode_of(s) == "plan"]
                assert planned, [mode_of(s) for s in states(client)]
                chat = planned[-1]["chatId"]
                # The agent asks to leave plan mode (ExitPlanMode, kind switch_mode): the mode tool's card.
                (perm,) = tool_calls(call)
                assert perm["name"] == MODE_TOOL, perm["name"]
                history += [assistant(call.parts), approve(perm)]
                call = await client.chat("claude", history, timeout=TIMEOUT, options={"configuration": {"mode": "plan"}})
                assert call.error is None, call.error
                # Its current_mode_update: the chat's state follows, and VS Code's unchanged "plan" is not set again.
                left = await until(lambda: [s for s in states(client) if s["chatId"] == chat and mode_of(s) not in (None, "plan")], "the mode left")
                assert mode_of(left[-1]) in ("default", "acceptEdits"), mode_of(left[-1])
                # Another chat, nothing chosen: not in plan mode.
                other = await client.chat("claude", [user("A different question")], timeout=TIMEOUT)
                assert other.error is None, other.error
    bodies = fake.main_requests()
    # Claude Code tells the model it is in plan mode in the first chat's first request only.
    assert "plan mode is active" in json.dumps(bodies[0]).lower()
    assert "plan mode is active" not in json.dumps(bodies[-1]).lower()


async def test_claude_compact_typed_as_a_double_slash_reaches_the_agent(tmp_path: Path) -> None:
    with FakeAnthropic([[{"text": "Hello there."}], [{"text": "<summary>We said hello.</summary>"}]]) as fake:
        async with claude_bridge(tmp_path, fake.url) as client:
            await with_session_state(client, tmp_path)
            with anyio.fail_after(TIMEOUT):
                first = await client.chat("claude", [user("hello")], timeout=TIMEOUT)
                assert first.error is None, first.error
                # claude-agent-acp tells its commands (available_commands_update) once the session is up.
                await until(lambda: [s for s in states(client) if any(c["name"] == "compact" for c in s["commands"])], "claude's commands")
                before = len(fake.snapshot())
                call = await client.chat("claude", [user("hello"), assistant(first.parts), user("//compact")], timeout=TIMEOUT)
                assert call.error is None, call.error
    requests = [json.dumps(r.body).lower() for r in fake.snapshot()]  # in the order they came
    # Claude Code compacted: after the command it asked the model for a summary of the conversation.
    assert any("summary" in b and "hello" in b for b in requests[before:]), (len(requests), before, text_of(call))


async def test_codex_reasoning_effort_reaches_the_model_api(tmp_path: Path) -> None:
    with FakeResponses([[{"text": "First."}], [{"text": "Second, thinking hard."}]]) as fake:
        async with codex_bridge(tmp_path, fake.url) as client:
            await with_session_state(client, tmp_path / "work")
            with anyio.fail_after(TIMEOUT):
                conv = Conversation(tmp_path / "work")
                first = await client.chat("codex", conv.ask("Hello"), timeout=TIMEOUT, options=options())
                assert first.error is None, first.error
                state = states(client)[-1]
                effort = next(c for c in state["controls"] if c["id"] == "reasoning_effort")
                assert [c["value"] for c in effort["choices"]] == ["low", "medium", "high", "xhigh"]
                listed = await client.request("lm/provideLanguageModelChatInformation", {"silent": True})
                schema = next(m for m in listed["models"] if m["id"] == "codex")["configurationSchema"]
                assert "reasoning_effort" in schema["properties"]
                conv.answered(first)
                chosen = {**options(), "configuration": {"reasoning_effort": "high"}}
                second = await client.chat("codex", conv.ask("Think hard about it"), timeout=TIMEOUT, options=chosen)
                assert second.error is None, second.error
    bodies = fake.responses_requests()
    assert bodies[-1].get("reasoning", {}).get("effort") == "high", bodies[-1].get("reasoning")
    assert bodies[0].get("reasoning", {}).get("effort") != "high"
