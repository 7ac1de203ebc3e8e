"""The synthetic MCP server on its own: the stdio relay (a session's tools, a
relay for no open session refused, a relay that outlives an eviction),
tools/list_changed, and results as MCP content. Clients are the ``mcp`` SDK's
own. (Another user refused: tests/test_security.py.)"""

from __future__ import annotations

import json
import os
import socket
import sys

import anyio
import anyio.abc
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from structlog.processors import format_exc_info
from structlog.testing import capture_logs

from lmbridge.acp.process import AgentFeatures
from lmbridge.core.messages import ToolInfo, ToolResultPart
from lmbridge.core.permissions import ACTION_TOOL as AGENT_ACTION_TOOL
from lmbridge.core.permissions import select_tools
from lmbridge.tools import mcp_bridge
from lmbridge.tools.mcp_bridge import CLOSED_TEXT, McpHost, ToolBridge, ToolCall, result_content, same_tools, server_name

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


Q = {"type": "object", "properties": {"q": {"type": "string"}}}
SEARCH, READ = ToolInfo(name="search_workspace", description="Search", inputSchema=Q), ToolInfo(name="read_file", inputSchema=Q)


@pytest.mark.parametrize(
    ("spare", "chat", "same"),
    [
        ([], [], True),  # a spare opened before any chat offered tools: only for a chat offering none
        ([], [SEARCH], False),
        ([SEARCH], [], False),
        ([SEARCH, READ], [SEARCH, READ], True),
        ([SEARCH, READ], [READ, SEARCH], True),  # order aside
        ([SEARCH], [SEARCH.model_copy(update={"description": "Find text"})], True),  # descriptions aside
        ([SEARCH], [SEARCH, READ], False),  # one more tool
        ([SEARCH, READ], [SEARCH], False),  # one fewer
        ([SEARCH], [READ.model_copy(update={"name": "search_files"})], False),  # another name
        ([SEARCH], [SEARCH.model_copy(update={"inputSchema": {"type": "object"}})], False),  # another schema
        ([SEARCH], [SEARCH.model_copy(update={"inputSchema": None})], False),  # no schema
        ([SEARCH, SEARCH], [SEARCH], True),  # a name offered twice counts once
    ],
)
def test_same_tools(spare: list[ToolInfo], chat: list[ToolInfo], same: bool) -> None:
    """Whether a chat offering ``chat`` may adopt a spare opened with ``spare``."""
    assert same_tools(spare, chat) is same
    assert same_tools(chat, spare) is same


def test_agents_with_one_mcp_registry_per_process():
    fast = {"protocolVersion": 1, "agentCapabilities": {}, "agentInfo": {"name": "fast-agent-acp", "version": "0.10.48"}}
    assert AgentFeatures.of(fast).profile.shared_mcp_registry
    assert not AgentFeatures.of(fast).profile.keeps_spare  # its sessions could not be taken up beside a spare
    for name in ("gemini-cli", "codex-acp", "@zed-industries/claude-agent-acp", "other-agent"):
        assert AgentFeatures.of({"agentInfo": {"name": name}}).profile.keeps_spare
    for other in ({"agentInfo": {"name": "claude-agent-acp"}}, {"agentInfo": "fast-agent-acp"}, {}):
        assert not AgentFeatures.of(other).profile.shared_mcp_registry
    assert server_name("s1") == "vscode" and server_name("s1", per_session=True) == "vscode-s1"


async def test_a_session_keeps_its_server_settings_when_its_endpoint_opens_again():
    """An eviction closes a session's endpoint; when the chat wakes, the endpoint opens
    with the same settings (fast-agent refuses a known server with new settings)."""
    host = McpHost()
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        first = ToolBridge("s1", Harness().on_call, name=server_name("s1", per_session=True))
        await host.add(first)
        config = host.server_config(first)
        assert config["name"] == "vscode-s1"
        other = ToolBridge("s2", Harness().on_call)
        await host.add(other)
        assert host.server_config(other)["name"] == "vscode" and host.server_config(other) != config
        host.remove("s1")
        again = ToolBridge("s1", Harness().on_call, name=server_name("s1", per_session=True))
        await host.add(again)
        assert host.server_config(again) == config
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
                {"type": "data", "mimeType": "cache_control", "data": "ZXBoZW1lcmFs"},  # Copilot's marker: not the tool's
                {"type": "data", "mimeType": "stateful_marker", "data": "eA=="},
            ],
        }
    )
    out = result_content(part)
    assert len(out) == 3
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
        cfg = host.server_config(bridge)
        params = StdioServerParameters(command=cfg["command"], args=cfg["args"], env={})
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
                assert result.content[0].text == "file body" and not result.is_error
                assert h.calls[0].name == "read_file" and h.calls[0].arguments == {"path": "a"}
                assert (await session.call_tool("not_offered", {})).is_error
        host.remove("s1")
        tg.cancel_scope.cancel()


