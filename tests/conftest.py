"""Shared fixtures: the anyio backend, scripted ACP agents, and the daemon as a subprocess.

``scripted(scenario)`` writes a scenario for ``tests/agents/scripted_agent.py`` and
returns a ``ScriptedAgent`` whose ``spec`` goes into ``initialize.agents`` (its id, the
model id, is unique in the test session). Every agent process started from that spec
logs to its own file (``agent-<pid>.jsonl``), so a test can tell which process (and
which ACP session) received what.

``daemon(...)`` starts ``python -m lmbridge serve`` with a ``DaemonClient`` on its stdio,
its stderr in ``tmp_path/daemon.stderr`` (shown when a test fails): for tests of the
daemon's own lifetime, options, or wire errors.

``shared(...)`` is the same, on one daemon per test module, re-initialized with the
test's agents and workspace: a fresh daemon costs a second of CPU (the ACP SDK's
schema import on the first chat), so conversation tests share one. Their model ids
differ, so their sessions never meet; their agents are checked gone when it exits.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from lmbridge.devtools.client import DaemonClient

# No test writes the session index into the user's state folder (docs/sessions.md, "The session index"): every daemon
# a test starts without its own XDG_STATE_HOME gets this run's scratch one.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="lmbridge-test-state-")

# The stuck-agent bound (docs/reliability.md, "Bounds": 20 s of silence on a session request) is
# a wall-clock bound a busy machine breaks: claude-agent-acp's session/resume takes 2-5 s idle and
# was seen silent 20 s at load 16 on 2 cores. Tests not about stuck agents get 10x and more; those
# that are (tests/test_stuck_agent.py, the hostile agent, the soak) set their own.
os.environ.setdefault("LMBRIDGE_SESSION_TIMEOUT", "120")

ROOT = Path(__file__).resolve().parent.parent

# Hypothesis's default 200 ms deadline per example is a wall-clock bound that a busy CI
# machine breaks (a descheduled example, a GC pause): no test here has one (docs/reliability.md,
# "Tests under load"). Loaded before any test module, so every @settings(...) inherits it.
settings.register_profile("lmbridge", deadline=None)
settings.load_profile("lmbridge")
SCRIPTED_AGENT = ROOT / "tests" / "agents" / "scripted_agent.py"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


_ids = itertools.count(1)


@dataclass
class ScriptedAgent:
    """One scripted agent configuration; every process it starts logs on its own."""

    id: str
    dir: Path
    shared: bool = False  # driven by the module's shared daemon (checked when it exits)

    @property
    def scenario_path(self) -> Path:
        return self.dir / "scenario.json"

    @property
    def spec(self) -> dict[str, Any]:
        """The AgentSpec for ``initialize.agents``."""
        log = str(self.dir / "agent-{pid}.jsonl")
        return {"id": self.id, "command": sys.executable, "args": [str(SCRIPTED_AGENT), str(self.scenario_path), "--log", log]}

    def write(self, scenario: dict[str, Any]) -> None:
        """(Re)write the scenario: processes started from now on follow it."""
        self.scenario_path.write_text(json.dumps(scenario), encoding="utf-8")

    def logs(self) -> dict[int, list[dict[str, Any]]]:
        """pid → that process's log entries, in order."""
        out: dict[int, list[dict[str, Any]]] = {}
        for path in sorted(self.dir.glob("agent-*.jsonl")):
            pid = int(path.stem.split("-", 1)[1])
            entries = []
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    break  # a line still being written
            out[pid] = entries
        return out

    def pids(self) -> list[int]:
        """The agent processes started so far, in start order."""
        logs = self.logs()
        return sorted(logs, key=lambda pid: logs[pid][0]["t"] if logs[pid] else 0.0)

    def entries(self) -> list[dict[str, Any]]:
        """Every log entry of every process, each with its ``pid``, in time order."""
        merged = [{**e, "pid": pid} for pid, entries in self.logs().items() for e in entries]
        return sorted(merged, key=lambda e: e["t"])

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """Logged events (``prompt``, ``permission_outcome``, ``cancel``, ...), each with its pid."""
        return [e for e in self.entries() if "event" in e and (name is None or e["event"] == name)]

    def frames(self, method: str) -> list[dict[str, Any]]:
        """Frames the agents received with this method, each with its pid."""
        return [e for e in self.entries() if e.get("method") == method]

    def prompts(self) -> list[dict[str, Any]]:
        """Each ``session/prompt`` received: ``{pid, sessionId, text}`` (text blocks joined by newlines)."""
        out = []
        for frame in self.frames("session/prompt"):
            blocks = frame["params"]["prompt"]
            text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            out.append({"pid": frame["pid"], "sessionId": frame["params"]["sessionId"], "text": text, "blocks": blocks})
        return out

    def outcomes(self) -> list[dict[str, Any]]:
        """``permission_outcome`` events: id (the scenario's handle), kind, outcome, pid."""
        return self.events("permission_outcome")


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Callable[..., ScriptedAgent]]:
    """``scripted(scenario, id=None)`` → a ScriptedAgent with that scenario written
    (id: ``scripted-<n>``, unique, unless given).

    After the test, for every agent process: no permission request of it was
    answered twice, and (its daemon gone) it has exited.
    """
    made: list[ScriptedAgent] = []

    def make(scenario: dict[str, Any], id: str | None = None) -> ScriptedAgent:
        id = id or f"scripted-{next(_ids)}"
        agent = ScriptedAgent(id, tmp_path / f"agent-{id}")
        agent.dir.mkdir()
        agent.write(scenario)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        for pid, entries in agent.logs().items():
            answered = [e["rpc_id"] for e in entries if e.get("event") == "permission_outcome"]
            assert len(answered) == len(set(answered)), f"agent {pid}: a permission answered twice: {answered}"
        if not agent.shared:
            assert_gone(agent, "an agent process outlived the test's daemon")


