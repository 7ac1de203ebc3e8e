"""``framing``: lines that are not frames are logged bounded (``BadLines``); over-long lines
are dropped as they stream (``Lines``, ``read_head``); an agent's stderr is logged at a
bounded rate (``Throttle``)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_daemon import LIMIT, eventually

from lmbridge.rpc.framing import EVERY, FIRST, STDERR_FIRST, STDERR_RATE, BadLines, Head, Lines, Overlong, Throttle, read_head, split_lines


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
    on a known method was an unhashable-type crash (the first two frames of the soak run)."""
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
    from lmbridge.devtools.client import text_of, user

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


# ------------------------------------------------------------------ Lines: over-long lines dropped as they stream


def _expected(line: bytes, limit: int, head: int) -> bytes | Overlong:
    return line if len(line) <= limit else Overlong(len(line), line[:head])


@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    st.booleans(),
    st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=30),
    st.integers(min_value=1, max_value=20),
    st.integers(min_value=0, max_value=8),
)
def test_lines_are_split_as_written_and_over_long_ones_dropped_in_place(
    lines: list[bytes], trailing: bool, cuts: list[int], limit: int, head: int
) -> None:
    """Whatever the reads' sizes: the lines in order, each longer than ``limit`` replaced by
    its size and first ``head`` bytes; never more than ``limit`` bytes held of one line."""
    stream = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    splitter = Lines(limit, head=head)
    got: list[bytes | Overlong] = []
    at, n = 0, 0
    while at < len(stream):
        size = cuts[n % len(cuts)]
        got += splitter.feed(stream[at:at + size])
        assert splitter.held <= limit
        at, n = at + size, n + 1
    last = splitter.end()
    if last is not None:
        got.append(last)
    complete = lines if trailing or not lines else lines[:-1]
    expected = [_expected(line, limit, head) for line in complete]
    if lines and not trailing and lines[-1]:
        expected.append(_expected(lines[-1], limit, head))
    assert got == expected


@given(st.lists(st.sampled_from([b"\n", b"a", b"\xff", b"\r", b"\n\n"]), max_size=60).map(b"".join), st.integers(min_value=0, max_value=30))
def test_split_lines_is_bytes_split_whichever_way_it_splits(data: bytes, long: int) -> None:
    """``split_lines`` gives ``bytes.split``'s list for any bytes, by ``find`` (a first line of
    ``long`` bytes or more) or by ``split``; a line of 4 KiB and one of 10 bytes alike."""
    assert split_lines(data, long) == data.split(b"\n")
    assert split_lines(data) == data.split(b"\n")
    many = (b"x" * 4096 + b"\n") * 3 + b"y" * 10 + b"\n" + data
    assert split_lines(many) == many.split(b"\n")


def test_a_line_of_300_mb_is_never_held() -> None:
    """Fed in 256 KiB reads (what the agent's stdout gives), a 300 MB line then a frame:
    the frame comes through and the splitter never held more than its limit."""
    limit = 16 * 2**20
    splitter = Lines(limit)
    chunk = b"L" * (256 * 1024)
    got = splitter.feed(b'{"jsonrpc":"2.0","id":3,"result":{"x":"' + chunk)
    most = splitter.held
    for _ in range(1200):
        got += splitter.feed(chunk)
        most = max(most, splitter.held)
    got += splitter.feed(b'"}}\n{"jsonrpc":"2.0","id":4,"result":{}}\n')
    assert most <= limit
    (dropped, frame) = got
    assert isinstance(dropped, Overlong) and dropped.size == 1201 * len(chunk) + 42 and dropped.head.startswith(b'{"jsonrpc":"2.0","id":3')
    assert read_head(dropped.head) == Head(has_id=True, id=3, body="result")
    assert frame == b'{"jsonrpc":"2.0","id":4,"result":{}}'


@pytest.mark.parametrize(
    ("start", "head"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"stopReason":', Head(True, 7, None, "result")),
        (b'{"jsonrpc": "2.0", "id": "h1", "method": "session/request_permission", "params": {"x', Head(True, "h1", "session/request_permission", "params")),
        (b'{"id":5,"jsonrpc":"2.0","error":{"code":', Head(True, 5, None, "error")),  # serde's member order
        (b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","id":9', Head(False, None, "session/update", "params")),
        (b'{"jsonrpc":"2.0","params":{"id":1},"id":2', Head(body="params")),  # the id comes after: unknown
        (b'  {"id": null, "result": {', Head(True, None, None, "result")),
        (b'{"id": {"x": 1}, "result"', Head()),  # not a scalar: not read
        (b'{"jsonrpc":"2.0","id":12', Head()),  # cut before a comma: not known to be whole
        (b"LLLL", Head()),
        (b"[1, 2]", Head()),
        (b"", Head()),
    ],
)
def test_the_start_of_a_dropped_line_says_what_it_was(start: bytes, head: Head) -> None:
    assert read_head(start) == head


# ------------------------------------------------------------------ Throttle: an agent's stderr logged at a bounded rate


def throttle() -> tuple[Throttle, list[tuple[str, dict[str, Any]]], list[tuple[str, dict[str, Any]]]]:
    lines: list[tuple[str, dict[str, Any]]] = []
    summaries: list[tuple[str, dict[str, Any]]] = []
    return (Throttle("agent 'x'", lambda event, **f: lines.append((event, f)), lambda event, **f: summaries.append((event, f))),
            lines, summaries)


def test_a_stderr_flood_is_logged_first_lines_then_a_rate_then_counts() -> None:
    """120,000 lines in 2 s: the first lines, then ``STDERR_RATE`` a second, the rest
    counted with their bytes and said once at the end."""
    log, lines, summaries = throttle()
    for i in range(120_000):
        log.offer(f"line {i}", 80, now=i / 60_000)
    log.close()
    assert len(lines) == STDERR_FIRST + 2 * STDERR_RATE
    assert [f["line"] for _, f in lines[:3]] == ["line 0", "line 1", "line 2"]
    (event, fields), = summaries
    left = 120_000 - STDERR_FIRST - 2 * STDERR_RATE
    assert fields == {"lines": left, "bytes": left * 80}
    assert event == f"agent 'x' wrote {left:,} more stderr lines, {left * 80 / 1e6:.1f} MB, not logged"


@given(st.lists(st.floats(min_value=0, max_value=300), max_size=300).map(sorted))
def test_every_stderr_line_is_logged_or_counted_once_and_the_log_stays_bounded(times: list[float]) -> None:
    log, lines, summaries = throttle()
    for t in times:
        log.offer("x", 2, now=t)
    log.close()
    assert len(lines) + sum(f["lines"] for _, f in summaries) == len(times)
    assert sum(f["bytes"] for _, f in summaries) == 2 * sum(f["lines"] for _, f in summaries)
    span = (times[-1] - times[0]) if times else 0
    assert len(lines) <= STDERR_FIRST + STDERR_RATE * (span + 1)
    assert len(summaries) <= span / EVERY + 1


def test_a_quiet_agents_stderr_is_logged_whole() -> None:
    log, lines, summaries = throttle()
    for t in range(100):
        log.offer(f"l{t}", 3, now=t * 0.5)  # two a second
    log.close()
    assert len(lines) == 100 and not summaries
