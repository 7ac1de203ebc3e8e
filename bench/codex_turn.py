"""Where a codex prompt's time goes (docs/performance.md, "Where a codex prompt's time goes"):
a direct ACP client drives codex-acp against the instant fake Responses API, and each
``session/prompt`` is cut into stages by codex's own log.

Usage: ``python -m bench.codex_turn [--sessions N] [--prompts K] [--gap S] [--config LINE]...``

- One agent process; per session a ``session/new`` and K prompts, S seconds after each
  prompt (the default 1 s lets the title codex-acp asks for after a session's first answer
  end before the next prompt, so a prompt is measured alone; ``--gap 0``: back to back).
- The stages come from the log codex 0.166 keeps in ``$CODEX_HOME/logs_2.sqlite`` (table
  ``logs``: ``ts``, ``ts_nanos``, ``feedback_log_body``; its trace and debug events are
  written whatever ``RUST_LOG`` says), the ACP frames' read times and the fake server's
  request times, all on the wall clock.
- CPU: the codex app-server's and codex-acp's (node) user+system time over each prompt, from
  ``/proc`` (10 ms ticks); and over the gap after it (the title's work after a first answer).
- ``--config LINE`` appends a line to codex's ``config.toml`` (an A/B of a codex setting).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

#: (stage, the log text that starts it): each stage ends where the next starts. ``None``: an
#: ACP frame or the fake server's request, not a log line.
MARKERS: tuple[tuple[str, str | None], ...] = (
    ("codex-acp: the prompt to the app server's turn/start", None),
    ("turn/start → turn/started (the turn's config and settings)", "app-server request: turn/start"),
    ("turn/started → skill selection", "app-server event: turn/started"),
    ("the shadow skill selection (12 methods, first to last)", "ran shadow skill selection"),
    ("→ the request's context built", "@last ran shadow skill selection"),
    ("→ its HTTP client built (the CA bundle read)", 'model="gpt-5.5" approval_policy'),
    ("→ the request read by the fake server", "loaded certificates from custom CA bundle"),
    ("→ the answer's usage (the fake streams at once)", None),
    ("→ turn/completed (the turn's writes)", "post sampling token usage"),
    ("→ the ACP answer", "app-server event: turn/completed"),
)


def _cpu_ms(root: int) -> dict[str, int]:
    """user+system ms of ``root`` (codex-acp) and of every process below it, by command name."""
    out: dict[str, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            comm = "codex-acp" if pid == root else Path(f"/proc/{pid}/comm").read_text().strip()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        out[comm] = out.get(comm, 0) + (int(fields[11]) + int(fields[12])) * 1000 // os.sysconf("SC_CLK_TCK")
        todo += [int(c) for c in children]
    return out


async def drive(base: Path, sessions: int, prompts: int, gap: float, config: list[str]) -> dict[str, Any]:
    from tests.fakes.fake_openai_responses import FakeResponses
    from tests.real_agent import codex

    offset = time.time() - time.monotonic()
    frames: list[tuple[float, str, dict[str, Any]]] = []  # (wall, ">" sent | "<" read, frame)
    cpu: list[dict[str, Any]] = []
    with FakeResponses() as fake:
        home, work = base / "home", base / "work"
        work.mkdir(parents=True)
        env = codex.codex_environ(codex.codex_agent_env(home, fake.url))
        toml = home / ".codex" / "config.toml"
        toml.write_text(toml.read_text() + "".join(f"{line}\n" for line in config))
        proc = await asyncio.create_subprocess_exec(*codex.codex_agent_command(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL, env=env, cwd=work, limit=1 << 24)  # fmt: skip
        assert proc.stdin and proc.stdout
        stdin, stdout = proc.stdin, proc.stdout
        waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}

        async def read() -> None:
            while line := await stdout.readline():
                msg = json.loads(line)
                frames.append((time.time(), "<", msg))
                if "method" not in msg and msg.get("id") in waiting:
                    waiting.pop(msg["id"]).set_result(msg)
                elif "method" in msg and "id" in msg:  # a permission or fs request: the bench's prompts make none
                    stdin.write((json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "not offered"}}) + "\n").encode())

        async def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
            rid = len(frames) + 1
            waiting[rid] = asyncio.get_running_loop().create_future()
            msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
            frames.append((time.time(), ">", msg))
            stdin.write((json.dumps(msg) + "\n").encode())
            answer = await waiting[rid]
            if "error" in answer:
                raise RuntimeError(f"{method}: {answer['error']}")
            return dict(answer["result"])

        reader = asyncio.create_task(read())
        await request("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}})
        await asyncio.sleep(1.5)
        for s in range(sessions):
            sid = (await request("session/new", {"cwd": str(work), "mcpServers": []}))["sessionId"]
            for k in range(prompts):
                before = _cpu_ms(proc.pid)
                await request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": f"hello {s}.{k}"}]})
                after = _cpu_ms(proc.pid)
                await asyncio.sleep(gap)
                later = _cpu_ms(proc.pid)
                cpu.append({"prompt": {n: after.get(n, 0) - before.get(n, 0) for n in after}, "gap": {n: later.get(n, 0) - after.get(n, 0) for n in later}, "first": k == 0})
        await asyncio.sleep(2.0)  # codex writes its log in batches
        stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.terminate()
            await proc.wait()
        reader.cancel()
        requests = [(r.time + offset, r.kind) for r in fake.snapshot()]
    db = sqlite3.connect(home / ".codex" / "logs_2.sqlite")
    logs = [(ts + ns / 1e9, body or "") for ts, ns, body in db.execute("select ts, ts_nanos, feedback_log_body from logs order by ts, ts_nanos")]
    db.close()
    return {"frames": frames, "requests": requests, "logs": logs, "cpu": cpu}


def stages(run: dict[str, Any]) -> list[dict[str, float]]:
    """Per prompt, each stage of :data:`MARKERS` in ms (a prompt whose log lines are missing is left out)."""
    frames, requests, logs = run["frames"], run["requests"], run["logs"]
    answers = {m["id"]: t for t, d, m in frames if d == "<" and "method" not in m}
    out = []
    for t0, d, m in frames:
        if d != ">" or m["method"] != "session/prompt":
            continue
        t9 = answers[m["id"]]
        mine = [(t, body) for t, body in logs if t0 <= t <= t9]

        def at(text: str, mine: list[tuple[float, str]] = mine) -> float | None:
            if text.startswith("@last "):  # the last before the next stage's first line
                end = at(MARKERS[5][1] or "")
                hits = [t for t, body in mine if text[6:] in body and (end is None or t <= end)]
                return hits[-1] if hits else None
            return next((t for t, body in mine if text in body), None)

        fake = next((t for t, kind in requests if t0 <= t <= t9 and kind == "responses"), None)
        points = [t0, *(at(text or "") for _, text in MARKERS[1:7]), fake, *(at(text or "") for _, text in MARKERS[8:]), t9]
        if any(p is None for p in points):
            continue
        row = {name: (b - a) * 1000 for (name, _), a, b in zip(MARKERS, points[:-1], points[1:], strict=True)}
        row["the prompt to the model request"] = (fake - t0) * 1000
        row["the whole prompt"] = (t9 - t0) * 1000
        out.append(row)
    return out


def report(run: dict[str, Any], load: tuple[float, float]) -> list[str]:
    rows = stages(run)
    lines = [f"{len(rows)} prompts; load (1-min) {load[0]:.2f} before, {load[1]:.2f} after (2 cores, shared)", f"{'stage':62} median   p10–p90 ms"]
    for name in rows[0] if rows else []:
        v = sorted(r[name] for r in rows)
        lines.append(f"{name:62} {statistics.median(v):6.1f}  {v[len(v) // 10]:5.1f}–{v[len(v) * 9 // 10]:5.1f}")
    for kind, where in (("prompt", "over {} prompt"), ("gap", "in the gap after {} prompt")):
        for first in (True, False):
            got = [c[kind] for c in run["cpu"] if c["first"] == first]
            names = sorted({n for c in got for n in c})
            if names:
                med = ", ".join(f"{n} {statistics.median(c.get(n, 0) for c in got):.0f}" for n in names)
                lines.append(f"CPU ms (median) {where.format('a first' if first else 'a later')}: {med}")
    lines.append("model requests by kind: " + json.dumps(Counter(kind for _, kind in run["requests"])))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--gap", type=float, default=1.0, help="seconds after each prompt (0: back to back)")
    parser.add_argument("--config", action="append", default=[], help="a line appended to codex's config.toml")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-codex-turn-") as tmp:
        run = asyncio.run(drive(Path(tmp), args.sessions, args.prompts, args.gap, args.config))
    print("\n".join(report(run, (load0, os.getloadavg()[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
