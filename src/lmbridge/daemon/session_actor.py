"""The session actor: one ACP agent conversation driven for one VS Code chat.

It owns the chat's ACP session on its agent's shared process
(``acp.process.AgentProcess``: one process per agent, sessions multiplexed by
sessionId, docs/sessions.md) and the turn machine (``turn.TurnMachine``), and it decides nothing: everything it
receives on its one mailbox (jobs, cancels, the agent's frames, prompt
answers, MCP tool calls, timers) becomes a ``turn`` event, and it carries out
the effects the machine returns. So the lifecycle's rules live in one pure
module, tested row by row, and this one is only I/O. What the mailbox carries is a
closed union (``daemon.mail.Mail``), and ``_handle`` and ``_apply`` dispatch with
``match``, ``assert_never`` in the default case: mypy proves each kind is handled.

Nothing here blocks the loop: the agent's start, each ``session/new``, each
``session/prompt`` and every write to the agent run in child tasks (writes in
order, through one writer task, ``daemon.agent_writer``), so a cancel, a close
or stdin EOF arriving meanwhile is handled at once. Every timer is a task in its
own cancel scope (``daemon.timers``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, assert_never

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from lmbridge.acp import files as acp_files
from lmbridge.acp.client_requests import ClientRequests
from lmbridge.acp.connection import Incoming, Response
from lmbridge.acp.lifecycle import Prompts, SessionLife, Started
from lmbridge.acp.process import AgentGone, AgentPool, AgentProcess
from lmbridge.acp.session import AcpSession, Opened
from lmbridge.core import elicitation, present, session_state, turn
from lmbridge.core.json_values import json_object
from lmbridge.core.messages import AgentSpec
from lmbridge.core.present import Skipped, TurnRenderer
from lmbridge.core.transcript import turn_blocks
from lmbridge.daemon import incoming
from lmbridge.daemon.agent_writer import WRITE_TIMEOUT, AgentWriter
from lmbridge.daemon.catalog import auth_hint
from lmbridge.daemon.chat_controls import ChatControls, ControlSet, SetControl
from lmbridge.daemon.job import Job, Jobs, SessionHooks
from lmbridge.daemon.mail import CancelRequest, EndSession, Mail, McpCall, drain, left_unread, unread_answer
from lmbridge.daemon.mailbox import ChunkMailbox
from lmbridge.daemon.timers import Timers
from lmbridge.log import get_logger
from lmbridge.rpc.channel import NoClient
from lmbridge.tools.chat_tools import ChatTools

if TYPE_CHECKING:
    from lmbridge.rpc.record import Recorder

log = get_logger("session")


def _seconds(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


# Overridable for tests (a short drain; no notice unless a test wants one; short bounds).
# The start's bounds are the pool's (acp.process: START_TIMEOUT for spawn + initialize,
# SESSION_TIMEOUT for each session request); while it waits, a line every START_PROGRESS seconds.
START_PROGRESS = _seconds("LMBRIDGE_START_PROGRESS", turn.START_PROGRESS)
DRAIN_TIMEOUT = _seconds("LMBRIDGE_DRAIN_TIMEOUT", turn.DRAIN)
START_NOTICE = _seconds("LMBRIDGE_START_NOTICE", turn.START_NOTICE)
# Bytes of text kept for the next request while a permission card waits: bounded, so output nobody reads cannot grow without end.
PENDING_OUTPUT = int(os.environ.get("LMBRIDGE_PENDING_OUTPUT_BYTES") or turn.BUFFER_LIMIT)


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
        self.pool = pool or AgentPool()
        self.process: AgentProcess = self.pool.process(spec, cwd)
        self.recorder = recorder
        self.spec = spec
        self.cwd = cwd
        self.hooks = hooks
        self._send: MemoryObjectSendStream[Mail]
        mailbox: MemoryObjectReceiveStream[Mail]
        self._send, mailbox = anyio.create_memory_object_stream[Mail](math.inf)
        # The agent's queued text chunks come out merged while a job streams (core.chunks).
        self._mailbox = ChunkMailbox(mailbox, lambda: self.machine.state is turn.State.STREAMING)
        self._writer = AgentWriter(lambda: self.acp.conn, spec.id, {"session": session_id})
        # The chat's ACP session: every session/* request goes through it.
        self.acp = AcpSession(self.process, self._send, log_fields={"session": session_id})
        self.acp_session: str | None = None  # the session whose updates are shown (from Ready on)
        # The chat's MCP endpoint (the VS Code tools it offers) and its session's start,
        # recovery and close (each start's outcome comes back on the mailbox: ``Started``;
        # ``after``: the sessions closed to make room for this one, the session cap).
        self.tools = ChatTools(session_id, spec.tools.allow, spec.tools.deny, hooks.mcp_host, lambda call: self._send.send_nowait(McpCall(call)), recorder)
        self.life = SessionLife(
            session_id, self.acp, self.process, spec, self.tools, deliver=self._send.send_nowait, opened=self._opening, hint=auth_hint(spec), after=after, resume=resume,
        )  # fmt: skip
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
        self.jobs = Jobs()
        self._prompt_usage: object = None  # the last session/prompt result's ``usage`` (ACP), until its answer ends
        self._prompts = Prompts()  # session/prompt request id → the machine's prompt number
        self._timers = Timers(self._send)
        self._tg: TaskGroup | None = None
        self._closed = False
        self._stop = False
        cwd_only: list[str] = [cwd] if cwd else []
        # The agent's fs/* and terminal/* requests, served as core/permissions.py decides:
        # what the cards the user approved in this prompt turn allow.
        self.client = ClientRequests(session_id, hooks.files or acp_files.Files(NoClient(), lambda: cwd_only), self._writer.respond, lambda: self.machine.prompt_open)
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
            job.fail(present.session_gone(self.spec.id))
            return
        self._send.send_nowait(job)

    def cancel(self, job: Job) -> None:
        """The shim cancelled ``job``'s request (already answered ``cancelled``; its parts
        stopped with its scope): the turn machine stops the agent's turn."""
        if not self._closed:
            self._send.send_nowait(CancelRequest(job))

    def close(self, reason: str) -> None:
        """End the session: pending permissions cancelled, agent stopped."""
        if not self._closed:
            self._send.send_nowait(EndSession(reason))

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
            tg.start_soon(self._writer.run)
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
        """What is still in the mailbox (queued behind a close) ends (``mail.left_unread``):
        jobs and control requests with an error; the agent's requests answered, never dropped."""
        for msg in drain(self._mailbox):
            answer = left_unread(msg, present.session_gone(self.spec.id), present.CONTROL_SESSION_GONE)
            if answer is not None:
                self._writer.respond(*answer)
        self.jobs.fail_all(present.session_gone(self.spec.id))  # a bug left one unanswered

    async def _handle(self, msg: Mail) -> None:
        """One message of the mailbox, made a ``turn`` event (or handled here: the chat's controls)."""
        event: turn.Event | None
        match msg:
            case Incoming():
                event = self._incoming(msg)
            case Response():
                event = self._prompt_answered(msg)
            case Job():
                event = await self._take(msg)
            case CancelRequest(job=job):
                event = turn.CancelJob(job.id)
            case McpCall(call=call):
                self.tools.called(call)
                event = turn.ToolInvoked(call.call_id, call.name, call.arguments or {})
            case AgentGone(conn=conn):
                # A start under way whose process another request found stuck opens its session on
                # a new process (SessionLife.start): that process's end is not this chat's.
                retried = self.life.starting() and self.acp.replaced()
                event = turn.AgentExited(conn.describe_exit()) if conn is self.acp.conn and not retried else None
            case Started():
                event = self._ready(msg)
            case EndSession(reason=reason):
                event = turn.Close(reason)
            case SetControl():
                event = None
                self.controls.set(msg)
            case ControlSet():
                event = None
                self.controls.answered(msg)
            case turn.SessionClosed() | turn.TimerFired() | turn.Update():  # from this actor's own tasks
                event = msg
            case _:
                assert_never(msg)
        if event is not None:
            await self._apply(self.machine.handle(event))

    def _prompt_answered(self, msg: Response) -> turn.PromptEnded | None:
        """A ``session/prompt``'s answer (None: not one of this actor's prompts)."""
        seq = self._prompts.pop(msg.id, None)
        if seq is None:
            return None
        if msg.error is not None:
            msg.error.args = (f"session/prompt: {msg.error.args[0].split(': ', 1)[-1]}",)
            problem = self.life.auth_problem(msg.error)
            return turn.PromptEnded(seq, error=problem or str(msg.error), named=problem is not None)
        self.controls.prompt_ended(msg.result)
        self._prompt_usage = json_object(msg.result).get("usage")  # the answer's usage part reads it (``_finish``)
        return turn.PromptEnded(seq, stop_reason=json_object(msg.result).get("stopReason"))

    async def _take(self, job: Job) -> turn.NewJob:
        """The actor owns ``job`` from here on: numbered, kept, its tools offered."""
        conn = self.acp.conn
        if conn is not None and (not conn.alive or conn.exit_reason is not None):
            # It died, or is being stopped (found stuck, stopped reading: its exit is
            # not reaped yet), just before this job came: that first, so the job starts
            # on a new process instead of failing with the old one's end.
            await self._handle(AgentGone(conn))
        self.jobs.take(job)
        if job.request.report is not None:
            self.controls.requested(job.request.report, job.request.request_id)
        await self.tools.offer(job.tools)
        return turn.NewJob(job.info())

    def _ready(self, msg: Started) -> turn.Ready:
        """A start ended: the session it opened is this actor's from here on (updates queued
        before, session/load's replay of the history, were not for the user)."""
        opened = msg.opened
        ready = turn.Ready(msg.error, msg.named)
        if opened is not None:
            self.acp_session = opened.session_id
            self.machine.reset_renderer(self._renderer())
            ready = turn.Ready(msg.error, msg.named, opened.lost)
        self.controls.ready(opened)
        return ready

    def _incoming(self, msg: Incoming) -> turn.Event | None:
        """The agent's notification or request (``daemon.incoming.read``): an update or a
        question for the machine, or answered, served or skipped here."""
        read = incoming.read(msg, self.acp_session, self.acp.id, self.client.serves)
        match read:
            case turn.Update(raw=change):
                self.controls.update(change)
                return read
            case incoming.Early(change=change):
                self.controls.early(change)  # kept for its Ready
            case incoming.Ask():
                return incoming.asked(read, self.id, self.tools.bridge, self.process.caps.profile, self.client.workspace)
            case incoming.Reply():
                self._writer.respond(read.rid, read.result, error=read.error)
            case incoming.Serve():
                self.client.handle(read.rid, read.method, read.params, self.acp_session)
            case incoming.Skip():
                self._skip(read.message)
            case None:
                pass
            case _:
                assert_never(read)
        return None

    # -- effects ----------------------------------------------------------------

    async def _apply(self, effects: list[turn.Effect]) -> None:
        """Carry out the machine's effects, in order."""
        for fx in effects:
            match fx:
                case turn.Emit():
                    job = self.jobs.get(fx.job_id)
                    if job is not None:
                        await job.send(fx.part)
                case turn.Finish():
                    await self._finish(fx)
                case turn.Fail():
                    if (job := self.jobs.pop(fx.job_id)) is not None:
                        job.fail(fx.message, self.life.auth)
                case turn.AnswerPermission():
                    log.info("permission answered", session=self.id, callId=fx.call_id, outcome=fx.outcome)
                    if fx.approved is not None:
                        self.client.granted(fx.approved)
                    self._writer.respond(fx.rid, {"outcome": dict(fx.outcome)})
                case turn.AnswerQuestion():
                    self._answer_question(fx)
                case turn.RespondError():
                    self._writer.respond(fx.rid, error=fx.error)
                case turn.ResolveTool():
                    self.tools.resolve(fx.call_id, fx.answer, self.jobs.result(fx.job_id, fx.call_id))
                case turn.SendCancel():
                    self._writer.send(self.acp.cancel())
                    self.client.stop()  # what the turn's approvals allowed, and the commands it runs
                case turn.StartAgent():
                    assert self._tg is not None
                    await self.life.start(self._tg, self.jobs[fx.job_id].tools)
                case turn.NewSession():
                    assert self._tg is not None
                    await self.life.recover(self._tg, close=fx.close, take_up=fx.take_up)
                case turn.CloseSession():
                    assert self._tg is not None
                    self._tg.start_soon(self.life.close_then, self._prompts.answered(fx.seq), partial(self._send.send_nowait, turn.SessionClosed(fx.seq)))
                case turn.Prompt():
                    self.client.revoke()  # an approval covers the turn it was given in
                    self._prompt(fx)
                case turn.StartTimer():
                    assert self._tg is not None
                    self._timers.start(fx, self._tg)
                case turn.StopTimer():
                    self._timers.stop(fx.timer)
                case turn.Died():
                    await self.hooks.died(self.id)
                case turn.Detach():
                    # The next StartAgent restarts the process and takes this session up again.
                    self.life.resume, self.acp_session = self.acp.forget(), None
                case turn.Shutdown():
                    self._stop = True
                case turn.Log():
                    getattr(log, fx.level)(fx.event, session=self.id, **fx.fields)
                case _:
                    assert_never(fx)

    async def _finish(self, fx: turn.Finish) -> None:
        """End a job's response and report what it emitted (once)."""
        job = self.jobs.pop(fx.job_id)
        self._tell_skipped()
        if job is None:
            return
        # The response's last parts are written (a callback queued by send_part) before its
        # text is digested (Job.count); shielded: the job is reported whatever happens.
        await anyio.lowlevel.cancel_shielded_checkpoint()
        await self.hooks.ended(self.id, job.fingerprint(), fx.last, list(fx.pending), job.decision.number)
        job.answer(fx.stop_reason, session_state.answer_usage(self.controls.state.usage, self._prompt_usage))
        self._prompt_usage = None

    def _answer_question(self, fx: turn.AnswerQuestion) -> None:
        """The agent's question answered (``core.elicitation.response``), with VS Code's result
        of its question tool where the request brought one."""
        result = self.jobs.result(fx.job_id, fx.call_id)
        answer = elicitation.response(fx.question, fx.answer, result.text() if result is not None else None)
        log.info("question answered", session=self.id, callId=fx.call_id, action=answer["action"])
        self._writer.respond(fx.rid, answer)

    # -- starting ----------------------------------------------------------------

    def _opening(self, opened: Opened) -> None:
        """A start opened ``opened`` (the chat's from its ``Started`` on): told to the history actor."""
        self.hooks.opened(self.id, opened.session_id, opened.resumable, opened.config_options)

    def _options_changed(self, config_options: object) -> None:
        """The agent answered new ``configOptions`` for the chat's session: the history actor keeps them."""
        if self.acp.id is not None:
            caps = self.process.caps
            self.hooks.opened(self.id, self.acp.id, caps.resume or caps.load, config_options)

    # -- prompting -----------------------------------------------------------------

    def _prompt(self, fx: turn.Prompt) -> None:
        job, caps = self.jobs[fx.job_id], self.process.caps
        blocks = turn_blocks(
            job.decision, job.history, whole=fx.whole, unsent=fx.unsent, images=caps.images, embedded_context=caps.embedded_context,
            verbatim=job.verbatim, commands=self.controls.state.commands,
        )  # fmt: skip
        # The answer comes on the mailbox in order with the agent's updates (acp.connection.Response).
        rid, write = self.acp.prompt(blocks)
        self._prompts.add(rid, fx.seq)
        changes: dict[str, str] = self.acp.wanted(job.model, None)
        changes.update(self.controls.chosen(job.request.configuration, job.request.picked))
        if changes:  # the model VS Code chose, the chat's mode and options: set before the prompt
            assert self._tg is not None
            self._tg.start_soon(self.controls.configure_then, changes, write, self._writer.out, rid)
        else:
            self._writer.send(write)

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
        self.life.cancel()
        self.client.end()  # requests being served answered before the session's last frames and its close
        await self.client.aclose()
        self._timers.stop_all()
        await self.tools.stop()  # every tool call still waiting answered first
        # The machine's last frames (session/cancel, then the cancelled permissions) go out
        # first, within the write bound; then the session is closed.
        await self._writer.finish()
        self.acp_session = None
        # The agent frees what the session holds (ACP session/close, where offered), then
        # answers the requests of the agent's that reached the mailbox while the session
        # closed (the writer has ended), bounded. From then on the pool answers them.
        await self.life.end(lambda: [answer for answer in map(unread_answer, drain(self._mailbox)) if answer is not None], WRITE_TIMEOUT)
