"""The daemon's stdout batches (``daemon.stdio.encode_batch``): what is queued in one
event-loop round goes out as one write, each frame encoded as ``jsonrpc.encode`` encodes
it, consecutive text (or same-id thinking) parts of one request as one part, their values
joined; everything else as it came, in order."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.daemon.stdio import Queued, encode_batch
from lmbridge.rpc.jsonrpc import encode


def part_frame(rid: Any, part: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "lm/responsePart", "params": {"requestId": rid, "part": part}}


def test_a_run_of_text_parts_is_one_frame_encoded_as_encode_does() -> None:
    batch: list[Queued] = [(1, {"type": "text", "value": "é\n"}), (1, {"type": "text", "value": '"b'}), b'{"jsonrpc":"2.0","id":1,"result":{}}\n', (1, {"type": "text", "value": "c"})]
    assert encode_batch(batch) == encode(part_frame(1, {"type": "text", "value": 'é\n"b'})) + batch[2] + encode(part_frame(1, {"type": "text", "value": "c"}))  # type: ignore[operator]


def test_parts_of_other_requests_or_kinds_are_not_joined() -> None:
    batch: list[Queued] = [
        (1, {"type": "text", "value": "a"}), ("1", {"type": "text", "value": "b"}), (1, {"type": "thinking", "value": "c", "id": "x"}),
        (1, {"type": "thinking", "value": "d", "id": "y"}), (1, {"type": "tool_call", "callId": "t"}),
    ]
    assert encode_batch(batch) == b"".join(encode(part_frame(rid, part)) for rid, part in batch)  # type: ignore[misc]


def joined_by_the_rule(batch: list[Queued]) -> list[Any]:
    """The frames ``encode_batch`` writes, as values, by the rule spelled out."""
    out: list[Any] = []
    for item in batch:
        if isinstance(item, bytes):
            out.append(json.loads(item))
            continue
        rid, part = item
        last = out[-1]["params"] if out and isinstance(out[-1], dict) and out[-1].get("method") == "lm/responsePart" else None
        if (
            last is not None and part["type"] in ("text", "thinking") and last["part"]["type"] == part["type"]
            and last["requestId"] == rid and type(last["requestId"]) is type(rid) and last["part"].get("id") == part.get("id")
        ):
            last["part"] = {**last["part"], "value": last["part"]["value"] + part["value"]}
        else:
            out.append(part_frame(rid, dict(part)))
    return out


parts = st.tuples(
    st.sampled_from([1, 2, "1"]),
    st.one_of(
        st.builds(lambda v: {"type": "text", "value": v}, st.text(max_size=5)),
        st.builds(lambda v, i: {"type": "thinking", "value": v, "id": i}, st.text(max_size=5), st.sampled_from(["x", "y"])),
        st.just({"type": "tool_call", "callId": "t"}),
    ),
)
frames = st.builds(lambda i: b'{"jsonrpc":"2.0","id":%d,"result":null}\n' % i, st.integers(0, 9))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(parts, parts, frames), max_size=20))
def test_any_batch_is_its_frames_in_order(batch: list[Queued]) -> None:
    data = encode_batch(batch)
    assert data == b"" or data.endswith(b"\n")
    assert [json.loads(line) for line in data.splitlines()] == joined_by_the_rule(batch)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, "r", 2.5, None]), st.text() | st.text().map(lambda t: t + "\udc00"), st.sampled_from(["text", "thinking"]))
def test_a_batch_of_one_part_is_that_frame_as_encode_writes_it(rid: Any, value: str, kind: str) -> None:
    """The streaming case: one merged part a write. Its frame is written whole, with its
    newline (a lone surrogate escaped as ``encode`` escapes it)."""
    part = {"type": kind, "value": value} if kind == "text" else {"type": kind, "value": value, "id": "x"}
    data = encode_batch([(rid, part)])
    assert data.endswith(b"\n") and b"\n" not in data[:-1]
    assert json.loads(data) == part_frame(rid, part) == json.loads(encode(part_frame(rid, part)))
    if value.encode("utf-8", "surrogatepass") == value.encode("utf-8", "backslashreplace"):  # no lone surrogate: byte for byte
        assert data == encode(part_frame(rid, part))
