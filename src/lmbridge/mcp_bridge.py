"""The synthetic MCP server: VS Code-provided tools offered to an agent.

Seed 002 ("VS Code-Provided Tools"), issue #4. Each session has a ``ToolBridge``:
an MCP server (the ``mcp`` SDK's low-level ``Server``) whose tool list is the
request's ``options.tools`` (filtered per agent), and whose ``tools/call``
becomes a ``tool_call`` part VS Code runs; the call waits until the next
request brings its ``tool_result`` (or a skip, a stop, a crash, an eviction
releases it with an error result). Every call gets exactly one result.

Transports, both reachable only with the session's secret (``secrets``, 32
bytes):

* streamable HTTP on 127.0.0.1 (``McpHost``'s one uvicorn server; path
  ``/mcp/<session>``, or ``/mcp/<session>/mcp`` as fast-agent rewrites it; header
  ``X-Lmbridge-Secret``) when the agent advertises
  ``mcpCapabilities.http``;
* otherwise stdio: the agent spawns ``lmbridge mcp-stdio`` (``mcp_stdio.py``),
  which relays its stdio to ``McpHost``'s Unix socket after sending the
  session id and secret.

This module imports the MCP SDK, uvicorn and starlette: it is loaded only when a
request carries tools (keep it off the start-up path).
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hmac
import json
import os
import secrets
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import SessionMessage

from lmbridge import record
from lmbridge.log import get_logger
from lmbridge.permissions import ACTION_TOOLS
from lmbridge.wire import DataPart, TextPart, ToolInfo, ToolResultPart

log = get_logger("mcp")

SERVER_NAME = "vscode"  # tools appear to claude as mcp__vscode__<tool>
SECRET_HEADER = "x-lmbridge-secret"
DECLINED_TEXT = "The user declined to run this tool."
STOPPED_TEXT = "Tool execution was skipped: the user stopped the chat before it ran."
CLOSED_TEXT = "Tool execution was cancelled: the session ended before VS Code answered."


def server_name(session_id: str, per_session: bool = False) -> str:
    """The MCP server's name in ``session/new``: ``vscode``, or ``vscode-<session>`` for an
    agent that keeps one registry of MCP servers for all its sessions and refuses a second
    ``vscode`` with another URL or secret (fast-agent: ``Capabilities.shared_mcp_registry``)."""
    return f"{SERVER_NAME}-{session_id}" if per_session else SERVER_NAME


def select_tools(tools: Sequence[ToolInfo], allow: Sequence[str] = (), deny: Sequence[str] = ()) -> list[ToolInfo]:
    """The tools offered to an agent: ``options.tools`` minus lmbridge's own
    tool, kept when they match an ``allow`` glob (all when empty) and no ``deny`` glob."""
    out = []
    for tool in tools:
        if tool.name in ACTION_TOOLS:
            continue
        if allow and not any(fnmatch.fnmatchcase(tool.name, p) for p in allow):
            continue
        if any(fnmatch.fnmatchcase(tool.name, p) for p in deny):
            continue
        out.append(tool)
    return out


def result_content(result: ToolResultPart) -> list[types.TextContent | types.ImageContent]:
    """A VS Code tool result as MCP content: text → text, images → image,
    anything else → JSON text (issue #4)."""
    out: list[types.TextContent | types.ImageContent] = []
    for part in result.content:
        if isinstance(part, TextPart):
            out.append(types.TextContent(type="text", text=part.value))
        elif isinstance(part, DataPart) and part.mimeType.startswith("image/"):
            out.append(types.ImageContent(type="image", data=part.data, mime_type=part.mimeType))
        elif isinstance(part, DataPart):
            try:
                decoded: Any = base64.b64decode(part.data, validate=False).decode()
            except (binascii.Error, UnicodeDecodeError):
                decoded = part.data
            out.append(types.TextContent(type="text", text=json.dumps({"mimeType": part.mimeType, "data": decoded})))
    return out


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


@dataclass(eq=False)
class ToolCall:
    """One ``tools/call`` from the agent, waiting for VS Code.

    ``call_id`` is the callId VS Code sees; ``result`` is set exactly once
    (``resolve``), which wakes the MCP handler that answers the agent.
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    done: anyio.Event = field(default_factory=anyio.Event)
    result: types.CallToolResult | None = None

    def resolve(self, result: types.CallToolResult) -> bool:
        """Give the call its result; False (and nothing changes) if it had one."""
        if self.result is not None:
            return False
        self.result = result
        self.done.set()
        return True


class ToolBridge:
    """One session's MCP server and its calls in flight.

    ``on_call(call)`` is awaited for each call (the session actor surfaces it);
    ``release(call_id, result)`` answers it.
    """

    def __init__(
        self, session_id: str, on_call: Callable[[ToolCall], Awaitable[None]], recorder: record.Recorder | None = None, name: str = SERVER_NAME
    ) -> None:
        self.session_id = session_id
        self.name = name  # the MCP server's name in session/new (server_name)
        self.secret = secrets.token_urlsafe(32)  # McpHost.add keeps one per session id
        self.on_call = on_call
        self.tools: dict[str, ToolInfo] = {}
        self.calls: dict[str, ToolCall] = {}
        self.closed = False
        self._sessions: set[Any] = set()  # MCP sessions that listed tools (for list_changed)
        self.recorder = recorder.mcp(session_id) if recorder is not None else None  # lmbridge serve --record
        self.server: Server[Any] = Server(
            "lmbridge-vscode-tools",
            version="1",
            instructions="Tools provided by VS Code. Each call is run by VS Code.",
            on_list_tools=self.recorder.handler("tools/list", self._list_tools) if self.recorder else self._list_tools,
            on_call_tool=self.recorder.handler("tools/call", self._call_tool) if self.recorder else self._call_tool,
        )
        self.http: StreamableHTTPSessionManager | None = None

    def init_options(self) -> Any:
        return self.server.create_initialization_options(NotificationOptions(tools_changed=True))

    # -- tool list ----------------------------------------------------------

    async def set_tools(self, tools: Sequence[ToolInfo]) -> bool:
        """Replace the tool list; notifies ``tools/list_changed`` when it changed."""
        new = {t.name: t for t in tools}
        if [(t.name, t.description, t.inputSchema) for t in new.values()] == [
            (t.name, t.description, t.inputSchema) for t in self.tools.values()
        ]:
            return False
        self.tools = new
        if self.recorder is not None and self._sessions:
            self.recorder.notified("notifications/tools/list_changed")
        for session in list(self._sessions):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # a gone MCP client: forget it
                log.info("tools/list_changed not delivered", session=self.session_id, error=str(exc))
                self._sessions.discard(session)
        return True

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        self._sessions.add(ctx.session)
        tools = [
            types.Tool(
                name=t.name,
                description=t.description or t.name,
                input_schema=t.inputSchema if t.inputSchema is not None and t.inputSchema.get("type") == "object" else {"type": "object", "properties": {}},
            )
            for t in self.tools.values()
        ]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        self._sessions.add(ctx.session)
        if self.closed:
            return error_result(CLOSED_TEXT)
        if params.name not in self.tools:
            return error_result(f"Unknown tool {params.name!r}: VS Code does not offer it in this chat.")
        call = ToolCall(f"lmbridge-{self.session_id}-tool-{secrets.token_hex(6)}", params.name, dict(params.arguments or {}))
        self.calls[call.call_id] = call
        log.info("tool called", session=self.session_id, callId=call.call_id, tool=call.name)
        try:
            await self.on_call(call)
            await call.done.wait()
        finally:
            # Cancelled by the MCP client (or the host shutting down): nothing to answer.
            self.calls.pop(call.call_id, None)
        assert call.result is not None
        return call.result

    # -- answers ------------------------------------------------------------

    def release(self, call_id: str, result: types.CallToolResult) -> bool:
        call = self.calls.get(call_id)
        return call.resolve(result) if call is not None else False

    def release_all(self, text: str) -> int:
        """Answer every call in flight with an error result (crash, eviction, shutdown)."""
        n = 0
        for call in list(self.calls.values()):
            if call.resolve(error_result(text)):
                log.info("tool call released", session=self.session_id, callId=call.call_id, reason=text)
                n += 1
        return n

    def close(self) -> None:
        self.closed = True
        self.release_all(CLOSED_TEXT)


class McpHost:
    """The daemon's MCP endpoints: one HTTP server and one Unix socket, shared by
    every ``ToolBridge``. Run ``run()`` in the daemon's task group."""

    def __init__(self) -> None:
        self.bridges: dict[str, ToolBridge] = {}
        # One secret per session id for the daemon's life: a session's endpoint, closed
        # at an eviction and opened again when the chat wakes, has the same URL and secret,
        # so an agent that remembers the server (fast-agent) takes it up unchanged.
        self._secrets: dict[str, str] = {}
        self.port: int | None = None
        self.socket_path: str | None = None
        self.ready = anyio.Event()
        self._tg: TaskGroup | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        folder = tempfile.mkdtemp(prefix="lmbridge-mcp-")
        os.chmod(folder, 0o700)
        self.socket_path = os.path.join(folder, "mcp.sock")
        listener = await anyio.create_unix_listener(self.socket_path)
        os.chmod(self.socket_path, 0o600)
        config = uvicorn.Config(self._asgi, interface="asgi3", log_level="warning", lifespan="off", access_log=False)
        server = uvicorn.Server(config)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(server.serve, [sock])
                tg.start_soon(listener.serve, self._unix_client)
                self.ready.set()
                log.info("mcp host listening", port=self.port, socket=self.socket_path)
                task_status.started()
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()
            for path in (self.socket_path, folder):
                try:
                    os.rmdir(path) if path == folder else os.unlink(path)
                except OSError:
                    pass

    async def add(self, bridge: ToolBridge) -> None:
        """Register a bridge and start its HTTP session manager."""
        assert self._tg is not None
        bridge.secret = self._secrets.setdefault(bridge.session_id, bridge.secret)
        bridge.http = StreamableHTTPSessionManager(
            app=bridge.server,
            security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
            ),
        )
        started = anyio.Event()

        async def run_manager() -> None:
            assert bridge.http is not None
            async with bridge.http.run():
                started.set()
                while bridge.session_id in self.bridges:
                    await anyio.sleep(0.5)

        self.bridges[bridge.session_id] = bridge
        self._tg.start_soon(run_manager)
        await started.wait()

    def remove(self, session_id: str) -> None:
        bridge = self.bridges.pop(session_id, None)
        if bridge is not None:
            bridge.close()

    def server_config(self, bridge: ToolBridge, http: bool) -> dict[str, Any]:
        """The ``mcpServers`` entry for ``session/new`` (ACP McpServer)."""
        if http:
            return {
                "type": "http",
                "name": bridge.name,
                "url": f"http://127.0.0.1:{self.port}/mcp/{bridge.session_id}",
                "headers": [{"name": SECRET_HEADER, "value": bridge.secret}],
            }
        return {
            "name": bridge.name,
            "command": sys.executable,
            "args": ["-m", "lmbridge", "mcp-stdio", "--socket", str(self.socket_path), "--session", bridge.session_id],
            "env": [{"name": "LMBRIDGE_MCP_SECRET", "value": bridge.secret}],
        }

    def _authorized(self, session_id: str, secret: str | None) -> ToolBridge | None:
        bridge = self.bridges.get(session_id)
        if bridge is None or secret is None or not hmac.compare_digest(secret.encode(), bridge.secret.encode()):
            return None
        return bridge

    # -- HTTP ---------------------------------------------------------------

    async def _asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path: str = scope.get("path", "")
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[2] == "mcp":
            # fast-agent (0.10.48) appends /mcp to an HTTP MCP URL whose path does not
            # end in /mcp: /mcp/<session>/mcp is the same endpoint.
            parts = parts[:2]
        secret = next((v.decode() for k, v in scope.get("headers", []) if k.decode().lower() == SECRET_HEADER), None)
        known = len(parts) == 2 and parts[0] == "mcp" and parts[1] in self.bridges
        bridge = self._authorized(parts[1], secret) if known else None
        if bridge is None or bridge.http is None:
            # A wrong secret for a live session is worth a warning; anything else
            # (an MCP client retrying after its session closed, OAuth discovery) is not.
            (log.warning if known else log.info)("mcp request refused", path=path, reason="wrong secret" if known else "no such session")
            body = b'{"error":"unauthorized"}'
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        await bridge.http.handle_request(scope, receive, send)

    # -- Unix socket (stdio relay) ------------------------------------------

    async def _unix_client(self, stream: Any) -> None:
        from anyio.streams.buffered import BufferedByteReceiveStream

        reader = BufferedByteReceiveStream(stream)
        try:
            with anyio.fail_after(10):
                hello = json.loads(await reader.receive_until(b"\n", 4096))
            bridge = self._authorized(str(hello.get("session")), hello.get("secret"))
        except (TimeoutError, ValueError, AttributeError, anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
            bridge = None
        if bridge is None:
            log.warning("mcp stdio relay refused", reason="no such session or wrong secret")
            await stream.aclose()
            return
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

        async def pump_in() -> None:
            async with read_send:
                while True:
                    try:
                        line = await reader.receive_until(b"\n", 64 * 1024 * 1024)
                    except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
                        return
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except Exception as exc:
                        await read_send.send(exc)
                        continue
                    await read_send.send(SessionMessage(message))

        async def pump_out() -> None:
            async with write_recv:
                async for msg in write_recv:
                    data = msg.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await stream.send(data.encode())

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump_in)
            tg.start_soon(pump_out)
            try:
                await bridge.server.run(read_recv, write_send, bridge.init_options())
            finally:
                tg.cancel_scope.cancel()
                await stream.aclose()
