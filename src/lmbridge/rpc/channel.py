"""The daemon → shim channel: requests and notifications the daemon sends the shim.

The shim ↔ daemon link is one JSON-RPC 2.0 peer in each direction (docs/protocol.md,
"Daemon → shim"). The shim says what it serves in ``initialize``'s
``clientCapabilities`` (``fs``, ``terminal``, ``sessionState``); the daemon sends
``client/*`` requests and notifications only for what it offers, and keeps to itself
otherwise (the console, replay, older shims).

``ClientChannel`` is the seam the rest of the daemon codes against; ``ShimChannel`` is
the one over the daemon's stdio: it draws the request ids (strings ``"lmbridge-<n>"``,
never a shim's id), keeps the requests in flight, and is handed every response frame
the daemon reads (``deliver``). Rules (docs/protocol.md):

* every request ends exactly once: with the shim's result, its error (``ClientError``),
  no answer within ``timeout`` (``ClientTimeout``), or the shim gone (``ClientGone``:
  at once for a request made after that);
* a response to no request in flight (late, after a timeout, or never asked) is not
  answered and not delivered: ``deliver`` returns False and the caller logs it bounded;
* no I/O here: frames go out through the ``send`` callable (the stdio writer's queue).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import anyio

from lmbridge.core.errors import CLIENT_GONE, CLIENT_TIMEOUT, INTERNAL_ERROR
from lmbridge.rpc.peer import Outgoing

#: The prefix of every id the daemon gives a request it sends the shim.
ID_PREFIX = "lmbridge-"
#: Seconds a ``client/*`` request waits for the shim's answer, unless the caller says.
DEFAULT_TIMEOUT = 30.0
#: Characters of a shim's error message kept.
MESSAGE_LIMIT = 2000

#: JSON-RPC 2.0 / lmbridge error codes of a failed ``client/*`` request, as the daemon
#: passes them on to an agent (docs/protocol.md, "Daemon → shim").


class ClientFailed(Exception):
    """A ``client/*`` request that did not succeed: ``code`` and ``message`` as a JSON-RPC
    error object (``error()``), ``data`` when the shim gave one."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def error(self) -> dict[str, Any]:
        """The JSON-RPC error object to pass on."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


class ClientError(ClientFailed):
    """The shim answered the request with a JSON-RPC error (its code, message and data)."""


class ClientTimeout(ClientFailed):
    """The shim did not answer within the request's timeout (its answer, if it comes, is ignored)."""


class ClientGone(ClientFailed):
    """The shim is gone (stdin closed), or it does not serve what was asked."""


class ClientChannel(Protocol):
    """What the daemon can ask of the VS Code side (docs/protocol.md, "Daemon → shim")."""

    def offers(self, capability: str) -> bool:
        """Whether the shim said it serves ``capability`` (``"fs"``, ``"terminal"``,
        ``"sessionState"``) in ``initialize`` and is still there."""
        ...

    async def request(self, method: str, params: Mapping[str, Any], timeout: float = DEFAULT_TIMEOUT) -> Any:
        """Send the request ``method`` and wait for its result (any JSON value).

        Raises ``ClientError`` (the shim's error), ``ClientTimeout`` (no answer within
        ``timeout`` seconds), ``ClientGone`` (the shim is gone: at once)."""
        ...

    def notify(self, method: str, params: Mapping[str, Any]) -> None:
        """Send the notification ``method`` (nothing when the shim is gone)."""
        ...


class NoClient:
    """The channel when there is no shim to ask (the console, tests): offers nothing,
    every request fails at once with ``ClientGone``, notifications go nowhere."""

    def offers(self, capability: str) -> bool:
        return False

    async def request(self, method: str, params: Mapping[str, Any], timeout: float = DEFAULT_TIMEOUT) -> Any:
        raise ClientGone(CLIENT_GONE, f"{method}: no VS Code window to ask")

    def notify(self, method: str, params: Mapping[str, Any]) -> None:
        return None


class ShimChannel:
    """``ClientChannel`` over the daemon's stdio. ``send``: queues one frame (a dict) for
    stdout, in order with every other frame. ``capabilities``: ``initialize``'s
    ``clientCapabilities`` (``set_capabilities``). ``late``: responses delivered to no
    request in flight. The requests in flight are the link's ``rpc.peer.Outgoing``, the
    table of ids and waiters every link shares."""

    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._send = send
        counter = itertools.count(1)
        self.requests = Outgoing(lambda: f"{ID_PREFIX}{next(counter)}")
        self._capabilities: frozenset[str] = frozenset()
        self._gone: str | None = None
        self.late = 0

    @property
    def in_flight(self) -> int:
        """Requests sent and not ended yet."""
        return len(self.requests)

    def set_capabilities(self, capabilities: Mapping[str, Any]) -> None:
        """``initialize``'s ``clientCapabilities``: a capability counts when it is ``true``."""
        self._capabilities = frozenset(name for name, value in capabilities.items() if value is True)

    def offers(self, capability: str) -> bool:
        return self._gone is None and capability in self._capabilities

    async def request(self, method: str, params: Mapping[str, Any], timeout: float = DEFAULT_TIMEOUT) -> Any:
        if self._gone is not None:
            raise ClientGone(CLIENT_GONE, f"{method}: {self._gone}")
        rid = self.requests.new_id()
        pending = self.requests.add(rid, method, wait=True)
        assert pending.event is not None
        try:
            self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": dict(params)})
            with anyio.move_on_after(timeout):
                await pending.event.wait()
        finally:
            # Ended here (answer, timeout, the caller cancelled): a later answer is late.
            self.requests.drop(pending)
        if not pending.event.is_set():
            raise ClientTimeout(CLIENT_TIMEOUT, f"{method}: VS Code did not answer within {timeout:g} s")
        if pending.failed is not None:
            raise pending.failed
        assert pending.frame is not None
        if "error" in pending.frame:
            raise _shim_error(method, pending.frame.get("error"))
        return pending.frame.get("result")

    def notify(self, method: str, params: Mapping[str, Any]) -> None:
        if self._gone is None:
            self._send({"jsonrpc": "2.0", "method": method, "params": dict(params)})

    def deliver(self, frame: Mapping[str, Any]) -> bool:
        """A response frame read from the shim (``result`` or ``error``, no ``method``):
        True when it ended a request in flight, False when it answers none (the caller
        logs it, bounded; it is never answered)."""
        rid = frame.get("id")
        pending = self.requests.take(rid) if isinstance(rid, str) else None
        if pending is None or pending.event is None:
            self.late += 1
            return False
        pending.frame = dict(frame)
        pending.event.set()
        return True

    def close(self, reason: str = "VS Code is gone (the daemon's stdin closed)") -> None:
        """The shim is gone: every request in flight fails with ``ClientGone`` now, and
        every later one at once; notifications are dropped."""
        if self._gone is None:
            self._gone = reason
        self.requests.end(lambda method: ClientGone(CLIENT_GONE, f"{method}: {reason}"))


def _shim_error(method: str, error: Any) -> ClientError:
    """The shim's error object as a ``ClientError`` (a malformed one still ends the request)."""
    if not isinstance(error, Mapping):
        return ClientError(INTERNAL_ERROR, f"{method}: VS Code answered with a malformed error")
    code = error.get("code")
    message = error.get("message")
    return ClientError(
        code if type(code) is int else INTERNAL_ERROR,
        (message if isinstance(message, str) else "error")[:MESSAGE_LIMIT],
        error.get("data"),
    )
