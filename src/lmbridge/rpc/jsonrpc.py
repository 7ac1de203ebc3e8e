"""JSON-RPC 2.0 details shared by every link (the shim's stdio, the agents' stdio, the MCP
relay): parsing a line's JSON, writing a frame as one line, and which ids a request can be
answered by (JSON-RPC 2.0 §4, §5; docs/protocol.md, "Transport"). Pure: no I/O."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_core import from_json

from lmbridge.core.errors import INVALID_REQUEST, METHOD_NOT_FOUND
from lmbridge.core.text import clip


def parse_json(data: bytes | str) -> Any:
    """``json.loads``, 2–3× faster: pydantic-core's parser first; whatever it
    refuses (lone surrogates, a BOM or other encodings, deep nesting, invalid
    JSON) goes to ``json.loads``, whose value or error stands. Where both parse,
    they agree (tests/test_json_parse.py). ``NaN`` and ``Infinity`` are not JSON
    (RFC 8259 §6) and raise ``ValueError`` (Python's own parser takes them; a value
    echoed back would make a frame the peer cannot parse). A number too large for a
    float (``1e400``) still parses, to ``inf``: see ``finite``."""
    try:
        return from_json(data, cache_strings="keys", allow_inf_nan=False)
    except ValueError:
        return json.loads(data, parse_constant=_not_json)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")



def usable_id(rid: object) -> bool:
    """Whether a request can be answered by this id: JSON-RPC 2.0 ids are strings or
    numbers (null only in an error about a request whose id could not be read), and a
    number must be finite to be written back (``1e400`` parses to ``inf``)."""
    if isinstance(rid, str):
        return True
    if isinstance(rid, bool) or not isinstance(rid, int | float):
        return False
    return rid - rid == 0


def _no_json(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _strict_encoder() -> Callable[[Any], str]:
    """``json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode``,
    its C encoder made once, not at each call as ``encode`` makes it (half the cost of
    writing a small frame). Without the circular-reference check: a frame is a tree (a
    cycle would raise ``RecursionError``, not ``ValueError``)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the encoder as it is
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    chunks = make(None, _no_json, json.encoder.encode_basestring, None, ":", ",", False, False, False)
    return lambda value: "".join(chunks(value, 0))


_strict = _strict_encoder()


def encode_value(value: Any) -> str:
    """A value as compact, strict JSON text (RFC 8259), non-ASCII characters as they are: the
    one JSON writer of every link (``encode`` and the daemon's batched ``lm/responsePart``
    frames use it). A float that is not finite (``inf`` from ``1e400``, ``nan``, ``-inf``,
    which Python's parser and the MCP SDK's accept) is written ``null``, as JavaScript's
    ``JSON.stringify`` writes it: the frame stays one the peer parses, and a tool call holding
    one keeps its other arguments (docs/protocol.md, "Transport"). Raises ``TypeError`` for
    what JSON cannot hold."""
    try:
        return _strict(value)
    except ValueError:
        return _strict(finite(value))


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite made ``None`` (containers copied)."""
    if isinstance(value, float):
        return value if value - value == 0 else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
#: How a frame's text becomes bytes. The only characters UTF-8 cannot encode are lone
#: surrogates (JSON allows them escaped, JavaScript strings hold them, ``parse_json`` makes
#: them from ``\\udc00``); in JSON text they can only sit inside a string, where
#: "backslashreplace" writes exactly JSON's escape for them: ``\\udc00``.
TEXT_ERRORS = "backslashreplace"


def encode(frame: Any) -> bytes:
    """One frame as one line of newline-delimited JSON, UTF-8 (the one frame encoder of
    every link). Raises ``TypeError``/``ValueError`` for what JSON cannot hold.

    >>> encode({"jsonrpc": "2.0", "id": 1, "result": "é\\udc00"})
    b'{"jsonrpc":"2.0","id":1,"result":"\\xc3\\xa9\\\\udc00"}\\n'
    """
    return (encode_value(frame) + "\n").encode("utf-8", TEXT_ERRORS)


def encode_json(value: Any, line: bool = False) -> bytes:
    """``value`` (JSON types only: dicts with string keys, lists, tuples, strings, numbers,
    booleans, None) as UTF-8 JSON: the JSON ``encode_value`` writes, encoded as ``encode``
    encodes it (the same value for any reader: tests/test_json_parse.py), written by orjson:
    ~30× faster than pydantic-core's serializer for a long string here (a 4 KiB chunk's text:
    docs/performance.md, "Streaming: the agent's pipe read directly"). ``line``: with the
    newline that ends a frame, written in the same buffer (a whole frame as ``encode`` would
    write it, with no copy made to add the newline). What orjson refuses (a lone surrogate,
    an integer past 64 bits) is written by ``encode_value``; a float that is not finite is
    ``null`` in both. It takes more types than JSON's (dataclasses, dates, enums), so only
    values built of JSON types may come here: the daemon's response parts (``daemon.stdio``)."""
    import orjson  # at the first response part, not before ``initialize`` is answered (it brings uuid and platform)

    try:
        return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE) if line else orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        return (encode_value(value) + ("\n" if line else "")).encode("utf-8", TEXT_ERRORS)


