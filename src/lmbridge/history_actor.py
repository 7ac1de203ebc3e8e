"""The history actor: the one owner of ``HistoryCore`` and of the session actors.

Chat requests ask it for a ``Turn`` (``begin``); session actors report each
response's end and their agent's death; a ticker evicts idle sessions. All of
it goes through one mailbox, so the core's state changes in one task, in
order. Session actors run in this actor's task group: closing it closes them
and, with them, every agent process.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from lmbridge.history import Fingerprint, HistoryCore, HistoryError, Last, Pending, Turn
from lmbridge.log import get_logger
from lmbridge.session_actor import SessionActor, SessionHooks
from lmbridge.wire import AgentSpec, Message

log = get_logger("history")


class AtCapacity(Exception):
    """Every agent process an agent may have is busy with another chat (``max_processes``)."""


@dataclass
class _Begin:
    spec: AgentSpec
    messages: Sequence[Message]
    cwd: str | None
    done: anyio.Event = field(default_factory=anyio.Event)
    result: tuple[Turn, SessionActor] | None = None
    error: Exception | None = None


@dataclass(frozen=True)
class _Ended:
    session_id: str
    fingerprint: Fingerprint
    last: Last
    pending: list[Pending]


@dataclass(frozen=True)
class _Died:
    session_id: str


@dataclass(frozen=True)
class _Tick:
    pass


class HistoryActor:
    """Routes chat requests to session actors. ``idle_timeout``: seconds a
    session may sit unused before it is evicted (its agent stopped, its pending
    permissions answered ``cancelled``)."""

    def __init__(self, idle_timeout: float = 1800.0, launcher: Any = None, recorder: Any = None, max_processes: int = 4) -> None:
        self.core = HistoryCore()
        self.launcher = launcher  # how agents start (server.Config.launcher); None: for real
        self.max_processes = max_processes  # live agent processes per agent (one per session)
        self.recorder = recorder  # record.Recorder, with --record
        self.actors: dict[str, SessionActor] = {}
        self.idle_timeout = idle_timeout
        self._send, self._mailbox = anyio.create_memory_object_stream[Any](math.inf)
        self._tg: TaskGroup | None = None
        self.hooks = SessionHooks(ended=self._ended, died=self._died, mcp_host=self._mcp_host)
        self._mcp: Any = None  # mcp_bridge.McpHost, started when a session first offers VS Code tools
        self._mcp_lock = anyio.Lock()
        self._dropped: list[SessionActor] = []  # actors closed but not finished yet
        self._garbage = False  # actors finished since the last collection

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._ticker)
            task_status.started()
            try:
                async for msg in self._mailbox:
                    self._handle(msg)
            finally:
                self.close_all("daemon shutting down")

    # -- API for other tasks ------------------------------------------------

    async def begin(self, spec: AgentSpec, messages: Sequence[Message], cwd: str | None) -> tuple[Turn, SessionActor]:
        """Classify a request; returns its Turn and the session actor to run it.

        Raises ``HistoryError`` when the messages cannot be answered.
        """
        msg = _Begin(spec, messages, cwd)
        await self._send.send(msg)
        await msg.done.wait()
        if msg.error is not None:
            raise msg.error
        assert msg.result is not None
        return msg.result

    async def aclose(self, reason: str, timeout: float = 5.0) -> None:
        """Close every session and wait (up to ``timeout`` seconds) for their agents to stop."""
        actors = list(self.actors.values())
        self.close_all(reason)
        with anyio.move_on_after(timeout):
            for actor in actors:
                await actor.finished.wait()

    def close_all(self, reason: str) -> None:
        """Close every session actor (their agents stop with them)."""
        for sid in list(self.actors):
            self._drop(sid, reason)

    async def _ended(self, session_id: str, fingerprint: Fingerprint, last: Last, pending: list[Pending]) -> None:
        await self._send.send(_Ended(session_id, fingerprint, last, pending))

    async def _died(self, session_id: str) -> None:
        await self._send.send(_Died(session_id))

    async def _mcp_host(self) -> Any:
        """The daemon's MCP endpoints (one HTTP port, one Unix socket), started on
        first use so the MCP SDK stays off the start-up path."""
        async with self._mcp_lock:
            if self._mcp is None:
                from lmbridge.mcp_bridge import McpHost

                host = McpHost()
                assert self._tg is not None
                await self._tg.start(host.run)
                self._mcp = host
            return self._mcp

    async def _ticker(self) -> None:
        period = max(0.05, min(self.idle_timeout / 4, 30.0))
        while True:
            await anyio.sleep(period)
            await self._send.send(_Tick())

    # -- the loop -----------------------------------------------------------

    def _handle(self, msg: Any) -> None:
        now = time.monotonic()
        if isinstance(msg, _Begin):
            try:
                turn = self.core.begin(msg.spec.id, msg.messages, now)
                if turn.session_id not in self.actors:
                    self._make_room(msg.spec, turn.session_id)
            except (HistoryError, AtCapacity) as exc:
                msg.error = exc
            else:
                msg.result = (turn, self._actor(turn, msg))
                log.info("request", kind=turn.kind.value, session=turn.session_id, answers={k: v.value for k, v in turn.answers.items()})
            msg.done.set()
        elif isinstance(msg, _Ended):
            if msg.session_id in self.core.sessions:
                self.core.end(msg.session_id, msg.fingerprint, msg.last, msg.pending, now)
        elif isinstance(msg, _Died):
            self._drop(msg.session_id, "agent gone")
        elif isinstance(msg, _Tick):
            self._collect_when_idle()
            for sid in self.core.idle(now, self.idle_timeout):
                log.info("session evicted", session=sid, idle_seconds=self.idle_timeout)
                self._drop(sid, "evicted after being idle")

    def _actor(self, turn: Turn, msg: _Begin) -> SessionActor:
        actor = self.actors.get(turn.session_id)
        if actor is None:
            closing = [a.finished for a in self._dropped if a.spec.id == msg.spec.id and not a.finished.is_set()]
            actor = SessionActor(
                turn.session_id, msg.spec, msg.cwd, self.hooks, launcher=self.launcher, recorder=self.recorder, after=closing
            )
            self.actors[turn.session_id] = actor
            assert self._tg is not None
            self._tg.start_soon(actor.run)
        return actor

    def _make_room(self, spec: AgentSpec, new: str) -> None:
        """Keep this agent's live processes under ``max_processes``: the least recently used
        idle sessions are closed (their chats continue, if they come back, in a fresh
        session told the conversation). Raises ``AtCapacity`` when every one is busy."""
        live = [sid for sid, actor in self.actors.items() if actor.spec.id == spec.id and sid in self.core.sessions]
        idle = sorted((sid for sid in live if not self.core.sessions[sid].busy), key=lambda sid: self.core.sessions[sid].last_active)
        while len(live) >= self.max_processes:
            if not idle:
                self.core.forget(new)
                raise AtCapacity(
                    f"agent {spec.id!r}: all {self.max_processes} of its sessions are busy with other chats "
                    "(lmbridge serve --max-agent-processes); try again when one has answered"
                )
            sid = idle.pop(0)
            live.remove(sid)
            self._drop(sid, f"closed to stay within {self.max_processes} agent processes")

    def _collect_when_idle(self) -> None:
        """Once dropped session actors have finished and no request runs, collect the
        garbage they left (cycles: tasks, streams, processes). The daemon raises the
        collector's threshold (``server.GC_THRESHOLDS``), so an idle daemon would
        otherwise keep it. Finished actors are let go at every tick, busy or not."""
        still = [a for a in self._dropped if not a.finished.is_set()]
        self._garbage |= len(still) < len(self._dropped)
        self._dropped = still
        if not self._garbage or any(s.busy for s in self.core.sessions.values()):
            return
        self._garbage = False
        gc.collect()

    def _drop(self, session_id: str, reason: str) -> None:
        forgotten = self.core.forget(session_id)
        actor = self.actors.pop(session_id, None)
        if actor is not None:
            actor.close(reason)
            still = [a for a in self._dropped if not a.finished.is_set()]
            self._garbage |= len(still) < len(self._dropped)
            self._dropped = [*still, actor]
        if forgotten is not None or actor is not None:
            log.info("session dropped", session=session_id, reason=reason)
