"""One chat's MCP endpoint (``ChatTools``): the VS Code tools its ACP session is offered,
through the synthetic MCP server (``mcp_bridge.ToolBridge`` on the daemon's ``McpHost``;
docs/tools.md).

Only a session whose first request carries tools gets an endpoint: ``mcpServers`` are
fixed when a session is opened (ACP "Session Setup"), so a chat whose first request
carries none is never offered any. A session taken from the process's spare comes with
the spare's endpoint (``adopt``). Each later request's tools replace the list the agent
sees (``offer``: ``tools/list_changed``). Each ``tools/call`` is handed to ``on_call``
(the session actor's mailbox), and answered once the turn machine says how (``answer``).

The MCP SDK is loaded only when a request carries tools (``mcp_bridge`` is imported
lazily: keep it off the start-up path).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from lmbridge.core import permissions
from lmbridge.core.messages import ToolInfo, ToolResultPart
from lmbridge.core.permissions import Answer
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from lmbridge.rpc.record import Recorder
    from lmbridge.tools.mcp_bridge import McpHost, McpServer, ToolBridge, ToolCall

log = get_logger("session")


class ChatTools:
    """The MCP endpoint of chat ``session_id`` (module docstring).

    ``allow``/``deny``: the agent's tool filters (globs, ``AgentSpec.tools``). ``host``: the
    daemon's ``McpHost``, started on first use. ``on_call(call)``: each ``tools/call`` the
    agent makes (called in the MCP server's task; it must not block). ``bridge``: the
    endpoint, None while the chat offers no tools. ``servers``: the ``mcpServers`` to open
    the chat's sessions with (ACP ``McpServerStdio``; empty without an endpoint).
    """

    def __init__(
        self,
        session_id: str,
        allow: Sequence[str],
        deny: Sequence[str],
        host: Callable[[], Awaitable[McpHost]],
        on_call: Callable[[ToolCall], None],
        recorder: Recorder | None = None,
    ) -> None:
        self.session_id = session_id
        self.allow, self.deny = tuple(allow), tuple(deny)
        self._host = host
        self._deliver = on_call
        self.recorder = recorder
        self.bridge: ToolBridge | None = None
        self.servers: list[McpServer] = []
        self.calls: dict[str, ToolCall] = {}  # callId → the agent's tools/call waiting for its answer (``called``)

    def offered(self, tools: Sequence[ToolInfo]) -> list[ToolInfo]:
        """Of a request's ``tools``, those the agent may see (``permissions.select_tools``: no
        MCP SDK loaded for it)."""
        if not tools:
            return []
        return permissions.select_tools(tools, self.allow, self.deny)

    async def start(self, tools: Sequence[ToolInfo], *, per_session: bool) -> list[McpServer]:
        """The ``mcpServers`` for a session opened for a request carrying ``tools``: the
        endpoint is started (registered on the host, the tools it offers set) if the chat
        has none and offers any of them. ``per_session``: the agent keeps one MCP registry
        for all its sessions (``AgentProfile.shared_mcp_registry``), so the server's name
        is the chat's own (``mcp_bridge.server_name``)."""
        if self.bridge is None:
            offered = self.offered(tools)
            if offered:
                from lmbridge.tools.mcp_bridge import ToolBridge, server_name

                host = await self._host()
                self.bridge = ToolBridge(self.session_id, self._on_call, self.recorder, server_name(self.session_id, per_session))
                await host.add(self.bridge)
                await self.bridge.set_tools(offered)
                self.servers = [host.server_config(self.bridge)]
        return self.servers

    def adopt(self, bridge: ToolBridge | None, servers: list[McpServer]) -> None:
        """The chat's session is a spare opened ahead (``acp.process.Spare``): its endpoint
        (None: a spare offering no tools has none) and ``mcpServers`` are the chat's from now on."""
        self.bridge, self.servers = bridge, servers
        if bridge is not None:
            bridge.on_call = self._on_call

    async def offer(self, tools: Sequence[ToolInfo]) -> None:
        """A request's ``tools`` replace those the endpoint offers (none without an endpoint)."""
        if self.bridge is not None:
            await self.bridge.set_tools(self.offered(tools))

    def called(self, call: ToolCall) -> None:
        """The agent's ``call`` (from ``on_call``) waits for its answer (``resolve``)."""
        self.calls[call.call_id] = call

    def resolve(self, call_id: str, how: Answer, result: ToolResultPart | None) -> bool:
        """Answer the waiting call ``call_id`` (``answer``); False: no such call waits."""
        call = self.calls.pop(call_id, None)
        if call is None:
            return False
        answer(call, how, result)
        log.info("tool call answered", session=self.session_id, callId=call_id, answer=how.value)
        return True

    async def stop(self) -> None:
        """The chat has ended: every call still waiting answered ``Answer.CANCELLED`` (an error
        result), then the endpoint removed from the host (its calls in flight answered with an
        error result, ``ToolBridge.close``)."""
        for call_id in list(self.calls):
            self.resolve(call_id, Answer.CANCELLED, None)
        if self.bridge is not None:
            bridge, self.bridge = self.bridge, None
            (await self._host()).remove(bridge.session_id)

    async def _on_call(self, call: ToolCall) -> None:
        # Runs in the MCP server's task: handed to the chat's owner.
        self._deliver(call)


def answer(call: ToolCall, how: Answer, result: ToolResultPart | None) -> None:
    """Answer the agent's ``tools/call`` ``call`` as the turn machine says (``how``, a
    ``turn.ResolveTool``'s): ``Answer.RESULT`` with VS Code's ``result`` (its content as the
    MCP result; docs/tools.md), anything else (or no result) with an error result saying the
    user declined it (``DECLINED``) or stopped the chat (``CANCELLED``). A call already
    answered is left as it is (``ToolCall.resolve``)."""
    from mcp import types

    from lmbridge.tools.mcp_bridge import DECLINED_TEXT, STOPPED_TEXT, error_result, result_content

    if how is Answer.RESULT and result is not None:
        call.resolve(types.CallToolResult(content=list(result_content(result))))
    else:
        call.resolve(error_result(DECLINED_TEXT if how is Answer.DECLINED else STOPPED_TEXT))
