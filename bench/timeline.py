"""Where a new chat's time goes (docs/performance.md, "Where a new chat's time goes"): one
agent, N new chats back to back, each chat's timeline printed, direct and through lmbridge.

Usage: ``python -m bench.timeline [claude|codex] [--chats N] [--gap S]``

- **direct** (``bench.sessions``' client: one agent process, a ``session/new`` and a
  ``session/prompt`` per chat), then a **second prompt** on each chat's session: the first
  prompt less the second is the agent's own per-session work at its first prompt, which a
  spare opened ahead does not do.
- **lmbridge pre-warmed** (as ``bench.sessions``: a first daemon uses the agent, a second
  starts it at ``initialize`` and opens its spares): each chat's time to its first part
  and to its answer.

For each chat, the fake model server's requests (kind, seconds after the chat was sent):
when the agent's model request went out. The daemon's log (timestamped, the spare taken,
``spare session ready``) is printed at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench import sessions as bench
from lmbridge.acp.connection import AgentConnection
from lmbridge.devtools.client import DaemonClient, user


def requests_since(fake: Any, since: float) -> list[tuple[str, float]]:
    """The fake's requests from ``since`` (``time.monotonic``, the fake's clock): (kind, seconds after)."""
    return [(r.kind, round(r.time - since, 3)) for r in fake.snapshot() if r.time >= since]


async def direct(agent: bench.Agent, fake: Any, home: Path, chats: int, gap: float) -> list[dict[str, Any]]:
    node, *entry = agent.command
    rows = []
    async with anyio.create_task_group() as tg:
        conn = await AgentConnection.spawn(agent.id, node, entry, agent.env(home, fake.url), str(home.parent), bench._Sink())
        tg.start_soon(conn.serve)
        await conn.request("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}})
        await anyio.sleep(1.0)
        for i in range(chats):
            if i:
                await anyio.sleep(gap)
            t0 = time.monotonic()
            sid = (await conn.request("session/new", {"cwd": str(home.parent), "mcpServers": []}))["sessionId"]
            t1 = time.monotonic()
            await conn.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": f"hello {i}"}]})
            t2 = time.monotonic()
            await conn.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": f"again {i}"}]})
            rows.append({"session/new": round(t1 - t0, 3), "first prompt": round(t2 - t1, 3), "second prompt": round(time.monotonic() - t2, 3),
                         "model requests (s after session/new was answered)": requests_since(fake, t1)})  # fmt: skip
        await conn.close()
        tg.cancel_scope.cancel()
    return rows


async def bridged(agent: bench.Agent, fake: Any, home: Path, state: Path, chats: int, gap: float) -> list[dict[str, Any]]:
    node, *entry = agent.command
    spec = {"id": agent.id, "name": agent.id, "command": node, "args": entry, "env": agent.env(home, fake.url)}
    env = {**os.environ, "LMBRIDGE_LOG_LEVEL": "info", "XDG_STATE_HOME": str(state)}
    log = state / "daemon.stderr"
    rows: list[dict[str, Any]] = []
    for prewarmed in (False, True):
        logged = len(log.read_text(errors="replace")) if log.exists() else 0
        with open(log, "ab") as stderr:
            async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve"], env=env, stderr=stderr) as client:
                await client.initialize(workspace=[str(home.parent)], agents=[spec])
                if not prewarmed:  # the agent used once: the next daemon pre-warms it
                    await client.chat(agent.id, [user("first")], timeout=120)
                    continue
                with anyio.move_on_after(bench.PREWARM_WAIT):
                    while log.read_text(errors="replace")[logged:].count("spare session ready") < bench.spare_count(agent.id):
                        await anyio.sleep(0.1)
                await anyio.sleep(1.0)
                for i in range(chats):
                    if i:
                        await anyio.sleep(gap)
                    t0, first = time.monotonic(), list[float]()
                    call = await client.chat(agent.id, [user(f"hello {i}")], timeout=120, on_part=lambda _, parts=first: parts.append(time.monotonic()))
                    assert call.error is None, call.error
                    rows.append({"chat": round(time.monotonic() - t0, 3), "first part": round(first[0] - t0, 3) if first else None,
                                 "model requests (s after the chat was sent)": requests_since(fake, t0)})  # fmt: skip
    return rows


async def main_async(name: str, chats: int, gap: float) -> None:
    agent = bench.agents()[name]
    with agent.fake() as fake, tempfile.TemporaryDirectory(prefix="bench-timeline-") as tmp:
        base = Path(tmp)
        print(f"{agent.version}, {chats} new chats {gap:g} s apart; load {os.getloadavg()[0]:.1f}")
        print("direct:")
        for row in await direct(agent, fake, base / "direct" / "home", chats, gap):
            print(" ", row)
        state = base / "state"
        state.mkdir()
        print("lmbridge, pre-warmed:")
        for row in await bridged(agent, fake, base / "bridged" / "home", state, chats, gap):
            print(" ", row)
        print(f"load {os.getloadavg()[0]:.1f}; the daemon's log:")
        print((state / "daemon.stderr").read_text(errors="replace"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agent", choices=["claude", "codex"])
    parser.add_argument("--chats", type=int, default=5)
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between new chats (0: back to back)")
    args = parser.parse_args(argv)
    from tests.real_agent.codex import codex_environ  # as bench.sessions: no real account of this machine

    scrubbed = codex_environ()
    os.environ.clear()
    os.environ.update(scrubbed)
    anyio.run(main_async, args.agent, args.chats, args.gap)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
