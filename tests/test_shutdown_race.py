"""Shutdown races, in-process and in a fixed order (docs/reliability.md, "Shutdown").

stdin's EOF (or SIGTERM) can come while a request read just before it is still on its
way: the history actor still starting (the first chat of a daemon: it reads the session
index in threads first), the request queued in its mailbox behind the shutdown. Each
test below holds the daemon at one such point, closes stdin, and lets it go on: the
request is answered exactly once, with the reason, and nothing is started into a task
group that has closed (which raised "This task group is not active" in the session
actor, and left the agent it had just spawned running).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import alive
from structlog.processors import format_exc_info
from structlog.testing import capture_logs

from lmbridge.acp.connection import AgentConnection, AgentUnavailable
from lmbridge.acp.process import AgentPool
from lmbridge.core.errors import AGENT_FAILED
from lmbridge.core.messages import PROTOCOL_VERSION, AgentSpec
from lmbridge.daemon.methods import SHUTTING_DOWN
from lmbridge.daemon.root import Config, Server
from lmbridge.daemon.session_index import SessionIndex
from lmbridge.daemon.stdio import Stdout
from lmbridge.devtools.client import user

pytestmark = pytest.mark.anyio

LIMIT = 60  # seconds for a whole test; ~0.5 s idle (the ACP imports of a first chat)


class HeldIndex(SessionIndex):
    """A session index whose ``load`` (the history actor's first step) waits for ``release``."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.release = threading.Event()
        self.loading = threading.Event()

    def load(self) -> list[dict[str, Any]]:
        self.loading.set()
        self.release.wait(LIMIT)
        return super().load()


class Daemon:
    """A ``Server`` on in-memory stdio: ``send`` a frame, ``eof()``, read ``frames``."""

    def __init__(self, config: Config) -> None:
        self.server = Server(config)
        self._send, self._receive = anyio.create_memory_object_stream[bytes](math.inf)
        self.frames: list[dict[str, Any]] = []
        self.stdout = Stdout(self._write)

    def _write(self, data: bytes) -> None:
        self.frames += [json.loads(line) for line in data.splitlines() if line.strip()]

    async def lines(self) -> AsyncIterator[bytes]:
        async for line in self._receive:
            yield line

    def send(self, frame: dict[str, Any]) -> None:
        self._send.send_nowait((json.dumps(frame) + "\n").encode())

    def eof(self) -> None:
        self._send.close()

    def answers(self, rid: Any) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("id") == rid and ("result" in f or "error" in f)]


async def until(check: Callable[[], bool], what: str) -> None:
    with anyio.fail_after(LIMIT):
        while not check():
            await anyio.sleep(0.005)


def initialize(daemon: Daemon, agent: Any, workspace: Path) -> None:
    daemon.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL_VERSION, "workspaceFolders": [str(workspace)], "agents": [agent.spec]}})  # fmt: skip


def chat(daemon: Daemon, rid: int, agent: Any, text: str) -> None:
    daemon.send({"jsonrpc": "2.0", "id": rid, "method": "lm/provideLanguageModelChatResponse",
                 "params": {"modelId": agent.id, "messages": [user(text)], "options": {}}})  # fmt: skip


def failures(logs: list[dict[str, Any]]) -> list[str]:
    """Errors logged (a bug: "session actor failed", "frame dispatch failed"...), each with its exception."""
    out = []
    for e in logs:
        if e.get("log_level") in ("error", "critical") or "exc_info" in e:
            out.append(f"{e.get('event')}: {e.get('exception', '')[-300:]}")
    return out


async def test_eof_while_the_history_actor_starts_answers_the_first_chat_and_starts_no_agent(scripted: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [[{"text": "Hi."}]]})
    index = HeldIndex(tmp_path / "state")
    daemon = Daemon(Config(agents=[AgentSpec.model_validate(agent.spec)], index=index))
    with capture_logs([format_exc_info]) as logs, anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.server.serve, daemon.lines(), daemon.stdout)
            initialize(daemon, agent, tmp_path)
            chat(daemon, 1, agent, "hello")
            # The first chat started the history actor, which reads the index (held).
            await until(index.loading.is_set, "the history actor reading the index")
            daemon.eof()
            await until(lambda: daemon.server.shutting_down, "the shutdown")
            await anyio.wait_all_tasks_blocked()  # the shutdown has done all it can meanwhile
            index.release.set()  # the history actor goes on: the chat reaches it now
    assert not failures(logs), failures(logs)
    answers = daemon.answers(1)
    assert len(answers) == 1, f"the chat was answered {len(answers)} times: {answers}"
    assert answers[0].get("error", {}).get("message") == SHUTTING_DOWN, answers[0]
    assert not agent.pids(), "an agent was started after the shutdown began"


