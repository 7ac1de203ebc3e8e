"""A subagent of the real claude-agent-acp 0.101.0 in its parent's chat (docs/agents.md,
"Subagents"), through the real daemon, against the fake Anthropic Messages API.

The fake model calls the Agent tool (Claude Code's Task), in the foreground or in the
background; the subagent it starts (its
requests come next, with tools: scripted like the main loop) runs a Bash command, which
asks a permission card; then it answers, and the parent answers last. The card is in the
parent's chat, the subagent's tool call is shown under the Agent call, and the command runs
only once the user allowed it.
"""

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

from lmbridge.core.permissions import ACTION_TOOL  # noqa: E402
from lmbridge.devtools.client import approve, assistant, text_of, tool_calls, user  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic, tool_names  # noqa: E402
from tests.real_agent.claude import claude_bridge  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds: ≥10x idle (the agent's start and two turns, ~10 s idle)
#: Claude Code's tool that starts a subagent: "Agent" in 2.1.x, "Task" before.
SUBAGENT_TOOLS = ("Agent", "Task")


SUBAGENT_PROMPT = "Create the marker file with Bash."


def first_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    content = users[0].get("content") if users else ""
    return content if isinstance(content, str) else " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))


def tool_results(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages") or [] if isinstance(m.get("content"), list) for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")


def model(marker: Path, background: bool) -> Any:
    """The fake model of both conversations: the parent's (it launches the subagent, then
    answers once it has its report) and the subagent's (one Bash call, then its report)."""

    def reply(body: dict[str, Any]) -> list[dict[str, Any]]:
        if SUBAGENT_PROMPT in first_user_text(body):
            if not tool_results(body):
                return [{"tool_use": {"name": "Bash", "input": {"command": f"touch {marker}", "description": "Create the marker file"}}}]
            return [{"text": "SUBAGENT-REPORT: the marker exists."}]
        if not tool_results(body):
            (name,) = [n for n in tool_names(body) if n in SUBAGENT_TOOLS][:1]
            launch = {"description": "Create the marker", "prompt": SUBAGENT_PROMPT, "subagent_type": "general-purpose", "run_in_background": background}
            return [{"text": "I'll hand this to a subagent."}, {"tool_use": {"name": name, "input": launch}}]
        if "SUBAGENT-REPORT" in json.dumps(body.get("messages")):
            return [{"text": "PARENT: the subagent created it."}]
        return [{"text": "PARENT: waiting for the subagent."}]

    return reply


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
async def test_a_subagents_card_and_tool_call_reach_the_parents_chat(tmp_path: Path, background: bool) -> None:
    """Foreground: the Agent call runs while its subagent works. Background (Claude Code's
    async agent): the Agent call ends at once; claude-agent-acp holds the turn until the
    subagent settles (a client without ``backgroundSubagents``), so its card still comes in
    this chat's answer."""
    marker = tmp_path / "from-subagent.txt"
    with FakeAnthropic([model(marker, background)] * 12) as fake:
        async with claude_bridge(tmp_path, fake.url, "--record", str(tmp_path / "wire.jsonl")) as client:
            with anyio.fail_after(TIMEOUT):
                history = [user("Create the marker file, through a subagent")]
                first = await client.chat("claude", history, timeout=TIMEOUT)
                assert first.error is None, first.error
                assert first.result == {"stopReason": "tool_calls"}, (first.result, text_of(first))
                (card,) = tool_calls(first)
                assert card["name"] == ACTION_TOOL
                assert str(marker) in card["input"]["message"] and "**run a command**" in card["input"]["message"]
                assert not marker.exists()  # nothing runs before the user answers
                text = text_of(first)
                assert "Create the marker" in text
                history += [assistant(first.parts), approve(card)]
                second = await client.chat("claude", history, timeout=TIMEOUT)
    assert second.error is None and second.result == {"stopReason": "end_turn"}, (second.result, second.error)
    assert marker.exists()
    both = text + text_of(second)
    # The subagent's Bash call, quoted under the Agent call that spawned it (start and end).
    assert f"\n> 🔧 **touch {marker}** (execute) · _in Create the marker_\n" in text, text
    assert f"\n> ✓ **touch {marker}** (execute) completed · exit code 0 · _in Create the marker_\n" in both, both
    assert "PARENT: the subagent created it." in text_of(second)
    # What the agent sent (recorded on the wire): all in the parent's session, the subagent's
    # tool call and its permission naming the Agent call in _meta.claudeCode.parentToolUseId.
    frames = [json.loads(line).get("frame") or {} for line in (tmp_path / "wire.jsonl").read_text().splitlines()]
    sessions = {f["params"]["sessionId"] for f in frames if f.get("method") in ("session/update", "session/request_permission")}
    assert len(sessions) == 1
    (asked,) = [f["params"]["toolCall"] for f in frames if f.get("method") == "session/request_permission"]
    (agent_call,) = {f["params"]["update"]["toolCallId"] for f in frames if f.get("method") == "session/update"
                     and (f["params"]["update"].get("_meta") or {}).get("claudeCode", {}).get("toolName") in SUBAGENT_TOOLS}
    assert asked["_meta"]["claudeCode"]["parentToolUseId"] == agent_call
