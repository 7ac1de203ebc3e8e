"""``acp.session.AcpSession`` against the scripted agent, with no session actor: how a
session is opened (New, Resume, TakeSpare), prompted, cancelled, configured and closed, on
a process of the pool (``acp.process``), its frames routed by sessionId to a mailbox.
"""

from __future__ import annotations

import math
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from conftest import ScriptedAgent

from lmbridge.acp.connection import AgentError, Incoming, Response
from lmbridge.acp.process import AgentGone, AgentPool, AgentStuck
from lmbridge.acp.session import AcpSession, New, Resume, TakeSpare, probe
from lmbridge.core.messages import AgentSpec

pytestmark = pytest.mark.anyio

LIMIT = 60  # seconds a test may take (each needs under 2 on an idle machine)
CAPS = {
    "resume": {"agentCapabilities": {"sessionCapabilities": {"resume": {}, "close": {}}}},
    "load": {"agentCapabilities": {"loadSession": True}},
    "neither": {},
}


async def no_servers() -> list[dict[str, Any]]:
    return []


class Mailbox:
    """A session's mailbox: what the process routed to it, in order."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[Any](math.inf)

    async def until(self, done: Callable[[Any], bool]) -> list[Any]:
        got = []
        async for item in self.receive:
            got.append(item)
            if done(item):
                return got
        raise AssertionError("mailbox closed")


class FakeHost:
    """The McpHost a spare's tools endpoint is registered with: its config names it only."""

    def __init__(self) -> None:
        self.bridges: dict[str, Any] = {}

    async def add(self, bridge: Any) -> None:
        self.bridges[bridge.session_id] = bridge

    def remove(self, session_id: str) -> None:
        self.bridges.pop(session_id, None)

    def server_config(self, bridge: Any) -> dict[str, Any]:
        return {"name": bridge.name, "command": sys.executable, "args": ["-c", "pass"], "env": []}


@asynccontextmanager
async def pool(**kw: Any) -> AsyncIterator[AgentPool]:
    p = AgentPool(**kw)
    async with anyio.create_task_group() as tg:
        await tg.start(p.run)
        try:
            yield p
        finally:
            await p.aclose()


def session(p: AgentPool, agent: ScriptedAgent) -> tuple[AcpSession, Mailbox]:
    box = Mailbox()
    return AcpSession(p.process(AgentSpec(**agent.spec), str(agent.dir)), box.send), box


async def test_new_opens_a_session_and_its_prompt_answer_follows_its_updates(scripted: Any) -> None:
    agent = scripted({"turns": [[{"text": "Hello"}, {"text": " there"}]]})
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            s, box = session(p, agent)
            await s.connect()
            assert s.step == "initialize"
            opened = await s.open(New(), no_servers)
            assert (opened.session_id, opened.how, opened.lost, opened.resumable) == ("s1", "new", False, False)
            assert s.id == "s1" and s.step == "session/new"
            rid, write = s.prompt([{"type": "text", "text": "hi"}])
            assert s.conn is not None
            await write(s.conn)
            got = await box.until(lambda item: isinstance(item, Response))
    updates = [i.params["update"]["content"]["text"] for i in got if isinstance(i, Incoming) and i.method == "session/update"]
    assert updates == ["Hello", " there"] and got[-1].id == rid and got[-1].result == {"stopReason": "end_turn"}
    (new,) = agent.events("session_new")
    assert new["cwd"] == str(agent.dir) and new["mcpServers"] == []
    (prompt,) = agent.prompts()
    assert prompt["sessionId"] == "s1" and prompt["text"] == "hi"


@pytest.mark.parametrize("caps", list(CAPS))
async def test_resume_takes_the_session_up_as_the_agent_offers(scripted: Any, caps: str) -> None:
    agent = scripted({"initialize": CAPS[caps]})
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            s, box = session(p, agent)
            await s.connect()
            opened = await s.open(Resume("old-7"), no_servers)
    if caps == "neither":  # nothing to take it up with: a fresh session, the chat's turns lost
        assert (opened.session_id, opened.how, opened.lost) == ("s1", "new", True)
        assert not agent.frames("session/resume") and not agent.frames("session/load")
    else:
        method = {"resume": "session/resume", "load": "session/load"}[caps]
        assert (opened.session_id, opened.how, opened.lost, opened.resumable) == ("old-7", method, False, True)
        (frame,) = agent.frames(method)
        assert frame["params"]["sessionId"] == "old-7" and frame["params"]["cwd"] == str(agent.dir)
        assert not agent.events("session_new")
    if caps == "load":  # its replay came to the session's mailbox (the caller does not show it)
        replay = [box.receive.receive_nowait(), box.receive.receive_nowait()]
        assert [r.params["sessionId"] for r in replay] == ["old-7", "old-7"]


