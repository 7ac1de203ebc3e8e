"""A stuck agent process never blocks other chats (docs/sessions.md, "A stuck agent
process"), through the daemon with the scripted agent (``freeze_at_new``: the process's
n-th ``session/new`` freezes it whole) and the hostile agent (``silent-init``).

The daemon's bounds are made short here (``LMBRIDGE_SESSION_TIMEOUT``,
``LMBRIDGE_START_TIMEOUT``); each test's own bound is ``LIMIT``, over 10x what it takes
on an idle machine.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import anyio
import pytest
from conftest import ROOT, alive
from test_daemon import eventually, ok

from lmbridge.devtools.client import assistant, text_of, user

pytestmark = pytest.mark.anyio

LIMIT = 120  # seconds a test may take (each under 8 on an idle machine, most of it the daemon's bounds)
SESSION = "3"  # seconds the daemon gives a running process to answer a session request
RESUME = {"agentCapabilities": {"sessionCapabilities": {"resume": {}, "close": {}}}}


async def test_a_frozen_shared_process_is_replaced_and_the_new_chat_answered(scripted: Any, daemon: Any) -> None:
    agent = scripted({"initialize": RESUME, "freeze_at_new": 2, "pid_session_ids": True, "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], env={"LMBRIDGE_SESSION_TIMEOUT": SESSION}) as c:
            first = await c.chat(agent.id, [user("alpha")])
            ok(first)
            began = time.monotonic()
            second = await c.chat(agent.id, [user("bravo")])  # its session/new freezes the shared process
            waited = time.monotonic() - began
            ok(second)
            assert text_of(second) == "ok"
            first_pid, new_pid = agent.pids()
            assert [e["pid"] for e in agent.events("frozen")] == [first_pid]
            await eventually(lambda: not alive(first_pid), what="the frozen process stopped")
            # The first chat, idle meanwhile, goes on in its own session, taken up on the new process.
            again = await c.chat(agent.id, [user("alpha"), assistant(first.parts), user("alpha again")])
            ok(again)
    assert waited >= float(SESSION)  # the bound, once: then a new process answered
    alpha = f"s1-{first_pid}"
    (resumed,) = agent.frames("session/resume")
    assert resumed["pid"] == new_pid and resumed["params"]["sessionId"] == alpha
    assert [(p["pid"], p["sessionId"], p["text"]) for p in agent.prompts()] == [
        (first_pid, alpha, "alpha"), (new_pid, f"s1-{new_pid}", "bravo"), (new_pid, alpha, "alpha again"),
    ]


async def test_a_chat_streaming_on_a_frozen_process_is_told_once_by_name(scripted: Any, daemon: Any) -> None:
    agent = scripted({"freeze_at_new": 2, "turns": [[{"text": "Streaming..."}, {"sleep": 60}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], env={"LMBRIDGE_SESSION_TIMEOUT": SESSION}) as c:
            streaming = await c.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": [user("long one")]})
            await eventually(lambda: agent.events("prompt"), timeout=LIMIT, what="the first chat streaming")
            agent.write({"default_turn": [{"text": "ok"}]})  # the process that replaces it answers at once
            other = await c.chat(agent.id, [user("new chat")])
            ok(other)
            await streaming.done.wait()
    assert streaming.error is not None, "the streaming chat was never told"
    message = streaming.error.message
    assert agent.id in message and "did not answer session/new" in message and f"{SESSION} s" in message, message
    assert text_of(streaming).count("did not answer") == 0  # told once: in the error, not also in the text


async def test_a_session_new_never_answered_says_what_it_waited_on(scripted: Any, daemon: Any) -> None:
    agent = scripted({"freeze_at_new": 1})
    env = {"LMBRIDGE_SESSION_TIMEOUT": SESSION, "LMBRIDGE_START_NOTICE": "0.2", "LMBRIDGE_START_PROGRESS": "1"}
    with anyio.fail_after(LIMIT):
        async with daemon([agent], env=env) as c:
            call = await c.chat(agent.id, [user("hi")])
    assert call.error is not None and agent.id in call.error.message and f"did not answer session/new within {SESSION} s" in call.error.message, call.error
    assert len(agent.pids()) == 1  # its own start froze it: the agent's fault, not retried
    shown = text_of(call)
    assert shown.startswith(f"_Starting {agent.id}…_") and "still waiting after" in shown, shown


async def test_an_initialize_never_answered_shows_progress_then_says_so(daemon: Any, tmp_path: Any) -> None:
    spec = {"id": "silent", "command": sys.executable, "args": [str(ROOT / "tests" / "agents" / "hostile_agent.py"), "silent-init", "--log", str(tmp_path / "h-{pid}.jsonl")]}
    env = {"LMBRIDGE_START_TIMEOUT": "4", "LMBRIDGE_START_NOTICE": "0.2", "LMBRIDGE_START_PROGRESS": "1"}
    with anyio.fail_after(LIMIT):
        async with daemon([spec], env=env) as c:
            call = await c.chat("silent", [user("hi")])
            # A new chat after it starts a new process (the silent one was stopped).
            again = await c.chat("silent", [user("hi again")])
    assert call.error is not None and "'silent' did not answer initialize within 4 s" in call.error.message, call.error
    assert "still waiting after 1 s" in text_of(call), text_of(call)
    assert again.error is not None and "initialize" in again.error.message
