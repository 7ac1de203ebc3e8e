"""A Stop and a new message, in whatever order they come; a stopped turn the agent never
ends (the daemon as a subprocess, with the scripted agent).

1. A new message VS Code sends before the Stop of the answer in progress (or the Stop first,
   both in one write): the stopped answer is never recorded after the new message, the
   session is not taken as idle while the new answer streams, and the next turn continues
   the same session (it diverged: a fresh session told the conversation).
2. A cancelled turn the agent never ends: at the drain deadline its session is closed; it
   is taken up again (``session/resume``) only once its prompt has ended, else the chat goes
   on in a fresh session told the conversation. The agent never gets a second prompt on a
   session whose prompt is open, and the next answer never carries the old turn's output.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from test_daemon import eventually, ok

from lmbridge.core.transcript import CONTEXT_OPEN
from lmbridge.devtools.client import SentRequest, approve, assistant, chat_options, text_of, tool_calls, user

pytestmark = pytest.mark.anyio

CHAT = "lm/provideLanguageModelChatResponse"
# Seconds: the bound of each test, and of each wait in it. Idle, a test takes 2-5 s (the
# daemon's first chat imports its actors); with both cores busy, several times that (a
# first chat took 25 s: docs/reliability.md, "Tests under load").
LIMIT = 120
RESUMABLE = {"agentCapabilities": {"sessionCapabilities": {"resume": {}, "close": {}}}}


def chat_frame(c: Any, model: str, messages: list[dict[str, Any]]) -> tuple[SentRequest, dict[str, Any]]:
    """A chat request frame and its SentRequest, registered with the client but not sent."""
    call = c.expect(c.next_id + 1)
    return call, {"jsonrpc": "2.0", "id": call.id, "method": CHAT, "params": {"modelId": model, "messages": messages}}


def cancel_frame(call: SentRequest) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": call.id}}


async def send_together(c: Any, *frames: dict[str, Any]) -> None:
    """Frames in one write: the daemon reads them in the same instant, in this order."""
    await c.send_raw("".join(json.dumps(f) + "\n" for f in frames))


def prompts_never_overlap(agent: Any) -> None:
    """No session/prompt reached a session whose earlier prompt was still unanswered."""
    prompts = agent.events("prompt")
    assert prompts and all(p["open"] == 0 for p in prompts), [(p["sessionId"], p["open"]) for p in prompts]


# ---------------------------------------------------------------- 1. a Stop and a new message


@pytest.mark.parametrize("order", ["new_message_first", "stop_first"])
async def test_a_new_message_and_the_stop_of_the_answer_in_progress_keep_the_session(scripted: Any, shared: Any, order: str) -> None:
    agent = scripted(
        {
            "turns": [[{"text": "Partial answer."}, {"sleep": 30}], [{"sleep": 0.3}, {"text": "Second answer."}], [{"text": "Third answer."}]],
        }
    )
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.start(CHAT, {"modelId": agent.id, "messages": [user("question one")]})
            await eventually(lambda: first.parts, timeout=LIMIT, what="the first part")
            # The answer in progress is not in the new request: it was sent before the Stop
            # (or VS Code dropped the stopped answer).
            second, frame = chat_frame(c, agent.id, [user("question one"), user("question two")])
            frames = [frame, cancel_frame(first)] if order == "new_message_first" else [cancel_frame(first), frame]
            await send_together(c, *frames)
            with anyio.fail_after(LIMIT):
                await first.done.wait()
            assert first.result == {"stopReason": "cancelled"}
            with anyio.fail_after(LIMIT):
                await second.done.wait()
            ok(second)
            assert text_of(second) == "Second answer."
            history = [user("question one"), user("question two"), assistant(second.parts), user("question three")]
            third = await c.chat(agent.id, history, timeout=LIMIT)
            ok(third)
            assert text_of(third) == "Third answer."
    # One ACP session throughout: the third request continued it (it diverged before).
    assert [e["sessionId"] for e in agent.events("session_new")] == ["s1"]
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s1", "s1"]
    assert prompts[1]["text"] == "question two" and prompts[2]["text"] == "question three"
    prompts_never_overlap(agent)


async def test_a_stop_then_a_message_that_keeps_the_partial_answer_continue_the_session(scripted: Any, shared: Any) -> None:
    """The Stop first, then (in the same write) a request that holds the stopped partial
    answer: the stop is recorded before that request is matched, so it continues the session
    instead of diverging to a fresh one."""
    agent = scripted({"turns": [[{"text": "Partial answer."}, {"sleep": 30}], [{"text": "Second answer."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.start(CHAT, {"modelId": agent.id, "messages": [user("question one")]})
            await eventually(lambda: first.parts, timeout=LIMIT, what="the first part")
            second, frame = chat_frame(c, agent.id, [user("question one"), assistant([{"type": "text", "value": "Partial answer."}]), user("question two")])
            await send_together(c, cancel_frame(first), frame)
            with anyio.fail_after(LIMIT):
                await second.done.wait()
            ok(second)
            assert text_of(second) == "Second answer."
    assert first.parts == [{"type": "text", "value": "Partial answer."}]
    assert [e["sessionId"] for e in agent.events("session_new")] == ["s1"]
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s1"] and prompts[1]["text"] == "question two"


@pytest.mark.parametrize("shape", ["round_kept", "turn_dropped"])
async def test_a_stop_while_an_approved_command_runs_keeps_the_session(scripted: Any, shared: Any, shape: str) -> None:
    """A Stop after the user allowed a command, while it runs. VS Code's next request keeps
    the round that showed the card, or drops the stopped turn whole: either way the chat
    goes on in its own session (not a fresh one told the conversation), and the agent is
    sent the new words only."""
    command = {"toolCall": {"toolCallId": "x1", "title": "Run make", "kind": "execute", "rawInput": {"command": "make"}}}
    agent = scripted({
        "initialize": RESUMABLE,
        "turns": [
            [{"text": "First answer."}],
            [{"permission": command, "id": "p1"}, {"branch": "p1", "allow": [{"text": "Running make."}, {"sleep": 30}]}],
            [{"text": "Fine, stopped."}],
        ],
    })
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("question one")], timeout=LIMIT)
            history = [user("question one"), assistant(first.parts), user("run make")]
            ask = await c.chat(agent.id, history, timeout=LIMIT)
            ok(ask, "tool_calls")
            allowed = [*history, assistant(ask.parts), approve(tool_calls(ask)[0])]
            running = await c.start(CHAT, {"modelId": agent.id, "messages": allowed, "options": chat_options()})
            await eventually(lambda: running.parts, timeout=LIMIT, what="the command's output")
            await c.cancel(running)
            with anyio.fail_after(LIMIT):
                await running.done.wait()
            assert running.result == {"stopReason": "cancelled"}
            kept = allowed if shape == "round_kept" else history
            after = await c.chat(agent.id, [*kept, user("never mind")], timeout=LIMIT)
            ok(after)
            assert text_of(after) == "Fine, stopped."
    assert [o["kind"] for o in agent.outcomes()] == ["allow_once"]
    assert [e["sessionId"] for e in agent.events("session_new")] == ["s1"]
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s1", "s1"] and prompts[2]["text"] == "never mind"
    prompts_never_overlap(agent)


# ---------------------------------------------------------------- 2. a stopped turn the agent never ends


def old_turn(seconds: float) -> list[dict[str, Any]]:
    """Output that goes on for ``seconds``: OLD0 OLD1 ... every 50 ms."""
    steps: list[dict[str, Any]] = []
    for i in range(int(seconds / 0.05)):
        steps += [{"text": f"OLD{i} "}, {"sleep": 0.05}]
    return steps


NEW_TURN = [step for i in range(20) for step in ({"text": f"NEW{i} "}, {"sleep": 0.05})]
NEW_TEXT = "".join(f"NEW{i} " for i in range(20))


async def stop_then_ask_again(c: Any, agent: Any) -> tuple[SentRequest, SentRequest]:
    first = await c.start(CHAT, {"modelId": agent.id, "messages": [user("stream please")]})
    await eventually(lambda: first.parts, timeout=LIMIT, what="the first part")
    await c.cancel(first)
    with anyio.fail_after(LIMIT):
        await first.done.wait()
    assert first.result == {"stopReason": "cancelled"}
    second = await c.chat(agent.id, [user("stream please"), assistant(first.parts), user("and now?")], timeout=LIMIT)
    return first, second


@pytest.mark.parametrize("caps", ["resume_and_close", "resume_only", "neither"])
async def test_a_stopped_turn_never_ended_is_never_prompted_again_a_fresh_session_is_told(scripted: Any, daemon: Any, caps: str) -> None:
    """The agent ignores the cancel and its close: its prompt stays open for good. The next
    message goes to a fresh session told the conversation, never to the open one."""
    initialize = {"resume_and_close": RESUMABLE, "resume_only": {"agentCapabilities": {"sessionCapabilities": {"resume": {}}}}, "neither": {}}[caps]
    agent = scripted(
        {
            "initialize": initialize,
            "turns": [old_turn(30), NEW_TURN],
            "ignore_cancel": True,
            "close_keeps_turns": True,
            "on_cancel": "never",
        }
    )
    with anyio.fail_after(LIMIT):
        async with daemon([agent], env={"LMBRIDGE_DRAIN_TIMEOUT": "0.5"}) as c:
            _, second = await stop_then_ask_again(c, agent)
            ok(second)
            assert text_of(second) == NEW_TEXT  # nothing of the old turn, which still streams
            await anyio.sleep(0.3)
            assert "OLD" not in json.dumps(second.parts) and second.late_parts == 0
    assert [e["sessionId"] for e in agent.events("session_new")] == ["s1", "s2"]
    assert not agent.events("session_resume")
    # Closed at the drain deadline where offered (s2 is closed too, when the daemon exits).
    assert [e["sessionId"] for e in agent.events("session_close")][:1] == (["s1"] if caps == "resume_and_close" else [])
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s2"]
    context = prompts[1]["blocks"][0]["text"]
    assert context.startswith(CONTEXT_OPEN) and "stream please" in context and prompts[1]["blocks"][-1]["text"] == "and now?"
    prompts_never_overlap(agent)


async def test_a_stopped_turn_that_ends_when_its_session_is_closed_is_taken_up_again(scripted: Any, daemon: Any) -> None:
    """The agent ignores the cancel, but its session/close ends the turn: the same ACP
    session is resumed once that prompt has been answered (the agent keeps its memory),
    and only the new words are prompted."""
    agent = scripted({"initialize": RESUMABLE, "turns": [old_turn(30), NEW_TURN], "ignore_cancel": True})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], env={"LMBRIDGE_DRAIN_TIMEOUT": "0.5"}) as c:
            _, second = await stop_then_ask_again(c, agent)
            ok(second)
            assert text_of(second) == NEW_TEXT
    assert [e["sessionId"] for e in agent.events("session_new")] == ["s1"]
    assert [e["sessionId"] for e in agent.events("session_close")][:1] == ["s1"]
    assert [e["sessionId"] for e in agent.events("session_resume")] == ["s1"]
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s1"] and prompts[1]["text"] == "and now?"
    events = [e["event"] for e in agent.events() if e["event"] in ("prompt", "prompt_answered", "session_close", "session_resume")]
    # Resumed only once the old prompt was answered (the close ended it), then prompted.
    assert events.index("session_close") < events.index("session_resume") and events.index("prompt_answered") < events.index("session_resume"), events
    assert events[events.index("session_resume") + 1] == "prompt", events
    prompts_never_overlap(agent)
