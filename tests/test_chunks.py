"""Consecutive plain text chunks merged before the turn machine (``core.chunks``, the rule;
``daemon.mailbox``, the session actor's mailbox that applies it): row by row, then any
sequence: order and content kept, nothing merged across anything that is not a plain
chunk of the same key, and what the renderer shows is the same text."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.acp.connection import Incoming, Response
from lmbridge.core import chunks
from lmbridge.core.present import TurnRenderer
from lmbridge.daemon.mailbox import ChunkMailbox


def chunk(text: str, kind: str = "agent_message_chunk", sid: str = "s", **extra: Any) -> dict[str, Any]:
    return {"sessionId": sid, "update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}, **extra}}


def text_of(params: dict[str, Any]) -> str:
    return str(params["update"]["content"]["text"])


TOOL = {"sessionId": "s", "update": {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read"}}
META = chunk("notice", _meta={"claudeCode": {"notice": "x"}})

# (updates, what ``merge`` gives: a str is a merged message chunk of session "s" with that
# text, anything else the very object given)
ROWS: list[tuple[str, list[Any], list[Any]]] = [
    ("two message chunks merge", [chunk("a"), chunk("b")], ["ab"]),
    ("a run of three", [chunk("a"), chunk(" b"), chunk("\nc")], ["a b\nc"]),
    ("a lone chunk is the same object", [TOOL], [TOOL]),
    ("a tool call between is kept in its place", [chunk("a"), TOOL, chunk("b")], [chunk("a"), TOOL, chunk("b")]),
    ("a chunk with _meta (a notice) is not merged, nor merged across", [chunk("a"), META, chunk("b")], [chunk("a"), META, chunk("b")]),
    ("message then thought: two kinds", [chunk("a"), chunk("b", "agent_thought_chunk")], [chunk("a"), chunk("b", "agent_thought_chunk")]),
    ("two sessions", [chunk("a"), chunk("b", sid="t")], [chunk("a"), chunk("b", sid="t")]),
    ("two messageIds", [chunk("a", messageId="1"), chunk("b", messageId="2")], [chunk("a", messageId="1"), chunk("b", messageId="2")]),
    ("the same messageId merges", [chunk("a", messageId="1"), chunk("b", messageId="1")], [chunk("ab", messageId="1")]),
    ("messageId null and absent are the same", [chunk("a", messageId=None), chunk("b")], [chunk("ab", messageId=None)]),
    ("empty texts merge too", [chunk(""), chunk("b"), chunk("")], ["b"]),
]


def expected(row: list[Any]) -> list[Any]:
    return [chunk(x) if isinstance(x, str) else x for x in row]


@pytest.mark.parametrize(("updates", "want"), [(u, w) for _, u, w in ROWS], ids=[name for name, _, _ in ROWS])
def test_merge_rows(updates: list[Any], want: list[Any]) -> None:
    got = chunks.merge(updates)
    assert got == expected(want)
    for item in got:  # what is not merged is the object given, not a copy
        if any(item is u for u in updates):
            continue
        assert chunks.plain_chunk(item) is not None


NOT_PLAIN: list[tuple[str, Any]] = [
    ("params not an object", [1]),
    ("a field beside sessionId and update", {**chunk("a"), "_meta": {}}),
    ("sessionId not a string", chunk("a", sid=1)),  # type: ignore[arg-type]
    ("update not an object", {"sessionId": "s", "update": "x"}),
    ("another kind", {"sessionId": "s", "update": {"sessionUpdate": "plan", "content": {"type": "text", "text": "a"}}}),
    ("an unhashable kind", {"sessionId": "s", "update": {"sessionUpdate": ["agent_message_chunk"], "content": {"type": "text", "text": "a"}}}),
    ("update _meta", chunk("a", _meta={})),
    ("an unknown update field", chunk("a", other=1)),
    ("messageId not a string", chunk("a", messageId=3)),
    ("content not text", {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "text": "a"}}}),
    ("content with annotations", {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a", "annotations": None}}}),
    ("text not a string", {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": 1}}}),
    ("no content", {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk"}}),
    ("no sessionId", {"sessionID": "s", "update": chunk("a")["update"]}),
    ("no update", {"sessionId": "s", "updates": chunk("a")["update"]}),
    ("no sessionUpdate", {"sessionId": "s", "update": {"kind": "agent_message_chunk", "content": {"type": "text", "text": "a"}}}),
    ("content without type", {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"kind": "text", "text": "a"}}}),
    ("content without text", {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "value": "a"}}}),
    ("a third update field, not messageId", chunk("a", message_id="m")),
]


@pytest.mark.parametrize("params", [p for _, p in NOT_PLAIN], ids=[n for n, _ in NOT_PLAIN])
def test_not_plain_is_never_merged(params: Any) -> None:
    assert chunks.plain_chunk(params) is None
    got = chunks.merge([chunk("a"), params, chunk("b")])
    assert got[1] is params and len(got) == 3


def plain_by_its_definition(params: Any) -> tuple[chunks.Key, str] | None:
    """``plain_chunk``'s docstring, spelled out plainly (the reference for the fast one)."""
    if type(params) is not dict or set(params) != {"sessionId", "update"}:
        return None
    sid, update = params["sessionId"], params["update"]
    if type(sid) is not str or type(update) is not dict or set(update) - {"messageId"} != {"sessionUpdate", "content"}:
        return None
    kind, content, mid = update["sessionUpdate"], update["content"], update.get("messageId")
    if type(kind) is not str or kind not in chunks.KINDS or not (mid is None or type(mid) is str):
        return None
    if type(content) is not dict or set(content) != {"type", "text"} or content["type"] != "text" or type(content["text"]) is not str:
        return None
    return (sid, kind, mid), content["text"]


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from(["", "text", "s", "agent_message_chunk", "m1"]))
names = st.sampled_from(["sessionId", "update", "sessionUpdate", "content", "type", "text", "messageId", "_meta", "x"])


