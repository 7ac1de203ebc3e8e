"""A client of the daemon's wire protocol, as the shim would speak it.

Used by ``lmbridge console``, the tests and the benchmarks: it spawns
``lmbridge serve`` (or any command), sends requests, collects the
``lm/responsePart`` notifications of each chat request, and can rebuild the
assistant message VS Code would replay from them.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup

from lmbridge import self_command
from lmbridge.core.messages import VSCODE_SKIP_TEXT
from lmbridge.core.permissions import ACTION_TOOLS
from lmbridge.rpc.framing import MAX_LINE
from lmbridge.rpc.jsonrpc import usable_id
from lmbridge.rpc.peer import NOT_JSON, NOT_OBJECT, STRAY_RESPONSE, Id, LinkClosed, Peer


class RPCError(Exception):
    """The daemon answered with a JSON-RPC error: ``code``, ``message``, ``data``."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        self.code = error.get("code")
        self.message = error.get("message", "")
        self.data = error.get("data")
        super().__init__(f"{self.code}: {self.message}")


@dataclass
class SentRequest:
    """One request in flight: its parts as they arrive, then its result or error."""

    id: int
    on_part: Callable[[dict[str, Any]], None] | None = None
    parts: list[dict[str, Any]] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: RPCError | None = None
    late_parts: int = 0  # parts that arrived after the result (a protocol violation)
    # The data parts (``stateful_marker``, ``usage``: docs/protocol.md, "Shapes"), kept apart
    # from ``parts`` (what the chat shows): ``assistant(call.parts, call.data)`` replays them.
    data: list[dict[str, Any]] = field(default_factory=list)


def user(text: str) -> dict[str, Any]:
    """A user message with one text part."""
    return {"role": "user", "content": [{"type": "text", "value": text}]}