def error_frame(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response (§5): ``rid`` null when the request's id could not be read."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "error": error, "id": rid}


# ---------------------------------------------------------------- what a frame is (a server's rules)

_REQUEST_KEYS = frozenset({"jsonrpc", "method", "params", "id"})


def valid_request(request: Any) -> bool:
    """jsonrpcserver's request-schema.json (draft 4) for one request, checked in O(1): its
    own check, with jsonschema, builds the repr of every request that is not a batch (the
    "oneOf" branch that fails), 14 ms for a 2 MB chat request."""
    if type(request) is not dict or not request.keys() <= _REQUEST_KEYS:
        return False
    if request.get("jsonrpc") != "2.0" or type(request.get("method")) is not str:
        return False
    if "id" in request and (type(request["id"]) is bool or not isinstance(request["id"], str | int | float | None)):
        return False
    return "params" not in request or isinstance(request["params"], list | dict)


def validate_request(request: Any) -> Any:
    """jsonrpcserver's ``validator``: a request, or a non-empty batch of them; raises ``ValueError`` if not."""
    if valid_request(request) or (type(request) is list and request and all(valid_request(r) for r in request)):
        return request
    raise ValueError("not a JSON-RPC 2.0 request")


@dataclass(frozen=True, slots=True)
class RequestFrame:
    """A valid JSON-RPC 2.0 request (``has_id``) or notification: ``frame`` as read."""

    frame: dict[str, Any]
    method: str
    id: Any
    has_id: bool


@dataclass(frozen=True, slots=True)
class ResponseFrame:
    """A response (``result`` or ``error``, no ``method``): to a request of ours, or to none."""

    frame: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Invalid:
    """Not a request that can be handled: answered with this error (``id`` null when the
    request's id cannot be read or used), never if it is a notification's fault alone."""

    id: Any
    code: int
    message: str


def classify(value: Any, known: Callable[[str], bool]) -> RequestFrame | ResponseFrame | Invalid | None:
    """What one JSON value read by a server (the daemon's stdin; a batch's element) is, by
    the rules of docs/protocol.md, "Transport", in their order: not an object, -32600 with
    id null; a response (``ResponseFrame``); an id that is not a string, a finite number or null,
    -32600 with id null; an id but no string ``method``, -32600 with that id; a method
    ``known`` does not know, -32601 with the id (None: nothing, for a notification); not a
    JSON-RPC 2.0 request object (``jsonrpc`` not ``"2.0"``, unknown members, ``params``
    neither object nor array), -32600 with the id if it has one; else a ``RequestFrame``. Pure.

    >>> classify({"jsonrpc": "2.0", "id": 7, "method": 123}, lambda m: True)
    Invalid(id=7, code=-32600, message='invalid request: method must be a string')
    """
    # What a well-formed request is, checked at once (a token count is read thousands of
    # times a second); whatever this does not accept goes through the rules one by one
    # (``_classify``), which give it the same answer (tests/test_peer.py).
    if type(value) is dict and value.keys() <= _REQUEST_KEYS and value.get("jsonrpc") == "2.0":
        method, rid = value.get("method"), value.get("id")
        if type(method) is str and (rid is None or type(rid) is int or type(rid) is str) and known(method):
            params = value.get("params", value)  # no params: the value itself, a dict
            if type(params) is dict or type(params) is list:
                return RequestFrame(value, method, rid, "id" in value)
    return _classify(value, known)


def _classify(value: Any, known: Callable[[str], bool]) -> RequestFrame | ResponseFrame | Invalid | None:
    """``classify``, each rule in its turn."""
    if type(value) is not dict:
        return Invalid(None, INVALID_REQUEST, "invalid request: not a JSON object")
    if "method" not in value and ("result" in value or "error" in value):
        return ResponseFrame(value)
    rid = value.get("id")
    if not (rid is None or usable_id(rid)):
        return Invalid(None, INVALID_REQUEST, "invalid request: id must be a string, a finite number or null")
    method = value.get("method")
    has_id = "id" in value
    if has_id and not isinstance(method, str):
        # Not a request, but its id is readable: the error carries it, so the caller is not left waiting.
        return Invalid(rid, INVALID_REQUEST, "invalid request: method must be a string")
    if isinstance(method, str) and not known(method):
        return Invalid(rid, METHOD_NOT_FOUND, f"method not found: {clip(method, 200)}") if has_id else None
    if not valid_request(value):
        return Invalid(rid if has_id else None, INVALID_REQUEST, "invalid request: not a JSON-RPC 2.0 request object")
    assert isinstance(method, str)
    return RequestFrame(value, method, rid, has_id)
