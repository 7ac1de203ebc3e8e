"""``python -m bench --quick`` runs and produces every figure (docs/performance.md).

A smoke run, not a timed test: the figures of a quick run mean nothing, only
that each is there (``make bench`` measures them for real).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lmbridge.core.turn import GATHER

ROOT = Path(__file__).resolve().parent.parent


def test_quick_bench_produces_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)  # ~15 s idle
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(out.read_text())["figures"]
    assert set(figures) == {"start", "throughput_text", "throughput_4k", "latency", "history", "permission", "memory"}
    assert figures["start"]["ms"]["median"] > 0
    for key in ("throughput_text", "throughput_4k"):
        t = figures[key]
        assert t["daemon"]["chunks_per_s"]["median"] > 0 and t["direct"]["chunks_per_s"]["median"] > 0 and t["ratio"]["median"] > 0
    latency = figures["latency"]
    assert {"added_p50_us", "added_p99_us", "daemon_p99_us", "direct_p99_us"} <= set(latency)
    sizes = figures["history"]["sizes"]
    assert set(sizes) == {"10", "100", "1000", "5000"}
    for row in sizes.values():
        assert row["in_process"]["total_ms"]["median"] > 0 and row["end_to_end"]["request_to_agent_ms"]["median"] > 0
    permission = figures["permission"]
    assert permission["daemon_ms"]["median"] > 0
    # the daemon time leaves out the gather window the tool call part waits for (docs/performance.md, "Goals")
    with_window, without = permission["ask_to_part_incl_gather_ms"], permission["ask_to_part_ms"]
    window = GATHER * 1000
    assert permission["gather_window_ms"] == window
    assert with_window["min"] >= window and abs(with_window["median"] - without["median"] - window) < 0.01
    memory = figures["memory"]
    assert {"idle_mib", "after_conversation_mib", "before_sessions_mib", "after_sessions_mib"} <= set(memory)
    assert memory["agents_left"] == 0  # every evicted session's agent stopped
    # every figure is printed in the table, with its target
    for label in ("start", "throughput", "added latency", "history", "permission", "memory"):
        assert label in run.stdout
