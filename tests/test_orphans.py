"""Nothing outlives the daemon, and nothing the agent asked is left unanswered
(docs/reliability.md, "Nothing outlives the daemon", "Nothing left unanswered").

- A daemon killed with SIGKILL (no chance to stop anything itself): the commands it ran
  for an agent (``terminal/create``), with what they started in their process group, and
  its agents, even one that ignores EOF and SIGTERM, end all the same (``acp.watchdog``).
- An agent's ``fs/*`` request waiting on a shim that never answers, or a
  ``terminal/wait_for_exit`` on a command that never ends, when its session closes: each
  is answered once, with an error, and the shim's request is dropped (its late answer
  is a response to no request).

Times are measured and printed (``-s``), never asserted tight: each bound is generous
(docs/reliability.md, "Tests under load").
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from lmbridge.core.errors import CLIENT_GONE
from lmbridge.core.errors import REFUSED as SESSION_ENDED
from lmbridge.devtools.client import text_of, user
from tests.conftest import alive
from tests.test_hostile_agent import Hostile
from tests.test_terminals import approved, ask

pytestmark = pytest.mark.anyio

LIMIT = 120  # seconds, each test (~3 s idle)
#: Seconds the processes a SIGKILLed daemon left may take to end: ~0.05 s idle for a
#: command that ends on SIGTERM, ~2 s for one that ignores it (the watchdog's grace).
GONE_BOUND = 60.0
PY = sys.executable


def cmdline_pids(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker``."""
    out = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in path.read_bytes() and alive(int(path.parent.name)):
                out.append(int(path.parent.name))
        except (OSError, ValueError):
            continue
    return out


async def until_gone(pids: list[int], bound: float, start: float | None = None) -> float:
    """Seconds from ``start`` (``time.monotonic()``, else now) until every one of ``pids``
    has ended; fails past ``bound``."""
    start = time.monotonic() if start is None else start
    with anyio.fail_after(bound):
        while any(alive(pid) for pid in pids):
            await anyio.sleep(0.01)
    return time.monotonic() - start


def results(agent: Any) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in agent.events("client_result")}


# ------------------------------------------------------------ a daemon killed with SIGKILL


