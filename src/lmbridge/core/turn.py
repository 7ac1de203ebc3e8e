"""The turn lifecycle of one agent session: a pure state machine (docs/architecture.md, "The turn lifecycle").

Rules of this file (after h11's ``_state.py``):

* Everything that decides what happens to a chat request, an agent's output,
  a permission, a cancel or a timer while one ACP session runs lives here. The
  session actor feeds events in and carries out the effects that come back;
  it decides nothing itself.
* No I/O, no clock, no randomness: timers are effects (``StartTimer`` /
  ``StopTimer``) that come back as ``TimerFired`` events, and callIds and
  approval tokens arrive inside the events that need them.
* It knows jobs (VS Code requests) only by number, and messages only as opaque
  values it hands back. It knows ACP only as far as permission options go.

Theory of operation
-------------------
One ACP session has at most one prompt turn open at the agent, and VS Code has
at most one request (a *job*) streaming for it. The two do not line up: a turn
that asks permission outlives the response that showed the card (the response
ends ``tool_calls``; the next request carries the answer), and a Stop ends the
response at once while the agent takes its time to end the turn. So the state
is the turn's, and the job is attached to it when there is one:

``IDLE``       no prompt open; a job, if any, is about to be answered.
``STARTING``   the agent (or a fresh ACP session) is being started; jobs wait.
``STREAMING``  a prompt is open and a job streams its output.
``AWAITING``   a prompt is open, no job: the last response ended ``tool_calls``
               and the agent waits on the answers the next request brings. Its
               output is kept for that request (bounded in bytes).
``DRAINING``   ``session/cancel`` was sent; the prompt has not ended. Its output
               is dropped, jobs wait, a deadline runs. Past the deadline the
               session is closed (``CloseSession``), then replaced: taken up
               again if the prompt has ended by then, else a fresh session (an
               ACP session with a prompt open is never prompted again).
``CLOSED``     the session is over; every job and permission has been answered.

Output of a turn that has ended (``IDLE``, ``STARTING``, ``DRAINING``) is never
part of a later answer: it is dropped and counted.

Every timer is tagged with the sequence number of what started it (the gather
window with the surfacing, the drain deadline with the prompt) and is stopped
when that ends; a ``TimerFired`` whose tag is stale does nothing. Every job
ends exactly once (``Finish`` or ``Fail``); every permission is answered exactly
once (``Respond`` or ``RespondError``). What a permission becomes (a card, a grant,
a decline, a refusal) and which option an answer selects is the permission rule's
(``permissions``): this machine only carries its decisions out at the right time.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lmbridge.core import permissions
from lmbridge.core.history import Last, Pending
from lmbridge.core.permissions import CANCELLED as CANCELLED_OUTCOME
from lmbridge.core.permissions import Answer

Part = dict[str, Any]

#: Seconds: permissions and tool calls this close together go out in one response.
GATHER = 0.1
#: Seconds a cancelled prompt may take to end before its ACP session is abandoned.
DRAIN = 10.0
#: Seconds an agent may take to start before the user is told it is starting.
START_NOTICE = 0.5
#: Seconds between the lines that say a start still waits (after the first notice).
START_PROGRESS = 10.0
#: Bytes of text kept for the next request of an open turn: bounded, so output nobody reads cannot grow without end.
BUFFER_LIMIT = 1 << 20
STOP_REASONS = frozenset({"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"})


class State(enum.Enum):
    IDLE = "idle"
    STARTING = "starting"
    STREAMING = "streaming"
    AWAITING = "awaiting"
    DRAINING = "draining"
    CLOSED = "closed"


class Timer(enum.Enum):
    GATHER = "gather"  # tagged with the surfacing generation
    DRAIN = "drain"  # tagged with the prompt's sequence number
    NOTICE = "notice"  # "Starting <agent>…", tagged with the start's number


class TurnError(Exception):
    """An event that cannot happen in the current state (names both)."""


# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class JobInfo:
    """What the machine needs of one chat request (the history core's ``Turn``).

    ``answers``: callId → Answer for the calls the previous response left
    pending. ``cancel_first``: the request stops the open turn (Stop, or
    tool results beside new user content). ``has_prompt``: it brings new user
    content for ``session/prompt``. ``messages``: its context and prompt, handed
    back when it is cancelled before the agent saw them. ``tools``: the names of
    the tools the request offers (``options.tools``). ``cancelled``: the shim
    cancelled it before it got here.
    """

    id: int
    answers: Mapping[str, Answer] = field(default_factory=dict)
    cancel_first: bool = False
    has_prompt: bool = True
    messages: tuple[Any, ...] = ()
    tools: frozenset[str] = frozenset()
    cancelled: bool = False


@dataclass(frozen=True)
class NewJob:
    job: JobInfo


@dataclass(frozen=True)
class CancelJob:
    job_id: int


@dataclass(frozen=True)
class Ready:
    """The agent (``StartAgent``) or a fresh ACP session (``NewSession``) is up; or ``error``
    (``named``: the error already names the agent and says what failed). ``lost``: the
    session that is up has not seen the chat's earlier turns the agent held (a new
    session replaced one that could not be resumed or loaded): the next prompt tells
    the whole conversation. A session resumed or loaded has not lost them (docs/sessions.md)."""

    error: str | None = None
    named: bool = False
    lost: bool = False


@dataclass(frozen=True)
class Update:
    """A ``session/update`` for the current ACP session: its ``update`` object, as received."""

    raw: Any


@dataclass(frozen=True)
class PermissionAsked:
    """A ``session/request_permission``: its JSON-RPC id and ``params`` as received.
    ``call_id``/``token``: fresh, drawn by the actor. ``bridge``: the VS Code tools the
    session's MCP server offers (``permissions.Bridge``). ``answerable``: ``rid`` can be
    written back (an object or list id cannot: the error then goes out with id null)."""

    rid: Any
    params: Any
    call_id: str
    token: str
    bridge: permissions.Bridge | None = None
    answerable: bool = True


@dataclass(frozen=True)
class ToolInvoked:
    """The agent called a VS Code tool through the MCP bridge."""

    call_id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class PromptEnded:
    """``session/prompt`` number ``seq`` was answered: ``stop_reason``, or ``error``
    (``named``: the error's text names the agent already, as a sign-in problem's does)."""

    seq: int
    stop_reason: Any = None
    error: str | None = None
    named: bool = False


@dataclass(frozen=True)
class SessionClosed:
    """The ``session/close`` of ``CloseSession`` number ``seq`` is over (answered, refused,
    timed out, or not offered by the agent: then nothing was sent)."""

    seq: int


@dataclass(frozen=True)
class AgentExited:
    reason: str


@dataclass(frozen=True)
class TimerFired:
    timer: Timer
    tag: int


@dataclass(frozen=True)
class Close:
    reason: str


Event = NewJob | CancelJob | Ready | Update | PermissionAsked | ToolInvoked | PromptEnded | SessionClosed | AgentExited | TimerFired | Close


# ---------------------------------------------------------------- effects


@dataclass(frozen=True)
class Emit:
    job_id: int
    part: Part


@dataclass(frozen=True)
class Finish:
    """End a job's response with ``stop_reason``; report ``last`` and the calls it left pending."""

    job_id: int
    stop_reason: str
    last: Last
    pending: tuple[Pending, ...] = ()


