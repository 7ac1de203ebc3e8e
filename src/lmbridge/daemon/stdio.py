"""The daemon's stdio: the shim link as a JSON-RPC 2.0 peer, each request dispatched in a
task of its own, and the one writer of stdout.

Implements the transport rules of the shim ↔ daemon contract v1 (docs/protocol.md,
"Transport"). ``StdioPeer`` is an ``rpc.peer.Peer`` (the one line reader, its size policy
and its check of each line, as on every link) that serves by JSON-RPC's server rules
(``jsonrpc.classify``) and dispatches each request through ``jsonrpcserver``: in its own
task (so a long chat request never blocks the next frame), or, for a method that never
waits (a token count), at once as it is read. At most ``MAX_WAITING`` requests read may wait;
past that stdin is not read until one is answered, so the pipe pushes back on the shim
(docs/reliability.md, "Bounds"). ``StdoutWriter`` owns stdout, so frames never interleave.

``initialize`` is answered before ``jsonrpcserver`` is imported (with ``jsonschema`` it
costs ~85 ms): the shim waits for that answer (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc

from lmbridge.core.errors import INVALID_REQUEST, PARSE_ERROR
from lmbridge.core.text import clip
from lmbridge.log import get_logger
from lmbridge.rpc.framing import MAX_LINE, BadLines, Overlong
from lmbridge.rpc.jsonrpc import Invalid, RequestFrame, ResponseFrame, classify, encode, encode_json, error_frame
from lmbridge.rpc.peer import READ_SIZE, Peer, widen_pipe

if TYPE_CHECKING:
    from lmbridge.rpc.record import Recorder

log = get_logger("stdio")

MAX_FRAME = MAX_LINE  # bytes in one stdin line (framing.MAX_LINE: the same on every link)

#: Requests read from stdin that may wait at once (docs/reliability.md, "Bounds"): a request
#: waits from the moment it is read until it is answered, or, a chat, until its session takes
#: it (a chat being answered waits on its agent and on what comes on stdin next: a cancel,
#: the shim's answers; so it is not counted). At the bound stdin is not read until one stops
#: waiting: the pipe fills and pushes back on the shim.
MAX_WAITING = 64

#: A JSON-RPC id the daemon can answer by: a string, a finite number or None (null).
RequestId = str | int | float | None


# ---------------------------------------------------------------- stdout


@dataclass
class Stdout:
    """Where frames go. ``write`` never waits (a pipe's transport buffers what
    the reader has not taken yet); ``paused()``: that buffer is over its
    high-water mark; ``drain()`` waits until it is not; ``buffered()``: bytes
    not handed to the OS yet."""

    write: Callable[[bytes], None]
    paused: Callable[[], bool] = lambda: False
    drain: Callable[[], Awaitable[None]] = field(default=lambda: asyncio.sleep(0))
    buffered: Callable[[], int] = lambda: 0


_MERGEABLE = ("text", "thinking")

#: One item queued for stdout: an encoded frame, or one response part ``(request id, part)``.
Queued = bytes | tuple[RequestId, Mapping[str, Any]]


def _part_frame(out: list[bytes], rid: RequestId, part: Mapping[str, Any]) -> None:
    """One ``lm/responsePart`` frame appended to ``out``, written as ``jsonrpc.encode`` writes
    any frame, by orjson in one buffer with its newline (``encode_json``): a merged part's
    text is copied once, and a batch of one frame, the streaming case, is written as it is
    (``b"".join`` of one item is that item: docs/performance.md, "Streaming: what is left
    in the window")."""
    out.append(encode_json({"jsonrpc": "2.0", "method": "lm/responsePart", "params": {"requestId": rid, "part": part}}, line=True))


def encode_batch(batch: list[Queued]) -> bytes:
    """Frames queued for stdout → the bytes to write, in order.

    Items are encoded frames (bytes) or response parts ``(request id, part)``;
    a run of consecutive parts of the same request and type (text, or
    thinking with the same id) becomes one part holding their values joined.
    """
    out: list[bytes] = []
    run_rid: Any = None
    run_part: Mapping[str, Any] | None = None
    run_values: list[str] = []

    def flush() -> None:
        if run_part is None:
            return
        part = run_part if len(run_values) == 1 else {**run_part, "value": "".join(run_values)}
        _part_frame(out, run_rid, part)

    for item in batch:
        if type(item) is tuple:
            rid, part = item
            kind = part.get("type")
            if (
                run_part is not None
                and kind in _MERGEABLE
                and kind == run_part.get("type")
                and rid == run_rid
                and type(rid) is type(run_rid)
                and part.get("id") == run_part.get("id")
                and type(part.get("value")) is str
            ):
                run_values.append(part["value"])
                continue
            flush()
            if kind in _MERGEABLE and type(part.get("value")) is str:
                run_rid, run_part, run_values = rid, part, [part["value"]]
            else:
                run_part, run_values = None, []
                _part_frame(out, rid, part)
        else:
            assert isinstance(item, bytes)
            flush()
            run_part, run_values = None, []
            out.append(item)
    flush()
    return b"".join(out)


class StdoutWriter:
    """The one owner of stdout. Frames are queued in order and written by an event-loop
    callback soon after (everything queued in one loop round goes out in one write,
    consecutive text parts of one request merged: ``encode_batch``); while the reader
    lags (the pipe is over its high-water mark) ``run`` waits for it, and what piled up
    meanwhile is merged likewise. ``recorder`` (``--record``) gets every byte written."""

    def __init__(self, recorder: Recorder | None = None) -> None:
        self.recorder = recorder
        self._stdout: Stdout | None = None
        self._pending: list[Queued] = []  # not written yet, in order
        self._flush_handle: asyncio.Handle | None = None
        self._blocked = False  # the pipe is over its high-water mark
        self._lagging = anyio.Event()

    def send(self, frame: Mapping[str, Any]) -> None:
        """Queue one frame (frames go out in the order queued)."""
        self._queue(encode(frame))

    def send_raw(self, line: str) -> None:
        """Queue one frame encoded already (``line`` without its newline)."""
        self._queue((line + "\n").encode())

    def send_bytes(self, data: bytes) -> None:
        """Queue one frame encoded already, with its newline."""
        self._queue(data)

    def send_part(self, rid: RequestId, part: Mapping[str, Any]) -> None:
        """Queue one ``lm/responsePart`` of request ``rid`` (encoded when written)."""
        self._queue((rid, part))

    def error(self, rid: RequestId, code: int, message: str) -> None:
        """Queue a JSON-RPC error response."""
        self.send(error_frame(rid, code, message))

    def _queue(self, item: Queued) -> None:
        self._pending.append(item)
        if self._flush_handle is None and not self._blocked and self._stdout is not None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Write everything queued in one write (a callback, not a task: no task switch
        per part)."""
        self._flush_handle = None
        if self._blocked or not self._pending or self._stdout is None:
            return
        batch, self._pending = self._pending, []
        data = encode_batch(batch)
        self._stdout.write(data)
        if self.recorder is not None:
            self.recorder.shim_out(data)
        if self._stdout.paused():
            self._blocked = True
            self._lagging.set()

    async def run(self, stdout: Stdout, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write to ``stdout`` from now on (what was queued before first); whenever a
        write left the pipe full, wait for the reader to catch up, then write what piled
        up meanwhile. Runs until cancelled."""
        self._stdout = stdout
        self._flush()
        task_status.started()
        while True:
            await self._lagging.wait()
            self._lagging = anyio.Event()
            await stdout.drain()
            self._blocked = False
            self._flush()

    async def drain(self, timeout: float = 2.0) -> None:
        """Wait, up to ``timeout`` seconds, until everything queued has reached the OS."""
        assert self._stdout is not None
        with anyio.move_on_after(timeout):
            while self._pending or self._blocked or self._stdout.buffered():
                await anyio.sleep(0.01)


# ---------------------------------------------------------------- stdin


class Dispatch(Protocol):
    """What a request frame is handed to (``methods.Methods``)."""

    #: Methods that never wait: ``dispatch_now`` answers them as they are read.
    immediate: frozenset[str]

    def known(self, method: str) -> bool:
        """Whether ``method`` is one of the daemon's methods."""
        ...

    def in_flight(self, rid: RequestId) -> bool:
        """Whether a request with id ``rid`` is still being handled."""
        ...

    async def dispatch(self, request: dict[str, Any], served: Callable[[], None]) -> None:
        """Handle one valid JSON-RPC 2.0 request or notification; answer it (requests) once.
        ``served()``: it no longer waits (a chat its session took; ``MAX_WAITING``)."""
        ...

    def dispatch_now(self, request: dict[str, Any]) -> None:
        """Handle one valid request or notification of an ``immediate`` method, answered
        before this returns."""
        ...


class Waiting:
    """The requests read that wait (``MAX_WAITING``): ``hold()`` one, and release it once
    (``Held.release``); ``room()`` waits until fewer than ``limit`` do."""

    __slots__ = ("count", "limit", "_room")

    def __init__(self, limit: int = MAX_WAITING) -> None:
        self.count = 0
        self.limit = limit
        self._room: anyio.Event | None = None

    @property
    def full(self) -> bool:
        return self.count >= self.limit

    def hold(self) -> Held:
        self.count += 1
        return Held(self)

    def released(self) -> None:
        self.count -= 1
        if self._room is not None and self.count < self.limit:
            self._room.set()
            self._room = None

    async def room(self) -> None:
        while self.full:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()


class Held:
    """One request that waits (``Waiting.hold``) until ``release`` (idempotent)."""

    __slots__ = ("_waiting",)

    def __init__(self, waiting: Waiting) -> None:
        self._waiting: Waiting | None = waiting

    def release(self) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.released()


class StdoutStream(anyio.abc.ByteSendStream):
    """stdout as a byte stream: what is sent is queued on the one writer (``StdoutWriter``),
    in order with every other frame."""

    def __init__(self, out: StdoutWriter) -> None:
        self.out = out

    async def send(self, item: bytes) -> None:
        self.out.send_bytes(item)

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class StdioPeer(Peer):
    """The daemon's end of the shim link: an ``rpc.peer.Peer`` over stdin and stdout that
    serves by JSON-RPC's server rules. ``Peer`` reads and checks each line (the size
    policy, blank lines, JSON); what it read is handled here, each line in a task of its own
    in ``tg`` (so a long chat request never blocks the next frame), in the order read.

    Answers here what is not a request it can dispatch (docs/protocol.md, "Transport"): not
    JSON (-32700), not a request object or a bad id (-32600), an unknown method (-32601),
    an id still in flight (-32600), a line over ``MAX_FRAME`` whose start shows a request
    with a usable id (-32600). A batch is handled element by element, each answered in its
    own frame. A response on stdin is delivered to ``responses`` (the daemon's own client/*
    requests), never answered. A bug while dispatching is logged; it never ends the daemon.
    ``recorder`` (``--record``) gets every line read.

    Push-back: each line's task holds a place in ``waiting`` until it ends (a chat: until its
    session takes it, ``Dispatch.dispatch``'s ``served``); while ``MAX_WAITING`` are held, or a
    batch's elements have not all taken theirs (in order), the next line is not read
    (``Peer.full``/``room``). A request of an ``immediate`` method is
    answered as it is read, with no task, when every line read before it has begun (so a
    cancel finds the request it names in flight, as in order)."""

    def __init__(
        self,
        stdin: anyio.abc.ByteReceiveStream,
        methods: Dispatch,
        out: StdoutWriter,
        tg: anyio.abc.TaskGroup,
        responses: Callable[[Mapping[str, Any]], bool],
        recorder: Recorder | None = None,
    ) -> None:
        super().__init__(stdin, StdoutStream(out), self, link="the shim", limit=MAX_FRAME, warn=log.error, peer="the shim")
        self.methods = methods
        self.out = out
        self.tg = tg
        # Where a response frame goes (``rpc.channel.ShimChannel.deliver``: the shim's
        # answer to one of the daemon's client/* requests); False: it answers no request.
        self.responses = responses
        self.recorder = recorder
        self.bad_lines = BadLines("shim stdin", log.warning)  # -32700 each; logged bounded
        self.stray_responses = 0  # frames on stdin that were responses to no request in flight (never answered)
        self.dispatching = 0  # line tasks running
        self.waiting = Waiting()  # requests read that wait (MAX_WAITING)
        self._unstarted = 0  # line tasks started that have not begun
        # Batches read whose elements have not all taken their place yet: stdin is not read
        # meanwhile (``full``), so no line read after a batch takes a place before its elements.
        self._splitting = 0
        self._split = anyio.Event()  # set when the last batch being split has its elements' places
        self.last_line = time.monotonic()  # when the last line read was handled (the warm-up gives way: daemon.warm)

    async def idle(self, timeout: float) -> None:
        """Wait, up to ``timeout`` seconds, until no line's task runs."""
        with anyio.move_on_after(timeout):
            while self.dispatching:
                await anyio.sleep(0.01)

    # -- what Peer reads --------------------------------------------------------

    def line(self, line: bytes | Overlong) -> None:
        self.last_line = time.monotonic()
        if self.recorder is not None and isinstance(line, bytes):
            self.recorder.shim_in(line)
        super().line(line)

    def full(self) -> bool:
        return self.waiting.full or self._splitting > 0

    async def room(self) -> None:
        while self.full():
            if self._splitting:
                await self._split.wait()
            else:
                await self.waiting.room()

    def value(self, value: Any, line: bytes) -> None:
        """Every JSON value read, by the server's rules (``_value``), not the Peer's routing;
        a valid request of an ``immediate`` method at once, when nothing read before it is
        still to begin."""
        if not self._unstarted and type(value) is dict and value.get("method") in self.methods.immediate:
            kind = classify(value, self.methods.known)
            if isinstance(kind, RequestFrame) and not (kind.has_id and kind.id is not None and self.methods.in_flight(kind.id)):
                try:
                    self.methods.dispatch_now(kind.frame)
                except Exception as exc:  # a bug here must not end the daemon
                    log.exception("frame dispatch failed", error=clip(repr(exc), 500))
                return
        if type(value) is list:
            self._splitting += 1
            if self._splitting == 1:
                self._split = anyio.Event()
        self._start(self._value, value)

    def dropped_request(self, rid: Any, error: dict[str, Any]) -> None:
        """A request dropped as too long is answered -32600 by its id, unless a request
        with that id is in flight (its answer would be ambiguous)."""
        self._start(self._dropped, rid, error)

    # Handler: the lines that are not JSON come here; ``value`` takes every other line, so
    # the Peer's own routing (requests, notifications, responses by id) is not used.

    def handle_unusable(self, reason: str, line: bytes, value: Any) -> None:
        reason_text = "nested too deeply" if isinstance(value, RecursionError) else str(value)
        self._start(self._not_json, line, reason_text)

    def handle_request(self, rid: Any, method: str, params: Any) -> None:
        raise AssertionError("the daemon's stdio routes requests by the server rules (value)")

    def handle_notification(self, method: str, params: Any) -> None:
        raise AssertionError("the daemon's stdio routes notifications by the server rules (value)")

    def handle_response(self, rid: Any, result: Any, error: dict[str, Any] | None) -> None:
        raise AssertionError("the daemon's stdio routes responses by the server rules (value)")

    # -- each line's task ---------------------------------------------------------

    def _start(self, act: Callable[..., Awaitable[None]], *args: Any) -> None:
        self.dispatching += 1
        self._unstarted += 1
        self.tg.start_soon(self._run, self.waiting.hold(), act, *args)

    async def _run(self, held: Held, act: Callable[..., Awaitable[None]], *args: Any) -> None:
        self._unstarted -= 1
        try:
            await act(held, *args)
        except Exception as exc:  # a bug here must not end the daemon (and every chat with it)
            log.exception("frame dispatch failed", error=clip(repr(exc), 500))
        finally:
            held.release()
            self.dispatching -= 1

    async def _not_json(self, held: Held, line: bytes, reason: str) -> None:
        self.bad_lines.bad(line, "not JSON", time.monotonic())
        self.out.error(None, PARSE_ERROR, f"parse error: {reason}"[:500])

    async def _dropped(self, held: Held, rid: Any, error: dict[str, Any]) -> None:
        if not self.methods.in_flight(rid):
            self.out.error(rid, error["code"], error["message"])

    async def _value(self, held: Held, value: Any) -> None:
        if isinstance(value, list):
            # A batch: each element is handled as if it came on its own line, and
            # answered in its own frame (the daemon never writes arrays), each holding
            # its own place among the requests that wait, taken in order before any line
            # read after the batch (stdin is not read until then: ``full``). Else the
            # reader, which takes a place as soon as one is free while the pipe is full,
            # could keep taking the places first (a batch element answered minutes late in
            # the soak: docs/reliability.md, "The slowest answers, found").
            held.release()
            if not value:
                self.out.error(None, INVALID_REQUEST, "invalid request: empty batch")
            try:
                for element in value:
                    await self.waiting.room()
                    self._start(self._one, element)
            finally:
                self._splitting -= 1
                if not self._splitting:
                    self._split.set()
            return
        await self._one(held, value)

    async def _one(self, held: Held, request: Any) -> None:
        """One request or notification (any JSON value): answered exactly once if it has
        a usable id, never if it is a notification (``jsonrpc.classify``: the rules)."""
        kind = classify(request, self.methods.known)
        if kind is None:  # a notification of a method the daemon does not have
            return
        if isinstance(kind, Invalid):
            self.out.error(kind.id, kind.code, kind.message)
            return
        if isinstance(kind, ResponseFrame):
            # A response: to one of the daemon's client/* requests, or to none (late, after
            # its timeout, or never asked). Never answered: answering a response would let
            # two peers ping-pong errors. One to no request is logged once, then counted.
            if self.responses(kind.frame):
                return
            self.stray_responses += 1
            if self.stray_responses == 1:
                log.warning("stdin: a response to no request, not answered (further ones are counted)", id=clip(repr(request.get("id")), 100))
            elif self.stray_responses % 1000 == 0:
                log.warning("stdin: responses to no request so far", count=self.stray_responses)
            return
        if kind.has_id and kind.id is not None and self.methods.in_flight(kind.id):
            # Ids identify requests in flight (JSON-RPC 2.0 §4): a second one would make its answer ambiguous.
            self.out.error(kind.id, INVALID_REQUEST, "invalid request: a request with this id is still in flight")
            return
        if kind.method in self.methods.immediate:
            self.methods.dispatch_now(kind.frame)
            return
        await self.methods.dispatch(kind.frame, held.release)


class Chunks(anyio.abc.ByteReceiveStream):
    """An async iterable of byte chunks (lines, or any pieces of a stream) as a byte
    stream: what tests and in-process callers feed ``Server.serve``."""

    def __init__(self, chunks: AsyncIterable[bytes]) -> None:
        self._chunks = aiter(chunks)

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        try:
            return await anext(self._chunks)
        except StopAsyncIteration:
            raise anyio.EndOfStream from None

    async def aclose(self) -> None:
        pass


class _StdinPipe(anyio.abc.ByteReceiveStream):
    """The daemon's stdin (a pipe or a terminal) read by the event loop, as a byte stream."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        data = await self._reader.read(max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def aclose(self) -> None:
        pass


class _StdinFile(anyio.abc.ByteReceiveStream):
    """The daemon's stdin when it is a regular file (``lmbridge serve < frames.jsonl``):
    read from a thread, as a byte stream."""

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        data = await anyio.to_thread.run_sync(os.read, sys.stdin.fileno(), max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def aclose(self) -> None:
        pass


async def stdin_stream() -> anyio.abc.ByteReceiveStream:
    """The daemon's stdin as a byte stream (a pipe or a terminal: read by the event loop;
    a regular file: from a thread), to be split into lines by its ``StdioPeer``."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    except ValueError:
        return _StdinFile()
    widen_pipe(sys.stdin.fileno())  # a 2 MB chat request crosses in 2 rounds between the processes, not 35
    return _StdinPipe(reader)


async def stdout_writer() -> Stdout:
    """The daemon's stdout (a pipe: through the event loop; a file or terminal: blocking)."""
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
    except ValueError:

        def write_blocking(data: bytes) -> None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

        return Stdout(write_blocking)
    widen_pipe(sys.stdout.fileno())  # a burst of parts goes out in one write, not many partial ones
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    _, high = transport.get_write_buffer_limits()
    return Stdout(
        write=transport.write,
        paused=lambda: transport.get_write_buffer_size() > high,
        drain=writer.drain,
        buffered=transport.get_write_buffer_size,
    )
