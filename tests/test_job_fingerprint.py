"""``daemon.job.Job``'s fingerprint: digested when the response ends (or past
``UNHASHED`` characters kept), it is the same whatever the parts and wherever the
digest ran, equal to the history core's digest of what was sent."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core.history import PREFIXES, Decision, Fingerprint, Kind, _digest
from lmbridge.core.messages import AgentSpec
from lmbridge.core.present import Part
from lmbridge.daemon import job as job_module
from lmbridge.daemon.job import ChatRequest, Job


class _Parts:
    def __init__(self) -> None:
        self.stopped_ = False

    def send(self, part: Any) -> None:
        pass

    def stopped(self) -> bool:
        return self.stopped_


def _job() -> Job:
    return Job(Decision(Kind.NEW_CHAT, "s1"), ChatRequest(AgentSpec(id="a", command="a"), (), None, _Parts()))


_TEXT = st.text(alphabet=st.sampled_from("ab \n\t\u00e9\u4e2d\U0001f600\u3000"), max_size=12)
_PART = st.one_of(
    st.builds(lambda v: {"type": "text", "value": v}, _TEXT),
    st.builds(lambda v: {"type": "thinking", "value": v}, _TEXT),
    st.builds(lambda i: {"type": "tool_call", "callId": f"c{i}", "name": "t", "input": {}}, st.integers(0, 99)),
)


def expected(parts: list[Part], cancelled: bool) -> Fingerprint:
    """The fingerprint by its definition (``history.Fingerprint``): the digest of all text,
    of text and thinking in order when any thinking was shown, and of the text up to each
    of the last ``PREFIXES`` text parts' starts when the response was stopped."""
    texts = [p["value"] for p in parts if p["type"] == "text"]
    text = _digest("".join(texts))
    thought = any(p["type"] == "thinking" for p in parts)
    shown = _digest("".join(p["value"] for p in parts if p["type"] in ("text", "thinking"))) if thought else text
    prefixes = tuple(_digest("".join(texts[:i])) for i in range(1, len(texts)))[-PREFIXES:] if cancelled else ()
    calls = tuple(p["callId"] for p in parts if p["type"] == "tool_call")
    return Fingerprint(text, calls, shown, prefixes)


@given(parts=st.lists(_PART, max_size=80), bound=st.integers(0, 40), cancelled=st.booleans(), early=st.integers(0, 80))
def test_the_fingerprint_is_the_digest_of_what_was_sent_wherever_it_was_digested(parts: list[Part], bound: int, cancelled: bool, early: int) -> None:
    """``bound`` (``UNHASHED``) small digests some parts while they stream; ``early``: a
    fingerprint taken part-way (the history actor's, when a request is cancelled) changes
    nothing of the one at the end."""
    mp = pytest.MonkeyPatch()
    mp.setattr(job_module, "UNHASHED", bound)
    try:
        job = _job()
        for i, part in enumerate(parts):
            if i == early:
                assert job.fingerprint() == expected(parts[:i], False)
            job.count(part)
        job.request.parts.stopped_ = cancelled  # type: ignore[attr-defined]
        assert job.fingerprint() == expected(parts, cancelled)
        assert job.fingerprint() == expected(parts, cancelled)  # taken twice, the same
    finally:
        mp.undo()


def test_text_is_kept_undigested_until_the_bound_then_digested_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_module, "UNHASHED", 10)
    job = _job()
    job.count({"type": "text", "value": "12345"})
    job.count({"type": "thinking", "value": "12345"})
    assert job._unhashed_chars == 10 and len(job._unhashed) == 2
    job.count({"type": "text", "value": "x"})  # 11 > 10
    assert job._unhashed == [] and job._unhashed_chars == 0
    assert job.fingerprint() == expected([{"type": "text", "value": "12345"}, {"type": "thinking", "value": "12345"}, {"type": "text", "value": "x"}], False)
