"""One JSON-RPC 2.0 peer over a byte stream pair: the wire of every link that speaks it.

Newline-delimited JSON-RPC 2.0 (docs/protocol.md, "Transport"): ``Peer`` reads the
stream with the one line reader (``framing.Lines``, the link's size policy), parses each
line (``jsonrpc.parse_json``), and routes what it is, in arrival order, to its
``Handler``: a request (``handle_request``), a notification (``handle_notification``), the
answer to a request sent with ``send_request`` (``handle_response``), or a line that is none
of these (``handle_unusable``: not JSON, not an object, a request whose id cannot be
answered, a response to no request). The answer to a request sent with ``request`` wakes
its waiter instead. A line over the limit is dropped as it streams, never held whole;
what its first bytes say it was is answered (``framing.read_head``): a request gets
-32600 back, a request of ours waiting on it fails. Frames are written with the one
encoder (``jsonrpc.encode``), one at a time.

Used by the daemon's stdio (``daemon.stdio.StdioPeer``: the server's rules for what it
reads, ``value``), the agent connection (``acp.connection``) and the dev client
(``devtools.client``); ``batches`` is the read loop of the MCP host's relay connections.
The handler's methods are called on the read loop and must not block: what they start
they start elsewhere (a stream, a task group).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint, checkpoint_if_cancelled

from lmbridge.core.errors import INVALID_REQUEST
from lmbridge.core.text import clip
from lmbridge.rpc import framing
from lmbridge.rpc.framing import Lines, Overlong
from lmbridge.rpc.jsonrpc import encode, parse_json, usable_id

#: Bytes asked of the stream per read.
READ_SIZE = 256 * 1024
PIPE_SIZE = 1 << 20  # bytes; Linux's default limit for an unprivileged process
#: Lines routed between two turns of the event loop: a read of short lines (a peer writing
#: non-JSON as fast as the pipe takes it: 130,000 lines a read, ~1 s idle, 10 s on a busy
#: machine) must not hold up every other link meanwhile.
LINES_PER_TURN = 1000

# Why a line is unusable (``Handler.handle_unusable``'s ``reason``).
NOT_JSON = "not JSON"
NOT_OBJECT = "not a JSON object"
BAD_ID = "a request whose id cannot be answered"
STRAY_RESPONSE = "a response to no request"

#: A JSON-RPC 2.0 id a request can be answered by (``jsonrpc.usable_id``).
Id = int | str | float
#: Where a dropped over-long line is said (log.warning-like: event, **fields).
Report = Callable[..., None]


class Handler(Protocol):
    """What a ``Peer`` hands on, in arrival order, from its read loop (never awaited)."""

    def handle_request(self, rid: Id | None, method: str, params: Any) -> None:
        """A request; ``rid`` None: its id cannot be answered by (an object, an array, a bool,
        null, ``1e400``): JSON-RPC answers it -32600 with id null, and nothing it asks is done
        (``handle_unusable`` said so just before)."""

    def handle_notification(self, method: str, params: Any) -> None:
        """A notification (no ``id``)."""

    def handle_response(self, rid: Id | None, result: Any, error: dict[str, Any] | None) -> None:
        """The answer to request ``rid`` sent with ``send_request`` (or ``expect``ed):
        ``error`` (a JSON-RPC error object) or ``result``."""

    def handle_unusable(self, reason: str, line: bytes, value: Any) -> None:
        """A line that is not a usable frame: ``reason`` (``NOT_JSON``, ``NOT_OBJECT``,
        ``BAD_ID``, ``STRAY_RESPONSE``), the ``line`` as read, its JSON ``value`` (when not
        JSON: the parser's error, a ``ValueError`` or ``RecursionError``)."""


class RemoteError(Exception):
    """The peer answered a request with a JSON-RPC error object (``error``)."""

    def __init__(self, method: str, error: Mapping[str, Any]) -> None:
        self.error = dict(error)
        super().__init__(f"{method}: {error.get('message')} (code {error.get('code')})")


class LinkClosed(Exception):
    """The link is closed: nothing can be sent, no answer will come."""


class AwaitedAnswer:
    """One request of ours not answered yet: awaited (``event``) or routed to the handler
    (``event`` None). Ended once: by its answer (``frame``), or by the link's end (``failed``)."""

    __slots__ = ("id", "method", "event", "frame", "failed")

    def __init__(self, rid: Id | None, method: str, event: anyio.Event | None) -> None:
        self.id, self.method, self.event = rid, method, event
        self.frame: dict[str, Any] | None = None  # the answer, once it came
        self.failed: BaseException | None = None  # the link ended first


class Outgoing:
    """The requests of ours on one link that wait for their answer (JSON-RPC 2.0 §4: an
    answer names its request by id): the one table of ids and waiters of every link (the
    ``Peer``'s; the daemon's requests to the shim, ``rpc.channel.ShimChannel``). ``ids``:
    where fresh ids come from (1, 2, … by default). No I/O."""

    def __init__(self, ids: Callable[[], Id] | None = None) -> None:
        self.new_id: Callable[[], Id] = ids or itertools.count(1).__next__
        self._pending: dict[Id | None, AwaitedAnswer] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, rid: Id | None, method: str, wait: bool) -> AwaitedAnswer:
        """Request ``rid`` is (about to be) sent: its answer is awaited (``wait``) or routed."""
        pending = AwaitedAnswer(rid, method, anyio.Event() if wait else None)
        self._pending[rid] = pending
        return pending

    def take(self, rid: Any) -> AwaitedAnswer | None:
        """The request of ours ``rid`` answers, no longer waiting (of the same type: ``1.0``
        does not answer ``1``; null only if a request was sent with id null)."""
        if rid is not None and not usable_id(rid):
            return None
        pending = self._pending.get(rid)
        if pending is None or type(pending.id) is not type(rid):
            return None
        del self._pending[rid]
        return pending

    def drop(self, pending: AwaitedAnswer) -> None:
        """Its caller stopped waiting (answered, timed out, cancelled): a later answer is a
        response to no request."""
        if self._pending.get(pending.id) is pending:
            del self._pending[pending.id]

    def end(self, error: Callable[[str], BaseException]) -> None:
        """The link is over: every awaited request fails with ``error(method)``; answers
        routed to a handler are no longer expected."""
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if p.event is not None:
                p.failed = error(p.method)
                p.event.set()