def assistant(parts: Sequence[Mapping[str, Any]], data: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The assistant message VS Code replays for a response: its text joined,
    then its tool calls (thinking is not replayed), then the ``stateful_marker`` part of
    ``data`` (``SentRequest.data``), as Copilot Chat re-sends it (docs/vscode.md, "Stateful markers");
    without ``data``, a chat from before markers."""
    text = "".join(p["value"] for p in parts if p["type"] == "text")
    content: list[dict[str, Any]] = [{"type": "text", "value": text}] if text else []
    content += [dict(p) for p in parts if p["type"] == "tool_call"]
    content += [dict(p) for p in data if p.get("mimeType") == "stateful_marker"][:1]
    return {"role": "assistant", "content": content}


def tool_result(call_id: str, text: str) -> dict[str, Any]:
    """A user message holding one tool result with one text part."""
    return {"role": "user", "content": [{"type": "tool_result", "callId": call_id, "content": [{"type": "text", "value": text}]}]}


def approve(part: Mapping[str, Any]) -> dict[str, Any]:
    """What VS Code sends back when the user presses Allow: the tool returns the token."""
    return tool_result(part["callId"], part["input"]["approvalToken"])


def skip(part: Mapping[str, Any]) -> dict[str, Any]:
    """What VS Code sends back when the user presses Skip (docs/vscode.md, "Skip and Stop")."""
    return tool_result(part["callId"], VSCODE_SKIP_TEXT)


#: ``options.tools`` entries for the agent-action tools, as Agent mode offers them.
ACTION_TOOL_INFOS = tuple({"name": name, "description": "Approve an ACP agent's action"} for name in sorted(ACTION_TOOLS))


def chat_options(options: Mapping[str, Any] | None = None, agent_mode: bool = True) -> dict[str, Any]:
    """A request's ``options``: ``options`` with, in ``agent_mode``, the agent-action tools
    added to ``tools``."""
    out = dict(options or {})
    if agent_mode:
        tools = list(out.get("tools") or [])
        names = {t.get("name") for t in tools}
        out["tools"] = tools + [dict(t) for t in ACTION_TOOL_INFOS if t["name"] not in names]
    return out


def is_agent_action(part: Mapping[str, Any]) -> bool:
    """Whether a response part is a permission request (a ``symposium-agent-action*`` call)."""
    return part.get("type") == "tool_call" and part.get("name") in ACTION_TOOLS


def without_last_round(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The history VS Code sends after the user pressed **Stop** at a confirmation.

    A stopped round (the last assistant message, its text and tool calls, and any tool
    results after it) is absent from the next request; the user message before it stays,
    without an answer. The daemon reads the missing tool call as Stop: it sends
    ``session/cancel``, then answers the permission ``cancelled``. Nothing is sent at Stop
    itself: the request that asked has already ended.
    """
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            return [dict(m) for m in messages[:index]]
    return [dict(m) for m in messages]


class DaemonClient:
    """JSON-RPC over a daemon process's stdio (``rpc.peer.Peer``). Use ``DaemonClient.spawn``.

    ``calls``: every request sent, by id; ``requests``: the daemon's requests (answered by
    ``on_request``); ``notifications``: every other frame with a ``method`` but
    ``lm/responsePart``, which goes to its call's parts;
    ``unmatched``: every frame that fits no request (a response to none, or answered
    already; a part of no request), and every line that is not a JSON object
    (``{"nonJsonLine": text}``, ``{"nonObjectFrame": value}``)."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.next_id = 0
        self.calls: dict[Any, SentRequest] = {}
        self.notifications: list[dict[str, Any]] = []
        self.unmatched: list[dict[str, Any]] = []  # frames that fit no request
        self.on_frame: Callable[[str, dict[str, Any]], None] | None = None  # ("in"/"out", frame)
        self.on_unmatched: Callable[[dict[str, Any]], None] | None = None  # each frame that fits no request
        # The daemon's client/* requests (docs/protocol.md, "Daemon → shim"): (method, params) →
        # the result, or raises ``RPCError`` for an error answer. None: each is answered -32601.
        self.on_request: Callable[[str, Any], Awaitable[Any]] | None = None
        self.requests: list[dict[str, Any]] = []  # the daemon's requests, as they came
        self._tg: TaskGroup | None = None
        assert process.stdout is not None and process.stdin is not None
        self.peer = Peer(process.stdout, process.stdin, self, link="daemon stdout", limit=MAX_LINE, warn=self._overlong, peer="the daemon")
        self.peer.on_received = self._received
        self.peer.on_sent = self._sent

    @classmethod
    @asynccontextmanager
    async def spawn(
        cls,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        stderr: Any = None,
        start_new_session: bool = False,
        cwd: str | None = None,
    ) -> AsyncIterator[DaemonClient]:
        """Start the daemon (default: this Python's ``lmbridge serve``) and
        stop it on exit by closing its stdin (then terminate/kill).

        ``start_new_session`` puts the daemon (and its agents) out of the terminal's
        process group, so a Ctrl-C typed in the terminal reaches only the client."""
        cmd = list(command or self_command("serve"))
        process = await anyio.open_process(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, start_new_session=start_new_session, cwd=cwd
        )
        client = cls(process)
        async with anyio.create_task_group() as tg:
            client._tg = tg
            tg.start_soon(client._read)
            try:
                yield client
            finally:
                with anyio.CancelScope(shield=True):
                    await client.close()
                tg.cancel_scope.cancel()

    async def close(self, timeout: float = 10.0) -> int | None:
        """Close stdin and wait for the daemon to exit; returns its exit code."""
        if self.process.stdin is not None:
            try:
                await self.process.stdin.aclose()
            except (anyio.BrokenResourceError, OSError):
                pass
        with anyio.move_on_after(timeout):
            return await self.process.wait()
        self.process.kill()
        return await self.process.wait()

    async def _read(self) -> None:
        await self.peer.read()
        self.peer.end(lambda: RPCError({"code": None, "message": "daemon exited"}))
        for call in self.calls.values():
            if not call.done.is_set():
                call.error = RPCError({"code": None, "message": "daemon exited"})
                call.done.set()

    # -- what the peer hands on (rpc.peer.Handler), in arrival order --------

    def _received(self, frame: dict[str, Any]) -> None:
        if self.on_frame:
            self.on_frame("in", frame)

    def _sent(self, frame: dict[str, Any]) -> None:
        if self.on_frame:
            self.on_frame("out", dict(frame))

    def _unmatched(self, frame: dict[str, Any]) -> None:
        self.unmatched.append(frame)
        if self.on_unmatched:
            self.on_unmatched(frame)

    def handle_request(self, rid: Id | None, method: str, params: Any) -> None:
        frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        self.requests.append(frame)
        if self._tg is not None:
            self._tg.start_soon(self._answer, frame)

    def handle_notification(self, method: str, params: Any) -> None:
        if method != "lm/responsePart":
            self.notifications.append({"jsonrpc": "2.0", "method": method, "params": params})
            return
        request_id = params.get("requestId") if isinstance(params, dict) else None
        call = self.calls.get(request_id) if usable_id(request_id) else None
        if call is None:
            self._unmatched({"jsonrpc": "2.0", "method": method, "params": params})
            return
        if call.done.is_set():
            call.late_parts += 1
            return
        part = params["part"]
        if isinstance(part, dict) and part.get("type") == "data":
            call.data.append(part)
            return
        call.parts.append(part)
        if call.on_part:
            call.on_part(part)

    def handle_response(self, rid: Id | None, result: Any, error: dict[str, Any] | None) -> None:
        call = self.calls[rid]
        if error is not None:
            call.error = RPCError(error)
        else:
            call.result = result
        call.done.set()

    def handle_unusable(self, reason: str, line: bytes, value: Any) -> None:
        if reason == NOT_JSON:
            self._unmatched({"nonJsonLine": line.decode("utf-8", "replace")})
        elif reason == NOT_OBJECT:
            frame = {"nonObjectFrame": value}
            if self.on_frame:
                self.on_frame("in", frame)
            self._unmatched(frame)
        elif reason == STRAY_RESPONSE:
            self._unmatched(value)

    def _overlong(self, event: str, **fields: Any) -> None:
        self._unmatched({"nonJsonLine": fields.get("start", ""), "overlong": event})

    async def _answer(self, frame: dict[str, Any]) -> None:
        """Answer one of the daemon's requests, as the shim would (``handle_request``)."""
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": frame["id"]}
        if self.on_request is None:
            answer["error"] = {"code": -32601, "message": f"method not found: {frame.get('method')}"}
        else:
            try:
                answer["result"] = await self.on_request(str(frame.get("method")), frame.get("params"))
            except RPCError as exc:
                answer["error"] = {"code": exc.code, "message": exc.message, **({"data": exc.data} if exc.data is not None else {})}
        try:
            await self.send_frame(answer)
        except (LinkClosed, RPCError):
            pass  # the daemon is gone

    async def send_raw(self, data: bytes | str) -> None:
        """Write bytes (or a str) to the daemon's stdin as they are."""
        await self.peer.send_raw(data.encode() if isinstance(data, str) else data)

    async def send_frame(self, frame: Mapping[str, Any]) -> None:
        await self.peer.send(dict(frame))

    async def start(self, method: str, params: Any = None, on_part: Callable[[dict[str, Any]], None] | None = None) -> SentRequest:
        """Send a request; returns its SentRequest at once (await ``call.done``)."""
        self.next_id += 1
        return await self.start_frame({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params if params is not None else {}}, on_part)

    async def start_frame(self, frame: Mapping[str, Any], on_part: Callable[[dict[str, Any]], None] | None = None) -> SentRequest:
        """Send a request frame written by hand (any ``id``); its parts and its answer are
        routed to the returned SentRequest like those of ``start``. Later ids of ``start`` skip it."""
        call = self.expect(frame["id"], on_part)
        await self.send_frame(frame)
        return call

    def expect(self, request_id: Any, on_part: Callable[[dict[str, Any]], None] | None = None) -> SentRequest:
        """The SentRequest of a request the caller writes itself (``send_raw``, several frames in one
        write): its parts and its answer are routed to it. Later ids of ``start`` skip it."""
        if isinstance(request_id, int) and not isinstance(request_id, bool):
            self.next_id = max(self.next_id, request_id)
        call = SentRequest(request_id, on_part)
        self.calls[request_id] = call
        self.peer.expect(request_id)
        return call

    async def request(self, method: str, params: Any = None, timeout: float = 60.0) -> Any:
        """Send a request and wait for its result. Raises ``RPCError``, ``TimeoutError``."""
        call = await self.start(method, params)
        with anyio.fail_after(timeout):
            await call.done.wait()
        if call.error:
            raise call.error
        return call.result

    async def cancel(self, call: SentRequest) -> None:
        """``$/cancelRequest`` for a call, as VS Code's cancellation token does."""
        await self.send_frame({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": call.id}})

    async def initialize(
        self,
        workspace: Sequence[str] = (),
        agents: Sequence[Mapping[str, Any]] = (),
        client_name: str = "lmbridge-client",
        capabilities: Mapping[str, bool] | None = None,
    ) -> Any:
        """``initialize``; ``capabilities``: its ``clientCapabilities`` (what ``handle_request`` serves)."""
        params: dict[str, Any] = {"protocolVersion": 1, "clientInfo": {"name": client_name, "version": "1"}}
        if capabilities:
            params["clientCapabilities"] = dict(capabilities)
        if workspace:
            params["workspaceFolders"] = list(workspace)
        if agents:
            params["agents"] = [dict(a) for a in agents]
        return await self.request("initialize", params)

    async def chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        on_part: Callable[[dict[str, Any]], None] | None = None,
        timeout: float = 60.0,
        options: Mapping[str, Any] | None = None,
        agent_mode: bool = True,
    ) -> SentRequest:
        """Run one ``lm/provideLanguageModelChatResponse`` to its end; returns the SentRequest
        (``result`` or ``error`` set, ``parts`` collected). ``agent_mode``: offer the
        agent-action tools in ``options.tools``, as VS Code's Agent mode does (without
        them the daemon cannot ask, and declines the agent's permissions)."""
        params: dict[str, Any] = {"modelId": model, "messages": list(messages), "options": chat_options(options, agent_mode)}
        call = await self.start("lm/provideLanguageModelChatResponse", params, on_part)
        with anyio.fail_after(timeout):
            await call.done.wait()
        return call


def tool_calls(call: SentRequest) -> list[dict[str, Any]]:
    """The tool call parts of a response."""
    return [p for p in call.parts if p["type"] == "tool_call"]


def text_of(call: SentRequest) -> str:
    return "".join(p["value"] for p in call.parts if p["type"] == "text")

