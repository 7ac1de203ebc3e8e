"""The turn lifecycle of one agent session: a pure state machine whose table is the program.

Rules of this file (after h11's ``_state.py``):

* Everything that decides what happens to a chat request, an agent's output,
  a permission, a cancel or a timer while one ACP session runs lives here. The
  session actor feeds events in and carries out the effects that come back;
  it decides nothing itself.
* The decisions are the rows of ``TABLE``: ``(state, event, guard) -> (next state,
  action)``, one next state per row. ``TurnMachine.handle`` finds the first row whose
  state, event and guard match, runs its action and enters its state. An event no row
  names changes nothing (a stale timer, a late answer, anything after the close), except
  ``Ready``, which only ever answers a start: elsewhere it raises ``TurnError``.
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
once (``Respond`` or ``RespondError``), every question too (``AnswerQuestion``). What a permission becomes (a card, a grant,
a decline, a refusal) and which option an answer selects is the permission rule's
(``permissions``): this machine only carries its decisions out at the right time.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lmbridge.core import elicitation, notices, permissions, present
from lmbridge.core.history import Last, Pending
from lmbridge.core.jobs import JobInfo, JobQueue
from lmbridge.core.permissions import CANCELLED as CANCELLED_OUTCOME
from lmbridge.core.permissions import Answer
from lmbridge.core.profiles import OTHER, AgentProfile

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
    pending: tuple[Pending, ...] = ()


@dataclass(frozen=True)
class Fail:
    """End a job with an error the user reads."""

    job_id: int
    message: str


@dataclass(frozen=True)
class Respond:
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
    Emit | Finish | Fail | Respond | AnswerQuestion | RespondError | ResolveTool | SendCancel | StartAgent | NewSession | CloseSession | Prompt | StartTimer | StopTimer | Died
    | Detach | Shutdown | Log
)



@dataclass(frozen=True)
class NextJob:
    """Internal: the job next in line may run (the machine feeds it to itself)."""


# ---------------------------------------------------------------- the table

#: A row's next state when it stays where it was (for rows over several states).
STAY = None
_S = State
_LIVE = tuple(s for s in State if s is not State.CLOSED)


@dataclass(frozen=True)
class Timing:
    """Seconds: ``drain`` (a cancelled turn's deadline), ``gather`` (the window that gathers
    cards into one response), ``notice`` (before the first start notice), ``progress``
    (between the later ones; infinite: none)."""

    drain: float = DRAIN
    gather: float = GATHER
    notice: float = START_NOTICE
    progress: float = START_PROGRESS


@dataclass(frozen=True)
class Row:
    """One decision: in any of ``states``, on ``event``, when ``guard`` holds (``""``:
    always), run ``action`` and enter ``target`` (``STAY``: the state it was in).
    Guards and actions are named methods of ``TurnMachine`` (``_if_<guard>``, ``_do_<action>``)."""

    states: tuple[State, ...]
    event: type
    guard: str
    target: State | None
    action: str

    def __str__(self) -> str:
        states = "any live" if self.states == _LIVE else ", ".join(s.name for s in self.states)
        guard = f" [{self.guard}]" if self.guard else ""
        return f"{states} + {self.event.__name__}{guard} -> {self.target.name if self.target else '(stays)'}: {self.action}"


def _row(states: State | tuple[State, ...], event: type, guard: str, target: State | None, action: str) -> Row:
    return Row(states if isinstance(states, tuple) else (states,), event, guard, target, action)


#: The program. First match wins; tests/test_turn.py walks every row and checks its action.
TABLE: tuple[Row, ...] = (
    # A request comes: it answers the cards it can, stops the turn if it must, and waits in line.
    _row(_S.CLOSED, NewJob, "", STAY, "refuse_job"),
    _row((_S.STREAMING, _S.AWAITING), NewJob, "stops_the_turn", _S.DRAINING, "stop_the_turn_and_queue"),
    _row(_S.ENDED, NewJob, "stops_the_turn", _S.IDLE, "forget_the_turn_and_queue"),
    _row(_LIVE, NewJob, "stops_the_turn", STAY, "forget_the_turn_and_queue"),
    _row(_LIVE, NewJob, "", STAY, "queue"),
    # The job next in line runs: it starts the agent, prompts, goes on with the open turn,
    # is told how the turn ended, or is answered at once.
    _row(_S.NO_AGENT, NextJob, "", _S.STARTING, "start_agent"),
    _row(_S.AWAITING, NextJob, "cannot_go_on", _S.DRAINING, "stop_the_turn_first"),
    _row(_S.AWAITING, NextJob, "", _S.STREAMING, "go_on"),
    _row((_S.IDLE, _S.ENDED), NextJob, "has_prompt", _S.STREAMING, "prompt"),
    _row(_S.ENDED, NextJob, "turn_failed", _S.CLOSED, "tell_the_end"),
    _row(_S.ENDED, NextJob, "", _S.IDLE, "tell_the_end"),
    _row(_S.IDLE, NextJob, "", STAY, "answer_at_once"),
    # A Stop (``$/cancelRequest``).
    _row((_S.STARTING, _S.RENEWING), CancelJob, "streams", STAY, "cancel_the_start"),
    _row(_S.STREAMING, CancelJob, "streams", _S.DRAINING, "stop"),
    _row(tuple(State), CancelJob, "waits", STAY, "unqueue"),
    # A start is answered.
    _row((_S.STARTING, _S.RENEWING), Ready, "failed", _S.CLOSED, "die_at_start"),
    _row((_S.STARTING, _S.RENEWING), Ready, "", _S.IDLE, "up"),
    _row(_S.CLOSED, Ready, "", STAY, "nothing"),
    # The agent's traffic never changes the state.
    _row(_S.STREAMING, Update, "", STAY, "show"),
    _row(_S.AWAITING, Update, "", STAY, "keep"),
    _row(tuple(State), Update, "", STAY, "drop"),
    _row(tuple(State), PermissionAsked, "", STAY, "route_permission"),
    _row(tuple(State), ElicitationAsked, "", STAY, "route_question"),
    _row((_S.STREAMING, _S.AWAITING), ToolInvoked, "", STAY, "take_tool_call"),
    _row(tuple(State), ToolInvoked, "", STAY, "refuse_tool_call"),
    # The prompt ends.
    _row(_S.STREAMING, PromptEnded, "first_after_a_cancel_failed", _S.RENEWING, "renew_and_retry"),
    _row(_S.STREAMING, PromptEnded, "failed", _S.CLOSED, "end_the_turn"),
    _row(_S.STREAMING, PromptEnded, "current", _S.IDLE, "end_the_turn"),
    _row(_S.AWAITING, PromptEnded, "current", _S.ENDED, "hold_the_end"),
    _row(_S.DRAINING, PromptEnded, "left_a_command", _S.RENEWING, "close_and_take_up"),
    _row(_S.DRAINING, PromptEnded, "current", _S.IDLE, "drained"),
    _row(_S.CLOSING, PromptEnded, "current", _S.CLOSING_ENDED, "drained"),
    # Timers.
    _row(_S.STREAMING, TimerFired, "gathered", _S.AWAITING, "show_the_cards"),
    _row(_S.STARTING, TimerFired, "still_starting", STAY, "say_starting"),
    _row(_S.DRAINING, TimerFired, "drain_deadline", _S.CLOSING, "close_the_session"),
    # The session a cancelled turn outlived is closed: it is replaced.
    _row(_S.CLOSING, SessionClosed, "current", _S.RENEWING, "fresh_session"),
    _row(_S.CLOSING_ENDED, SessionClosed, "current", _S.RENEWING, "take_up_again"),
    # Endings.
    _row(_S.IDLE, AgentExited, "nothing_waits", _S.NO_AGENT, "detach"),
    _row(_LIVE, AgentExited, "", _S.CLOSED, "die"),
    _row((_S.STREAMING, _S.AWAITING), Close, "", _S.CLOSED, "cancel_and_close"),
    _row(_LIVE, Close, "", _S.CLOSED, "close"),
)


def table_text(table: tuple[Row, ...] = TABLE) -> str:
    """The table as markdown, one line a row (docs/architecture.md prints it)."""
    lines = ["| # | state | event | guard | next state | action |", "|---|---|---|---|---|---|"]
    for i, row in enumerate(table, 1):
        states = "any but CLOSED" if row.states == _LIVE else "any" if row.states == tuple(State) else ", ".join(s.name for s in row.states)
        target = row.target.name if row.target else "(stays)"
        lines.append(f"| {i} | {states} | {row.event.__name__} | {row.guard or '—'} | {target} | {row.action} |")
    return "\n".join(lines) + "\n"


def _index(table: tuple[Row, ...]) -> dict[tuple[State, type], tuple[Row, ...]]:
    index: dict[tuple[State, type], list[Row]] = {}
    for row in table:
        for state in row.states:
            index.setdefault((state, row.event), []).append(row)
    return {key: tuple(rows) for key, rows in index.items()}


_ROWS = _index(TABLE)


# ---------------------------------------------------------------- pure helpers




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
    request: permissions.Permission | None = None  # the permission its card shows
    question: elicitation.Question | None = None  # the agent's question it shows
    by_result: bool = False  # answered by VS Code's tool result (its question tool), not by a token

    @property
    def tool(self) -> bool:
        return self.rid is None



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
        self.calls: dict[str, _Call] = {}  # what the agent waits on, by callId
        self.tools: frozenset[str] = frozenset()  # what the latest request offered
        self.kept = present.Kept(buffer_limit)  # output kept for the next request (AWAITING, ENDED)
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
        self.trace: list[tuple[Row, State]] = []  # the rows the last ``handle`` went through, each with the state it entered
        self._fx: list[Effect] = []

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
        return self.state is State.STREAMING and self._first_after_a_cancel()

    # -- entry ----------------------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        """Feed one event; returns the effects to carry out, in order. Raises ``TurnError``
        for an event that cannot happen (``Ready`` outside a start)."""
        self._fx, self.trace = [], []
        self._step(event)
        while self.job is None and len(self.waiting) and self.state in TAKES_A_JOB:
            self._step(NextJob())
        fx, self._fx = self._fx, []
        return fx

    def row_for(self, event: Event | NextJob) -> Row | None:
        """The row ``event`` would go through now (None: it changes nothing). Raises
        ``TurnError`` for an event that cannot happen."""
        found = self._match(event)
        return found[0] if found else None

    def _match(self, event: Event | NextJob) -> tuple[Row, Callable[[TurnMachine, Any], None]] | None:
        for row, guard, action in _COMPILED.get((self.state, type(event)), ()):
            if guard is None or guard(self, event):
                return row, action
        if isinstance(event, Ready):
            raise TurnError(f"Ready cannot happen in state {self.state.name}")
        return None

    def _step(self, event: Event | NextJob) -> None:
        found = self._match(event)
        if found is None:
            return
        row, action = found
        action(self, event)
        if row.target is not None:
            self.state = row.target
        self.trace.append((row, self.state))
        if row.target in (State.IDLE, State.ENDED):
            self._report_dropped()  # a turn is over: what it dropped, told once

    def reset_renderer(self, renderer: Renderer) -> None:
        """A fresh ACP session renders from scratch."""
        self.renderer = renderer

    # -- guards ---------------------------------------------------------------

    def _if_stops_the_turn(self, ev: NewJob) -> bool:
        """The request stops the open turn: the history says so (a Stop at a card, new words
        beside the cards: ``cancel_first``), or, while the prompt streams or waits, it answers a
        permission of the turn ``cancelled`` (it was stopped before it got here, or holds no
        result for the card). ACP's ``cancelled`` answers a cancelled turn: ``_stop_turn``
        sends ``session/cancel`` first."""
        job = ev.job
        if job.cancel_first:
            return True
        live = self.state in (State.STREAMING, State.AWAITING)
        return live and any(_answer_of(job, c) is Answer.CANCELLED for c in job.answers if c in self.calls and not self.calls[c].tool)

    def _if_cannot_go_on(self, _: NextJob) -> bool:
        """New words while the agent's turn is open, or cards this job cannot answer (it was
        classified before the job ahead of it showed them): the turn is stopped first."""
        job = self.waiting.peek()
        return job.has_prompt or bool(self._stale_calls(job))

    def _if_has_prompt(self, _: NextJob) -> bool:
        return self.waiting.peek().has_prompt

    def _if_turn_failed(self, _: NextJob) -> bool:
        return self.held is not None and self.held.error is not None

    def _if_streams(self, ev: CancelJob) -> bool:
        return self.job is not None and self.job.id == ev.job_id

    def _if_waits(self, ev: CancelJob) -> bool:
        return ev.job_id in self.waiting

    def _if_failed(self, ev: Ready | PromptEnded) -> bool:
        if isinstance(ev, PromptEnded):
            return self._if_current(ev) and ev.error is not None
        return ev.error is not None

    def _if_current(self, ev: PromptEnded | SessionClosed) -> bool:
        return ev.seq == self.prompt_seq

    def _if_left_a_command(self, ev: PromptEnded) -> bool:
        """The cancelled turn ended, but a command it ran may run on (codex-acp: only
        ``session/close`` ends it; ``Renderer.left_running``)."""
        return ev.seq == self.prompt_seq and self.command_left

    def _first_after_a_cancel(self) -> bool:
        return self.job is not None and self.job.has_prompt and self.cancelled_prompt is not None and self.prompt_seq == self.cancelled_prompt + 1

    def _if_first_after_a_cancel_failed(self, ev: PromptEnded) -> bool:
        """The first prompt after a cancel failed, or ended at once with nothing: an agent's
        quirk (claude-agent-acp, gemini-cli; docs/agents.md, "Quirks"), not the user's problem."""
        empty = ev.error is None and ev.stop_reason == "end_turn" and self.output == 0
        return self._if_current(ev) and self._first_after_a_cancel() and (empty or ev.error is not None)

    def _if_gathered(self, ev: TimerFired) -> bool:
        return ev.timer is Timer.GATHER and ev.tag == self.generation and bool(self._shown())

    def _if_still_starting(self, ev: TimerFired) -> bool:
        return ev.timer is Timer.NOTICE and ev.tag == self.starts and self.job is not None

    def _if_drain_deadline(self, ev: TimerFired) -> bool:
        return ev.timer is Timer.DRAIN and ev.tag == self.prompt_seq

    def _if_nothing_waits(self, _: AgentExited) -> bool:
        return not len(self.waiting)

    # -- actions: requests ----------------------------------------------------

    def _do_refuse_job(self, ev: NewJob) -> None:
        self._fx.append(Fail(ev.job.id, present.session_gone(self.agent)))

    def _take_answers(self, job: JobInfo, stopping: bool = False) -> None:
        """The answers ``job`` brings; ``stopping``: given after ``session/cancel``, where ACP's
        answer to every permission is ``cancelled`` (a VS Code tool's result still goes out)."""
        self.tools = job.tools
        for call_id in job.answers:
            answer = _answer_of(job, call_id)
            call = self.calls.get(call_id)
            if stopping and call is not None and not call.tool:
                answer = Answer.CANCELLED
            self._answer(call_id, answer, job.id)

    def _do_queue(self, ev: NewJob) -> None:
        self._take_answers(ev.job)
        self.waiting.put(ev.job)

    def _do_stop_the_turn_and_queue(self, ev: NewJob) -> None:
        if self.job is not None:
            # This request stops the turn another request still streams (its
            # $/cancelRequest may come after): that response ends here, cancelled.
            stopped, self.job = self.job, None
            self._fx.append(StopTimer(Timer.GATHER))
            self._fx.append(Finish(stopped.id, "cancelled", Last.CANCELLED))
        self._stop_turn(ev.job)  # session/cancel, then the cards this request answers
        self.waiting.put(ev.job)

    def _do_forget_the_turn_and_queue(self, ev: NewJob) -> None:
        self._take_answers(ev.job)
        self._forget_turn()
        self.waiting.put(ev.job)

    def _do_start_agent(self, _: NextJob) -> None:
        self.job = self.waiting.pop()
        self.starts += 1
        self.notices = 0
        self._fx.append(StartTimer(Timer.NOTICE, self.timing.notice, self.starts))
        self._fx.append(StartAgent(self.job.id))

    def _do_stop_the_turn_first(self, _: NextJob) -> None:
        self._stop_turn()  # the job stays first in line: it runs once the turn has ended

    def _attach(self) -> JobInfo:
        """Attach the job next in line to the turn: what was kept for it goes out first."""
        job = self.job = self.waiting.pop()
        for call_id in self._stale_calls(job):
            # Classified before the request ahead of it showed these calls: it cannot answer
            # them, and the turn that asked is over (when unsure, deny).
            self._answer(call_id, Answer.CANCELLED, None)
        for part in self.kept.take():
            self._emit(part)
        for call in [c for c in self.calls.values() if c.shown_in is None]:
            self._show(call)
        return job

    def _do_go_on(self, _: NextJob) -> None:
        self._attach()  # the agent goes on with its turn

    def _do_prompt(self, _: NextJob) -> None:
        job = self._attach()
        self.held = None
        self.prompt_seq += 1
        self.output = 0
        self._fx.append(Prompt(job.id, self.prompt_seq, whole=self.whole, unsent=self.unsent))
        self.whole, self.unsent = False, ()

    def _do_tell_the_end(self, _: NextJob) -> None:
        """How the turn ended (``held``), told to this job: a failure fails it."""
        self._attach()
        held, self.held = self.held, None
        assert held is not None
        self._do_end_the_turn(held)

    def _do_answer_at_once(self, _: NextJob) -> None:
        self._attach()
        self._finish("end_turn", Last.DONE)
        self._report_dropped()

    def _do_cancel_the_start(self, ev: CancelJob) -> None:
        # The agent is still starting: it is kept, the request ends now.
        job = self.job
        assert job is not None
        self.job = None
        if self.state is State.STARTING:  # (a renewal's job was seen by the agent already)
            self.unsent += job.messages
        self._fx.append(StopTimer(Timer.NOTICE))
        self._fx.append(Finish(job.id, "cancelled", Last.CANCELLED))

    def _do_stop(self, ev: CancelJob) -> None:
        job = self.job
        assert job is not None
        self._fx.append(StopTimer(Timer.GATHER))
        self.job = None
        self._fx.append(Finish(job.id, "cancelled", Last.CANCELLED))
        self._stop_turn()

    def _do_unqueue(self, ev: CancelJob) -> None:
        job = self.waiting.take(ev.job_id)
        assert job is not None
        self.unsent += job.messages  # the agent never saw them
        self._fx.append(Finish(job.id, "cancelled", Last.CANCELLED))

    def _forget_turn(self) -> None:
        """Every call answered cancelled, the output kept dropped, the turn's end forgotten."""
        for call_id in list(self.calls):
            self._answer(call_id, Answer.CANCELLED, None)
        self.kept.clear()
        # Stopped at a card, the command it asks for has not run: only a turn stopped while it
        # streamed can leave one running (a card answered earlier, a command the agent runs).
        self.command_left = self.command_left or (self.state.phase is Phase.STREAMING and self.renderer.left_running())
        self.renderer.close()
        self.held = None

    def _stop_turn(self, answering: JobInfo | None = None) -> None:
        """ACP cancellation (docs/agents.md, "ACP as agents speak it"): ``session/cancel`` sent
        first, then every call answered, each permission ``cancelled`` once (``answering``: the
        request that stops the turn, whose answers go first), the deadline started; the turn's
        output from now on dropped. Answered before the cancel, an agent may take a
        ``cancelled`` card for a decline and call its model again, which the cancel then cuts
        (fast-agent 0.10.48 kept that stopped answer as an empty assistant message)."""
        self._fx.append(SendCancel())
        if answering is not None:
            self._take_answers(answering, stopping=True)
        self._forget_turn()
        self._fx.append(StartTimer(Timer.DRAIN, self.timing.drain, self.prompt_seq))
        self.cancelled_prompt = self.prompt_seq

    # -- actions: starting ----------------------------------------------------

    def _do_die_at_start(self, ev: Ready) -> None:
        self._fx.append(StopTimer(Timer.NOTICE))
        assert ev.error is not None
        self._die(present.start_failed(self.agent, ev.error, named=ev.named, renewing=self.state is State.RENEWING))

    def _do_up(self, ev: Ready) -> None:
        self._fx.append(StopTimer(Timer.NOTICE))
        self.whole = self.whole or ev.lost  # the ACP session has seen none of the chat
        if self.job is not None:
            self.waiting.put_back(self.job)  # it runs first
            self.job = None

    def _do_nothing(self, _: Any) -> None:
        pass  # closed while starting

    def _do_say_starting(self, _: TimerFired) -> None:
        t = self.timing
        waited = t.notice + self.notices * t.progress if self.notices else None
        self._say(present.StartNotice(self.agent, waited))
        self.notices += 1
        if math.isfinite(t.progress):  # the next line, while it still waits
            self._fx.append(StartTimer(Timer.NOTICE, t.progress, self.starts))

    # -- actions: the agent's traffic ----------------------------------------

    def _do_show(self, ev: Update) -> None:
        for part in self.renderer.update(ev.raw):
            if not notices.is_notice(part.get("value")):  # an agent's notice is not its answer
                self.output += 1
            self._emit(part)

    def _do_keep(self, ev: Update) -> None:
        self.kept.add(self.renderer.update(ev.raw))

    def _do_drop(self, ev: Update) -> None:
        # A turn that has ended (or is starting, or being cancelled): never part of a later answer.
        parts = _output_kinds(ev.raw)
        if not parts:
            return
        if self.dropped == 0:
            self._fx.append(Log("info", "output of an ended turn dropped", {"agent": self.agent, "state": self.phase.value}))
        self.dropped += len(parts)

    def _do_route_permission(self, ev: PermissionAsked) -> None:
        """What the permission becomes is the permission rule's (``permissions.route``); a
        card waits for the gather window while a job streams, else for the next request."""
        params = ev.params if isinstance(ev.params, Mapping) else {}
        raw_call = params.get("toolCall")
        request: permissions.Permission | permissions.Malformed
        if not ev.answerable:
            request = permissions.Malformed("id", "is neither a string nor a number", answerable=False)
        else:
            merged = self.renderer.known(raw_call.get("toolCallId")) if isinstance(raw_call, Mapping) else None
            request = permissions.read(ev.params, ev.call_id, ev.token, merged, ev.bridge, ev.workspace, ev.profile)
        decision = permissions.route(request, self.tools, self.agent)
        live = self.state in (State.STREAMING, State.AWAITING)
        if isinstance(decision, permissions.Grant):
            # VS Code confirms its own tools when it runs them (docs/tools.md).
            assert isinstance(request, permissions.Permission)
            self._fx.append(Respond(ev.rid, ev.call_id, permissions.outcome(request.options, Answer.ALLOW, request.profile)))
            self._fx.append(Log("info", "permission granted: a bridged VS Code tool", {"tool": decision.tool}))
            return
        if isinstance(decision, permissions.Refuse):
            self._fx.append(RespondError(ev.rid if ev.answerable else None, decision.error))
            self._fx.append(Log("warning", "malformed permission request refused", {"agent": self.agent, "error": decision.error["message"]}))
            if live:
                self._say_line(decision.line)
            return
        if not live:
            self._fx.append(Respond(ev.rid, ev.call_id, CANCELLED_OUTCOME))
            return
        assert isinstance(request, permissions.Permission)
        parts = self.renderer.permission_tool(dict(raw_call)) if isinstance(raw_call, Mapping) else []
        if self.state is State.STREAMING:
            self.output += 1
            for part in parts:
                self._emit(part)
        else:
            self.kept.add(parts)
        if isinstance(decision, permissions.Decline):
            self._say_line(decision.line)
            self.renderer.declined(request.tool_call_id)  # whichever answer went out: lmbridge declined it
            self._fx.append(Respond(ev.rid, ev.call_id, decision.outcome))
            self._fx.append(Log("info", "permission declined without a card", {"reason": decision.reason, "tool": request.tool}))
            return
        card = decision.card
        tool_input = {"title": card.title, "message": card.message, "approvalToken": ev.token}
        part = {"type": "tool_call", "callId": ev.call_id, "name": card.tool, "input": tool_input}
        call = self.calls[ev.call_id] = _Call(ev.call_id, part, ev.rid, ev.token, request.options, tool_call_id=request.tool_call_id, request=request)
        if self.state is State.STREAMING:
            self._show(call)

    def _do_route_question(self, ev: ElicitationAsked) -> None:
        """How a question is shown is ``elicitation.route``'s: VS Code's question tool, lmbridge's
        card, or (neither offered, or no request to show it in) ``cancel`` at once. Like a card,
        it waits for the gather window while a job streams, else for the next request."""
        question = elicitation.read(ev.params)
        if isinstance(question, elicitation.Malformed):
            self._fx.append(RespondError(ev.rid, question.error))
            self._fx.append(Log("warning", "question refused", {"agent": self.agent, "error": question.problem}))
            return
        via = elicitation.route(self.tools)
        if self.state not in (State.STREAMING, State.AWAITING) or via == "none":
            if via == "none" and self.state in (State.STREAMING, State.AWAITING):
                self._say_line(elicitation.unshown_line(self.agent))
            self._fx.append(AnswerQuestion(ev.rid, ev.call_id, question, Answer.CANCELLED))
            return
        if via == "ask":
            part = {"type": "tool_call", "callId": ev.call_id, "name": elicitation.ASK_TOOL, "input": elicitation.ask_input(question)}
        else:
            part = {"type": "tool_call", "callId": ev.call_id, "name": permissions.ACTION_TOOL, "input": elicitation.card_input(question, self.agent, ev.token)}
        call = self.calls[ev.call_id] = _Call(ev.call_id, part, ev.rid, ev.token, question=question, by_result=via == "ask")
        if self.state is State.STREAMING:
            self._show(call)

    def _do_take_tool_call(self, ev: ToolInvoked) -> None:
        part = {"type": "tool_call", "callId": ev.call_id, "name": ev.name, "input": dict(ev.arguments)}
        call = self.calls[ev.call_id] = _Call(ev.call_id, part)
        if self.state is State.STREAMING:
            self._show(call)

    def _do_refuse_tool_call(self, ev: ToolInvoked) -> None:
        self._fx.append(ResolveTool(ev.call_id, Answer.CANCELLED))

    def _say(self, n: present.Note) -> None:
        """A note for the user in the answer of the job at hand."""
        self._emit(present.note(n))

    def _say_line(self, line: str) -> None:
        """A line for the user in the answer streaming now, or kept for the next request."""
        part = _text(f"\n\n{line}\n\n")
        if self.state is State.STREAMING:
            self._emit(part)
        else:
            self.kept.add([part])

    def _show(self, call: _Call) -> None:
        """Give a call to the streaming job and (re)start the gather window. Its tool call
        part goes out when the window closes, with the response's end (``tool_calls``): a
        permission the agent drops by ending its turn meanwhile never becomes a card that
        nobody waits on (a dead permission card)."""
        assert self.job is not None
        call.shown_in = self.job.id
        self.generation += 1
        self._fx.append(StartTimer(Timer.GATHER, self.timing.gather, self.generation))

    def _shown(self) -> list[_Call]:
        return [c for c in self.calls.values() if self.job is not None and c.shown_in == self.job.id]

    def _stale_calls(self, job: JobInfo) -> list[str]:
        return [call_id for call_id, c in self.calls.items() if c.shown_in not in (None, job.id) and call_id not in job.answers]

    def _answer(self, call_id: str, answer: Answer, job_id: int | None) -> None:
        call = self.calls.pop(call_id, None)
        if call is None:
            return
        if call.tool:
            self._fx.append(ResolveTool(call_id, answer, job_id))
        elif call.question is not None:
            self._fx.append(AnswerQuestion(call.rid, call_id, call.question, answer, job_id))
        else:
            outcome = permissions.outcome(call.options, answer, call.request.profile if call.request is not None else OTHER)
            if answer is Answer.REJECT:
                # The user's Skip reads as declined whatever option went out and whatever
                # status the agent ends the call with (docs/protocol.md, "Tool calls").
                self.renderer.declined(call.tool_call_id)
            approved = call.request if answer is Answer.ALLOW and outcome != CANCELLED_OUTCOME else None
            self._fx.append(Respond(call.rid, call_id, outcome, approved))

    # -- actions: the prompt ends, timers --------------------------------------

    def _do_show_the_cards(self, _: TimerFired) -> None:
        shown = self._shown()
        for call in shown:
            self._emit(call.part)
        self._finish("tool_calls", Last.PENDING, tuple(Pending(c.call_id, c.token, tool=c.tool or c.by_result) for c in shown))

    def _do_close_the_session(self, _: TimerFired) -> None:
        # The agent never ended the cancelled turn: its ACP session is closed. It is
        # never prompted again while that prompt may still run (its output would
        # interleave with the next answer's): SessionClosed decides what replaces it.
        self._fx.append(Log("warning", "cancelled turn did not end: its session is closed", {"agent": self.agent}))
        self._fx.append(CloseSession(self.prompt_seq))

    def _do_fresh_session(self, _: SessionClosed) -> None:
        # Still open after the close: that session is left for good (its late output and
        # answer are for a session this chat no longer has). A fresh one is told the conversation.
        self.whole = True
        self.command_left = False  # closing the session ended it
        self._fx.append(Log("warning", "cancelled turn still open after its session was closed: a fresh session", {"agent": self.agent}))
        self._fx.append(NewSession("a cancelled turn did not end", take_up=False, close=False))

    def _do_close_and_take_up(self, ev: PromptEnded) -> None:
        # The agent ended the cancelled turn but not the command it ran (codex-acp: docs/agents.md,
        # "A command's output, and terminals"): closing the session ends it; then it is taken up.
        self._do_drained(ev)
        self.command_left = False
        self._fx.append(Log("info", "a cancelled turn left a command running: its session is closed and taken up", {"agent": self.agent}))
        self._fx.append(NewSession("a cancelled turn left a command running", take_up=True, close=True))

    def _do_take_up_again(self, _: SessionClosed) -> None:
        self.command_left = False  # closing the session ended it
        # It ended (the close ended it, or it ended late): the session can be taken up
        # again, with the agent's own memory of the chat.
        self._fx.append(NewSession("a cancelled turn ended only once its session was closed", take_up=True, close=False))

    def _do_drained(self, ev: PromptEnded) -> None:
        self._fx.append(StopTimer(Timer.DRAIN))
        if ev.error is not None:
            # Whatever ends a cancelled turn ends it as cancelled: agents answer a cancel with end_turn or an error too.
            self._fx.append(Log("info", "cancelled turn ended with an error", {"error": ev.error}))
        self.renderer.close()
        self._report_dropped()

    def _do_hold_the_end(self, ev: PromptEnded) -> None:
        self.held = ev  # told to the next request, with what was kept

    def _do_renew_and_retry(self, ev: PromptEnded) -> None:
        # A fresh ACP session (or the same one taken up) gets the job's prompt again.
        self._fx.append(StopTimer(Timer.GATHER))
        self._fx.append(Log("warning", "first turn after a cancel failed or was empty: the session is taken up again", {"agent": self.agent, "error": ev.error}))
        self._fx.append(NewSession("the first turn after a cancel failed"))

    def _close_out(self) -> None:
        """The turn is over: its tool calls closed in the response, its calls answered."""
        self._fx.append(StopTimer(Timer.GATHER))
        for part in self.renderer.close():
            self._emit(part)
        for call_id in list(self.calls):
            self._answer(call_id, Answer.CANCELLED, None)  # the turn ended without them

    def _do_end_the_turn(self, ev: PromptEnded) -> None:
        """The turn is over: the job ends with its stop reason, or fails with its error."""
        self._close_out()
        if ev.error is not None:
            self._fail(present.turn_failed(self.agent, ev.error, named=ev.named))
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

    # -- actions: endings -------------------------------------------------------

    def _do_detach(self, ev: AgentExited) -> None:
        # Nothing was streaming, nothing waits on it: no request fails; the next starts it again.
        for call_id in list(self.calls):
            self._answer(call_id, Answer.CANCELLED, None)
        self.cancelled_prompt = None
        self._fx.append(Log("warning", "agent gone between turns: the next request starts it again", {"agent": self.agent, "reason": ev.reason}))
        self._fx.append(Detach())

    def _do_die(self, ev: AgentExited) -> None:
        self.calls = {c: call for c, call in self.calls.items() if call.tool}  # permissions: nobody to answer
        self._die(ev.reason)

    def _do_cancel_and_close(self, ev: Close) -> None:
        self._fx.append(SendCancel())  # first: ACP's cancelled answers follow a cancel
        for call_id in list(self.calls):
            self._answer(call_id, Answer.CANCELLED, None)
        self._do_close(ev)

    def _do_close(self, ev: Close) -> None:
        self._end_all(present.session_closed(ev.reason))
        self._fx.append(Shutdown())

    def _die(self, reason: str) -> None:
        self._end_all(reason)
        self._fx.append(Died(reason))
        self._fx.append(Shutdown())

    def _end_all(self, message: str) -> None:
        for call_id in list(self.calls):
            self._answer(call_id, Answer.CANCELLED, None)
        jobs = ([self.job] if self.job else []) + self.waiting.clear()
        self.job = None
        for job in jobs:
            self._fx.append(Fail(job.id, message))
        for timer in Timer:
            self._fx.append(StopTimer(timer))

    def _finish(self, stop_reason: str, last: Last, pending: tuple[Pending, ...] = ()) -> None:
        job = self.job
        assert job is not None
        if stop_reason != "cancelled" and self.visible != job.id:
            # Copilot Chat shows "Sorry, no response was returned." for a response with
            # neither text nor a tool call: say what happened instead.
            declined = any(a in (Answer.REJECT, Answer.DECLINED) for a in job.answers.values())
            self._say(present.EmptyAnswer(self.agent, declined))
        for part in self.renderer.pause():  # the response must not end inside a command's output block
            self._emit(part)
        self.job = None
        self._fx.append(StopTimer(Timer.GATHER))
        self._fx.append(Finish(job.id, stop_reason, last, pending))

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
        if part.get("type") == "tool_call" or (part.get("type") == "text" and str(part.get("value", "")).strip() and not notices.is_notice(part["value"])):
            self.visible = self.job.id
        self._fx.append(Emit(self.job.id, part))

    def _report_dropped(self) -> None:
        if self.dropped:
            self._fx.append(Log("info", "ended turn's output dropped", {"agent": self.agent, "parts": self.dropped}))
            self.dropped = 0


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


def _compile(rows: dict[tuple[State, type], tuple[Row, ...]]) -> dict[tuple[State, type], tuple[tuple[Row, Any, Any], ...]]:
    """Each row with its guard and action looked up once (a name no method has fails at import)."""
    return {
        key: tuple((row, getattr(TurnMachine, f"_if_{row.guard}") if row.guard else None, getattr(TurnMachine, f"_do_{row.action}")) for row in found)
        for key, found in rows.items()
    }


_COMPILED = _compile(_ROWS)
