"""The session actor: one ACP agent conversation driven for one VS Code chat.

It owns the chat's ACP session on its agent's shared process
(``acp.process.AgentProcess``: one process per agent, sessions multiplexed by
sessionId, docs/sessions.md) and the turn machine (``turn.TurnMachine``), and it decides nothing: everything it
receives on its one mailbox (jobs, cancels, the agent's frames, prompt
answers, MCP tool calls, timers) becomes a ``turn`` event, and it carries out
the effects the machine returns. So the lifecycle's rules live in one pure
module, tested row by row, and this one is only I/O.

Nothing here blocks the loop: the agent's start, each ``session/new``, each
``session/prompt`` and every write to the agent run in child tasks (writes in
order, through one writer task, each bounded by ``WRITE_TIMEOUT``), so a
cancel, a close or stdin EOF arriving meanwhile is handled at once. Every
timer is a task in its own cancel scope, stopped by the machine's
``StopTimer`` or replaced by the next ``StartTimer`` of its kind.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskGroup

from lmbridge.acp import files as acp_files
from lmbridge.acp.client_requests import ClientRequests, session_ended
from lmbridge.acp.connection import BAD_ID_ERROR, AgentConnection, AgentError, AgentUnavailable, Incoming, Response, error_reason
from lmbridge.acp.process import AgentGone, AgentPool, AgentProcess
from lmbridge.acp.session import AcpSession, New, Opened, Resume, Spare, Write
from lmbridge.core import auth, elicitation, errors, permissions, present, session_state, turn
from lmbridge.core.history import PREFIXES, Decision, Fingerprint, Last, Pending, conversation, squeezed
from lmbridge.core.jobs import JobInfo
from lmbridge.core.messages import AgentSpec, Message, ToolInfo, ToolResultPart
from lmbridge.core.permissions import Answer
from lmbridge.core.present import Part, Skipped, TurnRenderer
from lmbridge.core.text import clip
from lmbridge.core.transcript import prompt_blocks
from lmbridge.daemon.catalog import auth_hint
from lmbridge.daemon.chat_controls import ChatControls, ControlSet, SetControl
from lmbridge.log import get_logger
from lmbridge.rpc.channel import NoClient

if TYPE_CHECKING:
    from lmbridge.rpc.record import Recorder
    from lmbridge.tools.mcp_bridge import McpHost, ToolBridge, ToolCall

log = get_logger("session")


def _seconds(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


# Overridable for tests (a short drain; no notice unless a test wants one; short bounds).
# The start's bounds are the pool's (acp.process: START_TIMEOUT for spawn + initialize,
# SESSION_TIMEOUT for each session request); while it waits, a line every START_PROGRESS seconds.
START_PROGRESS = _seconds("LMBRIDGE_START_PROGRESS", turn.START_PROGRESS)
CLOSE_TIMEOUT = 2.0  # seconds an agent may take to answer session/close before it is stopped
#: Seconds a closed session's cancelled prompt may take to be answered after session/close:
#: an agent may answer the close first and end the prompt it cancels just after.
CLOSE_GRACE = 5.0
WRITE_TIMEOUT = _seconds("LMBRIDGE_WRITE_TIMEOUT", 10.0)  # seconds one frame may take to reach an agent that stopped reading
DRAIN_TIMEOUT = _seconds("LMBRIDGE_DRAIN_TIMEOUT", turn.DRAIN)
START_NOTICE = _seconds("LMBRIDGE_START_NOTICE", turn.START_NOTICE)
# Bytes of text kept for the next request while a permission card waits: bounded, so output nobody reads cannot grow without end.
PENDING_OUTPUT = int(os.environ.get("LMBRIDGE_PENDING_OUTPUT_BYTES") or turn.BUFFER_LIMIT)

class PartSink(Protocol):
    """Where one chat request's response parts go (``router.Parts``: ``lm/responsePart``
    frames of that request). ``stopped()``: the request's task scope was cancelled
    (``$/cancelRequest``, the shutdown): from then on nothing more is sent for it."""

    def send(self, part: Part) -> None: ...

    def stopped(self) -> bool: ...


@dataclass(eq=False)
class ChatRequest:
    """One ``provideLanguageModelChatResponse`` on its way to a session actor.

    Built by the router; the history actor owns it until it grants it a session (it
    writes ``shown``: the line sent while it waits for a free session), then it becomes a
    ``Job`` the session actor owns."""

    spec: AgentSpec
    messages: tuple[Message, ...]
    cwd: str | None
    parts: PartSink
    tools: tuple[ToolInfo, ...] = ()  # the request's options.tools
    verbatim: bool = False  # user messages as they came (initialize's userTurns)
    model: str | None = None  # one of the agent's own models (a value of its "model" config option)
    shown: list[Part] = field(default_factory=list)  # parts sent before it had a session
    # VS Code's model configuration sent with this request (control id → value), and what of it
    # changed since the previous request on the same model (session_state.picked): the user's choice.
    configuration: dict[str, Any] | None = None
    picked: dict[str, Any] = field(default_factory=dict)
    request_id: Any = None  # the shim's request id (client/sessionState names it)
    model_id: str = ""  # the VS Code model id the request named (its stateful marker says it)
    # Tells the shim the chat's state: (chat id, request id or None, session_state.to_wire(...)).
    report: Callable[[str, Any, dict[str, Any]], None] | None = None

    def notice(self, text: str) -> None:
        """Show ``text`` in the chat while the request waits (``cap.waiting_notice``)."""
        if not self.parts.stopped():
            part: Part = {"type": "text", "value": text}
            self.shown.append(part)
            self.parts.send(part)


@dataclass(eq=False)
class Job:
    """A ``ChatRequest`` granted a session: its ``turn`` (the history actor's
    classification), run by the session actor of ``turn.session_id``, which owns it from
    ``submit`` on: it sets ``id``, counts what the response emits (the fingerprint), and
    sets ``done`` once, with ``stop_reason`` or ``error``."""

    decision: Decision
    request: ChatRequest
    done: anyio.Event = field(default_factory=anyio.Event)
    stop_reason: str | None = None
    error: str | None = None
    error_data: dict[str, Any] | None = None  # the error's data: auth.problem's when the agent needs a login
    usage: dict[str, int] | None = None  # what the answer's ``usage`` part tells (session_state.answer_usage)
    id: int = 0  # set by the actor when it takes the job up
    # What this response emitted, for the history core's fingerprint.
    _text: hashlib.blake2b = field(default_factory=lambda: hashlib.blake2b(digest_size=16))
    _shown: hashlib.blake2b = field(default_factory=lambda: hashlib.blake2b(digest_size=16))  # text + thinking
    call_ids: list[str] = field(default_factory=list)
    # The text's digest at each of the last part boundaries (history.Fingerprint.prefixes).
    _prefixes: deque[bytes] = field(default_factory=lambda: deque(maxlen=PREFIXES))
    _texts: int = 0

    def __post_init__(self) -> None:
        for part in self.request.shown:  # VS Code replays it as part of this answer
            self.count(part)

    @property
    def history(self) -> tuple[Message, ...]:
        return self.request.messages

    @property
    def tools(self) -> tuple[ToolInfo, ...]:
        return self.request.tools

    @property
    def verbatim(self) -> bool:
        return self.request.verbatim

    @property
    def model(self) -> str | None:
        return self.request.model

    @property
    def cancelled(self) -> bool:
        """The request was cancelled: nothing more is emitted for it."""
        return self.request.parts.stopped()

    async def send(self, part: Part) -> None:
        if self.cancelled or self.done.is_set():
            return
        self.count(part)
        self.request.parts.send(part)

    def count(self, part: Part) -> None:
        """Take ``part`` into the fingerprint (``send`` does; so does the job's start, for
        the line sent before it existed, while the request waited for a free session)."""
        if part["type"] == "text":
            value = squeezed(part["value"])
            if self._texts:
                self._prefixes.append(self._text.digest())
            self._texts += 1
            self._text.update(value)
            self._shown.update(value)
        elif part["type"] == "thinking":
            self._shown.update(squeezed(part["value"]))
        elif part["type"] == "tool_call":
            self.call_ids.append(part["callId"])

    def fingerprint(self) -> Fingerprint:
        # A response the user stopped may come back cut at a part boundary (Fingerprint.prefixes).
        prefixes = tuple(self._prefixes) if self.cancelled else ()
        return Fingerprint(self._text.digest(), tuple(self.call_ids), self._shown.digest(), prefixes)

    def info(self) -> JobInfo:
        t = self.decision
        return JobInfo(
            id=self.id,
            answers=t.answers,
            cancel_first=t.cancel_first,
            has_prompt=bool(t.prompt),
            messages=t.context + t.prompt,
            tools=frozenset(tool.name for tool in self.tools),
            cancelled=self.cancelled,
        )


# Mailbox messages of the actor's own (the agent's frames arrive as ``Incoming``).


@dataclass(frozen=True)
class _CancelJob:
    job: Job


@dataclass(frozen=True)
class _ToolInvoked:
    call: ToolCall


@dataclass(frozen=True)
class _Close:
    reason: str


@dataclass
class SessionHooks:
    """How a session actor reports to the history actor."""

    # (session id, what the response emitted, how it ended, the calls it left pending, Decision.number)
    ended: Callable[[str, Fingerprint, Last, list[Pending], int], Awaitable[None]]
    died: Callable[[str], Awaitable[None]]
    mcp_host: Callable[[], Awaitable[McpHost]]  # the daemon's MCP endpoint, started on first use
    # The chat's ACP sessionId, whether the agent can take it up again (session/resume or
    # session/load: for recovery after eviction, a crash, a restart), and the session's
    # configOptions as the agent answered them (its models and modes, agent_models).
    opened: Callable[[str, str, bool, Any], None] = lambda session_id, acp_session, resumable, config_options: None
    # The agents' fs/* requests (through VS Code, or the disk). None: from disk, the session's
    # cwd the only workspace folder.
    files: acp_files.Files | None = None


class SessionActor:
    """Drives one ACP session for one history session. Run ``run()`` in a task group.

    ``resume``: the ACP sessionId the chat had (a dormant session: evicted, its agent
    restarted, or a daemon restarted): taken up again with ``session/resume`` or
    ``session/load`` where the agent offers them, else a fresh session is told the
    conversation (``turn.Ready.lost``).
    """

    def __init__(
        self,
        session_id: str,
        spec: AgentSpec,
        cwd: str | None,
        hooks: SessionHooks,
        *,
        pool: AgentPool | None = None,
        recorder: Recorder | None = None,
        after: Sequence[anyio.Event] = (),
        resume: str | None = None,
        notice: float | None = None,
    ) -> None:
        self.id = session_id
        # Sessions closed to make room for this one (the session cap): they are closed
        # at the agent before this one opens, so the cap holds at the agent too.
        self.after = tuple(after)
        self.pool = pool or AgentPool()
        self.process: AgentProcess = self.pool.process(spec, cwd)
        self.resume = resume
        self.recorder = recorder
        self.spec = spec
        self.cwd = cwd
        self.hooks = hooks
        self._send, self._mailbox = anyio.create_memory_object_stream[Any](math.inf)
        self._out, self._outbox = anyio.create_memory_object_stream[Write](math.inf)
        # The chat's ACP session: every session/* request goes through it.
        self.acp = AcpSession(self.process, self._send, self, log_fields={"session": session_id})
        self._auth: dict[str, Any] | None = None  # auth.problem's data once the agent said it needs a login
        self.acp_session: str | None = None  # the session whose updates are shown (from Ready on)
        self._opened: Opened | None = None  # what a start opened, taken at Ready
        # The session's modes, options, commands and usage (session_state), told to the shim.
        self.controls = ChatControls(session_id, self.acp, self._send, lambda: self.acp_session is not None, spec.mode, self._options_changed)
        self.skipped = Skipped()  # what of the agent's traffic could not be used, counted
        self.machine = turn.TurnMachine(
            spec.name or spec.id,
            self._renderer(),
            drain=DRAIN_TIMEOUT,
            notice=START_NOTICE if notice is None else notice,
            progress=START_PROGRESS if notice is None or math.isfinite(notice) else math.inf,
            buffer_limit=PENDING_OUTPUT,
        )
        self.jobs: dict[int, Job] = {}
        self._prompt_usage: Any = None  # the last session/prompt result's ``usage`` (ACP), until its answer ends
        self._prompts: dict[int, int] = {}  # session/prompt request id → the machine's prompt number
        self._job_ids = 0
        self.tool_calls: dict[str, ToolCall] = {}  # callId → the VS Code tool call the agent waits on
        self.bridge: ToolBridge | None = None  # when the agent is offered VS Code tools
        self.mcp_servers: list[dict[str, Any]] = []
        self._timers: dict[turn.Timer, anyio.CancelScope] = {}
        self._starting: anyio.CancelScope | None = None
        self._tg: TaskGroup | None = None
        self._closed = False
        self._stop = False
        self._written = anyio.Event()  # the writer has sent everything and ended
        cwd_only: list[str] = [cwd] if cwd else []
        # The agent's fs/* and terminal/* requests, served as core/permissions.py decides:
        # what the cards the user approved in this prompt turn allow.
        self.client = ClientRequests(session_id, hooks.files or acp_files.Files(NoClient(), lambda: cwd_only), self._respond, lambda: self.machine.prompt_open)
        self.finished = anyio.Event()  # set when run() has returned (agent stopped)

    def _renderer(self) -> TurnRenderer:
        return TurnRenderer(self._skip, self.process.caps.profile)

    def _skip(self, message: str) -> None:
        """Something of the agent's traffic the daemon cannot use: logged the first time,
        counted after (``present.Skipped``; the counts are logged at each response's end)."""
        if self.skipped.first(message):
            log.warning(message, session=self.id, agent=self.spec.id, note="logged once; repeats are counted at the response's end")

    def _tell_skipped(self) -> None:
        for message, count in self.skipped.take():
            log.warning("skipped again", what=message, count=count, session=self.id, agent=self.spec.id)

    # -- public, called from other tasks -----------------------------------

    def submit(self, job: Job) -> None:
        """Hand ``job`` over: the actor owns it from now on. A closed actor reads no more
        jobs: one submitted to it fails at once instead of waiting forever."""
        if self._closed:
            job.error = present.session_gone(self.spec.id)
            job.done.set()
            return
        self._send.send_nowait(job)

    def cancel(self, job: Job) -> None:
        """The shim cancelled ``job``'s request (already answered ``cancelled``; its parts
        stopped with its scope): the turn machine stops the agent's turn."""
        if not self._closed:
            self._send.send_nowait(_CancelJob(job))

    def close(self, reason: str) -> None:
        """End the session: pending permissions cancelled, agent stopped."""
        if not self._closed:
            self._send.send_nowait(_Close(reason))

    async def set_control(self, request: SetControl) -> None:
        """Set a control on the live session (``SetControl``); returns once it is answered."""
        if self._closed:
            request.fail(present.CONTROL_SESSION_GONE)
        else:
            self._send.send_nowait(request)
        await request.done.wait()

    # -- the loop -------------------------------------------------------------

    async def run(self) -> None:
        """The actor's loop. A bug here ends this session only (its requests get
        an error, its agent is stopped), never the daemon and the other chats."""
        try:
            await self._run()
        except Exception:
            log.exception("session actor failed", session=self.id, agent=self.spec.id)
            with anyio.CancelScope(shield=True):
                await self.hooks.died(self.id)

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self.controls.start(tg)
            tg.start_soon(self._writer)
            # Each command's output and exit come back on the mailbox as updates (in order
            # with the agent's), rendered live under its tool call (core.present).
            hosted = self.pool.terminals
            self.client.start(tg, None if hosted is None else hosted.session(self.cwd, self._terminal_update, tg, folders=self.client.files.folders))
            try:
                async for msg in self._mailbox:
                    # Everything already queued is handled before the next await on
                    # the mailbox: a burst of agent updates costs one event-loop
                    # round, not one per update (the streaming hot path).
                    while True:
                        await self._handle(msg)
                        if self._stop:
                            return
                        try:
                            msg = self._mailbox.receive_nowait()
                        except anyio.WouldBlock:
                            break
            except Exception as exc:
                with anyio.CancelScope(shield=True):
                    await self._apply(self.machine.handle(turn.Close(f"internal error: {exc!r}")))
                raise
            finally:
                self._closed = True
                with anyio.CancelScope(shield=True):
                    self._tell_skipped()
                    self._fail_unread()
                    await self._stop_agent()
                    self.finished.set()
                tg.cancel_scope.cancel()

    def _fail_unread(self) -> None:
        """Jobs and control requests still in the mailbox (queued behind a close) end with an error."""
        while True:
            try:
                msg = self._mailbox.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
            if isinstance(msg, Job) and not msg.done.is_set():
                msg.error = present.session_gone(self.spec.id)
                msg.done.set()
            request = msg if isinstance(msg, SetControl) else msg.request if isinstance(msg, ControlSet) else None
            if request is not None:
                request.fail(present.CONTROL_SESSION_GONE)
            answer = _unread_answer(msg)
            if answer is not None:  # the agent's request, queued behind the close: answered, never dropped
                self._respond(*answer)
        for job in self.jobs.values():  # a bug left it unanswered: never leave a request hanging
            if not job.done.is_set():
                job.error = job.error or present.session_gone(self.spec.id)
                job.done.set()

    async def _handle(self, msg: Any) -> None:
        event: turn.Event | None
        if isinstance(msg, Incoming):
            event = await self._incoming(msg)
        elif isinstance(msg, Response):
            seq = self._prompts.pop(msg.id, None)
            if seq is None:
                return
            if msg.error is not None:
                msg.error.args = (f"session/prompt: {msg.error.args[0].split(': ', 1)[-1]}",)
                problem = self._auth_problem(msg.error)
                event = turn.PromptEnded(seq, error=problem or str(msg.error), named=problem is not None)
            else:
                self.controls.prompt_ended(msg.result)
                self._prompt_usage = _object(msg.result).get("usage")  # the answer's usage part reads it (``_finish``)
                event = turn.PromptEnded(seq, stop_reason=_object(msg.result).get("stopReason"))
        elif isinstance(msg, Job):
            conn = self.acp.conn
            if conn is not None and (not conn.alive or conn.exit_reason is not None):
                # It died, or is being stopped (found stuck, stopped reading: its exit is
                # not reaped yet), just before this job came: that first, so the job starts
                # on a new process instead of failing with the old one's end.
                await self._handle(AgentGone(conn))
            self._job_ids += 1
            msg.id = self._job_ids
            self.jobs[msg.id] = msg
            if msg.request.report is not None:
                self.controls.requested(msg.request.report, msg.request.request_id)
            if self.bridge is not None:
                await self.bridge.set_tools(self._offered(msg))
            event = turn.NewJob(msg.info())
        elif isinstance(msg, _CancelJob):
            event = turn.CancelJob(msg.job.id)
        elif isinstance(msg, _ToolInvoked):
            self.tool_calls[msg.call.call_id] = msg.call
            event = turn.ToolInvoked(msg.call.call_id, msg.call.name, msg.call.arguments or {})
        elif isinstance(msg, AgentGone):
            # A start under way whose process another request found stuck opens its session on
            # a new process (_start_agent): that process's end is not this chat's.
            retried = self._starting is not None and self.acp.replaced()
            event = turn.AgentExited(msg.conn.describe_exit()) if msg.conn is self.acp.conn and not retried else None
        elif isinstance(msg, turn.Ready):
            # The session a start opened is this actor's from here on: updates queued
            # before (session/load's replay of the history) were not for the user.
            event = msg
            opened, self._opened = self._opened, None
            if opened is not None:
                self.acp_session = opened.session_id
                self.machine.reset_renderer(self._renderer())
                event = turn.Ready(msg.error, msg.named, opened.lost)
            self.controls.ready(opened)
        elif isinstance(msg, _Close):
            event = turn.Close(msg.reason)
        elif isinstance(msg, SetControl):
            event = None
            self.controls.set(msg)
        elif isinstance(msg, ControlSet):
            event = None
            self.controls.answered(msg)
        else:  # turn.Ready, turn.PromptEnded, turn.TimerFired: from this actor's own tasks
            event = msg
        if event is not None:
            await self._apply(self.machine.handle(event))

    async def _incoming(self, msg: Incoming) -> turn.Event | None:
        params = msg.params if isinstance(msg.params, dict) else {}
        if msg.method == "session/update" and msg.id is None and not msg.bad_id:
            change = params.get("update")
            if params.get("sessionId") != self.acp_session:
                # The session being opened may tell its state before it is the chat's (claude's
                # commands, just after session/new): kept for its Ready. Else a superseded session.
                if params.get("sessionId") == self.acp.id:
                    self.controls.early(change)
                return None
            self.controls.update(change)
            return turn.Update(change)
        rid = msg.id
        if msg.method == "session/request_permission" and (rid is not None or msg.bad_id):
            if params.get("sessionId") != self.acp_session:
                if not msg.bad_id:
                    self._respond(rid, {"outcome": dict(permissions.CANCELLED)})
                return None
            bridge = None
            if self.bridge is not None:
                bridge = permissions.Bridge(self.bridge.name, frozenset(self.bridge.tools), self.process.caps.profile)
            call_id = f"lmbridge-{self.id}-{secrets.token_hex(6)}"
            return turn.PermissionAsked(
                rid, msg.params, call_id, secrets.token_urlsafe(18), bridge, answerable=not msg.bad_id,
                workspace=self.client.workspace(), profile=self.process.caps.profile,
            )  # fmt: skip
        if msg.method == elicitation.METHOD and rid is not None and not msg.bad_id:
            if params.get("sessionId") != self.acp_session:
                self._respond(rid, dict(elicitation.CANCEL))
                return None
            return turn.ElicitationAsked(rid, msg.params, f"lmbridge-{self.id}-{secrets.token_hex(6)}", secrets.token_urlsafe(18))
        if msg.bad_id:
            self._respond(None, error=BAD_ID_ERROR)
        elif rid is not None and self.client.serves(msg.method):
            self.client.handle(rid, msg.method, params, self.acp_session)
        elif rid is not None:
            self._respond(rid, error=errors.error(errors.METHOD_NOT_FOUND, msg.method))
        else:
            self._skip(f"agent notification {clip(repr(msg.method), 200)} ignored")
        return None

    # -- effects ----------------------------------------------------------------

    async def _apply(self, effects: list[turn.Effect]) -> None:
        for fx in effects:
            if isinstance(fx, turn.Emit):
                job = self.jobs.get(fx.job_id)
                if job is not None:
                    await job.send(fx.part)
            elif isinstance(fx, turn.Finish):
                await self._finish(fx)
            elif isinstance(fx, turn.Fail):
                job = self.jobs.pop(fx.job_id, None)
                if job is not None and not job.done.is_set():
                    job.error, job.error_data = fx.message, self._auth
                    job.done.set()
            elif isinstance(fx, turn.Respond):
                log.info("permission answered", session=self.id, callId=fx.call_id, outcome=fx.outcome)
                if fx.approved is not None:
                    self.client.granted(fx.approved)
                self._respond(fx.rid, {"outcome": dict(fx.outcome)})
            elif isinstance(fx, turn.AnswerQuestion):
                self._answer_question(fx)
            elif isinstance(fx, turn.RespondError):
                self._respond(fx.rid, error=fx.error)
            elif isinstance(fx, turn.ResolveTool):
                self._resolve_tool(fx)
            elif isinstance(fx, turn.SendCancel):
                self._out.send_nowait(self.acp.cancel())
                self.client.stop()  # what the turn's approvals allowed, and the commands it runs
            elif isinstance(fx, turn.StartAgent):
                self._spawn_start(self._start_agent(self.jobs[fx.job_id]))
            elif isinstance(fx, turn.NewSession):
                self._spawn_start(self._recover_session(close=fx.close, take_up=fx.take_up))
            elif isinstance(fx, turn.CloseSession):
                assert self._tg is not None
                self._tg.start_soon(self._close_then, fx.seq)
            elif isinstance(fx, turn.Prompt):
                self.client.revoke()  # an approval covers the turn it was given in
                self._prompt(fx)
            elif isinstance(fx, turn.StartTimer):
                self._start_timer(fx)
            elif isinstance(fx, turn.StopTimer):
                scope = self._timers.pop(fx.timer, None)
                if scope is not None:
                    scope.cancel()
            elif isinstance(fx, turn.Died):
                await self.hooks.died(self.id)
            elif isinstance(fx, turn.Detach):
                # The next StartAgent restarts the process and takes this session up again.
                self.resume, self.acp_session = self.acp.forget(), None
            elif isinstance(fx, turn.Shutdown):
                self._stop = True
            elif isinstance(fx, turn.Log):
                getattr(log, fx.level)(fx.event, session=self.id, **fx.fields)

    async def _finish(self, fx: turn.Finish) -> None:
        """End a job's response and report what it emitted (once)."""
        job = self.jobs.pop(fx.job_id, None)
        self._tell_skipped()
        if job is None:
            return
        await self.hooks.ended(self.id, job.fingerprint(), fx.last, list(fx.pending), job.decision.number)
        if not job.done.is_set():
            job.stop_reason = fx.stop_reason
            job.usage = session_state.answer_usage(self.controls.state.usage, self._prompt_usage)
            job.done.set()
        self._prompt_usage = None

    def _resolve_tool(self, fx: turn.ResolveTool) -> None:
        call = self.tool_calls.pop(fx.call_id, None)
        if call is None:
            return
        from mcp import types

        from lmbridge.tools.mcp_bridge import DECLINED_TEXT, STOPPED_TEXT, error_result, result_content

        job = self.jobs.get(fx.job_id) if fx.job_id is not None else None
        result: ToolResultPart | None = job.decision.results.get(fx.call_id) if job is not None else None
        if fx.answer is Answer.RESULT and result is not None:
            content: list[Any] = list(result_content(result))
            call.resolve(types.CallToolResult(content=content))
        else:
            call.resolve(error_result(DECLINED_TEXT if fx.answer is Answer.DECLINED else STOPPED_TEXT))
        log.info("tool call answered", session=self.id, callId=fx.call_id, answer=fx.answer.value)

    def _answer_question(self, fx: turn.AnswerQuestion) -> None:
        """The agent's question answered (``core.elicitation.response``), with VS Code's result
        of its question tool where the request brought one."""
        job = self.jobs.get(fx.job_id) if fx.job_id is not None else None
        result = job.decision.results.get(fx.call_id) if job is not None else None
        answer = elicitation.response(fx.question, fx.answer, result.text() if result is not None else None)
        log.info("question answered", session=self.id, callId=fx.call_id, action=answer["action"])
        self._respond(fx.rid, answer)

    def _start_timer(self, fx: turn.StartTimer) -> None:
        old = self._timers.pop(fx.timer, None)
        if old is not None:
            old.cancel()
        scope = self._timers[fx.timer] = anyio.CancelScope()

        async def fire() -> None:
            with scope:
                await anyio.sleep(fx.seconds)
                self._send.send_nowait(turn.TimerFired(fx.timer, fx.tag))

        assert self._tg is not None
        self._tg.start_soon(fire)

    # -- writes to the agent -------------------------------------------------------

    def _respond(self, rid: int | str | None, result: Any = None, error: Mapping[str, Any] | None = None) -> None:
        """Queue the answer to one of the agent's requests; the writer task sends frames in order."""

        async def write(conn: AgentConnection) -> None:
            await conn.respond(rid, result, error=error)

        self._out.send_nowait(write)

    async def _writer(self) -> None:
        """Sends queued frames in order until the outbox is closed and empty."""
        try:
            async for write in self._outbox:
                conn = self.acp.conn
                if conn is None or conn.closed.is_set():
                    continue
                try:
                    with anyio.fail_after(WRITE_TIMEOUT):
                        await write(conn)
                except AgentUnavailable:
                    continue  # _AgentGone reports it
                except TimeoutError:
                    log.warning("agent stopped reading its stdin: stopping it", session=self.id, agent=self.spec.id)
                    conn.exit_reason = f"agent {self.spec.id!r} stopped reading its stdin (one frame waited {WRITE_TIMEOUT:g} s) and was stopped"
                    await conn.close()
        finally:
            self._written.set()

    # -- starting ----------------------------------------------------------------

    def _spawn_start(self, start: Awaitable[None]) -> None:
        """Run a start (agent or ACP session) in a child task; it answers ``turn.Ready``.
        Each step is bounded where it waits (``AgentProcess.connect``: initialize;
        ``AcpSession``: each session request); the whole by the start bound plus three
        session bounds, a backstop."""
        scope = self._starting = anyio.CancelScope()
        backstop = self.pool.start_timeout + 3 * self.pool.session_timeout

        async def run() -> None:
            with scope:
                error, named = None, False
                try:
                    with anyio.fail_after(backstop):
                        await start
                except TimeoutError:
                    error = f"no answer to {self.acp.step} within {backstop:g} s"
                except AgentUnavailable as exc:  # its message names the agent and says why (exit code, stderr, a missed bound)
                    error, named = str(exc) or "the agent exited", bool(str(exc))
                except AgentError as exc:
                    problem = self._auth_problem(exc)
                    error, named = problem or str(exc), problem is not None
                except ValueError as exc:
                    error = str(exc) or type(exc).__name__
                finally:
                    if self._starting is scope:
                        self._starting = None
                self._send.send_nowait(turn.Ready(error, named))

        assert self._tg is not None
        self._tg.start_soon(run)

    async def _start_agent(self, job: Job) -> None:
        self.acp.step = "the sessions closed to make room for it"
        for finished in self.after:
            await finished.wait()

        async def servers() -> list[dict[str, Any]]:
            if self.bridge is None:
                await self._start_bridge(job)
            return self.mcp_servers

        how = Spare(tuple(self._offered(job))) if self.resume is None else Resume(self.resume)
        await self.acp.connect()
        try:
            opened = await self.acp.open(how, servers)
        except AgentUnavailable:
            if not self.acp.replaced():
                raise
            # The shared process was found stuck (by this request or another) and stopped:
            # once more on a new process, which this chat need not share with a frozen one.
            log.warning("agent process replaced: opening the session on a new one", session=self.id, agent=self.spec.id)
            await self.acp.connect()
            opened = await self.acp.open(how, servers)
        self._opening(opened)
        if opened.spare is not None and opened.spare.bridge is not None:
            await opened.spare.bridge.set_tools(self._offered(job))

    def _opening(self, opened: Opened) -> None:
        """A start opened ``opened``: the chat's from the ``Ready`` on; told to the history actor."""
        if opened.spare is not None:
            # Opened ahead (acp.process.Spare): this chat's from now on, its tools endpoint too.
            self.bridge, self.mcp_servers = opened.spare.bridge, opened.spare.mcp_servers
            if self.bridge is not None:  # a spare offering no tools has none
                self.bridge.on_call = self._on_mcp_call
        self._opened = opened
        self.hooks.opened(self.id, opened.session_id, opened.resumable, opened.config_options)

    def _auth_problem(self, exc: AgentError) -> str | None:
        """The message for an agent's error that says it needs a login (auth.problem), its
        data kept for the chat's error; None for any other error. The process is
        restarted once its chats let go of it, so a login made meanwhile is seen."""
        if not auth.is_auth_error(exc.code):
            return None
        reason = error_reason(exc.data) or exc.message
        message, self._auth = auth.problem(
            self.spec.id, self.spec.name or self.spec.id, reason, self.process.caps.auth_methods,
            [self.spec.command, *self.spec.args], auth_hint(self.spec),
        )  # fmt: skip
        self.process.retire()
        log.warning("agent needs a login", session=self.id, agent=self.spec.id, reason=reason)
        return message

    def _options_changed(self, config_options: Any) -> None:
        """The agent answered new ``configOptions`` for the chat's session: the history actor keeps them."""
        if self.acp.id is not None:
            caps = self.process.caps
            self.hooks.opened(self.id, self.acp.id, caps.resume or caps.load, config_options)

    async def _recover_session(self, close: bool = True, take_up: bool = True) -> None:
        """The session cannot simply continue (``turn.NewSession``: the stale turn after a
        cancel, docs/agents.md "Quirks"; a cancelled turn that outlived its drain deadline): closed where
        the agent offers it (``close``), then taken up again (``take_up``:
        ``AcpSession.open(Resume)``), or, the old one left for good (its prompt still open),
        replaced by a fresh session told the conversation. For an agent whose profile says a
        cancel breaks the session's history (``AgentProfile.cancel_breaks_history``), never
        taken up again: a fresh session told the conversation."""
        old = self.acp.id
        if close:
            await self.acp.close(CLOSE_TIMEOUT)
        if old is not None and not take_up:
            self.acp.leave()

        async def servers() -> list[dict[str, Any]]:
            return self.mcp_servers

        # fast-agent: the session's history holds what a cancel left (an empty assistant
        # message the model API refuses): taken up again it would fail again.
        resume = take_up and not self.process.caps.profile.cancel_breaks_history
        self._opening(await self.acp.open(Resume(old) if old is not None and resume else New(lost=True), servers))

    async def _close_then(self, seq: int) -> None:
        """``turn.CloseSession``: close the session, then tell the machine (``SessionClosed``)."""
        await self.acp.close(CLOSE_TIMEOUT)
        # The close's answer may come before the answer to the prompt it ended (the agent
        # ends that turn once it has answered): let the prompt's answer reach the machine
        # first, or the session would be left for a fresh one although the prompt ended.
        with anyio.move_on_after(CLOSE_GRACE):
            while seq in self._prompts.values():
                await anyio.sleep(0.05)
        self._send.send_nowait(turn.SessionClosed(seq))

    def _offered(self, job: Job) -> list[ToolInfo]:
        if not job.tools:
            return []
        return permissions.select_tools(job.tools, self.spec.tools.allow, self.spec.tools.deny)

    async def _start_bridge(self, job: Job) -> None:
        """Offer the request's VS Code tools through the synthetic MCP server
        (docs/tools.md). Only a session whose first request carries tools gets one:
        ``mcpServers`` are fixed at ``session/new``."""
        tools = self._offered(job)
        if not tools:
            return
        from lmbridge.tools.mcp_bridge import ToolBridge, server_name

        host = await self.hooks.mcp_host()
        self.bridge = ToolBridge(self.id, self._on_mcp_call, self.recorder, server_name(self.id, self.process.caps.profile.shared_mcp_registry))
        await host.add(self.bridge)
        await self.bridge.set_tools(tools)
        self.mcp_servers = [host.server_config(self.bridge)]

    async def _on_mcp_call(self, call: ToolCall) -> None:
        # Runs in the MCP server's task: hand the call to the actor's loop.
        self._send.send_nowait(_ToolInvoked(call))

    # -- prompting -----------------------------------------------------------------

    def _prompt(self, fx: turn.Prompt) -> None:
        job = self.jobs[fx.job_id]
        context, prompt = self._whole_conversation(job) if fx.whole else (job.decision.context, job.decision.prompt)
        blocks = prompt_blocks(
            tuple(fx.unsent) + context, prompt, images=self.process.caps.images, embedded_context=self.process.caps.embedded_context, verbatim=job.verbatim
        )
        blocks = session_state.agent_command(blocks, self.controls.state.commands)  # "//compact": the agent's own command
        # The answer comes on the mailbox in order with the agent's updates (acp.connection.Response).
        rid, write = self.acp.prompt(blocks)
        self._prompts[rid] = fx.seq
        changes: dict[str, str] = self.acp.wanted(job.model, None)
        changes.update(self.controls.chosen(job.request.configuration, job.request.picked))
        if changes:  # the model VS Code chose, the chat's mode and options: set before the prompt
            assert self._tg is not None
            self._tg.start_soon(self.controls.configure_then, changes, write, self._out, rid)
        else:
            self._out.send_nowait(write)

    @staticmethod
    def _whole_conversation(job: Job) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
        """(context, prompt) for a fresh ACP session: everything VS Code shows
        before the job's prompt (system messages left out, as always) as context."""
        answered = set(job.decision.answers)  # results of the permissions just answered: not context
        conv = []
        for m in conversation(job.history):
            content = [p for p in m.content if not (isinstance(p, ToolResultPart) and p.callId in answered)]
            if content:
                conv.append(m if len(content) == len(m.content) else m.model_copy(update={"content": content}))
        prompt = job.decision.prompt
        # The prompt is the conversation's tail, save what the history core put before it
        # (what a woken session is told about its interrupted turn): only the tail goes.
        tail = 0
        while tail < min(len(conv), len(prompt)) and conv[-1 - tail] == prompt[-1 - tail]:
            tail += 1
        return tuple(conv[: len(conv) - tail]), prompt

    # -- stopping --------------------------------------------------------------------

    def _terminal_update(self, raw: dict[str, Any]) -> None:
        """A terminal's output or exit (``core.present.TERMINAL_UPDATE``) to the mailbox."""
        try:
            self._send.send_nowait(turn.Update(raw))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the actor has ended

    async def _stop_agent(self) -> None:
        """Leave the agent: the ACP session closed where offered, the MCP endpoint removed,
        every VS Code tool call still waiting given an error result, every terminal killed.
        The process is the pool's (it exits once idle). Runs shielded, after the machine's
        last answers."""
        if self._starting is not None:
            self._starting.cancel()
        self.client.end()  # requests being served answered before the session's last frames and its close
        await self.client.aclose()
        for scope in self._timers.values():
            scope.cancel()
        for call_id in list(self.tool_calls):
            self._resolve_tool(turn.ResolveTool(call_id, Answer.CANCELLED))
        if self.bridge is not None:
            bridge, self.bridge = self.bridge, None
            (await self.hooks.mcp_host()).remove(bridge.session_id)
        # The machine's last frames (session/cancel, then the cancelled permissions) go out
        # first, within the write bound; then the session is closed.
        self._out.close()
        with anyio.move_on_after(WRITE_TIMEOUT):
            await self._written.wait()
        self.acp_session = None
        # The agent frees what the session holds (ACP session/close, where offered);
        # bounded, as any write. The process lives on for the agent's other chats.
        await self.acp.close(CLOSE_TIMEOUT)
        conn = self.acp.conn
        self.acp.detach()
        # Requests of the agent's that reached the mailbox while the session closed (the
        # writer has ended): answered here, bounded. From now on the pool answers them.
        late = []
        while True:
            try:
                answer = _unread_answer(self._mailbox.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
            if answer is not None:
                late.append(answer)
        if late and conn is not None and not conn.closed.is_set():
            with anyio.move_on_after(WRITE_TIMEOUT):
                for rid, result, error in late:
                    await conn.respond(rid, result, error=error)


def _object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (agents' answers are not trusted)."""
    return value if isinstance(value, dict) else {}


def _unread_answer(msg: Any) -> tuple[int | str | None, Any, dict[str, Any] | None] | None:
    """``(rid, result, error)``: the answer to an agent's request its session ended before
    reading (``msg`` from the mailbox): a permission ``cancelled`` (nothing approved), a request
    with an unusable id ``BAD_ID_ERROR``, anything else ``client_requests.session_ended``. None: not an agent's request."""
    if not isinstance(msg, Incoming):
        return None
    if msg.bad_id:
        return None, None, dict(BAD_ID_ERROR)
    if msg.id is None:
        return None
    if msg.method == "session/request_permission":
        return msg.id, {"outcome": dict(permissions.CANCELLED)}, None
    if msg.method == elicitation.METHOD:
        return msg.id, dict(elicitation.CANCEL), None
    return msg.id, None, session_ended(msg.method)
