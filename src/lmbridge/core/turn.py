"""The turn lifecycle of one agent session: a pure state machine whose table is the program.

Rules of this file (after h11's ``_state.py``):

* Everything that decides what happens to a chat request, an agent's output,
  a permission, a cancel or a timer while one ACP session runs lives here. The
  session actor feeds events in and carries out the effects that come back;
  it decides nothing itself.
* The decisions are the rows of ``TABLE``: ``(state, event, guard) -> (next state,
  action)``, one next state per row, its guard and action functions of this module
  (``(machine, event) -> bool`` and ``-> None``), bound by reference and typed by the
  row's event. ``TurnMachine.handle`` finds the first row whose state, event and guard
  match, runs its action and enters its state.
* The table is total: every (state, event) pair has rows, the last unconditional. Where
  nothing happens the row says ``ignore`` (a stale timer, a late answer, anything after
  the close); where the event cannot come it says ``impossible`` and ``handle`` raises
  ``TurnError`` (``Ready`` outside a start). A pair with no row is refused at import
  (``index``) and raises in ``handle``, as h11's ``_state.py`` raises on a missing key.
* No guard or action tests the state: where the state changes what an event does, the
  rows are split. The calls the agent waits on are ``calls.AwaitedCalls``; the output
  kept for the next request is ``kept.Kept``.
* No I/O, no clock, no randomness: timers are effects (``StartTimer`` /
  ``StopTimer``) that come back as ``TimerFired`` events, and callIds and
  approval tokens arrive inside the events that need them.
* It knows jobs (VS Code requests) only by number (``jobs``), and messages only as
  opaque values it hands back. It knows ACP only as far as permission options go
  (``permissions``); what the user reads is ``present``'s.

Theory of operation
-------------------
One ACP session has at most one prompt turn open at the agent, and VS Code has
at most one request (a *job*) streaming for it. The two do not line up: a turn
that asks permission outlives the response that showed the card (the response
ends ``tool_calls``; the next request carries the answer), and a Stop ends the
response at once while the agent takes its time to end the turn. So the state
is the turn's, and the job is attached to it when there is one. The states
(docs/architecture.md, "The turn lifecycle", prints the table):

``NO_AGENT``       the agent is not running (never started, or gone between turns).
``STARTING``       the agent and its ACP session are being started (``StartAgent``).
``RENEWING``       the chat's ACP session is being replaced on the running agent
                   (``NewSession``); no user waits on that start.
``IDLE``           the agent is up, no prompt is open.
``ENDED``          no prompt is open: the turn ended while no job streamed (after its
                   cards were shown); its end, and the output kept, wait for the next job.
``STREAMING``      a prompt is open and a job streams its output.
``AWAITING``       a prompt is open, no job: the last response ended ``tool_calls``
                   and the agent waits on the answers the next request brings. Its
                   output is kept for that request (bounded in bytes).
``DRAINING``       ``session/cancel`` was sent; the prompt has not ended. Its output
                   is dropped, jobs wait, a deadline runs.
``CLOSING``        the deadline passed: the session is being closed (``CloseSession``),
                   its prompt still open. Once closed, a fresh session replaces it
                   (an ACP session with a prompt open is never prompted again).
``CLOSING_ENDED``  ... and the prompt has ended meanwhile: once closed, the same
                   session is taken up again.
``CLOSED``         the session is over; every job and permission has been answered.

The six *phases* (``Phase``) group them as a request sees them: NO_AGENT, IDLE and ENDED
are IDLE; RENEWING is STARTING; CLOSING and CLOSING_ENDED are DRAINING.

Jobs wait in a ``jobs.JobQueue``. After each event, while no job streams and the state
can take one (NO_AGENT, IDLE, ENDED, AWAITING), the machine feeds itself ``NextJob``:
the job next in line goes through the table like any event.

Output of a turn that has ended (or is starting, or being cancelled) is never part of a
later answer: it is dropped and counted (docs/architecture.md, "Ended turns").

Every timer is tagged with the sequence number of what started it (the gather
window with the surfacing, the drain deadline with the prompt, the start notice with the
start) and is stopped when that ends; a ``TimerFired`` whose tag is stale matches no row.
Every job ends exactly once (``Finish`` or ``Fail``); every permission is answered exactly
once (``AnswerPermission`` or ``RespondError``), every question too (``AnswerQuestion``). What a permission becomes (a card, a grant,
a decline, a refusal) and which option an answer selects is the permission rule's
(``permissions``): this machine only carries its decisions out at the right time.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, get_args

from lmbridge.core import elicitation, notices, permissions, present
from lmbridge.core.calls import AwaitedCall, AwaitedCalls
from lmbridge.core.history import Last, PendingCall
from lmbridge.core.jobs import JobInfo, JobQueue
from lmbridge.core.kept import Kept
from lmbridge.core.permissions import CANCELLED as CANCELLED_OUTCOME
from lmbridge.core.permissions import Answer
from lmbridge.core.profiles import AgentProfile

Part = dict[str, Any]

__all__ = ["JobInfo", "TABLE", "Row", "State", "Phase", "TurnMachine"]

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


class Phase(enum.Enum):
    """The lifecycle as a request sees it (several states share a phase)."""

    IDLE = "idle"
    STARTING = "starting"
    STREAMING = "streaming"
    AWAITING = "awaiting"
    DRAINING = "draining"
    CLOSED = "closed"


class State(enum.Enum):
    """The machine's states (module docstring); ``phase`` groups them."""

    NO_AGENT = "no_agent"
    STARTING = "starting"
    RENEWING = "renewing"
    IDLE = "idle"
    ENDED = "ended"
    STREAMING = "streaming"
    AWAITING = "awaiting"
    DRAINING = "draining"
    CLOSING = "closing"
    CLOSING_ENDED = "closing_ended"
    CLOSED = "closed"

    @property
    def phase(self) -> Phase:
        return _PHASES[self]


_PHASES = {
    State.NO_AGENT: Phase.IDLE, State.STARTING: Phase.STARTING, State.RENEWING: Phase.STARTING, State.IDLE: Phase.IDLE,
    State.ENDED: Phase.IDLE, State.STREAMING: Phase.STREAMING, State.AWAITING: Phase.AWAITING, State.DRAINING: Phase.DRAINING,
    State.CLOSING: Phase.DRAINING, State.CLOSING_ENDED: Phase.DRAINING, State.CLOSED: Phase.CLOSED,
}
#: The states in which the agent's prompt turn is open.
PROMPT_OPEN = frozenset({State.STREAMING, State.AWAITING, State.DRAINING, State.CLOSING})
#: The states that take the next waiting job (when none streams).
TAKES_A_JOB = frozenset({State.NO_AGENT, State.IDLE, State.ENDED, State.AWAITING})


class Timer(enum.Enum):
    GATHER = "gather"  # tagged with the surfacing generation
    DRAIN = "drain"  # tagged with the prompt's sequence number
    NOTICE = "notice"  # "Starting <agent>…", tagged with the start's number


