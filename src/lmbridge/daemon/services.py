"""Small services the composition root (``root.Server``) builds next to the history actor,
each the one owner of its state (docs/architecture.md, "Tasks and ownership").

- ``ToolsHost``: the daemon's MCP endpoint (``tools.mcp_bridge.McpHost``), started on
  first use so the MCP SDK stays off the start-up path.
- ``RecentAgents``: the agents used last, kept in the session index.
- ``Prewarmer``: starts the agents used last ahead of the first chat.
- ``Saver``: writes what changed to the session index, once a second at most.
- ``IdleCollector``: collects what dropped session actors left, once nothing runs.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.abc

from lmbridge.core.messages import AgentSpec
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from lmbridge.acp.process import AgentPool
    from lmbridge.daemon.catalog import Catalog
    from lmbridge.tools.mcp_bridge import McpHost

log = get_logger("services")

SAVE_PERIOD = 1.0  # seconds between writes of the session index while it changes
RECENT = 3  # agents remembered as used last


class ToolsHost:
    """``async () -> McpHost``: the daemon's MCP endpoint (one Unix socket), started in
    ``tg`` by the first caller (a session offering VS Code tools, a spare session)."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self._host: McpHost | None = None
        self._lock = anyio.Lock()

    async def __call__(self) -> McpHost:
        async with self._lock:
            if self._host is None:
                from lmbridge.tools.mcp_bridge import McpHost

                host = McpHost()
                await self._tg.start(host.run)
                self._host = host
            return self._host


class RecentStore(Protocol):
    """Where the agents used last persist (``session_index.SessionIndex``)."""

    def recent(self) -> list[str]: ...

    def save_recent(self, agents: list[str]) -> None: ...


class RecentAgents:
    """The agents used last, most recent first (at most ``RECENT``): pre-warmed when the
    next daemon starts. ``used`` is told each agent a new session actor starts for."""

    def __init__(self, store: RecentStore | None = None) -> None:
        self.store = store
        self.agents: list[str] = []
        self.dirty = False

    async def load(self) -> None:
        """Read the store's list (in a thread)."""
        if self.store is not None:
            self.agents = await anyio.to_thread.run_sync(self.store.recent)

    def used(self, agent_id: str) -> None:
        if self.agents[:1] != [agent_id]:
            self.agents = [agent_id, *(a for a in self.agents if a != agent_id)][:RECENT]
            self.dirty = True

    async def save(self) -> None:
        """Persist the list if it changed (in a thread). Raises ``OSError``."""
        if self.store is None or not self.dirty:
            return
        self.dirty = False
        await anyio.to_thread.run_sync(self.store.save_recent, list(self.agents))


class Prewarmer:
    """Starts an agent's process ahead of its first chat (spawn + ``initialize``, and a
    spare session where those are on: docs/sessions.md, "Pre-warming and the spare
    session"), in ``tg``; for an agent whose models are not known
    yet, a probe session (closed at once) tells the catalog its models for the picker.
    A failure is logged only: the first chat says what is wrong, with the agent's name."""

    def __init__(self, pool: AgentPool, catalog: Catalog, tg: anyio.abc.TaskGroup, closing: Callable[[], bool]) -> None:
        self.pool = pool
        self.catalog = catalog
        self._tg = tg
        self._closing = closing

    def start(self, agents: Sequence[AgentSpec], cwd: str | None) -> None:
        for spec in agents:
            if not self._closing():
                self._tg.start_soon(self._prewarm, spec, cwd)

    async def _prewarm(self, spec: AgentSpec, cwd: str | None) -> None:
        from lmbridge.acp.interfaces import AgentMessage
        from lmbridge.acp.session import probe

        proc = self.pool.process(spec, cwd)
        sink = anyio.create_memory_object_stream[AgentMessage](math.inf)[0]  # AgentGone, if it dies: nobody to tell
        try:
            with anyio.fail_after(self.pool.start_timeout + self.pool.session_timeout):
                conn = await proc.connect(sink)
                log.info("agent pre-warmed", agent=spec.id)
                proc.want_spare()
                if not self.catalog.knows_options(spec.id):  # a probe session, closed at once: its models for the picker
                    self.catalog.learn(spec.id, await probe(proc, conn, cwd) or [])
        except Exception as exc:  # the first chat will say what is wrong, with the agent's name
            log.warning("pre-warming failed", agent=spec.id, error=str(exc) or type(exc).__name__)
        finally:
            proc.detach(sink)


class Saved(Protocol):
    """State kept in the session index: ``save`` writes it if it changed (raises ``OSError``)."""

    async def save(self) -> None: ...


class Saver:
    """Writes what changed of ``parts`` to the session index every ``SAVE_PERIOD`` seconds
    (``run``) and once more at the shutdown (``save``). ``where``: the index's path, for
    the warning when a write fails (the daemon goes on)."""

    def __init__(self, parts: Sequence[Saved], where: str) -> None:
        self.parts = list(parts)
        self.where = where

    async def run(self) -> None:
        while True:
            await anyio.sleep(SAVE_PERIOD)
            await self.save()

    async def save(self) -> None:
        for part in self.parts:
            try:
                await part.save()
            except OSError as exc:
                log.warning("session index not saved", path=self.where, error=str(exc))


class IdleCollector:
    """Once dropped session actors have finished and no request runs, collects the garbage
    they left (cycles: tasks, streams, processes). The daemon raises the collector's
    threshold (``root.GC_THRESHOLDS``), so an idle daemon would otherwise keep it. The
    history actor tells it each actor it drops (``dropped``) and ticks it (``tick``)."""

    def __init__(self) -> None:
        self._closing: list[anyio.Event] = []  # the dropped actors' ``finished``, not set yet
        self._garbage = False  # actors finished since the last collection

    def dropped(self, finished: anyio.Event) -> None:
        self._prune()
        self._closing.append(finished)

    def tick(self, busy: bool) -> None:
        """``busy``: a request runs (no collection now). Finished actors are let go of at
        every tick, busy or not."""
        self._prune()
        if not self._garbage or busy:
            return
        self._garbage = False
        gc.collect()

    def _prune(self) -> None:
        still = [e for e in self._closing if not e.is_set()]
        self._garbage |= len(still) < len(self._closing)
        self._closing = still