async def test_a_refused_resume_falls_back_to_load_then_to_a_fresh_session(scripted: Any) -> None:
    both = {"agentCapabilities": {"loadSession": True, "sessionCapabilities": {"resume": {}}}}
    agent = scripted({"initialize": both, "refuse": ["session/resume"]})
    other = scripted({"initialize": both, "refuse": ["session/resume", "session/load"]})
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            s, _ = session(p, agent)
            await s.connect()
            assert (await s.open(Resume("x"), no_servers)).how == "session/load"
            t, _ = session(p, other)
            await t.connect()
            opened = await t.open(Resume("x"), no_servers)
            assert (opened.how, opened.lost) == ("new", True)
            assert "x" not in t.process.sessions  # the refused session routes nothing


async def test_new_authenticates_with_a_method_that_needs_nobody_and_tries_once_more(scripted: Any) -> None:
    methods = [{"type": "env_var", "id": "key", "name": "Use KEY", "vars": [{"name": "LMBRIDGE_TEST_KEY"}]}]
    agent = scripted({"initialize": {"authMethods": methods}, "auth_required": {"message": "Authentication required"}})
    spec = {**agent.spec, "env": {"LMBRIDGE_TEST_KEY": "k"}}
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            s = AcpSession(p.process(AgentSpec(**spec), str(agent.dir)), Mailbox().send)
            await s.connect()
            assert (await s.open(New(), no_servers)).session_id == "s1"
    assert [e["methodId"] for e in agent.events("authenticate")] == ["key"]
    # Without the key, the refusal is the caller's to report.
    bare = scripted({"initialize": {"authMethods": methods}, "auth_required": {"message": "Authentication required"}})
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            s, _ = session(p, bare)
            await s.connect()
            with pytest.raises(AgentError) as err:
                await s.open(New(), no_servers)
    assert err.value.code == -32000 and not bare.events("authenticate")


async def test_config_options_are_learnt_and_only_changes_are_set(scripted: Any) -> None:
    options = [
        {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "a", "options": [{"value": "a", "name": "A"}, {"value": "b", "name": "B"}]},
        {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "ask", "options": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}]},
    ]
    agent = scripted({"config_options": options})
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            s, _ = session(p, agent)
            await s.connect()
            await s.open(New(), no_servers)
            assert (s.model_option, s.mode_option) == ("model", "mode")
            assert s.wanted("a", "ask") == {} and s.wanted("b", None) == {"model": "b"}
            learnt = await s.set_config_option("model", "b")
            assert s.config_values["model"] == "b" and isinstance(learnt, list)
            assert s.wanted("b", "code") == {"mode": "code"}
    (logged,) = agent.events("set_config_option")
    assert (logged["sessionId"], logged["configId"], logged["value"]) == ("s1", "model", "b")


@pytest.mark.parametrize("offered", [True, False])
async def test_cancel_and_close(scripted: Any, offered: bool) -> None:
    agent = scripted({"initialize": CAPS["resume" if offered else "neither"], "turns": [[{"text": "..."}, {"sleep": 30}]]})
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            s, box = session(p, agent)
            conn = await s.connect()
            await s.open(New(), no_servers)
            _, prompt = s.prompt([{"type": "text", "text": "go"}])
            await prompt(conn)
            await box.until(lambda item: isinstance(item, Incoming))  # streaming
            await s.cancel()(conn)
            got = await box.until(lambda item: isinstance(item, Response))
            assert got[-1].result == {"stopReason": "cancelled"}
            await s.close(timeout=LIMIT)
            assert s.id == "s1"  # kept: it may be taken up again
            s.detach()
            assert s.id is None and "s1" not in s.process.sessions
    (cancel,) = agent.events("cancel")
    assert cancel["sessionId"] == "s1"
    assert [e["sessionId"] for e in agent.events("session_close")] == (["s1"] if offered else [])


async def test_spare_takes_the_session_opened_ahead_else_opens_one(scripted: Any) -> None:
    agent = scripted({})
    host = FakeHost()

    async def mcp_host() -> FakeHost:
        return host

    asked: list[int] = []

    async def servers() -> list[dict[str, Any]]:
        asked.append(1)
        return []

    with anyio.fail_after(LIMIT):
        async with pool(spares=True, mcp_host=mcp_host) as p:
            s, _ = session(p, agent)
            await s.connect()
            first = await s.open(TakeSpare(), servers)  # none prepared yet: a fresh one, which asks for the next
            assert (first.how, first.spare, asked) == ("new", None, [1])
            t, _ = session(p, agent)
            await t.connect()
            second = await t.open(TakeSpare(), servers)
            assert second.how == "spare" and second.spare is not None and asked == [1]  # no mcpServers asked for
            assert second.session_id == t.id != first.session_id and p.process(AgentSpec(**agent.spec), str(agent.dir)).sessions[second.session_id] is t.mailbox
    spare_new = [e for e in agent.events("session_new") if e["sessionId"] == second.session_id]
    # No chat offered tools: the spare has no endpoint, as a session opened for such a chat
    # (and the MCP SDK is not loaded for it: docs/performance.md, "Start-up and idle").
    assert len(spare_new) == 1 and spare_new[0]["mcpServers"] == [] and second.spare.bridge is None