class TurnError(Exception):
    """An event that cannot happen in the current state (names both)."""


# ---------------------------------------------------------------- events


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
    written back (an object or list id cannot: the error then goes out with id null).
    ``workspace``: where its files are judged (``permissions.Workspace``). ``profile``: the
    agent's (None: the bridge's): which option a Skip selects."""

    rid: Any
    params: Any
    call_id: str
    token: str
    bridge: permissions.Bridge | None = None
    answerable: bool = True
    workspace: permissions.Workspace = permissions.NO_WORKSPACE  # where its files are judged
    profile: AgentProfile | None = None


@dataclass(frozen=True)
class ElicitationAsked:
    """An ``elicitation/create`` (the agent asks the user a question, ``core.elicitation``):
    its JSON-RPC id and ``params`` as received; ``call_id``/``token``: fresh, drawn by the actor."""

    rid: Any
    params: Any
    call_id: str
    token: str


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


Event = NewJob | CancelJob | Ready | Update | PermissionAsked | ElicitationAsked | ToolInvoked | PromptEnded | SessionClosed | AgentExited | TimerFired | Close


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
    pending: tuple[PendingCall, ...] = ()


@dataclass(frozen=True)
class Fail:
    """End a job with an error the user reads."""

    job_id: int
    message: str


@dataclass(frozen=True)
class AnswerPermission:
    """Answer a ``session/request_permission``: ``outcome`` is a ``RequestPermissionOutcome``.
    ``approved``: the request, when the user approved it on its card (its exact token): what
    it allows the agent's client actions (``permissions.grant``); None for any other answer."""

    rid: Any
    call_id: str
    outcome: Mapping[str, Any]
    approved: permissions.Permission | None = None


@dataclass(frozen=True)
class AnswerQuestion:
    """Answer an ``elicitation/create`` (``core.elicitation.response``): the user's ``answer``
    to ``question``; for ``Answer.RESULT``, VS Code's result is the one job ``job_id`` brought
    for ``call_id`` (the actor reads it)."""

    rid: Any
    call_id: str
    question: elicitation.Question
    answer: Answer
    job_id: int | None = None


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
    Emit | Finish | Fail | AnswerPermission | AnswerQuestion | RespondError | ResolveTool | SendCancel | StartAgent | NewSession | CloseSession | Prompt | StartTimer | StopTimer | Died
    | Detach | Shutdown | Log
)


@dataclass(frozen=True)
class NextJob:
    """Internal: the job next in line may run (the machine feeds it to itself)."""


# ---------------------------------------------------------------- pure helpers


@dataclass(frozen=True)
class Timing:
    """Seconds: ``drain`` (a cancelled turn's deadline), ``gather`` (the window that gathers
    cards into one response), ``notice`` (before the first start notice), ``progress``
    (between the later ones; infinite: none)."""

    drain: float = DRAIN
    gather: float = GATHER
    notice: float = START_NOTICE
    progress: float = START_PROGRESS


class Renderer(Protocol):
    """``present.TurnRenderer``: ACP updates → response parts (create-or-update state)."""

    def update(self, raw: Any) -> list[Part]: ...
    def known(self, tool_call_id: object) -> Mapping[str, Any] | None: ...
    def permission_tool(self, raw: Any) -> list[Part]: ...
    def declined(self, tool_call_id: object) -> None: ...
    def pause(self) -> list[Part]: ...
    def left_running(self) -> bool: ...
    def close(self) -> list[Part]: ...


def _text(value: str) -> Part:
    return present.text_part(value)


# ---------------------------------------------------------------- the machine