@dataclass(frozen=True)
class Fail:
    """End a job with an error the user reads."""

    job_id: int
    message: str


@dataclass(frozen=True)
class Respond:
    """Answer a ``session/request_permission``: ``outcome`` is a ``RequestPermissionOutcome``."""

    rid: Any
    call_id: str
    outcome: Mapping[str, Any]


@dataclass(frozen=True)
class RespondError:
    """Answer a request of the agent's with a JSON-RPC ``error`` (``rid`` None: id null)."""

    rid: Any
    error: Mapping[str, Any]


@dataclass(frozen=True)
class ResolveTool:
    """Answer the agent's MCP ``tools/call``: RESULT (from job ``job_id``'s results), DECLINED or CANCELLED."""

    call_id: str
    answer: Answer
    job_id: int | None = None


@dataclass(frozen=True)
class SendCancel:
    """``session/cancel`` for the current ACP session."""


@dataclass(frozen=True)
class StartAgent:
    """Start the agent process and its ACP session for job ``job_id`` (answers ``Ready``)."""

    job_id: int


@dataclass(frozen=True)
class NewSession:
    """The chat's ACP session is replaced on the running agent (answers ``Ready``):
    ``close`` first closes the current one (``session/close``, where offered); then
    ``take_up`` continues the same ACP session (``session/resume``, else ``session/load``:
    the agent keeps its memory; a refusal falls back to a fresh one, ``Ready(lost=True)``),
    or, ``take_up`` False, a fresh session is opened and told the whole conversation.
    ``take_up`` is never asked while a prompt of that session may still be open."""

    reason: str
    take_up: bool = True
    close: bool = True


@dataclass(frozen=True)
class CloseSession:
    """``session/close`` for the current ACP session where the agent offers it, bounded
    (answers ``SessionClosed(seq)`` in any case). ``seq``: the prompt it abandons."""

    seq: int


@dataclass(frozen=True)
class Prompt:
    """``session/prompt`` number ``seq`` for job ``job_id`` (answers ``PromptEnded``).

    ``whole``: the ACP session has seen nothing of this chat: give it the whole
    conversation. ``unsent``: messages of requests stopped before the agent saw
    them, to go first as context.
    """

    job_id: int
    seq: int
    whole: bool = False
    unsent: tuple[Any, ...] = ()


@dataclass(frozen=True)
class StartTimer:
    timer: Timer
    seconds: float
    tag: int


@dataclass(frozen=True)
class StopTimer:
    timer: Timer


@dataclass(frozen=True)
class Died:
    """The session cannot go on: the history actor drops it and the actor closes."""

    reason: str


@dataclass(frozen=True)
class Detach:
    """The agent went away between turns (nothing was streaming or waiting): the session
    lives on, and the next job starts the agent again and takes its ACP session up
    (a crash of a process shared by several chats recovers every chat)."""


@dataclass(frozen=True)
class Shutdown:
    """Stop the agent (after the answers above were sent)."""


