"""``make bench-sessions`` runs (bench/sessions.py): two chats, one run, back to back, every figure produced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lmbridge.core.profiles import CLAUDE

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.real_agent


def test_bench_sessions_smoke(tmp_path: Path) -> None:
    out = tmp_path / "sessions.json"
    argv = [sys.executable, "-m", "bench.sessions", "--agents", "claude", "--chats", "2", "--runs", "1", "--gaps", "0", "--spare-session", "--out", str(out)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["claude"]["version"].startswith("claude-agent-acp ")
    figures = results["claude"]["back_to_back"]
    for name in ("direct", "lmbridge_cold", "lmbridge_prewarmed"):
        f = figures[name]
        assert f["first_s"] > 0 and f["next_s"] > 0 and f["agents_rss_mib"] > 50 and f["agent_processes"] >= 2, (name, f)
    assert figures["lmbridge_cold"]["daemon_rss_mib"] > 10
    assert figures["lmbridge_prewarmed"]["idle_agents_rss_mib"] > figures["direct"]["idle_agents_rss_mib"] > 20  # the spares' cost
    assert "× direct" in done.stdout
    budget = 200 * CLAUDE.spares  # the agents' RSS over the direct client's: at most 200 MiB a spare kept
    assert figures["checks"]["rss_over_direct_max_mib"] == budget
    for name in ("lmbridge_cold", "lmbridge_prewarmed"):  # the goals, checked (reported, not failed on)
        c = figures["checks"][name]
        assert c["next_ratio"] == round(figures[name]["next_s"] / figures["direct"]["next_s"], 3), (name, c)
        assert c["rss_over_direct_mib"] == round(figures[name]["agents_rss_mib"] - figures["direct"]["agents_rss_mib"], 1), (name, c)
        assert c["next_ok"] == (c["next_ratio"] <= 0.5) and c["rss_ok"] == (c["rss_over_direct_mib"] <= budget), (name, c)
    d = figures["direct"]  # its first prompt alone: the chat less its session/new (one chat after the first: exactly)
    assert 0 < d["next_prompt_s"] < d["next_s"] and abs(d["next_prompt_s"] - (d["next_s"] - d["next_open_s"])) <= 0.002, d
    assert f"its first prompt alone {d['next_prompt_s']}" in done.stdout
    assert "≤ 0.5" in done.stdout and "load average" in done.stdout
    assert len(results["_setup"]["load_before"]) == 3
