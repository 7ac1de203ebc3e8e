"""A session actor's mailbox, receiving side: anyio's memory stream, with the agent's
consecutive plain text chunks handed on as one (``core.chunks``: the rule; docs/performance.md).

Chunks merge only while ``merging()`` says so: the session actor's is "a job streams" (the
turn machine's STREAMING, where each update is shown at once and changes no state). In every
other state an update is kept or dropped one by one, as it came: the kept output's byte
bound gives way whole updates, and dropped output is counted per update.

A message is taken ahead only after a plain text chunk, and only from what is already
queued (``receive_nowait``: no wait, no checkpoint): while the next is a chunk of the same
key its text joins; the first that is not is held, and is the next message received. So
the order of everything is kept, nothing is lost (a reader that goes on until
``WouldBlock``/``EndOfStream`` gets the held message first), and a message that is not a
chunk is received exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream

from lmbridge.acp.connection import Incoming
from lmbridge.core import chunks

T = TypeVar("T")

_NOTHING: Any = object()


def chunk_of(msg: object) -> tuple[chunks.Key, str] | None:
    """``chunks.plain_chunk`` of a ``session/update`` notification from the agent; None for
    any other message (a request, a bad id, anything of the actor's own)."""
    if type(msg) is not Incoming or msg.id is not None or msg.bad_id or msg.method != "session/update":
        return None
    return chunks.plain_chunk(msg.params)


class ChunkMailbox(Generic[T]):
    """The receiving side of an actor's mailbox (``receive``, ``receive_nowait``, ``async
    for``: as ``MemoryObjectReceiveStream``'s, with the same exceptions), where a run of
    queued plain text chunks comes out as one ``Incoming`` (``chunks.joined``) while
    ``merging()`` is true (asked when the run's first chunk is received)."""

    def __init__(self, receive: MemoryObjectReceiveStream[T], merging: Callable[[], bool]) -> None:
        self._receive = receive
        self._merging = merging
        self._held: T = _NOTHING  # taken ahead, not merged: the next message

    def receive_nowait(self) -> T:
        """The next message, merged; raises ``anyio.WouldBlock`` when none is queued,
        ``anyio.EndOfStream`` once every sender is closed and all is read."""
        if self._held is not _NOTHING:
            msg, self._held = self._held, _NOTHING
        else:
            msg = self._receive.receive_nowait()
        return self._merged(msg)

    async def receive(self) -> T:
        """The next message, merged, waiting for one (a checkpoint, as anyio's)."""
        if self._held is not _NOTHING:
            await anyio.lowlevel.checkpoint()
            return self.receive_nowait()
        return self._merged(await self._receive.receive())

    def __aiter__(self) -> ChunkMailbox[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def _merged(self, msg: T) -> T:
        chunk = chunk_of(msg)
        if chunk is None or not self._merging():
            return msg
        key = chunk[0]
        texts: list[str] | None = None
        while True:
            try:
                after = self._receive.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break  # raised again by the next receive
            more = chunk_of(after)
            if more is None or more[0] != key:
                self._held = after
                break
            if texts is None:
                texts = [chunk[1]]
            texts.append(more[1])
        if texts is None:
            return msg
        first = cast(Incoming, msg)
        return cast(T, Incoming(first.method, chunks.joined(first.params, texts)))
