"""Generated stdin frames (hypothesis) against one daemon: it never exits, stays responsive,
and answers every request with a usable id exactly once (docs/reliability.md).

Frames come from ``tests/fuzz/frames.py``: ids of every JSON type, deep nesting, huge
and non-UTF-8 strings, unknown methods, wrong parameter types, notifications, batches,
cancels of unknown ids, reused ids, and chats with random histories (Copilot's real ones
cut and extended) to two scripted agents, one of which asks a permission. Each example
sends a round of frames, waits until everything owed is answered, then a second round
that may continue the chats answered in the first.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import QUIET_START, SCRIPTED_AGENT, alive
from tests.fuzz.frames import FuzzState, RandomChooser, frame
from tests.fuzz.peer import FuzzDaemon

CAP = 2  # --max-agent-processes: live processes per agent
SETTLE = 60.0  # seconds within which everything owed must be answered


@dataclass
class Fuzzed:
    daemon: FuzzDaemon
    agents: list[dict[str, Any]]
    workspace: str
    seen_pids: set[int]


def scripted_spec(where: Path, name: str, scenario: dict[str, Any]) -> dict[str, Any]:
    path = where / f"{name}.json"
    path.write_text(json.dumps(scenario))
    return {"id": name, "command": sys.executable, "args": [str(SCRIPTED_AGENT), str(path)]}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    where = tmp_path_factory.mktemp("fuzz")
    agents = [
        scripted_spec(where, "fuzz-ok", {"default_turn": [{"text": "ok"}, {"thought": "hm"}]}),
        scripted_spec(where, "fuzz-ask", {"default_turn": [
            {"text": "May I?"},
            {"ask": {"toolCall": {"toolCallId": "t1", "title": "touch x", "kind": "execute"}}, "id": "p1"},
            {"text": "done"},
        ]}),
    ]
    # A new chat over the cap waits for a free session (its cards keep theirs): 1 s here, so
    # every request is still answered well within SETTLE.
    daemon = FuzzDaemon(["--max-agent-processes", str(CAP), "--session-wait", "1"], where / "daemon.stderr",
                        env={**QUIET_START, "LMBRIDGE_DRAIN_TIMEOUT": "2"})  # fmt: skip
    fuzzed = Fuzzed(daemon, agents, str(where), set())
    daemon.request("initialize", {"protocolVersion": 1, "workspaceFolders": [str(where)], "agents": agents}, "init")
    yield fuzzed
    assert daemon.close() == 0, f"the daemon did not exit cleanly: {daemon.stderr_path.read_text()[-3000:]}"
    assert not [pid for pid in fuzzed.seen_pids if alive(pid)], "an agent process outlived the daemon"
    assert not daemon.ledger.violations, daemon.ledger.violations


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_generated_frames_are_each_answered_once_and_the_daemon_lives(fuzzed: Fuzzed, data: st.DataObject) -> None:
    daemon, ledger = fuzzed.daemon, fuzzed.daemon.ledger
    state = FuzzState(models=[a["id"] for a in fuzzed.agents], agents=fuzzed.agents, workspace=fuzzed.workspace, max_text=20_000)
    ledger.on_answer = state.answered
    # One seed drawn, the frames from it: what the frames continue depends on the daemon's
    # answers (round 2 continues round 1's chats), so draws made frame by frame would make
    # hypothesis see the same prefix lead to different draws (FlakyStrategyDefinition).
    c = RandomChooser(random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed")))
    for _ in range(2):  # the second round may continue the chats answered in the first
        for _ in range(c.integer(1, 30)):
            daemon.send(frame(c, state))
        # Responsive: a plain request is answered, however the frames before it went.
        daemon.request("lm/provideTokenCount", {"modelId": "fuzz-ok", "text": "abcd"}, f"probe-{state.next_id}", timeout=SETTLE)
        assert ledger.wait_settled(SETTLE), f"{ledger.owed()} requests unanswered after {SETTLE} s"
        agents = daemon.agents()
        fuzzed.seen_pids.update(agents)
        assert len(agents) <= CAP * len(fuzzed.agents), f"{len(agents)} agent processes, cap {CAP} per agent"
        assert daemon.alive(), f"the daemon exited: {daemon.stderr_path.read_text()[-3000:]}"
        assert not ledger.violations, ledger.violations
