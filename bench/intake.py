"""The daemon's intake: cheap requests at the pipe's pace, and a flood it must push back on.

Usage: ``python -m bench.intake [--frames N] [--chats N] [--runs N] [--warm-up] [--against SRC] [--out PATH]``

Figures (docs/performance.md, "Cheap requests and push-back"; docs/reliability.md, "Bounds"):

1. cheap requests: ``--frames`` ``lm/provideTokenCount`` requests written as fast as the
   pipe takes them (a writer thread), their answers read by another, once the server is
   idle (``_settled``: the daemon's warm-up after ``initialize`` done); frames/s (first
   write → last answer read) and the server's CPU time (``/proc/<pid>/stat``) per frame.
   Against ``lmbridge serve`` and a bare asyncio JSON-lines server on the same pipes
   (``BARE``: parse each line, answer it, one write per read), the pipe's limit for a
   Python server; runs alternate so both see the same load. ``--warm-up``: the same again,
   written as soon as the ``initialize`` answer is read (the daemon's warm-up running; the
   bare server's figure taken as it starts, alike).
2. flood: ``--chats`` chat requests for an agent that never answers ``initialize``,
   written as fast as the pipe takes them for ``--flood-seconds``: how many the pipe took
   (the rest wait in the shim: push-back) and the daemon's RSS then.

``--against SRC``: figure 1 and 2 on another source tree too (``SRC/src`` first on
``PYTHONPATH``), alternated with this one. The 1-minute load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.run import ROOT, rss_kib

#: The pipe's limit for a Python server: asyncio reads stdin, each line parsed and answered.
BARE = r"""
import asyncio, json, sys