def mutated(value: Any, draw: Any) -> Any:
    """``value`` (a plain chunk's, or one of its members) with members dropped, added or replaced, at any depth."""
    if type(value) is not dict or draw(st.integers(0, 5)) == 0:
        return draw(st.one_of(json_leaf, st.just(value), st.lists(json_leaf, max_size=2))) if draw(st.booleans()) else value
    out = {k: mutated(v, draw) for k, v in value.items() if draw(st.integers(0, 7)) != 0}
    if draw(st.integers(0, 5)) == 0:
        out[draw(names)] = draw(json_leaf)
    return out


@st.composite
def near_plain(draw: Any) -> Any:
    kind = draw(st.sampled_from([*chunks.KINDS, "plan"]))
    extra = draw(st.sampled_from([{}, {"messageId": None}, {"messageId": "m1"}]))
    return mutated(chunk(draw(texts), kind, **extra), draw)


# -- any sequence -------------------------------------------------------------------

texts = st.text(alphabet="ab \n\u00e9\U0001f600", max_size=6)
plain = st.builds(
    lambda text, kind, sid, mid: chunk(text, kind, sid, **({} if mid == "-" else {"messageId": mid})),
    texts, st.sampled_from(chunks.KINDS), st.sampled_from(["s", "t"]), st.sampled_from(["-", None, "m1", "m2"]),
)
other = st.sampled_from([TOOL, META, NOT_PLAIN[2][1], NOT_PLAIN[9][1], {"sessionId": "s", "update": {"sessionUpdate": "usage_update", "used": 1, "size": 2}}])
sequences = st.lists(st.one_of(plain, plain, other), max_size=25)


@settings(max_examples=500, deadline=None)
@given(st.one_of(plain, near_plain()))
def test_plain_chunk_is_its_definition(params: Any) -> None:
    assert chunks.plain_chunk(params) == plain_by_its_definition(params)


def segments(updates: list[Any]) -> list[Any]:
    """Each non-plain update as itself (by identity), each run of plain chunks of one key as (key, its text)."""
    out: list[Any] = []
    for u in updates:
        c = chunks.plain_chunk(u)
        if c is None:
            out.append(("other", id(u)))
        elif out and out[-1][0] == "plain" and out[-1][1] == c[0]:
            out[-1] = ("plain", c[0], out[-1][2] + c[1])
        else:
            out.append(("plain", c[0], c[1]))
    return out


def shown(updates: list[Any]) -> list[tuple[str, str]]:
    """What a renderer shows, consecutive parts of one type joined (as the server's writer does)."""
    r = TurnRenderer()
    parts: list[tuple[str, str]] = []
    for u in updates:
        for p in r.update(u["update"]):
            if parts and parts[-1][0] == p["type"] and p["type"] in ("text", "thinking"):
                parts[-1] = (p["type"], parts[-1][1] + p["value"])
            else:
                parts.append((p["type"], p.get("value", "")))
    return parts