@dataclass(frozen=True)
class Log:
    level: str
    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)


Effect = (
    Emit | Finish | Fail | Respond | RespondError | ResolveTool | SendCancel | StartAgent | NewSession | CloseSession | Prompt | StartTimer | StopTimer | Died
    | Detach | Shutdown | Log
)


# ---------------------------------------------------------------- the table

_S = State
_EVENT_TYPES = (NewJob, CancelJob, Ready, Update, PermissionAsked, ToolInvoked, PromptEnded, SessionClosed, AgentExited, TimerFired, Close)
_ANY_LIVE = (State.IDLE, State.STARTING, State.STREAMING, State.AWAITING, State.DRAINING)

#: (state, event) → the states the machine may be in after it. ``handle`` checks every
#: transition against it; tests/test_turn.py walks every row and reaches every target.
#: ``Ready`` is only ever an answer to ``StartAgent``/``NewSession``, so it only comes in
#: STARTING (or CLOSED, when the session closed while it started).
TRANSITIONS: dict[tuple[State, type], frozenset[State]] = {
    # A job starts the agent, streams a prompt, is answered at once, or (the
    # turn already over) is told how it ended; that may fail the session.
    (_S.IDLE, NewJob): frozenset({_S.STARTING, _S.STREAMING, _S.IDLE, _S.CLOSED}),
    (_S.STARTING, NewJob): frozenset({_S.STARTING}),
    (_S.STREAMING, NewJob): frozenset({_S.STREAMING, _S.DRAINING}),
    (_S.AWAITING, NewJob): frozenset({_S.STREAMING, _S.DRAINING}),
    (_S.DRAINING, NewJob): frozenset({_S.DRAINING}),
    (_S.IDLE, CancelJob): frozenset({_S.IDLE}),
    (_S.STARTING, CancelJob): frozenset({_S.STARTING}),
    (_S.STREAMING, CancelJob): frozenset({_S.DRAINING, _S.STREAMING}),
    (_S.AWAITING, CancelJob): frozenset({_S.AWAITING}),
    (_S.DRAINING, CancelJob): frozenset({_S.DRAINING}),
    (_S.STARTING, Ready): frozenset({_S.IDLE, _S.STREAMING, _S.CLOSED}),
    # The turn ends: answered, recovered in a fresh session (first turn after a
    # cancel), failed; a drain ends and the next job starts; a stale answer.
    (_S.STREAMING, PromptEnded): frozenset({_S.IDLE, _S.STARTING, _S.CLOSED, _S.STREAMING}),
    # ... kept for the next request (a request that came while the turn streamed has
    # stopped it when its cards were shown: it cannot answer them).
    (_S.AWAITING, PromptEnded): frozenset({_S.IDLE}),
    # ... a drain that ends while its session is being closed stays DRAINING until closed.
    (_S.DRAINING, PromptEnded): frozenset({_S.IDLE, _S.STREAMING, _S.DRAINING}),
    (_S.IDLE, PromptEnded): frozenset({_S.IDLE}),
    (_S.STARTING, PromptEnded): frozenset({_S.STARTING}),
    # Gather window: the response ends ``tool_calls`` (and a request queued behind it that
    # cannot answer its cards stops the turn: DRAINING). Drain deadline: the session is
    # closed (CloseSession), still DRAINING; once closed it is replaced (STARTING): taken
    # up again if its prompt has ended by then, else a fresh session told the conversation.
    (_S.STREAMING, TimerFired): frozenset({_S.STREAMING, _S.AWAITING, _S.DRAINING}),
    (_S.DRAINING, TimerFired): frozenset({_S.DRAINING}),
    **{(s, TimerFired): frozenset({s}) for s in (_S.IDLE, _S.STARTING, _S.AWAITING)},
    (_S.DRAINING, SessionClosed): frozenset({_S.STARTING, _S.DRAINING}),
    **{(s, SessionClosed): frozenset({s}) for s in (_S.IDLE, _S.STARTING, _S.STREAMING, _S.AWAITING)},  # stale
    # The agent's traffic never changes the state.
    **{(s, e): frozenset({s}) for s in _ANY_LIVE for e in (Update, PermissionAsked, ToolInvoked)},
    **{(s, e): frozenset({_S.CLOSED}) for s in _ANY_LIVE for e in (AgentExited, Close)},
    # ... but an agent gone between turns is started again by the next job.
    (_S.IDLE, AgentExited): frozenset({_S.CLOSED, _S.IDLE}),
    **{(_S.CLOSED, e): frozenset({_S.CLOSED}) for e in _EVENT_TYPES},
}


# ---------------------------------------------------------------- pure helpers


class Renderer(Protocol):
    """``render.TurnRenderer``: ACP updates → response parts (create-or-update state)."""

    def update(self, raw: Any) -> list[Part]: ...
    def known(self, tool_call_id: object) -> Mapping[str, Any] | None: ...
    def permission_tool(self, raw: Any) -> list[Part]: ...
    def declined(self, tool_call_id: object) -> None: ...
    def close(self) -> list[Part]: ...


