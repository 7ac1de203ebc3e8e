"""``make bench-bounds``: the daemon's memory under an agent's over-long stdout lines, and
its log under an agent's stderr flood (docs/reliability.md, "Bounds").

Usage: ``python -m bench.bounds [--mb M] [--count K] [--lines N] [--daemon-src DIR] [--out PATH]``

One ``lmbridge serve --log-level debug`` (the level the tests run at, where every agent
stderr line used to be logged), fed by ``tests/fuzz/peer.FuzzDaemon``, with the agents of
``tests/agents/``:

1. **idle**: one chat with a scripted agent answering "ok"; the daemon's RSS 1 s later.
2. **over-long lines**: one chat with the hostile agent's ``long-lines`` mode: ``--count``
   session/update lines and one permission request, each ``--mb`` MB (default 300: longer
   than any line limit the daemon ever had), streamed by the agent as fast as the pipe
   takes them. The daemon's RSS sampled every 20 ms: its peak; then its RSS 2 s after the
   chat was answered ("after"), and how the chat was answered.
3. **stderr flood**: a chat with ``flood-stderr --lines N`` (default 120,000) and one with
   ``flood-stderr --lines 0``: the bytes and lines the daemon logged for each; the
   difference is what the flood cost the log.

``--daemon-src``: run the daemon from another checkout's ``src`` (to measure a commit from
before). Results go to ``.bench/bounds.json`` (``--out``) and are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.conftest import QUIET_START, SCRIPTED_AGENT
from tests.fuzz.peer import FuzzDaemon

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "agents" / "hostile_agent.py"
MiB = 2**20


def _hostile(name: str, *args: str) -> dict[str, Any]:
    return {"id": name, "command": sys.executable, "args": [str(HOSTILE), *args]}


def _chat(daemon: FuzzDaemon, model: str, rid: int) -> str:
    """One new chat, waited for (at most 300 s): its text, or its error."""
    done = threading.Event()
    answer: dict[str, Any] = {}

    def on_answer(got: Any, frame: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        if got == f"c{rid}":
            answer.update(frame=frame, parts=parts)
            done.set()

    daemon.ledger.on_answer = on_answer
    daemon.send(json.dumps({"jsonrpc": "2.0", "id": f"c{rid}", "method": "lm/provideLanguageModelChatResponse",
                            "params": {"modelId": model, "messages": [{"role": "user", "content": [{"type": "text", "value": f"chat {rid}"}]}]}}).encode())
    if not done.wait(300):
        return "no answer within 300 s"
    if "error" in answer["frame"]:
        return f"error: {str(answer['frame']['error'].get('message'))[:300]}"
    return "".join(str(p.get("value", "")) for p in answer["parts"] if p.get("type") == "text")[:300]


def run(mb: int, count: int, lines: int, daemon_src: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lmbridge-bounds-") as tmp:
        where = Path(tmp)
        (where / "ok.json").write_text(json.dumps({"default_turn": [{"text": "ok"}]}))
        agents = [
            {"id": "ok", "command": sys.executable, "args": [str(SCRIPTED_AGENT), str(where / "ok.json")]},
            _hostile("long", "long-lines", "--long-mb", str(mb), "--long-count", str(count), "--log", str(where / "long.jsonl")),
            _hostile("flood", "flood-stderr", "--lines", str(lines)),
            _hostile("quiet", "flood-stderr", "--lines", "0"),
        ]
        env = {**QUIET_START, "LMBRIDGE_LOG_LEVEL": "debug"}
        if daemon_src:
            env["PYTHONPATH"] = os.pathsep.join([daemon_src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        log = where / "daemon.stderr"
        daemon = FuzzDaemon([], log, env=env)
        daemon.request("initialize", {"protocolVersion": 1, "workspaceFolders": [str(where)], "agents": agents}, "init")
        ok = _chat(daemon, "ok", 1)
        time.sleep(1.0)
        idle = daemon.rss()

        peak = [idle]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.02):
                peak[0] = max(peak[0], daemon.rss())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        began = time.monotonic()
        long = _chat(daemon, "long", 2)
        took = time.monotonic() - began
        time.sleep(2.0)
        stop.set()
        sampler.join()
        after = daemon.rss()

        def logged(model: str, rid: int) -> tuple[int, int, str]:
            size, text_lines = log.stat().st_size, log.read_text(errors="replace").count("\n")
            answer = _chat(daemon, model, rid)
            time.sleep(0.5)
            return log.stat().st_size - size, log.read_text(errors="replace").count("\n") - text_lines, answer

        quiet_bytes, quiet_lines, _ = logged("quiet", 3)
        flood_bytes, flood_lines, flood = logged("flood", 4)
        code = daemon.close()
        tail = [line for line in log.read_text(errors="replace").splitlines() if "stderr lines" in line or "longer than" in line][-4:]
    return {
        "daemon_src": daemon_src or "this checkout",
        "long_lines": {"lines": count + 1, "mb_each": mb, "rss_idle_mib": round(idle / MiB, 1), "rss_peak_mib": round(peak[0] / MiB, 1),
                       "rss_after_mib": round(after / MiB, 1), "peak_over_idle": round(peak[0] / idle, 2), "seconds": round(took, 1),
                       "answer": long, "first_chat": ok},
        "stderr_flood": {"agent_lines": lines, "log_bytes": flood_bytes - quiet_bytes, "log_lines": flood_lines - quiet_lines,
                         "answer": flood, "log_bytes_without_flood": quiet_bytes},
        "log_excerpt": tail,
        "daemon_exit": code,
        "violations": daemon.ledger.violations,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=300, help="MB in each over-long line")
    parser.add_argument("--count", type=int, default=2, help="over-long session/update lines (plus one permission request)")
    parser.add_argument("--lines", type=int, default=120_000, help="stderr lines in the flood")
    parser.add_argument("--daemon-src", default=None)
    parser.add_argument("--out", default=str(ROOT / ".bench" / "bounds.json"))
    args = parser.parse_args()
    results = run(args.mb, args.count, args.lines, args.daemon_src)
    print(json.dumps(results, indent=1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    return 1 if results["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
