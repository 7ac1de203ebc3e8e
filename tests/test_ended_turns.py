"""Output for a turn that has ended never shows up in a later answer, and what
waits between two requests of one turn is bounded. Through the daemon as a subprocess,
with the scripted agent's hostile steps: ``early`` (the prompt answered first, then a
chunk, a thought, a tool call and a plan for the ended turn) and ``chatter`` (end_turn,
then MBs of chunks while no request is open, then the next message)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_daemon import LIMIT, eventually, ok, only

from lmbridge.devtools.client import approve, assistant, text_of, tool_calls, user

pytestmark = pytest.mark.anyio

EARLY = [
    {"answer": "end_turn"},
    {"text": "EARLY-TEXT"},
    {"thought": "EARLY-THOUGHT"},
    {"tool_call": {"toolCallId": "late", "title": "EARLY-TOOL", "status": "in_progress"}},
    {"plan": [{"content": "EARLY-PLAN", "priority": "high", "status": "pending"}]},
    {"update": {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}},  # session-level: kept
]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_early_output_of_an_ended_turn_is_never_in_a_later_answer(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"text": "First answer."}, *EARLY], [{"text": "Second answer."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("one")])
            ok(first)
            await eventually(lambda: agent.events("prompt_answered"), what="the first turn's end")
            await anyio.sleep(0.3)  # the ended turn's output arrives while no request is open
            second = await c.chat(agent.id, [user("one"), assistant(first.parts), user("two")])
            ok(second)
    assert text_of(first) == "First answer."
    assert text_of(second) == "Second answer."
    assert "EARLY" not in json.dumps(first.parts) + json.dumps(second.parts)


async def test_chatter_after_the_turn_leaves_memory_flat_and_the_next_answer_clean(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [[{"text": "First answer."}, {"answer": "end_turn"}, {"chatter": {"mb": 200}}], [{"text": "Second answer."}]]})
    with anyio.fail_after(LIMIT * 3):  # 200 MiB through the daemon: ~10 s idle
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user("one")])
            ok(first)
            before = rss_kib(c.process.pid)
            peak = before
            while not agent.events("chatter_done"):
                peak = max(peak, rss_kib(c.process.pid))
                await anyio.sleep(0.05)
            second = await c.chat(agent.id, [user("one"), assistant(first.parts), user("two")])
            after = rss_kib(c.process.pid)
            ok(second)
    print(f"daemon RSS: before {before / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB, after {after / 1024:.1f} MiB")
    assert text_of(second) == "Second answer."  # exactly the new turn's output
    assert after - before < 20 * 1024, f"RSS grew {(after - before) / 1024:.1f} MiB after 200 MiB of chatter"
    log = (tmp_path / "daemon.stderr").read_text()
    assert "ended turn's output dropped" in log


async def test_output_between_two_requests_of_one_turn_is_bounded(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [[
        {"permission": {}, "id": "p1"},
        {"sleep": 0.3},
        {"chatter": {"mb": 4, "chunk": 4096}},  # while the card waits for the user
        {"text": "TAIL"},
        {"branch": "p1", "allow": [{"text": " then allowed."}]},
    ]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user("go")])
            ok(first, "tool_calls")
            await eventually(lambda: agent.events("chatter_done"), what="the chatter")
            await anyio.sleep(0.3)
            second = await c.chat(agent.id, [user("go"), assistant(first.parts), approve(only(tool_calls(first)))])
            ok(second)
    text = text_of(second)
    # 4 MiB said while waiting: the newest 1 MiB kept, a line says how much was left out.
    assert "bytes of output left out]" in text and "TAIL then allowed." in text
    assert 2**20 - 2 * 4096 <= text.count("C") <= 2**20  # 1 MiB of text kept, in whole chunks