def start_notice(agent: str, waited: float | None = None) -> str:
    """The text part shown when ``agent`` takes longer than ``notice`` seconds to start;
    with ``waited`` (seconds), each later line while it still starts."""
    if waited is None:
        return f"_Starting {agent}…_\n\n"
    return f"_Starting {agent}: still waiting after {waited:.0f} s (a first start may be downloading it)…_\n\n"


def is_start_notice(text: object) -> bool:
    """Whether ``text`` is a ``start_notice`` (a wall-clock artefact: replay skips it)."""
    return isinstance(text, str) and text.startswith("_Starting ") and text.endswith("…_\n\n") and "\n" not in text[:-2]


def _text(value: str) -> Part:
    return {"type": "text", "value": value}


# ---------------------------------------------------------------- the machine


@dataclass
class _Call:
    """A call the agent waits on: a permission (``rid`` set) or a VS Code tool call."""

    call_id: str
    part: Part
    rid: Any = None
    token: str = ""
    options: tuple[permissions.Option, ...] = ()
    shown_in: int | None = None  # the job whose response showed it
    tool_call_id: str | None = None  # the agent's toolCallId of a permission

    @property
    def tool(self) -> bool:
        return self.rid is None


class TurnMachine:
    """The lifecycle of one session's turns. ``handle(event)`` → effects, in order.

    ``agent``: the agent's display name (for what the user reads); ``renderer``:
    a ``render.TurnRenderer`` (replaced by ``reset_renderer`` for a new ACP
    session); ``buffer_limit``: bytes of text kept while no request streams.
    """

    def __init__(
        self,
        agent: str,
        renderer: Renderer,
        *,
        drain: float = DRAIN,
        gather: float = GATHER,
        notice: float = START_NOTICE,
        progress: float = START_PROGRESS,
        buffer_limit: int = BUFFER_LIMIT,
    ) -> None:
        self.agent = agent
        self.renderer = renderer
        self.drain, self.gather, self.notice, self.buffer_limit = drain, gather, notice, buffer_limit
        self.progress = progress  # seconds between "still starting" lines
        self.starts = 0
        self.notices = 0  # start notices shown for the current start
        self.state = State.IDLE
        self.started = False  # the agent is running
        self.job: JobInfo | None = None  # the job streaming (or being started/recovered for)
        self.waiting: list[JobInfo] = []  # jobs waiting for a start or a drain
        self.calls: dict[str, _Call] = {}
        self.tools: frozenset[str] = frozenset()  # what the latest request offered
        self.buffer: list[Part] = []
        self.buffered = 0  # text bytes in buffer
        self.left_out = 0  # text bytes dropped from buffer
        self.prompt_seq = 0
        self.prompt_open = False
        self.generation = 0  # gather windows
        self.watch = False  # the open prompt is the first after a cancel (docs/agents.md, "Quirks")
        self.after_cancel = False  # the next prompt is
        self.recovering = False  # STARTING to recover the session after a cancel (no user waits on a start)
        # The prompt whose ACP session is being closed because it outlived its drain deadline
        # (CloseSession): until SessionClosed, nothing is sent to that session.
        self.closing: int | None = None
        self.whole = False  # the next prompt gets the whole conversation
        self.agent_output = False  # the open prompt produced output for its job
        self.unsent: tuple[Any, ...] = ()
        self.held: PromptEnded | None = None  # the turn ended while no job streamed
        self.dropped = 0  # parts of ended turns dropped since the last report
        self.visible: int | None = None  # the last job that got text or a tool call
        self._fx: list[Effect] = []

    # -- entry ----------------------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        """Feed one event; returns the effects to carry out, in order."""
        before = self.state
        allowed = TRANSITIONS.get((before, type(event)))
        if allowed is None:
            raise TurnError(f"{type(event).__name__} cannot happen in state {before.name}")
        self._fx = []
        _HANDLERS[type(event)](self, event)
        if self.state not in allowed:
            raise TurnError(f"{type(event).__name__} in state {before.name} led to {self.state.name}, not in the table")
        fx, self._fx = self._fx, []
        return fx

    def reset_renderer(self, renderer: Renderer) -> None:
        """A fresh ACP session renders from scratch."""
        self.renderer = renderer

    # -- jobs -----------------------------------------------------------------

    def _on_new_job(self, ev: NewJob) -> None:
        job = ev.job
        if self.state is State.CLOSED:
            self._fx.append(Fail(job.id, f"agent {self.agent!r}: its session has just ended; please retry"))
            return
        self.tools = job.tools
        for call_id, answer in job.answers.items():
            if job.cancelled and answer is not Answer.RESULT:
                answer = Answer.CANCELLED  # a request cancelled before it got here approves nothing
            self._answer(call_id, answer, job.id)
        if job.cancel_first:
            if self.job is not None and self.state is State.STREAMING and self.prompt_open:
                # This request stops the turn another request still streams (its
                # $/cancelRequest may come after): that response ends here, cancelled.
                stopped, self.job = self.job, None
                self._fx.append(StopTimer(Timer.GATHER))
                self._fx.append(Finish(stopped.id, "cancelled", Last.CANCELLED))
            self._cancel_turn()
        if self.state in (State.STARTING, State.DRAINING) or self.job is not None:
            self.waiting.append(job)
        elif not self.started:
            self.job = job
            self.starts += 1
            self._go(State.STARTING)
            self.notices = 0
            self._fx.append(StartTimer(Timer.NOTICE, self.notice, self.starts))
            self._fx.append(StartAgent(job.id))
        else:
            self._proceed(job)

    def _proceed(self, job: JobInfo) -> None:
        """Attach ``job`` to the turn (state IDLE or AWAITING) and run it."""
        if job.has_prompt and self.prompt_open:
            # New words while the agent's turn is open: that turn is stopped first.
            self.waiting.insert(0, job)
            self._cancel_turn()
            return
        stale = [call_id for call_id, c in self.calls.items() if c.shown_in not in (None, job.id) and call_id not in job.answers]
        if stale:
            # Classified before the request ahead of it showed these calls (it waited behind
            # that request): it cannot answer them and nothing else will. Stopped, as the next
            # request without them would be (and when unsure, deny), not left waiting forever.
            if self.prompt_open:
                self.waiting.insert(0, job)
                self._cancel_turn()
                return
            for call_id in stale:
                self._answer(call_id, Answer.CANCELLED, None)
        self.job = job
        if self.left_out:
            self._emit(_text(f"\n\n_[{self.left_out} bytes of output left out]_\n\n"))
        for part in self.buffer:
            self._emit(part)
        self.buffer, self.buffered, self.left_out = [], 0, 0
        unshown = [c for c in self.calls.values() if c.shown_in is None]
        for call in unshown:
            self._show(call)
        if job.has_prompt:
            self.prompt_seq += 1
            self.prompt_open, self.agent_output = True, False
            self.watch, self.after_cancel = self.after_cancel, False
            self._fx.append(Prompt(job.id, self.prompt_seq, whole=self.whole, unsent=self.unsent))
            self.whole, self.unsent = False, ()
            self._go(State.STREAMING)
        elif self.held is not None:
            held, self.held = self.held, None
            self._go(State.STREAMING)
            self._turn_ended(held)
        elif self.prompt_open:
            self._go(State.STREAMING)  # the agent goes on with its turn
        else:
            self._finish("end_turn", Last.DONE)

    def _next_waiting(self) -> None:
        while self.waiting and self.state in (State.IDLE, State.AWAITING) and self.job is None:
            job = self.waiting.pop(0)
            self._proceed(job)
            if self.waiting and self.waiting[0] is job:
                break  # it stopped the agent's turn first: it goes on when that turn has ended

    def _on_cancel_job(self, ev: CancelJob) -> None:
        waiting = next((j for j in self.waiting if j.id == ev.job_id), None)
        if waiting is not None:
            self.waiting.remove(waiting)
            self.unsent += waiting.messages  # the agent never saw them
            self._fx.append(Finish(waiting.id, "cancelled", Last.CANCELLED))
            return
        job = self.job
        if job is None or job.id != ev.job_id:
            return  # already answered
        if self.state is State.STARTING:
            # The agent is still starting: it is kept, the request ends now.
            self.job = None
            if not self.recovering:
                self.unsent += job.messages
            self._fx.append(StopTimer(Timer.NOTICE))
            self._fx.append(Finish(job.id, "cancelled", Last.CANCELLED))
            return
        self._fx.append(StopTimer(Timer.GATHER))
        self.job = None
        self._fx.append(Finish(job.id, "cancelled", Last.CANCELLED))
        self._cancel_turn()
        if self.state is State.STREAMING:
            self._go(State.IDLE)
        self._next_waiting()

    def _cancel_turn(self) -> None:
        """ACP cancellation (docs/agents.md, "ACP as agents speak it"): every call answered cancelled, ``session/cancel``
        sent, and the turn's output from now on dropped."""
        for call_id in list(self.calls):
            self._answer(call_id, Answer.CANCELLED, None)
        self.buffer, self.buffered, self.left_out = [], 0, 0
        self.renderer.close()
        self.held = None
        if self.prompt_open and self.state is not State.DRAINING:
            self._fx.append(SendCancel())
            self._fx.append(StartTimer(Timer.DRAIN, self.drain, self.prompt_seq))
            self.after_cancel = True
            self._go(State.DRAINING)

    # -- starting ---------------------------------------------------------------

    def _on_ready(self, ev: Ready) -> None:
        if self.state is State.CLOSED:
            return  # closed while starting
        self._fx.append(StopTimer(Timer.NOTICE))
        if ev.error is not None:
            what = "failed to start" if not self.started else "could not open a new session"
            self._die(ev.error if ev.named else f"agent {self.agent!r} {what}: {ev.error}")
            return
        self.started = True
        job = self.job
        self.recovering = False
        self.whole = self.whole or ev.lost  # the ACP session has seen none of the chat
        self._go(State.IDLE)
        if job is not None:
            self.job = None
            self._proceed(job)
        self._next_waiting()

    # -- the agent's traffic ----------------------------------------------------

    def _on_update(self, ev: Update) -> None:
        parts = self.renderer.update(ev.raw) if self.state in (State.STREAMING, State.AWAITING) else _output_kinds(ev.raw)
        if not parts:
            return
        if self.state is State.STREAMING:
            self.agent_output = True
            for part in parts:
                self._emit(part)
        elif self.state is State.AWAITING:
            self._keep(parts)
        else:
            # A turn that has ended (or is being cancelled): never part of a later answer.
            if self.dropped == 0:
                self._fx.append(Log("info", "output of an ended turn dropped", {"agent": self.agent, "state": self.state.value}))
            self.dropped += len(parts)

    def _keep(self, parts: list[Part]) -> None:
        """Output while the turn waits for the next request: kept, text bounded in bytes."""
        for part in parts:
            self.buffer.append(part)
            if part.get("type") in ("text", "thinking"):
                self.buffered += len(str(part.get("value", "")).encode("utf-8", "surrogatepass"))
        while self.buffered > self.buffer_limit:
            i = next(i for i, p in enumerate(self.buffer) if p.get("type") in ("text", "thinking"))
            size = len(str(self.buffer.pop(i).get("value", "")).encode("utf-8", "surrogatepass"))
            self.buffered -= size
            self.left_out += size

    def _on_permission(self, ev: PermissionAsked) -> None:
        params = ev.params if isinstance(ev.params, Mapping) else {}
        raw_call = params.get("toolCall")
        request: permissions.Permission | permissions.Malformed
        if not ev.answerable:
            request = permissions.Malformed("id", "is neither a string nor a number", answerable=False)
        else:
            merged = self.renderer.known(raw_call.get("toolCallId")) if isinstance(raw_call, Mapping) else None
            request = permissions.read(ev.params, ev.call_id, ev.token, merged, ev.bridge)
        decision = permissions.route(request, self.tools, self.agent)
        live = self.state in (State.STREAMING, State.AWAITING)
        if isinstance(decision, permissions.Grant):
            # VS Code confirms its own tools when it runs them (docs/tools.md).
            assert isinstance(request, permissions.Permission)
            self._fx.append(Respond(ev.rid, ev.call_id, permissions.outcome(request.options, Answer.ALLOW)))
            self._fx.append(Log("info", "permission granted: a bridged VS Code tool", {"tool": decision.tool}))
            return
        if isinstance(decision, permissions.Refuse):
            self._fx.append(RespondError(ev.rid if ev.answerable else None, decision.error))
            self._fx.append(Log("warning", "malformed permission request refused", {"agent": self.agent, "error": decision.error["message"]}))
            if live:
                self._say(f"\n\n{decision.line}\n\n")
            return
        if not live:
            self._fx.append(Respond(ev.rid, ev.call_id, CANCELLED_OUTCOME))
            return
        assert isinstance(request, permissions.Permission)
        parts = self.renderer.permission_tool(dict(raw_call)) if isinstance(raw_call, Mapping) else []
        if self.state is State.STREAMING:
            self.agent_output = True
            for part in parts:
                self._emit(part)
        else:
            self._keep(parts)
        if isinstance(decision, permissions.Decline):
            self._say(f"\n\n{decision.line}\n\n")
            if decision.outcome != CANCELLED_OUTCOME:
                self.renderer.declined(request.tool_call_id)
            self._fx.append(Respond(ev.rid, ev.call_id, decision.outcome))
            self._fx.append(Log("info", "permission declined without a card", {"reason": decision.reason, "tool": request.tool}))
            return
        card = decision.card
        tool_input = {"title": card.title, "message": card.message, "approvalToken": ev.token}
        part = {"type": "tool_call", "callId": ev.call_id, "name": card.tool, "input": tool_input}
        call = self.calls[ev.call_id] = _Call(ev.call_id, part, ev.rid, ev.token, request.options, tool_call_id=request.tool_call_id)
        if self.state is State.STREAMING:
            self._show(call)

    def _say(self, line: str) -> None:
        """A line for the user in the answer streaming now, or kept for the next request."""
        if self.state is State.STREAMING:
            self._emit(_text(line))
        else:
            self._keep([_text(line)])

    def _on_tool_invoked(self, ev: ToolInvoked) -> None:
        if self.state not in (State.STREAMING, State.AWAITING):
            self._fx.append(ResolveTool(ev.call_id, Answer.CANCELLED))
            return
        part = {"type": "tool_call", "callId": ev.call_id, "name": ev.name, "input": dict(ev.arguments)}
        call = self.calls[ev.call_id] = _Call(ev.call_id, part)
        if self.state is State.STREAMING:
            self._show(call)

    def _show(self, call: _Call) -> None:
        """Give a call to the streaming job and (re)start the gather window. Its tool call
        part goes out when the window closes, with the response's end (``tool_calls``): a
        permission the agent drops by ending its turn meanwhile never becomes a card that
        nobody waits on (a dead permission card)."""
        assert self.job is not None
        call.shown_in = self.job.id
        self.generation += 1
        self._fx.append(StartTimer(Timer.GATHER, self.gather, self.generation))

    def _answer(self, call_id: str, answer: Answer, job_id: int | None) -> None:
        call = self.calls.pop(call_id, None)
        if call is None:
            return
        if call.tool:
            self._fx.append(ResolveTool(call_id, answer, job_id))
        else:
            outcome = permissions.outcome(call.options, answer)
            if answer is Answer.REJECT and outcome != CANCELLED_OUTCOME:
                self.renderer.declined(call.tool_call_id)
            self._fx.append(Respond(call.rid, call_id, outcome))

    def _on_timer(self, ev: TimerFired) -> None:
        if ev.timer is Timer.NOTICE:
            if self.state is State.STARTING and ev.tag == self.starts and self.job is not None and not self.recovering:
                waited = self.notice + self.notices * self.progress if self.notices else None
                self._emit(_text(start_notice(self.agent, waited)))
                self.notices += 1
                if math.isfinite(self.progress):  # the next line, while it still waits
                    self._fx.append(StartTimer(Timer.NOTICE, self.progress, self.starts))
        elif ev.timer is Timer.GATHER:
            if self.state is State.STREAMING and ev.tag == self.generation and self.job is not None:
                shown = [c for c in self.calls.values() if c.shown_in == self.job.id]
                if shown:
                    for call in shown:
                        self._emit(call.part)
                    pending = tuple(Pending(c.call_id, c.token, tool=c.tool) for c in shown)
                    self._finish("tool_calls", Last.PENDING, pending)
                    self._go(State.AWAITING)
                    self._next_waiting()  # a request queued behind this one
        elif ev.timer is Timer.DRAIN:
            if self.state is State.DRAINING and ev.tag == self.prompt_seq and self.prompt_open and self.closing is None:
                # The agent never ended the cancelled turn: its ACP session is closed. It is
                # never prompted again while that prompt may still run (its output would
                # interleave with the next answer's): SessionClosed decides what replaces it.
                self.closing = self.prompt_seq
                self._fx.append(Log("warning", "cancelled turn did not end: its session is closed", {"agent": self.agent}))
                self._fx.append(CloseSession(self.prompt_seq))

    def _on_session_closed(self, ev: SessionClosed) -> None:
        if self.state is not State.DRAINING or ev.seq != self.closing:
            return  # stale
        self.closing = None
        self.recovering = True
        self._go(State.STARTING)
        if self.prompt_open:
            # Still open after the close: that session is left for good (its late output
            # and answer are for a session this chat no longer has). A fresh one is told
            # the conversation.
            self.prompt_open = False
            self.whole = True
            self._fx.append(Log("warning", "cancelled turn still open after its session was closed: a fresh session", {"agent": self.agent}))
            self._fx.append(NewSession("a cancelled turn did not end", take_up=False, close=False))
        else:
            # It ended (the close ended it, or it ended late): the session can be taken up
            # again, with the agent's own memory of the chat.
            self._fx.append(NewSession("a cancelled turn ended only once its session was closed", take_up=True, close=False))

    def _on_prompt_ended(self, ev: PromptEnded) -> None:
        if ev.seq != self.prompt_seq or not self.prompt_open:
            return  # a prompt of an abandoned session
        if self.state is State.DRAINING:
            self.prompt_open = False
            self._fx.append(StopTimer(Timer.DRAIN))
            if ev.error is not None:
                # Whatever ends a cancelled turn ends it as cancelled: agents answer a cancel with end_turn or an error too.
                self._fx.append(Log("info", "cancelled turn ended with an error", {"error": ev.error}))
            self.renderer.close()
            self._report_dropped()
            if self.closing is not None:
                return  # its session is being closed: SessionClosed goes on
            self._go(State.IDLE)
            self._next_waiting()
        elif self.state is State.AWAITING:
            self.prompt_open = False
            self.held = ev  # told to the next request, with what was kept
            self._go(State.IDLE)
            self._next_waiting()
        elif self.state is State.STREAMING:
            self._turn_ended(ev)

    def _turn_ended(self, ev: PromptEnded) -> None:
        job = self.job
        assert job is not None
        self.prompt_open = False
        self._fx.append(StopTimer(Timer.GATHER))
        empty = ev.error is None and ev.stop_reason == "end_turn" and not self.agent_output
        if self.watch and job.has_prompt and (empty or ev.error is not None):
            # The first prompt after a cancel failed or ended at once with nothing
            # (claude-agent-acp, gemini-cli: docs/agents.md, "Quirks"): the agent's problem, not
            # the user's. A fresh ACP session gets the whole conversation.
            self.watch = False
            self._fx.append(Log("warning", "first turn after a cancel failed or was empty: the session is taken up again", {"agent": self.agent, "error": ev.error}))
            self.recovering = True
            self._go(State.STARTING)
            self._fx.append(NewSession("the first turn after a cancel failed"))
            return
        self.watch = False
        for part in self.renderer.close():
            self._emit(part)
        for call_id in list(self.calls):
            self._answer(call_id, Answer.CANCELLED, None)  # the turn ended without them
        if ev.error is not None:
            self._fail(ev.error if ev.named else f"agent {self.agent!r}: {ev.error}")
            return
        stop = ev.stop_reason if ev.stop_reason in STOP_REASONS else "end_turn"
        if stop != ev.stop_reason:
            self._fx.append(Log("warning", "unknown stopReason, reported as end_turn", {"stopReason": ev.stop_reason}))
        if stop == "cancelled":
            # Nobody cancelled this turn (that one would be DRAINING): the agent ended it
            # itself. codex-acp ends the whole turn so when a permission is rejected
            # (docs/agents.md, "Quirks"). For VS Code the response has simply ended: ``cancelled``
            # answers a $/cancelRequest only.
            self._fx.append(Log("info", "the agent cancelled its own turn", {"agent": self.agent}))
            stop = "end_turn"
        self._finish(stop, Last.DONE)

    # -- endings ----------------------------------------------------------------

    def _on_agent_exited(self, ev: AgentExited) -> None:
        if self.state is State.CLOSED:
            return
        idle = self.job is None and not self.waiting and not self.prompt_open and self.held is None and not self.buffer
        if self.state is State.IDLE and idle and self.started:
            # Nothing was streaming, nothing waits on it: no request fails; the next starts it again.
            for call_id in list(self.calls):
                self._answer(call_id, Answer.CANCELLED, None)
            self.started, self.held, self.after_cancel = False, None, False
            self.buffer, self.buffered, self.left_out = [], 0, 0
            self._fx.append(Log("warning", "agent gone between turns: the next request starts it again", {"agent": self.agent, "reason": ev.reason}))
            self._fx.append(Detach())
            return
        self.calls = {c: call for c, call in self.calls.items() if call.tool}  # permissions: nobody to answer
        self._die(ev.reason)

    def _on_close(self, ev: Close) -> None:
        if self.state is State.CLOSED:
            return
        if self.prompt_open and self.state is not State.DRAINING:
            for call_id in list(self.calls):
                self._answer(call_id, Answer.CANCELLED, None)
            self._fx.append(SendCancel())
        self._end_all(f"session closed: {ev.reason}")
        self._fx.append(Shutdown())

    def _die(self, reason: str) -> None:
        self._end_all(reason)
        self._fx.append(Died(reason))
        self._fx.append(Shutdown())

    def _end_all(self, message: str) -> None:
        for call_id in list(self.calls):
            self._answer(call_id, Answer.CANCELLED, None)
        jobs = ([self.job] if self.job else []) + self.waiting
        self.job, self.waiting = None, []
        for job in jobs:
            self._fx.append(Fail(job.id, message))
        for timer in Timer:
            self._fx.append(StopTimer(timer))
        self.prompt_open = False
        self._go(State.CLOSED)

    def _finish(self, stop_reason: str, last: Last, pending: tuple[Pending, ...] = ()) -> None:
        job = self.job
        assert job is not None
        if stop_reason != "cancelled" and self.visible != job.id:
            # Copilot Chat shows "Sorry, no response was returned." for a response with
            # neither text nor a tool call: say what happened instead.
            declined = any(a in (Answer.REJECT, Answer.DECLINED) for a in job.answers.values())
            self._emit(_text(f"_{self.agent} ended its turn{': the action was declined' if declined else ' without a reply'}._"))
        self.job = None
        self._fx.append(StopTimer(Timer.GATHER))
        self._fx.append(Finish(job.id, stop_reason, last, pending))
        if not self.prompt_open:
            self._go(State.IDLE)
            self._next_waiting()

    def _fail(self, message: str) -> None:
        job = self.job
        assert job is not None
        self.job = None
        self._fx.append(Fail(job.id, message))
        self._fx.append(Died(message))
        self._end_all(message)
        self._fx.append(Shutdown())

    def _emit(self, part: Part) -> None:
        assert self.job is not None
        if part.get("type") == "tool_call" or (part.get("type") == "text" and str(part.get("value", "")).strip()):
            self.visible = self.job.id
        self._fx.append(Emit(self.job.id, part))

    def _report_dropped(self) -> None:
        if self.dropped:
            self._fx.append(Log("info", "ended turn's output dropped", {"agent": self.agent, "parts": self.dropped}))
            self.dropped = 0

    def _go(self, state: State) -> None:
        if state is State.IDLE:
            self._report_dropped()
        self.state = state


_OUTPUT_KINDS = frozenset({"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan", "user_message_chunk"})


def _output_kinds(raw: Any) -> list[Part]:
    """For an update outside a streaming turn: a marker per output update (to count it),
    nothing for session-level updates (modes, commands, config, usage)."""
    kind = raw.get("sessionUpdate") if isinstance(raw, dict) else None
    return [{"type": "dropped", "kind": kind}] if kind in _OUTPUT_KINDS else []


_HANDLERS: dict[type, Any] = {
    NewJob: TurnMachine._on_new_job,
    CancelJob: TurnMachine._on_cancel_job,
    Ready: TurnMachine._on_ready,
    Update: TurnMachine._on_update,
    PermissionAsked: TurnMachine._on_permission,
    ToolInvoked: TurnMachine._on_tool_invoked,
    PromptEnded: TurnMachine._on_prompt_ended,
    SessionClosed: TurnMachine._on_session_closed,
    AgentExited: TurnMachine._on_agent_exited,
    TimerFired: TurnMachine._on_timer,
    Close: TurnMachine._on_close,
}