class TurnMachine:
    """The lifecycle of one session's turns. ``handle(event)`` → effects, in order.

    ``agent``: the agent's display name (for what the user reads); ``renderer``:
    a ``present.TurnRenderer`` (replaced by ``reset_renderer`` for a new ACP
    session); ``buffer_limit``: bytes of text kept while no request streams.
    Seconds: ``drain`` (a cancelled turn's deadline), ``gather`` (the window that
    gathers cards into one response), ``notice``/``progress`` (the start notices).
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
        self.timing = Timing(drain, gather, notice, progress)
        self.state = State.NO_AGENT
        self.job: JobInfo | None = None  # the job streaming (or being started for)
        self.waiting = JobQueue()
        self.calls = AwaitedCalls()  # what the agent waits on
        self.tools: frozenset[str] = frozenset()  # what the latest request offered
        self.kept = Kept(buffer_limit)  # output kept for the next request (AWAITING, ENDED)
        self.held: PromptEnded | None = None  # ENDED: how the turn ended
        self.prompt_seq = 0  # prompts sent
        self.cancelled_prompt: int | None = None  # the prompt last cancelled: the one after it is watched
        self.output = 0  # parts of the agent's output the open prompt showed
        self.whole = False  # the ACP session has seen none of the chat: the next prompt tells it all
        self.command_left = False  # the stopped turn left a command of the agent's running (Renderer.left_running)
        self.unsent: tuple[Any, ...] = ()  # messages of requests stopped before the agent saw them
        self.generation = 0  # gather windows
        self.starts = 0  # agent starts (the notice timer's tag)
        self.notices = 0  # start notices shown for the current start
        self.dropped = 0  # parts of ended turns dropped since the last report
        self.visible: int | None = None  # the last job that got text or a tool call
        self.trace: list[tuple[Row[Any], State]] = []  # the rows the last ``handle`` went through, each with the state it entered
        self.effects: list[Effect] = []  # what the event being handled asks for, in order

    # -- derived views (read by tests and logs; never stored) -------------------

    @property
    def phase(self) -> Phase:
        return self.state.phase

    @property
    def prompt_open(self) -> bool:
        return self.state in PROMPT_OPEN

    @property
    def after_cancel(self) -> bool:
        """The next prompt is the first after a cancel (agents' quirks: docs/agents.md)."""
        return self.cancelled_prompt is not None and self.cancelled_prompt == self.prompt_seq

    @property
    def watch(self) -> bool:
        """The open prompt is the first after a cancel, sent by the job streaming it."""
        return self.state is State.STREAMING and _first_after_a_cancel(self)

    # -- entry ----------------------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        """Feed one event; returns the effects to carry out, in order. Raises ``TurnError``
        for an event that cannot happen (its row is ``impossible``: ``Ready`` outside a
        start) and for a (state, event) pair the table has no row for (it has one for every pair)."""
        self.effects, self.trace = [], []
        self._step(event)
        while self.job is None and len(self.waiting) and self.state in TAKES_A_JOB:
            self._step(NextJob())
        fx, self.effects = self.effects, []
        return fx

    def row_for(self, event: Event | NextJob) -> Row[Any]:
        """The row ``event`` would go through now. Raises ``TurnError`` as ``handle`` does."""
        return self._match(event)

    def _match(self, event: Event | NextJob) -> Row[Any]:
        for row in _ROWS.get((self.state, type(event)), ()):
            if row.guard is None or row.guard(self, event):
                if row.action is impossible:
                    raise TurnError(f"{type(event).__name__} cannot happen in state {self.state.name}")
                return row
        # As h11's ``_state.py``: a pair with no row is a missing rule, never a silent no-op.
        raise TurnError(f"the turn table has no row for {type(event).__name__} in state {self.state.name}")

    def _step(self, event: Event | NextJob) -> None:
        row = self._match(event)
        row.action(self, event)
        if row.target is not None:
            self.state = row.target
        self.trace.append((row, self.state))
        if row.target in (State.IDLE, State.ENDED):
            _report_dropped(self)  # a turn is over: what it dropped, told once

    def reset_renderer(self, renderer: Renderer) -> None:
        """A fresh ACP session renders from scratch."""
        self.renderer = renderer


# ---------------------------------------------------------------- guards and actions


# -- guards: each is (machine, event) -> bool, named in the table's ``guard`` column --------


def asks_to_stop(m: TurnMachine, ev: NewJob) -> bool:
    """The history says the request stops the open turn (a Stop at a card, new words beside
    the cards: ``cancel_first``)."""
    return ev.job.cancel_first


def stops_the_turn(m: TurnMachine, ev: NewJob) -> bool:
    """While the prompt streams or waits: the request asks to stop it (``asks_to_stop``), or
    it answers a permission of the turn ``cancelled`` (it was stopped before it got here, or
    holds no result for the card). ACP's ``cancelled`` answers a cancelled turn:
    ``_stop_turn`` sends ``session/cancel`` first."""
    job = ev.job
    return job.cancel_first or any(_answer_of(job, c) is Answer.CANCELLED for c in job.answers if m.calls.is_permission(c))


def cannot_go_on(m: TurnMachine, _: NextJob) -> bool:
    """New words while the agent's turn is open, or cards this job cannot answer (it was
    classified before the job ahead of it showed them): the turn is stopped first."""
    job = m.waiting.peek()
    return job.has_prompt or bool(m.calls.stale(job))


def has_prompt(m: TurnMachine, _: NextJob) -> bool:
    return m.waiting.peek().has_prompt


def turn_failed(m: TurnMachine, _: NextJob) -> bool:
    return m.held is not None and m.held.error is not None


def streams(m: TurnMachine, ev: CancelJob) -> bool:
    return m.job is not None and m.job.id == ev.job_id


def waits(m: TurnMachine, ev: CancelJob) -> bool:
    return ev.job_id in m.waiting


def failed(m: TurnMachine, ev: Ready | PromptEnded) -> bool:
    if isinstance(ev, PromptEnded):
        return current(m, ev) and ev.error is not None
    return ev.error is not None


def current(m: TurnMachine, ev: PromptEnded | SessionClosed) -> bool:
    return ev.seq == m.prompt_seq


def left_a_command(m: TurnMachine, ev: PromptEnded) -> bool:
    """The cancelled turn ended, but a command it ran may run on (codex-acp: only
    ``session/close`` ends it; ``Renderer.left_running``)."""
    return ev.seq == m.prompt_seq and m.command_left


def _first_after_a_cancel(m: TurnMachine) -> bool:
    return m.job is not None and m.job.has_prompt and m.cancelled_prompt is not None and m.prompt_seq == m.cancelled_prompt + 1


def first_after_a_cancel_failed(m: TurnMachine, ev: PromptEnded) -> bool:
    """The first prompt after a cancel failed, or ended at once with nothing: an agent's
    quirk (claude-agent-acp, gemini-cli; docs/agents.md, "Quirks"), not the user's problem."""
    empty = ev.error is None and ev.stop_reason == "end_turn" and m.output == 0
    return current(m, ev) and _first_after_a_cancel(m) and (empty or ev.error is not None)


def gathered(m: TurnMachine, ev: TimerFired) -> bool:
    return ev.timer is Timer.GATHER and ev.tag == m.generation and bool(_shown(m))


def still_starting(m: TurnMachine, ev: TimerFired) -> bool:
    return ev.timer is Timer.NOTICE and ev.tag == m.starts and m.job is not None


def drain_deadline(m: TurnMachine, ev: TimerFired) -> bool:
    return ev.timer is Timer.DRAIN and ev.tag == m.prompt_seq


def nothing_waits(m: TurnMachine, _: AgentExited) -> bool:
    return not len(m.waiting)


# -- actions: each is (machine, event) -> None, named in the table's ``action`` column ------


def ignore(m: TurnMachine, ev: object) -> None:
    """Nothing happens: a stale timer or answer, a Stop for a job that has ended, traffic
    after the close. The table names each such pair rather than leaving it out."""


def impossible(m: TurnMachine, ev: object) -> None:
    """The event cannot happen in this state (``Ready`` answers a start only; ``NextJob``
    comes only where a job can be taken): ``TurnMachine._match`` raises ``TurnError`` instead
    of running this."""
    raise TurnError(f"{type(ev).__name__} cannot happen here")


# -- actions: requests


def refuse_job(m: TurnMachine, ev: NewJob) -> None:
    m.effects.append(Fail(ev.job.id, present.session_gone(m.agent)))


def _take_answers(m: TurnMachine, job: JobInfo, stopping: bool = False) -> None:
    """The answers ``job`` brings; ``stopping``: given after ``session/cancel``, where ACP's
    answer to every permission is ``cancelled`` (a VS Code tool's result still goes out)."""
    m.tools = job.tools
    for call_id in job.answers:
        answer = _answer_of(job, call_id)
        if stopping and m.calls.is_permission(call_id):
            answer = Answer.CANCELLED
        _answer(m, call_id, answer, job.id)


def queue(m: TurnMachine, ev: NewJob) -> None:
    _take_answers(m, ev.job)
    m.waiting.put(ev.job)


def stop_streaming_and_queue(m: TurnMachine, ev: NewJob) -> None:
    """This request stops the turn another request still streams (its ``$/cancelRequest``
    may come after): that response ends here, cancelled; then as ``stop_the_turn_and_queue``."""
    stopped = m.job
    assert stopped is not None
    m.job = None
    m.effects.append(StopTimer(Timer.GATHER))
    m.effects.append(Finish(stopped.id, "cancelled", Last.CANCELLED))
    _stop_turn(m, ev.job, streamed=True)
    m.waiting.put(ev.job)


def stop_the_turn_and_queue(m: TurnMachine, ev: NewJob) -> None:
    _stop_turn(m, ev.job, streamed=False)  # session/cancel, then the cards this request answers
    m.waiting.put(ev.job)


def forget_the_turn_and_queue(m: TurnMachine, ev: NewJob) -> None:
    _take_answers(m, ev.job)
    _forget_turn(m, streamed=False)
    m.waiting.put(ev.job)


def start_agent(m: TurnMachine, _: NextJob) -> None:
    m.job = m.waiting.pop()
    m.starts += 1
    m.notices = 0
    m.effects.append(StartTimer(Timer.NOTICE, m.timing.notice, m.starts))
    m.effects.append(StartAgent(m.job.id))


