"""``framing.BadLines``: lines that are not frames are logged bounded (issue #10, bug 4)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_daemon import eventually

from lmbridge.framing import EVERY, FIRST, BadLines


def reporter() -> tuple[BadLines, list[tuple[str, dict[str, Any]]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    return BadLines("agent 'yes' stdout", lambda event, **fields: seen.append((event, fields))), seen


def test_the_first_lines_are_quoted_then_only_counted() -> None:
    bad, seen = reporter()
    for i in range(300_000):  # `yes` for ~15 s, at 20,000 lines a second
        bad.bad(b"y" * 1000, "not JSON", now=i / 20_000)
    bad.close()
    quoted = [f for _, f in seen if "line" in f]
    assert len(quoted) == FIRST and all(len(f["line"]) == 200 for f in quoted)
    counts = [f["skipped"] for _, f in seen if "skipped" in f]
    assert sum(counts) == 300_000 - FIRST and bad.total == 300_000
    assert len(seen) <= FIRST + 15 / EVERY + 2


@given(st.lists(st.floats(min_value=0, max_value=1000), max_size=200).map(sorted))
def test_every_line_is_counted_once_and_reports_stay_bounded(times: list[float]) -> None:
    bad, seen = reporter()
    for t in times:
        bad.bad(b"not json", "not JSON", now=t)
    bad.close()
    counted = min(len(times), FIRST) + sum(f.get("skipped", 0) for _, f in seen)
    assert counted == len(times)
    span = (times[-1] - times[0]) if times else 0
    assert len(seen) <= FIRST + span / EVERY + 2


@pytest.mark.anyio
async def test_the_shim_link_survives_deep_nesting_and_ids_json_rpc_does_not_allow(daemon: Any) -> None:
    """A line nested 1,000 deep was a RecursionError that ended the daemon; an object id
    on a known method was an unhashable-type crash (issue #14's first two frames)."""
    with anyio.fail_after(20):
        async with daemon() as c:
            await c.send_raw("[" * 1000 + "]" * 1000 + "\n")
            await c.send_raw('{"jsonrpc":"2.0","id":{},"method":"lm/provideTokenCount","params":{"text":"x"}}\n')
            await c.send_raw('{"jsonrpc":"2.0","id":[1],"method":"lm/provideTokenCount","params":{"text":"x"}}\n')
            await eventually(lambda: len(c.unmatched) >= 3, what="three errors")
            assert [f["error"]["code"] for f in c.unmatched] == [-32700, -32600, -32600]
            assert all(f["id"] is None for f in c.unmatched)
            models = await c.request("lm/provideLanguageModelChatInformation", {}, timeout=5)  # still serving
            assert [m["id"] for m in models["models"]] == ["demo"]
