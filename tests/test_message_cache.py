"""``MessageCache`` (the server's validated-message cache) and the fingerprint memo:
a cached message is exactly what validating it gives, and nothing is confused."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.core.history import Fingerprint
from lmbridge.core.messages import ChatResponseParams, Message, MessageCache

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "value": st.text(max_size=8)}),
    st.fixed_dictionaries({"type": st.just("thinking"), "value": st.text(max_size=8)}, optional={"id": st.text(max_size=3)}),
    st.fixed_dictionaries({"type": st.just("tool_call"), "callId": st.text(max_size=3), "name": st.text(max_size=3), "input": st.dictionaries(st.text(max_size=3), json_values, max_size=3)}),
    st.fixed_dictionaries({
        "type": st.just("tool_result"),
        "callId": st.text(max_size=3),
        "content": st.lists(st.fixed_dictionaries({"type": st.just("text"), "value": st.text(max_size=5)}), max_size=2),
    }),
    json_values,
)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "robot"]), "content": st.lists(parts, max_size=3)},
    optional={"name": st.text(max_size=3)},
)


def fresh(raw: list[Any]) -> list[Message] | None:
    try:
        return list(ChatResponseParams.model_validate({"modelId": "m", "messages": raw}).messages)
    except ValueError:
        return None


@settings(deadline=None, max_examples=300)
@given(st.lists(st.lists(messages, max_size=4), min_size=1, max_size=4))
def test_cached_messages_are_what_validation_gives(requests: list[list[dict[str, Any]]]) -> None:
    cache = MessageCache(limit=5)
    for raw in requests:
        got = cache.messages(raw)
        want = fresh(raw)
        assert got == want
        if got is not None:
            assert [m.model_dump() for m in got] == [m.model_dump() for m in want]


def test_replayed_messages_come_back_as_the_same_objects() -> None:
    cache = MessageCache()
    history = [{"role": "user", "content": [{"type": "text", "value": "hi"}]}, {"role": "assistant", "content": [{"type": "tool_call", "callId": "c", "name": "t", "input": {"x": 1}}]}]
    first = cache.messages(history)
    again = cache.messages([dict(m) for m in history] + [{"role": "user", "content": [{"type": "text", "value": "more"}]}])
    assert first is not None and again is not None
    assert again[0] is first[0] and again[1] is first[1]
    # 1 and true are equal in Python, not in JSON: never confused.
    other = cache.messages([{"role": "assistant", "content": [{"type": "tool_call", "callId": "c", "name": "t", "input": {"x": True}}]}])
    assert other is not None and other[0].content[0].input == {"x": True} and other[0] is not first[1]


def test_cache_is_bounded() -> None:
    cache = MessageCache(limit=10)
    for i in range(100):
        cache.messages([{"role": "user", "content": [{"type": "text", "value": str(i)}]}])
    assert sum(len(g) for gen in (cache._young, cache._old) for g in gen.values()) <= 22


def test_fingerprint_memo_follows_the_message_object() -> None:
    a = Message.model_validate({"role": "assistant", "content": [{"type": "text", "value": "one two"}]})
    b = Message.model_validate({"role": "assistant", "content": [{"type": "text", "value": "three"}]})
    assert Fingerprint.of_message(a) == Fingerprint.of_text("onetwo")
    assert Fingerprint.of_message(a) == Fingerprint.of_text("one two")  # memo hit
    assert Fingerprint.of_message(b) == Fingerprint.of_text("three")
    copy = a.model_copy(update={"content": b.content})
    assert Fingerprint.of_message(copy) == Fingerprint.of_text("three")


# ---------------------------------------------------------------- identity fast path

from lmbridge.core.history import HistoryCore, Last, PendingCall  # noqa: E402

ops = st.lists(
    st.tuples(
        st.sampled_from(["continue", "continue", "continue", "edit", "drop_last", "tool_result", "new_chat"]),
        st.integers(min_value=0, max_value=50),
        st.sampled_from([Last.DONE, Last.DONE, Last.PENDING, Last.CANCELLED]),
    ),
    min_size=1,
    max_size=25,
)


@settings(deadline=None, max_examples=200)
@given(ops)
def test_matching_replayed_objects_decides_as_matching_fresh_copies(script: list[tuple[str, int, Last]]) -> None:
    """The core given the same Message objects again (what the server's cache
    hands it) decides exactly as a core given fresh, equal copies every time."""
    same, fresh = HistoryCore(), HistoryCore()
    history: list[Message] = []
    counter = 0

    def msg(role: str, text: str, calls: tuple[str, ...] = ()) -> Message:
        content: list[dict[str, Any]] = [{"type": "text", "value": text}] if text else []
        content += [{"type": "tool_call", "callId": c, "name": "symposium-agent-action", "input": {}} for c in calls]
        return Message.model_validate({"role": role, "content": content})

    for op, n, last in script:
        counter += 1
        if op == "new_chat" or not history:
            history = [msg("user", f"hello {n}")]
        elif op == "edit" and len(history) > 1:
            cut = n % len(history)
            history = history[:cut] + [msg("user", f"edited {counter}")]
        elif op == "drop_last" and len(history) > 2:
            history = history[:-2] + [msg("user", f"again {counter}")]
        elif op == "tool_result":
            calls = [p.callId for m in history[-1:] for p in m.content if getattr(p, "callId", None)]
            results = [{"type": "tool_result", "callId": c, "content": [{"type": "text", "value": "T" if n % 2 else "skip"}]} for c in calls]
            history = history + [Message.model_validate({"role": "user", "content": results})] if calls else history + [msg("user", f"more {counter}")]
        else:
            history = history + [msg("user", f"more {counter}")]
        if history[-1].role != "user":
            history.append(msg("user", f"tail {counter}"))
        t1 = same.begin("m", list(history), counter)
        t2 = fresh.begin("m", [m.model_copy(deep=True) for m in history], counter)
        assert (t1.kind, t1.session_id, t1.answers, t1.cancel_first, t1.fresh) == (t2.kind, t2.session_id, t2.answers, t2.cancel_first, t2.fresh)
        assert list(t1.context) == list(t2.context) and list(t1.prompt) == list(t2.prompt)
        calls = (f"c{counter}",) if last is Last.PENDING else ()
        answer = msg("assistant", f"answer {counter} {n}", calls)
        pending = [PendingCall(c, "T") for c in calls]
        for core, turn in ((same, t1), (fresh, t2)):
            core.end(turn.session_id, Fingerprint.of_message(answer), last, pending, counter)
        if n % 3:  # VS Code replays the answer (else: it dropped it)
            history = history + [answer]


def test_a_text_never_hits_a_message_cached_by_its_json() -> None:
    cache = MessageCache()
    assert cache.messages([{"role": "user", "content": []}]) is not None
    key = '{"content": [], "role": "user"}'
    for role in ("", "user"):
        got = cache.messages([{"role": role, "content": [{"type": "text", "value": key}]}])
        assert got == fresh([{"role": role, "content": [{"type": "text", "value": key}]}])
