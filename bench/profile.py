"""Profile the daemon on the streaming hot path: ``python -m bench.profile [py-spy|pyinstrument]``.

Runs ``lmbridge serve`` under the profiler (installed separately: ``pip install
py-spy`` or ``pyinstrument``; neither is a project dependency) while a client
streams 3 × 20,000 text chunks and 3 × 2,000 4 KiB chunks through it from
``bench/synth_agent.py``. Output in ``.bench/profile.*``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.run import OUT_DIR, Peer, analyse, daemon_stream, init_daemon, private_state

PLAN = {"all": [(20_000, 32)] * 3 + [(2_000, 4096)] * 3, "text": [(20_000, 32)] * 5, "4k": [(2_000, 4096)] * 5}


def main(argv: list[str]) -> int:
    tool = argv[0] if argv else "py-spy"
    OUT_DIR.mkdir(exist_ok=True)
    serve = [sys.executable, "-m", "lmbridge", "serve"]
    spy = None
    if tool == "py-spy":
        out = OUT_DIR / "profile.pyspy.txt"
        cmd = serve
    elif tool == "pyinstrument":
        out = OUT_DIR / "profile.pyinstrument.txt"
        cmd = [sys.executable, str(Path(__file__).with_name("_profiled_serve.py")), str(out)]
    else:
        cmd = serve
        out = None
    d = Peer(cmd, "daemon-profile")
    init_daemon(d)
    if tool == "py-spy":
        spy = subprocess.Popen(["py-spy", "record", "--format", "raw", "--rate", "1000", "--nonblocking", "--threads", "-o", str(out), "--pid", str(d.pid)], stdout=subprocess.DEVNULL)
        import time

        time.sleep(1.0)
    for n, size in PLAN.get(argv[1] if len(argv) > 1 else "all"):
        r = analyse(daemon_stream(d, n, size, 0)[0], n)
        print(f"{n} x {size}: {r['chunks_per_s']:,.0f} chunks/s", file=sys.stderr)
    if spy is not None:
        spy.send_signal(subprocess.signal.SIGINT)
        spy.wait()
    d.stdin.close()  # type: ignore[union-attr]
    d.proc.wait(timeout=120)  # the profiler writes its report at exit
    d.close()
    print(f"profile: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    with private_state():  # the daemon reads no state of this machine's
        sys.exit(main(sys.argv[1:]))
