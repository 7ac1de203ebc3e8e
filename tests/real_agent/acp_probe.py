"""A tiny raw ACP (JSON-RPC 2.0 over newline-delimited stdio) client for tests.

Deliberately independent of lmbridge and of the ``acp`` SDK, so tests can see exactly
what an agent puts on the wire (including things the SDK's pydantic models reject).

    async with AcpProbe.spawn(cmd, env=env, cwd=tmp) as probe:
        init = await probe.request("initialize", {...})
        async with anyio.create_task_group() as tg:
            ...
            req = await probe.next_request("session/request_permission")
            await probe.respond(req["id"], {...})

Everything received is appended to :attr:`AcpProbe.log` as ``("recv", msg)`` and
everything sent as ``("send", msg)``.  The agent process is killed on exit.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

MAX_LINE = 64 * 1024 * 1024


class AgentError(RuntimeError):
    """The agent answered a request with a JSON-RPC error."""

    def __init__(self, method: str, error: dict[str, Any]) -> None:
        super().__init__(f"{method}: {error}")
        self.method = method
        self.error = error


class AcpProbe:
    def __init__(self, process: Process) -> None:
        self.process = process
        self.log: list[tuple[str, float, dict[str, Any]]] = []
        self.non_json_lines: list[str] = []
        self.stderr = bytearray()
        self.notifications: list[dict[str, Any]] = []  # params of every notification
        self._next_id = 0
        self._pending: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._req_send, self._req_recv = anyio.create_memory_object_stream[dict[str, Any]](1000)
        self._notif_event = anyio.Event()
        self._closed = anyio.Event()
        self._t0 = time.monotonic()

    # ------------------------------------------------------------------ spawn
    @classmethod
    @asynccontextmanager
    async def spawn(
        cls, command: Sequence[str], *, env: Mapping[str, str], cwd: str | Path | None = None
    ) -> AsyncIterator[AcpProbe]:
        # Own process group, so that kill() also ends Claude Code's cli.js child and any
        # command it started.
        process = await anyio.open_process(list(command), env=dict(env), cwd=cwd, start_new_session=True)
        probe = cls(process)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(probe._read_stdout)
                tg.start_soon(probe._read_stderr)
                try:
                    yield probe
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await probe.kill()

    async def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.process.returncode is None:
            try:
                self.process.kill()
            except ProcessLookupError:
                pass
        with anyio.move_on_after(5):
            await self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                try:
                    await stream.aclose()
                except Exception:
                    pass

    # ------------------------------------------------------------------ IO tasks
    async def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        reader = BufferedByteReceiveStream(self.process.stdout)
        try:
            while True:
                line = await reader.receive_until(b"\n", MAX_LINE)
                text = line.decode("utf-8", "replace").strip()
                if not text:
                    continue
                try:
                    msg = json.loads(text)
                except ValueError:
                    self.non_json_lines.append(text)
                    continue
                if not isinstance(msg, dict):
                    self.non_json_lines.append(text)
                    continue
                self.log.append(("recv", self.elapsed(), msg))
                await self._dispatch(msg)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            self._closed.set()
            for event, slot in self._pending.values():
                slot.append({"error": {"code": -32000, "message": "agent closed its stdout"}})
                event.set()

    async def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        try:
            async for chunk in self.process.stderr:
                self.stderr.extend(chunk)
                if len(self.stderr) > 4 * 1024 * 1024:
                    del self.stderr[: len(self.stderr) - 2 * 1024 * 1024]
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    async def _dispatch(self, msg: dict[str, Any]) -> None:
        if "method" in msg and "id" in msg:  # a request from the agent
            await self._req_send.send(msg)
        elif "method" in msg:  # a notification
            self.notifications.append(msg.get("params") or {})
            self._notif_event.set()
            self._notif_event = anyio.Event()
        elif "id" in msg:  # a response to us
            pending = self._pending.pop(msg["id"], None)
            if pending is not None:
                event, slot = pending
                slot.append(msg)
                event.set()

    # ------------------------------------------------------------------ sending
    def elapsed(self) -> float:
        return round(time.monotonic() - self._t0, 3)

    async def _write(self, msg: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.log.append(("send", self.elapsed(), msg))
        await self.process.stdin.send((json.dumps(msg) + "\n").encode())

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request and wait for its result (raises :class:`AgentError`)."""
        self._next_id += 1
        rid = self._next_id
        event, slot = anyio.Event(), []
        self._pending[rid] = (event, slot)
        await self._write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        await event.wait()
        msg = slot[0]
        if "error" in msg:
            raise AgentError(method, msg["error"])
        return msg.get("result")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def respond(self, request_id: Any, result: Any) -> None:
        await self._write({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def respond_error(self, request_id: Any, code: int, message: str) -> None:
        await self._write({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    # ------------------------------------------------------------------ receiving
    async def next_request(self, method: str | None = None) -> dict[str, Any]:
        """The next request the agent sends us (other methods are answered 'not found')."""
        while True:
            msg = await self._req_recv.receive()
            if method is None or msg["method"] == method:
                return msg
            await self.respond_error(msg["id"], -32601, f"method not found: {msg['method']}")

    async def wait_update(self, predicate, timeout: float = math.inf) -> dict[str, Any]:
        """Wait for a session/update whose params satisfy ``predicate`` (past ones count)."""
        with anyio.fail_after(timeout):
            seen = 0
            while True:
                event = self._notif_event
                for params in self.notifications[seen:]:
                    if predicate(params):
                        return params
                seen = len(self.notifications)
                await event.wait()

    # ------------------------------------------------------------------ views
    def updates(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The ``update`` objects of ``session/update`` notifications, in order."""
        return [
            n["update"]
            for n in self.notifications
            if "update" in n and (session_id is None or n.get("sessionId") == session_id)
        ]

    def update_kinds(self, session_id: str | None = None) -> list[str]:
        return [u.get("sessionUpdate", "?") for u in self.updates(session_id)]

    def agent_text(self, start: int = 0, session_id: str | None = None) -> str:
        """Concatenated agent_message_chunk text of updates[start:]."""
        out = []
        for u in self.updates(session_id)[start:]:
            if u.get("sessionUpdate") == "agent_message_chunk" and u.get("content", {}).get("type") == "text":
                out.append(u["content"]["text"])
        return "".join(out)

    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


def initialize_params(**client_capabilities: Any) -> dict[str, Any]:
    caps: dict[str, Any] = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
    caps.update(client_capabilities)
    return {
        "protocolVersion": 1,
        "clientCapabilities": caps,
        "clientInfo": {"name": "lmbridge-tests", "title": "lmbridge tests", "version": "0"},
    }


def text_prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def pick_option(options: list[dict[str, Any]], kind: str) -> str:
    """optionId of the first permission option of ``kind`` (never choose by id)."""
    for opt in options:
        if opt.get("kind") == kind:
            return opt["optionId"]
    raise LookupError(f"no option of kind {kind!r} in {options!r}")
