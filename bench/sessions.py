"""``make bench-sessions``: new chats and agent memory, lmbridge against a direct ACP client
(docs/performance.md, "New chats and the spare session"; docs/sessions.md, "Measured"). It
drives today's agents (tests/real_agent/package.json): claude-agent-acp against the fake
Anthropic API (``tests/fakes/fake_anthropic.py``) and codex-acp against the fake Responses
API (``tests/fakes/fake_openai_responses.py``), on this machine.

Usage: ``python -m bench.sessions [--agents claude,codex] [--chats N] [--runs R] [--gaps 0,1.5]
[--spares N] [--[no-]spare-session] [--daemon-src DIR] [--before-src DIR [--before-spares N]] [--out PATH]``

- **direct**: one agent process started and ``initialize``d once; each new chat is a
  ``session/new`` and one ``session/prompt``. This is what Zed and VS Code's own ACP
  adapter do: the client the goals are measured against.
- **lmbridge**: ``python -m lmbridge serve`` (``--daemon-src``: run the daemon from another
  checkout's ``src``, to measure a commit from before) initialized with the agent. Each new
  chat is one ``lm/provideLanguageModelChatResponse`` with a one-message history. It runs
  twice: cold (the first chat starts the agent) and pre-warmed (the previous run left the
  agent in the state folder's recently used list; ``initialize`` starts it, then the bench
  waits for its spare sessions, as the daemon's log says them ready: at most ``PREWARM_WAIT`` s). The daemon keeps its spare sessions
  (its default, the agent's ``AgentProfile.spares``: 4 for claude, 2 for codex; ``--spares N``:
  ``$LMBRIDGE_SPARE_SESSIONS``; ``--no-spare-session``: none).
  Its state folder is a fresh temporary one per round (``$XDG_STATE_HOME``): nothing of the
  machine's ``~/.local/state/lmbridge`` is read.
- **before** (``--before-src DIR``: another checkout's ``src``, a commit from before): the
  same two lmbridge runs from that code, right after this code's in each round, so an A/B
  comparison sees the same load (rows ``before_cold``, ``before_prewarmed``); its pre-warmed run
  waits for ``--before-spares`` spares (default 2, what main 3727e73 keeps; at most this code's).

For each agent and each gap, ``runs`` rounds of direct, lmbridge cold, lmbridge pre-warmed,
one after the other (so both sides see the same load). Figures, each the median of the rounds:
- the time to answer a new chat, from the request to its answer: the 1st chat, then the
  2nd…Nth chats, each sent ``gap`` s after the previous one was answered (0: back to back,
  as soon as it was answered; 1.5: a user typing the next chat's words);
- for the direct client, its ``session/new`` alone (``next_open_s``, 2nd…Nth): what a
  spare session can save at most (the prompt itself is not saved); and its first prompt
  alone (``next_prompt_s``: the chat less its ``session/new``), what no client saves: its
  ratio to the whole chat is the best any bridge opening sessions ahead can reach;
- the agents' RSS after N chats: the processes under the client (the agent adapter and
  its children), plus, for lmbridge, the daemon's own RSS, sampled 1 s after the last
  chat; and idle (``idle_agents_rss_mib``): the direct client's agent with no session, the
  pre-warmed daemon's agent with its spares before the first chat (their difference is
  what the spares cost).

The goals (docs/performance.md, "Goals"), checked for each lmbridge run and printed with
each figure, never failed on (a benchmark on a shared machine reports): the 2nd…Nth new
chat takes at most ``NEXT_RATIO`` × the direct client's, and the agents' RSS is at most the
direct client's + ``SPARE_MIB`` for each spare session the daemon keeps. The 1-, 5- and 15-minute load averages before and after
are printed and kept.

Results go to ``.bench/sessions.json`` (per agent, per gap; the goals under ``checks``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lmbridge.acp.connection import AgentConnection, Incoming, Response  # noqa: E402
from lmbridge.devtools.client import DaemonClient, user  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.real_agent.claude import claude_agent_command, claude_agent_env  # noqa: E402

CHAT = "lm/provideLanguageModelChatResponse"
NEXT_RATIO = 0.5  # the 2nd…Nth new chat, at most this × the direct client's
SPARE_MIB = 200.0  # the agents' RSS, at most the direct client's + this for each spare kept (a Claude Code child: ~165 MiB)
PREWARM_WAIT = 120.0  # seconds the pre-warmed run waits at most for its spare sessions (the daemon's log says each)


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


@dataclass(frozen=True)
class Agent:
    """One agent the bench drives: its id for lmbridge, its version, its argv, its extra
    environment (given its scratch HOME and the fake's URL), and its fake model server."""

    id: str
    version: str
    command: list[str]
    env: Callable[[Path, str], dict[str, str]]
    fake: Callable[[], Any]


def agents() -> dict[str, Agent]:
    from tests.fakes.fake_openai_responses import FakeResponses
    from tests.real_agent import claude, codex

    return {
        "claude": Agent("claude", f"claude-agent-acp {claude.AGENT_VERSION}", claude_agent_command(), claude_agent_env,
                        lambda: FakeAnthropic([], done_text="Hello.")),
        "codex": Agent("codex", f"codex-acp {codex.AGENT_VERSION} (codex {codex.CODEX_VERSION})", codex.codex_agent_command(), codex.codex_agent_env,
                       lambda: FakeResponses([], done_text="Hello.")),
    }  # fmt: skip


async def direct(agent: Agent, url: str, home: Path, chats: int, gap: float) -> dict[str, Any]:
    """The direct ACP client: one process, a session per chat, each chat's prompt sent as soon
    as its session/new is answered; the next chat ``gap`` s after the previous answer."""
    node, *entry = agent.command
    env = agent.env(home, url)  # on top of this process's environment, scrubbed by main
    sink = _Sink()
    times, opens = [], []
    async with anyio.create_task_group() as tg:
        t0 = time.perf_counter()
        conn = await AgentConnection.spawn(agent.id, node, entry, env, str(home.parent), sink)
        tg.start_soon(conn.serve)
        await conn.request("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}})
        await anyio.sleep(1.0)
        idle = tree_rss_kib(conn.process.pid, include_root=True)[0]  # the agent with no session
        t0 = time.perf_counter()
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
    return {"times": times, "opens": opens, "agents_rss_mib": agents / 1024, "agent_processes": count, "idle_agents_rss_mib": idle / 1024}


async def bridged(agent: Agent, url: str, home: Path, state: Path, chats: int, gap: float, daemon_src: str | None, args: Sequence[str], prewarmed: bool, spares: int) -> dict[str, Any]:
    """lmbridge: each chat one ``lm/provideLanguageModelChatResponse``; the next ``gap`` s
    after the previous answer. ``prewarmed``: the previous run left the agent in the state
    folder's recently used list, so ``initialize`` starts it; the bench waits for its
    ``spares`` spare sessions to be ready (its log says each), then 1 s."""
    node, *entry = agent.command
    spec = {"id": agent.id, "name": agent.id, "command": node, "args": entry, "env": agent.env(home, url)}
    env = {**os.environ, "LMBRIDGE_LOG_LEVEL": "info", "XDG_STATE_HOME": str(state)}
    if daemon_src:
        env["PYTHONPATH"] = daemon_src
    times, idle = [], 0
    log = state / "daemon.stderr"
    logged = len(log.read_text(errors="replace")) if log.exists() else 0  # the cold run's log comes first
    with open(log, "ab") as stderr:
        async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve", *args], env=env, stderr=stderr) as client:
            await client.initialize(workspace=[str(home.parent)], agents=[spec])
            if prewarmed:  # the agent the user used last starts right after initialize, then opens its spares
                with anyio.move_on_after(PREWARM_WAIT):
                    while log.read_text(errors="replace")[logged:].count("spare session ready") < spares:
                        await anyio.sleep(0.1)
                await anyio.sleep(1.0)
                idle = tree_rss_kib(client.process.pid, include_root=False)[0]  # the agent with its spares, no chat yet
            for i in range(chats):
                if i:
                    await anyio.sleep(gap)
                t0 = time.perf_counter()
                call = await client.chat(agent.id, [user(f"hello {i}")], timeout=120)
                assert call.error is None, call.error
                times.append(time.perf_counter() - t0)
            await anyio.sleep(1.0)
            agents, count = tree_rss_kib(client.process.pid, include_root=False)
            daemon = rss_kib(client.process.pid)
    out = {"times": times, "agents_rss_mib": agents / 1024, "daemon_rss_mib": daemon / 1024, "agent_processes": count}
    return out | ({"idle_agents_rss_mib": idle / 1024} if prewarmed else {})


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = statistics.median(r["times"][0] for r in runs)
    rest = statistics.median(t for r in runs for t in r["times"][1:])
    out = {"first_s": round(first, 3), "next_s": round(rest, 3), "agents_rss_mib": round(statistics.median(r["agents_rss_mib"] for r in runs), 1),
           "agent_processes": max(r["agent_processes"] for r in runs),
           # Each chat's median on its own (the 1st, the 2nd, ...): where a spare was not ready yet.
           "each_s": [round(statistics.median(r["times"][i] for r in runs), 3) for i in range(len(runs[0]["times"]))]}  # fmt: skip
    if "opens" in runs[0]:  # the direct client's session/new alone (2nd…Nth): what a spare saves at most
        out["next_open_s"] = round(statistics.median(t for r in runs for t in r["opens"][1:]), 3)
        # and its first prompt alone: what no spare saves (the floor of any client that prompts a new session)
        out["next_prompt_s"] = round(statistics.median(t - o for r in runs for t, o in zip(r["times"][1:], r["opens"][1:], strict=True)), 3)
    for key in ("daemon_rss_mib", "idle_agents_rss_mib"):
        if key in runs[0]:
            out[key] = round(statistics.median(r[key] for r in runs), 1)
    return out


def checks(figures: dict[str, Any], keep: int) -> dict[str, Any]:
    """Each lmbridge run against the goals: its 2nd…Nth chat over the direct client's, its
    agents' RSS over the direct client's (MiB; at most ``SPARE_MIB`` for each of the ``keep``
    spares), and whether each is within its goal."""
    direct = figures["direct"]
    budget = SPARE_MIB * max(keep, 1)
    out: dict[str, Any] = {"next_ratio_max": NEXT_RATIO, "rss_over_direct_max_mib": budget}
    for name, f in figures.items():
        if not name.startswith(("lmbridge", "before")):
            continue
        ratio = f["next_s"] / direct["next_s"] if direct["next_s"] else float("nan")
        over = f["agents_rss_mib"] - direct["agents_rss_mib"]
        out[name] = {"next_ratio": round(ratio, 3), "next_ok": ratio <= NEXT_RATIO,
                     "rss_over_direct_mib": round(over, 1), "rss_ok": over <= budget}  # fmt: skip
    return out


def gap_name(gap: float) -> str:
    return "back_to_back" if gap == 0 else f"spaced_{gap:g}s"


def spare_count(name: str) -> int:
    """The spare sessions this code's daemon keeps for agent ``name`` (claude, codex):
    ``$LMBRIDGE_SPARE_SESSIONS``, else the agent's profile's (``AgentProfile.spares``)."""
    from lmbridge.acp.process import SPARE_COUNT  # after $LMBRIDGE_SPARE_SESSIONS is set
    from lmbridge.core import profiles

    profile: profiles.AgentProfile = {"claude": profiles.CLAUDE, "codex": profiles.CODEX}[name]
    return SPARE_COUNT or profile.spares


async def main_async(names: Sequence[str], chats: int, runs: int, gaps: Sequence[float], daemon_src: str | None, extra: Sequence[str], spares: int | None,
                     before_src: str | None = None, before_spares: int = 2) -> dict[str, Any]:  # fmt: skip
    """Every agent, every gap, ``runs`` times: the direct client, then lmbridge cold, then
    pre-warmed (then the same from ``before_src``, if given), one after the other in each
    round, so each side sees the same load. ``spares``: the spare sessions the pre-warmed
    daemon keeps (None: ``spare_count``; 0: none); ``before_spares``: the code before's."""
    out: dict[str, Any] = {}
    for name in names:
        agent = agents()[name]
        keep = spare_count(name) if spares is None else spares
        keep_before = min(keep, before_spares) if spares is None else spares
        rows = ["direct", "lmbridge_cold", "lmbridge_prewarmed"] + (["before_cold", "before_prewarmed"] if before_src else [])
        results = {gap: {k: [] for k in rows} for gap in gaps}  # type: dict[float, dict[str, list[dict[str, Any]]]]
        with agent.fake() as fake:
            for _ in range(runs):
                for gap in gaps:
                    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp:
                        base = Path(tmp)
                        results[gap]["direct"].append(await direct(agent, fake.url, base / "direct" / "home", chats, gap))
                        state = base / "state"  # the daemon's private state folder (XDG_STATE_HOME): nothing of the machine's
                        state.mkdir()
                        home = base / "bridged" / "home"
                        results[gap]["lmbridge_cold"].append(await bridged(agent, fake.url, home, state, chats, gap, daemon_src, extra, prewarmed=False, spares=keep))
                        results[gap]["lmbridge_prewarmed"].append(await bridged(agent, fake.url, home, state, chats, gap, daemon_src, extra, prewarmed=True, spares=keep))
                        if before_src:  # the code from before, under the same load: a private state folder too
                            state, home = base / "before-state", base / "before" / "home"
                            state.mkdir()
                            results[gap]["before_cold"].append(await bridged(agent, fake.url, home, state, chats, gap, before_src, extra, prewarmed=False, spares=keep_before))
                            results[gap]["before_prewarmed"].append(await bridged(agent, fake.url, home, state, chats, gap, before_src, extra, prewarmed=True, spares=keep_before))
        out[name] = {"version": agent.version}
        for gap, kinds in results.items():
            figures = {k: summarise(v) for k, v in kinds.items() if v}
            figures["checks"] = checks(figures, keep)
            out[name][gap_name(gap)] = figures
    return out


def report(figures: dict[str, Any]) -> list[str]:
    """The printed table: every figure with its goal and whether it was met."""
    lines = []
    for name, per in figures.items():
        if name.startswith("_"):
            continue
        for gap, f in per.items():
            if gap == "version":
                continue
            lines.append(f"\n{per['version']}, {gap.replace('_', ' ')}:")
            lines.append(f"{'':20} {'1st chat s':>10} {'2nd..Nth s':>10} {'× direct':>8} {'goal':>6} {'met':>4} {'agents MiB':>10} {'+direct':>8} {'goal':>6} "
                         f"{'idle MiB':>8} {'daemon MiB':>10} {'procs':>5}")  # fmt: skip
            d = f["direct"]
            for kind, row in f.items():
                if kind == "checks":
                    continue
                c = f["checks"].get(kind)
                ratio = row["next_s"] / d["next_s"] if d["next_s"] else float("nan")
                met = "" if c is None else ("yes" if c["next_ok"] else "NO")
                over = "" if c is None else f"{c['rss_over_direct_mib']:+.0f}"
                rss_met = "" if c is None else f"≤+{f['checks']['rss_over_direct_max_mib']:.0f}" + ("" if c["rss_ok"] else "!")
                goal = "" if c is None else f"≤ {NEXT_RATIO}"
                lines.append(f"{kind:20} {row['first_s']:>10.3f} {row['next_s']:>10.3f} {ratio:>8.2f} {goal:>6} {met:>4} {row['agents_rss_mib']:>10.1f} {over:>8} "
                             f"{rss_met:>6} {row.get('idle_agents_rss_mib', 0):>8.1f} {row.get('daemon_rss_mib', 0):>10.1f} {row['agent_processes']:>5}")  # fmt: skip
            lines.append("  each chat (s): " + "; ".join(f"{k} {row['each_s']}" for k, row in f.items() if k != "checks")
                         + f"; direct session/new alone {d.get('next_open_s')}, its first prompt alone {d.get('next_prompt_s')}"
                         + (f" (a spare always ready and a bridge costing nothing: {d['next_prompt_s'] / d['next_s']:.2f}× direct)" if d.get("next_s") and "next_prompt_s" in d else ""))  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="claude,codex", help="comma-separated: claude, codex (default both)")
    parser.add_argument("--chats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gaps", default="0,1.5", help="seconds between new chats, comma-separated (default 0,1.5; 0: back to back)")
    parser.add_argument("--daemon-src", help="run lmbridge serve from this src folder (a checkout from before)")
    parser.add_argument("--before-src", help="also run lmbridge serve from this src folder in each round, right after (an A/B comparison under the same load)")
    parser.add_argument(
        "--spare-session", action=argparse.BooleanOptionalAction, default=None,
        help="pass lmbridge serve --spare-session or --no-spare-session (default: neither, the daemon's default: on)",
    )  # fmt: skip
    parser.add_argument("--spares", type=int, help="spare sessions kept per agent process ($LMBRIDGE_SPARE_SESSIONS; default: the daemon's)")
    parser.add_argument("--before-spares", type=int, default=2, help="the spare sessions the --before-src daemon keeps per agent (default 2: main 3727e73)")
    parser.add_argument("--out", type=Path, default=ROOT / ".bench" / "sessions.json")
    args = parser.parse_args(argv)
    # The agents must see no real account or sandbox flag of this machine: IS_SANDBOX (claude's
    # session/new then fails as root: docs/agents.md, "Running them offline"), ANTHROPIC_*, OPENAI_*, CODEX_*.
    from tests.real_agent.codex import codex_environ

    scrubbed = codex_environ()
    os.environ.clear()
    os.environ.update(scrubbed)
    if args.spares is not None:
        os.environ["LMBRIDGE_SPARE_SESSIONS"] = str(args.spares)
    extra = [] if args.spare_session is None else ["--spare-session" if args.spare_session else "--no-spare-session"]
    gaps = [float(g) for g in args.gaps.split(",")]
    load_before = os.getloadavg()  # a shared machine: other work moves every figure
    spares = 0 if args.spare_session is False else None  # None: each agent's (spare_count)
    figures = anyio.run(main_async, args.agents.split(","), args.chats, args.runs, gaps, args.daemon_src, extra, spares, args.before_src, args.before_spares)
    figures["_setup"] = {"chats": args.chats, "runs": args.runs, "gaps_s": gaps, "daemon_src": args.daemon_src, "before_src": args.before_src, "spare_session": args.spare_session,
                         "spares": args.spares, "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
                         "cpus": os.cpu_count()}  # fmt: skip
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print("\n".join(report(figures)))
    s = figures["_setup"]
    print(f"\nload average (1, 5, 15 min) {s['load_before']} before, {s['load_after']} after ({s['cpus']} cores, shared); results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
