"""The agent's questions with the real agent: claude-agent-acp 0.101.0 asks the user through
ACP elicitation (its AskUserQuestion tool, ``dist/elicitation.js``: only when the client
advertises ``elicitation.form``), driven through ``lmbridge serve`` against the fake Anthropic
Messages API whose model calls AskUserQuestion.

VS Code's question tool (``vscode_askQuestions``) is offered, as Agent mode offers it: the
question becomes a call of that tool; its result (the JSON VS Code 1.139 returns) reaches the
model as AskUserQuestion's answer; Skip reaches it as a question the user did not answer.
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

from lmbridge.core.elicitation import ASK_TOOL  # noqa: E402
from lmbridge.devtools.client import assistant, skip, text_of, tool_calls, tool_result, user  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.real_agent.claude import claude_bridge  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds per test body: ≥10x idle (the agent's start and two turns, 5-20 s idle)

ASK_ID = "toolu_ask_0001"
ASK = {"tool_use": {"name": "AskUserQuestion", "id": ASK_ID, "input": {"questions": [{
    "question": "Which colour should the button be?", "header": "Colour", "multiSelect": False,
    "options": [{"label": "Red", "description": "Warm"}, {"label": "Blue", "description": "Cool"}],
}]}}}  # fmt: skip
OPTIONS = {"tools": [{"name": ASK_TOOL, "description": "Ask the user questions"}]}


def answers(**by_header: Any) -> str:
    """VS Code's question tool result (``{"answers": {header: {selected, freeText, skipped}}}``)."""
    return json.dumps({"answers": {h: ({"selected": [v], "freeText": None, "skipped": False} if v else {"selected": [], "freeText": None, "skipped": True})
                                   for h, v in by_header.items()}})  # fmt: skip


def ask_result(fake: FakeAnthropic) -> dict[str, Any]:
    """The AskUserQuestion tool_result the model got (its ``text`` flattened)."""
    result = fake.tool_result(ASK_ID)
    assert result is not None, fake.tool_results()
    return result


async def ask(client: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    history = [user("Paint the button")]
    call = await client.chat("claude", history, timeout=TIMEOUT, options=OPTIONS)
    assert call.error is None, call.error
    assert call.result == {"stopReason": "tool_calls"}, text_of(call)
    [part] = [p for p in tool_calls(call) if p["name"] == ASK_TOOL]
    first = part["input"]["questions"][0]
    assert first["question"] == "Which colour should the button be?" and first["header"] == "Colour"
    assert [o["label"] for o in first["options"]] == ["Red", "Blue"] and first["options"][0]["description"] == "Warm"
    return [*history, assistant(call.parts)], part


async def test_the_answer_reaches_the_model(tmp_path: Path) -> None:
    with FakeAnthropic([[{"text": "One question first."}, ASK], [{"text": "Blue it is."}]]) as fake:
        async with claude_bridge(tmp_path, fake.url) as client:
            with anyio.fail_after(TIMEOUT):
                history, part = await ask(client)
                call = await client.chat("claude", [*history, tool_result(part["callId"], answers(Colour="Blue", Other=None))], timeout=TIMEOUT, options=OPTIONS)
            assert call.error is None and call.result == {"stopReason": "end_turn"}
            assert "Blue it is." in text_of(call)
            result = ask_result(fake)
            assert not result.get("is_error"), result
            # Seen: 'Your questions have been answered: "Which colour should the button be?"="Blue". ...'
            assert '"Which colour should the button be?"="Blue"' in result["text"], result["text"]


async def test_skip_reaches_the_model_as_no_answer(tmp_path: Path) -> None:
    with FakeAnthropic([[ASK], [{"text": "I will pick one myself."}]]) as fake:
        async with claude_bridge(tmp_path, fake.url) as client:
            with anyio.fail_after(TIMEOUT):
                history, part = await ask(client)
                call = await client.chat("claude", [*history, skip(part)], timeout=TIMEOUT, options=OPTIONS)
            assert call.error is None and call.result == {"stopReason": "end_turn"}
            assert "I will pick one myself." in text_of(call)
            text = ask_result(fake)["text"]
            assert text == "The user did not answer the questions.", text  # seen: AskUserQuestion's own words


NEW_WORDS = "Never mind, say hi"


def answer_to_the_new_words(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A model's answer: to the request holding the new words, and to nothing else. Claude Code
    may send the stopped turn's question result before the cancel reaches it (seen once in
    a loaded CI run); that request's answer belongs to the ended turn and is dropped."""
    return [{"text": "Something else then." if NEW_WORDS in json.dumps(body["messages"]) else "Stopped turn."}]


async def test_a_new_message_instead_of_an_answer_cancels_the_question(tmp_path: Path) -> None:
    with FakeAnthropic([[ASK], answer_to_the_new_words, answer_to_the_new_words]) as fake:
        async with claude_bridge(tmp_path, fake.url) as client:
            with anyio.fail_after(TIMEOUT):
                history, part = await ask(client)
                # Stop at the question: VS Code drops the round; the user writes something else.
                call = await client.chat("claude", [history[0], user(NEW_WORDS)], timeout=TIMEOUT, options=OPTIONS)
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, text_of(call))
            assert "Something else then." in text_of(call) and "Stopped turn." not in text_of(call)
            result = fake.tool_result(ASK_ID)
            assert result is None or "Blue" not in result["text"]  # nothing was answered for the user
