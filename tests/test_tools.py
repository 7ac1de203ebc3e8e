"""VS Code-provided tools through the real daemon (docs/tools.md), with a scripted agent
that speaks MCP to the daemon's synthetic server over the stdio fallback
(``lmbridge mcp-stdio``): several calls in one turn, skip, stop, the tool list
following each request (``tools/list_changed``), a relay naming a session that is
not open, and every MCP call answered exactly once. (A relay of another user:
tests/test_security.py.)"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from test_daemon import eventually

from lmbridge.core.permissions import ACTION_TOOL as AGENT_ACTION_TOOL
from lmbridge.devtools.client import assistant, skip, text_of, tool_calls, tool_result, user
from lmbridge.tools.mcp_bridge import DECLINED_TEXT, STOPPED_TEXT

pytestmark = pytest.mark.anyio
LIMIT = 120  # seconds per test body: ~2 s idle (docs/reliability.md, "Tests under load")

TOOLS = [
    {"name": "search_workspace", "description": "Search the workspace", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}},
    {"name": "read_file", "description": "Read a file", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": AGENT_ACTION_TOOL, "description": "lmbridge's own tool: never offered to agents"},
]


def options(tools: list[dict[str, Any]] = TOOLS) -> dict[str, Any]:
    return {"tools": tools, "toolMode": "auto"}


def two_calls_turn() -> list[dict[str, Any]]:
    return [
        {"mcp_connect": True},
        {"mcp_list": True},
        {"text": "Looking around."},
        {"mcp_call": {"name": "search_workspace", "arguments": {"q": "TODO"}}, "id": "m1"},
        {"mcp_call": {"name": "read_file", "arguments": {"path": "a.py"}}, "id": "m2"},
        {"mcp_await": ["m1", "m2"]},
        {"text": "Done with the tools."},
    ]


def results(agent: Any) -> dict[str, Any]:
    return {e["id"]: e["result"] for e in agent.events("mcp_result")}


def texts(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


async def test_two_tools_in_one_turn_go_out_together_and_both_results_return(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [two_calls_turn()]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            history = [user("find the TODOs")]
            first = await c.chat(agent.id, history, options=options())
            assert first.error is None and first.result == {"stopReason": "tool_calls"}
            calls = tool_calls(first)
            assert [(p["name"], p["input"]) for p in calls] == [("search_workspace", {"q": "TODO"}), ("read_file", {"path": "a.py"})]
            assert all(p["callId"].startswith("lmbridge-") for p in calls)
            history += [assistant(first.parts), tool_result(calls[0]["callId"], "a.py:3: TODO"), tool_result(calls[1]["callId"], "print('hi')")]
            second = await c.chat(agent.id, history, options=options())
            assert second.error is None and second.result == {"stopReason": "end_turn"}
            assert "Done with the tools." in text_of(second)
    tools_listed = agent.events("mcp_tools")[0]["names"]
    assert tools_listed == ["search_workspace", "read_file"]  # never lmbridge's own tool
    got = results(agent)
    assert texts(got["m1"]) == "a.py:3: TODO" and not got["m1"].get("isError")
    assert texts(got["m2"]) == "print('hi')" and not got["m2"].get("isError")
    assert len(agent.prompts()) == 1  # results continued the open turn


async def test_one_skipped_one_allowed(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [two_calls_turn()]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            history = [user("find the TODOs")]
            first = await c.chat(agent.id, history, options=options())
            calls = tool_calls(first)
            history += [assistant(first.parts), skip(calls[0]), tool_result(calls[1]["callId"], "contents")]
            second = await c.chat(agent.id, history, options=options())
            assert second.error is None and second.result == {"stopReason": "end_turn"}
    got = results(agent)
    assert got["m1"]["isError"] and texts(got["m1"]) == DECLINED_TEXT
    assert texts(got["m2"]) == "contents" and not got["m2"].get("isError")


async def test_stop_with_both_pending_answers_both_and_cancels(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [two_calls_turn(), [{"text": "fresh answer"}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user("find the TODOs")], options=options())
            assert len(tool_calls(first)) == 2
            # Stop: the round is gone from the history; a new message follows.
            second = await c.chat(agent.id, [user("find the TODOs"), user("forget it")], options=options())
            assert second.error is None and second.result == {"stopReason": "end_turn"}
            assert "fresh answer" in text_of(second)
    got = results(agent)
    assert got["m1"]["isError"] and got["m2"]["isError"]
    assert texts(got["m1"]) == STOPPED_TEXT and texts(got["m2"]) == STOPPED_TEXT
    assert agent.events("cancel")
    assert [p["text"] for p in agent.prompts()][-1] == "forget it"


async def test_tool_list_follows_each_request(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [
        [{"mcp_connect": True}, {"mcp_list": True}, {"text": "listed"}],
        [{"sleep": 0.3}, {"mcp_list": True}, {"text": "listed again"}],
    ]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            history = [user("one")]
            first = await c.chat(agent.id, history, options=options(TOOLS[:1]))
            history += [assistant(first.parts), user("two")]
            second = await c.chat(agent.id, history, options=options(TOOLS))
            assert "listed again" in text_of(second)
    assert [e["names"] for e in agent.events("mcp_tools")] == [["search_workspace"], ["search_workspace", "read_file"]]
    assert [e["method"] for e in agent.events("mcp_notification")] == ["notifications/tools/list_changed"]


async def test_agent_filters_by_name(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [[{"mcp_connect": True}, {"mcp_list": True}]]})
    spec = {**agent.spec, "tools": {"deny": ["read_*"]}}
    with anyio.fail_after(LIMIT):
        async with daemon([spec]) as c:
            call = await c.chat(agent.id, [user("hi")], options=options())
            assert call.error is None
    assert agent.events("mcp_tools")[0]["names"] == ["search_workspace"]


async def test_relay_naming_a_session_that_is_not_open_is_refused(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [[{"mcp_connect": {"session": "s99"}}, {"text": "tried"}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            call = await c.chat(agent.id, [user("hi")], options=options())
            assert call.error is None and "tried" in text_of(call)
    assert agent.events("mcp_refused") and not agent.events("mcp_connected")


async def test_no_tools_no_mcp_server(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [[{"text": "plain"}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            await c.chat(agent.id, [user("hi")], options=options([TOOLS[2]]))
    assert agent.events("session_new")[0]["mcpServers"] == []


async def test_eviction_releases_pending_calls(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    agent = scripted({"turns": [two_calls_turn()]})
    log = tmp_path / "daemon.stderr"

    def released(ids: list[str]) -> list[str]:
        # Answered by the closing session (an error result saying the chat was stopped) or,
        # were any left, released by the MCP endpoint as it goes away.
        lines = [line for line in log.read_text().splitlines() if "tool call released" in line or "tool call answered" in line]
        return sorted(i for i in ids if any(i in line for line in lines))

    with anyio.fail_after(LIMIT):
        async with daemon([agent], args=["--idle-timeout", "0.3"]) as c:
            first = await c.chat(agent.id, [user("find")], options=options())
            ids = [p["callId"] for p in tool_calls(first)]
            assert len(ids) == 2
            # Evicted (idle 0.3 s): its calls are answered while the daemon runs on.
            await eventually(lambda: released(ids) == sorted(ids), what="the evicted session's calls answered")