def assert_gone(agent: ScriptedAgent, message: str) -> None:
    deadline = time.monotonic() + 30  # its daemon has exited: the agents are gone, or going (ms)
    while any(alive(pid) for pid in agent.pids()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in agent.pids() if alive(pid)], f"{message}: {agent.id}"


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie (an exited, unreaped child)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def is_watchdog(pid: int) -> bool:
    """Whether ``pid`` runs the daemon's watchdog (``lmbridge.acp.watchdog``), not an agent:
    it, or the starter it forks from, is the daemon's child from the first agent's spawn until
    the starter has exited (~15 ms idle, seconds on a loaded machine), and it outlives the
    daemon by the moment it takes to read end-of-file (docs/reliability.md, "Nothing outlives
    the daemon")."""
    from lmbridge.acp import watchdog

    try:
        return watchdog.__file__.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` but its watchdog (``is_watchdog``): the daemon's agents
    run as its children."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] not in ("Z", "X") and not is_watchdog(int(stat.parent.name)):
            out.append(int(stat.parent.name))
    return out


class Client(DaemonClient):
    """The daemon's client with the tests' bounds (docs/reliability.md, "Tests under load"):
    a chat or a request unless the test says, 120 s, where the slowest (a daemon's first
    chat: the ACP imports and the agent's start) takes ~2 s idle."""

    async def chat(self, model: str, messages: Sequence[Any], on_part: Callable[[dict[str, Any]], None] | None = None,
                   timeout: float = 120.0, options: Any = None, agent_mode: bool = True) -> Any:
        return await super().chat(model, messages, on_part, timeout, options, agent_mode)

    async def request(self, method: str, params: Any = None, timeout: float = 120.0) -> Any:
        return await super().request(method, params, timeout)


#: Tests compare answers' text exactly: the "Starting <agent>…" line (shown when an
#: agent takes longer than 0.5 s to start) waits 60 s here, unless a test sets it.
QUIET_START = {"LMBRIDGE_START_NOTICE": "60"}
#: The daemon keeps a spare ACP session per agent by default; tests that count the
#: sessions an agent opened (or which sessionId a chat got) start it without, and tests
#: of the spare (or of the default) ask for it (``--spare-session``, or no such env).
NO_SPARE = {"LMBRIDGE_SPARE_SESSION": "0"}


@pytest.fixture
def daemon(tmp_path: Path) -> Callable[..., Any]:
    """``async with daemon(agents=[...], args=[...]) as client:`` → an initialized DaemonClient.

    ``args`` are added to ``lmbridge serve``; ``env`` to its environment; ``workspace``
    defaults to ``tmp_path``; ``command`` replaces ``<python> -m lmbridge serve``; ``cwd``
    is where it runs.
    """

    @asynccontextmanager
    async def start(
        agents: Sequence[ScriptedAgent | dict[str, Any]] = (),
        args: Sequence[str] = (),
        workspace: Sequence[str] | None = None,
        initialize: bool = True,
        env: dict[str, str] | None = None,
        command: Sequence[str] = (sys.executable, "-m", "lmbridge", "serve"),
        cwd: str | None = None,
    ) -> AsyncIterator[DaemonClient]:
        specs = [a.spec if isinstance(a, ScriptedAgent) else a for a in agents]
        env = {**os.environ, **QUIET_START, **NO_SPARE, "LMBRIDGE_LOG_LEVEL": "debug", "XDG_STATE_HOME": str(tmp_path / "state"), **(env or {})}
        with open(tmp_path / "daemon.stderr", "ab") as stderr:
            async with Client.spawn([*command, *args], env=env, stderr=stderr, cwd=cwd) as client:
                if initialize:
                    await client.initialize(workspace=[str(tmp_path)] if workspace is None else workspace, agents=specs)
                yield client
                # EOF; the daemon stops its agents (an agent that ignores EOF and SIGTERM: ~4 s
                # idle). Past the bound it is killed and its agents outlive it: the test fails.
                await client.close(timeout=60)
        check_wire(client.unmatched, list(client.calls.values()))

    return start


def check_wire(unmatched: list[dict[str, Any]], calls: list[Any]) -> None:
    """Wire invariants, whatever the test did: stdout held only JSON-RPC objects,
    and no part came after its request's answer or for an unknown request."""
    bad = [f for f in unmatched if "nonJsonLine" in f or "nonObjectFrame" in f]
    assert not bad, f"the daemon wrote non-protocol output on stdout: {bad[:3]}"
    assert all(call.late_parts == 0 for call in calls), "lm/responsePart after the request's answer"
    stray = [f for f in unmatched if f.get("method") == "lm/responsePart"]
    assert not stray, f"lm/responsePart for no request in flight: {stray[:3]}"


@dataclass
class _Shared:
    client: DaemonClient
    stderr: Path
    agents: list[ScriptedAgent]


@pytest.fixture(scope="module")
async def _shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[_Shared]:
    where = tmp_path_factory.mktemp("shared-daemon")
    env = {**os.environ, **QUIET_START, **NO_SPARE, "LMBRIDGE_LOG_LEVEL": "debug", "XDG_STATE_HOME": str(where / "state")}
    with open(where / "daemon.stderr", "ab") as stderr:
        async with Client.spawn([sys.executable, "-m", "lmbridge", "serve"], env=env, stderr=stderr) as client:
            shared = _Shared(client, where / "daemon.stderr", [])
            yield shared
            assert await client.close(timeout=60) == 0, "the shared daemon did not exit cleanly"  # ~0.5 s idle
    for agent in shared.agents:
        assert_gone(agent, "an agent process outlived the shared daemon")


@pytest.fixture
def shared(_shared_daemon: _Shared, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``async with shared(agents=[...]) as client:`` → the module's daemon, initialized
    with these agents and ``tmp_path`` as the workspace (see the module docstring)."""

    @asynccontextmanager
    async def use(agents: Sequence[ScriptedAgent | dict[str, Any]] = (), workspace: Sequence[str] | None = None) -> AsyncIterator[DaemonClient]:
        client = _shared_daemon.client
        if client.process.returncode is not None:
            pytest.fail(f"the shared daemon exited earlier (code {client.process.returncode})")
        request.node.daemon_stderr = _shared_daemon.stderr
        for agent in agents:
            if isinstance(agent, ScriptedAgent):
                agent.shared = True
                _shared_daemon.agents.append(agent)
        specs = [a.spec if isinstance(a, ScriptedAgent) else a for a in agents]
        known, seen = set(client.calls), len(client.unmatched)
        await client.initialize(workspace=[str(tmp_path)] if workspace is None else workspace, agents=specs)
        yield client
        check_wire(client.unmatched[seen:], [c for k, c in client.calls.items() if k not in known])

    return use


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    """On failure, attach the daemon's stderr tail to the report."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    tmp = item.funcargs.get("tmp_path") if hasattr(item, "funcargs") else None
    path = getattr(item, "daemon_stderr", None) or (tmp / "daemon.stderr" if isinstance(tmp, Path) else None)
    if isinstance(path, Path) and path.exists():
        tail = path.read_text(errors="replace").splitlines()[-60:]
        report.sections.append(("daemon stderr (tail)", "\n".join(tail)))


# ---------------------------------------------------------------- wall-clock bounds audit
# `pytest --bounds-report=FILE`: every `anyio.fail_after`/`move_on_after` and
# `subprocess.run(timeout=)` a test enters (directly, or through DaemonClient's `timeout=`)
# is recorded with the line of the test that set it, the bound and the time it took; at
# the end the sites whose bound is under 10x the slowest time seen are listed (the rule in
# docs/reliability.md, "Tests under load"), and every site is written to FILE as JSON lines.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bounds-report", metavar="FILE", help="record every wall-clock bound tests enter, with the time it took (docs/reliability.md)")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--bounds-report", None)
    if path:
        config.pluginmanager.register(_BoundsAudit(Path(path)), "lmbridge-bounds-audit")


class _BoundsAudit:
    """Wraps the bound-setting calls for the session; see the comment above."""

    def __init__(self, path: Path) -> None:
        import subprocess
        from contextlib import contextmanager

        import anyio

        self.path, self.records, self.nodeid = path, [], ""
        self.tests = str(ROOT / "tests")
        real_fail, real_move, real_run = anyio.fail_after, anyio.move_on_after, subprocess.run

        def wrap(real: Any, kind: str) -> Any:
            @contextmanager
            def bounded(delay: float | None, *args: Any, **kwargs: Any) -> Iterator[Any]:
                site, began, fired = self.site(), time.monotonic(), False
                try:
                    with real(delay, *args, **kwargs) as scope:
                        yield scope
                    fired = scope.cancelled_caught
                except TimeoutError:
                    fired = True
                    raise
                finally:
                    if delay is not None and site:
                        self.record(site, kind, delay, time.monotonic() - began, fired)
            return bounded

        def run(*args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
            site, began = self.site(), time.monotonic()
            try:
                return real_run(*args, timeout=timeout, **kwargs)
            finally:
                if timeout is not None and site:
                    self.record(site, "subprocess.run", timeout, time.monotonic() - began, False)

        anyio.fail_after, anyio.move_on_after, subprocess.run = wrap(real_fail, "fail_after"), wrap(real_move, "move_on_after"), run  # type: ignore[assignment]

    def site(self) -> str:
        """The innermost frame in tests/ (not this file) that led here: where the bound is set."""
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(self.tests) and name != __file__:
                return f"{os.path.relpath(name, ROOT)}:{frame.f_lineno}"
            frame = frame.f_back  # type: ignore[assignment]
        return ""

    def record(self, site: str, kind: str, bound: float, took: float, fired: bool) -> None:
        self.records.append({"test": self.nodeid, "site": site, "kind": kind, "bound": bound, "took": round(took, 3), "fired": fired})

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self.nodeid = item.nodeid
        yield

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.path.write_text("".join(json.dumps(r) + "\n" for r in self.records), encoding="utf-8")
        sites: dict[str, dict[str, Any]] = {}
        for r in self.records:
            s = sites.setdefault(r["site"], {**r, "n": 0, "fired": 0})
            s["n"] += 1
            s["fired"] += r["fired"]
            if r["took"] >= s["took"]:
                s.update(took=r["took"], test=r["test"], bound=r["bound"])
        tight = sorted((s for s in sites.values() if s["bound"] < 10 * s["took"]), key=lambda s: s["bound"] / max(s["took"], 1e-9))
        terminalreporter.write_sep("-", f"wall-clock bounds: {len(sites)} sites, {len(tight)} under 10x the slowest time seen ({self.path})")
        for s in tight:
            terminalreporter.write_line(f"{s['site']}: {s['kind']} {s['bound']} s, took {s['took']} s (x{s['bound'] / max(s['took'], 1e-9):.1f}; {s['n']} entered, {s['fired']} fired) in {s['test']}")