def stop_the_turn_first(m: TurnMachine, _: NextJob) -> None:
    _stop_turn(m, streamed=False)  # the job stays first in line: it runs once the turn has ended


def _attach(m: TurnMachine) -> JobInfo:
    """Attach the job next in line to the turn: what was kept for it goes out first."""
    job = m.job = m.waiting.pop()
    for call_id in m.calls.stale(job):
        # Classified before the request ahead of it showed these calls: it cannot answer
        # them, and the turn that asked is over (when unsure, deny).
        _answer(m, call_id, Answer.CANCELLED, None)
    for part in m.kept.take():
        _emit(m, part)
    for call in m.calls.unshown():
        _show(m, call)
    return job


def go_on(m: TurnMachine, _: NextJob) -> None:
    _attach(m)  # the agent goes on with its turn


def prompt(m: TurnMachine, _: NextJob) -> None:
    job = _attach(m)
    m.held = None
    m.prompt_seq += 1
    m.output = 0
    m.effects.append(Prompt(job.id, m.prompt_seq, whole=m.whole, unsent=m.unsent))
    m.whole, m.unsent = False, ()


def tell_the_end(m: TurnMachine, _: NextJob) -> None:
    """How the turn ended (``held``), told to this job: a failure fails it."""
    _attach(m)
    held, m.held = m.held, None
    assert held is not None
    end_the_turn(m, held)


def answer_at_once(m: TurnMachine, _: NextJob) -> None:
    _attach(m)
    _finish(m, "end_turn", Last.DONE)
    _report_dropped(m)


def cancel_the_start(m: TurnMachine, ev: CancelJob) -> None:
    """The agent is still starting: it is kept, the request ends now; the agent never saw
    its messages (they go first with the next prompt)."""
    job = _cancel_the_job(m)
    m.unsent += job.messages


def cancel_the_renewal(m: TurnMachine, ev: CancelJob) -> None:
    """A fresh ACP session is opening for a job the agent has seen already (its prompt
    failed after a cancel): it is kept, the request ends now."""
    _cancel_the_job(m)


def _cancel_the_job(m: TurnMachine) -> JobInfo:
    job = m.job
    assert job is not None
    m.job = None
    m.effects.append(StopTimer(Timer.NOTICE))
    m.effects.append(Finish(job.id, "cancelled", Last.CANCELLED))
    return job


def stop(m: TurnMachine, ev: CancelJob) -> None:
    job = m.job
    assert job is not None
    m.effects.append(StopTimer(Timer.GATHER))
    m.job = None
    m.effects.append(Finish(job.id, "cancelled", Last.CANCELLED))
    _stop_turn(m, streamed=True)


def unqueue(m: TurnMachine, ev: CancelJob) -> None:
    job = m.waiting.take(ev.job_id)
    assert job is not None
    m.unsent += job.messages  # the agent never saw them
    m.effects.append(Finish(job.id, "cancelled", Last.CANCELLED))


def _forget_turn(m: TurnMachine, *, streamed: bool) -> None:
    """Every call answered cancelled, the output kept dropped, the turn's end forgotten.
    ``streamed``: a job streamed the turn until now (it was STREAMING)."""
    for call_id in list(m.calls):
        _answer(m, call_id, Answer.CANCELLED, None)
    m.kept.clear()
    # Stopped at a card, the command it asks for has not run: only a turn stopped while it
    # streamed can leave one running (a card answered earlier, a command the agent runs).
    m.command_left = m.command_left or (streamed and m.renderer.left_running())
    m.renderer.close()
    m.held = None


def _stop_turn(m: TurnMachine, answering: JobInfo | None = None, *, streamed: bool) -> None:
    """ACP cancellation (docs/agents.md, "ACP as agents speak it"): ``session/cancel`` sent
    first, then every call answered, each permission ``cancelled`` once (``answering``: the
    request that stops the turn, whose answers go first), the deadline started; the turn's
    output from now on dropped. Answered before the cancel, an agent may take a
    ``cancelled`` card for a decline and call its model again, which the cancel then cuts
    (fast-agent 0.10.48 kept that stopped answer as an empty assistant message)."""
    m.effects.append(SendCancel())
    if answering is not None:
        _take_answers(m, answering, stopping=True)
    _forget_turn(m, streamed=streamed)
    m.effects.append(StartTimer(Timer.DRAIN, m.timing.drain, m.prompt_seq))
    m.cancelled_prompt = m.prompt_seq


# -- actions: starting


def die_at_start(m: TurnMachine, ev: Ready) -> None:
    """The agent could not start: the session dies."""
    _die_at_start(m, ev, renewing=False)


def die_at_renewal(m: TurnMachine, ev: Ready) -> None:
    """The running agent could not open a fresh ACP session: the session dies."""
    _die_at_start(m, ev, renewing=True)


def _die_at_start(m: TurnMachine, ev: Ready, *, renewing: bool) -> None:
    m.effects.append(StopTimer(Timer.NOTICE))
    assert ev.error is not None
    _die(m, present.start_failed(m.agent, ev.error, named=ev.named, renewing=renewing))


def up(m: TurnMachine, ev: Ready) -> None:
    m.effects.append(StopTimer(Timer.NOTICE))
    m.whole = m.whole or ev.lost  # the ACP session has seen none of the chat
    if m.job is not None:
        m.waiting.put_back(m.job)  # it runs first
        m.job = None


def say_starting(m: TurnMachine, _: TimerFired) -> None:
    t = m.timing
    waited = t.notice + m.notices * t.progress if m.notices else None
    _say(m, present.StartNotice(m.agent, waited))
    m.notices += 1
    if math.isfinite(t.progress):  # the next line, while it still waits
        m.effects.append(StartTimer(Timer.NOTICE, t.progress, m.starts))


# -- actions: the agent's traffic


def show(m: TurnMachine, ev: Update) -> None:
    for part in m.renderer.update(ev.raw):
        if not notices.is_notice(part.get("value")):  # an agent's notice is not its answer
            m.output += 1
        _emit(m, part)


def keep(m: TurnMachine, ev: Update) -> None:
    m.kept.add(m.renderer.update(ev.raw))


def drop_while_idle(m: TurnMachine, ev: Update) -> None:
    _drop(m, ev, Phase.IDLE)


def drop_while_starting(m: TurnMachine, ev: Update) -> None:
    _drop(m, ev, Phase.STARTING)


def drop_while_draining(m: TurnMachine, ev: Update) -> None:
    _drop(m, ev, Phase.DRAINING)


def drop_after_the_close(m: TurnMachine, ev: Update) -> None:
    _drop(m, ev, Phase.CLOSED)


def _drop(m: TurnMachine, ev: Update, phase: Phase) -> None:
    """Output of a turn that has ended (or is starting, or being cancelled): never part of a
    later answer. Counted; the first of a turn is logged with the ``phase`` it came in."""
    parts = _output_kinds(ev.raw)
    if not parts:
        return
    if m.dropped == 0:
        m.effects.append(Log("info", "output of an ended turn dropped", {"agent": m.agent, "state": phase.value}))
    m.dropped += len(parts)


