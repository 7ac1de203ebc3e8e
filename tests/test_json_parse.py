"""``wire.parse_json`` (pydantic-core's parser, then ``json.loads`` for what it
refuses) gives exactly the value, or the error, of ``json.loads`` held to RFC 8259
(``NaN``, ``Infinity`` and ``-Infinity``, which Python's parser takes, are errors)."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.rpc import jsonrpc
from lmbridge.rpc.jsonrpc import parse_json


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_loads(data: bytes) -> Any:
    """The reference: ``json.loads`` without Python's non-JSON constants."""
    return json.loads(data, parse_constant=_reject)

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def outcome(parse: Any, data: bytes) -> tuple[str, Any]:
    try:
        return ("value", parse(data))
    except ValueError as exc:
        return ("error", str(exc))


@settings(deadline=None, max_examples=400)
@given(values, st.booleans())
def test_serialised_values_parse_the_same(value: Any, ascii: bool) -> None:
    data = json.dumps(value, ensure_ascii=ascii).encode("utf-8", "surrogatepass")
    a, b = outcome(strict_loads, data), outcome(parse_json, data)
    assert a[0] == b[0] and (a[0] == "error" or same(a[1], b[1]))


@settings(deadline=None, max_examples=400)
@given(st.binary(max_size=40) | st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_arbitrary_bytes_parse_the_same_or_fail_the_same(data: bytes) -> None:
    a, b = outcome(strict_loads, data), outcome(parse_json, data)
    assert a[0] == b[0]
    if a[0] == "value":
        assert same(a[1], b[1])
    else:
        assert a[1] == b[1]  # json's own message


def test_what_the_fast_parser_refuses_goes_to_json() -> None:
    for data in (b'"\\ud800"', b'\xef\xbb\xbf{"a":1}', b"[" * 300 + b"]" * 300):
        assert same(parse_json(data), strict_loads(data))


@settings(deadline=None, max_examples=600)
@given(values, st.integers(min_value=0), st.binary(min_size=1, max_size=2))
def test_damaged_json_parses_the_same_or_fails_the_same(value: Any, where: int, junk: bytes) -> None:
    data = json.dumps(value).encode()
    at = where % (len(data) + 1)
    for damaged in (data[:at] + junk + data[at:], data[:at] + junk + data[at + 1 :]):
        a, b = outcome(strict_loads, damaged), outcome(parse_json, damaged)
        assert a[0] == b[0]
        assert same(a[1], b[1]) if a[0] == "value" else a[1] == b[1]


def test_nan_and_infinity_are_not_json() -> None:
    for data in (b'{"id": NaN}', b"[Infinity]", b"-Infinity"):
        try:
            parse_json(data)
        except ValueError as exc:
            assert "is not JSON" in str(exc)
        else:
            raise AssertionError(f"{data!r} parsed")


# ---------------------------------------------------------------- writing: strict JSON only


def test_a_float_that_is_not_finite_is_written_null_and_the_frame_stays_json() -> None:
    """A VS Code tool call whose arguments hold ``1e400``, ``NaN`` or ``-Infinity`` (the MCP
    SDK parses them) is written with ``null`` there, as JavaScript's ``JSON.stringify`` writes
    them: the shim's ``JSON.parse`` takes the frame, and the call keeps its other arguments."""
    frame = {"jsonrpc": "2.0", "method": "lm/responsePart", "params": {"part": {"type": "tool_call", "input": {
        "big": json.loads("1e400"), "nan": float("nan"), "neg": float("-inf"), "list": [1.5, float("inf")], "keep": "x"}}}}  # fmt: skip
    line = jsonrpc.encode(frame)
    assert b"Infinity" not in line and b"NaN" not in line
    assert parse_json(line)["params"]["part"]["input"] == {"big": None, "nan": None, "neg": None, "list": [1.5, None], "keep": "x"}
    assert jsonrpc.encode_value({"a": 1.5}) == '{"a":1.5}'


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_whatever_a_link_writes_is_strict_json(value: Any) -> None:
    line = jsonrpc.encode({"jsonrpc": "2.0", "id": 1, "result": value})
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert parse_json(line)["id"] == 1  # the strict parser (no NaN, no Infinity) takes it


WRITTEN_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**40), max_value=10**40) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(WRITTEN_VALUES)
def test_encode_json_writes_what_encode_writes(value: Any) -> None:
    """The response parts' fast writer (orjson) gives the value the one frame
    writer gives, for any JSON value: lone surrogates, floats that are not finite (null),
    integers past 64 bits, tuples."""
    fast = jsonrpc.encode_json(value)
    slow = jsonrpc.encode(value)
    assert b"\n" not in fast
    assert same(parse_json(fast), parse_json(slow))
    # As a frame (``line``): the same JSON, then the one newline that ends it.
    assert jsonrpc.encode_json(value, line=True) == fast + b"\n"
