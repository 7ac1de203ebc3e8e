"""Start-up and idle: what ``lmbridge serve`` loads and costs before and after ``initialize``.

Usage: ``python -m bench.startup [--runs N] [--against SRC] [--out PATH]``

Figures (docs/performance.md, "Start-up and idle"), each from a daemon with a private,
fresh state folder and ``PYTHONDONTWRITEBYTECODE=1`` (so lmbridge's own modules are
compiled at every start, as on a machine that sets it):

1. start: ``Popen`` → the ``initialize`` answer read (the request written at once).
2. modules loaded before the answer: ``python -X importtime`` lines written before the
   answer's first byte is (``MARKED``: ``lmbridge serve`` with its stdout's first write
   marked on stderr), and their own import time summed (inflated by ``-X importtime``
   itself: compare, do not add up).
3. idle RSS (``VmRSS`` of the daemon alone) once steady after ``initialize``: with nothing
   used before, and pre-warmed (the state folder says ``bench/synth_agent.py`` was used
   last, so the daemon starts it and its spare session right after ``initialize``).

4. the main thread's CPU time from ``exec`` to the answer's write (``MARKED`` says it):
   what lmbridge costs, far less moved by the machine's load than the wall time of 1.
5. the interpreter's floor, alternated with the starts: ``Popen`` → exit of ``python -c pass``
   (``PASS``) and of a program that loads what any daemon built on the same libraries must
   before it can answer (``FLOOR``: anyio's event loop run, one pydantic model validated).

``--against SRC`` runs every figure on a second source tree too (``SRC/src`` first on
``PYTHONPATH``: another checkout's ``lmbridge``), alternated run by run with this one so
both see the same load. The 1-minute load average is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.run import AGENT_SPEC, ROOT, rss_kib

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientInfo": {"name": "bench", "version": "1"}}}


def _env(src: Path | None, state: str) -> dict[str, str]:
    env = dict(os.environ, XDG_STATE_HOME=state, PYTHONDONTWRITEBYTECODE="1", LMBRIDGE_LOG_LEVEL="info")
    if src is not None:
        env["PYTHONPATH"] = str(src / "src")
    return env


#: ``lmbridge serve``, with ``ANSWERED`` and the main thread's CPU time so far (ms) written on
#: stderr just before the first write to stdout (the ``initialize`` answer): what ``-X
#: importtime`` lists before it was loaded first, and what it cost.
ANSWERED = "lmbridge-bench: answer written"
MARKED = f"""
import sys, time
from lmbridge import cli
from lmbridge.daemon import root

opened = root.stdout_writer

async def marked():
    out = await opened()
    write = out.write

    def first(data):
        sys.stderr.write({ANSWERED!r} + " %.1f\\n" % (time.thread_time() * 1000))
        sys.stderr.flush()
        out.write = write
        write(data)

    out.write = first
    return out

root.stdout_writer = marked
sys.exit(cli.main(["serve"]))
"""


def _spawn(src: Path | None, state: str, *python_flags: str, marked: bool = False) -> subprocess.Popen[bytes]:
    """``lmbridge serve`` (``marked``: ``MARKED``), its stderr into ``state``/stderr (read by ``_end``)."""
    argv = [sys.executable, *python_flags, *(["-c", MARKED] if marked else ["-m", "lmbridge", "serve"])]
    with open(Path(state) / "stderr", "wb") as err:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=_env(src, state), cwd=tempfile.gettempdir())


#: The floor: Python's own start, and what anyio and pydantic cost a daemon answering with them.
PASS = ["-c", "pass"]
FLOOR = ["-c", """
import anyio
from pydantic import BaseModel

class Params(BaseModel):
    protocolVersion: int

async def main():
    Params.model_validate({"protocolVersion": 1})

anyio.run(main)
"""]


def floor_ms(argv: list[str]) -> float:
    """``Popen`` → exit of ``python ARGV`` (no bytecode written, as for the daemon)."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, *argv], env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"), check=True, cwd=tempfile.gettempdir())
    return (time.monotonic() - t0) * 1000


def _end(proc: subprocess.Popen[bytes], state: str) -> bytes:
    """Close the daemon's stdin (it shuts down as at EOF); its stderr."""
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    return (Path(state) / "stderr").read_bytes()


def start_ms(src: Path | None) -> float:
    with tempfile.TemporaryDirectory() as state:
        t0 = time.monotonic()
        proc = _spawn(src, state)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        elapsed = (time.monotonic() - t0) * 1000
        assert answer.get("result", {}).get("protocolVersion") == 1, answer
        _end(proc, state)
    return elapsed


def cpu_ms(src: Path | None) -> float:
    """The main thread's CPU time, ``exec`` → the ``initialize`` answer's write (``MARKED``)."""
    with tempfile.TemporaryDirectory() as state:
        proc = _spawn(src, state, marked=True)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        proc.stdout.readline()
        err = _end(proc, state).decode(errors="replace")
    return float(next(line for line in err.splitlines() if line.startswith(ANSWERED)).split()[-1])


