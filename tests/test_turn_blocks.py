"""One ``session/prompt``'s content (``core.transcript.turn_blocks``, the pure half of the
session actor's ``turn.Prompt``): which messages it carries, row by row."""

from __future__ import annotations

from typing import Any

import pytest

from lmbridge.core.history import Decision, Kind
from lmbridge.core.messages import Message
from lmbridge.core.session_state import Command
from lmbridge.core.transcript import CONTEXT_OPEN, prompt_blocks, turn_blocks, whole_conversation


def _m(role: str, text: str) -> Message:
    return Message.model_validate({"role": role, "content": [{"type": "text", "value": text}]})


EARLIER, ANSWER, STOPPED, NOW = _m("user", "earlier"), _m("assistant", "an answer"), _m("user", "stopped one"), _m("user", "now this")
HISTORY = (EARLIER, ANSWER, NOW)
DECISION = Decision(Kind.CONTINUATION, "s1", context=(ANSWER,), prompt=(NOW,))
COMPACT = (Command("compact", "Compact the conversation"),)


def _texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"] for b in blocks]


ROWS: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [
    ("the decision's context and prompt", {"whole": False}, prompt_blocks((ANSWER,), (NOW,), images=False)),
    ("the whole conversation for a session that saw none of it", {"whole": True},
     prompt_blocks(*whole_conversation(HISTORY, (NOW,)), images=False)),
    ("messages of a stopped request go first", {"whole": False, "unsent": (STOPPED,)}, prompt_blocks((STOPPED, ANSWER), (NOW,), images=False)),
    ("the whole conversation after the unsent", {"whole": True, "unsent": (STOPPED,)},
     prompt_blocks((STOPPED, *whole_conversation(HISTORY, (NOW,))[0]), (NOW,), images=False)),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "expected"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_each_prompt_carries_its_row(kwargs: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    assert turn_blocks(DECISION, HISTORY, images=False, **kwargs) == expected


def test_whole_holds_the_earlier_messages_the_decision_left_out() -> None:
    (context, prompt) = turn_blocks(DECISION, HISTORY, whole=True, images=False)
    assert context["text"].startswith(CONTEXT_OPEN) and "earlier" in context["text"] and "an answer" in context["text"]
    assert prompt == {"type": "text", "text": "now this"}
    (part,) = turn_blocks(DECISION, HISTORY, whole=False, images=False)[:1]
    assert "earlier" not in part["text"]


@pytest.mark.parametrize(
    ("commands", "expected"), [(COMPACT, "/compact now"), ((), "//compact now")], ids=["the session's command", "not a command of the session"]
)
def test_an_escaped_command_reads_as_the_agents_own(commands: tuple[Command, ...], expected: str) -> None:
    decision = Decision(Kind.CONTINUATION, "s1", prompt=(_m("user", "//compact now"),))
    assert _texts(turn_blocks(decision, HISTORY, whole=False, images=False, commands=commands)) == [expected]