def error_of(frame: Mapping[str, Any]) -> dict[str, Any] | None:
    """An answer's JSON-RPC error object (a malformed one as ``{"message": text}``), or None
    when it is a result."""
    if "error" not in frame:
        return None
    err = frame["error"]
    return err if type(err) is dict else {"message": str(err)}


def widen_pipe(fd: int | None, size: int = PIPE_SIZE) -> None:
    """Give the pipe ``fd`` reads or writes ``size`` bytes of buffer instead of 64 KiB
    (Linux ``F_SETPIPE_SZ``); nothing where it cannot (not a pipe, not Linux, over the
    limit: the default is fine). The daemon's stdin and stdout, and each agent's stdout
    (docs/performance.md, "Streaming: the pipes and the writes")."""
    if fd is None:
        return
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)  # Linux only (Python ≥ 3.10)
    except (OSError, ImportError, AttributeError, ValueError):
        pass


def open_pipe(size: int = PIPE_SIZE) -> tuple[int, int]:
    """A new pipe, ``(read end, write end)``, both closed on exec, widened to ``size``
    (``widen_pipe``): the write end is handed to a child as its stdout, the read end read
    with ``PipeReader``. Raises ``OSError`` (out of file descriptors)."""
    read_end, write_end = os.pipe()
    widen_pipe(read_end, size)
    return read_end, write_end


