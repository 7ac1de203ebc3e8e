"""The session actor's own pieces (docs/architecture.md, "Tasks and ownership"): what is
left in its mailbox when the session ends (``daemon/mail.py``), its timers
(``daemon/timers.py``) and its writer to the agent (``daemon/agent_writer.py``)."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from lmbridge.acp.client_requests import session_ended
from lmbridge.acp.connection import BAD_ID_ERROR, AgentError, Incoming, Response
from lmbridge.core import elicitation, permissions, turn
from lmbridge.core.history import Decision, Kind
from lmbridge.core.messages import AgentSpec
from lmbridge.daemon import agent_writer
from lmbridge.daemon.agent_writer import AgentWriter
from lmbridge.daemon.chat_controls import ControlSet, SetControl
from lmbridge.daemon.job import ChatRequest, Job
from lmbridge.daemon.mail import CancelRequest, EndSession, Mail, drain, left_unread, unread_answer
from lmbridge.daemon.timers import Timers

GONE, CONTROL_GONE = "the session has ended", "the control's session has ended"


class _Parts:
    def send(self, part: Any) -> None:
        raise AssertionError("nothing is sent for a job left unread")

    def stopped(self) -> bool:
        return False


def _job() -> Job:
    request = ChatRequest(AgentSpec(id="a", command="a"), (), None, _Parts())
    return Job(Decision(Kind.NEW_CHAT, "s1"), request)


# The agent's requests left unread: each answered once, as the session's end answers it.
AGENT_REQUESTS = [
    (Incoming("session/request_permission", {"sessionId": "x"}, id=3), (3, {"outcome": dict(permissions.CANCELLED)}, None)),
    (Incoming(elicitation.METHOD, {"sessionId": "x"}, id="q"), ("q", dict(elicitation.CANCEL), None)),
    (Incoming("fs/read_text_file", {"path": "/etc/passwd"}, id=5), (5, None, session_ended("fs/read_text_file"))),
    (Incoming("terminal/create", {}, id=6.5), (6.5, None, session_ended("terminal/create"))),  # a float id, answered as it came
    (Incoming("session/request_permission", {}, bad_id=True), (None, None, dict(BAD_ID_ERROR))),
    (Incoming("session/update", {"update": {}}), None),  # a notification: nothing to answer
]


@pytest.mark.parametrize(("msg", "reply"), AGENT_REQUESTS)
def test_an_agents_request_left_unread_is_answered(msg: Incoming, reply: Any) -> None:
    assert unread_answer(msg) == reply
    assert left_unread(msg, GONE, CONTROL_GONE) == reply


def test_a_job_left_unread_fails_and_a_finished_one_is_left_as_it_ended() -> None:
    waiting, finished = _job(), _job()
    finished.stop_reason = "end_turn"
    finished.done.set()
    assert left_unread(waiting, GONE, CONTROL_GONE) is None
    assert left_unread(finished, GONE, CONTROL_GONE) is None
    assert waiting.done.is_set() and waiting.error == GONE
    assert finished.error is None and finished.stop_reason == "end_turn"


def test_a_control_request_left_unread_fails_once() -> None:
    asked, answered = SetControl("mode", "plan"), SetControl("model", "fast")
    assert left_unread(asked, GONE, CONTROL_GONE) is None
    assert left_unread(ControlSet(answered, answer={}), GONE, CONTROL_GONE) is None
    assert asked.done.is_set() and asked.error == CONTROL_GONE
    assert answered.done.is_set() and answered.error == CONTROL_GONE
    assert left_unread(asked, GONE, "again") is None and asked.error == CONTROL_GONE  # answered once


@pytest.mark.parametrize(
    "msg",
    [
        CancelRequest(_job()),
        EndSession("shutdown"),
        Response(1, {"stopReason": "end_turn"}),
        Response(2, error=AgentError("session/prompt", {"code": -32603, "message": "x"})),
        turn.Ready(),
        turn.SessionClosed(1),
        turn.TimerFired(turn.Timer.DRAIN, 1),
        turn.Update({"sessionUpdate": "agent_message_chunk"}),
    ],
)
def test_other_mail_left_unread_needs_no_answer(msg: Mail) -> None:
    assert unread_answer(msg) is None
    assert left_unread(msg, GONE, CONTROL_GONE) is None


def test_drain_takes_what_is_queued_in_order_without_waiting() -> None:
    send, receive = anyio.create_memory_object_stream[Mail](math.inf)
    sent: list[Mail] = [EndSession("a"), turn.SessionClosed(1), EndSession("b")]
    for msg in sent:
        send.send_nowait(msg)
    assert list(drain(receive)) == sent
    assert list(drain(receive)) == []  # empty: returns at once
    send.send_nowait(EndSession("last"))
    send.close()
    assert list(drain(receive)) == [EndSession("last")]  # then closed: ends too
    receive.close()
    assert list(drain(receive)) == []


@pytest.mark.anyio
async def test_a_timer_started_again_replaces_the_running_one_and_a_stopped_one_never_fires() -> None:
    send, receive = anyio.create_memory_object_stream[turn.TimerFired](math.inf)
    timers = Timers(send)
    async with anyio.create_task_group() as tg:
        timers.start(turn.StartTimer(turn.Timer.DRAIN, 0.01, 1), tg)
        timers.start(turn.StartTimer(turn.Timer.DRAIN, 0.05, 2), tg)  # the first of its kind stopped
        timers.start(turn.StartTimer(turn.Timer.NOTICE, 0.01, 3), tg)
        timers.stop(turn.Timer.NOTICE)
        timers.start(turn.StartTimer(turn.Timer.GATHER, 0.3, 4), tg)
        with anyio.fail_after(10):
            assert await receive.receive() == turn.TimerFired(turn.Timer.DRAIN, 2)
            assert await receive.receive() == turn.TimerFired(turn.Timer.GATHER, 4)
        timers.start(turn.StartTimer(turn.Timer.GATHER, 0.01, 5), tg)
        timers.stop_all()
    with pytest.raises(anyio.WouldBlock):
        receive.receive_nowait()  # nothing else fired


class _Conn:
    """An agent connection as the writer sees it: ``respond`` records, or hangs (``stuck``)."""

    def __init__(self, stuck: bool = False) -> None:
        self.closed = anyio.Event()
        self.exit_reason: str | None = None
        self.stuck = stuck
        self.frames: list[Any] = []

    async def respond(self, rid: Any, result: Any = None, error: Any = None) -> None:
        if self.stuck:
            await anyio.sleep_forever()
        self.frames.append((rid, result, error))

    async def close(self) -> None:
        self.closed.set()


@pytest.mark.anyio
async def test_the_writer_sends_in_order_and_finishes_once_all_is_written() -> None:
    conn = _Conn()
    writer = AgentWriter(lambda: conn, "a", {"session": "s1"})

    async def cancel(c: Any) -> None:
        c.frames.append("session/cancel")

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        writer.respond(1, {"outcome": {"outcome": "cancelled"}})
        writer.send(cancel)
        writer.respond(2, error={"code": -32601, "message": "x"})
        with anyio.fail_after(10):
            await writer.finish()
    assert conn.frames == [(1, {"outcome": {"outcome": "cancelled"}}, None), "session/cancel", (2, None, {"code": -32601, "message": "x"})]
    with pytest.raises(anyio.ClosedResourceError):
        writer.respond(3)  # finished: takes no more


@pytest.mark.anyio
async def test_an_agent_that_stops_reading_is_stopped_and_the_frames_behind_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_writer, "WRITE_TIMEOUT", 0.2)
    conn = _Conn(stuck=True)
    writer = AgentWriter(lambda: conn, "a", {"session": "s1"})
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        writer.respond(1)
        writer.respond(2)  # behind it: the connection is closed by then, dropped
        with anyio.fail_after(10):
            await conn.closed.wait()
            await writer.finish()
    assert conn.exit_reason is not None and "stopped reading its stdin" in conn.exit_reason
    assert conn.frames == []
