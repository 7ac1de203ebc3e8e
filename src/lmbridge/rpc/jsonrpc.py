"""JSON-RPC 2.0 details shared by every link (the shim's stdio, the agents' stdio, the MCP
relay): parsing a line's JSON, writing a frame as one line, and which ids a request can be
answered by (JSON-RPC 2.0 §4, §5; docs/protocol.md, "Transport"). Pure: no I/O."""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import from_json

#: JSON-RPC 2.0 "Invalid Request" (§5.1): a frame that is not a request, or whose id cannot be used.
INVALID_REQUEST = -32600
#: JSON-RPC 2.0 "Parse error" (§5.1): a line that is not JSON.
PARSE_ERROR = -32700


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


#: A value as compact JSON text, non-ASCII characters as they are (the one JSON writer of
#: every link: ``encode`` and the daemon's batched ``lm/responsePart`` frames use it).
encode_value = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
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


def error_frame(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response (§5): ``rid`` null when the request's id could not be read."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "error": error, "id": rid}