def route_permission(m: TurnMachine, ev: PermissionAsked) -> None:
    """A job streams: what the permission becomes (``_route_permission``) goes to it; a card
    waits for the gather window."""
    _route_permission(m, ev, _To.STREAM)


def route_permission_for_later(m: TurnMachine, ev: PermissionAsked) -> None:
    """The turn is open, no job streams: what the permission becomes is kept for the next
    request, which shows its card."""
    _route_permission(m, ev, _To.KEPT)


def route_permission_no_turn(m: TurnMachine, ev: PermissionAsked) -> None:
    """No turn is open (or it is being cancelled): a bridged tool is still granted and a
    malformed request refused; any other is answered ``cancelled``."""
    _route_permission(m, ev, None)


class _To(enum.Enum):
    """Where what a permission becomes goes: to the job streaming, or kept for the next request."""

    STREAM = "stream"
    KEPT = "kept"


def _route_permission(m: TurnMachine, ev: PermissionAsked, to: _To | None) -> None:
    """What the permission becomes is the permission rule's (``permissions.route``); ``to``:
    where its parts go (None: no turn is open to show it)."""
    params = ev.params if isinstance(ev.params, Mapping) else {}
    raw_call = params.get("toolCall")
    request: permissions.Permission | permissions.Malformed
    if not ev.answerable:
        request = permissions.Malformed("id", "is neither a string nor a number", answerable=False)
    else:
        merged = m.renderer.known(raw_call.get("toolCallId")) if isinstance(raw_call, Mapping) else None
        request = permissions.read(ev.params, ev.call_id, ev.token, merged, ev.bridge, ev.workspace, ev.profile)
    decision = permissions.route(request, m.tools, m.agent)
    if isinstance(decision, permissions.Grant):
        # VS Code confirms its own tools when it runs them (docs/tools.md).
        assert isinstance(request, permissions.Permission)
        m.effects.append(AnswerPermission(ev.rid, ev.call_id, decision.outcome))
        m.effects.append(Log("info", "permission granted: a bridged VS Code tool", {"tool": decision.tool}))
        return
    if isinstance(decision, permissions.Refuse):
        m.effects.append(RespondError(ev.rid if ev.answerable else None, decision.error))
        m.effects.append(Log("warning", "malformed permission request refused", {"agent": m.agent, "error": decision.error["message"]}))
        if to is not None:
            _say_line(m, decision.line, to)
        return
    if to is None:
        m.effects.append(AnswerPermission(ev.rid, ev.call_id, CANCELLED_OUTCOME))
        return
    assert isinstance(request, permissions.Permission)
    parts = m.renderer.permission_tool(dict(raw_call)) if isinstance(raw_call, Mapping) else []
    if to is _To.STREAM:
        m.output += 1
        for part in parts:
            _emit(m, part)
    else:
        m.kept.add(parts)
    if isinstance(decision, permissions.Decline):
        _say_line(m, decision.line, to)
        m.renderer.declined(request.tool_call_id)  # whichever answer went out: lmbridge declined it
        m.effects.append(AnswerPermission(ev.rid, ev.call_id, decision.outcome))
        m.effects.append(Log("info", "permission declined without a card", {"reason": decision.reason, "tool": request.tool}))
        return
    card = decision.card
    tool_input = {"title": card.title, "message": card.message, "approvalToken": ev.token}
    part = {"type": "tool_call", "callId": ev.call_id, "name": card.tool, "input": tool_input}
    call = m.calls.add(AwaitedCall(ev.call_id, part, ev.rid, ev.token, request.options, tool_call_id=request.tool_call_id, request=request))
    if to is _To.STREAM:
        _show(m, call)

def route_question(m: TurnMachine, ev: ElicitationAsked) -> None:
    """A job streams: the agent's question (``core.elicitation``) goes to it; it waits for
    the gather window, like a card."""
    _route_question(m, ev, _To.STREAM)


def route_question_for_later(m: TurnMachine, ev: ElicitationAsked) -> None:
    """The turn is open, no job streams: the question is kept for the next request."""
    _route_question(m, ev, _To.KEPT)


def route_question_no_turn(m: TurnMachine, ev: ElicitationAsked) -> None:
    """No turn is open to show it (or it is being cancelled): answered ``cancel`` at once
    (a malformed one refused)."""
    _route_question(m, ev, None)


def _route_question(m: TurnMachine, ev: ElicitationAsked, to: _To | None) -> None:
    """How a question is shown is ``elicitation.route``'s: VS Code's question tool, lmbridge's
    card, or (neither offered) ``cancel`` at once with a line saying so; ``to``: where it
    goes (None: no turn is open to show it)."""
    question = elicitation.read(ev.params)
    if isinstance(question, elicitation.Malformed):
        m.effects.append(RespondError(ev.rid, question.error))
        m.effects.append(Log("warning", "question refused", {"agent": m.agent, "error": question.problem}))
        return
    via = elicitation.route(m.tools)
    if to is None or via == "none":
        if to is not None:
            _say_line(m, elicitation.unshown_line(m.agent), to)
        m.effects.append(AnswerQuestion(ev.rid, ev.call_id, question, Answer.CANCELLED))
        return
    if via == "ask":
        part = {"type": "tool_call", "callId": ev.call_id, "name": elicitation.ASK_TOOL, "input": elicitation.ask_input(question)}
    else:
        part = {"type": "tool_call", "callId": ev.call_id, "name": permissions.ACTION_TOOL, "input": elicitation.card_input(question, m.agent, ev.token)}
    call = m.calls.add(AwaitedCall(ev.call_id, part, ev.rid, ev.token, question=question, by_result=via == "ask"))
    if to is _To.STREAM:
        _show(m, call)



def take_tool_call(m: TurnMachine, ev: ToolInvoked) -> None:
    """A job streams: the VS Code tool call goes to it (in the gather window)."""
    _show(m, _await_tool_call(m, ev))


def keep_tool_call(m: TurnMachine, ev: ToolInvoked) -> None:
    """The turn is open, no job streams: the VS Code tool call waits for the next request."""
    _await_tool_call(m, ev)


def _await_tool_call(m: TurnMachine, ev: ToolInvoked) -> AwaitedCall:
    part = {"type": "tool_call", "callId": ev.call_id, "name": ev.name, "input": dict(ev.arguments)}
    return m.calls.add(AwaitedCall(ev.call_id, part))


def refuse_tool_call(m: TurnMachine, ev: ToolInvoked) -> None:
    m.effects.append(ResolveTool(ev.call_id, Answer.CANCELLED))


def _say(m: TurnMachine, n: present.Note) -> None:
    """A note for the user in the answer of the job at hand."""
    _emit(m, present.note(n))


