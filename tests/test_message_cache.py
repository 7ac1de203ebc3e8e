"""``MessageCache`` (the server's validated-message cache) and the fingerprint memo:
a cached message is exactly what validating it gives, and nothing is confused."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.history import Fingerprint
from lmbridge.wire import ChatResponseParams, Message, MessageCache

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "value": st.text(max_size=8)}),
    st.fixed_dictionaries({"type": st.just("thinking"), "value": st.text(max_size=8)}, optional={"id": st.text(max_size=3)}),
    st.fixed_dictionaries({"type": st.just("tool_call"), "callId": st.text(max_size=3), "name": st.text(max_size=3), "input": st.dictionaries(st.text(max_size=3), json_values, max_size=3)}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "callId": st.text(max_size=3), "content": st.lists(st.fixed_dictionaries({"type": st.just("text"), "value": st.text(max_size=5)}), max_size=2)}),
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
    assert len(cache._young) + len(cache._old) <= 21


def test_fingerprint_memo_follows_the_message_object() -> None:
    a = Message.model_validate({"role": "assistant", "content": [{"type": "text", "value": "one two"}]})
    b = Message.model_validate({"role": "assistant", "content": [{"type": "text", "value": "three"}]})
    assert Fingerprint.of_message(a) == Fingerprint.of_text("onetwo")
    assert Fingerprint.of_message(a) == Fingerprint.of_text("one two")  # memo hit
    assert Fingerprint.of_message(b) == Fingerprint.of_text("three")
    copy = a.model_copy(update={"content": b.content})
    assert Fingerprint.of_message(copy) == Fingerprint.of_text("three")