async def test_a_relay_outlives_an_eviction():
    """An agent that keeps its MCP servers running across an eviction (fast-agent, one
    registry per process) goes on with the session's new bridge once the chat wakes: told
    its tools changed, then served by the new one; while asleep, calls are refused."""
    host = McpHost()
    changed = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
            changed.set()

    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        first = ToolBridge("s1", Harness().on_call)
        await host.add(first)
        await first.set_tools(TOOLS[:1])
        cfg = host.server_config(first)
        async with stdio_client(StdioServerParameters(command=cfg["command"], args=cfg["args"], env={})) as streams:
            async with ClientSession(streams[0], streams[1], message_handler=on_message) as session:
                await session.initialize()
                assert [t.name for t in (await session.list_tools()).tools] == ["search_workspace"]
                host.remove("s1")  # evicted
                asleep = await session.call_tool("search_workspace", {"q": "x"})
                assert asleep.is_error and asleep.content[0].text == CLOSED_TEXT
                h = Harness()
                again = ToolBridge("s1", h.on_call)  # the chat wakes
                await host.add(again)
                assert await again.set_tools(TOOLS)
                with anyio.fail_after(10):
                    await changed.wait()
                assert [t.name for t in (await session.list_tools()).tools] == ["search_workspace", "read_file"]
                tg.start_soon(_answer_when_called, h, again, "found")
                with anyio.fail_after(10):
                    result = await session.call_tool("search_workspace", {"q": "x"})
                assert result.content[0].text == "found"
        host.remove("s1")
        tg.cancel_scope.cancel()


async def test_stdio_relay_for_no_open_session_is_refused():
    host = McpHost()
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        bridge = ToolBridge("s1", Harness().on_call)
        await host.add(bridge)
        cfg = host.server_config(bridge)
        args = [*cfg["args"][:-1], "s2"]
        proc = await anyio.run_process(
            [sys.executable, *args], input=b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n', check=False
        )
        assert proc.stdout == b"" and proc.returncode == 2, proc  # the daemon closed the connection without serving
        assert b"without serving session 's2'" in proc.stderr
        # As an agent runs it, its stdin kept open: the same (it used to abort at exit, SIGABRT,
        # its stdin thread holding the stdin buffer's lock; with stdin at EOF only under load).
        async with await anyio.open_process([sys.executable, *args]) as relay:
            assert relay.stderr is not None
            with anyio.fail_after(30):  # ~0.1 s idle
                code = await relay.wait()
                stderr = b"".join([chunk async for chunk in relay.stderr])
        assert code == 2 and b"without serving session 's2'" in stderr and b"Fatal" not in stderr, (code, stderr)
        gone = [*cfg["args"][: cfg["args"].index("--socket")], "--socket", "/nonexistent/mcp.sock", "--session", "s1"]
        proc = await anyio.run_process([sys.executable, *gone], input=b"", check=False)
        assert proc.returncode == 2 and b"cannot reach the daemon" in proc.stderr
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


async def _until_closed(sock: anyio.abc.SocketStream) -> None:
    """Until the host has closed ``sock``: a client that stopped reading learns it when a
    write fails (the kernel says EPIPE once the other end is closed)."""
    while True:
        try:
            await sock.send(b"\n")  # a blank line: the host skips it
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return
        await anyio.sleep(0.01)