class PipeReader(ByteReceiveStream):
    """The read end of a pipe (a file descriptor this object owns) as an anyio byte stream:
    ``os.read`` while it gives bytes, ``anyio.wait_readable`` when it is empty. Each
    ``receive`` is a checkpoint, and a cancelled one loses nothing (it is cancelled before
    the read, never after). Raises ``anyio.EndOfStream`` at EOF, ``ClosedResourceError``
    once closed, ``BrokenResourceError`` when the read fails. One bytes object a read, where
    a subprocess's stream in anyio's asyncio backend copies each read twice more (into its
    ``StreamReader``'s buffer and out of it): an agent's stdout (docs/performance.md,
    "Streaming: the agent's pipe read directly")."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd

    def fileno(self) -> int:
        """The pipe's file descriptor; -1 once closed."""
        return self._fd

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        await checkpoint_if_cancelled()
        while True:
            if self._fd < 0:
                raise anyio.ClosedResourceError
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)  # ClosedResourceError if closed meanwhile
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            if not data:
                raise anyio.EndOfStream
            await cancel_shielded_checkpoint()  # the others run between two reads
            return data

    async def aclose(self) -> None:
        """Close the pipe (a waiting ``receive`` raises ``ClosedResourceError``); again: nothing."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            anyio.notify_closing(fd)
            os.close(fd)
        await checkpoint()


async def batches(stream: ByteReceiveStream, lines: Lines, size: int = READ_SIZE) -> AsyncIterator[list[bytes | Overlong]]:
    """The lines of ``stream``, split by ``lines`` (its size policy), one list per read
    (everything one read completes: no per-line round trip on the streaming hot path);
    at the end (EOF, or the stream closed or broken) its last line without a newline, if
    any, as a list of its own."""
    while True:
        try:
            data = await stream.receive(size)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            last = lines.end()
            if last is not None:
                yield [last]
            return
        found = lines.feed(data)
        if found:
            yield found


class Peer:
    """JSON-RPC 2.0 over ``receive``/``send``; run ``read()`` in a task group.

    ``link`` names the link in the log (``agent 'claude'``); ``limit``: bytes in one line
    (``framing.AGENT_LINE``, ``framing.MAX_LINE``); ``warn``: where a dropped over-long line
    is said. ``remote_error(method, error)`` makes the exception ``request`` raises for an
    error answer; ``broken(exc)``, awaited when a write fails, the one it raises then (the
    link's own reason, once it is known); ``peer`` names the other side in errors. Hooks
    ``on_received``/``on_sent`` see every frame (a JSON object) read and written.
    """

    def __init__(
        self,
        receive: ByteReceiveStream,
        send: ByteSendStream,
        handler: Handler,
        *,
        link: str,
        limit: int,
        warn: Report,
        remote_error: Callable[[str, Mapping[str, Any]], BaseException] = RemoteError,
        broken: Callable[[BaseException], Awaitable[BaseException]] | None = None,
        peer: str = "the peer",
    ) -> None:
        self.link, self.limit, self.peer = link, limit, peer
        self.handler = handler
        self.warn = warn
        self.remote_error = remote_error
        self.on_received: Callable[[dict[str, Any]], None] | None = None
        self.on_sent: Callable[[dict[str, Any]], None] | None = None
        self.heard = time.monotonic()  # when a read last gave anything
        self._receive, self._send = receive, send
        self._broken = broken or self._closed
        self.requests = Outgoing()
        self._lock = anyio.Lock()
        self._ended: Callable[[], BaseException] | None = None
        self._answers: TaskGroup | None = None  # where a dropped request's answer is written

    # -- reading ------------------------------------------------------------

    async def read(self) -> None:
        """Read and route frames until the stream ends (EOF, closed, broken); answers to
        dropped over-long requests are written before it returns. It does not ``end`` the
        link: the caller knows why it ended. While ``full()`` says so, the next line waits
        (``room``), and the stream is not read: the writer is pushed back."""
        lines = Lines(self.limit)
        async with anyio.create_task_group() as tg:
            self._answers = tg
            async for batch in batches(self._receive, lines):
                self.heard = time.monotonic()
                for n, line in enumerate(batch, 1):
                    if self.full():
                        await self.room()
                    self.line(line)
                    if n % LINES_PER_TURN == 0:
                        await checkpoint()

    def full(self) -> bool:
        """Whether what was read waits beyond the link's bound (none here: a link that
        holds what it read, the daemon's stdin, overrides this and ``room``)."""
        return False

    async def room(self) -> None:
        """Wait until ``full()`` no longer holds."""

    def line(self, line: bytes | Overlong) -> None:
        """Route one line (without its newline), or a line dropped as too long: the one
        check of a line on every link (over-long: ``_overlong``; blank: skipped; not JSON:
        ``handle_unusable(NOT_JSON)``), then its JSON value to ``value``."""
        if isinstance(line, Overlong):
            self._overlong(line)
            return
        if not line.strip():
            return
        try:
            value = parse_json(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep for the decoder
            self.handler.handle_unusable(NOT_JSON, line, exc)
            return
        self.value(value, line)

    def value(self, value: Any, line: bytes) -> None:
        """Route one JSON value read (``line``: the line it was read from): an object by
        ``route``; anything else is ``NOT_OBJECT``. A link that serves by JSON-RPC's server
        rules (the daemon's stdio: batches, ``jsonrpc.classify``) overrides this."""
        if type(value) is not dict:
            self.handler.handle_unusable(NOT_OBJECT, line, value)
            return
        self.route(value, line)

    def route(self, frame: dict[str, Any], line: bytes = b"") -> None:
        """Route one frame (a JSON object): a string ``method`` makes it a request (with an
        ``id``) or a notification; anything else is a response, by its ``id``."""
        if self.on_received is not None:
            self.on_received(frame)
        method = frame.get("method")
        if isinstance(method, str):
            if "id" not in frame:
                self.handler.handle_notification(method, frame.get("params"))
                return
            rid = frame["id"]
            if usable_id(rid):
                self.handler.handle_request(rid, method, frame.get("params"))
                return
            self.handler.handle_unusable(BAD_ID, line, frame)
            self.handler.handle_request(None, method, frame.get("params"))
            return
        pending = self.requests.take(frame.get("id"))
        if pending is None:
            # Never answered (answering a response lets two peers ping-pong errors).
            self.handler.handle_unusable(STRAY_RESPONSE, line, frame)
            return
        self._answered(pending, frame)

    def _answered(self, pending: AwaitedAnswer, frame: dict[str, Any]) -> None:
        if pending.event is None:
            assert pending.id is not None or "id" in frame
            self.handler.handle_response(pending.id, frame.get("result"), error_of(frame))
            return
        pending.frame = frame
        pending.event.set()

    def _overlong(self, line: Overlong) -> None:
        """A line past ``limit``, dropped as it streamed: said, and what its start says it
        was is answered, so nothing waits on it: our request it answered fails with -32600
        saying so; the peer's request (a usable id) gets -32600 back."""
        head = framing.read_head(line.head)
        why = f"a line of {line.size:,} bytes, longer than lmbridge's limit of {self.limit:,} bytes"
        self.warn(f"{self.link} sent {why}: dropped, the link goes on", bytes=line.size,
                  start=line.head[:framing.EXCERPT].decode("utf-8", errors="replace"), id=head.id, method=head.method)
        if not head.has_id:
            return
        if head.method is not None:
            if usable_id(head.id):
                self.dropped_request(head.id, {"code": INVALID_REQUEST, "message": f"{clip(head.method, 200)}: {why}: dropped"})
            return
        if head.body not in ("result", "error"):
            return
        pending = self.requests.take(head.id)
        if pending is not None:
            self._answered(pending, {"id": head.id, "error": {"code": INVALID_REQUEST, "message": f"{self.peer}'s answer was {why}: dropped"}})

    def dropped_request(self, rid: Id, error: dict[str, Any]) -> None:
        """The peer's request ``rid``, dropped as too long, is answered with ``error``
        (-32600), so nothing waits on it; written from a task of ``read``'s."""
        if self._answers is not None:
            self._answers.start_soon(self._answer_dropped, rid, error)

    async def _answer_dropped(self, rid: Id, error: dict[str, Any]) -> None:
        try:
            await self.respond(rid, error=error)
        except Exception as exc:  # the link is gone: nobody is left to answer
            self.warn(f"{self.link}: answer to a dropped request not sent", id=rid, error=str(exc))

    # -- writing ------------------------------------------------------------

    async def send(self, frame: dict[str, Any]) -> None:
        """Write one frame. Raises what the link ended with (``end``), or ``broken``'s error."""
        if self._ended is not None:
            raise self._ended()
        data = encode(frame)
        if self.on_sent is not None:
            self.on_sent(frame)
        await self.send_raw(data)

    async def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (whole, never interleaved with another write)."""
        try:
            async with self._lock:
                await self._send.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise await self._broken(exc) from exc

    async def _closed(self, exc: BaseException) -> BaseException:
        return LinkClosed(f"{self.link}: the link is closed ({exc!r})")

    def new_id(self) -> Id:
        """A fresh request id (1, 2, …)."""
        return self.requests.new_id()

    def expect(self, rid: Id | None) -> None:
        """Route the answer to request ``rid`` (sent by the caller; any id JSON can hold) to
        ``Handler.handle_response``."""
        self.requests.add(rid, "", wait=False)

    async def send_request(self, rid: Id, method: str, params: Any) -> None:
        """Send request ``rid`` (``new_id``); its answer comes to ``Handler.handle_response``, in
        order with everything else the peer sends."""
        self.requests.add(rid, method, wait=False)
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    async def request(self, method: str, params: Any) -> Any:
        """Send a request and wait for its result. Raises ``remote_error(method, error)`` for
        an error answer, what the link ended with if it ends first. Cancelling the caller
        abandons the wait (a late answer is then a response to no request)."""
        rid = self.new_id()
        pending = self.requests.add(rid, method, wait=True)
        try:
            await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            assert pending.event is not None
            await pending.event.wait()
        finally:
            self.requests.drop(pending)
        if pending.failed is not None:
            raise pending.failed
        assert pending.frame is not None
        error = error_of(pending.frame)
        if error is not None:
            raise self.remote_error(method, error)
        return pending.frame.get("result")

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification (no answer expected)."""
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def respond(self, rid: Id | None, result: Any = None, error: Mapping[str, Any] | None = None) -> None:
        """Answer one of the peer's requests (exactly once, by the caller's contract)."""
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
        if error is not None:
            frame["error"] = dict(error)
        else:
            frame["result"] = result
        await self.send(frame)

    def end(self, error: Callable[[], BaseException]) -> None:
        """The link is over: every request of ours still waiting fails with ``error()``, as
        does every later ``send``; answers routed to the handler are no longer expected."""
        self._ended = error
        self.requests.end(lambda method: error())
