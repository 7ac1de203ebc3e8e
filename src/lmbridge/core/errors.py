"""The one table of JSON-RPC error codes lmbridge sends or reads, on both links (the shim's
stdio and the agents'; docs/protocol.md, "Errors"), and how their messages start. Every
module names a code from here; the shim's ``ErrorCode`` (vscode-shim/src/chat/wire.ts) is
generated from ``SHIM_CODES`` (``make wire``). Pure: no I/O."""

from __future__ import annotations

from typing import Any

# ---------------------------------------------------------------- JSON-RPC 2.0 (§5.1)

#: A line that is not JSON.
PARSE_ERROR = -32700
#: A frame that is not a request, or whose id cannot be used.
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
#: A request's params are not what its method takes, or what they ask is refused.
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# ---------------------------------------------------------------- ACP's (the agent link)

#: ACP ``ErrorCode`` ``auth_required``: the agent needs a sign-in (core/auth.py).
AUTH_REQUIRED = -32000
#: ACP's "Resource not found": no such file (``fs/read_text_file``), no such terminal.
RESOURCE_NOT_FOUND = -32002

# ---------------------------------------------------------------- lmbridge's (server errors)

#: A chat request the agent could not answer (it could not start, crashed, answered with an
#: error, the daemon is stopping; ``error.data`` may say more, e.g. ``auth_required``).
AGENT_FAILED = -32000
#: An agent's request refused (a command the user did not approve), or left unserved because
#: its session ended.
REFUSED = -32000
#: A ``client/*`` request the shim cannot serve: it is gone, or does not offer the capability.
CLIENT_GONE = -32010
#: A ``client/*`` request the shim did not answer in time.
CLIENT_TIMEOUT = -32011

#: How the message of each JSON-RPC 2.0 code starts (``"method not found: x"``).
PREFIXES: dict[int, str] = {
    PARSE_ERROR: "parse error",
    INVALID_REQUEST: "invalid request",
    METHOD_NOT_FOUND: "method not found",
    INVALID_PARAMS: "invalid params",
    INTERNAL_ERROR: "internal error",
}

#: The codes the shim names (wire.ts ``ErrorCode``), by their TypeScript name.
SHIM_CODES: dict[str, int] = {
    "ParseError": PARSE_ERROR,
    "InvalidRequest": INVALID_REQUEST,
    "MethodNotFound": METHOD_NOT_FOUND,
    "InvalidParams": INVALID_PARAMS,
    "InternalError": INTERNAL_ERROR,
    "AgentFailed": AGENT_FAILED,
    "ResourceNotFound": RESOURCE_NOT_FOUND,
    "ClientGone": CLIENT_GONE,
    "ClientTimeout": CLIENT_TIMEOUT,
}


def message(code: int, detail: str) -> str:
    """``detail`` after the code's prefix (``message(METHOD_NOT_FOUND, "x")`` is
    ``"method not found: x"``); a code without one: ``detail`` as it is."""
    prefix = PREFIXES.get(code)
    return f"{prefix}: {detail}" if prefix else detail


def error(code: int, detail: str) -> dict[str, Any]:
    """The JSON-RPC error object ``{"code", "message"}`` (``message``'s rule)."""
    return {"code": code, "message": message(code, detail)}