async def test_a_daemon_killed_with_sigkill_leaves_no_command_running(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """A command run through ``terminal/create`` that sleeps and has started a helper in its
    group that sleeps too: SIGKILL the daemon, and both end."""
    marker = f"lmbridge-orphan-{os.getpid()}-{time.monotonic_ns()}"
    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1] + '-helper'])\n"
        "time.sleep(300)\n"
    )
    run = {"command": PY, "args": ["-c", script, marker]}
    agent = scripted({"turns": [[
        ask(run),  # asked first: lmbridge runs only what the user approved
        {"await": ["p1"]},
        {"client": {"method": "terminal/create", "params": run}, "id": "c1"},
        {"client_await": "c1"},
        {"text": "started"},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            call = await c.chat(agent.id, await approved(c, agent.id))
            assert call.error is None and "started" in text_of(call), call.error
            assert "terminalId" in results(agent)["c1"]["result"]
            while len(running := cmdline_pids(marker)) < 2:  # the command and its helper
                await anyio.sleep(0.02)
            agents = agent.pids()
            assert agents and all(alive(pid) for pid in agents)
            killed = time.monotonic()
            os.kill(c.process.pid, signal.SIGKILL)
            await c.process.wait()
            took = await until_gone(running, GONE_BOUND, killed)
            print(f"\ncommand and its helper gone {took * 1000:.1f} ms after the daemon's SIGKILL")
            await until_gone(agents, GONE_BOUND)  # the agent too (its stdin's EOF, the watchdog's SIGTERM)
    assert cmdline_pids(marker) == []


async def test_a_daemon_killed_with_sigkill_leaves_no_agent_running(daemon: Any, tmp_path: Path) -> None:
    """An agent that ignores EOF and SIGTERM outlives a SIGKILLed daemon by the watchdog's
    grace only: it is killed."""
    agent = Hostile(tmp_path, "ignore-signals")
    with anyio.fail_after(LIMIT):
        async with daemon(agents=[agent.spec]) as c:
            call = await c.chat(agent.id, [user("hi")])
            assert text_of(call) == "ok", call.error
            pids = [int(p.stem.rsplit("-", 1)[1]) for p in tmp_path.glob("ignore-signals-*.jsonl")]
            assert pids and all(alive(pid) for pid in pids)
            killed = time.monotonic()
            os.kill(c.process.pid, signal.SIGKILL)
            await c.process.wait()
            took = await until_gone(pids, GONE_BOUND, killed)
            print(f"\nan agent ignoring EOF and SIGTERM gone {took * 1000:.1f} ms after the daemon's SIGKILL")


# ------------------------------------------------------------ requests in flight at a session's end


async def test_a_file_request_waiting_on_a_silent_shim_is_answered_when_its_session_closes(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """The shim serves ``fs`` but never answers ``client/readTextFile``; the chat's session is
    evicted (idle) while the agent waits: the agent gets an error naming the session's end
    (not the shim's 30 s timeout, not nothing), and the shim's request is dropped: its late
    answer is a response to no request."""
    (tmp_path / "a.txt").write_text("text\n")
    agent = scripted({"turns": [[
        {"answer": "end_turn"},
        {"client": {"method": "fs/read_text_file", "params": {"path": str(tmp_path / "a.txt")}}, "id": "r"},
        {"client_await": "r"},
    ]]})  # fmt: skip
    asked: list[str] = []
    release = anyio.Event()

    async def never(method: str, params: Any) -> Any:
        asked.append(method)
        await release.wait()
        return {"content": "late\n"}

    with anyio.fail_after(LIMIT):
        async with daemon([agent], initialize=False, args=["--idle-timeout", "1"]) as c:
            c.on_request = never
            await c.initialize(workspace=[str(tmp_path)], agents=[agent.spec], capabilities={"fs": True})
            call = await c.chat(agent.id, [user("read it")])
            assert call.error is None
            while "r" not in results(agent):
                await anyio.sleep(0.05)
            assert asked == ["client/readTextFile"]
            release.set()  # now the shim answers: too late, for no request
            with anyio.fail_after(30):
                while "a response to no request" not in (tmp_path / "daemon.stderr").read_text():
                    await anyio.sleep(0.05)
    (answer,) = [e for e in agent.events("client_result") if e["id"] == "r"]
    assert "result" not in answer
    assert answer["error"]["code"] == SESSION_ENDED and "session has ended" in answer["error"]["message"], answer
    assert "session evicted" in (tmp_path / "daemon.stderr").read_text()


async def test_a_file_request_waiting_on_a_silent_shim_is_answered_at_the_daemons_shutdown(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """The shim never answers ``client/readTextFile`` and then closes the daemon's stdin: the
    agent's request is answered once, with an error, before the agent is stopped."""
    (tmp_path / "a.txt").write_text("text\n")
    agent = scripted({"turns": [[
        {"answer": "end_turn"},
        {"client": {"method": "fs/read_text_file", "params": {"path": str(tmp_path / "a.txt")}}, "id": "r"},
        {"client_await": "r"},
    ]]})  # fmt: skip
    asked = anyio.Event()

    async def never(method: str, params: Any) -> Any:
        asked.set()
        await anyio.sleep_forever()

    with anyio.fail_after(LIMIT):
        async with daemon([agent], initialize=False) as c:
            c.on_request = never
            await c.initialize(workspace=[str(tmp_path)], agents=[agent.spec], capabilities={"fs": True})
            call = await c.chat(agent.id, [user("read it")])
            assert call.error is None
            await asked.wait()
            assert "r" not in results(agent)
        # The daemon has ended (its stdin closed), the agent with it.
    answers = [e for e in agent.events("client_result") if e["id"] == "r"]
    assert len(answers) == 1 and "result" not in answers[0], answers
    assert answers[0]["error"]["code"] in (SESSION_ENDED, CLIENT_GONE), answers


async def test_a_wait_for_exit_on_a_command_that_never_ends_is_answered_when_its_session_closes(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """``terminal/wait_for_exit`` on a command that never ends, the session evicted: the
    wait is answered once and the command is killed."""
    pid_file = tmp_path / "pid"
    script = f"import os, pathlib, time\npathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\ntime.sleep(300)\n"
    run = {"command": PY, "args": ["-c", script]}
    agent = scripted({"turns": [[
        ask(run),  # asked first: lmbridge runs only what the user approved
        {"await": ["p1"]},
        {"client": {"method": "terminal/create", "params": run}, "id": "c1"},
        {"client_await": "c1"},
        {"answer": "end_turn"},
        {"client": {"method": "terminal/wait_for_exit", "params": {"terminalId": "$c1.terminalId"}}, "id": "w"},
        {"client_await": "w"},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with daemon([agent], args=["--idle-timeout", "1"]) as c:
            call = await c.chat(agent.id, await approved(c, agent.id))
            assert call.error is None
            while not pid_file.exists() or not pid_file.read_text():
                await anyio.sleep(0.02)
            pid = int(pid_file.read_text())
            while "w" not in results(agent):
                await anyio.sleep(0.05)
            await until_gone([pid], GONE_BOUND)
    answers = [e for e in agent.events("client_result") if e["id"] == "w"]
    assert len(answers) == 1, answers
    assert answers[0]["error"]["code"] == SESSION_ENDED and "terminal/wait_for_exit" in answers[0]["error"]["message"], answers


async def test_requests_the_agent_sends_while_its_session_closes_are_answered(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """An agent asked to close a session (eviction) sends requests for it before answering:
    they reach the session as it closes, never read as a turn's; each is answered once (a
    permission ``cancelled``, anything else -32000), none dropped."""
    (tmp_path / "a.txt").write_text("text\n")
    permission = {
        "toolCall": {"toolCallId": "t9", "title": "Edit a.txt", "kind": "edit"},
        "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}, {"optionId": "reject", "name": "Reject", "kind": "reject_once"}],
    }
    agent = scripted({
        "initialize": {"agentCapabilities": {"sessionCapabilities": {"close": {}}}},
        "turns": [[{"text": "done"}]],
        "on_close_client": [
            {"method": "fs/read_text_file", "params": {"path": str(tmp_path / "a.txt")}},
            {"method": "session/request_permission", "params": permission},
            {"method": "terminal/output", "params": {"terminalId": "term-1"}},
        ],
    })  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with daemon([agent], args=["--idle-timeout", "1"]) as c:
            call = await c.chat(agent.id, [user("hi")])
            assert call.error is None
            while len(results(agent)) < 3:
                await anyio.sleep(0.05)
    answers = agent.events("client_result")
    assert sorted(e["id"] for e in answers) == ["close-0", "close-1", "close-2"], answers  # once each
    r = results(agent)
    assert r["close-1"]["result"] == {"outcome": {"outcome": "cancelled"}}
    for handle in ("close-0", "close-2"):
        assert "result" not in r[handle] and r[handle]["error"]["code"] == SESSION_ENDED, r[handle]
    assert agent.events("session_close")


# ------------------------------------------------------------ the watchdog's own rule


def test_the_watchdog_ends_the_groups_still_listed_and_only_those(tmp_path: Path) -> None:
    """``watchdog.watch`` on a pipe: a group listed (``+``) is ended at end-of-file, one
    delisted (``-``) after is left alone (its id may belong to another group by then), and
    lines it cannot read change nothing."""
    import subprocess
    import threading

    from lmbridge.acp import watchdog

    listed = subprocess.Popen(["sleep", "300"], start_new_session=True)
    delisted = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        read, write = os.pipe()
        done = threading.Event()

        def run() -> None:
            watchdog.watch(read)
            done.set()

        threading.Thread(target=run, daemon=True).start()
        os.write(write, f"+{listed.pid}\n+{delisted.pid}\n-{delisted.pid}\n+1\n+-1\nnonsense\n+".encode())
        os.close(write)
        assert done.wait(GONE_BOUND)
        os.close(read)
        assert listed.wait(GONE_BOUND) == -signal.SIGTERM
        assert delisted.poll() is None
    finally:
        for p in (listed, delisted):
            p.kill()
            p.wait()


def test_the_watchdog_is_never_counted_among_a_daemons_agents() -> None:
    """The tests' view of a daemon's agents (``children``, ``agents_of``) leaves out its
    watchdog. Its starter is the daemon's child from the first agent's spawn until it has
    forked the watchdog and exited, ~15 ms idle but seconds on a loaded machine; counted as
    an agent, it "outlived the daemon" (the watchdog ends when it reads end-of-file) or made
    one agent two. Here this process plays the daemon, its starter held (SIGSTOP) where a
    busy machine's scheduler held it: before its fork."""
    import subprocess

    from lmbridge.acp import watchdog
    from tests.conftest import children, is_watchdog
    from tests.fuzz.peer import agents_of, descendants

    starter = subprocess.Popen([sys.executable, "-I", "-S", watchdog.__file__], stdin=subprocess.PIPE, start_new_session=True)
    os.kill(starter.pid, signal.SIGSTOP)
    agent = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        assert alive(starter.pid) and starter.pid in descendants(os.getpid())  # held before its fork
        assert is_watchdog(starter.pid) and not is_watchdog(agent.pid)
        assert starter.pid not in children(os.getpid()) and agent.pid in children(os.getpid())
        assert starter.pid not in agents_of(os.getpid()) and agent.pid in agents_of(os.getpid())
    finally:
        os.kill(starter.pid, signal.SIGCONT)
        assert starter.stdin is not None
        starter.stdin.close()  # the watchdog it forks reads end-of-file: nothing listed, it exits
        assert starter.wait(GONE_BOUND) == 0
        agent.kill()
        agent.wait()
