"""The session actor: one ACP agent conversation driven for one VS Code chat.

It owns the agent process (``AgentConnection``), the ACP session id, the
update renderer and the permissions the agent is waiting on. Everything it
reacts to arrives on one mailbox, in order: jobs (chat requests the history
actor routed here), cancels, the agent's notifications and requests, prompt
completions and timer ticks. So its state has one owner and no locks.

A permission request (``session/request_permission``) becomes a
``symposium-agent-action`` tool call part; permissions that arrive within
``GATHER`` seconds of each other go out in the same response, which then ends
with ``stopReason: "tool_calls"`` while the ACP turn stays open (issue #2,
"Permission bridging"). The next request's Turn carries each one's Answer.

Cancellation follows ACP (facts.md §3): every pending permission is answered
``cancelled``, ``session/cancel`` is sent, and whatever the cancelled turn
still produces is drained and dropped. An agent that then ends the next turn
at once with no output (claude-agent-acp's quirk, facts.md §5) gets a fresh
ACP session with the conversation so far.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from lmbridge import __version__
from lmbridge.acp_client import AgentConnection, AgentError, AgentExited, Incoming
from lmbridge.history import Answer, Fingerprint, Last, Pending, Turn, conversation, squeezed
from lmbridge.log import get_logger
from lmbridge.render import Part, TurnRenderer
from lmbridge.transcript import prompt_blocks
from lmbridge.wire import AGENT_ACTION_TOOL, AgentSpec, Message, ToolInfo, ToolResultPart

log = get_logger("session")

GATHER = 0.1  # seconds: permissions and tool calls this close together go out in one response
START_TIMEOUT = 60.0  # seconds for initialize + session/new
# Seconds a cancelled prompt may take to end before its ACP session is abandoned
# (LMBRIDGE_DRAIN_TIMEOUT overrides it: the tests use a short one).
DRAIN_TIMEOUT = float(os.environ.get("LMBRIDGE_DRAIN_TIMEOUT") or 10.0)
STOP_REASONS = frozenset({"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"})

Emit = Callable[[Part], Awaitable[None]]


@dataclass(eq=False)
class Job:
    """One ``provideLanguageModelChatResponse`` handed to a session actor.

    ``emit`` sends one part to VS Code; ``done`` is set once, with
    ``stop_reason`` or ``error``. ``cancelled`` is set by the server when the
    shim cancels: from then on nothing more is emitted for this job.
    """

    turn: Turn
    history: tuple[Message, ...]
    emit: Emit
    done: anyio.Event = field(default_factory=anyio.Event)
    stop_reason: str | None = None
    error: str | None = None
    cancelled: bool = False
    recorded: bool = False  # its end reported to the history actor
    actor: Any = None  # the SessionActor running it (for cancellation)
    tools: tuple[ToolInfo, ...] = ()  # the request's options.tools
    # What this response emitted, for the history core's fingerprint.
    _text: Any = field(default_factory=lambda: hashlib.blake2b(digest_size=16))
    _shown: Any = field(default_factory=lambda: hashlib.blake2b(digest_size=16))  # text + thinking
    call_ids: list[str] = field(default_factory=list)
    output: bool = False

    async def send(self, part: Part) -> None:
        if self.cancelled or self.done.is_set():
            return
        if part["type"] == "text":
            value = squeezed(part["value"])
            self._text.update(value)
            self._shown.update(value)
        elif part["type"] == "thinking":
            self._shown.update(squeezed(part["value"]))
        elif part["type"] == "tool_call":
            self.call_ids.append(part["callId"])
        self.output = True
        await self.emit(part)

    def fingerprint(self) -> Fingerprint:
        return Fingerprint(self._text.digest(), tuple(self.call_ids), self._shown.digest())


@dataclass
class Permission:
    """A ``session/request_permission`` the agent waits on."""

    rid: int | str
    call_id: str
    token: str
    options: list[dict[str, Any]]
    part: Part  # the symposium-agent-action tool call
    surfaced: bool = False


@dataclass
class ToolPending:
    """An agent's MCP call of a VS Code tool, waiting for VS Code's result."""

    call: Any  # mcp_bridge.ToolCall
    part: Part  # the tool call VS Code runs
    surfaced: bool = False


@dataclass(frozen=True)
class _ToolInvoked:
    call: Any  # mcp_bridge.ToolCall


@dataclass(frozen=True)
class _CancelJob:
    job: Job


@dataclass(frozen=True)
class _PromptDone:
    acp_session: str
    result: Any = None
    error: str | None = None
    timed_out: bool = False  # a cancelled prompt the agent never ended


@dataclass(frozen=True)
class _Flush:
    job: Job
    generation: int


@dataclass(frozen=True)
class _AgentGone:
    pass


@dataclass(frozen=True)
class _Close:
    reason: str


def choose_option(options: list[dict[str, Any]], answer: Answer) -> dict[str, Any]:
    """The ``RequestPermissionOutcome`` for an Answer: the option chosen by
    ``kind`` (never by id: ids differ per agent, facts.md §3), else cancelled."""
    wanted = {Answer.ALLOW: "allow_once", Answer.REJECT: "reject_once"}.get(answer)
    for option in options:
        if wanted and option.get("kind") == wanted and isinstance(option.get("optionId"), str):
            return {"outcome": "selected", "optionId": option["optionId"]}
    return {"outcome": "cancelled"}


@dataclass
class SessionHooks:
    """How a session actor reports to the history actor."""

    ended: Callable[[str, Fingerprint, Last, list[Pending]], Awaitable[None]]
    died: Callable[[str], Awaitable[None]]
    mcp_host: Callable[[], Awaitable[Any]]  # the daemon's McpHost, started on first use


class SessionActor:
    """Drives one agent for one history session. Run ``run()`` in a task group."""

    def __init__(self, session_id: str, spec: AgentSpec, cwd: str | None, hooks: SessionHooks) -> None:
        self.id = session_id
        self.spec = spec
        self.cwd = cwd
        self.hooks = hooks
        self._send, self._mailbox = anyio.create_memory_object_stream[Any](math.inf)
        self.conn: AgentConnection | None = None
        self.acp_session: str | None = None
        self.images = False
        self.renderer = TurnRenderer(lambda msg: log.warning(msg, session=self.id, agent=spec.id))
        self.job: Job | None = None
        self.waiting: list[Job] = []  # jobs waiting for a cancelled prompt to drain
        self.permissions: dict[str, Permission] = {}
        self.tool_calls: dict[str, ToolPending] = {}  # VS Code tool calls the agent waits on
        self.bridge: Any = None  # mcp_bridge.ToolBridge, when the agent is offered VS Code tools
        self.mcp_servers: list[dict[str, Any]] = []
        self.buffer: list[Part] = []  # parts produced while no request streams
        self.prompt_open = False
        self.prompt_result: _PromptDone | None = None  # a prompt that ended while no job streamed
        self.draining = False
        self.cancelled_before = False  # the last prompt was cancelled: the next one is watched (claude quirk)
        self.after_cancel = False  # the open prompt is the first one after a cancel
        self.needs_context = False  # a fresh ACP session: the next prompt carries the conversation
        # Messages of requests cancelled before their prompt was sent: the history core
        # counts them as seen, so the next prompt carries them as context.
        self.unsent: tuple[Message, ...] = ()
        self._generation = 0
        self._tg: TaskGroup | None = None
        self._closed = False
        self.finished = anyio.Event()  # set when run() has returned (agent stopped)

    # -- public, called from other tasks -----------------------------------

    async def submit(self, job: Job) -> None:
        # No await between the check and the send: a closed actor reads no more
        # jobs, so one submitted now fails at once instead of waiting forever.
        if self._closed:
            job.error = f"agent {self.spec.id!r}: its session has just ended; please retry"
            job.done.set()
            return
        self._send.send_nowait(job)

    def cancel(self, job: Job) -> None:
        """The shim cancelled ``job``'s request (already answered ``cancelled``)."""
        job.cancelled = True
        self._send.send_nowait(_CancelJob(job))

    def close(self, reason: str) -> None:
        """End the session: pending permissions cancelled, agent stopped."""
        if not self._closed:
            self._send.send_nowait(_Close(reason))

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
        reason = "session ended"
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                async for msg in self._mailbox:
                    # Everything already queued is handled before the next await on
                    # the mailbox: a burst of agent updates costs one event-loop
                    # round, not one per update (the streaming hot path).
                    while not isinstance(msg, _Close):
                        await self._handle(msg)
                        try:
                            msg = self._mailbox.receive_nowait()
                        except anyio.WouldBlock:
                            break
                    if isinstance(msg, _Close):
                        await self._shutdown(msg.reason)
                        break
            except Exception as exc:
                reason = f"internal error: {exc!r}"
                raise
            finally:
                self._closed = True
                with anyio.CancelScope(shield=True):
                    await self._shutdown(reason)
                    self._fail_unread()
                    self.finished.set()
                tg.cancel_scope.cancel()

    def _fail_unread(self) -> None:
        """Jobs still in the mailbox (queued behind a close) end with an error."""
        while True:
            try:
                msg = self._mailbox.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return
            if isinstance(msg, Job) and not msg.done.is_set():
                msg.error = f"agent {self.spec.id!r}: its session has just ended; please retry"
                msg.done.set()

    async def _handle(self, msg: Any) -> None:
        if isinstance(msg, Incoming):
            await self._on_incoming(msg)
        elif isinstance(msg, Job):
            await self._on_job(msg)
        elif isinstance(msg, _PromptDone):
            await self._on_prompt_done(msg)
        elif isinstance(msg, _Flush):
            if msg.job is self.job and msg.generation == self._generation:
                await self._finish(msg.job, "tool_calls", Last.PENDING)
        elif isinstance(msg, _CancelJob):
            await self._on_cancel(msg.job)
        elif isinstance(msg, _ToolInvoked):
            await self._on_tool_invoked(msg.call)
        elif isinstance(msg, _AgentGone):
            await self._on_agent_gone()

    # -- jobs -----------------------------------------------------------------

    async def _on_job(self, job: Job) -> None:
        turn = job.turn
        if self.conn is None:
            try:
                await self._start_agent(job)
            except (AgentExited, AgentError, TimeoutError) as exc:
                await self._fail(job, f"agent {self.spec.id!r} failed to start: {exc}")
                return
        elif self.bridge is not None:
            await self.bridge.set_tools(self._offered(job))
        # Answer what the previous response left pending, each on its own; a
        # request cancelled before it got here approves nothing.
        for call_id, answer in turn.answers.items():
            if job.cancelled and answer is not Answer.RESULT:
                answer = Answer.CANCELLED
            await self._answer(call_id, answer, turn.results.get(call_id))
        if turn.cancel_first:
            await self._cancel_turn()
        self.job = job
        if self.draining:
            self.job = None
            self.waiting.append(job)
            return
        await self._proceed(job)

    async def _proceed(self, job: Job) -> None:
        """Run a job once no cancelled prompt is draining."""
        self.job = job
        for part in self.buffer:
            await job.send(part)
        self.buffer.clear()
        unsurfaced = [p for p in (*self.permissions.values(), *self.tool_calls.values()) if not p.surfaced]
        for pending in unsurfaced:
            await self._surface(pending)
        if job.turn.prompt:
            if self.needs_context:
                await self._start_prompt(*self._whole_conversation(job))
            else:
                await self._start_prompt(self.unsent + job.turn.context, job.turn.prompt)
        elif self.prompt_result is not None:
            done, self.prompt_result = self.prompt_result, None
            await self._on_prompt_done(done)
        elif not self.prompt_open and not unsurfaced:
            await self._finish(job, "end_turn", Last.DONE)

    def _offered(self, job: Job) -> list[ToolInfo]:
        if not job.tools:
            return []
        from lmbridge.mcp_bridge import select_tools

        return select_tools(job.tools, self.spec.tools.allow, self.spec.tools.deny)

    async def _start_bridge(self, job: Job, http: bool) -> None:
        """Offer the request's VS Code tools through the synthetic MCP server
        (issue #4). Only a session whose first request carries tools gets one:
        ``mcpServers`` are fixed at ``session/new``."""
        tools = self._offered(job)
        if not tools:
            return
        from lmbridge.mcp_bridge import ToolBridge

        host = await self.hooks.mcp_host()
        self.bridge = ToolBridge(self.id, self._on_mcp_call)
        await host.add(self.bridge)
        await self.bridge.set_tools(tools)
        self.mcp_servers = [host.server_config(self.bridge, http)]

    async def _on_mcp_call(self, call: Any) -> None:
        # Runs in the MCP server's task: hand the call to the actor's loop.
        self._send.send_nowait(_ToolInvoked(call))

    async def _start_agent(self, job: Job) -> None:
        self.conn = await AgentConnection.spawn(self.spec.id, self.spec.command, self.spec.args, self.spec.env, self.cwd, self._send.clone(), session=self.id)
        assert self._tg is not None
        self._tg.start_soon(self._serve_agent, self.conn)
        with anyio.fail_after(START_TIMEOUT):
            init = await self.conn.request(
                "initialize",
                {
                    "protocolVersion": 1,
                    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
                    "clientInfo": {"name": "lmbridge", "version": __version__},
                },
            )
        caps = (init or {}).get("agentCapabilities") or {}
        self.images = bool((caps.get("promptCapabilities") or {}).get("image"))
        await self._start_bridge(job, http=bool((caps.get("mcpCapabilities") or {}).get("http")))
        await self._new_acp_session()

    async def _new_acp_session(self) -> None:
        assert self.conn is not None
        with anyio.fail_after(START_TIMEOUT):
            result = await self.conn.request("session/new", {"cwd": self.cwd or "/", "mcpServers": self.mcp_servers})
        self.acp_session = str((result or {}).get("sessionId"))
        self.renderer = TurnRenderer(self.renderer.warn)
        log.info("acp session", session=self.id, agent=self.spec.id, acp_session=self.acp_session)

    async def _serve_agent(self, conn: AgentConnection) -> None:
        await conn.serve()
        if conn is self.conn and not self._closed:
            await self._send.send(_AgentGone())

    @staticmethod
    def _whole_conversation(job: Job) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
        """(context, prompt) for a fresh ACP session: everything VS Code shows
        before the job's prompt (system messages left out, as always) as context."""
        answered = set(job.turn.answers)  # results of the permissions just answered: not context
        conv = []
        for m in conversation(job.history):
            content = [p for p in m.content if not (isinstance(p, ToolResultPart) and p.callId in answered)]
            if content:
                conv.append(m if len(content) == len(m.content) else m.model_copy(update={"content": content}))
        prompt = job.turn.prompt
        return tuple(conv[: len(conv) - len(prompt)]), prompt

    async def _start_prompt(self, context: tuple[Message, ...], prompt: tuple[Message, ...]) -> None:
        assert self.conn is not None and self._tg is not None
        blocks = prompt_blocks(context, prompt, images=self.images)
        self.prompt_open = True
        self.needs_context = False
        self.unsent = ()
        self.after_cancel, self.cancelled_before = self.cancelled_before, False
        self._tg.start_soon(self._prompt, self.conn, self.acp_session, blocks)

    async def _prompt(self, conn: AgentConnection, acp_session: str, blocks: list[dict[str, Any]]) -> None:
        try:
            result = await conn.request("session/prompt", {"sessionId": acp_session, "prompt": blocks})
            done = _PromptDone(acp_session, result=result)
        except AgentError as exc:
            done = _PromptDone(acp_session, error=str(exc))
        except AgentExited:
            return  # _AgentGone reports it
        await self._send.send(done)

    async def _finish(self, job: Job, stop_reason: str, last: Last) -> None:
        """End a job's response and report what it emitted (once each)."""
        if self.job is job:
            self.job = None
        if not job.recorded:
            job.recorded = True
            pending = [Pending(p.call_id, p.token) for p in self.permissions.values() if p.surfaced and p.call_id in job.call_ids]
            pending += [Pending(c, "", tool=True) for c, t in self.tool_calls.items() if t.surfaced and c in job.call_ids]
            await self.hooks.ended(self.id, job.fingerprint(), last, pending)
        if not job.done.is_set():
            job.stop_reason = stop_reason
            job.done.set()

    async def _fail(self, job: Job, message: str) -> None:
        if self.job is job:
            self.job = None
        if not job.done.is_set():
            job.error = message
            job.done.set()
        await self.hooks.died(self.id)
        self.close(message)

    # -- the agent's traffic --------------------------------------------------

    async def _on_incoming(self, msg: Incoming) -> None:
        if msg.method == "session/update" and msg.id is None:
            params = msg.params if isinstance(msg.params, dict) else {}
            if params.get("sessionId") != self.acp_session or self.draining:
                return  # a superseded session, or a cancelled turn's late output
            parts = self.renderer.update(params.get("update"))
            await self._output(parts)
        elif msg.method == "session/request_permission" and msg.id is not None:
            await self._on_permission(msg)
        elif msg.id is not None:
            # fs/* and terminal/* are not offered in clientCapabilities.
            await self.conn.respond(msg.id, error={"code": -32601, "message": f"method not found: {msg.method}"})
        else:
            log.info("agent notification ignored", method=msg.method)

    async def _output(self, parts: list[Part]) -> None:
        if not parts:
            return
        if self.job is not None:
            self.job.output = True
            for part in parts:
                await self.job.send(part)
        else:
            self.buffer.extend(parts)

    async def _on_permission(self, msg: Incoming) -> None:
        assert self.conn is not None
        params = msg.params if isinstance(msg.params, dict) else {}
        if self.draining or params.get("sessionId") != self.acp_session:
            await self.conn.respond(msg.id, {"outcome": {"outcome": "cancelled"}})
            return
        raw_call = params.get("toolCall") if isinstance(params.get("toolCall"), dict) else {}
        state, parts = self.renderer.permission_tool(raw_call)
        await self._output(parts)
        options = [
            {"optionId": o.get("optionId"), "name": o.get("name", ""), "kind": o.get("kind")}
            for o in params.get("options") or []
            if isinstance(o, dict)
        ]
        if self.bridge is not None and self.bridge.is_bridged(_tool_name(raw_call)):
            # VS Code confirms its own tools when it runs them: the agent's own
            # permission for exactly a bridged tool is granted here (issue #4).
            outcome = choose_option(options, Answer.ALLOW)
            log.info("bridged tool permission granted", session=self.id, tool=_tool_name(raw_call), outcome=outcome)
            await self.conn.respond(msg.id, {"outcome": outcome})
            return
        call_id = f"lmbridge-{self.id}-{secrets.token_hex(6)}"
        token = secrets.token_urlsafe(18)
        tool_input: dict[str, Any] = {
            "title": (state.title if state else None) or raw_call.get("title") or "Agent action",
            "kind": (state.kind if state else None) or raw_call.get("kind") or "other",
            "rawInput": state.raw_input if state else raw_call.get("rawInput"),
            "options": options,
            "approvalToken": token,
        }
        for key in ("content", "locations"):
            if raw_call.get(key):
                tool_input[key] = raw_call[key]
        part = {"type": "tool_call", "callId": call_id, "name": AGENT_ACTION_TOOL, "input": tool_input}
        perm = Permission(msg.id, call_id, token, options, part)
        self.permissions[call_id] = perm
        log.info("permission asked", session=self.id, callId=call_id, title=tool_input["title"])
        if self.job is not None:
            await self._surface(perm)

    async def _on_tool_invoked(self, call: Any) -> None:
        """The agent called a VS Code tool: it becomes a tool call part with
        VS Code's tool name and the agent's arguments."""
        from lmbridge.mcp_bridge import STOPPED_TEXT, error_result

        if self.draining or self._closed:
            call.resolve(error_result(STOPPED_TEXT))
            return
        part = {"type": "tool_call", "callId": call.call_id, "name": call.name, "input": call.arguments}
        pending = self.tool_calls[call.call_id] = ToolPending(call, part)
        if self.job is not None:
            await self._surface(pending)

    async def _surface(self, perm: Permission | ToolPending) -> None:
        """Emit a pending call's tool call part and (re)start the gather window."""
        assert self.job is not None and self._tg is not None
        perm.surfaced = True
        await self.job.send(perm.part)
        self._generation += 1
        self._tg.start_soon(self._flush_later, self.job, self._generation)

    async def _flush_later(self, job: Job, generation: int) -> None:
        await anyio.sleep(GATHER)
        await self._send.send(_Flush(job, generation))

    async def _answer(self, call_id: str, answer: Answer, result: ToolResultPart | None = None) -> None:
        tool = self.tool_calls.pop(call_id, None)
        if tool is not None:
            from lmbridge.mcp_bridge import DECLINED_TEXT, STOPPED_TEXT, error_result, result_content, types

            if answer is Answer.RESULT and result is not None:
                mcp_result = types.CallToolResult(content=result_content(result))
            else:
                mcp_result = error_result(DECLINED_TEXT if answer is Answer.DECLINED else STOPPED_TEXT)
            log.info("tool call answered", session=self.id, callId=call_id, answer=answer.value)
            tool.call.resolve(mcp_result)
            return
        perm = self.permissions.pop(call_id, None)
        if perm is None or self.conn is None:
            return
        outcome = choose_option(perm.options, answer)
        if answer is Answer.ALLOW and outcome["outcome"] != "selected":
            log.warning("no allow_once option: answered cancelled", session=self.id, callId=call_id)
        log.info("permission answered", session=self.id, callId=call_id, answer=answer.value, outcome=outcome)
        await self.conn.respond(perm.rid, {"outcome": outcome})

    async def _cancel_turn(self) -> None:
        """ACP cancellation: every pending permission answered cancelled,
        ``session/cancel`` sent, and the turn's late output dropped."""
        for call_id in [*self.permissions, *self.tool_calls]:
            await self._answer(call_id, Answer.CANCELLED)
        self.buffer.clear()
        self.renderer.close()
        if self.prompt_open and self.conn is not None and not self.draining:
            self.draining = True
            self.cancelled_before = True
            try:
                await self.conn.notify("session/cancel", {"sessionId": self.acp_session})
            except AgentExited:
                return
            assert self._tg is not None
            self._tg.start_soon(self._drain_deadline, self.acp_session)

    async def _drain_deadline(self, acp_session: str | None) -> None:
        await anyio.sleep(DRAIN_TIMEOUT)
        await self._send.send(_PromptDone(acp_session or "", error="the agent did not end a cancelled turn", timed_out=True))

    async def _on_cancel(self, job: Job) -> None:
        if job in self.waiting:
            self.waiting.remove(job)
            self.unsent += job.turn.context + job.turn.prompt  # the agent never got them
            await self._finish(job, "cancelled", Last.CANCELLED)
            return
        if job is not self.job:
            return
        await self._finish(job, "cancelled", Last.CANCELLED)
        await self._cancel_turn()

    async def _on_prompt_done(self, done: _PromptDone) -> None:
        if done.acp_session != self.acp_session:
            return
        if not self.prompt_open and not self.draining:
            return  # a drain deadline that fired after the drain ended
        self.prompt_open = False
        if self.draining:
            self.draining = False
            if done.timed_out:
                # The old session may still be busy: the next prompt goes to a fresh
                # one, with the conversation so far (the agent's view = VS Code's).
                log.warning("cancelled turn did not end; new ACP session", session=self.id, error=done.error)
                await self._new_acp_session()
                self.needs_context = True
            elif done.error:
                # Whatever ends a cancelled turn ends it as cancelled (facts.md §3).
                log.info("cancelled turn ended with an error", session=self.id, error=done.error)
            for job in self.waiting:
                self.waiting = [j for j in self.waiting if j is not job]
                await self._proceed(job)
                break
            return
        job = self.job
        if job is None:
            self.prompt_result = done  # delivered to the next request
            return
        stop = (done.result or {}).get("stopReason") if isinstance(done.result, dict) else None
        after_cancel, self.after_cancel = self.after_cancel, False
        if after_cancel and job.turn.prompt and stop == "end_turn" and not job.output and done.error is None:
            # claude-agent-acp answers every prompt after a cancel at once, empty
            # (facts.md §5): start over in a fresh ACP session given the conversation.
            # Only the first prompt after a cancel is watched: a turn that continues
            # after a permission answer may well end silently.
            log.warning("empty turn right after a cancel: fresh ACP session", session=self.id)
            await self._new_acp_session()
            await self._start_prompt(*self._whole_conversation(job))
            return
        for part in self.renderer.close():
            await job.send(part)
        for call_id in [*self.permissions, *self.tool_calls]:
            await self._answer(call_id, Answer.CANCELLED)  # the turn ended without them
        if done.error is not None:
            await self._fail(job, f"agent {self.spec.id!r}: {done.error}")
            return
        if stop not in STOP_REASONS:
            log.warning("unknown stopReason, reported as end_turn", stopReason=stop)
            stop = "end_turn"
        await self._finish(job, stop, Last.CANCELLED if stop == "cancelled" else Last.DONE)

    async def _on_agent_gone(self) -> None:
        reason = self.conn.describe_exit() if self.conn else "agent gone"
        self.permissions.clear()
        await self._close_bridge()
        jobs = ([self.job] if self.job else []) + self.waiting
        self.waiting = []
        for job in jobs:
            job.error = reason
            job.done.set()
        self.job = None
        await self.hooks.died(self.id)
        self.close(reason)

    async def _close_bridge(self) -> None:
        """Every VS Code tool call still waiting gets an error result; the MCP
        endpoint of this session goes away."""
        self.tool_calls.clear()
        if self.bridge is not None:
            bridge, self.bridge = self.bridge, None
            (await self.hooks.mcp_host()).remove(bridge.session_id)

    async def _shutdown(self, reason: str) -> None:
        self._closed = True
        for job in ([self.job] if self.job else []) + self.waiting:
            if not job.done.is_set():
                job.error = f"session closed: {reason}"
                job.done.set()
        self.job, self.waiting = None, []
        await self._close_bridge()
        conn, self.conn = self.conn, None
        if conn is None:
            return
        for perm in list(self.permissions.values()):
            await conn.respond(perm.rid, {"outcome": {"outcome": "cancelled"}})
        self.permissions.clear()
        if self.prompt_open and not conn.closed.is_set():
            try:
                await conn.notify("session/cancel", {"sessionId": self.acp_session})
            except AgentExited:
                pass
        await conn.close()


def _tool_name(raw_call: dict[str, Any]) -> str | None:
    """The tool an agent's permission is for: claude-agent-acp names it in
    ``_meta.claudeCode.toolName``; others only in the title."""
    meta = raw_call.get("_meta")
    claude = meta.get("claudeCode") if isinstance(meta, dict) else None
    name = claude.get("toolName") if isinstance(claude, dict) else None
    return name if isinstance(name, str) else raw_call.get("title") if isinstance(raw_call.get("title"), str) else None