async def test_probe_opens_and_closes_a_session_for_its_config_options(scripted: Any) -> None:
    options = [{"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "a", "options": [{"value": "a", "name": "A"}]}]
    agent = scripted({"initialize": CAPS["resume"], "config_options": options})
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            proc = p.process(AgentSpec(**agent.spec), str(agent.dir))
            conn = await proc.connect(Mailbox().send)
            learnt = await probe(proc, conn, str(agent.dir))
    assert [o["id"] for o in learnt] == ["model"]
    assert [e["sessionId"] for e in agent.events("session_close")] == ["s1"]


async def test_a_session_request_past_the_bound_stops_the_process_as_stuck(scripted: Any) -> None:
    """The scripted agent freezes whole at its second session/new: that request raises
    ``AgentStuck`` naming it, the process is out of the pool at once (the next connect
    starts a new one), and the chat already on it gets ``AgentGone`` with the reason."""
    agent = scripted({"freeze_at_new": 2})
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            first, first_box = session(p, agent)
            await first.connect()
            await first.open(New(), no_servers)
            p.session_timeout = 2.0  # the daemon's is 20 s; here the freeze costs 2
            second, _ = session(p, agent)
            frozen = await second.connect()
            with pytest.raises(AgentStuck) as stuck:
                await second.open(New(), no_servers)
            assert f"agent {agent.id!r} did not answer session/new within 2 s" in str(stuck.value)
            proc = second.process
            assert proc.conn is None and not proc.sessions  # new chats never wait on it
            assert second.replaced() and not first.replaced()  # the one that started it is not retried
            (gone,) = await first_box.until(lambda item: isinstance(item, AgentGone))
            assert gone.conn is frozen and "did not answer session/new" in frozen.describe_exit()
            fresh = await second.connect()
            assert fresh is not frozen and (await second.open(New(), no_servers)).session_id == "s1"
    assert [e["pid"] for e in agent.events("frozen")] == agent.pids()[:1] and len(agent.pids()) == 2


async def test_a_slow_take_up_that_keeps_sending_is_not_stuck(scripted: Any) -> None:
    """Past the session bound, an agent that is still sending (a long session replayed) is
    waited for: stuck is no answer *and* silence for a whole bound."""
    agent = scripted({"initialize": CAPS["load"], "slow_take_up": {"seconds": 8, "every": 0.2}})
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            p.session_timeout = 3.0  # 8 s of replay: well past it, never quiet for it
            s, _ = session(p, agent)
            await s.connect()
            opened = await s.open(Resume("long"), no_servers)
            assert (opened.how, opened.session_id) == ("session/load", "long") and s.process.running
    assert len(agent.pids()) == 1 and not agent.events("frozen")


@pytest.mark.parametrize("name", ["@agentclientprotocol/claude-agent-acp", "some-other-agent"])
async def test_each_opening_carries_the_profiles_session_meta(scripted: Any, name: str) -> None:
    """claude's profile ``session_meta`` (an ask rule for Bash: docs/agents.md, "Modes: who
    approves") goes with its session/new, the spare's and the probe's too, and with
    session/resume and session/load; another agent's carry no ``_meta``."""
    from lmbridge.core.profiles import CLAUDE_ASK_EVERY_COMMAND

    caps = {"agentCapabilities": {"loadSession": True, "sessionCapabilities": {"resume": {}}}, "agentInfo": {"name": name}}
    agent = scripted({"initialize": caps, "refuse": ["session/resume"]})
    with anyio.fail_after(LIMIT):
        async with pool() as p:
            s, _ = session(p, agent)
            await s.connect()
            await s.open(New(), no_servers)
            await probe(s.process, s.conn, str(agent.dir))
            await s.open(Resume("old-7"), no_servers)  # refused resume, then load
    news = [f for f in agent.frames("session/new") if "params" in f]
    takes = [f for m in ("session/resume", "session/load") for f in agent.frames(m) if "params" in f]
    assert len(news) >= 2 and {f["method"] for f in takes} == {"session/resume", "session/load"}  # news: the chat's, the probe's (a spare's)
    want = dict(CLAUDE_ASK_EVERY_COMMAND) if name.startswith("@agentclientprotocol/claude") else None
    assert [f["params"].get("_meta") for f in news + takes] == [want] * len(news + takes)
