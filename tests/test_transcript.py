"""``transcript.whole_conversation``: what a fresh ACP session is told as context (the
whole conversation before the prompt), table-tested row by row, and with hypothesis: the
prompt comes back as given and the context never holds a system message or the results of
the permissions just answered."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core.messages import Message, TextPart, ToolCallPart, ToolResultPart
from lmbridge.core.transcript import whole_conversation


def user(text: str) -> Message:
    return Message(role="user", content=[TextPart(value=text)])


def agent(text: str) -> Message:
    return Message(role="assistant", content=[TextPart(value=text)])


def call(call_id: str) -> Message:
    return Message(role="assistant", content=[ToolCallPart(callId=call_id, name="run", input={})])


def result(*call_ids: str) -> Message:
    return Message(role="user", content=[ToolResultPart(callId=c, content=[TextPart(value=f"ran {c}")]) for c in call_ids])


SYSTEM = Message(role="system", content=[TextPart(value="You are helpful.")])
EMPTY = Message(role="assistant", content=[])

# (name, VS Code's messages, the prompt, the callIds just answered, the context expected)
ROWS = [
    ("first turn: no context", [user("hi")], (user("hi"),), (), ()),
    ("earlier turns are context", [user("a"), agent("b"), user("c")], (user("c"),), (), (user("a"), agent("b"))),
    ("system messages left out", [SYSTEM, user("a"), agent("b"), user("c")], (user("c"),), (), (user("a"), agent("b"))),
    ("empty assistant messages left out", [user("a"), EMPTY, user("c")], (user("c"),), (), (user("a"),)),
    ("a prompt of several messages: all of its tail left out", [user("a"), agent("b"), user("c"), user("d")], (user("c"), user("d")), (), (user("a"), agent("b"))),
    (
        "what the history core put before the prompt is not in the conversation: only the tail is left out",
        [user("a"), agent("b"), user("c")],
        (user("[your last turn was interrupted]"), user("c")),
        (),
        (user("a"), agent("b")),
    ),
    ("a prompt that is not the conversation's tail: the whole conversation is context", [user("a"), agent("b")], (user("z"),), (), (user("a"), agent("b"))),
    ("the results of the permissions just answered are not context", [user("a"), call("c1"), result("c1"), user("go")], (user("go"),), ("c1",), (user("a"), call("c1"))),
    (
        "of a message with several results, only those just answered leave",
        [user("a"), call("c1"), result("c1", "c2"), user("go")],
        (user("go"),),
        ("c2",),
        (user("a"), call("c1"), result("c1")),
    ),
    ("a result answered earlier stays", [user("a"), call("c1"), result("c1"), user("go")], (user("go"),), ("c9",), (user("a"), call("c1"), result("c1"))),
    ("the answered result as the prompt's tail: the rest is context", [user("a"), call("c1"), result("c1")], (result("c1"),), ("c1",), (user("a"), call("c1"))),
    ("empty history", [], (user("hi"),), (), ()),
]


@pytest.mark.parametrize(("history", "prompt", "answered", "context"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_table(history: list[Message], prompt: tuple[Message, ...], answered: tuple[str, ...], context: tuple[Message, ...]) -> None:
    assert whole_conversation(history, prompt, answered) == (context, prompt)


MESSAGES = st.sampled_from([SYSTEM, EMPTY, user("a"), user("b"), agent("x"), call("c1"), result("c1"), result("c1", "c2")])


@given(st.lists(MESSAGES, max_size=12), st.integers(0, 4), st.sets(st.sampled_from(["c1", "c2", "c3"])))
def test_prompt_as_given_and_no_system_or_answered_results_in_context(history: list[Message], n: int, answered: set[str]) -> None:
    prompt = tuple(history[len(history) - n :]) if n else ()
    context, back = whole_conversation(history, prompt, answered)
    assert back is prompt
    assert all(m.role != "system" and m.content for m in context)
    assert not [p for m in context for p in m.content if isinstance(p, ToolResultPart) and p.callId in answered]
    assert len(context) <= len(history)