def _say_line(m: TurnMachine, line: str, to: _To) -> None:
    """A line for the user in the answer streaming now, or kept for the next request."""
    part = _text(f"\n\n{line}\n\n")
    if to is _To.STREAM:
        _emit(m, part)
    else:
        m.kept.add([part])


def _show(m: TurnMachine, call: AwaitedCall) -> None:
    """Give a call to the streaming job and (re)start the gather window. Its tool call
    part goes out when the window closes, with the response's end (``tool_calls``): a
    permission the agent drops by ending its turn meanwhile never becomes a card that
    nobody waits on (a dead permission card)."""
    assert m.job is not None
    call.shown_in = m.job.id
    m.generation += 1
    m.effects.append(StartTimer(Timer.GATHER, m.timing.gather, m.generation))


def _shown(m: TurnMachine) -> list[AwaitedCall]:
    return m.calls.shown_in(m.job.id if m.job is not None else None)


def _answer(m: TurnMachine, call_id: str, answer: Answer, job_id: int | None) -> None:
    call = m.calls.take(call_id)
    if call is None:
        return
    if call.tool:
        m.effects.append(ResolveTool(call_id, answer, job_id))
    elif call.question is not None:
        m.effects.append(AnswerQuestion(call.rid, call_id, call.question, answer, job_id))
    elif call.request is None:  # a permission call always has its request: doubt answers cancelled
        m.effects.append(AnswerPermission(call.rid, call_id, CANCELLED_OUTCOME))
    else:
        verdict = permissions.decide(call.request, answer)  # the permission rule's one step from the answer
        if answer is Answer.REJECT:
            # The user's Skip reads as declined whatever option went out and whatever
            # status the agent ends the call with (docs/protocol.md, "Tool calls").
            m.renderer.declined(call.tool_call_id)
        m.effects.append(AnswerPermission(call.rid, call_id, verdict.outcome, verdict.approved))


# -- actions: the prompt ends, timers


def show_the_cards(m: TurnMachine, _: TimerFired) -> None:
    shown = _shown(m)
    for call in shown:
        _emit(m, call.part)
    _finish(m, "tool_calls", Last.PENDING, tuple(PendingCall(c.call_id, c.token, tool=c.tool or c.by_result) for c in shown))


def close_the_session(m: TurnMachine, _: TimerFired) -> None:
    # The agent never ended the cancelled turn: its ACP session is closed. It is
    # never prompted again while that prompt may still run (its output would
    # interleave with the next answer's): SessionClosed decides what replaces it.
    m.effects.append(Log("warning", "cancelled turn did not end: its session is closed", {"agent": m.agent}))
    m.effects.append(CloseSession(m.prompt_seq))


def fresh_session(m: TurnMachine, _: SessionClosed) -> None:
    # Still open after the close: that session is left for good (its late output and
    # answer are for a session this chat no longer has). A fresh one is told the conversation.
    m.whole = True
    m.command_left = False  # closing the session ended it
    m.effects.append(Log("warning", "cancelled turn still open after its session was closed: a fresh session", {"agent": m.agent}))
    m.effects.append(NewSession("a cancelled turn did not end", take_up=False, close=False))


def close_and_take_up(m: TurnMachine, ev: PromptEnded) -> None:
    # The agent ended the cancelled turn but not the command it ran (codex-acp: docs/agents.md,
    # "A command's output, and terminals"): closing the session ends it; then it is taken up.
    drained(m, ev)
    m.command_left = False
    m.effects.append(Log("info", "a cancelled turn left a command running: its session is closed and taken up", {"agent": m.agent}))
    m.effects.append(NewSession("a cancelled turn left a command running", take_up=True, close=True))


def take_up_again(m: TurnMachine, _: SessionClosed) -> None:
    m.command_left = False  # closing the session ended it
    # It ended (the close ended it, or it ended late): the session can be taken up
    # again, with the agent's own memory of the chat.
    m.effects.append(NewSession("a cancelled turn ended only once its session was closed", take_up=True, close=False))


def drained(m: TurnMachine, ev: PromptEnded) -> None:
    m.effects.append(StopTimer(Timer.DRAIN))
    if ev.error is not None:
        # Whatever ends a cancelled turn ends it as cancelled: agents answer a cancel with end_turn or an error too.
        m.effects.append(Log("info", "cancelled turn ended with an error", {"error": ev.error}))
    m.renderer.close()
    _report_dropped(m)


def hold_the_end(m: TurnMachine, ev: PromptEnded) -> None:
    m.held = ev  # told to the next request, with what was kept


def renew_and_retry(m: TurnMachine, ev: PromptEnded) -> None:
    # A fresh ACP session (or the same one taken up) gets the job's prompt again.
    m.effects.append(StopTimer(Timer.GATHER))
    m.effects.append(Log("warning", "first turn after a cancel failed or was empty: the session is taken up again", {"agent": m.agent, "error": ev.error}))
    m.effects.append(NewSession("the first turn after a cancel failed"))


def _close_out(m: TurnMachine) -> None:
    """The turn is over: its tool calls closed in the response, its calls answered."""
    m.effects.append(StopTimer(Timer.GATHER))
    for part in m.renderer.close():
        _emit(m, part)
    for call_id in list(m.calls):
        _answer(m, call_id, Answer.CANCELLED, None)  # the turn ended without them


def end_the_turn(m: TurnMachine, ev: PromptEnded) -> None:
    """The turn is over: the job ends with its stop reason, or fails with its error."""
    _close_out(m)
    if ev.error is not None:
        _fail(m, present.turn_failed(m.agent, ev.error, named=ev.named))
        return
    reason = ev.stop_reason if ev.stop_reason in STOP_REASONS else "end_turn"
    if reason != ev.stop_reason:
        m.effects.append(Log("warning", "unknown stopReason, reported as end_turn", {"stopReason": ev.stop_reason}))
    if reason == "cancelled":
        # Nobody cancelled this turn (that one would be DRAINING): the agent ended it
        # itm. codex-acp ends the whole turn so when a permission is rejected
        # (docs/agents.md, "Quirks"). For VS Code the response has simply ended: ``cancelled``
        # answers a $/cancelRequest only.
        m.effects.append(Log("info", "the agent cancelled its own turn", {"agent": m.agent}))
        reason = "end_turn"
    _finish(m, reason, Last.DONE)


# -- actions: endings


def detach(m: TurnMachine, ev: AgentExited) -> None:
    # Nothing was streaming, nothing waits on it: no request fails; the next starts it again.
    for call_id in list(m.calls):
        _answer(m, call_id, Answer.CANCELLED, None)
    m.cancelled_prompt = None
    m.effects.append(Log("warning", "agent gone between turns: the next request starts it again", {"agent": m.agent, "reason": ev.reason}))
    m.effects.append(Detach())


def die(m: TurnMachine, ev: AgentExited) -> None:
    m.calls.forget_permissions()  # nobody is left to answer them
    _die(m, ev.reason)