async def test_a_chat_queued_behind_the_shutdown_is_answered_once(scripted: Any, tmp_path: Path) -> None:
    """The history actor runs (a first chat answered); the second chat's request is
    read, then EOF: whichever the actor sees first, the chat is answered exactly once
    and no session is opened for it after the shutdown began."""
    agent = scripted({"turns": [[{"text": "Hi."}], [{"text": "Again."}]]})
    daemon = Daemon(Config(agents=[AgentSpec.model_validate(agent.spec)]))
    with capture_logs([format_exc_info]) as logs, anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.server.serve, daemon.lines(), daemon.stdout)
            initialize(daemon, agent, tmp_path)
            chat(daemon, 1, agent, "hello")
            await until(lambda: bool(daemon.answers(1)), "the first answer")
            chat(daemon, 2, agent, "a second chat")
            daemon.eof()
    assert [a.get("result") for a in daemon.answers(1)] == [{"stopReason": "end_turn"}]
    answers = daemon.answers(2)
    assert len(answers) == 1, f"the chat was answered {len(answers)} times: {answers}"
    assert "error" in answers[0], answers[0]
    assert len(agent.pids()) == 1 and len(agent.events("session_new")) == 1
    assert not failures(logs), failures(logs)


async def test_a_closed_pool_starts_no_agent_and_one_spawned_as_it_closes_is_stopped(scripted: Any) -> None:
    """``AgentProcess.connect`` once the pool is closing: refused before anything is
    spawned; and an agent whose spawn was under way when it closed is stopped, not left
    running with nobody reading it (the pool's task group is gone)."""
    agent = scripted({"turns": [[{"text": "Hi."}]]})
    spec = AgentSpec.model_validate(agent.spec)
    spawned = anyio.Event()
    go_on = anyio.Event()

    async def launcher(*args: Any, **kw: Any) -> AgentConnection:
        conn = await AgentConnection.spawn(*args, **kw)
        spawned.set()
        await go_on.wait()  # the pool closes meanwhile
        return conn

    with anyio.fail_after(LIMIT):
        pool = AgentPool(launcher=launcher)
        async with anyio.create_task_group() as tg:
            await tg.start(pool.run)
            proc = pool.process(spec, str(agent.dir))
            failed: list[BaseException] = []

            async def connect() -> None:
                try:
                    await proc.connect(anyio.create_memory_object_stream[Any](math.inf)[0])
                except AgentUnavailable as exc:
                    failed.append(exc)

            tg.start_soon(connect)
            await spawned.wait()
            await pool.aclose()
            go_on.set()
        assert [str(e) for e in failed] == [f"agent {spec.id!r} stopped: the daemon is shutting down"]
        (pid,) = agent.pids()
        await until(lambda: not alive(pid), "the agent spawned as the pool closed to be stopped")
        with pytest.raises(AgentUnavailable, match="not started: the daemon is shutting down"):
            await proc.connect(anyio.create_memory_object_stream[Any](math.inf)[0])
    assert len(agent.pids()) == 1


async def test_a_request_still_running_after_the_shutdown_wait_is_answered_before_it_is_cancelled(tmp_path: Path) -> None:
    """The shutdown waits (5 s) for the requests read before EOF; one still running then
    (here a method that never returns) is answered with the reason, exactly once."""
    daemon = Daemon(Config())

    async def hang(ctx: Any, **params: Any) -> Any:
        await anyio.sleep(math.inf)

    daemon.server.methods.table["test/hang"] = hang
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.server.serve, daemon.lines(), daemon.stdout)
            daemon.send({"jsonrpc": "2.0", "id": "h", "method": "test/hang", "params": {}})
            await until(lambda: "h" in daemon.server.inflight, "the request in flight")
            daemon.eof()
    assert daemon.answers("h") == [{"jsonrpc": "2.0", "error": {"code": AGENT_FAILED, "message": SHUTTING_DOWN}, "id": "h"}]