def modules(src: Path | None) -> dict[str, Any]:
    """The modules imported before ``initialize`` is answered (``-X importtime``)."""
    with tempfile.TemporaryDirectory() as state:
        proc = _spawn(src, state, "-X", "importtime", marked=True)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        proc.stdout.readline()
        err = _end(proc, state).decode(errors="replace")
    names: list[str] = []
    self_us = 0
    for line in err.splitlines():
        if line.startswith(ANSWERED):
            break
        if line.startswith("import time:") and "self [us]" not in line:
            own, _, name = line.removeprefix("import time:").split("|")
            self_us += int(own)
            names.append(name.strip())
    tops: dict[str, int] = {}
    for name in names:
        top = name.split(".")[0]
        tops[top] = tops.get(top, 0) + 1
    return {"count": len(names), "self_ms": round(self_us / 1000, 1), "lmbridge": sorted(n for n in names if n.startswith("lmbridge")), "packages": tops}


def idle_mib(src: Path | None, prewarmed: bool, steady: float = 3.0, bound: float = 60.0) -> float:
    """The daemon's RSS once idle after ``initialize`` (with the synthetic agent configured):
    pre-warmed, once its spare session is opened; then unchanged for ``steady`` seconds (the
    imports that follow ``initialize`` are done); at most ``bound`` seconds after."""
    with tempfile.TemporaryDirectory() as state:
        if prewarmed:
            folder = Path(state) / "lmbridge"
            folder.mkdir()
            (folder / "agents.json").write_text(json.dumps({"program": "lmbridge", "version": 1, "recent": [AGENT_SPEC["id"]]}))
        proc = _spawn(src, state)
        assert proc.stdin is not None and proc.stdout is not None
        init = json.loads(json.dumps(INIT))
        init["params"].update(workspaceFolders=[str(ROOT)], agents=[AGENT_SPEC])
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        proc.stdout.readline()
        deadline = time.monotonic() + bound
        log = Path(state) / "stderr"
        while prewarmed and time.monotonic() < deadline and b"spare session" not in log.read_bytes():
            time.sleep(0.1)  # "spare session ready", or "no spare session"
        rss, since = rss_kib(proc.pid), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < steady:
            time.sleep(0.25)
            now = rss_kib(proc.pid)
            if now != rss:
                rss, since = now, time.monotonic()
        _end(proc, state)
    return rss / 1024


def _load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="start-up runs per tree (default 15)")
    ap.add_argument("--idle-runs", type=int, default=3, help="idle RSS runs per tree and case (default 3)")
    ap.add_argument("--against", type=Path, help="another source tree (a checkout) to measure alternately")
    ap.add_argument("--out", type=Path, default=ROOT / ".bench" / "startup.json")
    args = ap.parse_args(argv)
    trees: dict[str, Path | None] = {"this": None}
    if args.against is not None:
        trees = {"against": args.against.resolve(), "this": None}
    result: dict[str, Any] = {"load_before": _load()}
    for name, src in trees.items():
        result.setdefault(name, {})["modules"] = modules(src)
    starts: dict[str, list[float]] = {name: [] for name in trees}
    cpus: dict[str, list[float]] = {name: [] for name in trees}
    floors: dict[str, list[float]] = {"pass": [], "floor": []}
    for _ in range(args.runs):
        floors["pass"].append(floor_ms(PASS))
        floors["floor"].append(floor_ms(FLOOR))
        for name, src in trees.items():
            starts[name].append(start_ms(src))
            cpus[name].append(cpu_ms(src))
    idle: dict[str, dict[str, list[float]]] = {name: {"fresh": [], "prewarmed": []} for name in trees}
    for _ in range(args.idle_runs):
        for name, src in trees.items():
            for case in ("fresh", "prewarmed"):
                idle[name][case].append(idle_mib(src, case == "prewarmed"))
    result["load_after"] = _load()
    result["floor_ms"] = {k: round(statistics.median(v), 1) for k, v in floors.items()}
    for name in trees:
        times = sorted(starts[name])
        result[name]["start_ms"] = {"median": round(statistics.median(times), 1), "min": round(times[0], 1), "max": round(times[-1], 1), "n": len(times)}
        cpu = sorted(cpus[name])
        result[name]["cpu_ms"] = {"median": round(statistics.median(cpu), 1), "min": round(cpu[0], 1), "max": round(cpu[-1], 1), "n": len(cpu)}
        result[name]["idle_mib"] = {case: round(statistics.median(v), 1) for case, v in idle[name].items()}
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"load average {result['load_before']:.2f} before, {result['load_after']:.2f} after; {args.runs} starts, {args.idle_runs} idle runs a case")
    f = result["floor_ms"]
    print(f"   floor: python -c pass {f['pass']} ms; anyio's loop run + a pydantic model validated {f['floor']} ms (medians)")
    for name in trees:
        r = result[name]
        s, m = r["start_ms"], r["modules"]
        print(
            f"{name:>8}: start {s['median']} ms ({s['min']}–{s['max']}), main thread's CPU to the answer {r['cpu_ms']['median']} ms "
            f"({r['cpu_ms']['min']}–{r['cpu_ms']['max']}), {m['count']} modules before the answer "
            f"({len(m['lmbridge'])} lmbridge; own import time {m['self_ms']} ms under -X importtime), "
            f"idle {r['idle_mib']['fresh']} MiB fresh / {r['idle_mib']['prewarmed']} MiB pre-warmed"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
