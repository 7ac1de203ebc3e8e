"""``acp.lifecycle``: a chat's ACP session started, recovered and closed (``SessionLife``)
against the scripted agent, with no session actor: a start is begun with
``TaskGroup.start()`` and its outcome comes as one ``Started``; a close waits for the
prompt's answer on an event (``Prompts.answered``), not longer, and at most ``CLOSE_GRACE``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from test_acp_session import FakeHost, Mailbox, pool

from lmbridge.acp import lifecycle
from lmbridge.acp.lifecycle import Prompts, SessionLife, Started
from lmbridge.acp.process import AgentPool
from lmbridge.acp.session import AcpSession, Opened
from lmbridge.core.messages import AgentSpec, ToolInfo
from lmbridge.tools.chat_tools import ChatTools

pytestmark = pytest.mark.anyio

LIMIT = 60  # seconds a test may take (each needs under 2 on an idle machine)
CLOSE = {"initialize": {"agentCapabilities": {"sessionCapabilities": {"resume": {}, "close": {}}}}}


class Life:
    """A ``SessionLife`` on a pool's process, what it delivered and told."""

    def __init__(self, p: AgentPool, agent: Any, *, resume: str | None = None, after: tuple[anyio.Event, ...] = ()) -> None:
        self.box = Mailbox()
        self.host = FakeHost()
        self.calls: list[Any] = []
        self.opened: list[Opened] = []
        spec = AgentSpec(**agent.spec)
        process = p.process(spec, str(agent.dir))
        self.acp = AcpSession(process, self.box.send)

        async def host() -> Any:
            return self.host

        self.tools = ChatTools("chat-1", (), (), host, self.calls.append)
        self.life = SessionLife("chat-1", self.acp, process, spec, self.tools, deliver=self.box.send.send_nowait, opened=self.opened.append, after=after, resume=resume)

    async def started(self) -> Started:
        (got,) = await self.box.until(lambda item: isinstance(item, Started))
        assert isinstance(got, Started)
        return got


@asynccontextmanager
async def life(agent: Any, **kw: Any) -> AsyncIterator[tuple[Life, anyio.abc.TaskGroup]]:
    async with pool() as p, anyio.create_task_group() as tg:
        yield Life(p, agent, **kw), tg
        tg.cancel_scope.cancel()


TOOL = ToolInfo(name="search", description="Search the workspace", inputSchema={"type": "object", "properties": {}})


async def test_a_start_is_begun_with_taskgroup_start_and_its_outcome_comes_as_one_started(scripted: Any) -> None:
    """The start runs in a child task (the caller goes on while it waits for the sessions
    closed for the cap); then the session is opened with the chat's tools endpoint and
    ``Started`` carries it; the history is told of it first."""
    agent = scripted({})
    gate = anyio.Event()
    with anyio.fail_after(LIMIT):
        async with life(agent, after=(gate,)) as (s, tg):
            await s.life.start(tg, (TOOL,))
            assert s.life.starting() and s.acp.step == "the sessions closed to make room for it"
            gate.set()
            got = await s.started()
            assert not s.life.starting()
    assert got.error is None and got.opened is not None and (got.opened.session_id, got.opened.how) == ("s1", "new")
    assert s.opened == [got.opened]
    (new,) = agent.events("session_new")
    assert [server["name"] for server in new["mcpServers"]] == ["vscode"] and s.tools.bridge is not None
    assert list(s.tools.bridge.tools) == ["search"] and list(s.host.bridges) == ["chat-1"]


async def test_a_start_the_agent_refuses_for_a_login_says_so_and_keeps_its_data(scripted: Any) -> None:
    agent = scripted({"initialize": {"authMethods": [{"id": "oauth", "name": "Log in"}]}, "auth_required": {"message": "Authentication required"}})
    with anyio.fail_after(LIMIT):
        async with life(agent) as (s, tg):
            await s.life.start(tg, ())
            got = await s.started()
    assert got.opened is None and got.named and got.error is not None and "log" in got.error.lower()
    assert s.life.auth is not None and s.opened == []