async def test_a_relay_gone_while_the_host_writes_ends_only_its_connection():
    """A relay that goes away while the host answers it (the agent that spawned it exited,
    so it did too) ends that connection only: the write fails (EPIPE), the connection is
    closed, and the host goes on serving every other one; a call in flight there still gets
    its result. The gone relay stops reading (``shutdown(SHUT_RD)``), so every write to it
    fails from then on; it used to take the host down (and the daemon with it) with
    ``BrokenResourceError``."""
    host = McpHost()
    h = Harness()
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        bridge = ToolBridge("s1", h.on_call)
        await host.add(bridge)
        await bridge.set_tools(TOOLS)
        cfg = host.server_config(bridge)
        async with stdio_client(StdioServerParameters(command=cfg["command"], args=cfg["args"], env={})) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                async with anyio.create_task_group() as calls:
                    results: list[types.CallToolResult] = []

                    async def call() -> None:
                        results.append(await session.call_tool("read_file", {"path": "a"}))

                    calls.start_soon(call)
                    with anyio.fail_after(10):  # a call in flight on the good connection
                        await h.arrived.wait()
                    assert host.socket_path is not None
                    gone = await anyio.connect_unix(host.socket_path)
                    await gone.send(b'{"session": "s1"}\n')
                    gone.extra(anyio.abc.SocketAttribute.raw_socket).shutdown(socket.SHUT_RD)
                    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                  "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "gone", "version": "1"}}}
                    await gone.send((json.dumps(initialize) + "\n").encode())  # its answer cannot be delivered
                    with anyio.fail_after(10):  # ~10 ms idle
                        await _until_closed(gone)
                    await gone.aclose()
                    assert bridge.release(h.calls[0].call_id, types.CallToolResult(content=[types.TextContent(type="text", text="still here")]))
                with anyio.fail_after(10):
                    assert [t.name for t in (await session.list_tools()).tools] == ["search_workspace", "read_file"]
                assert [r.content[0].text for r in results] == ["still here"]
        host.remove("s1")
        tg.cancel_scope.cancel()


async def test_a_relay_whose_agent_is_gone_exits_quietly():
    """The agent exits while the daemon answers it: the relay's write to its stdout fails
    (EPIPE) and it exits 0 with nothing on its stderr (it used to die of BrokenPipeError,
    a traceback in the agent's log, closing its connection mid-answer)."""
    host = McpHost()
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        bridge = ToolBridge("s1", Harness().on_call)
        await host.add(bridge)
        await bridge.set_tools(TOOLS)
        cfg = host.server_config(bridge)
        read_end, write_end = os.pipe()
        os.close(read_end)  # the agent is gone: nobody reads the relay's stdout
        try:
            relay = await anyio.open_process([cfg["command"], *cfg["args"]], stdout=write_end)
        finally:
            os.close(write_end)
        async with relay:
            assert relay.stdin is not None and relay.stderr is not None
            initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                          "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "gone", "version": "1"}}}
            await relay.stdin.send((json.dumps(initialize) + "\n").encode())
            with anyio.fail_after(30):  # ~0.2 s idle (the relay's start)
                code = await relay.wait()
                stderr = b"".join([chunk async for chunk in relay.stderr])
        assert (code, stderr) == (0, b"")
        host.remove("s1")
        tg.cancel_scope.cancel()


async def test_a_failure_serving_one_relay_closes_that_connection_only(monkeypatch: pytest.MonkeyPatch):
    """Whatever fails while one connection is served (here the MCP server itself, once)
    is logged with its traceback and closes that connection; the host serves the next one.
    (The failure used to vanish: the connection's close, cancelled, hid it.)"""
    failures = [RuntimeError("a bug in serving one connection")]

    class FailingOnce(mcp_bridge.Server):  # type: ignore[type-arg]
        async def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if failures:
                raise failures.pop()
            await super().run(*args, **kwargs)

    monkeypatch.setattr(mcp_bridge, "Server", FailingOnce)
    host = McpHost()
    with capture_logs([format_exc_info]) as logs:
        async with anyio.create_task_group() as tg:
            await tg.start(host.run)
            bridge = ToolBridge("s1", Harness().on_call)
            await host.add(bridge)
            await bridge.set_tools(TOOLS)
            assert host.socket_path is not None
            failed = await anyio.connect_unix(host.socket_path)
            await failed.send(b'{"session": "s1"}\n')
            with anyio.fail_after(10), pytest.raises(anyio.EndOfStream):  # closed by the host (~1 ms idle), nothing sent
                await failed.receive()
            await failed.aclose()
            cfg = host.server_config(bridge)
            async with stdio_client(StdioServerParameters(command=cfg["command"], args=cfg["args"], env={})) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    with anyio.fail_after(30):
                        await session.initialize()
                        assert [t.name for t in (await session.list_tools()).tools] == ["search_workspace", "read_file"]
            host.remove("s1")
            tg.cancel_scope.cancel()
    (failure,) = [e for e in logs if e["event"] == "mcp stdio relay failed"]
    assert failure["log_level"] == "error" and "RuntimeError: a bug in serving one connection" in failure["exception"]
