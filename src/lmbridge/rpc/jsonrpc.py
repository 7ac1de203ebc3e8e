"""JSON-RPC 2.0 details shared by every link (the shim's stdio, the agents' stdio, the MCP
relay): parsing a line's JSON, and which ids a request can be answered by (JSON-RPC 2.0 §4,
§5; docs/protocol.md, "Transport")."""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import from_json


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
