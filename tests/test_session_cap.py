"""The session cap queues instead of refusing (docs/sessions.md, "The session cap").

The decision is pure (``lmbridge.core.cap``): its table, row by row, and hypothesis over random
sets of sessions. Then through the daemon with the scripted agent: a new chat over the cap
waits with a line in the chat and takes the first session that becomes idle; a chat whose
permission card the user still sees is not idle (its card is never cancelled for a new
chat); a chat cancelled while it waits takes nothing; the wait is bounded.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import pytest
from conftest import alive
from hypothesis import given
from hypothesis import strategies as st
from test_daemon import LIMIT, eventually, ok
from test_lifecycle import CHAT

from lmbridge.core.cap import CLOSABLE, Close, Room, Use, admit, busy_message, is_waiting_notice, use, waiting_notice
from lmbridge.core.history import Last, Session
from lmbridge.core.profiles import OTHER
from lmbridge.devtools.client import approve, assistant, text_of, tool_calls, user

# ---------------------------------------------------------------- the pure decision


def session(sid: str, *, busy: bool = False, last: Last = Last.DONE, at: float = 0.0) -> Session:
    return Session(id=sid, model_id="claude", busy=busy, last=last, last_active=at)


@pytest.mark.parametrize(
    ("busy", "last", "expected"),
    [
        (True, Last.DONE, Use.ANSWERING),
        (True, Last.PENDING, Use.ANSWERING),
        (False, Last.PENDING, Use.CARD),  # a card the user still sees
        (False, Last.DONE, Use.IDLE),
        (False, Last.CANCELLED, Use.IDLE),
    ],
)
def test_what_a_live_session_is_doing(busy: bool, last: Last, expected: Use) -> None:
    assert use(session("s1", busy=busy, last=last)) is expected


def test_an_idle_session_may_be_closed_for_a_new_chat_a_card_only_at_the_bound() -> None:
    assert CLOSABLE == {Use.ANSWERING: Close.NEVER, Use.CARD: Close.AT_BOUND, Use.IDLE: Close.AT_ONCE}


ROWS: list[tuple[str, list[Session], int, int, Room]] = [  # not overdue
    ("under the cap", [session("a")], 2, 0, Room(wait=False)),
    ("none live", [], 1, 0, Room(wait=False)),
    ("at the cap, one idle: closed", [session("a", busy=True), session("b")], 2, 0, Room(wait=False, close=("b",))),
    ("the least recently used idle first", [session("a", at=5), session("b", at=1), session("c", at=3)], 3, 0, Room(wait=False, close=("b",))),
    ("all answering: wait", [session("a", busy=True), session("b", busy=True)], 2, 0, Room(wait=True)),
    ("a card is not idle: wait", [session("a", last=Last.PENDING)], 1, 0, Room(wait=True)),
    ("a card and an idle one: the idle one", [session("a", last=Last.PENDING, at=0), session("b", at=9)], 2, 0, Room(wait=False, close=("b",))),
    ("over the cap (lowered): as many as needed", [session("a", at=1), session("b", at=2), session("c", at=3)], 2, 0, Room(wait=False, close=("a", "b"))),
    ("over the cap, too few idle: wait, close nothing", [session("a"), session("b", busy=True), session("c", busy=True)], 2, 0, Room(wait=True)),
    ("others wait ahead: wait behind them", [session("a")], 2, 1, Room(wait=True)),
    ("others wait ahead, even with an idle one", [session("a"), session("b")], 2, 2, Room(wait=True)),
]


@pytest.mark.parametrize(("live", "cap", "ahead", "expected"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_admit(live: list[Session], cap: int, ahead: int, expected: Room) -> None:
    assert admit(live, cap, ahead) == expected


OVERDUE: list[tuple[str, list[Session], int, int, Room]] = [  # the request waited its whole bound
    ("a card gives way", [session("a", last=Last.PENDING)], 1, 0, Room(wait=False, close=("a",))),
    ("the least recently used card first", [session("a", last=Last.PENDING, at=5), session("b", last=Last.PENDING, at=1)], 2, 0, Room(wait=False, close=("b",))),
    ("an idle one before a card, even more recent", [session("a", last=Last.PENDING, at=0), session("b", at=9)], 2, 0, Room(wait=False, close=("b",))),
    ("an idle one, then a card", [session("a", last=Last.PENDING, at=0), session("b", at=9), session("c", busy=True)], 2, 0, Room(wait=False, close=("b", "a"))),
    ("all answering: still no room", [session("a", busy=True)], 1, 0, Room(wait=True)),
    ("others behind it do not hold it back", [session("a", last=Last.PENDING)], 1, 3, Room(wait=False, close=("a",))),
    ("under the cap", [session("a", busy=True)], 2, 0, Room(wait=False)),
]


@pytest.mark.parametrize(("live", "cap", "ahead", "expected"), [r[1:] for r in OVERDUE], ids=[r[0] for r in OVERDUE])
def test_admit_overdue(live: list[Session], cap: int, ahead: int, expected: Room) -> None:
    assert admit(live, cap, ahead, overdue=True) == expected


LASTS = st.sampled_from([Last.DONE, Last.CANCELLED, Last.PENDING])


@given(
    st.lists(st.tuples(st.booleans(), LASTS, st.integers(0, 5)), max_size=8),
    st.integers(1, 6),
    st.integers(0, 2),
    st.booleans(),
)
def test_admit_never_closes_a_busy_session_nor_a_card_before_the_bound_and_keeps_the_cap(
    states: list[tuple[bool, Last, int]], cap: int, ahead: int, overdue: bool
) -> None:
    live = [session(f"s{i}", busy=b, last=last, at=at) for i, (b, last, at) in enumerate(states)]
    room = admit(live, cap, ahead, overdue)
    by_id = {s.id: s for s in live}
    closable = [s for s in live if not s.busy and (overdue or s.last is not Last.PENDING)]
    assert len(set(room.close)) == len(room.close)
    assert all(not by_id[sid].busy for sid in room.close), "closed a session that answers"
    assert overdue or all(by_id[sid].last is not Last.PENDING for sid in room.close), "closed a card before the bound"
    if room.wait:
        assert not room.close
        assert (ahead > 0 and not overdue) or len(live) - len(closable) + 1 > cap  # no way to make room
    else:
        assert ahead == 0 or overdue
        assert len(live) - len(room.close) + 1 <= cap  # the new session fits
        assert len(room.close) == max(0, len(live) - cap + 1)  # and no more is closed than needed
        kept = [s for s in closable if s.id not in room.close]
        order = {sid: (CLOSABLE[use(s)], s.last_active, sid) for sid, s in by_id.items()}
        assert all(order[s.id] >= order[c] for s in kept for c in room.close)  # idle before cards, LRU first


def test_the_waiting_line_names_the_agent_and_replay_knows_it() -> None:
    line = waiting_notice("Claude Code")
    assert line == "_Waiting for a free Claude Code session…_\n\n"
    assert is_waiting_notice(line) and not is_waiting_notice("_Waiting for a free x session…_\n\nmore") and not is_waiting_notice(None)
    assert "busy with other chats" in busy_message("claude", 4, 120) and "120 s" in busy_message("claude", 4, 120)


# ---------------------------------------------------------------- through the daemon

NAME = "Scripted Agent"
CAPS = {"agentCapabilities": {"sessionCapabilities": {"resume": {}, "close": {}}}}


def asking_turn() -> list[dict[str, Any]]:
    return [{"text": "May I?"}, {"permission": {"toolCall": {"toolCallId": "x1", "title": "Run make", "kind": "execute"}}, "id": "p1"},
            {"branch": "p1", "allow": [{"text": "Ran it."}], "reject": [{"text": "Did not run it."}], "cancelled": [{"text": "Cancelled."}]}]  # fmt: skip


def request(agent: Any, words: str) -> dict[str, Any]:
    return {"modelId": agent.id, "messages": [user(words)], "options": {}}


def waiting_line(call: Any) -> bool:
    return bool(call.parts) and call.parts[0] == {"type": "text", "value": waiting_notice(NAME)}


@pytest.mark.anyio
@pytest.mark.parametrize("spare", [False, True], ids=["no spare", "spare"])
async def test_a_new_chat_waits_while_a_card_is_shown_and_takes_the_session_once_idle(scripted: Any, daemon: Any, spare: bool) -> None:
    """One session allowed. Chat A ends on a permission card. Chat B1 waits (a line says
    so) and is cancelled while it waits: it takes nothing. Chat B2 waits: A's card is not
    cancelled for it; the user allows the card, A's turn goes on and ends; B2 then takes
    the session: A's is closed (it sleeps), B2's opens and answers."""
    agent = scripted({"initialize": CAPS, "turns": [asking_turn()], "default_turn": [{"text": "B answered."}]})
    args = ["--max-agent-processes", "1", *(["--spare-session"] if spare else [])]
    with anyio.fail_after(LIMIT * 2):
        async with daemon([{**agent.spec, "name": NAME}], args=args) as c:
            a = await c.chat(agent.id, [user("run make")])
            ok(a, "tool_calls")
            opened = len(agent.events("session_new"))  # A's, and the spares where on
            if spare:
                await eventually(lambda: len(agent.events("session_new")) == 1 + OTHER.spares, what="the spare sessions")
                opened = 1 + OTHER.spares
            b1 = await c.start(CHAT, request(agent, "chat B1"))
            await eventually(lambda: waiting_line(b1), what="chat B1 told it waits")
            await c.cancel(b1)
            with anyio.fail_after(LIMIT):
                await b1.done.wait()
            assert b1.result == {"stopReason": "cancelled"} and len(b1.parts) == 1
            b2 = await c.start(CHAT, request(agent, "chat B2"))
            await eventually(lambda: waiting_line(b2), what="chat B2 told it waits")
            await anyio.sleep(0.5)  # were A's card closed for B2, it would be by now
            assert not b2.done.is_set() and not agent.frames("session/close") and not agent.outcomes()
            (card,) = tool_calls(a)
            a2 = await c.chat(agent.id, [user("run make"), assistant(a.parts), approve(card)])
            ok(a2)
            assert text_of(a2).startswith("Ran it.")  # the card's turn went on
            with anyio.fail_after(LIMIT):
                await b2.done.wait()
            ok(b2)
            assert text_of(b2) == waiting_notice(NAME) + "B answered."
            # The waiting line is part of B2's answer as VS Code replays it: B2 goes on in its session.
            b3 = await c.chat(agent.id, [user("chat B2"), assistant(b2.parts), user("more")])
            ok(b3)
    (outcome,) = agent.outcomes()
    assert outcome["kind"] == "allow_once"  # the card was answered by the user, never cancelled
    (close,) = [f for f in agent.frames("session/close") if f["params"]["sessionId"] == "s1"]
    assert close["t"] > outcome["t"]  # A was closed only once its turn had ended
    prompts = agent.prompts()
    assert [p["text"] for p in prompts] == ["run make", "chat B2", "more"]  # B1 reached no agent
    assert prompts[1]["sessionId"] == prompts[2]["sessionId"] != "s1"
    if not spare:
        assert len(agent.events("session_new")) == opened + 1  # B2's, nothing for B1


@pytest.mark.anyio
@pytest.mark.parametrize("wait", ["0", "1", "long"])
async def test_a_returning_chat_over_the_cap_keeps_its_resume_token(scripted: Any, daemon: Any, wait: str) -> None:
    """One session allowed: chat B's closes chat A's (A sleeps); A comes back while B
    streams. With no wait ("0") it is refused as busy at once; with a short wait ("1" s)
    it shows the waiting line, then is refused; either way its retry, once B is done,
    still resumes A's own session. With a long wait it takes the session once B is
    stopped, resuming A's own session."""
    agent = scripted({"initialize": CAPS, "turns_per_session": True, "turns": [[{"text": "First answer."}]], "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT * 2):
        args = ["--max-agent-processes", "1", *(["--session-wait", wait] if wait != "long" else [])]
        async with daemon([{**agent.spec, "name": NAME}], args=args) as c:
            a_first = await c.chat(agent.id, [user("chat A")])
            ok(a_first)
            agent.write({"initialize": CAPS, "turns_per_session": True, "turns": [[{"text": "B streams"}, {"sleep": 60}]],
                         "default_turn": [{"text": "A resumed."}]})  # fmt: skip
            # The scenario is read when a process starts: B's long turn needs a new one.
            (pid,) = agent.pids()
            os.kill(pid, 9)
            await eventually(lambda: not alive(pid), what="the agent gone")
            b = await c.start(CHAT, request(agent, "chat B"))
            await eventually(lambda: b.parts, what="chat B streaming")
            a_history = [user("chat A"), assistant(a_first.parts), user("A again")]
            if wait == "long":
                back = await c.start(CHAT, {"modelId": agent.id, "messages": a_history, "options": {}})
                await eventually(lambda: waiting_line(back), what="chat A told it waits")
                await c.cancel(b)
                with anyio.fail_after(LIMIT):
                    await back.done.wait()
                ok(back)
                assert text_of(back) == waiting_notice(NAME) + "A resumed."
            else:
                busy = await c.chat(agent.id, a_history)
                assert busy.error is not None and "busy with other chats" in busy.error.message
                assert waiting_line(busy) == (wait != "0")  # a line while it waited, none without a wait
                await c.cancel(b)
                retry = await c.chat(agent.id, a_history)
                ok(retry)
                assert text_of(retry) == "A resumed."
    resumed = [f["params"]["sessionId"] for f in agent.frames("session/resume")]
    assert resumed[-1] == "s1"
    last = agent.prompts()[-1]
    assert last["sessionId"] == "s1" and [b["text"] for b in last["blocks"]] == ["A again"]



@pytest.mark.anyio
async def test_a_card_left_for_the_whole_wait_gives_way_and_its_late_allow_wakes_it(scripted: Any, daemon: Any) -> None:
    """One session allowed, a wait of 2 s. Chat A ends on a card nobody answers. Chat B
    waits its whole bound, then takes the session: A's is closed (its card answered
    cancelled to the agent; nothing approved) rather than B refused. A's late Allow then
    wakes A's own session (session/resume of s1), told the user approved."""
    agent = scripted({"initialize": CAPS, "turns": [asking_turn()], "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT * 2):
        async with daemon([{**agent.spec, "name": NAME}], args=["--max-agent-processes", "1", "--session-wait", "2"]) as c:
            a = await c.chat(agent.id, [user("run make")])
            ok(a, "tool_calls")
            b = await c.chat(agent.id, [user("chat B")])
            ok(b)
            assert text_of(b) == waiting_notice(NAME) + "ok"  # it waited, then answered
            (outcome,) = agent.outcomes()
            assert outcome["kind"] == "cancelled"  # A's card gave way: nothing approved
            (card,) = tool_calls(a)
            late = await c.chat(agent.id, [user("run make"), assistant(a.parts), approve(card)])
            ok(late)
    closed = [f["params"]["sessionId"] for f in agent.frames("session/close")]
    assert closed[0] == "s1"
    (resumed,) = agent.frames("session/resume")
    assert resumed["params"]["sessionId"] == "s1"
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts][:2] == ["s1", "s2"] and prompts[-1]["sessionId"] == "s1"
    assert "approved it" in prompts[-1]["text"]
    assert all(o["kind"] != "allow_once" for o in agent.outcomes())
