"""The synthetic MCP server: VS Code-provided tools offered to an agent.

docs/tools.md has the design. Each session has a ``ToolBridge``:
an MCP server (the ``mcp`` SDK's low-level ``Server``) whose tool list is the
request's ``options.tools`` (filtered per agent), and whose ``tools/call``
becomes a ``tool_call`` part VS Code runs; the call waits until the next
request brings its ``tool_result`` (or a skip, a stop, a crash, an eviction
releases it with an error result). Every call gets exactly one result.

Transport: stdio, for every agent (ACP requires every agent to take stdio MCP
servers). The agent spawns ``lmbridge mcp-stdio`` (``mcp_relay.py``), which
relays its stdio to ``McpHost``'s Unix socket after naming the session. There is
no secret to steal: the socket lives in a 0700 folder, is 0600, and the daemon
serves a connection only when the kernel says its peer runs as the daemon's own
user (``peer_uid``: ``SO_PEERCRED``, ``LOCAL_PEERCRED``); where it cannot tell,
it refuses. Nothing the agent is given (its command line, which other users can
read in ``/proc/<pid>/cmdline``, or its environment) opens the tools to anyone
else (docs/tools.md, "Who can reach the tools").

This module imports the MCP SDK: it is loaded only when a request carries tools
(keep it off the start-up path).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
import socket
import struct
import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import anyio
import mcp_types as types
from anyio.abc import SocketAttribute
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.message import SessionMessage

from lmbridge import self_command
from lmbridge.core.messages import DataPart, TextPart, ToolInfo, ToolResultPart
from lmbridge.log import get_logger
from lmbridge.rpc import record
from lmbridge.rpc.framing import Lines, Overlong
from lmbridge.rpc.peer import batches

log = get_logger("mcp")

SERVER_NAME = "vscode"  # tools appear to claude as mcp__vscode__<tool>
DECLINED_TEXT = "The user declined to run this tool."
STOPPED_TEXT = "Tool execution was skipped: the user stopped the chat before it ran."
CLOSED_TEXT = "Tool execution was cancelled: the session ended before VS Code answered."


class EnvVariable(TypedDict):
    """ACP ``EnvVariable``: one variable an MCP server is started with."""

    name: str
    value: str


class McpServer(TypedDict):
    """ACP ``McpServerStdio``: an ``mcpServers`` entry of ``session/new`` (``McpHost.server_config``)."""

    name: str
    command: str
    args: list[str]
    env: list[EnvVariable]


def same_tools(a: Sequence[ToolInfo], b: Sequence[ToolInfo]) -> bool:
    """Whether two offers of VS Code tools are the same for an agent that lists them once:
    the same names, each with the same ``inputSchema`` (order and descriptions aside; a
    name offered twice counts once, the last as ``ToolBridge.set_tools`` keeps it). Pure.
    A spare session opened with ``a`` is adopted by a chat offering ``b`` only when this
    holds (docs/sessions.md, "The spare session")."""
    return {t.name: t.inputSchema for t in a} == {t.name: t.inputSchema for t in b}


def server_name(session_id: str, per_session: bool = False) -> str:
    """The MCP server's name in ``session/new``: ``vscode``, or ``vscode-<session>`` for an
    agent that keeps one registry of MCP servers for all its sessions and refuses a second
    ``vscode`` with other settings (``AgentProfile.shared_mcp_registry``: fast-agent)."""
    return f"{SERVER_NAME}-{session_id}" if per_session else SERVER_NAME


def result_content(result: ToolResultPart) -> list[types.TextContent | types.ImageContent]:
    """A VS Code tool result as MCP content: text → text, images → image,
    anything else but Copilot's markers (``DataPart.internal``) → JSON text (docs/tools.md, "What the agent sees")."""
    out: list[types.TextContent | types.ImageContent] = []
    for part in result.content:
        if isinstance(part, TextPart):
            out.append(types.TextContent(type="text", text=part.value))
        elif isinstance(part, DataPart) and part.mimeType.startswith("image/"):
            out.append(types.ImageContent(type="image", data=part.data, mime_type=part.mimeType))
        elif isinstance(part, DataPart) and not part.internal:  # Copilot's markers are not the tool's
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
        self.on_call = on_call
        self.tools: dict[str, ToolInfo] = {}
        self.calls: dict[str, ToolCall] = {}
        self.closed = False
        # MCP sessions that listed tools (for list_changed); McpHost.add shares one set
        # between the bridges of one session id, so a relay outlives an eviction.
        self._sessions: set[Any] = set()
        self.recorder = recorder.mcp(session_id) if recorder is not None else None  # lmbridge serve --record
        # The MCP handlers (McpHost routes each relay's requests here), recorded when recording.
        self.list_tools = self.recorder.handler("tools/list", self._list_tools) if self.recorder else self._list_tools
        self.call_tool = self.recorder.handler("tools/call", self._call_tool) if self.recorder else self._call_tool

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


#: Bytes in one line of a relay connection (a longer one is dropped as it streams), and in its first line.
MCP_LINE = 64 * 1024 * 1024
HELLO_LINE = 4096


async def _lines(stream: Any) -> AsyncGenerator[bytes | Overlong, None]:
    """A relay connection's lines, split by the one line reader (``rpc.framing.Lines``)."""
    async for batch in batches(stream, Lines(MCP_LINE)):
        for line in batch:
            yield line


