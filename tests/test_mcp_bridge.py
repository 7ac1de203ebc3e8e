"""The synthetic MCP server on its own: HTTP with and without the secret, the
stdio relay, tools/list_changed, and results as MCP content. Clients are the
``mcp`` SDK's own."""

from __future__ import annotations

import sys

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from lmbridge.agent_pool import Capabilities
from lmbridge.mcp_bridge import (
    SECRET_HEADER,
    McpHost,
    ToolBridge,
    ToolCall,
    result_content,
    select_tools,
    server_name,
)
from lmbridge.permissions import ACTION_TOOL as AGENT_ACTION_TOOL
from lmbridge.wire import ToolInfo, ToolResultPart

pytestmark = pytest.mark.anyio

TOOLS = [
    ToolInfo(name="search_workspace", description="Search files", inputSchema={"type": "object", "properties": {"q": {"type": "string"}}}),
    ToolInfo(name="read_file", description="Read a file", inputSchema={"type": "object", "properties": {"path": {"type": "string"}}}),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_select_tools_filters_own_tool_and_globs():
    tools = TOOLS + [ToolInfo(name=AGENT_ACTION_TOOL), ToolInfo(name="copilot_runTests")]
    assert [t.name for t in select_tools(tools)] == ["search_workspace", "read_file", "copilot_runTests"]
    assert [t.name for t in select_tools(tools, allow=["*_file", "search_*"])] == ["search_workspace", "read_file"]
    assert [t.name for t in select_tools(tools, deny=["copilot_*"])] == ["search_workspace", "read_file"]


def test_agents_with_one_mcp_registry_per_process():
    fast = {"protocolVersion": 1, "agentCapabilities": {}, "agentInfo": {"name": "fast-agent-acp", "version": "0.10.48"}}
    assert Capabilities.of(fast).shared_mcp_registry
    for other in ({"agentInfo": {"name": "claude-agent-acp"}}, {"agentInfo": "fast-agent-acp"}, {}):
        assert not Capabilities.of(other).shared_mcp_registry
    assert server_name("s1") == "vscode" and server_name("s1", per_session=True) == "vscode-s1"


async def test_a_session_keeps_its_secret_and_name_when_its_endpoint_opens_again():
    """An eviction closes a session's endpoint; when the chat wakes, the endpoint opens
    with the same URL and secret (fast-agent refuses a known server with new settings)."""
    host = McpHost()
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        first = ToolBridge("s1", Harness().on_call, name=server_name("s1", per_session=True))
        await host.add(first)
        config = host.server_config(first, http=True)
        assert config["name"] == "vscode-s1"
        other = ToolBridge("s2", Harness().on_call)
        await host.add(other)
        assert other.secret != first.secret and host.server_config(other, http=True)["name"] == "vscode"
        host.remove("s1")
        again = ToolBridge("s1", Harness().on_call, name=server_name("s1", per_session=True))
        await host.add(again)
        assert host.server_config(again, http=True) == config
        assert host.server_config(again, http=False)["env"] == [{"name": "LMBRIDGE_MCP_SECRET", "value": first.secret}]
        host.remove("s1")
        host.remove("s2")
        tg.cancel_scope.cancel()


def test_result_content_text_image_json():
    part = ToolResultPart.model_validate(
        {
            "callId": "c",
            "content": [
                {"type": "text", "value": "hello"},
                {"type": "data", "mimeType": "image/png", "data": "aGk="},
                {"type": "data", "mimeType": "application/json", "data": "eyJhIjogMX0="},
            ],
        }
    )
    out = result_content(part)
    assert out[0] == types.TextContent(type="text", text="hello")
    assert out[1] == types.ImageContent(type="image", data="aGk=", mime_type="image/png")
    assert '"mimeType": "application/json"' in out[2].text and '{\\"a\\": 1}' in out[2].text


class Harness:
    """A host with one bridge whose calls are answered by the test."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.arrived = anyio.Event()

    async def on_call(self, call: ToolCall) -> None:
        self.calls.append(call)
        self.arrived.set()


async def _answer_when_called(h: Harness, bridge: ToolBridge, text: str) -> None:
    await h.arrived.wait()
    call = h.calls[-1]
    assert bridge.release(call.call_id, types.CallToolResult(content=[types.TextContent(type="text", text=text)]))
    assert not bridge.release(call.call_id, types.CallToolResult(content=[]))  # exactly once


async def test_http_with_secret_lists_and_calls_tools():
    host = McpHost()
    h = Harness()
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        bridge = ToolBridge("s1", h.on_call)
        await host.add(bridge)
        await bridge.set_tools(TOOLS)
        url = host.server_config(bridge, http=True)["url"]
        async with httpx2.AsyncClient(headers={SECRET_HEADER: bridge.secret}) as http:
            async with streamable_http_client(url, http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    listed = await session.list_tools()
                    assert [t.name for t in listed.tools] == ["search_workspace", "read_file"]
                    tg.start_soon(_answer_when_called, h, bridge, "3 matches")
                    with anyio.fail_after(10):
                        result = await session.call_tool("search_workspace", {"q": "foo"})
                    assert result.content[0].text == "3 matches" and not result.is_error
                    assert h.calls[0].name == "search_workspace" and h.calls[0].arguments == {"q": "foo"}
                    unknown = await session.call_tool("not_offered", {})
                    assert unknown.is_error
        host.remove("s1")
        tg.cancel_scope.cancel()


async def test_http_url_with_mcp_appended_is_the_same_endpoint():
    """fast-agent 0.10.48 appends /mcp to an HTTP MCP URL whose path does not end in
    /mcp; the endpoint answers there too, with the same secret check."""
    host = McpHost()
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        bridge = ToolBridge("s1", Harness().on_call)
        await host.add(bridge)
        await bridge.set_tools(TOOLS)
        url = host.server_config(bridge, http=True)["url"] + "/mcp"
        async with httpx2.AsyncClient(headers={SECRET_HEADER: bridge.secret}) as http:
            async with streamable_http_client(url, http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    listed = await session.list_tools()
                    assert [t.name for t in listed.tools] == ["search_workspace", "read_file"]
        async with httpx2.AsyncClient() as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
            r = await http.post(url, json=body, headers={"accept": "application/json, text/event-stream"})
            assert r.status_code == 401
            r = await http.post(url + "/mcp", json=body, headers={"accept": "application/json, text/event-stream", SECRET_HEADER: bridge.secret})
            assert r.status_code == 401
        host.remove("s1")
        tg.cancel_scope.cancel()


async def test_http_without_or_with_a_wrong_secret_is_refused():
    host = McpHost()
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        bridge = ToolBridge("s1", Harness().on_call)
        await host.add(bridge)
        url = host.server_config(bridge, http=True)["url"]
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        headers = {"accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient() as http:
            for extra in ({}, {SECRET_HEADER: "wrong"}, {SECRET_HEADER: bridge.secret + "x"}):
                r = await http.post(url, json=body, headers=headers | extra)
                assert r.status_code == 401
            r = await http.post(url.replace("/s1", "/s2"), json=body, headers=headers | {SECRET_HEADER: bridge.secret})
            assert r.status_code == 401
        assert host.port is not None
        host.remove("s1")
        tg.cancel_scope.cancel()


async def test_stdio_relay_and_list_changed(tmp_path):
    host = McpHost()
    h = Harness()
    changed = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(message.root if hasattr(message, "root") else message, types.ToolListChangedNotification):
            changed.set()
        elif isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        bridge = ToolBridge("s1", h.on_call)
        await host.add(bridge)
        await bridge.set_tools(TOOLS[:1])
        cfg = host.server_config(bridge, http=False)
        env = {e["name"]: e["value"] for e in cfg["env"]}
        params = StdioServerParameters(command=cfg["command"], args=cfg["args"], env=env)
        async with stdio_client(params) as streams:
            async with ClientSession(streams[0], streams[1], message_handler=on_message) as session:
                await session.initialize()
                assert [t.name for t in (await session.list_tools()).tools] == ["search_workspace"]
                assert await bridge.set_tools(TOOLS)
                assert not await bridge.set_tools(TOOLS)  # unchanged: no notification
                with anyio.fail_after(10):
                    await changed.wait()
                assert [t.name for t in (await session.list_tools()).tools] == ["search_workspace", "read_file"]
                tg.start_soon(_answer_when_called, h, bridge, "file body")
                with anyio.fail_after(10):
                    result = await session.call_tool("read_file", {"path": "a"})
                assert result.content[0].text == "file body"
        host.remove("s1")
        tg.cancel_scope.cancel()


async def test_stdio_relay_with_a_wrong_secret_is_refused():
    host = McpHost()
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        bridge = ToolBridge("s1", Harness().on_call)
        await host.add(bridge)
        cfg = host.server_config(bridge, http=False)
        proc = await anyio.run_process(
            [sys.executable, *cfg["args"]],
            input=b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n',
            env={"LMBRIDGE_MCP_SECRET": "wrong", "PATH": "/usr/bin:/bin"},
            check=False,
        )
        assert proc.stdout == b""  # the daemon closed the connection without serving
        proc = await anyio.run_process([sys.executable, *cfg["args"]], input=b"", env={"PATH": "/usr/bin:/bin"}, check=False)
        assert proc.returncode == 2 and b"LMBRIDGE_MCP_SECRET" in proc.stderr
        host.remove("s1")
        tg.cancel_scope.cancel()


async def test_closing_a_bridge_releases_every_call():
    h = Harness()
    bridge = ToolBridge("s1", h.on_call)
    await bridge.set_tools(TOOLS)
    results = []

    class Ctx:
        session = None

    async def call(name: str) -> None:
        results.append(await bridge._call_tool(Ctx(), types.CallToolRequestParams(name=name, arguments={})))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "read_file")
        tg.start_soon(call, "search_workspace")
        with anyio.fail_after(5):
            while len(h.calls) < 2:
                await anyio.sleep(0.01)
        bridge._sessions.clear()
        bridge.close()
    assert len(results) == 2 and all(r.is_error for r in results)
