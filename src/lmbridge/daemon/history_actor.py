"""The history actor: the one owner of ``HistoryCore`` and of the session actors.

Chat requests ask it for a ``Decision`` (``begin``); session actors report each
response's end, the ACP session they opened and their agent's death; a ticker
evicts idle sessions. A session whose agent session can be taken up again
sleeps instead of being forgotten (``HistoryCore.sleep``), and is persisted in
the session index (``session_index``) so that a later daemon wakes it too. All of
it goes through one mailbox, so the core's state changes in one task, in
order. Session actors run in this actor's task group: closing it closes them
and, with them, every agent process.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from lmbridge.acp.process import AgentPool
from lmbridge.core import cap
from lmbridge.core.history import Decision, Fingerprint, HistoryCore, HistoryError, Last, Pending, Session
from lmbridge.core.messages import AgentSpec, Message
from lmbridge.daemon.session_actor import SessionActor, SessionHooks
from lmbridge.log import get_logger

log = get_logger("history")

SAVE_PERIOD = 1.0  # seconds between writes of the session index while it changes


class ShuttingDown(Exception):
    """The daemon is shutting down (``HistoryActor.aclose``): the request gets no session."""


class AtCapacity(Exception):
    """Every session an agent may have (``max_processes``) stayed busy with other chats
    for the whole wait (``session_wait``), or the request was withdrawn while it waited."""


@dataclass(eq=False)
class _Begin:
    spec: AgentSpec
    messages: Sequence[Message]
    cwd: str | None
    waiting: Callable[[str], None] | None = None  # shows a line in the chat while it waits for room
    done: anyio.Event = field(default_factory=anyio.Event)
    result: tuple[Decision, SessionActor] | None = None
    error: Exception | None = None


@dataclass(frozen=True)
class _Withdraw:
    """A request that waits for room gives up: its wait is over (``overdue``: it may then
    close a session that shows a card, ``cap.Close.AT_BOUND``), or it was cancelled."""

    begin: _Begin
    waited: float
    overdue: bool = False


@dataclass(frozen=True)
class _Ended:
    session_id: str
    fingerprint: Fingerprint
    last: Last
    pending: list[Pending]
    request: int | None = None  # Decision.number (None: the request begun last)


@dataclass(frozen=True)
class _Opened:
    session_id: str
    acp_session: str
    resumable: bool
    config_options: Any = None


@dataclass(frozen=True)
class _Learnt:
    agent_id: str
    config_options: Any


@dataclass(frozen=True)
class _Images:
    agent_id: str
    images: bool  # its promptCapabilities.image


@dataclass(frozen=True)
class _Died:
    session_id: str


@dataclass(frozen=True)
class _Tick:
    pass


@dataclass(frozen=True)
class _Shutdown:
    """``aclose``: from here on no session actor is started; ``done`` is set once every
    session is closed and every waiting request answered."""

    reason: str
    done: anyio.Event


class HistoryActor:
    """Routes chat requests to session actors. ``idle_timeout``: seconds a
    session may sit unused before it is evicted (its agent stopped, its pending
    permissions answered ``cancelled``)."""

    def __init__(
        self,
        idle_timeout: float = 1800.0,
        launcher: Any = None,
        recorder: Any = None,
        max_processes: int = 4,
        index: Any = None,
        spares: bool = False,
        models_changed: Any = None,
        start_notice: float | None = None,
        session_wait: float = cap.SESSION_WAIT,
    ) -> None:
        self.start_notice = start_notice  # SessionActor's notice (None: its default)
        # Seconds a request over the cap waits for a free session (``cap``); agent id → the
        # requests waiting, oldest first. Each is answered once: granted, withdrawn or failed.
        self.session_wait = session_wait
        self.queues: dict[str, list[_Begin]] = {}
        self.core = HistoryCore()
        self.index = index  # session_index.SessionIndex, or None: nothing persisted
        self.cwds: dict[str, str | None] = {}  # session id → the cwd its agent session runs in
        self.active_at: dict[str, float] = {}  # session id → wall-clock time it was last used (the index's "saved")
        self._dirty = False  # the index is behind the core
        # One process per agent, shared by its chats (docs/sessions.md); it exits once idle.
        self.pool = AgentPool(
            idle_timeout, launcher=launcher, recorder=recorder, spares=spares, mcp_host=self._mcp_host,
            on_ready=lambda agent_id, caps: self._send.send_nowait(_Images(agent_id, caps.images)),
        )  # fmt: skip
        self.recent: list[str] = []  # agents used last, most recent first (pre-warmed at start-up)
        # Agent id → its configOptions as last learnt (agent_models.to_json): its own models in
        # the picker. ``models_changed()`` is called when they change (the server tells the shim).
        self.options: dict[str, Any] = {}
        self.images: dict[str, bool] = {}  # agent id → its promptCapabilities.image, as last seen (imageInput)
        self.models_changed = models_changed or (lambda: None)
        self.max_processes = max_processes  # live ACP sessions per agent (claude runs a process for each)
        self.recorder = recorder  # record.Recorder, with --record
        self.actors: dict[str, SessionActor] = {}
        self.idle_timeout = idle_timeout
        self._send, self._mailbox = anyio.create_memory_object_stream[Any](math.inf)
        self._tg: TaskGroup | None = None
        self.hooks = SessionHooks(ended=self._ended, died=self._died, mcp_host=self._mcp_host, opened=self._opened)
        self._mcp: Any = None  # mcp_bridge.McpHost, started when a session first offers VS Code tools
        self._mcp_lock = anyio.Lock()
        self._dropped: list[SessionActor] = []  # actors closed but not finished yet
        self.closing = False  # shut down (``_Shutdown`` handled): no session actor is started any more
        self._garbage = False  # actors finished since the last collection

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await tg.start(self.pool.run)
            if self.index is not None:
                await self._restore()
                tg.start_soon(self._saver)
            tg.start_soon(self._ticker)
            task_status.started()
            try:
                async for msg in self._mailbox:
                    self._handle(msg)
            finally:
                self.closing = True
                self._fail_waiting("the daemon is shutting down")
                self.close_all("daemon shutting down")

    # -- API for other tasks ------------------------------------------------

    async def begin(
        self,
        spec: AgentSpec,
        messages: Sequence[Message],
        cwd: str | None,
        *,
        waiting: Callable[[str], None] | None = None,
        withdraw: anyio.Event | None = None,
    ) -> tuple[Decision, SessionActor]:
        """Classify a request; returns its Decision and the session actor to run it.

        A request that needs a session of its own while all ``max_processes`` of its
        agent's are busy waits (``cap.admit``), up to ``session_wait`` seconds, for the
        first to become free; ``waiting(text)`` is called once, from the actor's task,
        with the line to show meanwhile (``cap.waiting_notice``). ``withdraw`` set: the
        request gives up waiting (the user cancelled it). At the bound it may take the
        session of a chat whose card waited all that time (``cap.Close.AT_BOUND``).

        Raises ``HistoryError`` when the messages cannot be answered, ``AtCapacity`` when
        no session became free in time or the request was withdrawn while it waited.
        """
        msg = _Begin(spec, messages, cwd, waiting)
        started = time.monotonic()
        await self._send.send(msg)
        bound = anyio.move_on_after(self.session_wait)
        try:
            with bound:
                if withdraw is None:
                    await msg.done.wait()
                else:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_set_then_cancel, msg.done, tg.cancel_scope)
                        tg.start_soon(_set_then_cancel, withdraw, tg.cancel_scope)
        finally:
            if not msg.done.is_set():  # the actor decides: granted meanwhile, or refused
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    self._send.send_nowait(_Withdraw(msg, time.monotonic() - started, overdue=bound.cancelled_caught))
        await msg.done.wait()
        if msg.error is not None:
            raise msg.error
        assert msg.result is not None
        return msg.result

    async def aclose(self, reason: str, timeout: float = 5.0) -> None:
        """Shut down: every session closed (a request read before it, still on its way to this
        actor, fails with ``ShuttingDown`` instead of starting one) and, up to ``timeout``
        seconds, their agents stopped; then the agent pool. The shutdown goes through the
        mailbox, in order with the requests: the loop owns the sessions, and nothing is
        started after it (into the pool's task group, closed next)."""
        handled = anyio.Event()
        with anyio.move_on_after(timeout):
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self._send.send(_Shutdown(reason, handled))
                await handled.wait()  # the loop may still be starting (it reads the session index first)
            for actor in list(self._dropped):
                await actor.finished.wait()
        await self.pool.aclose()
        with anyio.CancelScope(shield=True):
            await self._save()

    def close_all(self, reason: str) -> None:
        """Close every session actor (their agents stop with them)."""
        for sid in list(self.actors):
            self._drop(sid, reason)

    async def _ended(self, session_id: str, fingerprint: Fingerprint, last: Last, pending: list[Pending], request: int | None = None) -> None:
        await self._send.send(_Ended(session_id, fingerprint, last, pending, request))

    def stopped(self, decision: Decision, fingerprint: Fingerprint) -> None:
        """The shim cancelled the request running ``turn`` (``$/cancelRequest``), which
        emitted ``fingerprint`` up to then: its end (``Last.CANCELLED``) is recorded now, in
        the order the server read the cancel and the requests from stdin, not when the
        session actor gets to it (a request read after the cancel may be matched first
        otherwise). The actor's own report of the same end is then a second one, dropped."""
        self._send.send_nowait(_Ended(decision.session_id, fingerprint, Last.CANCELLED, [], decision.number))

    def prewarm(self, spec: AgentSpec, cwd: str | None) -> None:
        """Start ``spec``'s agent process now (spawn + ``initialize``, and a spare session
        where those are on), so the first chat does not wait for it (docs/sessions.md, "Pre-warming and the spare session")."""
        if self.closing:
            return
        assert self._tg is not None
        self._tg.start_soon(self._prewarm, spec, cwd)

    async def _prewarm(self, spec: AgentSpec, cwd: str | None) -> None:
        from lmbridge.acp.session import probe

        proc, me = self.pool.process(spec, cwd), object()
        sink = anyio.create_memory_object_stream[Any](math.inf)[0]  # AgentGone, if it dies: nobody to tell
        try:
            with anyio.fail_after(self.pool.start_timeout + self.pool.session_timeout):
                conn = await proc.connect(me, sink)
                log.info("agent pre-warmed", agent=spec.id)
                proc.want_spare()
                if spec.id not in self.options:  # a probe session, closed at once: its models for the picker
                    self._send.send_nowait(_Learnt(spec.id, await probe(proc, conn, cwd) or []))
        except Exception as exc:  # the first chat will say what is wrong, with the agent's name
            log.warning("pre-warming failed", agent=spec.id, error=str(exc) or type(exc).__name__)
        finally:
            proc.detach(me)

    def _opened(self, session_id: str, acp_session: str, resumable: bool, config_options: Any = None) -> None:
        self._send.send_nowait(_Opened(session_id, acp_session, resumable, config_options))

    def _learn(self, agent_id: str, config_options: Any) -> None:
        """An agent's configOptions (in the actor's task): its models, cached and shown."""
        from lmbridge.core.agent_models import current_values, select_options, to_json

        if not isinstance(config_options, list):
            return
        old = self.options.get(agent_id)
        # The values first learnt stay the options' defaults (VS Code's model configuration
        # schema, session_state): a later session's own choices do not move them.
        current = {**current_values(config_options), **current_values(old)}
        learnt = to_json(select_options(config_options), current)
        if old != learnt:
            self.options = {**self.options, agent_id: learnt}  # replaced whole: the server reads it
            self._dirty = True
            log.info("agent options learnt", agent=agent_id, options=[o["id"] for o in learnt])
            if old or learnt:  # "none" learnt for the first time changes no model list
                self.models_changed()

    # -- the session index ------------------------------------------------------

    async def _restore(self) -> None:
        """Wake-able sessions of a previous daemon, dormant (``HistoryCore.restore``)."""
        from lmbridge.core.history import HistoryError

        entries = await anyio.to_thread.run_sync(self.index.load)
        self.recent = await anyio.to_thread.run_sync(self.index.recent)
        self.options = await anyio.to_thread.run_sync(self.index.models)
        self.images = await anyio.to_thread.run_sync(self.index.images)
        now, restored = time.monotonic(), 0
        for entry in entries:
            try:
                sid = self.core.restore(entry, now)
            except HistoryError as exc:
                log.warning("session index entry ignored", error=str(exc))
                continue
            cwd, saved = entry.get("cwd"), entry.get("saved")
            self.cwds[sid] = cwd if isinstance(cwd, str) else None
            self.active_at[sid] = float(saved) if isinstance(saved, int | float) else 0.0
            restored += 1
        if restored:
            log.info("sessions restored from the index", count=restored, path=str(self.index.path))

    def _entries(self) -> list[dict[str, Any]]:
        from lmbridge.daemon.session_index import entry

        out = []
        for sid, s in self.core.sessions.items():
            data = self.core.export(sid)
            if data is not None:
                out.append(entry(data, s.model_id, self.cwds.get(sid), self.active_at.get(sid)))
        return out

    async def _save(self) -> None:
        if self.index is None or not self._dirty:
            return
        self._dirty = False
        try:
            await anyio.to_thread.run_sync(self.index.save, self._entries())
            await anyio.to_thread.run_sync(self.index.save_recent, self.recent)
            await anyio.to_thread.run_sync(self.index.save_models, dict(self.options), dict(self.images))
        except OSError as exc:
            log.warning("session index not saved", path=str(self.index.path), error=str(exc))

    async def _saver(self) -> None:
        while True:
            await anyio.sleep(SAVE_PERIOD)
            await self._save()

    async def _died(self, session_id: str) -> None:
        await self._send.send(_Died(session_id))

    async def _mcp_host(self) -> Any:
        """The daemon's MCP endpoints (one HTTP port, one Unix socket), started on
        first use so the MCP SDK stays off the start-up path."""
        async with self._mcp_lock:
            if self._mcp is None:
                from lmbridge.tools.mcp_bridge import McpHost

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
        if isinstance(msg, _Begin) and self.closing:
            msg.error = ShuttingDown("the daemon is shutting down")
            msg.done.set()
        elif isinstance(msg, _Begin):
            queue = self.queues.get(msg.spec.id, [])
            try:
                granted = self._grant(msg, now, ahead=len(queue))
            except HistoryError as exc:
                msg.error, granted = exc, True
            if not granted and self.session_wait <= 0:  # no waiting: refused at once
                msg.error, granted = AtCapacity(cap.busy_message(msg.spec.id, self.max_processes, 0)), True
            if granted:
                msg.done.set()
            else:
                self.queues[msg.spec.id] = [*queue, msg]
                log.info("request waits for a free session", agent=msg.spec.id, waiting=len(queue) + 1, cap=self.max_processes)
                if msg.waiting is not None:
                    msg.waiting(cap.waiting_notice(msg.spec.name or msg.spec.id))
        elif isinstance(msg, _Withdraw):
            queue = self.queues.get(msg.begin.spec.id, [])
            if msg.begin in queue and not msg.begin.done.is_set():
                queue.remove(msg.begin)
                granted = False
                if msg.overdue:  # its whole bound waited: a card left that long may give way
                    try:
                        granted = self._grant(msg.begin, now, ahead=0, overdue=True)
                    except HistoryError as exc:
                        msg.begin.error, granted = exc, True
                if not granted:
                    log.info("request gave up waiting for a free session", agent=msg.begin.spec.id, waited=round(msg.waited, 3))
                    msg.begin.error = AtCapacity(cap.busy_message(msg.begin.spec.id, self.max_processes, self.session_wait))
                msg.begin.done.set()
                self._serve_queues(now)  # those behind it may go now
        elif isinstance(msg, _Ended):
            if msg.session_id in self.core.sessions:
                if self.core.end(msg.session_id, msg.fingerprint, msg.last, msg.pending, now, request=msg.request):
                    self.active_at[msg.session_id] = time.time()
                    self._dirty = True
                    self._serve_queues(now)
                else:
                    log.debug("response end not recorded (superseded or recorded already)", session=msg.session_id, request=msg.request)
        elif isinstance(msg, _Opened):
            s = self.core.sessions.get(msg.session_id)
            if s is not None:
                s.resume = msg.acp_session if msg.resumable else None
                self._dirty = True
                self._learn(s.model_id, msg.config_options)
        elif isinstance(msg, _Learnt):
            self._learn(msg.agent_id, msg.config_options)
        elif isinstance(msg, _Images):
            if self.images.get(msg.agent_id, False) != msg.images:
                self.images = {**self.images, msg.agent_id: msg.images}  # replaced whole: the server reads it
                self._dirty = True
                self.models_changed()
        elif isinstance(msg, _Died):
            self._drop(msg.session_id, "agent gone")
            self._serve_queues(now)
        elif isinstance(msg, _Shutdown):
            self.closing = True
            self._fail_waiting("the daemon is shutting down")
            self.close_all(msg.reason)
            msg.done.set()
        elif isinstance(msg, _Tick):
            self._collect_when_idle()
            for sid in self.core.idle(now, self.idle_timeout):
                log.info("session evicted", session=sid, idle_seconds=self.idle_timeout)
                self._drop(sid, "evicted after being idle")
            self._serve_queues(now)

    def _grant(self, msg: _Begin, now: float, ahead: int, overdue: bool = False) -> bool:
        """Begin ``msg``'s turn if the cap lets it (``cap.admit``: closing the idle sessions it
        names); False, changing nothing, when it must wait. Decided first, carried out only
        once there is room: a request that waits or is refused changes no session (a dormant
        one keeps its resume token). Raises ``HistoryError`` (nothing changed either)."""
        plan = self.core.plan(msg.spec.id, msg.messages)
        if plan.session_id not in self.actors:
            room = cap.admit(self._live(msg.spec.id), self.max_processes, ahead, overdue)
            if room.wait:
                return False
            for sid in room.close:
                self._drop(sid, f"closed to stay within {self.max_processes} agent processes")
        decision = self.core.begin(msg.spec.id, msg.messages, now, plan=plan)
        msg.result = (decision, self._actor(decision, msg))
        log.info("request", kind=decision.kind.value, session=decision.session_id, answers={k: v.value for k, v in decision.answers.items()})
        return True

    def _serve_queues(self, now: float) -> None:
        """A session may have become free: the requests waiting take it, oldest first."""
        for agent_id, queue in list(self.queues.items()):
            while queue:
                head = queue[0]
                try:
                    if not self._grant(head, now, ahead=0):
                        break
                except HistoryError as exc:
                    head.error = exc
                queue.pop(0)
                head.done.set()
            if not queue:
                del self.queues[agent_id]

    def _fail_waiting(self, reason: str) -> None:
        for queue in self.queues.values():
            for msg in queue:
                msg.error = ShuttingDown(reason)
                msg.done.set()
        self.queues.clear()

    def _live(self, agent_id: str) -> list[Session]:
        """The agent's live sessions (each has a session actor)."""
        return [self.core.sessions[sid] for sid, actor in self.actors.items() if actor.spec.id == agent_id and sid in self.core.sessions]

    def _actor(self, decision: Decision, msg: _Begin) -> SessionActor:
        actor = self.actors.get(decision.session_id)
        if actor is None:
            closing = [a.finished for a in self._dropped if a.spec.id == msg.spec.id and not a.finished.is_set()]
            actor = SessionActor(
                decision.session_id, msg.spec, msg.cwd, self.hooks, pool=self.pool, recorder=self.recorder, after=closing, resume=decision.resume,
                notice=self.start_notice,
            )
            self.cwds[decision.session_id] = msg.cwd
            self.actors[decision.session_id] = actor
            if self.recent[:1] != [msg.spec.id]:
                self.recent = [msg.spec.id, *(a for a in self.recent if a != msg.spec.id)][:3]
                self._dirty = True
            assert self._tg is not None
            self._tg.start_soon(actor.run)
        return actor

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
        """End the session's actor; the session sleeps if its agent session can be taken
        up again (``HistoryCore.sleep``), else it is forgotten."""
        known = session_id in self.core.sessions
        asleep = self.core.sleep(session_id)
        self._dirty = True
        if not asleep:
            self.cwds.pop(session_id, None)
            self.active_at.pop(session_id, None)
        actor = self.actors.pop(session_id, None)
        if actor is not None:
            actor.close(reason)
            still = [a for a in self._dropped if not a.finished.is_set()]
            self._garbage |= len(still) < len(self._dropped)
            self._dropped = [*still, actor]
        if known or actor is not None:
            log.info("session dropped" if not asleep else "session asleep", session=session_id, reason=reason)


async def _set_then_cancel(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
