"""The streaming fast path of ``TurnRenderer.update`` (no pydantic per chunk)
gives exactly what validating with the ACP model gives, for any chunk shape."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.core import present as render

values = st.one_of(st.none(), st.text(max_size=5), st.integers(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.lists(st.integers(), max_size=2))
content = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", 3])},
    optional={"text": st.one_of(st.text(max_size=20), values), "_meta": values, "annotations": values, "other": values},
)
updates = st.fixed_dictionaries(
    {"sessionUpdate": st.sampled_from(["agent_message_chunk", "agent_thought_chunk"])},
    optional={"content": st.one_of(content, values), "messageId": values, "_meta": values, "extra": values},
)


def slow(raw: dict[str, Any]) -> list[dict[str, Any]]:
    update = render.validate(render.UPDATE_MODELS[raw["sessionUpdate"]], raw)
    if update is None:
        return []
    text = render.content_text(update.content)
    kind = "text" if raw["sessionUpdate"] == "agent_message_chunk" else "thinking"
    return [{"type": kind, "value": text}] if text else []


@settings(deadline=None, max_examples=300)
@given(updates)
def test_fast_path_matches_the_acp_model(raw: dict[str, Any]) -> None:
    assert render.TurnRenderer().update(raw) == slow(raw)


def test_plain_chunks_take_the_fast_path() -> None:
    raw = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}, "messageId": "m1", "_meta": {}}
    assert render._plain_text(raw) == "hi"
    assert render._plain_text({**raw, "content": {"type": "text", "text": "hi", "annotations": {"priority": 1}}}) is None


@given(st.text())
def test_squeezed_is_the_text_without_whitespace(text: str) -> None:
    from lmbridge.core.history import squeezed

    assert squeezed(text) == "".join(text.split()).encode()
    half = len(text) // 2
    assert squeezed(text[:half]) + squeezed(text[half:]) == squeezed(text)