async def test_a_cancelled_start_delivers_nothing(scripted: Any) -> None:
    agent = scripted({})
    with anyio.fail_after(LIMIT):
        async with life(agent, after=(anyio.Event(),)) as (s, tg):
            await s.life.start(tg, ())
            s.life.cancel()
            await anyio.sleep(0.2)
            assert not s.life.starting()
            with pytest.raises(anyio.WouldBlock):
                s.box.receive.receive_nowait()


@pytest.mark.parametrize("take_up", [True, False])
async def test_recover_takes_the_session_up_again_or_leaves_it_for_a_fresh_one(scripted: Any, take_up: bool) -> None:
    agent = scripted(CLOSE)
    with anyio.fail_after(LIMIT):
        async with life(agent, resume="old-1") as (s, tg):
            await s.life.start(tg, ())
            first = await s.started()
            await s.life.recover(tg, close=True, take_up=take_up)
            second = await s.started()
    assert first.opened is not None and (first.opened.session_id, first.opened.how) == ("old-1", "session/resume")
    assert [f["params"]["sessionId"] for f in agent.frames("session/close")] == ["old-1"]
    assert second.opened is not None
    if take_up:
        assert (second.opened.session_id, second.opened.how, second.opened.lost) == ("old-1", "session/resume", False)
    else:  # left for good, its prompt open: a fresh session told the conversation
        assert (second.opened.session_id, second.opened.how, second.opened.lost) == ("s1", "new", True)
        assert s.acp.left == ["old-1"]
    assert s.opened == [first.opened, second.opened]


async def test_close_then_goes_on_as_soon_as_the_prompts_answer_is_read(scripted: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """After ``session/close``, the prompt's answer is awaited on its event: ``then`` runs
    the moment it is read, and without it, after ``CLOSE_GRACE``."""
    monkeypatch.setattr(lifecycle, "CLOSE_GRACE", 3.0)
    agent = scripted(CLOSE)
    prompts = Prompts()
    prompts.add(41, 7)
    done: list[float] = []

    async def until_done() -> float:
        while not done:
            await anyio.sleep(0.01)
        return done.pop()

    with anyio.fail_after(LIMIT):
        async with life(agent) as (s, tg):
            await s.life.start(tg, ())
            await s.started()
            tg.start_soon(s.life.close_then, prompts.answered(7), lambda: done.append(time.monotonic()))
            while not agent.frames("session/close"):
                await anyio.sleep(0.01)
            await anyio.sleep(0.1)
            assert not done  # closed, the prompt's answer not read yet
            read = time.monotonic()
            assert prompts.pop(41) == 7
            assert await until_done() - read < 1.0  # well before the grace
            began = time.monotonic()
            tg.start_soon(s.life.close_then, prompts.answered(8), lambda: done.append(time.monotonic()))  # a prompt none awaits
            assert await until_done() - began < 1.0
            prompts.add(42, 9)  # never answered: the grace is the bound
            began = time.monotonic()
            tg.start_soon(s.life.close_then, prompts.answered(9), lambda: done.append(time.monotonic()))
            assert await until_done() - began >= 3.0


def test_prompts_an_answer_read_sets_its_event_once_no_longer_awaited() -> None:
    prompts = Prompts()
    assert prompts.pop(1) is None and prompts.pop(1, 5) == 5  # no prompt awaits: the default
    assert prompts.answered(3).is_set()  # none awaited: set already
    prompts.add(10, 3)
    prompts.add(11, 4)
    three, four = prompts.answered(3), prompts.answered(4)
    assert not three.is_set() and not four.is_set() and prompts.answered(3) is three
    assert prompts.pop(11) == 4 and four.is_set() and not three.is_set()
    assert prompts.pop(11) is None  # read once
    assert prompts.pop(10) == 3 and three.is_set()