@settings(max_examples=300, deadline=None)
@given(sequences)
def test_merge_keeps_order_and_content(updates: list[Any]) -> None:
    got = chunks.merge(updates)
    assert segments(got) == segments(updates)  # the same texts, in order, never across anything else
    keys = [chunks.plain_chunk(u) for u in got]
    for a, b in zip(keys, keys[1:], strict=False):  # and every run merged into one
        assert a is None or b is None or a[0] != b[0]
    assert shown(got) == shown(updates)


# -- the mailbox ---------------------------------------------------------------------


def incoming(params: Any) -> Incoming:
    return Incoming("session/update", params)


def receive_all(messages: list[Any], close: bool = False, merging: bool = True) -> list[Any]:
    async def run() -> list[Any]:
        send, receive = anyio.create_memory_object_stream[Any](math.inf)
        box = ChunkMailbox(receive, lambda: merging)
        for m in messages:
            send.send_nowait(m)
        if close:
            send.close()
            return [m async for m in box]
        out = []
        while True:
            try:
                out.append(box.receive_nowait())
            except anyio.WouldBlock:
                return out

    return anyio.run(run)


def test_mailbox_merges_queued_chunks_only() -> None:
    response = Response(1, {"stopReason": "end_turn"})
    request = Incoming("session/update", chunk("r"), id=7)  # a request, even named so: never merged
    bad = Incoming("session/update", chunk("x"), bad_id=True)
    other_method = Incoming("session/other", chunk("o"))
    own = object()  # a message of the actor's own
    messages = [incoming(chunk("a")), incoming(chunk("b")), own, incoming(chunk("c")), request, bad, other_method,
                incoming(chunk("d")), incoming(chunk("e")), response, incoming(chunk("f"))]  # fmt: skip
    got = receive_all(messages)
    assert [text_of(m.params) if isinstance(m, Incoming) and m.id is None and not m.bad_id and m.method == "session/update" else m for m in got] == [
        "ab", own, "c", request, bad, other_method, "de", response, "f",
    ]  # fmt: skip


def test_mailbox_merges_nothing_unless_merging() -> None:
    messages = [incoming(chunk("a")), incoming(chunk("b"))]
    assert receive_all(messages, merging=False) == messages


def test_mailbox_gives_the_held_message_before_its_end() -> None:
    tail = Response(2)
    assert [m.params if isinstance(m, Incoming) else m for m in receive_all([incoming(chunk("a")), incoming(chunk("b")), tail], close=True)] == [chunk("ab"), tail]


@settings(max_examples=200, deadline=None)
@given(sequences, st.booleans())
def test_mailbox_applies_the_rule(updates: list[Any], close: bool) -> None:
    got = receive_all([incoming(u) for u in updates], close=close)
    assert [m.params for m in got] == chunks.merge(updates)
    assert all(type(m) is Incoming and m.id is None for m in got)


# -- the fingerprint: each text hashed once, the same digests ---------------------------


class _Parts:
    def send(self, part: Any) -> None:
        pass

    def stopped(self) -> bool:
        return False


def job() -> Any:
    from lmbridge.core.history import Decision, Kind
    from lmbridge.core.messages import AgentSpec
    from lmbridge.daemon.job import ChatRequest, Job

    return Job(Decision(Kind.NEW_CHAT, "s"), ChatRequest(AgentSpec(id="a", command="a"), (), None, _Parts()))


parts = st.lists(
    st.one_of(
        st.builds(lambda v: {"type": "text", "value": v}, texts),
        st.builds(lambda v: {"type": "thinking", "value": v}, texts),
        st.builds(lambda i: {"type": "tool_call", "callId": f"c{i}", "name": "x", "input": {}}, st.integers(0, 9)),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(parts)
def test_fingerprint_is_the_digest_of_what_was_emitted(emitted: list[dict[str, Any]]) -> None:
    from lmbridge.core.history import Fingerprint

    j = job()
    for p in emitted:
        j.count(p)
    f = j.fingerprint()
    text = "".join(p["value"] for p in emitted if p["type"] == "text")
    both = "".join(p["value"] for p in emitted if p["type"] in ("text", "thinking"))
    assert f.text == Fingerprint.of_text(text).text
    assert f.shown == Fingerprint.of_text(both).text
    assert f.call_ids == tuple(p["callId"] for p in emitted if p["type"] == "tool_call")


def test_text_alone_is_hashed_once() -> None:
    j = job()
    j.count({"type": "text", "value": "a b"})
    assert j._shown is None  # the text's digest is the shown one: no second hash
    j.count({"type": "thinking", "value": "t"})
    j.count({"type": "text", "value": "c"})
    assert j.fingerprint().shown != j.fingerprint().text