def peer_uid(sock: socket.socket) -> int | None:
    """The user id the kernel gives for the process at the other end of a Unix socket
    (Linux ``SO_PEERCRED``; macOS and the BSDs ``LOCAL_PEERCRED``, a ``struct xucred``),
    None where it does not say."""
    try:
        if hasattr(socket, "SO_PEERCRED"):
            pid_uid_gid = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            return int(struct.unpack("3i", pid_uid_gid)[1])
        if hasattr(socket, "LOCAL_PEERCRED"):
            xucred = sock.getsockopt(0, socket.LOCAL_PEERCRED, struct.calcsize("IIh16I"))  # SOL_LOCAL is 0
            return int(struct.unpack_from("II", xucred)[1])  # cr_version, cr_uid
    except OSError:
        return None
    return None


class McpHost:
    """The daemon's MCP endpoint: one Unix socket shared by every ``ToolBridge``. Run
    ``run()`` in the daemon's task group.

    A relay's connection names a session id and is served for that session id, whichever
    bridge holds it now: a session's bridge is replaced when an evicted chat wakes, and an
    agent that keeps its MCP servers running across that (fast-agent) goes on with the
    new one."""

    def __init__(self) -> None:
        self.bridges: dict[str, ToolBridge] = {}
        self._listed: dict[str, set[Any]] = {}  # session id → the MCP sessions that listed its tools
        self.socket_path: str | None = None
        self.ready = anyio.Event()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        folder = tempfile.mkdtemp(prefix="lmbridge-mcp-")  # 0700, made for this daemon only
        self.socket_path = os.path.join(folder, "mcp.sock")
        listener = await anyio.create_unix_listener(self.socket_path, mode=0o600)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, self._relay)
                self.ready.set()
                log.info("mcp host listening", socket=self.socket_path)
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
        """Register a bridge: relays naming its session id are served by it from now on."""
        bridge._sessions = self._listed.setdefault(bridge.session_id, bridge._sessions)
        self.bridges[bridge.session_id] = bridge

    def remove(self, session_id: str) -> None:
        bridge = self.bridges.pop(session_id, None)
        if bridge is not None:
            bridge.close()

    def server_config(self, bridge: ToolBridge) -> McpServer:
        """The ``mcpServers`` entry for ``session/new`` (ACP McpServerStdio): nothing in it
        is secret (``McpHost`` serves only the daemon's own user)."""
        command, *args = self_command("mcp-stdio", "--socket", str(self.socket_path), "--session", bridge.session_id)
        return {"name": bridge.name, "command": command, "args": args, "env": []}

    # -- Unix socket (stdio relay) ------------------------------------------

    async def _relay(self, stream: Any) -> None:
        """Serve one relay connection; whatever ends it ends it alone (docs/tools.md, "When
        a relay goes away"). ``listener.serve`` runs this in the host's task group, so an
        error let out would end every connection, the host, and the daemon that runs it."""
        try:
            await self._unix_client(stream)
        except Exception:  # a bug in serving one connection: logged, and the others go on
            log.exception("mcp stdio relay failed")
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def _unix_client(self, stream: Any) -> None:
        uid = peer_uid(stream.extra(SocketAttribute.raw_socket))
        if uid != os.getuid():
            log.warning("mcp stdio relay refused", reason="another user" if uid is not None else "its user is unknown", uid=uid)
            await stream.aclose()
            return
        lines = _lines(stream)
        try:
            with anyio.fail_after(10):
                first = await anext(lines)
            hello = json.loads(first) if isinstance(first, bytes) and len(first) <= HELLO_LINE else None
            session = hello.get("session") if isinstance(hello, dict) else None
        except (TimeoutError, ValueError, StopAsyncIteration):
            session = None
        if not isinstance(session, str) or session not in self.bridges:
            log.info("mcp stdio relay refused", reason="no such session")
            await lines.aclose()
            await stream.aclose()
            return
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            bridge = self.bridges.get(session)
            return await bridge.list_tools(ctx, params) if bridge is not None else types.ListToolsResult(tools=[])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            bridge = self.bridges.get(session)
            return await bridge.call_tool(ctx, params) if bridge is not None else error_result(CLOSED_TEXT)

        server: Server[Any] = Server(
            "lmbridge-vscode-tools",
            version="1",
            instructions="Tools provided by VS Code. Each call is run by VS Code.",
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )

        async def pump_in() -> None:
            async with read_send:
                async for line in lines:
                    if isinstance(line, Overlong):
                        await read_send.send(ValueError(f"a line of {line.size:,} bytes, longer than lmbridge's limit of {MCP_LINE:,} bytes: dropped"))
                        continue
                    if not line.strip():
                        continue
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
                    try:
                        await stream.send(data.encode())
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                        # The relay is gone (its agent exited, so did it): end this connection
                        # (its calls in flight with it); the server waits on nothing more.
                        log.info("mcp stdio relay gone", session=session, error=repr(exc.__cause__ or exc))
                        tg.cancel_scope.cancel()
                        return

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump_in)
            tg.start_soon(pump_out)
            try:
                await server.run(read_recv, write_send, server.create_initialization_options(NotificationOptions(tools_changed=True)))
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):  # unshielded, its cancellation would hide what ended the server
                    await stream.aclose()