def cancel_and_close(m: TurnMachine, ev: Close) -> None:
    m.effects.append(SendCancel())  # first: ACP's cancelled answers follow a cancel
    for call_id in list(m.calls):
        _answer(m, call_id, Answer.CANCELLED, None)
    close(m, ev)


def close(m: TurnMachine, ev: Close) -> None:
    _end_all(m, present.session_closed(ev.reason))
    m.effects.append(Shutdown())


def _die(m: TurnMachine, reason: str) -> None:
    _end_all(m, reason)
    m.effects.append(Died(reason))
    m.effects.append(Shutdown())


def _end_all(m: TurnMachine, message: str) -> None:
    for call_id in list(m.calls):
        _answer(m, call_id, Answer.CANCELLED, None)
    jobs = ([m.job] if m.job else []) + m.waiting.clear()
    m.job = None
    for job in jobs:
        m.effects.append(Fail(job.id, message))
    for timer in Timer:
        m.effects.append(StopTimer(timer))


def _finish(m: TurnMachine, stop_reason: str, last: Last, pending: tuple[PendingCall, ...] = ()) -> None:
    job = m.job
    assert job is not None
    if stop_reason != "cancelled" and m.visible != job.id:
        # Copilot Chat shows "Sorry, no response was returned." for a response with
        # neither text nor a tool call: say what happened instead.
        declined = any(a in (Answer.REJECT, Answer.DECLINED) for a in job.answers.values())
        _say(m, present.EmptyAnswer(m.agent, declined))
    for part in m.renderer.pause():  # the response must not end inside a command's output block
        _emit(m, part)
    m.job = None
    m.effects.append(StopTimer(Timer.GATHER))
    m.effects.append(Finish(job.id, stop_reason, last, pending))


def _fail(m: TurnMachine, message: str) -> None:
    job = m.job
    assert job is not None
    m.job = None
    m.effects.append(Fail(job.id, message))
    m.effects.append(Died(message))
    _end_all(m, message)
    m.effects.append(Shutdown())


def _emit(m: TurnMachine, part: Part) -> None:
    assert m.job is not None
    if part.get("type") == "tool_call" or (part.get("type") == "text" and str(part.get("value", "")).strip() and not notices.is_notice(part["value"])):
        m.visible = m.job.id
    m.effects.append(Emit(m.job.id, part))


def _report_dropped(m: TurnMachine) -> None:
    if m.dropped:
        m.effects.append(Log("info", "ended turn's output dropped", {"agent": m.agent, "parts": m.dropped}))
        m.dropped = 0


def _answer_of(job: JobInfo, call_id: str) -> Answer:
    """The answer ``job`` brings for ``call_id``: a request cancelled before it got here approves nothing."""
    answer = job.answers[call_id]
    return Answer.CANCELLED if job.cancelled and answer is not Answer.RESULT else answer


_OUTPUT_KINDS = frozenset({"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan", "user_message_chunk"})


def _output_kinds(raw: Any) -> list[Part]:
    """For an update outside a streaming turn: a marker per output update (to count it),
    nothing for session-level updates (modes, commands, config, usage)."""
    kind = raw.get("sessionUpdate") if isinstance(raw, dict) else None
    return [{"type": "dropped", "kind": kind}] if kind in _OUTPUT_KINDS else []


# ---------------------------------------------------------------- the table

#: A row's next state when it stays where it was (for rows over several states).
STAY = None
#: A row's guard when it always holds.
ALWAYS = None
_S = State
_ANY = tuple(State)
_LIVE = tuple(s for s in State if s is not State.CLOSED)

E = TypeVar("E", bound="Event | NextJob")
Guard = Callable[["TurnMachine", E], bool]
Action = Callable[["TurnMachine", E], None]


@dataclass(frozen=True)
class Row(Generic[E]):
    """One decision: in any of ``states``, on ``event``, when ``guard`` holds (``ALWAYS``:
    None), run ``action`` and enter ``target`` (``STAY``: the state it was in). Guards and
    actions are the functions above, bound here (so mypy checks each takes the row's event)."""

    states: tuple[State, ...]
    event: type[E]
    guard: Guard[E] | None
    target: State | None
    action: Action[E]

    @property
    def guard_name(self) -> str:
        return self.guard.__name__ if self.guard is not None else ""

    @property
    def action_name(self) -> str:
        return self.action.__name__

    def __str__(self) -> str:
        guard = f" [{self.guard_name}]" if self.guard else ""
        return f"{_states_text(self.states)} + {self.event.__name__}{guard} -> {self.target.name if self.target else '(stays)'}: {self.action_name}"


def _row(states: State | tuple[State, ...], event: type[E], guard: Guard[E] | None, target: State | None, action: Action[E]) -> Row[Any]:
    return Row(states if isinstance(states, tuple) else (states,), event, guard, target, action)


def _but(*states: State) -> tuple[State, ...]:
    """Every state except ``states``, in the enum's order."""
    return tuple(s for s in State if s not in states)


