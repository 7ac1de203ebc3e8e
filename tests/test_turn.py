"""The turn state machine (``lmbridge.core.turn``): the table walked row by row, each bug of
the lifecycle's bugs at the machine, and hypothesis stateful tests over random interleavings.

No I/O, no clock: each test feeds events and reads the effects back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lmbridge.core import permissions, turn
from lmbridge.core.history import Last
from lmbridge.core.permissions import ACTION_TOOL, ACTION_TOOLS, EDIT_TOOL, READ_TOOL, Answer
from lmbridge.core.present import TurnRenderer
from lmbridge.core.profiles import CLAUDE, CODEX
from lmbridge.core.turn import (
    AgentExited,
    AnswerPermission,
    CancelJob,
    Close,
    CloseSession,
    Detach,
    Died,
    Emit,
    Fail,
    Finish,
    JobInfo,
    NewJob,
    NewSession,
    NextJob,
    PermissionAsked,
    Phase,
    Prompt,
    PromptEnded,
    Ready,
    ResolveTool,
    SendCancel,
    SessionClosed,
    Shutdown,
    StartAgent,
    StartTimer,
    State,
    StopTimer,
    Timer,
    TimerFired,
    ToolInvoked,
    TurnError,
    TurnMachine,
    Update,
)

OPTIONS = (
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "always", "name": "Always", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
)
ALLOWED = {"outcome": "selected", "optionId": "allow"}
REJECTED = {"outcome": "selected", "optionId": "reject"}
CANCELLED = {"outcome": "cancelled"}


def chunk(text: str) -> Update:
    return Update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def job(i: int, **kw: Any) -> NewJob:
    kw.setdefault("tools", ACTION_TOOLS)
    return NewJob(JobInfo(i, **kw))


#: The workspace /w, every path in it resolving to itself.
WORKSPACE = permissions.Workspace(("/w",), resolve=lambda path: path if path.startswith("/w/") else None)


def question(rid: int) -> turn.ElicitationAsked:
    """The agent asks one question (``elicitation/create``, form mode)."""
    params = {"mode": "form", "sessionId": "s1", "message": "Which colour?",
              "requestedSchema": {"type": "object", "properties": {"c": {"type": "string", "enum": ["red", "blue"]}}}}  # fmt: skip
    return turn.ElicitationAsked(rid, params, f"call-{rid}", f"token-{rid}")


def ask(rid: int, kind: str = "execute", title: str = "Run ls") -> PermissionAsked:
    call: dict[str, Any] = {"toolCallId": f"t{rid}", "title": title, "kind": kind}
    if kind == "edit":
        call["locations"] = [{"path": f"/w/{title.split()[-1]}"}]
    params = {"sessionId": "s", "toolCall": call, "options": list(OPTIONS)}
    return PermissionAsked(rid, params, f"call-{rid}", f"token-{rid}", workspace=WORKSPACE)


def of(effects: list[Any], kind: type) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


def allowed(effects: list[Any], rid: int) -> bool:
    """The effects answer permission ``rid`` allow, and only it, carrying the request its card
    showed (``AnswerPermission.approved``: what the approval lets the agent do through lmbridge)."""
    [r] = of(effects, AnswerPermission)
    return (r.rid, r.call_id, r.outcome) == (rid, f"call-{rid}", ALLOWED) and r.approved is not None and r.approved.call_id == f"call-{rid}"


def texts(effects: list[Any]) -> str:
    return "".join(e.part["value"] for e in of(effects, Emit) if e.part["type"] == "text")


class Driver:
    """A machine plus what it asked for: the prompt it runs, the timers it started."""

    def __init__(self) -> None:
        self.m = TurnMachine("Demo", TurnRenderer(), drain=10.0, gather=0.1, notice=0.5, buffer_limit=100)
        self.log: list[Any] = []

    def __call__(self, event: Any) -> list[Any]:
        fx = self.m.handle(event)
        self.log += fx
        return fx

    @property
    def state(self) -> Phase:
        return self.m.phase

    def timer(self, timer: Timer) -> StartTimer:
        return [e for e in self.log if isinstance(e, StartTimer) and e.timer is timer][-1]

    def fire(self, timer: Timer) -> list[Any]:
        t = self.timer(timer)
        return self(TimerFired(t.timer, t.tag))

    def prompt(self) -> Prompt:
        return of(self.log, Prompt)[-1]


# ---------------------------------------------------------------- states reached by real paths


def fresh() -> Driver:
    return Driver()


def starting() -> Driver:
    d = Driver()
    d(job(1))
    assert d.state is Phase.STARTING
    return d


def streaming() -> Driver:
    d = starting()
    d(Ready())
    assert d.state is Phase.STREAMING
    return d


def idle() -> Driver:
    d = streaming()
    d(PromptEnded(d.prompt().seq, "end_turn"))
    assert d.state is Phase.IDLE
    return d


def awaiting() -> Driver:
    d = streaming()
    d(ask(7))
    d.fire(Timer.GATHER)
    assert d.state is Phase.AWAITING
    return d


def held() -> Driver:
    """IDLE: the turn ended while no request streamed (told to the next one)."""
    d = awaiting()
    d(chunk("said while waiting"))
    d(PromptEnded(d.prompt().seq, "end_turn"))
    assert d.state is Phase.IDLE and d.m.held is not None
    return d


def held_error() -> Driver:
    """IDLE: the turn failed while no request streamed."""
    d = awaiting()
    d(PromptEnded(d.prompt().seq, None, "model API said no"))
    assert d.state is Phase.IDLE and d.m.held is not None
    return d


def draining() -> Driver:
    d = streaming()
    d(CancelJob(1))
    assert d.state is Phase.DRAINING
    return d


def draining_command() -> Driver:
    """DRAINING: the turn was cancelled while codex-acp ran a command (its profile:
    ``cancel_leaves_commands``), which has streamed output and not ended."""
    d = starting()
    d.m.reset_renderer(TurnRenderer(profile=CODEX))
    d(Ready())
    call = {"toolCallId": "call_1", "title": "sleep 60", "kind": "execute", "content": [{"type": "terminal", "terminalId": "call_1"}]}
    d(Update({"sessionUpdate": "tool_call", "status": "in_progress", **call}))
    d(Update({"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "_meta": {"terminal_output": {"terminal_id": "call_1", "data": "tick\n"}}}))
    d(CancelJob(1))
    assert d.state is Phase.DRAINING
    return d


def closing() -> Driver:
    """DRAINING: the cancelled turn outlived its drain deadline; its session is being closed."""
    d = draining()
    fx = d.fire(Timer.DRAIN)
    assert d.state is Phase.DRAINING and of(fx, CloseSession) == [CloseSession(d.prompt().seq)]
    return d


def closing_ended() -> Driver:
    """DRAINING: ... and the cancelled prompt ended meanwhile (the close ended it)."""
    d = closing()
    d(PromptEnded(d.prompt().seq, "cancelled"))
    assert d.state is Phase.DRAINING and not d.m.prompt_open
    return d


def closed() -> Driver:
    d = streaming()
    d(Close("test"))
    assert d.state is Phase.CLOSED
    return d


def after_cancel() -> Driver:
    """STREAMING the first prompt after a cancel (watched for agents' quirks)."""
    d = draining()
    d(job(2))
    d(PromptEnded(d.prompt().seq, "cancelled"))
    assert d.state is Phase.STREAMING and d.m.watch
    return d


def streaming_with_job() -> Driver:
    """STREAMING (job 1, a card gathered) while job 2, sent as job 1 still streamed, waits.
    When job 1 ends ``tool_calls`` job 2 cannot answer its card: the turn is stopped."""
    d = streaming()
    d(job(2))
    d(ask(7))
    assert d.state is Phase.STREAMING and [j.id for j in d.m.waiting] == [2]
    return d


def _then(d: Driver, event: Any) -> Driver:
    d(event)
    return d


SETUPS: dict[str, Callable[[], Driver]] = {
    "fresh": fresh, "starting": starting, "streaming": streaming, "idle": idle, "awaiting": awaiting,
    "start_cancelled": lambda: _then(starting(), CancelJob(1)),
    "draining_with_job": lambda: _then(draining(), job(2)),
    "asking": lambda: _then(streaming(), ask(7)),
    "held": held,
    "held_error": held_error,
    "streaming_with_job": streaming_with_job,
    "draining": draining,
    "draining_command": draining_command,
    "closed": closed,
    "after_cancel": after_cancel,
    "closing": closing,
    "closing_ended": closing_ended,
}


# (setup, event (a function of the driver), the state after): every row of the table, and
# every target of every row, reached by at least one of these.
def _prompt_end(stop: str | None = "end_turn", error: str | None = None) -> Callable[[Driver], Any]:
    return lambda d: PromptEnded(d.prompt().seq, stop, error)


def _timer(timer: Timer, stale: bool = False) -> Callable[[Driver], Any]:
    return lambda d: TimerFired(timer, d.timer(timer).tag - 1 if stale else d.timer(timer).tag)


WALK: list[tuple[str, Callable[[Driver], Any], Phase]] = [
    ("fresh", lambda d: job(1), Phase.STARTING),
    ("idle", lambda d: job(2), Phase.STREAMING),
    ("idle", lambda d: job(2, has_prompt=False), Phase.IDLE),
    ("held", lambda d: job(2, has_prompt=False, answers={"call-7": Answer.ALLOW}), Phase.IDLE),
    ("held_error", lambda d: job(2, has_prompt=False, answers={"call-7": Answer.ALLOW}), Phase.CLOSED),
    ("starting", lambda d: job(2), Phase.STARTING),
    ("streaming", lambda d: job(2, has_prompt=False), Phase.STREAMING),
    ("streaming", lambda d: job(2, cancel_first=True), Phase.DRAINING),
    ("awaiting", lambda d: job(2, has_prompt=False, answers={"call-7": Answer.ALLOW}), Phase.STREAMING),
    ("awaiting", lambda d: job(2, cancel_first=True, answers={"call-7": Answer.CANCELLED}), Phase.DRAINING),
    ("draining", lambda d: job(2), Phase.DRAINING),
    ("idle", lambda d: CancelJob(1), Phase.IDLE),
    ("starting", lambda d: CancelJob(1), Phase.STARTING),
    ("streaming", lambda d: CancelJob(1), Phase.DRAINING),
    ("streaming", lambda d: CancelJob(99), Phase.STREAMING),
    ("awaiting", lambda d: CancelJob(1), Phase.AWAITING),
    ("draining", lambda d: CancelJob(1), Phase.DRAINING),
    ("starting", lambda d: Ready(), Phase.STREAMING),
    ("start_cancelled", lambda d: Ready(), Phase.IDLE),
    ("starting", lambda d: Ready("boom"), Phase.CLOSED),
    ("streaming", _prompt_end(), Phase.IDLE),
    ("streaming", lambda d: PromptEnded(d.prompt().seq - 1, "end_turn"), Phase.STREAMING),
    ("streaming", _prompt_end(None, "model API said no"), Phase.CLOSED),
    ("after_cancel", _prompt_end(None, "HTTP 400"), Phase.STARTING),
    ("awaiting", _prompt_end(), Phase.IDLE),
    ("streaming_with_job", lambda d: TimerFired(Timer.GATHER, d.timer(Timer.GATHER).tag), Phase.DRAINING),
    ("draining", _prompt_end("cancelled"), Phase.IDLE),
    ("draining_command", _prompt_end("cancelled"), Phase.STARTING),
    ("draining", lambda d: PromptEnded(d.prompt().seq - 1, "end_turn"), Phase.DRAINING),
    ("draining_with_job", _prompt_end("cancelled"), Phase.STREAMING),
    ("idle", _prompt_end(), Phase.IDLE),
    ("held", lambda d: AgentExited("gone"), Phase.CLOSED),  # a held answer dies with it
    ("starting", lambda d: PromptEnded(5, "end_turn"), Phase.STARTING),
    ("streaming", lambda d: TimerFired(Timer.GATHER, 0), Phase.STREAMING),  # nothing pending: nothing to end
    ("awaiting", _timer(Timer.GATHER), Phase.AWAITING),
    ("asking", _timer(Timer.GATHER), Phase.AWAITING),
    ("draining", _timer(Timer.DRAIN), Phase.DRAINING),
    ("draining", _timer(Timer.DRAIN, stale=True), Phase.DRAINING),
    ("closing", _prompt_end("cancelled"), Phase.DRAINING),
    ("closing", lambda d: SessionClosed(d.prompt().seq), Phase.STARTING),
    ("closing_ended", lambda d: SessionClosed(d.prompt().seq), Phase.STARTING),
    ("closing", lambda d: SessionClosed(d.prompt().seq - 1), Phase.DRAINING),
    ("draining", lambda d: SessionClosed(d.prompt().seq), Phase.DRAINING),  # none asked
    ("idle", lambda d: TimerFired(Timer.GATHER, 0), Phase.IDLE),
    ("starting", _timer(Timer.NOTICE), Phase.STARTING),
    ("closed", lambda d: job(5), Phase.CLOSED),
    ("closed", lambda d: Ready(), Phase.CLOSED),
]
for name in ("idle", "starting", "streaming", "awaiting"):
    WALK.append((name, lambda d: SessionClosed(1), Phase[name.upper()]))  # stale
for name in ("idle", "starting", "streaming", "awaiting", "draining"):
    WALK += [
        (name, lambda d: chunk("x"), Phase[name.upper()]),
        (name, lambda d: ask(50), Phase[name.upper()]),
        (name, lambda d: ToolInvoked("m1", "vscode_tool", {}), Phase[name.upper()]),
        (name, lambda d: AgentExited("gone"), Phase.IDLE if name == "idle" else Phase.CLOSED),
        (name, lambda d: Close("bye"), Phase.CLOSED),
    ]
CLOSED_EVENTS = (
    CancelJob(1),
    chunk("x"),
    ask(51),
    ToolInvoked("m2", "t", {}),
    PromptEnded(1, "end_turn"),
    SessionClosed(1),
    AgentExited("x"),
    TimerFired(Timer.GATHER, 1),
    Close("x"),
)
for event in CLOSED_EVENTS:
    WALK.append(("closed", lambda d, e=event: e, Phase.CLOSED))


@pytest.mark.parametrize(("setup", "event", "after"), WALK)
def test_walk_the_phases(setup: str, event: Callable[[Driver], Any], after: Phase) -> None:
    d = SETUPS[setup]()
    ev = event(d)
    d(ev)
    assert d.state is after


def renewing() -> Driver:
    """RENEWING: the session a cancelled turn outlived was closed; a fresh one is opening."""
    d = closing()
    d(job(2))
    d(SessionClosed(d.prompt().seq))
    assert d.m.state is State.RENEWING
    return d


SETUPS["renewing"] = renewing


def renewing_with_job() -> Driver:
    """RENEWING for job 2, whose prompt (the first after a cancel) failed: the agent saw its words."""
    d = draining()
    d(job(2, messages=("words the agent saw",)))
    d(PromptEnded(d.prompt().seq, "cancelled"))
    d(PromptEnded(d.prompt().seq, None, "HTTP 400"))
    assert d.m.state is State.RENEWING and d.m.job is not None and d.m.job.id == 2
    return d


SETUPS["renewing_with_job"] = renewing_with_job


def _row(state: State, event: type, guard: str, action: str) -> turn.Row:
    """The first row (as the machine looks them up) for ``state`` with this event, guard and action."""
    return [r for r in turn.TABLE if state in r.states and r.event is event and r.guard_name == guard and r.action_name == action][0]


def _finished(*ends: tuple[int, str]) -> Callable[[Driver, list[Any]], bool]:
    return lambda d, fx: [(f.job_id, f.stop_reason) for f in of(fx, Finish)] == list(ends)


def _failed(job_id: int, message: str) -> Callable[[Driver, list[Any]], bool]:
    return lambda d, fx: of(fx, Fail) == [Fail(job_id, message)]


# Every row of the table: a setup (its state reached by a real path), the event, the row
# it must go through, and what its action must have done.
ROWS: list[tuple[str, Callable[[Driver], Any], State, type, str, str, Callable[[Driver, list[Any]], bool]]] = [
    ("closed", lambda d: job(5), State.CLOSED, NewJob, "", "refuse_job",
     _failed(5, "agent 'Demo': its session has just ended; please retry")),
    ("streaming", lambda d: job(2, cancel_first=True), State.STREAMING, NewJob, "stops_the_turn", "stop_streaming_and_queue",
     lambda d, fx: _finished((1, "cancelled"))(d, fx) and SendCancel() in fx and [j.id for j in d.m.waiting] == [2]),
    ("awaiting", lambda d: job(2, cancel_first=True), State.AWAITING, NewJob, "stops_the_turn", "stop_the_turn_and_queue",
     lambda d, fx: of(fx, AnswerPermission) == [AnswerPermission(7, "call-7", CANCELLED)] and SendCancel() in fx),
    ("held", lambda d: job(2, cancel_first=True), State.ENDED, NewJob, "asks_to_stop", "forget_the_turn_and_queue",
     lambda d, fx: d.m.held is None and SendCancel() not in fx and of(fx, Prompt) == [Prompt(2, 2)] and "said while waiting" not in texts(fx)),
    ("draining", lambda d: job(2, cancel_first=True), State.DRAINING, NewJob, "asks_to_stop", "forget_the_turn_and_queue",
     lambda d, fx: SendCancel() not in fx and [j.id for j in d.m.waiting] == [2]),
    ("starting", lambda d: job(2), State.STARTING, NewJob, "", "queue", lambda d, fx: fx == [] and [j.id for j in d.m.waiting] == [2]),
    ("fresh", lambda d: job(1), State.NO_AGENT, NextJob, "", "start_agent",
     lambda d, fx: of(fx, StartAgent) == [StartAgent(1)] and StartTimer(Timer.NOTICE, 0.5, 1) in fx),
    ("awaiting", lambda d: job(2), State.AWAITING, NextJob, "cannot_go_on", "stop_the_turn_first",
     lambda d, fx: SendCancel() in fx and [j.id for j in d.m.waiting] == [2] and not of(fx, Prompt)),
    ("awaiting", lambda d: job(2, has_prompt=False, answers={"call-7": Answer.ALLOW}), State.AWAITING, NextJob, "", "go_on",
     lambda d, fx: allowed(fx, 7) and not of(fx, Prompt) and d.m.job is not None and d.m.job.id == 2),
    ("idle", lambda d: job(2), State.IDLE, NextJob, "has_prompt", "prompt", lambda d, fx: of(fx, Prompt) == [Prompt(2, 2)]),
    ("held", lambda d: job(2), State.ENDED, NextJob, "has_prompt", "prompt", lambda d, fx: of(fx, Prompt) == [Prompt(2, 2)]),
    ("held_error", lambda d: job(2, has_prompt=False, answers={"call-7": Answer.ALLOW}), State.ENDED, NextJob, "turn_failed", "tell_the_end",
     _failed(2, "agent 'Demo': model API said no")),
    ("held", lambda d: job(2, has_prompt=False, answers={"call-7": Answer.ALLOW}), State.ENDED, NextJob, "", "tell_the_end",
     lambda d, fx: _finished((2, "end_turn"))(d, fx) and "said while waiting" in texts(fx)),
    ("idle", lambda d: job(2, has_prompt=False), State.IDLE, NextJob, "", "answer_at_once",
     lambda d, fx: _finished((2, "end_turn"))(d, fx) and texts(fx) == "_Demo ended its turn without a reply._"),
    ("starting", lambda d: CancelJob(1), State.STARTING, CancelJob, "streams", "cancel_the_start",
     lambda d, fx: _finished((1, "cancelled"))(d, fx) and StopTimer(Timer.NOTICE) in fx),
    ("renewing_with_job", lambda d: CancelJob(2), State.RENEWING, CancelJob, "streams", "cancel_the_renewal",
     lambda d, fx: _finished((2, "cancelled"))(d, fx) and StopTimer(Timer.NOTICE) in fx and d.m.unsent == ()),
    ("streaming", lambda d: CancelJob(1), State.STREAMING, CancelJob, "streams", "stop",
     lambda d, fx: _finished((1, "cancelled"))(d, fx) and SendCancel() in fx and StartTimer(Timer.DRAIN, 10.0, 1) in fx),
    ("draining_with_job", lambda d: CancelJob(2), State.DRAINING, CancelJob, "waits", "unqueue",
     lambda d, fx: _finished((2, "cancelled"))(d, fx) and not d.m.waiting),
    ("streaming", lambda d: CancelJob(99), State.STREAMING, CancelJob, "", "ignore", lambda d, fx: fx == []),
    ("starting", lambda d: Ready("boom"), State.STARTING, Ready, "failed", "die_at_start",
     lambda d, fx: _failed(1, "agent 'Demo' failed to start: boom")(d, fx) and of(fx, Died)),
    ("renewing", lambda d: Ready("refused"), State.RENEWING, Ready, "failed", "die_at_renewal",
     lambda d, fx: _failed(2, "agent 'Demo' could not open a new session: refused")(d, fx)),
    ("starting", lambda d: Ready(lost=True), State.STARTING, Ready, "", "up",
     lambda d, fx: StopTimer(Timer.NOTICE) in fx and of(fx, Prompt) == [Prompt(1, 1, whole=True)]),
    ("closed", lambda d: Ready(), State.CLOSED, Ready, "", "ignore", lambda d, fx: fx == []),
    ("streaming", lambda d: chunk("x"), State.STREAMING, Update, "", "show", lambda d, fx: texts(fx) == "x"),
    ("awaiting", lambda d: chunk("x"), State.AWAITING, Update, "", "keep", lambda d, fx: fx == [] and d.m.kept.parts == [{"type": "text", "value": "x"}]),
    ("idle", lambda d: chunk("x"), State.IDLE, Update, "", "drop_while_idle", lambda d, fx: [e.fields for e in of(fx, turn.Log)] == [{"agent": "Demo", "state": "idle"}]),
    ("starting", lambda d: chunk("x"), State.STARTING, Update, "", "drop_while_starting", lambda d, fx: [e.fields for e in of(fx, turn.Log)] == [{"agent": "Demo", "state": "starting"}]),
    ("draining", lambda d: chunk("x"), State.DRAINING, Update, "", "drop_while_draining", lambda d, fx: [e.fields for e in of(fx, turn.Log)] == [{"agent": "Demo", "state": "draining"}]),
    ("closed", lambda d: chunk("x"), State.CLOSED, Update, "", "drop_after_the_close", lambda d, fx: [e.fields for e in of(fx, turn.Log)] == [{"agent": "Demo", "state": "closed"}]),
    ("streaming", lambda d: ask(50), State.STREAMING, PermissionAsked, "", "route_permission",
     lambda d, fx: "call-50" in d.m.calls and of(fx, StartTimer)[0].timer is Timer.GATHER),
    ("awaiting", lambda d: ask(50), State.AWAITING, PermissionAsked, "", "route_permission_for_later",
     lambda d, fx: "call-50" in d.m.calls and not of(fx, StartTimer) and not of(fx, Emit) and not of(fx, AnswerPermission)),
    ("idle", lambda d: ask(50), State.IDLE, PermissionAsked, "", "route_permission_no_turn", lambda d, fx: of(fx, AnswerPermission) == [AnswerPermission(50, "call-50", CANCELLED)]),
    ("streaming", lambda d: question(51), State.STREAMING, turn.ElicitationAsked, "", "route_question",
     lambda d, fx: d.m.calls.get("call-51").part["name"] == permissions.ACTION_TOOL and of(fx, StartTimer)[0].timer is Timer.GATHER),
    ("awaiting", lambda d: question(51), State.AWAITING, turn.ElicitationAsked, "", "route_question_for_later",
     lambda d, fx: "call-51" in d.m.calls and not of(fx, StartTimer) and not of(fx, turn.AnswerQuestion)),
    ("idle", lambda d: question(51), State.IDLE, turn.ElicitationAsked, "", "route_question_no_turn",
     lambda d, fx: [(a.rid, a.answer) for a in of(fx, turn.AnswerQuestion)] == [(51, Answer.CANCELLED)]),
    ("streaming", lambda d: ToolInvoked("m1", "vscode_tool", {}), State.STREAMING, ToolInvoked, "", "take_tool_call",
     lambda d, fx: "m1" in d.m.calls and of(fx, StartTimer)[0].timer is Timer.GATHER),
    ("awaiting", lambda d: ToolInvoked("m1", "vscode_tool", {}), State.AWAITING, ToolInvoked, "", "keep_tool_call", lambda d, fx: "m1" in d.m.calls and fx == []),
    ("idle", lambda d: ToolInvoked("m1", "vscode_tool", {}), State.IDLE, ToolInvoked, "", "refuse_tool_call",
     lambda d, fx: of(fx, ResolveTool) == [ResolveTool("m1", Answer.CANCELLED)]),
    ("after_cancel", _prompt_end(None, "HTTP 400"), State.STREAMING, PromptEnded, "first_after_a_cancel_failed", "renew_and_retry",
     lambda d, fx: of(fx, NewSession) == [NewSession("the first turn after a cancel failed")] and not of(fx, Fail | Finish)),
    ("streaming", _prompt_end(None, "model API said no"), State.STREAMING, PromptEnded, "failed", "end_the_turn",
     lambda d, fx: _failed(1, "agent 'Demo': model API said no")(d, fx) and of(fx, Died)),
    ("streaming", _prompt_end(), State.STREAMING, PromptEnded, "current", "end_the_turn",
     lambda d, fx: of(fx, Finish) == [Finish(1, "end_turn", Last.DONE)]),
    ("awaiting", _prompt_end(), State.AWAITING, PromptEnded, "current", "hold_the_end",
     lambda d, fx: d.m.held == PromptEnded(1, "end_turn") and not of(fx, Finish)),
    ("draining", _prompt_end("cancelled"), State.DRAINING, PromptEnded, "current", "drained", lambda d, fx: StopTimer(Timer.DRAIN) in fx),
    ("draining_command", _prompt_end("cancelled"), State.DRAINING, PromptEnded, "left_a_command", "close_and_take_up",
     lambda d, fx: StopTimer(Timer.DRAIN) in fx and of(fx, NewSession) == [NewSession("a cancelled turn left a command running", take_up=True, close=True)]),
    ("closing", _prompt_end("cancelled"), State.CLOSING, PromptEnded, "current", "drained", lambda d, fx: StopTimer(Timer.DRAIN) in fx),
    ("streaming", lambda d: PromptEnded(d.prompt().seq - 1, "end_turn"), State.STREAMING, PromptEnded, "", "ignore", lambda d, fx: fx == []),
    ("asking", _timer(Timer.GATHER), State.STREAMING, TimerFired, "gathered", "show_the_cards",
     lambda d, fx: of(fx, Finish)[0].stop_reason == "tool_calls" and [e.part["callId"] for e in of(fx, Emit) if e.part["type"] == "tool_call"] == ["call-7"]),
    ("starting", _timer(Timer.NOTICE), State.STARTING, TimerFired, "still_starting", "say_starting", lambda d, fx: texts(fx) == "_Starting Demo…_\n\n"),
    ("draining", _timer(Timer.DRAIN), State.DRAINING, TimerFired, "drain_deadline", "close_the_session",
     lambda d, fx: of(fx, CloseSession) == [CloseSession(1)]),
    ("idle", lambda d: TimerFired(Timer.GATHER, 0), State.IDLE, TimerFired, "", "ignore", lambda d, fx: fx == []),
    ("closing", lambda d: SessionClosed(d.prompt().seq), State.CLOSING, SessionClosed, "current", "fresh_session",
     lambda d, fx: of(fx, NewSession) == [NewSession("a cancelled turn did not end", take_up=False, close=False)] and d.m.whole),
    ("closing_ended", lambda d: SessionClosed(d.prompt().seq), State.CLOSING_ENDED, SessionClosed, "current", "take_up_again",
     lambda d, fx: of(fx, NewSession) == [NewSession("a cancelled turn ended only once its session was closed", take_up=True, close=False)]),
    ("draining", lambda d: SessionClosed(d.prompt().seq), State.DRAINING, SessionClosed, "", "ignore", lambda d, fx: fx == []),
    ("idle", lambda d: AgentExited("gone"), State.IDLE, AgentExited, "nothing_waits", "detach", lambda d, fx: of(fx, Detach) == [Detach()] and not of(fx, Fail)),
    ("streaming", lambda d: AgentExited("gone"), State.STREAMING, AgentExited, "", "die", lambda d, fx: _failed(1, "gone")(d, fx) and of(fx, Died)),
    ("streaming", lambda d: Close("bye"), State.STREAMING, Close, "", "cancel_and_close",
     lambda d, fx: SendCancel() in fx and _failed(1, "session closed: bye")(d, fx) and of(fx, Shutdown)),
    ("starting", lambda d: Close("bye"), State.STARTING, Close, "", "close",
     lambda d, fx: SendCancel() not in fx and _failed(1, "session closed: bye")(d, fx) and of(fx, Shutdown)),
    ("closed", lambda d: AgentExited("late"), State.CLOSED, AgentExited, "", "ignore", lambda d, fx: fx == []),
    ("closed", lambda d: Close("again"), State.CLOSED, Close, "", "ignore", lambda d, fx: fx == []),
]

# The rows for events that cannot happen: each raises ``TurnError`` naming the event and the state.
IMPOSSIBLE: list[tuple[str, Any, State]] = [
    ("streaming", Ready(), State.STREAMING),
    ("streaming", NextJob(), State.STREAMING),
    ("starting", NextJob(), State.STARTING),
]


@pytest.mark.parametrize(("setup", "event", "state", "kind", "guard", "action", "check"), ROWS, ids=[f"{r[0]}-{r[4] or 'always'}-{r[5]}" for r in ROWS])
def test_walk_the_table_row_by_row(
    setup: str, event: Callable[[Driver], Any], state: State, kind: type, guard: str, action: str, check: Callable[[Driver, list[Any]], bool]
) -> None:
    d = SETUPS[setup]()
    assert d.m.state is state
    row = _row(state, kind, guard, action)
    fx = d(event(d))
    rows = [r for r, _ in d.m.trace]
    assert row in rows, f"{row} not taken: {[str(r) for r in rows]}"
    i = rows.index(row)
    before = d.m.trace[i - 1][1] if i else state
    assert d.m.trace[i][1] is (row.target or before)
    assert check(d, fx), fx


@pytest.mark.parametrize(("setup", "event", "state"), IMPOSSIBLE)
def test_an_event_that_cannot_happen_raises(setup: str, event: Any, state: State) -> None:
    d = SETUPS[setup]()
    assert d.m.state is state
    with pytest.raises(TurnError, match=f"{type(event).__name__} cannot happen in state {state.name}"):
        d.m.handle(event)


def test_the_row_walk_covers_every_row() -> None:
    walked = {_row(state, kind, guard, action) for _, _, state, kind, guard, action, _ in ROWS}
    walked |= {_row(state, type(event), "", "impossible") for _, event, state in IMPOSSIBLE}
    for row in turn.TABLE:
        assert row in walked, f"row {row} never walked"


def test_every_row_has_one_next_state_and_the_docs_print_the_table() -> None:
    assert all(row.target is None or isinstance(row.target, State) for row in turn.TABLE)
    docs = (Path(__file__).parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert turn.table_text() in docs, "docs/architecture.md does not print the current turn table (turn.table_text())"


def test_the_table_is_total() -> None:
    """Every (state, event) pair has its rows, the last of them unconditional: nothing is
    left out and ignored silently (an ignored pair is an ``ignore`` row)."""
    assert set(turn.EVENTS) == {NewJob, CancelJob, Ready, turn.Update, PermissionAsked, turn.ElicitationAsked, ToolInvoked, PromptEnded, SessionClosed, AgentExited, TimerFired, Close, NextJob}
    for state in State:
        for event in turn.EVENTS:
            rows = [r for r in turn.TABLE if state in r.states and r.event is event]
            assert rows and rows[-1].guard is None, f"{state.name} + {event.__name__}: {[str(r) for r in rows]}"


def test_a_table_with_a_pair_left_out_is_refused() -> None:
    """As h11's ``_state.py`` raises ``LocalProtocolError`` on a missing key: a pair with no
    row, or whose rows may all refuse, is an error, never a silent no-op."""
    left_out = tuple(r for r in turn.TABLE if not (r.event is SessionClosed and r.action is turn.ignore))
    with pytest.raises(TurnError, match="no row for SessionClosed in state NO_AGENT"):
        turn.index(left_out)
    others = tuple(s for s in State if s is not State.STREAMING)
    guarded = tuple(r for r in turn.TABLE if not (r.event is TimerFired and r.action is turn.ignore)) + (turn.Row(others, TimerFired, None, None, turn.ignore),)
    with pytest.raises(TurnError, match="last row for TimerFired in state STREAMING has a guard"):
        turn.index(guarded)


def test_the_machine_raises_on_a_pair_with_no_row(monkeypatch: pytest.MonkeyPatch) -> None:
    d = draining()
    rows = {key: found for key, found in turn._ROWS.items() if key != (State.DRAINING, SessionClosed)}
    monkeypatch.setattr(turn, "_ROWS", rows)
    with pytest.raises(TurnError, match="the turn table has no row for SessionClosed in state DRAINING"):
        d(SessionClosed(d.prompt().seq))


def test_guards_and_actions_are_functions_that_never_read_the_state() -> None:
    """Rows bind functions (mypy checks each takes its row's event), and what a row does
    depends on the row, never on a test of the state inside it (rows are split instead)."""
    import ast
    import inspect

    for row in turn.TABLE:
        assert callable(row.action) and (row.guard is None or callable(row.guard)), row
    tree = ast.parse(inspect.getsource(turn))
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert {r.action_name for r in turn.TABLE} <= {f.name for f in functions}
    for f in functions:
        reads = [n.attr for n in ast.walk(f) if isinstance(n, ast.Attribute) and n.attr in ("state", "phase") and isinstance(n.value, ast.Name) and n.value.id == "m"]
        assert not reads, f"{f.name} reads the machine's {reads}"


def test_ready_outside_a_start_is_a_protocol_error() -> None:
    d = streaming()
    with pytest.raises(TurnError, match="Ready cannot happen in state STREAMING"):
        d(Ready())


# ---------------------------------------------------------------- behaviour


def test_a_turn_streams_then_ends() -> None:
    d = starting()
    assert of(d.log, StartAgent) == [StartAgent(1)]
    fx = d(Ready())
    assert of(fx, Prompt) == [Prompt(1, 1)] and StopTimer(Timer.NOTICE) in fx
    assert texts(d(chunk("Hello"))) == "Hello"
    fx = d(PromptEnded(1, "end_turn"))
    assert of(fx, Finish) == [Finish(1, "end_turn", Last.DONE)]


def test_slow_start_tells_the_user_once() -> None:
    d = starting()
    assert texts(d.fire(Timer.NOTICE)) == "_Starting Demo…_\n\n"
    d(Ready())
    assert d.fire(Timer.NOTICE) == []  # a late tick of a finished start says nothing


def test_permission_surfaces_with_the_tool_for_its_kind_and_gathers() -> None:
    d = streaming()
    fx = d(ask(1, "read", "Read a.txt")) + d(ask(2, "edit", "Write b.txt")) + d(ask(3, "execute", "Run make"))
    assert not [e for e in of(fx, Emit) if e.part["type"] == "tool_call"]  # they wait for the window to close
    fx = d.fire(Timer.GATHER)
    calls = [e.part for e in of(fx, Emit) if e.part["type"] == "tool_call"]
    assert [c["name"] for c in calls] == [READ_TOOL, EDIT_TOOL, ACTION_TOOL]
    assert [c["input"]["approvalToken"] for c in calls] == ["token-1", "token-2", "token-3"]
    assert of(fx, Finish)[0].stop_reason == "tool_calls"
    # Only the last window counts: a second permission restarts it.
    d2 = streaming()
    d2(ask(1))
    first_window = d2.timer(Timer.GATHER)
    d2(ask(2))
    assert d2(TimerFired(Timer.GATHER, first_window.tag)) == []
    fx = d2.fire(Timer.GATHER)
    finish = of(fx, Finish)[0]
    assert finish.stop_reason == "tool_calls" and finish.last is Last.PENDING
    assert [p.call_id for p in finish.pending] == ["call-1", "call-2"] and d2.state is Phase.AWAITING


def test_a_permission_the_agent_drops_by_ending_its_turn_is_never_a_card() -> None:
    """A dead permission card: asked, then the turn ends within the window."""
    d = streaming()
    d(ask(1, "edit", "Write notes.txt"))
    fx = d(PromptEnded(d.prompt().seq, "end_turn"))
    assert not [e for e in of(fx, Emit) if e.part["type"] == "tool_call"]
    assert of(fx, AnswerPermission) == [AnswerPermission(1, "call-1", CANCELLED)]
    assert of(fx, Finish) == [Finish(1, "end_turn", Last.DONE)]


def test_no_action_tool_offered_declines_and_says_so() -> None:
    d = Driver()
    d(job(1, tools=frozenset({"copilot_readFile", READ_TOOL})))  # Ask mode: read-only tools
    d(Ready())
    fx = d(ask(1, "edit", "Write notes.txt"))
    assert of(fx, AnswerPermission) == [AnswerPermission(1, "call-1", REJECTED)]
    assert not [e for e in of(fx, Emit) if e.part["type"] == "tool_call" and e.part["name"] in ACTION_TOOLS]
    assert "Demo wanted to edit files: `Write notes.txt`. Declined: approving agent actions needs Agent mode." in texts(fx)
    # A read is still asked: its tool is offered.
    fx = d(ask(2, "read", "Read a.txt")) + d.fire(Timer.GATHER)
    assert not of(fx, AnswerPermission) and [e.part["name"] for e in of(fx, Emit) if e.part["type"] == "tool_call"] == [READ_TOOL]


def test_a_call_declined_without_a_card_and_left_open_reads_as_declined() -> None:
    """Declined in Ask mode (the reject option, no card); the agent ends its turn without
    closing the call (codex-acp): the call reads as declined, not "ended without a result"."""
    d = Driver()
    d(job(1, tools=frozenset({READ_TOOL})))
    d(Ready())
    d(ask(1, "execute", "Run make"))
    fx = d(PromptEnded(d.prompt().seq, "cancelled"))
    assert "✗ **Run make** (execute) declined" in texts(fx) and "ended without a result" not in texts(fx)


def test_a_call_the_user_stopped_is_not_declined() -> None:
    """A Stop answers the card ``cancelled``: nobody declined it (its output is dropped)."""
    d = awaiting()
    d(job(2, has_prompt=True, cancel_first=True))
    assert d.state is Phase.DRAINING and d.m.renderer.tools == {}


def test_answers_allow_only_with_allow_and_never_for_a_cancelled_request() -> None:
    d = awaiting()
    fx = d(job(2, has_prompt=False, answers={"call-7": Answer.ALLOW}, cancelled=True))
    assert of(fx, AnswerPermission) == [AnswerPermission(7, "call-7", CANCELLED)]
    d = awaiting()
    assert allowed(d(job(2, has_prompt=False, answers={"call-7": Answer.ALLOW})), 7)
    d = awaiting()
    assert of(d(job(2, has_prompt=False, answers={"call-7": Answer.REJECT})), AnswerPermission) == [AnswerPermission(7, "call-7", REJECTED)]


@pytest.mark.parametrize("answer", [Answer.ALLOW, Answer.REJECT, Answer.CANCELLED])
def test_a_card_is_answered_by_the_permission_rules_one_step(answer: Answer) -> None:
    """The machine answers a card with ``permissions.decide``, the step tests/test_permissions.py's
    answer table walks, and adds nothing of its own: the same outcome, the same approval."""
    d = awaiting()
    call = d.m.calls.get("call-7")
    assert call is not None and call.request is not None
    verdict = permissions.decide(call.request, answer)
    assert of(d(job(2, has_prompt=False, answers={"call-7": answer})), AnswerPermission) == [AnswerPermission(7, "call-7", verdict.outcome, verdict.approved)]
    assert (verdict.approved is call.request) is (answer is Answer.ALLOW)


def test_bug1_a_stop_never_ends_the_next_turn() -> None:
    """The drain deadline of a cancelled turn ended whatever prompt was open."""
    d = draining()
    deadline = d.timer(Timer.DRAIN)
    fx = d(PromptEnded(d.prompt().seq, "cancelled"))
    assert StopTimer(Timer.DRAIN) in fx  # the deadline dies with the drain
    d(job(2))
    assert d.state is Phase.STREAMING
    d(ask(9))
    assert d(TimerFired(Timer.DRAIN, deadline.tag)) == []  # had it fired anyway: nothing
    assert d.state is Phase.STREAMING
    fx = d.fire(Timer.GATHER)
    assert of(fx, Finish)[0].stop_reason == "tool_calls"
    fx = d(job(3, has_prompt=False, answers={"call-9": Answer.ALLOW}))
    assert allowed(fx, 9)  # answered, however late
    assert of(d(PromptEnded(d.prompt().seq, "end_turn")), Finish) == [Finish(3, "end_turn", Last.DONE)]


def test_a_cancelled_turn_never_ended_is_never_prompted_again_its_session_is_replaced() -> None:
    """The agent ignores the cancel: at the drain deadline its session is closed, and while
    the cancelled prompt is still open nothing is sent to that session. Still open once
    closed: a fresh session (never taken up) is told the whole conversation."""
    d = closing()
    d(job(2))
    assert d.state is Phase.DRAINING and [j.id for j in d.m.waiting] == [2]
    d(chunk("OLD output"))  # the stuck turn's output goes nowhere
    fx = d(SessionClosed(d.prompt().seq))
    assert d.state is Phase.STARTING and of(fx, NewSession) == [NewSession("a cancelled turn did not end", take_up=False, close=False)]
    stuck = d.prompt().seq
    fx = d(Ready(lost=True))
    (prompt,) = of(fx, Prompt)
    assert prompt.job_id == 2 and prompt.whole and prompt.seq != stuck
    assert d(PromptEnded(stuck, "cancelled")) == []  # its late end belongs to the session left
    d(chunk("NEW answer"))
    assert texts(d(PromptEnded(prompt.seq, "end_turn"))) == "" and texts(d.log).endswith("NEW answer")
    assert "OLD" not in texts(d.log)


def test_a_cancelled_turn_that_ends_once_its_session_is_closed_is_taken_up_again() -> None:
    """The close ended the stuck prompt: the same ACP session is taken up again (the agent
    keeps its memory), only then, and the next prompt is not the whole conversation."""
    d = closing()
    d(job(2))
    assert not of(d(PromptEnded(d.prompt().seq, "cancelled")), Prompt)
    assert d.state is Phase.DRAINING  # not prompted before the close is over
    fx = d(SessionClosed(d.prompt().seq))
    assert of(fx, NewSession) == [NewSession("a cancelled turn ended only once its session was closed", take_up=True, close=False)]
    (prompt,) = of(d(Ready()), Prompt)
    assert prompt.job_id == 2 and not prompt.whole


@pytest.mark.parametrize("lost", [True, False], ids=["fresh_session", "resumed_session"])
def test_bug5_an_error_on_the_first_prompt_after_a_cancel_recovers_in_a_new_or_resumed_session(lost: bool) -> None:
    d = after_cancel()
    fx = d(PromptEnded(d.prompt().seq, None, "session/prompt: HTTP 400 (code -32603)"))
    assert not of(fx, Fail) and of(fx, NewSession)
    fx = d(Ready(lost=lost))
    # A fresh ACP session gets the whole conversation; a resumed one (session/resume or
    # session/load, docs/sessions.md) still holds it, and gets the job's own prompt again.
    assert of(fx, Prompt)[0].whole is lost
    d(chunk("Recovered."))
    assert of(d(PromptEnded(d.prompt().seq, "end_turn")), Finish) == [Finish(2, "end_turn", Last.DONE)]


def test_a_request_that_stops_the_turn_another_still_streams_ends_that_response() -> None:
    """Found by the interleavings test: the shim's $/cancelRequest for job 1 may come after
    job 3, which stops job 1's turn. Job 1 ends at once, cancelled, and is never left
    attached to a turn that has ended (it hung until its cancel came)."""
    d = streaming()
    fx = d(job(3, has_prompt=False, cancel_first=True))
    assert of(fx, Finish) == [Finish(1, "cancelled", Last.CANCELLED)] and of(fx, SendCancel)
    d(PromptEnded(d.prompt().seq, "cancelled"))
    assert d.state is Phase.IDLE and d.m.job is None


@pytest.mark.parametrize("lost", [False, True], ids=["resumed", "fresh"])
def test_an_agent_gone_between_turns_is_started_again_by_the_next_job(lost: bool) -> None:
    """A crash of the shared process while a chat sat idle fails nothing; its
    next request starts the agent again (the actor takes its ACP session up again)."""
    d = idle()
    fx = d(AgentExited("agent 'a' exited with code -9"))
    assert d.state is Phase.IDLE and of(fx, Detach) and not of(fx, Fail) and not of(fx, Died)
    fx = d(job(2))
    assert d.state is Phase.STARTING and of(fx, StartAgent)
    fx = d(Ready(lost=lost))
    assert of(fx, Prompt)[0].whole is lost  # a fresh session is told the conversation


def test_claude_quirk_empty_end_turn_after_a_cancel_recovers_once() -> None:
    d = after_cancel()
    d(PromptEnded(d.prompt().seq, "end_turn"))
    d(Ready())
    # The recovered prompt is not watched: an empty answer now is the answer.
    assert of(d(PromptEnded(d.prompt().seq, "end_turn")), Finish) == [Finish(2, "end_turn", Last.DONE)]


def test_a_silent_end_after_an_approval_is_not_the_quirk() -> None:
    d = after_cancel()
    d(ask(3))
    d.fire(Timer.GATHER)
    d(job(3, has_prompt=False, answers={"call-3": Answer.ALLOW}))
    assert of(d(PromptEnded(d.prompt().seq, "end_turn")), Finish) == [Finish(3, "end_turn", Last.DONE)]


def test_codex_ends_its_turn_cancelled_on_a_reject_and_vs_code_sees_a_finished_answer() -> None:
    """codex-acp 0.16.0 answers a rejected permission by ending the whole turn with
    ``stopReason: cancelled`` and no output (docs/agents.md). Nobody cancelled it: for VS Code
    the response has ended (``end_turn``, not ``cancelled``), and it is not empty, which
    Copilot Chat would show as "Sorry, no response was returned."."""
    d = awaiting()
    d(job(2, has_prompt=False, answers={"call-7": Answer.REJECT}))
    fx = d(PromptEnded(d.prompt().seq, "cancelled"))
    assert of(fx, Finish) == [Finish(2, "end_turn", Last.DONE)]
    # The card's tool call, closed as what it was: declined (codex never closes it).
    assert texts(fx).strip() == "✗ **Run ls** (execute) declined"
    assert of(fx, SendCancel) == [] and d.state is Phase.IDLE and not d.m.after_cancel  # the next prompt is not watched


def test_a_response_never_ends_empty() -> None:
    d = awaiting()
    d.m.renderer.close()  # (an agent that never named the call it asked about)
    d(job(2, has_prompt=False, answers={"call-7": Answer.REJECT}))
    fx = d(PromptEnded(d.prompt().seq, "cancelled"))
    assert texts(fx) == "_Demo ended its turn: the action was declined._"
    d = streaming()
    fx = d(PromptEnded(d.prompt().seq, "end_turn"))
    assert texts(fx) == "_Demo ended its turn without a reply._" and of(fx, Finish) == [Finish(1, "end_turn", Last.DONE)]
    d = streaming()
    fx = d(chunk("Hello")) + d(PromptEnded(d.prompt().seq, "end_turn"))
    assert texts(fx) == "Hello"  # an answer with text gets no note
    assert texts(d(job(2)) + d(CancelJob(2))) == ""  # nor does a response the user stopped


def test_a_job_cancelled_while_waiting_for_the_drain_goes_with_the_next_prompt() -> None:
    d = draining()
    d(job(2, messages=("two",)))
    assert of(d(CancelJob(2)), Finish) == [Finish(2, "cancelled", Last.CANCELLED)]
    d(PromptEnded(d.prompt().seq, "cancelled"))
    d(job(3, messages=("three",)))
    assert d.prompt() == Prompt(3, 2, unsent=("two",))


def test_output_of_an_ended_turn_never_reaches_a_later_answer() -> None:
    d = idle()
    assert d(chunk("STALE")) == [turn.Log("info", "output of an ended turn dropped", {"agent": "Demo", "state": "idle"})]
    assert d(chunk("STALE again")) == []
    d(Update({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}))
    fx = d(job(2)) + d(chunk("fresh")) + d(PromptEnded(d.prompt().seq, "end_turn"))
    assert texts(fx) == "fresh"


def test_output_while_awaiting_is_kept_bounded_for_the_next_request() -> None:
    d = awaiting()  # buffer_limit=100 bytes
    for i in range(30):
        d(chunk(f"<{i:02}>"))  # 4 bytes each, 120 in all
    fx = d(job(2, has_prompt=False, answers={"call-7": Answer.ALLOW}))
    out = texts(fx)
    assert "[20 bytes of output left out]" in out and "<05>" in out and "<04>" not in out and out.endswith("<29>")


def test_agent_exit_and_close_answer_everything_once() -> None:
    d = awaiting()
    d(job(2, messages=()))  # a second request: waits behind the open turn? no: it stops it
    fx = d(Close("daemon shutting down"))
    assert of(fx, Fail) == [Fail(2, "session closed: daemon shutting down")]
    d = streaming()
    d(ToolInvoked("m1", "vscode_read", {}))
    fx = d(AgentExited("agent 'demo' exited with code 1"))
    assert of(fx, Fail) == [Fail(1, "agent 'demo' exited with code 1")] and of(fx, ResolveTool) == [ResolveTool("m1", Answer.CANCELLED)]


def test_close_while_starting_answers_the_job_and_cancels_nothing_unsent() -> None:
    d = starting()
    fx = d(Close("stdin closed"))
    assert of(fx, Fail) == [Fail(1, "session closed: stdin closed")] and not of(fx, SendCancel)
    assert d(Ready()) == []


# ---------------------------------------------------------------- hypothesis: random interleavings


class TurnInterleavings(RuleBasedStateMachine):
    """Random jobs, cancels, updates, permissions, answers, prompt ends, agent exits,
    timers (fresh and stale) and closes. Invariants: every job answered at most once
    and, once the session is closed, exactly once; nothing emitted for a job after its
    answer; no answer but a cancelled one ends empty; every permission answered at most once (exactly once on a close); allow only
    where the request's answers said ALLOW; a stale timer does nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.d = Driver()
        self.jobs = 0
        self.rids = 0
        self.ended: set[int] = set()
        self.visible: set[int] = set()  # jobs that got text or a tool call
        self.responded: dict[Any, dict[str, Any]] = {}
        self.asked: dict[str, Any] = {}  # callId → rid
        self.allowed: set[str] = set()  # callIds a non-cancelled job answered ALLOW
        self.starts = 0  # StartAgent/NewSession not yet answered by Ready
        self.prompts: list[int] = []  # seqs of prompts not yet ended
        self.timers: list[tuple[Timer, int]] = []
        self.closes: list[int] = []  # CloseSession seqs not yet answered
        self.open_here: set[int] = set()  # prompts open on the current ACP session
        self.exited = False

    def feed(self, event: Any) -> list[Any]:
        before = {t: dict(self._live_tags())[t] for t in Timer if t in dict(self._live_tags())}
        waiting = {rid for rid in self.asked.values() if rid not in self.responded}
        fx = self.d(event)
        self.cancel_first(fx, waiting)
        if isinstance(event, TimerFired) and before.get(event.timer) != event.tag:
            assert fx == [], f"a stale {event.timer.name} timer acted: {fx}"
        for e in fx:
            if isinstance(e, Emit):
                assert e.job_id not in self.ended, f"emitted for job {e.job_id} after its answer"
                assert e.job_id <= self.jobs
                if e.part["type"] == "tool_call" or (e.part["type"] == "text" and e.part["value"].strip()):
                    self.visible.add(e.job_id)
            elif isinstance(e, Finish | Fail):
                # Copilot Chat shows an error for a response with no text and no tool call.
                assert not isinstance(e, Finish) or e.stop_reason == "cancelled" or e.job_id in self.visible, f"job {e.job_id} ended empty"
                assert e.job_id not in self.ended, f"job {e.job_id} answered twice"
                self.ended.add(e.job_id)
            elif isinstance(e, AnswerPermission):
                assert e.rid not in self.responded, f"permission {e.rid} answered twice"
                self.responded[e.rid] = dict(e.outcome)
                if e.outcome == ALLOWED:
                    assert e.call_id in self.allowed, f"{e.call_id} approved without its token"
                # Only the user's approval on a card grants client actions (permissions.grant).
                assert e.approved is None or (e.outcome == ALLOWED and e.call_id in self.allowed and e.approved.call_id == e.call_id), e
            elif isinstance(e, StartAgent | NewSession):
                self.starts += 1
                if isinstance(e, NewSession) and e.take_up:
                    # Never asked while a prompt of the session it takes up may be open.
                    assert not self.open_here, f"session taken up with prompts {self.open_here} open"
                else:
                    self.open_here = set()  # a new ACP session (or a new process): the old one's prompts are left
            elif isinstance(e, CloseSession):
                self.closes.append(e.seq)
            elif isinstance(e, Prompt):
                assert not self.open_here, f"prompt {e.seq} sent while {self.open_here} is open on the same ACP session"
                self.prompts.append(e.seq)
                self.open_here.add(e.seq)
            elif isinstance(e, StartTimer):
                self.timers.append((e.timer, e.tag))
        return fx

    @staticmethod
    def cancel_first(fx: list[Any], waiting: set[Any]) -> None:
        """ACP's cancellation: ``session/cancel`` goes before any ``cancelled`` answer, and
        every permission still waiting then is answered ``cancelled`` after it, once."""
        cancels = [i for i, e in enumerate(fx) if isinstance(e, SendCancel)]
        if not cancels:
            return
        assert len(cancels) == 1, f"session/cancel sent twice: {fx}"
        before = [e for e in fx[: cancels[0]] if isinstance(e, AnswerPermission)]
        after = [e for e in fx[cancels[0] :] if isinstance(e, AnswerPermission)]
        assert all(e.outcome != CANCELLED for e in before), f"a card answered cancelled before session/cancel: {fx}"
        assert all(e.outcome == CANCELLED and e.approved is None for e in after), f"a card answered after session/cancel other than cancelled: {fx}"
        assert sorted(e.rid for e in after) == sorted(waiting - {e.rid for e in before}), f"cards waiting at session/cancel not answered once: {fx}"

    def _live_tags(self) -> list[tuple[Timer, int]]:
        m = self.d.m
        live = []
        if m.phase is Phase.STREAMING:
            live.append((Timer.GATHER, m.generation))
        if m.phase is Phase.DRAINING:
            live.append((Timer.DRAIN, m.prompt_seq))
        if m.phase is Phase.STARTING:
            live.append((Timer.NOTICE, m.starts))
        return live

    @rule(prompt=st.booleans(), cancel_first=st.booleans(), cancelled=st.booleans(), data=st.data())
    def new_job(self, prompt: bool, cancel_first: bool, cancelled: bool, data: st.DataObject) -> None:
        self.jobs += 1
        pending = sorted(self.d.m.calls)
        answers = {c: data.draw(st.sampled_from(list(Answer))) for c in pending if data.draw(st.booleans())}
        if not cancelled:
            self.allowed |= {c for c, a in answers.items() if a is Answer.ALLOW}
        self.feed(NewJob(JobInfo(self.jobs, answers=answers, cancel_first=cancel_first, has_prompt=prompt,
                                 messages=(f"m{self.jobs}",), tools=ACTION_TOOLS, cancelled=cancelled)))

    @precondition(lambda self: self.d.m.phase is Phase.STREAMING and not self.exited)
    @rule()
    def card_shown(self) -> None:
        """The agent asks while a request streams, and the card goes out (a shortcut to AWAITING)."""
        self.permission("execute")
        self.feed(TimerFired(Timer.GATHER, self.d.m.generation))

    @precondition(lambda self: self.d.m.calls and self.d.m.phase in (Phase.STREAMING, Phase.AWAITING))
    @rule(how=st.sampled_from(["stop", "new words", "stopped before it got here"]))
    def stop_at_the_cards(self, how: str) -> None:
        """The user stops the turn while cards wait (a random job rarely does)."""
        self.jobs += 1
        answers = {c: Answer.CANCELLED if how == "stop" else Answer.ALLOW for c in self.d.m.calls}
        self.feed(NewJob(JobInfo(self.jobs, answers=answers, cancel_first=how != "stopped before it got here", has_prompt=how == "new words",
                                 messages=(f"m{self.jobs}",), tools=ACTION_TOOLS, cancelled=how == "stopped before it got here")))

    @precondition(lambda self: self.jobs > 0)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        self.feed(CancelJob(data.draw(st.integers(1, self.jobs))))

    @precondition(lambda self: self.starts > 0)
    @rule(error=st.sampled_from([None, None, "no answer within 60 s"]), lost=st.booleans())
    def ready(self, error: str | None, lost: bool) -> None:
        self.starts -= 1
        self.feed(Ready(error, lost=lost))

    @precondition(lambda self: self.d.m.job is not None)
    @rule()
    def stop_the_streaming_job(self) -> None:
        """A Stop of the request that streams (a random cancel rarely hits it)."""
        job = self.d.m.job
        assert job is not None
        self.feed(CancelJob(job.id))

    @precondition(lambda self: self.d.m.phase is Phase.DRAINING and self.d.m.prompt_open)
    @rule()
    def drain_deadline(self) -> None:
        """The live drain deadline fires (the agent has not ended the cancelled turn)."""
        self.feed(TimerFired(Timer.DRAIN, self.d.m.prompt_seq))

    @rule(text=st.text(max_size=30))
    def update(self, text: str) -> None:
        self.feed(chunk(text))

    @rule(kind=st.sampled_from(["read", "edit", "execute", None]))
    def permission(self, kind: str | None) -> None:
        if self.exited:
            return  # a gone agent asks nothing
        self.rids += 1
        ev = ask(self.rids, kind or "other")
        self.asked[ev.call_id] = ev.rid
        self.feed(ev)

    @rule()
    def tool_call(self) -> None:
        if not self.exited:
            self.rids += 1
            self.feed(ToolInvoked(f"mcp-{self.rids}", "vscode_tool", {}))

    @precondition(lambda self: self.prompts)
    @rule(data=st.data(), how=st.sampled_from(["end_turn", "cancelled", "error", "max_tokens", "bogus"]))
    def prompt_ends(self, data: st.DataObject, how: str) -> None:
        seq = data.draw(st.sampled_from(self.prompts))
        self.prompts.remove(seq)
        self.open_here.discard(seq)
        self.feed(PromptEnded(seq, None if how == "error" else how, "boom" if how == "error" else None))

    @precondition(lambda self: self.closes)
    @rule(data=st.data())
    def session_closed(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(self.closes))
        self.closes.remove(seq)
        self.feed(SessionClosed(seq))

    @precondition(lambda self: self.timers)
    @rule(data=st.data())
    def timer_fires(self, data: st.DataObject) -> None:
        timer, tag = data.draw(st.sampled_from(self.timers))
        self.feed(TimerFired(timer, tag))

    @rule()
    def agent_exits(self) -> None:
        self.exited = True
        self.feed(AgentExited("agent gone"))

    @rule()
    def close(self) -> None:
        self.feed(Close("test"))

    @invariant()
    def closed_means_everything_answered(self) -> None:
        if self.d.state is Phase.CLOSED:
            assert self.ended == set(range(1, self.jobs + 1)), "a job left unanswered at close"
            if not self.exited:
                unanswered = set(self.asked.values()) - set(self.responded)
                assert not unanswered, f"permissions left unanswered at close: {unanswered}"

    def teardown(self) -> None:
        if self.d.state is not Phase.CLOSED:
            self.feed(Close("end of test"))
            self.closed_means_everything_answered()


TurnInterleavings.TestCase.settings = settings(max_examples=400, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
test_turn_interleavings = TurnInterleavings.TestCase


# ---------------------------------------------------------------- output after a turn ended: each update kind in each state

UPDATES = {
    "agent_message_chunk": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "T"}},
    "agent_thought_chunk": {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "T"}},
    "user_message_chunk": {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "T"}},
    "tool_call": {"sessionUpdate": "tool_call", "toolCallId": "x1", "title": "Run T", "status": "in_progress"},
    "tool_call_update": {"sessionUpdate": "tool_call_update", "toolCallId": "x2", "title": "Run T", "status": "completed"},
    "plan": {"sessionUpdate": "plan", "entries": [{"content": "T", "priority": "high", "status": "pending"}]},
    "available_commands_update": {"sessionUpdate": "available_commands_update", "availableCommands": []},
    "current_mode_update": {"sessionUpdate": "current_mode_update", "currentModeId": "plan"},
    "config_option_update": {"sessionUpdate": "config_option_update", "configOptions": []},
    "session_info_update": {"sessionUpdate": "session_info_update", "title": "T"},
    "usage_update": {"sessionUpdate": "usage_update", "used": 1, "size": 10},
}
SESSION_LEVEL = {"available_commands_update", "current_mode_update", "config_option_update", "session_info_update", "usage_update"}
OUTPUT = {"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}


@pytest.mark.parametrize("kind", sorted(UPDATES))
@pytest.mark.parametrize("setup", ["fresh", "starting", "streaming", "awaiting", "idle", "draining", "closed"])
def test_each_update_kind_in_each_state(setup: str, kind: str) -> None:
    """Output reaches only the request streaming for its turn (STREAMING), or waits for the
    next request of the same open turn (AWAITING); a turn that has ended, is starting, is
    being cancelled or is closed shows none of it, ever; session-level updates are never
    output. Nothing changes the state."""
    d = SETUPS[setup]()
    before, kept = d.state, len(d.m.kept.parts)
    fx = d(Update(UPDATES[kind]))
    emitted = [e.part for e in of(fx, Emit)]
    assert d.state is before
    if kind in OUTPUT and before is Phase.STREAMING:
        assert emitted, f"{kind} while streaming was not shown"
    else:
        assert not emitted, f"{kind} in {before.name} was shown: {emitted}"
    grew = len(d.m.kept.parts) > kept
    assert grew == (kind in OUTPUT and before is Phase.AWAITING)
    if before is Phase.AWAITING and kind in OUTPUT:  # and it reaches the next request of that turn
        waiting = list(d.m.kept.parts)
        fx = d(job(9, has_prompt=False, answers={"call-7": Answer.ALLOW}))
        assert [e.part for e in of(fx, Emit)][: len(waiting)] == waiting and not d.m.kept.parts


def test_a_request_queued_before_a_card_was_shown_stops_it_rather_than_waiting_forever() -> None:
    """Found by tests/test_fuzz_stdin.py: a tool-result-only request classified while the
    request ahead of it still streamed (so it answers nothing) waits; the request ahead
    then shows a card and ends. The queued one cannot answer that card and nothing else
    will: it is stopped (answered cancelled, session/cancel), never left pending."""
    d = streaming()
    d(job(2, has_prompt=False))  # tool results only, answering nothing it knows: queued behind job 1
    d(ask(7))
    fx = d.fire(Timer.GATHER)  # job 1 shows the card and ends; job 2 comes next
    assert [(f.job_id, f.stop_reason) for f in of(fx, Finish)] == [(1, "tool_calls")]
    assert of(fx, AnswerPermission) == [AnswerPermission(7, "call-7", CANCELLED)]
    assert of(fx, SendCancel) == [SendCancel()]
    fx = d(PromptEnded(d.prompt().seq, "cancelled"))
    (finish,) = of(fx, Finish)
    assert finish.job_id == 2 and d.state is Phase.IDLE


def test_new_words_queued_before_a_card_was_shown_stop_it_then_are_prompted() -> None:
    d = streaming_with_job()  # job 2 has new words
    fx = d.fire(Timer.GATHER)
    assert of(fx, AnswerPermission) == [AnswerPermission(7, "call-7", CANCELLED)] and d.state is Phase.DRAINING
    d(PromptEnded(d.prompt().seq, "cancelled"))
    assert d.prompt().job_id == 2 and d.state is Phase.STREAMING


# ---------------------------------------------------------------- a command's live output


def test_a_cancel_that_leaves_codex_command_running_closes_and_takes_up_its_session() -> None:
    """codex-acp ends a cancelled turn at once but not its command (only session/close
    does): the session is closed (ending the command) and taken up again; the next job
    waits for it, then streams as usual."""
    d = draining_command()
    d(job(2))
    fx = d(PromptEnded(d.prompt().seq, "cancelled"))
    assert d.state is Phase.STARTING
    assert of(fx, NewSession) == [NewSession("a cancelled turn left a command running", take_up=True, close=True)]
    d(Ready())
    assert d.state is Phase.STREAMING and d.m.job is not None and d.m.job.id == 2
    assert not d.m.command_left


def test_a_cancel_of_an_agent_that_ends_its_commands_keeps_the_session() -> None:
    """claude-agent-acp kills its command on session/cancel: nothing more to do."""
    d = starting()
    d.m.reset_renderer(TurnRenderer(profile=CLAUDE))
    d(Ready())
    d(Update({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "sleep 60", "kind": "execute", "status": "pending"}))
    d(CancelJob(1))
    fx = d(PromptEnded(d.prompt().seq, "cancelled"))
    assert d.state is Phase.IDLE and not of(fx, NewSession)


def test_a_response_never_ends_inside_a_command_output_block() -> None:
    """A card gathered while a command's output block is open ends the response
    (``tool_calls``): the block is closed first, so the markdown stays whole."""
    d = starting()
    d.m.reset_renderer(TurnRenderer(profile=CODEX))
    d(Ready())
    d(Update({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "make", "kind": "execute", "status": "in_progress"}))
    fx = d(Update({"sessionUpdate": "tool_call_update", "toolCallId": "c", "_meta": {"terminal_output": {"terminal_id": "c", "data": "building\n"}}}))
    assert texts(fx).endswith("building\n")
    fx = d(ask(7)) + d.fire(Timer.GATHER)
    assert of(fx, Finish)[0].stop_reason == "tool_calls"
    assert texts(fx).startswith("````\n\n")  # closed before the card's call is shown
    assert texts(d.log).count("````") == 2


def test_a_response_ending_while_output_streams_closes_the_block() -> None:
    """``Renderer.pause`` at a response's end: a block left open is closed."""
    d = starting()
    d.m.reset_renderer(TurnRenderer(profile=CODEX))
    d(Ready())
    d(Update({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "make", "kind": "execute", "status": "in_progress"}))
    d(Update({"sessionUpdate": "tool_call_update", "toolCallId": "c", "_meta": {"terminal_output": {"terminal_id": "c", "data": "no newline"}}}))
    fx = d(PromptEnded(d.prompt().seq, "end_turn"))
    assert texts(fx).startswith("\n````\n\n") and of(fx, Finish)


# ---------------------------------------------------------------- a Stop at a card: session/cancel, then the answers


def _cancel_then_answers(fx: list[Any], rids: set[int]) -> bool:
    """``session/cancel`` comes before any answer, and each of ``rids`` is answered
    ``cancelled`` exactly once after it (ACP's rule for a cancelled turn)."""
    cancels = [i for i, e in enumerate(fx) if isinstance(e, SendCancel)]
    answers = [(i, e) for i, e in enumerate(fx) if isinstance(e, AnswerPermission)]
    return (
        len(cancels) == 1
        and all(i > cancels[0] for i, _ in answers)
        and sorted(e.rid for _, e in answers) == sorted(rids)
        and all(e.outcome == CANCELLED for _, e in answers)
    )


def _stop_after_allow() -> tuple[Driver, Any]:
    """A request that answers a card Allow, stopped before it got here (``cancelled``)."""
    return awaiting(), job(2, has_prompt=False, answers={"call-7": Answer.ALLOW}, cancelled=True)


def _two_cards_one_unanswered() -> tuple[Driver, Any]:
    d = streaming()
    d(ask(7))
    d(ask(8))
    d.fire(Timer.GATHER)
    return d, job(2, has_prompt=False, answers={"call-7": Answer.ALLOW, "call-8": Answer.CANCELLED})


# (how the Stop comes, the driver and its event) → the permissions it answers, after the cancel.
STOPS: list[tuple[str, Callable[[], tuple[Driver, Any]], set[int]]] = [
    ("Stop at a card (the next request without its result)", lambda: (awaiting(), job(2, cancel_first=True, answers={"call-7": Answer.CANCELLED})), {7}),
    ("new words beside the card", lambda: (awaiting(), job(2, cancel_first=True, answers={"call-7": Answer.CANCELLED})), {7}),
    ("Stop while the card is gathered", lambda: (_then(streaming(), ask(7)), CancelJob(1)), {7}),
    ("a request stopped before it got here, its Allow void", _stop_after_allow, {7}),
    ("a card without a result beside an Allow: the Allow is void too", _two_cards_one_unanswered, {7, 8}),
    ("a request stopping the turn another streams", lambda: (_then(streaming(), ask(7)), job(2, cancel_first=True)), {7}),
    ("the session closed at a card", lambda: (awaiting(), Close("bye")), {7}),
]


@pytest.mark.parametrize(("row", "setup", "rids"), STOPS, ids=[s[0] for s in STOPS])
def test_a_stop_at_a_card_sends_session_cancel_before_answering_it_cancelled(row: str, setup: Callable[[], tuple[Driver, Any]], rids: set[int]) -> None:
    """Answered first, an agent may read a ``cancelled`` card as a decline and call its model
    again, which the cancel then cuts (fast-agent 0.10.48 kept that stopped answer as an empty
    assistant message its model API refuses): the cancel goes first, then every card, once."""
    d, event = setup()
    fx = d(event)
    assert _cancel_then_answers(fx, rids), fx
    assert not [e for e in fx if isinstance(e, AnswerPermission) and e.approved is not None]  # a Stop approves nothing


def test_new_words_while_a_card_waits_answer_it_then_stop_the_turn() -> None:
    """A card answered Skip by a request that also brings new words (queued before the card was
    shown): the Skip is the user's answer, then the turn is stopped; nothing answered twice."""
    d = awaiting()
    fx = d(job(2, answers={"call-7": Answer.REJECT}))
    assert [type(e) for e in fx if isinstance(e, AnswerPermission | SendCancel)] == [AnswerPermission, SendCancel]
    assert of(fx, AnswerPermission) == [AnswerPermission(7, "call-7", REJECTED)]


CODEX_26_OPTIONS = (
    {"optionId": "allow_once", "name": "Yes, proceed", "kind": "allow_once"},
    {"optionId": "allow_for_session", "name": "Yes, and don't ask again for this command in this session", "kind": "allow_always"},
    {"optionId": "decline", "name": "No, continue without running it", "kind": "reject_once"},
    {"optionId": "cancel", "name": "No, and tell Codex what to do differently", "kind": "reject_once"},
)


def codex_awaiting() -> Driver:
    """AWAITING a card of codex-acp 2.6.0's: its ``tool_call`` (in progress) came first."""
    d = starting()
    d.m.reset_renderer(TurnRenderer(profile=CODEX))
    d(Ready())
    call = {"toolCallId": "call_1", "title": "touch marker", "kind": "execute", "content": [{"type": "terminal", "terminalId": "call_1"}]}
    d(Update({"sessionUpdate": "tool_call", "status": "in_progress", **call}))
    params = {"sessionId": "s", "toolCall": {"toolCallId": "call_1", "title": "touch marker", "kind": "execute", "status": "pending"}, "options": list(CODEX_26_OPTIONS)}
    d(PermissionAsked(7, params, "call-7", "token-7", profile=CODEX))
    d.fire(Timer.GATHER)
    assert d.state is Phase.AWAITING
    return d


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (Answer.ALLOW, {"outcome": "selected", "optionId": "allow_once"}),
        (Answer.REJECT, {"outcome": "selected", "optionId": "decline"}),
    ],
    ids=["Allow", "Skip"],
)
def test_codex_cards_are_answered_by_its_profile(answer: Answer, outcome: dict[str, Any]) -> None:
    d = codex_awaiting()
    fx = d(job(2, has_prompt=False, answers={"call-7": answer}))
    assert [(r.rid, r.outcome) for r in of(fx, AnswerPermission)] == [(7, outcome)]


@pytest.mark.parametrize("status", ["failed", "completed", "in_progress"])
def test_a_call_the_user_skipped_reads_declined_whatever_status_codex_ends_it_with(status: str) -> None:
    """codex-acp 2.6.0 ends a declined command ``failed`` (which read "✗ … failed"), then its
    turn goes on; whatever the status (or none, at the turn's end), a Skip reads declined."""
    d = codex_awaiting()
    d(job(2, has_prompt=False, answers={"call-7": Answer.REJECT}))
    fx = d(Update({"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": status, "_meta": {"terminal_exit": {"exit_code": None, "signal": None, "terminal_id": "call_1"}}}))
    fx += d(chunk("I did not run it.")) + d(PromptEnded(d.prompt().seq, "end_turn"))
    shown = texts(fx)
    assert "✗ **touch marker** (execute) declined" in shown and " failed" not in shown and "completed" not in shown, shown
    assert shown.count("declined") == 1 and "I did not run it." in shown
