"""``make bench-sessions``: new chats and agent memory, lmbridge against a direct ACP client
(docs/sessions.md, "Measured"). Both drive claude-agent-acp 0.23.1 against the fake Anthropic API
(``tests/fakes/fake_anthropic.py``), on this machine.

Usage: ``python -m bench.sessions [--chats N] [--runs R] [--gap S] [--[no-]spare-session] [--daemon-src DIR] [--out PATH]``

- **direct**: one agent process started and ``initialize``d once; each new chat is a
  ``session/new`` and one ``session/prompt``. This is the client the issue measures against.
- **lmbridge**: ``python -m lmbridge serve`` (``--daemon-src``: run the daemon from another
  checkout's ``src``, to measure a commit from before) initialized with the claude agent.
  Each new chat is one ``lm/provideLanguageModelChatResponse`` with a one-message history.
  It runs twice: cold (the first chat starts the agent) and pre-warmed (the previous run
  left the agent in the index's recently used list; ``initialize`` starts it, then the
  bench waits for the pre-warm before the first chat). The daemon keeps a spare ACP
  session ready (its default); ``--no-spare-session`` measures it without.

Figures, each the median of R runs:
- the time to answer a new chat, from the request to its answer: the 1st chat, then the
  2nd…Nth chats, ``--gap`` seconds apart (a user typing the next chat's words; default
  1.5 s; 0: back to back);
- for the direct client, its ``session/new`` alone (``next_open_s``, 2nd…Nth): what a
  spare session can save at most (the prompt itself is not saved);
- the agents' RSS after N chats: the processes under the client (the agent adapter and
  its Claude Code children), plus, for lmbridge, the daemon's own RSS. Sampled 1 s after
  the last chat.

The targets (docs/performance.md, "New chats and the spare session"), checked for each
lmbridge run and printed, never failed on (a benchmark on a shared machine reports):
the 2nd…Nth new chat takes at most ``NEXT_RATIO`` × the direct client's, and the agents'
RSS is at most the direct client's + ``SPARE_MIB`` (one spare Claude Code).

Results go to ``.bench/sessions.json`` (the targets under ``checks``); the table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lmbridge.acp.connection import AgentConnection, Incoming, Response  # noqa: E402
from lmbridge.devtools.client import DaemonClient, user  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.real_agent.claude import agent_environ, claude_agent_command, claude_agent_env  # noqa: E402

CHAT = "lm/provideLanguageModelChatResponse"
NEXT_RATIO = 0.5  # the 2nd…Nth new chat, at most this × the direct client's
SPARE_MIB = 250.0  # the agents' RSS, at most the direct client's + this (one spare Claude Code)


def tree_rss_kib(root: int, include_root: bool) -> tuple[int, int]:
    """(KiB of RSS, process count) of ``root``'s descendants (and ``root`` if asked)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - tree
        tree |= frontier
    if include_root:
        tree.add(root)
    total = 0
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total, len(tree)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class _Sink:
    def __init__(self) -> None:
        self.responses: dict[int, Response] = {}
        self.event = anyio.Event()

    def send_nowait(self, item: Incoming | Response) -> None:
        if isinstance(item, Response):
            self.responses[item.id] = item
            self.event.set()