#: The program: one group of rows per event, the rows for one (state, event) pair in the order
#: they are tried, the last of them unconditional (``ALWAYS``), so every pair has its rule:
#: ``ignore`` where nothing happens, ``impossible`` where the event cannot come.
#: tests/test_turn.py walks every row and checks its action, and checks the table is total.
TABLE: tuple[Row[Any], ...] = (
    # A request comes: it answers the cards it can, stops the turn if it must, and waits in line.
    _row(_S.CLOSED, NewJob, ALWAYS, STAY, refuse_job),
    _row(_S.STREAMING, NewJob, stops_the_turn, _S.DRAINING, stop_streaming_and_queue),
    _row(_S.AWAITING, NewJob, stops_the_turn, _S.DRAINING, stop_the_turn_and_queue),
    _row(_S.ENDED, NewJob, asks_to_stop, _S.IDLE, forget_the_turn_and_queue),
    _row(_but(_S.STREAMING, _S.AWAITING, _S.ENDED, _S.CLOSED), NewJob, asks_to_stop, STAY, forget_the_turn_and_queue),
    _row(_LIVE, NewJob, ALWAYS, STAY, queue),
    # The job next in line runs (only where one can be taken: TAKES_A_JOB): it starts the agent,
    # prompts, goes on with the open turn, is told how the turn ended, or is answered at once.
    _row(_S.NO_AGENT, NextJob, ALWAYS, _S.STARTING, start_agent),
    _row(_S.AWAITING, NextJob, cannot_go_on, _S.DRAINING, stop_the_turn_first),
    _row(_S.AWAITING, NextJob, ALWAYS, _S.STREAMING, go_on),
    _row((_S.IDLE, _S.ENDED), NextJob, has_prompt, _S.STREAMING, prompt),
    _row(_S.ENDED, NextJob, turn_failed, _S.CLOSED, tell_the_end),
    _row(_S.ENDED, NextJob, ALWAYS, _S.IDLE, tell_the_end),
    _row(_S.IDLE, NextJob, ALWAYS, STAY, answer_at_once),
    _row(_but(*TAKES_A_JOB), NextJob, ALWAYS, STAY, impossible),
    # A Stop (``$/cancelRequest``); one for a job that has ended already changes nothing.
    _row(_S.STARTING, CancelJob, streams, STAY, cancel_the_start),
    _row(_S.RENEWING, CancelJob, streams, STAY, cancel_the_renewal),
    _row(_S.STREAMING, CancelJob, streams, _S.DRAINING, stop),
    _row(_ANY, CancelJob, waits, STAY, unqueue),
    _row(_ANY, CancelJob, ALWAYS, STAY, ignore),
    # A start is answered; only a start is.
    _row(_S.STARTING, Ready, failed, _S.CLOSED, die_at_start),
    _row(_S.RENEWING, Ready, failed, _S.CLOSED, die_at_renewal),
    _row((_S.STARTING, _S.RENEWING), Ready, ALWAYS, _S.IDLE, up),
    _row(_S.CLOSED, Ready, ALWAYS, STAY, ignore),  # closed while starting
    _row(_but(_S.STARTING, _S.RENEWING, _S.CLOSED), Ready, ALWAYS, STAY, impossible),
    # The agent's traffic never changes the state.
    _row(_S.STREAMING, Update, ALWAYS, STAY, show),
    _row(_S.AWAITING, Update, ALWAYS, STAY, keep),
    _row((_S.NO_AGENT, _S.IDLE, _S.ENDED), Update, ALWAYS, STAY, drop_while_idle),
    _row((_S.STARTING, _S.RENEWING), Update, ALWAYS, STAY, drop_while_starting),
    _row((_S.DRAINING, _S.CLOSING, _S.CLOSING_ENDED), Update, ALWAYS, STAY, drop_while_draining),
    _row(_S.CLOSED, Update, ALWAYS, STAY, drop_after_the_close),
    _row(_S.STREAMING, PermissionAsked, ALWAYS, STAY, route_permission),
    _row(_S.AWAITING, PermissionAsked, ALWAYS, STAY, route_permission_for_later),
    _row(_but(_S.STREAMING, _S.AWAITING), PermissionAsked, ALWAYS, STAY, route_permission_no_turn),
    _row(_S.STREAMING, ElicitationAsked, ALWAYS, STAY, route_question),
    _row(_S.AWAITING, ElicitationAsked, ALWAYS, STAY, route_question_for_later),
    _row(_but(_S.STREAMING, _S.AWAITING), ElicitationAsked, ALWAYS, STAY, route_question_no_turn),
    _row(_S.STREAMING, ToolInvoked, ALWAYS, STAY, take_tool_call),
    _row(_S.AWAITING, ToolInvoked, ALWAYS, STAY, keep_tool_call),
    _row(_but(_S.STREAMING, _S.AWAITING), ToolInvoked, ALWAYS, STAY, refuse_tool_call),
    # The prompt ends; the answer to an older prompt (of a session left behind) changes nothing.
    _row(_S.STREAMING, PromptEnded, first_after_a_cancel_failed, _S.RENEWING, renew_and_retry),
    _row(_S.STREAMING, PromptEnded, failed, _S.CLOSED, end_the_turn),
    _row(_S.STREAMING, PromptEnded, current, _S.IDLE, end_the_turn),
    _row(_S.AWAITING, PromptEnded, current, _S.ENDED, hold_the_end),
    _row(_S.DRAINING, PromptEnded, left_a_command, _S.RENEWING, close_and_take_up),
    _row(_S.DRAINING, PromptEnded, current, _S.IDLE, drained),
    _row(_S.CLOSING, PromptEnded, current, _S.CLOSING_ENDED, drained),
    _row(_ANY, PromptEnded, ALWAYS, STAY, ignore),
    # Timers; a stale one (its tag is not the current one) changes nothing.
    _row(_S.STREAMING, TimerFired, gathered, _S.AWAITING, show_the_cards),
    _row(_S.STARTING, TimerFired, still_starting, STAY, say_starting),
    _row(_S.DRAINING, TimerFired, drain_deadline, _S.CLOSING, close_the_session),
    _row(_ANY, TimerFired, ALWAYS, STAY, ignore),
    # The session a cancelled turn outlived is closed: it is replaced.
    _row(_S.CLOSING, SessionClosed, current, _S.RENEWING, fresh_session),
    _row(_S.CLOSING_ENDED, SessionClosed, current, _S.RENEWING, take_up_again),
    _row(_ANY, SessionClosed, ALWAYS, STAY, ignore),
    # Endings; after the close, nothing more ends.
    _row(_S.IDLE, AgentExited, nothing_waits, _S.NO_AGENT, detach),
    _row(_LIVE, AgentExited, ALWAYS, _S.CLOSED, die),
    _row((_S.STREAMING, _S.AWAITING), Close, ALWAYS, _S.CLOSED, cancel_and_close),
    _row(_but(_S.STREAMING, _S.AWAITING, _S.CLOSED), Close, ALWAYS, _S.CLOSED, close),
    _row(_S.CLOSED, AgentExited, ALWAYS, STAY, ignore),
    _row(_S.CLOSED, Close, ALWAYS, STAY, ignore),
)

#: Every event the table answers: the actor's (``Event``) and the machine's own ``NextJob``.
EVENTS: tuple[type, ...] = (*get_args(Event), NextJob)


def _states_text(states: tuple[State, ...]) -> str:
    if states == _ANY:
        return "any"
    if len(states) > len(State) // 2:
        return "any but " + ", ".join(s.name for s in State if s not in states)
    return ", ".join(s.name for s in states)


def table_text(table: tuple[Row[Any], ...] = TABLE) -> str:
    """The table as markdown, one line a row (docs/architecture.md prints it)."""
    lines = ["| # | state | event | guard | next state | action |", "|---|---|---|---|---|---|"]
    for i, row in enumerate(table, 1):
        target = row.target.name if row.target else "(stays)"
        lines.append(f"| {i} | {_states_text(row.states)} | {row.event.__name__} | {row.guard_name or '—'} | {target} | {row.action_name} |")
    return "\n".join(lines) + "\n"


def index(table: tuple[Row[Any], ...]) -> dict[tuple[State, type], tuple[Row[Any], ...]]:
    """The rows for each (state, event) pair, in the order they are tried. Raises ``TurnError``
    when the table is not total: a pair with no row, or whose last row has a guard (an event
    its guards all refuse would fall through)."""
    found: dict[tuple[State, type], list[Row[Any]]] = {}
    for row in table:
        for state in row.states:
            found.setdefault((state, row.event), []).append(row)
    for state in State:
        for event in EVENTS:
            rows = found.get((state, event))
            if not rows:
                raise TurnError(f"the turn table has no row for {event.__name__} in state {state.name}")
            if rows[-1].guard is not None:
                raise TurnError(f"the turn table's last row for {event.__name__} in state {state.name} has a guard: {rows[-1]}")
    return {key: tuple(rows) for key, rows in found.items()}


_ROWS = index(TABLE)
