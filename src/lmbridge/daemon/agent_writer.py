"""A session actor's writes to its agent: one task, frames in order, each bounded.

``session/prompt`` and ``session/cancel`` frames and the answers to the agent's requests are
queued (``send``, ``respond``) and written, in order, by ``run``; one frame may take
``WRITE_TIMEOUT`` seconds to reach the agent, else the agent stopped reading its stdin and
is stopped (docs/architecture.md "Tasks and ownership"). Used from the actor's tasks only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from lmbridge.acp.connection import AgentConnection, AgentUnavailable
from lmbridge.acp.session import Write
from lmbridge.log import get_logger

log = get_logger("session")

WRITE_TIMEOUT = float(os.environ.get("LMBRIDGE_WRITE_TIMEOUT") or 10.0)  # seconds one frame may take to reach an agent that stopped reading


class AgentWriter:
    """The writer of one session actor. ``conn``: the session's connection now (None: none;
    a frame for a connection that is gone or closed is dropped: the agent's end is reported
    on the mailbox, ``AgentGone``). ``log_fields``: the session and agent, for the log."""

    def __init__(self, conn: Callable[[], AgentConnection | None], agent: str, log_fields: Mapping[str, str]) -> None:
        self._conn = conn
        self._agent = agent
        self._log_fields = dict(log_fields)
        self.out, self._outbox = anyio.create_memory_object_stream[Write](math.inf)
        self._written = anyio.Event()  # run() has sent everything and ended

    def send(self, write: Write) -> None:
        """Queue one frame's write."""
        self.out.send_nowait(write)

    def respond(self, rid: int | str | None, result: Any = None, error: Mapping[str, Any] | None = None) -> None:
        """Queue the answer to one of the agent's requests (``client_requests.QueueAnswer``)."""

        async def write(conn: AgentConnection) -> None:
            await conn.respond(rid, result, error=error)

        self.out.send_nowait(write)

    async def run(self) -> None:
        """Sends queued frames in order until the queue is closed (``finish``) and empty."""
        try:
            async for write in self._outbox:
                conn = self._conn()
                if conn is None or conn.closed.is_set():
                    continue
                try:
                    with anyio.fail_after(WRITE_TIMEOUT):
                        await write(conn)
                except AgentUnavailable:
                    continue  # AgentGone reports it
                except TimeoutError:
                    log.warning("agent stopped reading its stdin: stopping it", agent=self._agent, **self._log_fields)
                    conn.exit_reason = f"agent {self._agent!r} stopped reading its stdin (one frame waited {WRITE_TIMEOUT:g} s) and was stopped"
                    await conn.close()
        finally:
            self._written.set()

    async def finish(self) -> None:
        """Take no more frames; return once those queued are written (each within its bound),
        or after ``WRITE_TIMEOUT``."""
        self.out.close()
        with anyio.move_on_after(WRITE_TIMEOUT):
            await self._written.wait()