async def direct(fake: FakeAnthropic, home: Path, chats: int, gap: float) -> dict[str, Any]:
    """The direct ACP client: one process, a session per chat."""
    node, entry = claude_agent_command()
    env = claude_agent_env(home, fake.url)  # on top of this process's environment (IS_SANDBOX unset in main)
    sink = _Sink()
    times, opens = [], []
    async with anyio.create_task_group() as tg:
        t0 = time.perf_counter()
        conn = await AgentConnection.spawn("claude", node, [entry], env, str(home.parent), sink)
        tg.start_soon(conn.serve)
        await conn.request("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}})
        for i in range(chats):
            if i:
                await anyio.sleep(gap)
                t0 = time.perf_counter()
            session = (await conn.request("session/new", {"cwd": str(home.parent), "mcpServers": []}))["sessionId"]
            opens.append(time.perf_counter() - t0)
            await conn.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": f"hello {i}"}]})
            times.append(time.perf_counter() - t0)
        await anyio.sleep(1.0)
        agents, count = tree_rss_kib(conn.process.pid, include_root=True)
        await conn.close()
        tg.cancel_scope.cancel()
    return {"times": times, "opens": opens, "agents_rss_mib": agents / 1024, "agent_processes": count}


async def bridged(
    fake: FakeAnthropic, home: Path, state: Path, chats: int, gap: float, daemon_src: str | None, args: Sequence[str], prewarmed: bool
) -> dict[str, Any]:
    node, entry = claude_agent_command()
    spec = {"id": "claude", "name": "Claude Code", "command": node, "args": [entry], "env": claude_agent_env(home, fake.url)}
    env = agent_environ({"LMBRIDGE_LOG_LEVEL": "warning", "XDG_STATE_HOME": str(state)})
    if daemon_src:
        env["PYTHONPATH"] = daemon_src
    times = []
    with open(state / "daemon.stderr", "ab") as stderr:
        async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve", *args], env=env, stderr=stderr) as client:
            await client.initialize(workspace=[str(home.parent)], agents=[spec])
            if prewarmed:  # the agent the user used last starts right after initialize
                deadline = time.monotonic() + 60
                while tree_rss_kib(client.process.pid, include_root=False)[1] == 0 and time.monotonic() < deadline:
                    await anyio.sleep(0.05)
                await anyio.sleep(3.0)  # its initialize (and spare session) answered
            for i in range(chats):
                if i:
                    await anyio.sleep(gap)
                t0 = time.perf_counter()
                call = await client.chat("claude", [user(f"hello {i}")], timeout=120)
                assert call.error is None, call.error
                times.append(time.perf_counter() - t0)
            await anyio.sleep(1.0)
            agents, count = tree_rss_kib(client.process.pid, include_root=False)
            daemon = rss_kib(client.process.pid)
    return {"times": times, "agents_rss_mib": agents / 1024, "daemon_rss_mib": daemon / 1024, "agent_processes": count}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = statistics.median(r["times"][0] for r in runs)
    rest = statistics.median(t for r in runs for t in r["times"][1:])
    out = {"first_s": round(first, 3), "next_s": round(rest, 3), "agents_rss_mib": round(statistics.median(r["agents_rss_mib"] for r in runs), 1),
           "agent_processes": max(r["agent_processes"] for r in runs),
           # Each chat's median on its own (the 1st, the 2nd, ...): where a spare was not ready yet.
           "each_s": [round(statistics.median(r["times"][i] for r in runs), 3) for i in range(len(runs[0]["times"]))]}  # fmt: skip
    if "opens" in runs[0]:  # the direct client's session/new alone (2nd…Nth): what a spare saves at most
        out["next_open_s"] = round(statistics.median(t for r in runs for t in r["opens"][1:]), 3)
    if "daemon_rss_mib" in runs[0]:
        out["daemon_rss_mib"] = round(statistics.median(r["daemon_rss_mib"] for r in runs), 1)
    return out


def checks(figures: dict[str, Any]) -> dict[str, Any]:
    """Each lmbridge run against the targets: its 2nd…Nth chat over the direct client's, its
    agents' RSS over the direct client's (MiB), and whether each is within its target."""
    direct = figures["direct"]
    out: dict[str, Any] = {"next_ratio_max": NEXT_RATIO, "rss_over_direct_max_mib": SPARE_MIB}
    for name, f in figures.items():
        if not name.startswith("lmbridge"):
            continue
        ratio = f["next_s"] / direct["next_s"] if direct["next_s"] else float("nan")
        over = f["agents_rss_mib"] - direct["agents_rss_mib"]
        out[name] = {"next_ratio": round(ratio, 3), "next_ok": ratio <= NEXT_RATIO,
                     "rss_over_direct_mib": round(over, 1), "rss_ok": over <= SPARE_MIB}  # fmt: skip
    return out


async def main_async(chats: int, runs: int, gap: float, daemon_src: str | None, spare: bool | None) -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {"direct": [], "lmbridge_cold": [], "lmbridge_prewarmed": []}
    extra = [] if spare is None else ["--spare-session" if spare else "--no-spare-session"]
    with FakeAnthropic([], done_text="Hello.") as fake:
        for _ in range(runs):
            with tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp:
                base = Path(tmp)
                results["direct"].append(await direct(fake, base / "direct" / "home", chats, gap))
                state = base / "state"
                state.mkdir()
                home = base / "bridged" / "home"
                results["lmbridge_cold"].append(await bridged(fake, home, state, chats, gap, daemon_src, extra, prewarmed=False))
                if daemon_src is None:
                    results["lmbridge_prewarmed"].append(await bridged(fake, home, state, chats, gap, daemon_src, extra, prewarmed=True))
    return {k: summarise(v) for k, v in results.items() if v}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gap", type=float, default=1.5, help="seconds between new chats (default 1.5; 0: back to back)")
    parser.add_argument("--daemon-src", help="run lmbridge serve from this src folder (a checkout from before)")
    parser.add_argument(
        "--spare-session", action=argparse.BooleanOptionalAction, default=None,
        help="pass lmbridge serve --spare-session or --no-spare-session (default: neither, the daemon's default: on)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / ".bench" / "sessions.json")
    args = parser.parse_args(argv)
    os.environ.pop("IS_SANDBOX", None)  # this machine sets it; claude's session/new then fails as root (docs/agents.md, "Running them offline")
    load_before = os.getloadavg()[0]  # a shared machine: other work moves every figure
    figures = anyio.run(main_async, args.chats, args.runs, args.gap, args.daemon_src, args.spare_session)
    figures["checks"] = checks(figures)
    figures["_setup"] = {"chats": args.chats, "runs": args.runs, "gap_s": args.gap, "daemon_src": args.daemon_src, "spare_session": args.spare_session,
                         "load_before": load_before, "load_after": os.getloadavg()[0]}  # fmt: skip
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    direct_next = figures["direct"]["next_s"]
    print(f"{'':22} {'1st chat s':>10} {'2nd..Nth s':>10} {'× direct':>8} {'agents MiB':>10} {'daemon MiB':>10} {'procs':>5}")
    for name, f in figures.items():
        if name.startswith("_") or name == "checks":
            continue
        ratio = f["next_s"] / direct_next if direct_next else float("nan")
        print(f"{name:22} {f['first_s']:>10.3f} {f['next_s']:>10.3f} {ratio:>8.2f} {f['agents_rss_mib']:>10.1f} {f.get('daemon_rss_mib', 0):>10.1f} {f['agent_processes']:>5}")
    print(f"1-minute load average {figures['_setup']['load_before']:.2f} before, {figures['_setup']['load_after']:.2f} after (2 cores, shared)")
    for name, c in figures["checks"].items():
        if isinstance(c, dict):
            print(f"{name}: 2nd..Nth chat {c['next_ratio']:.2f}× direct (target ≤ {NEXT_RATIO}): {'ok' if c['next_ok'] else 'MISSED'}; "
                  f"agents' RSS direct {c['rss_over_direct_mib']:+.0f} MiB (target ≤ +{SPARE_MIB:.0f}): {'ok' if c['rss_ok'] else 'MISSED'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