async def main():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    pending = b""
    while True:
        data = await reader.read(1 << 16)
        if not data:
            return
        *lines, pending = (pending + data).split(b"\n")
        out = []
        for line in lines:
            frame = json.loads(line)
            text = frame.get("params", {}).get("text", "")
            out.append(json.dumps({"jsonrpc": "2.0", "id": frame.get("id"), "result": {"count": (len(text) + 3) // 4}}).encode() + b"\n")
        transport.write(b"".join(out))

asyncio.run(main())
"""

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientInfo": {"name": "bench", "version": "1"}}}
NEVER = {"id": "never", "command": sys.executable, "args": ["-c", "import time; time.sleep(3600)"]}


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _settled(pid: int, quiet: float = 0.5, bound: float = 20.0) -> None:
    """Wait until process ``pid`` used no CPU for ``quiet`` seconds (at most ``bound``): the
    server started, and the daemon's warm-up after ``initialize`` (a thread importing
    jsonrpcserver, the actors and the ACP SDK: ~0.7 s of CPU) done, so the CPU time per
    frame is the frames' alone."""
    deadline = time.monotonic() + bound
    last = _cpu_s(pid)
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = _cpu_s(pid)
        if now == last:
            return
        last = now


def _spawn(argv: list[str], src: Path | None, state: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    full = dict(os.environ, XDG_STATE_HOME=state, PYTHONDONTWRITEBYTECODE="1", LMBRIDGE_LOG_LEVEL="warning", **(env or {}))
    if src is not None:
        full["PYTHONPATH"] = str(src / "src")
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=full, cwd=tempfile.gettempdir(), start_new_session=True)


def _daemon(src: Path | None, state: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return _spawn([sys.executable, "-m", "lmbridge", "serve", "--no-prewarm"], src, state, env)


def _write_all(fd: int, data: bytes, written: list[int] | None = None) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view[: 1 << 16])
        except BrokenPipeError:  # the flood's daemon was killed
            return
        view = view[n:]
        if written is not None:
            written[0] += n


def cheap(server: str, src: Path | None, frames: int, settle: bool = True) -> dict[str, float]:
    """``frames`` token counts through ``server`` ("lmbridge" or "bare"): once it is idle
    (``settle``), else at once after the ``initialize`` answer (the bare server: once started)."""
    with tempfile.TemporaryDirectory() as state:
        proc = _daemon(src, state) if server == "lmbridge" else _spawn([sys.executable, "-c", BARE], None, state)
        assert proc.stdin is not None and proc.stdout is not None
        if server == "lmbridge":
            proc.stdin.write(json.dumps(INIT).encode() + b"\n")
            proc.stdin.flush()
            proc.stdout.readline()
        if settle or server == "bare":
            _settled(proc.pid)
        text = "count the tokens of this short message, as Copilot asks for each message of a chat"
        data = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"lm/provideTokenCount","params":{"modelId":"demo","text":"%s"}}\n' % (i + 1, text.encode()) for i in range(frames))
        cpu0, t0 = _cpu_s(proc.pid), time.monotonic()
        writer = threading.Thread(target=_write_all, args=(proc.stdin.fileno(), data), daemon=True)
        writer.start()
        answered = 0
        readline = proc.stdout.readline
        while answered < frames:
            line = readline()
            if not line:
                raise RuntimeError(f"{server} closed its stdout after {answered} answers")
            if b'"count"' in line:
                answered += 1
        elapsed, cpu = time.monotonic() - t0, _cpu_s(proc.pid) - cpu0
        writer.join()
        proc.stdin.close()
        proc.wait(30)
    return {"frames_per_s": frames / elapsed, "cpu_us_per_frame": cpu / frames * 1e6}


def flood(src: Path | None, chats: int, seconds: float) -> dict[str, float]:
    """``chats`` chat requests for an agent that never starts, written for ``seconds``."""
    with tempfile.TemporaryDirectory() as state:
        proc = _daemon(src, state, {"LMBRIDGE_START_TIMEOUT": "3600"})
        assert proc.stdin is not None and proc.stdout is not None
        init = json.loads(json.dumps(INIT))
        init["params"]["agents"] = [NEVER]
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        proc.stdout.readline()
        rss0 = rss_kib(proc.pid) / 1024
        messages = json.dumps([{"role": "user", "content": [{"type": "text", "value": "hello " * 40}]}])
        frames = [
            b'{"jsonrpc":"2.0","id":%d,"method":"lm/provideLanguageModelChatResponse","params":{"modelId":"never","messages":%s,"options":{}}}\n' % (i + 1, messages.encode()) for i in range(chats)
        ]
        data = b"".join(frames)
        written = [0]
        writer = threading.Thread(target=_write_all, args=(proc.stdin.fileno(), data, written), daemon=True)
        writer.start()
        writer.join(seconds)
        took = written[0] // len(frames[0])
        rss = rss_kib(proc.pid) / 1024
        blocked = writer.is_alive()
        os.killpg(proc.pid, signal.SIGKILL)  # the daemon and its never-starting agent
        proc.wait(30)
    return {"chats_taken": took, "chats_written": chats, "writer_blocked": blocked, "rss_before_mib": round(rss0, 1), "rss_mib": round(rss, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.intake", description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=20_000)
    ap.add_argument("--chats", type=int, default=20_000)
    ap.add_argument("--flood-seconds", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warm-up", action="store_true", help="also the token counts written right after the initialize answer (the warm-up running)")
    ap.add_argument("--against", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / ".bench" / "intake.json")
    args = ap.parse_args(argv)
    trees: dict[str, Path | None] = {"this": None} if args.against is None else {"against": args.against.resolve(), "this": None}
    result: dict[str, Any] = {"load_before": os.getloadavg()[0], "frames": args.frames, "chats": args.chats}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in [*trees, "bare"]}
    warm: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.runs):
        runs["bare"].append(cheap("bare", None, args.frames))
        for name, src in trees.items():
            runs[name].append(cheap("lmbridge", src, args.frames))
            if args.warm_up:
                warm[name].append(cheap("lmbridge", src, args.frames, settle=False))
    for name, rs in runs.items():
        result[name] = {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]}
    for name, rs in warm.items():
        if rs:
            result[name]["warm_up"] = {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]}
    for name, src in trees.items():
        result[name]["flood"] = flood(src, args.chats, args.flood_seconds)
    result["load_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    bare = result["bare"]["frames_per_s"]
    print(f"load average {result['load_before']:.2f} before, {result['load_after']:.2f} after; {args.frames:,} token counts, median of {args.runs}")
    print(f"    bare: {bare:,.0f} frames/s, {result['bare']['cpu_us_per_frame']} µs CPU a frame")
    for name in trees:
        r, f = result[name], result[name]["flood"]
        print(
            f"{name:>8}: {r['frames_per_s']:,.0f} frames/s ({r['frames_per_s'] / bare:.2f}× bare), {r['cpu_us_per_frame']} µs CPU a frame; "
            f"flood: {f['chats_taken']:,} of {f['chats_written']:,} chats taken in {args.flood_seconds:g} s (writer blocked: {f['writer_blocked']}), RSS {f['rss_before_mib']} → {f['rss_mib']} MiB"
        )
        if "warm_up" in r:
            w = r["warm_up"]
            print(f"{'':>8}  right after initialize (the warm-up running): {w['frames_per_s']:,.0f} frames/s ({w['frames_per_s'] / bare:.2f}× bare), {w['cpu_us_per_frame']} µs CPU a frame")
    return 0


if __name__ == "__main__":
    sys.exit(main())
