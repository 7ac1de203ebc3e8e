"""``framing.BadLines``: lines that are not frames are logged bounded (issue #10, bug 4)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_daemon import LIMIT, eventually

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
    with anyio.fail_after(LIMIT):
        async with daemon() as c:
            await c.send_raw("[" * 1000 + "]" * 1000 + "\n")
            await c.send_raw('{"jsonrpc":"2.0","id":{},"method":"lm/provideTokenCount","params":{"text":"x"}}\n')
            await c.send_raw('{"jsonrpc":"2.0","id":[1],"method":"lm/provideTokenCount","params":{"text":"x"}}\n')
            await eventually(lambda: len(c.unmatched) >= 3, what="three errors")
            assert [f["error"]["code"] for f in c.unmatched] == [-32700, -32600, -32600]
            assert all(f["id"] is None for f in c.unmatched)
            models = await c.request("lm/provideLanguageModelChatInformation", {}, timeout=30)  # still serving
            assert [m["id"] for m in models["models"]] == ["demo"]


@pytest.mark.anyio
async def test_a_bad_method_with_a_readable_id_is_answered_with_that_id(daemon: Any) -> None:
    with anyio.fail_after(LIMIT):
        async with daemon() as c:
            await c.send_raw('{"jsonrpc":"2.0","id":7,"method":123}\n')
            await eventually(lambda: c.unmatched, what="the error")
            assert c.unmatched[0]["id"] == 7 and c.unmatched[0]["error"]["code"] == -32600


@pytest.mark.anyio
async def test_agent_frames_the_daemon_cannot_use_are_dropped_and_the_turn_goes_on(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    """A sessionUpdate that is a list (it was a TypeError that ended the session), a line
    nested 1,000 deep, a 100 KB stderr line; then the agent's error with its reason in
    data.message (codex-acp's way): the user reads the reason, clipped."""
    from lmbridge.client import text_of, user

    agent = scripted({"turns": [[
        {"update": {"sessionUpdate": ["not", "a", "kind"]}},
        {"stdout_raw": "[" * 1000 + "]" * 1000},
        {"stderr": "E" * 100_000},
        {"text": "still here"},
    ], [{"error": {"code": -32603, "message": "Internal error", "data": {"message": "model API: 429 rate limited " + "x" * 10_000}}}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user("one")])
            assert first.error is None and text_of(first) == "still here"
            second = await c.chat(agent.id, [user("one"), {"role": "assistant", "content": [{"type": "text", "value": "still here"}]}, user("two")])
    assert second.error is not None and "model API: 429 rate limited" in second.error.message
    assert len(second.error.message) < 4_000, len(second.error.message)


def test_an_agents_error_names_its_reason() -> None:
    """The reason of an agent's JSON-RPC error: data.message (codex-acp), data.details
    (fast-agent), or data itself when it is a string."""
    from lmbridge.acp.connection import AgentError

    fast = AgentError("session/new", {"code": -32603, "message": "Internal error", "data": {"details": "Runtime MCP server 'vscode' is already registered with different settings"}})
    assert str(fast) == "session/new: Internal error (code -32603): Runtime MCP server 'vscode' is already registered with different settings"
    codex = AgentError("session/prompt", {"code": -32603, "message": "Internal error", "data": {"message": "429", "details": "more"}})
    assert str(codex).endswith(": 429")
    assert str(AgentError("x", {"code": 1, "message": "m", "data": "why"})).endswith("(code 1): why")
    assert str(AgentError("x", {"code": 1, "message": "m", "data": {"details": 3}})) == "x: m (code 1)"


def test_agent_error_reason_in_data_details() -> None:
    """The ACP TypeScript SDK's internal errors carry the reason in data.details
    (gemini-cli 0.61.0's session/load): it is part of the message."""
    from lmbridge.acp.connection import AgentError

    error = {"code": -32603, "message": "Internal error", "data": {"details": "No previous sessions found for this project."}}
    assert str(AgentError("session/load", error)) == "session/load: Internal error (code -32603): No previous sessions found for this project."


def test_an_agents_error_reason_is_the_model_apis_message() -> None:
    """codex-acp 0.16.0 fails a prompt whose model call failed with -32603 "Internal error"
    and the API's error body, as it came, in data.message (seen against the fake Responses
    API): the user reads the API's message, not the JSON around it."""
    from lmbridge.acp.connection import AgentError, error_reason

    body = '{"error": {"message": "Rate limit reached for gpt-5.4", "type": "invalid_request_error", "param": null, "code": "rate_limit_exceeded"}}'
    error = AgentError("session/prompt", {"code": -32603, "message": "Internal error", "data": {"message": body}})
    assert str(error) == "session/prompt: Internal error (code -32603): Rate limit reached for gpt-5.4"
    assert error_reason({"message": "model API: 429 rate limited"}) == "model API: 429 rate limited"
    assert error_reason("plain") == "plain"
    assert error_reason({"message": "{not json"}) == "{not json"
    assert error_reason({"message": '{"detail": "no message here"}'}) == '{"detail": "no message here"}'
    assert error_reason({"message": '{"message": "top-level"}'}) == "top-level"
    assert error_reason({"other": 1}) is None and error_reason(None) is None and error_reason(7) is None
