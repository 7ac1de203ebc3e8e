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
import math
import secrets
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskGroup

from lmbridge.acp.process import AgentPool
from lmbridge.core import cap, marker
from lmbridge.core.history import Decision, Fingerprint, HistoryCore, HistoryError, Last, PendingCall, Session
from lmbridge.core.messages import AgentSpec
from lmbridge.daemon.catalog import Catalog
from lmbridge.daemon.job import ChatRequest, Job, SessionHooks
from lmbridge.daemon.services import IdleCollector, RecentAgents
from lmbridge.daemon.session_actor import SessionActor
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from lmbridge.acp.files import Files
    from lmbridge.rpc.record import Recorder
    from lmbridge.tools.mcp_bridge import McpHost

log = get_logger("history")



class SessionStore(Protocol):
    """Where dormant sessions persist (``session_index.SessionIndex``)."""

    path: Path

    def load(self) -> list[dict[str, Any]]: ...

    def save(self, entries: list[dict[str, Any]]) -> None: ...

    def marker_key(self) -> bytes: ...


#: ``async () -> McpHost``: the daemon's MCP endpoint, started on first use (``services.ToolsHost``).
McpHostGetter = Callable[[], Awaitable["McpHost"]]


class ShuttingDown(Exception):
    """The daemon is shutting down (``HistoryActor.aclose``): the request gets no session."""


class AtCapacity(Exception):
    """Every session an agent may have (``max_processes``) stayed busy with other chats
    for the whole wait (``session_wait``), or the request was withdrawn while it waited."""


@dataclass(eq=False)
class _Begin:
    """A chat request asks for a session (``begin``); ``done`` is set once it is granted
    (``result``: its job, handed to its session actor) or refused (``error``)."""

    request: ChatRequest
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Job | None = None
    error: Exception | None = None

    @property
    def spec(self) -> AgentSpec:
        return self.request.spec


@dataclass(frozen=True)
class _Stop:
    """The shim cancelled the request (``$/cancelRequest``)."""

    request: ChatRequest


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
    pending: list[PendingCall]
    request: int | None = None  # Decision.number (None: the request begun last)


@dataclass(frozen=True)
class _Opened:
    session_id: str
    acp_session: str
    resumable: bool
    config_options: object = None  # the agent's configOptions as sent (untrusted)


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


#: What the history actor's mailbox carries.
_Message = _Begin | _Stop | _Withdraw | _Ended | _Opened | _Died | _Tick | _Shutdown


class HistoryActor:
    """Routes chat requests to session actors. ``idle_timeout``: seconds a
    session may sit unused before it is evicted (its agent stopped, its pending
    permissions answered ``cancelled``)."""

    def __init__(
        self,
        pool: AgentPool,
        catalog: Catalog,
        mcp_host: McpHostGetter,
        recent: RecentAgents,
        *,
        idle_timeout: float = 1800.0,
        recorder: Recorder | None = None,
        max_processes: int = 4,
        index: SessionStore | None = None,
        start_notice: float | None = None,
        session_wait: float = cap.SESSION_WAIT,
        files: Files | None = None,
    ) -> None:
        """``files``: an ``acp.files.Files`` serving the agents' fs/* requests (None: each
        session's from disk, its cwd the workspace)."""
        self.start_notice = start_notice  # SessionActor's notice (None: its default)
        # Seconds a request over the cap waits for a free session (``cap``); agent id → the
        # requests waiting, oldest first. Each is answered once: granted, withdrawn or failed.
        self.session_wait = session_wait
        self.queues: dict[str, list[_Begin]] = {}
        # The stateful markers' secret: this run's own until ``_restore`` reads the index's.
        self.core = HistoryCore(key=secrets.token_bytes(32), nonce=secrets.token_hex(6))
        self.index = index  # the state folder's session index, or None: nothing persisted
        self.cwds: dict[str, str | None] = {}  # session id → the cwd its agent session runs in
        self.active_at: dict[str, float] = {}  # session id → wall-clock time it was last used (the index's "saved")
        self._dirty = False  # the index is behind the core
        self.pool = pool  # one process per agent, shared by its chats
        self.catalog = catalog  # told each session's configOptions (the agent's own models)
        self.recent = recent  # told each agent a session actor starts for
        self.max_processes = max_processes  # live ACP sessions per agent (claude runs a process for each)
        self.recorder = recorder  # record.Recorder, with --record
        self.actors: dict[str, SessionActor] = {}
        self.idle_timeout = idle_timeout
        self._send, self._mailbox = anyio.create_memory_object_stream[_Message](math.inf)
        self._tg: TaskGroup | None = None
        self.hooks = SessionHooks(ended=self._ended, died=self._died, mcp_host=mcp_host, opened=self._opened, files=files)
        self._dropped: list[SessionActor] = []  # actors closed but not finished yet
        self.closing = False  # shut down (``_Shutdown`` handled): no session actor is started any more
        self.collector = IdleCollector()  # collects what dropped actors left, once idle
        # Requests granted a session, with their job and its actor (for ``stop``); let go
        # of with the request.
        self.running: weakref.WeakKeyDictionary[ChatRequest, tuple[Job, SessionActor]] = weakref.WeakKeyDictionary()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            if self.index is not None:
                await self._restore()
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

    def begin(self, request: ChatRequest) -> _Begin:
        """Ask for a session for ``request`` (queued in order with everything else sent to
        this actor; ``granted`` waits for the answer). Once granted, the request's ``Job``
        has been handed to its session actor; ``stop`` cancels it."""
        msg = _Begin(request)
        try:
            self._send.send_nowait(msg)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            msg.error = ShuttingDown("the daemon is shutting down")
            msg.done.set()
        return msg

    async def granted(self, msg: _Begin) -> Job:
        """The job ``begin`` got: classified, and run by its chat's session actor.

        A request that needs a session of its own while all ``max_processes`` of its
        agent's are busy waits (``cap.admit``), up to ``session_wait`` seconds, for the
        first to become free; the actor shows a line in its chat meanwhile
        (``ChatRequest.notice``, ``cap.waiting_notice``). At the bound it may take the
        session of a chat whose card waited all that time (``cap.Close.AT_BOUND``). The
        wait's timer lives here, in the requesting task; cancelled (the request's scope),
        it stops waiting at once (``stop`` withdraws the request).

        Raises ``HistoryError`` when the messages cannot be answered, ``AtCapacity`` when
        no session became free in time, ``ShuttingDown`` after the shutdown began.
        """
        started = time.monotonic()
        with anyio.move_on_after(self.session_wait) as bound:
            await msg.done.wait()
        if not msg.done.is_set():  # the actor decides: granted meanwhile, or refused
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._send.send_nowait(_Withdraw(msg, time.monotonic() - started, overdue=bound.cancelled_caught))
            await msg.done.wait()
        if msg.error is not None:
            raise msg.error
        assert msg.result is not None
        return msg.result

    def stop(self, request: ChatRequest) -> None:
        """The shim cancelled ``request`` (``$/cancelRequest``; its parts stopped with its
        scope). Queued in order with the requests, at once: its end (``Last.CANCELLED``) is
        recorded before any request the server read after the cancel is classified, not
        when the session actor gets to it (a later request could be matched without the
        stop otherwise); the actor's own report of the same end is then a second one,
        dropped. A request still waiting for a free session is withdrawn."""
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._send.send_nowait(_Stop(request))

    async def aclose(self, reason: str, timeout: float = 5.0) -> None:
        """Shut down: every session closed (a request read before it, still on its way to this
        actor, fails with ``ShuttingDown`` instead of starting one) and, up to ``timeout``
        seconds, their agents stopped (the pool is closed next, by its owner). The shutdown
        goes through the mailbox, in order with the requests: the loop owns the sessions,
        and nothing is started after it."""
        handled = anyio.Event()
        with anyio.move_on_after(timeout):
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self._send.send(_Shutdown(reason, handled))
                await handled.wait()  # the loop may still be starting (it reads the session index first)
            for actor in list(self._dropped):
                await actor.finished.wait()

    def close_all(self, reason: str) -> None:
        """Close every session actor (their agents stop with them)."""
        for sid in list(self.actors):
            self._drop(sid, reason)

    async def _ended(self, session_id: str, fingerprint: Fingerprint, last: Last, pending: list[PendingCall], request: int | None = None) -> None:
        await self._send.send(_Ended(session_id, fingerprint, last, pending, request))

    def _opened(self, session_id: str, acp_session: str, resumable: bool, config_options: object = None) -> None:
        self._send.send_nowait(_Opened(session_id, acp_session, resumable, config_options))

    # -- the session index ------------------------------------------------------

    async def _restore(self) -> None:
        """Wake-able sessions of a previous daemon, dormant (``HistoryCore.restore``)."""
        from lmbridge.core.history import HistoryError

        assert self.index is not None
        try:
            self.core.key = await anyio.to_thread.run_sync(self.index.marker_key)
        except OSError as exc:  # markers of this run verify in this run only
            log.warning("marker key unreadable: this run's own is used", error=str(exc)[:200])
        entries = await anyio.to_thread.run_sync(self.index.load)
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

    async def save(self) -> None:
        """Write the sessions to the index if they changed (in a thread; ``services.Saver``
        calls it). Raises ``OSError``."""
        if self.index is None or not self._dirty:
            return
        self._dirty = False
        await anyio.to_thread.run_sync(self.index.save, self._entries())

    async def _died(self, session_id: str) -> None:
        await self._send.send(_Died(session_id))

    async def _ticker(self) -> None:
        period = max(0.05, min(self.idle_timeout / 4, 30.0))
        while True:
            await anyio.sleep(period)
            await self._send.send(_Tick())

    # -- the loop -----------------------------------------------------------

    def _handle(self, msg: _Message) -> None:
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
                msg.request.notice(cap.waiting_notice(msg.spec.name or msg.spec.id))
        elif isinstance(msg, _Stop):
            self._stop(msg.request, now)
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
                self.catalog.learn(s.model_id, msg.config_options)
        elif isinstance(msg, _Died):
            self._drop(msg.session_id, "agent gone")
            self._serve_queues(now)
        elif isinstance(msg, _Shutdown):
            self.closing = True
            self._fail_waiting("the daemon is shutting down")
            self.close_all(msg.reason)
            msg.done.set()
        elif isinstance(msg, _Tick):
            self._dropped = [a for a in self._dropped if not a.finished.is_set()]
            self.collector.tick(busy=any(s.busy for s in self.core.sessions.values()))
            for sid in self.core.idle(now, self.idle_timeout):
                log.info("session evicted", session=sid, idle_seconds=self.idle_timeout)
                self._drop(sid, "evicted after being idle")
            self._serve_queues(now)

    def _grant(self, msg: _Begin, now: float, ahead: int, overdue: bool = False) -> bool:
        """Begin ``msg``'s turn if the cap lets it (``cap.admit``: closing the idle sessions it
        names); False, changing nothing, when it must wait. Decided first, carried out only
        once there is room: a request that waits or is refused changes no session (a dormant
        one keeps its resume token). Raises ``HistoryError`` (nothing changed either)."""
        request = msg.request
        plan = self.core.plan(msg.spec.id, request.messages)
        if plan.session_id not in self.actors:
            room = cap.admit(self._live(msg.spec.id), self.max_processes, ahead, overdue)
            if room.wait:
                return False
            for sid in room.close:
                self._drop(sid, f"closed to stay within {self.max_processes} agent processes")
        decision = self.core.begin(msg.spec.id, request.messages, now, plan=plan)
        mk = self.core.marker(decision.session_id, decision.number)
        if mk is not None and self.core.key and not request.parts.stopped():
            # First of the answer's parts, so that an answer stopped early carries it too.
            request.parts.send(marker.part(request.model_id or msg.spec.id, mk, self.core.key))
        log.info("request", kind=decision.kind.value, session=decision.session_id, by=plan.by, answers={k: v.value for k, v in decision.answers.items()})
        actor = self._actor(decision, request)
        job = msg.result = Job(decision, request)
        self.running[request] = (job, actor)
        actor.submit(job)  # the actor owns the job from here on
        return True

    def _stop(self, request: ChatRequest, now: float) -> None:
        """``stop``: a granted request's end recorded (what it emitted until its scope was
        cancelled: nothing is counted after) and its turn stopped; a waiting one withdrawn."""
        running = self.running.get(request)
        if running is not None:
            job, actor = running
            decision = job.decision
            if decision.session_id in self.core.sessions:
                if self.core.end(decision.session_id, job.fingerprint(), Last.CANCELLED, [], now, request=decision.number):
                    self.active_at[decision.session_id] = time.time()
                    self._dirty = True
                    self._serve_queues(now)
            actor.cancel(job)
            return
        queue = self.queues.get(request.spec.id, [])
        for msg in queue:
            if msg.request is request and not msg.done.is_set():
                queue.remove(msg)
                log.info("request withdrawn while it waited for a free session", agent=request.spec.id)
                msg.error = AtCapacity(cap.busy_message(request.spec.id, self.max_processes, 0))
                msg.done.set()
                self._serve_queues(now)
                return

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

    def _actor(self, decision: Decision, msg: ChatRequest) -> SessionActor:
        actor = self.actors.get(decision.session_id)
        if actor is None:
            closing = [a.finished for a in self._dropped if a.spec.id == msg.spec.id and not a.finished.is_set()]
            actor = SessionActor(
                decision.session_id, msg.spec, msg.cwd, self.hooks, pool=self.pool, recorder=self.recorder, after=closing, resume=decision.resume,
                notice=self.start_notice,
            )
            self.cwds[decision.session_id] = msg.cwd
            self.actors[decision.session_id] = actor
            self.recent.used(msg.spec.id)
            assert self._tg is not None
            self._tg.start_soon(actor.run)
        return actor

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
            self._dropped = [*(a for a in self._dropped if not a.finished.is_set()), actor]
            self.collector.dropped(actor.finished)
        if known or actor is not None:
            log.info("session dropped" if not asleep else "session asleep", session=session_id, reason=reason)


