"""The ACP client connection: one agent subprocess spoken to over stdio.

JSON-RPC 2.0, one object a line (docs/agents.md, "ACP as agents speak it"). Written on anyio rather
than with the SDK's connection because of its sharp edges (docs/agents.md, "The ACP Python SDK"): it
drops a whole ``session/update`` that fails validation, has a 64 KiB line
limit, and sends nothing on cancel. ACP *types* come from the SDK's schema
(``render``, ``session_actor``); the wire is ``rpc.peer.Peer``'s (framing, ids,
routing, bad lines); this module runs the process and turns frames into events.

Incoming traffic is delivered in arrival order as ``Incoming`` events on one
stream (notifications and the agent's requests alike), so a session actor
sees every update before the response that ends a prompt. Lines that are not
JSON objects are logged and skipped; very long lines (up to ``AGENT_LINE``) are
fine, a longer one is dropped as it streams and logged, and the link goes on. When
the agent exits, every request in flight fails with
``AgentUnavailable`` naming the exit code and the tail of its stderr.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast

import anyio
from anyio.abc import ByteReceiveStream, Process

from lmbridge.acp import watchdog
from lmbridge.core import errors
from lmbridge.core.text import clip
from lmbridge.log import get_logger
from lmbridge.rpc import framing, record
from lmbridge.rpc.framing import BadLines
from lmbridge.rpc.peer import Id, Peer, PipeReader, batches, open_pipe

AGENT_LINE = framing.AGENT_LINE  # bytes; agents send MB-long lines (docs/agents.md), a longer one is dropped
STDERR_TAIL = 20  # lines kept for error messages
STDERR_LINE = 2000  # characters kept of each (an agent's 64 MiB stderr line made a 25 MB error)
STDERR_ERROR = 2000  # characters of that tail quoted in an error the user reads
TERM_GRACE = 2.0  # seconds between closing stdin / SIGTERM / SIGKILL
STDERR_GRACE = 0.5  # seconds to read the rest of stderr once stdout has ended

log = get_logger("acp")


class AgentError(Exception):
    """The agent answered a request with a JSON-RPC error (``code``, ``message``, ``data``)."""

    def __init__(self, method: str, error: Mapping[str, Any]) -> None:
        self.code = error.get("code")
        self.data = error.get("data")
        self.message = clip(str(error.get("message", "error")), 500)  # the agent's own words
        # The reason is often in data.message (codex-acp puts the model API's message there,
        # docs/agents.md) or data.details (fast-agent; the ACP TypeScript SDK's internal errors:
        # gemini-cli's session/load): "Internal error" alone says nothing.
        reason = error_reason(self.data)
        detail = f": {clip(reason, 2000)}" if isinstance(reason, str) and reason.strip() else ""
        super().__init__(f"{method}: {self.message} (code {self.code}){detail}")


def error_reason(data: Any) -> str | None:
    """What an agent's JSON-RPC ``error.data`` says went wrong: its ``message``, else its
    ``details`` (fast-agent; the ACP TypeScript SDK's internal errors: gemini-cli's
    session/load), or the string itself. codex-acp 0.16.0 puts in ``message`` the model
    API's error body as it came, ``{"error": {"message": ..., "type": ..., "code": ...}}``
    (OpenAI's shape): then its message."""
    reason = (data.get("message") or data.get("details")) if isinstance(data, dict) else data if isinstance(data, str) else None
    if isinstance(reason, str) and reason.lstrip().startswith("{"):
        try:
            body = json.loads(reason)
        except ValueError:
            return reason
        inner = body.get("error") if isinstance(body, dict) else None
        message = inner.get("message") if isinstance(inner, dict) else body.get("message") if isinstance(body, dict) else None
        if isinstance(message, str) and message.strip():
            return message
    return reason


class AgentUnavailable(Exception):
    """The agent process ended (or could not start); carries its stderr tail."""


#: The answer to a request whose id cannot be written back (an object, a list, a bool):
#: JSON-RPC 2.0 answers it with id null.
BAD_ID_ERROR = errors.error(errors.INVALID_REQUEST, "id must be a string or a number")


class Incoming(NamedTuple):
    """A frame the agent sent us: a notification (``id`` None) or a request. ``bad_id``: a
    request whose id cannot be answered by it (``id`` is then None): it is answered with
    ``BAD_ID_ERROR`` and id null, and nothing it asks is done. A named tuple, not a frozen
    dataclass: one is made per frame the agent streams, and a frozen dataclass's
    ``__init__`` (``object.__setattr__`` per field) was ~9% of the daemon's streaming time."""

    method: str
    params: Any
    id: int | str | None = None  # a float id (JSON allows one) is kept as it came, answered by it
    bad_id: bool = False


@dataclass(frozen=True, slots=True)
class Response:
    """The answer to a request sent with ``send_request``, delivered on the events
    stream in arrival order: a session actor sees it after every update the agent
    sent before it, and before every update sent after it (ACP: a prompt turn ends
    with the ``session/prompt`` response; later updates belong to no turn)."""

    id: int
    result: Any = None
    error: AgentError | None = None


class EventSink(Protocol):
    """Where a connection hands the agent's frames, in order, without waiting: a memory
    object stream, or ``acp.process.AgentProcess``, which routes them by sessionId."""

    def send_nowait(self, item: Incoming | Response, /) -> None: ...


async def _first(*events: anyio.Event) -> None:
    """Wait until any of ``events`` is set."""
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


class AgentConnection:
    """JSON-RPC over an agent's stdio. Create with ``spawn`` inside a task group.

    ``events``: where every notification and agent→client request goes, in order
    (an unbounded stream: the reader hands frames over without waiting). ``stdout``: the
    agent's stdout, when it is not ``process.stdout`` (``spawn`` makes the pipe itself).
    """

    def __init__(self, name: str, process: Process, events: EventSink, stdout: ByteReceiveStream | None = None) -> None:
        self.name = name
        self.process = process
        out = stdout if stdout is not None else process.stdout
        assert out is not None and process.stdin is not None
        self.stdout: ByteReceiveStream = out
        self.events = events
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.closed = anyio.Event()
        self.exit_reason: str | None = None
        self.bad_lines = BadLines(f"agent {name!r} stdout", log.warning)
        self.stderr_log = framing.Throttle(f"agent {name!r}", log.bind(agent=name).debug, log.bind(agent=name).debug)
        self.peer = Peer(
            self.stdout, process.stdin, self, link=f"agent {name!r}", limit=AGENT_LINE, warn=log.bind(agent=name).warning,
            remote_error=AgentError, broken=self._broken, peer="the agent",
        )
        self._recorder: record.AgentLink | None = None

    @property
    def recorder(self) -> record.AgentLink | None:
        """Where this link is recorded (``lmbridge serve --record``), or None."""
        return self._recorder

    @recorder.setter
    def recorder(self, link: record.AgentLink | None) -> None:
        self._recorder = link
        self.peer.on_received = link.received if link is not None else None
        self.peer.on_sent = link.sent if link is not None else None

    @property
    def heard(self) -> float:
        """When its stdout last gave anything (``time.monotonic()``; acp.session: a slow answer vs a stuck process)."""
        return self.peer.heard

    @classmethod
    async def spawn(
        cls,
        name: str,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None,
        events: EventSink,
        session: str | None = None,
        recorder: record.Recorder | None = None,
    ) -> AgentConnection:
        """Start the agent with the daemon's environment plus ``env``.

        Raises ``AgentUnavailable`` when the command cannot be started. The caller
        runs ``serve()`` in its task group and ``close()`` when done. ``session``
        names the link in ``recorder``'s recording (``agent:<session>``; ``lmbridge serve --record``).
        """
        link = recorder.agent(session or name) if recorder is not None else None
        exe = shutil.which(command, path=env.get("PATH", os.environ.get("PATH"))) or command
        full_env = {**os.environ, **env}
        try:
            # Its stdout is a pipe of ours, 1 MiB wide, not 64 KiB: a streaming agent blocks,
            # and wakes the reader, 16× less often; and it is read without the copies of
            # anyio's subprocess streams (docs/performance.md, "Streaming: the agent's pipe
            # read directly").
            stdout, agent_end = open_pipe()
            try:
                # In a process group of its own: our signals reach its children too; and the
                # group dies with the daemon, even one killed with SIGKILL (acp.watchdog).
                process = await watchdog.open_group(
                    [exe, *args],
                    stdin=subprocess.PIPE,
                    stdout=agent_end,
                    stderr=subprocess.PIPE,
                    env=full_env,
                    cwd=cwd,
                )
            except BaseException:  # not started (or cancelled): nobody will read it
                os.close(stdout)
                raise
            finally:
                os.close(agent_end)  # the agent holds its own: its exit is our EOF
        except OSError as exc:
            error = AgentUnavailable(f"agent {name!r} failed to start: {command}: {exc.strerror or exc}")
            if link is not None:
                link.spawned(name, command, args, env, cwd, error=str(error))
            raise error from exc
        log.info("agent started", agent=name, pid=process.pid, command=command)
        conn = cls(name, process, events, PipeReader(stdout))
        if link is not None:
            link.spawned(name, command, args, env, cwd)
            conn.recorder = link
        return conn

    async def serve(self) -> None:
        """Read stdout and stderr until the agent exits, then fail what is in flight."""
        try:
            async with anyio.create_task_group() as tg:
                stderr_done, stdout_done, exited = anyio.Event(), anyio.Event(), anyio.Event()
                tg.start_soon(self._drain_stderr, stderr_done)
                tg.start_soon(self._read_stdout_until, stdout_done)
                tg.start_soon(self._wait_exit, exited)
                # The end is stdout's EOF, or the process's exit: a helper it started
                # may hold its stdout open forever. Then read what is left, briefly.
                await _first(stdout_done, exited)
                with anyio.move_on_after(STDERR_GRACE):
                    await stdout_done.wait()
                # An agent that dies writes its last words to stderr just before:
                # read them (briefly: a grandchild may hold the pipe open).
                with anyio.move_on_after(STDERR_GRACE):
                    await stderr_done.wait()
                tg.cancel_scope.cancel()
            with anyio.move_on_after(TERM_GRACE):
                await self.process.wait()
            if self.process.returncode is None:  # stdout closed, yet it lives on: mute, so gone
                self._kill()
            code = await self.process.wait()
            if self.recorder is not None:
                self.recorder.exited(code, self.stderr_tail)
            self.exit_reason = self.exit_reason or f"agent {self.name!r} exited with code {code}"
        finally:
            self.bad_lines.close()
            self._fail_all()
            self.closed.set()
            log.info("agent ended", agent=self.name, reason=self.exit_reason)

    @property
    def alive(self) -> bool:
        """Not ended: ``serve()`` still runs and the process has not exited (its exit is
        known as soon as it is reaped, before ``serve()`` has read its last words)."""
        return not self.closed.is_set() and self.process.returncode is None

    def describe_exit(self) -> str:
        """A readable reason the agent is gone, with the tail of its stderr."""
        tail = "\n".join(self.stderr_tail)
        if len(tail) > STDERR_ERROR:  # the last words matter most
            tail = f"[{len(tail) - STDERR_ERROR} characters before]…{tail[-STDERR_ERROR:]}"
        reason = self.exit_reason or f"agent {self.name!r} is gone"
        return f"{reason}" + (f"; stderr:\n{tail}" if tail else "")

    def _fail_all(self) -> None:
        self.peer.end(lambda: AgentUnavailable(self.describe_exit()))

    async def _read_stdout_until(self, done: anyio.Event) -> None:
        try:
            await self.peer.read()
        finally:
            done.set()
            if self.stdout is not self.process.stdout:  # ours (``spawn``'s pipe): nobody reads it now
                with anyio.CancelScope(shield=True):
                    await self.stdout.aclose()

    async def _wait_exit(self, done: anyio.Event) -> None:
        await self.process.wait()
        done.set()

    # -- what the peer hands on (rpc.peer.Handler), in arrival order --------

    def handle_request(self, rid: Id | None, method: str, params: Any) -> None:
        # rid None: a request JSON-RPC cannot answer by its id (an object, a list, a bool,
        # null): nothing it asks is done (nothing approved by mistake); its session answers
        # it at once with id null, so the agent is not left waiting on our silence.
        self.events.send_nowait(Incoming(method, params, cast(int | str | None, rid), bad_id=rid is None))  # unbounded

    def handle_notification(self, method: str, params: Any) -> None:
        self.events.send_nowait(Incoming(method, params))

    def handle_response(self, rid: Id | None, result: Any, error: dict[str, Any] | None) -> None:
        assert type(rid) is int  # send_request's ids are new_id's
        self.events.send_nowait(Response(rid, result, AgentError("request", error) if error is not None else None))

    def handle_unusable(self, reason: str, line: bytes, value: Any) -> None:
        # Logged bounded, never answered (answering a response lets two peers ping-pong errors).
        self.bad_lines.bad(line, reason, time.monotonic())

    async def _drain_stderr(self, done: anyio.Event) -> None:
        """Read stderr to its end (an undrained pipe fills up and blocks the agent,
        docs/agents.md): each line clipped to ``STDERR_LINE`` characters (a longer one is never held whole)
        into ``stderr_tail``, and logged at a bounded rate (``framing.Throttle``)."""
        assert self.process.stderr is not None
        lines = framing.Lines(4 * STDERR_LINE, head=4 * STDERR_LINE)  # bytes: up to 4 a character
        try:
            async for batch in batches(self.process.stderr, lines):
                for line in batch:
                    self._stderr_line(line)
        finally:
            self.stderr_log.close()
            done.set()

    def _stderr_line(self, line: bytes | framing.Overlong) -> None:
        if isinstance(line, framing.Overlong):
            text = f"{clip(line.head.decode(errors='replace'), STDERR_LINE)}… [{line.size:,} bytes in all]"
            size = line.size
        else:
            text, size = clip(line.decode(errors="replace").rstrip(), STDERR_LINE), len(line)
        if text:
            self.stderr_tail.append(text)
            self.stderr_log.offer(text, size + 1, time.monotonic())

    async def _broken(self, exc: BaseException) -> BaseException:
        """A write failed: the agent is dying. Let serve() record its exit code and stderr
        first, so the error says why (a broken pipe alone says nothing)."""
        with anyio.move_on_after(STDERR_GRACE + TERM_GRACE):
            await self.closed.wait()
        return AgentUnavailable(self.describe_exit())

    async def request(self, method: str, params: Any) -> Any:
        """Send a request and wait for its result.

        Raises ``AgentError`` for an error response, ``AgentUnavailable`` if the agent
        goes away first. Cancelling the caller abandons the wait (the late
        response is logged and dropped).
        """
        return await self.peer.request(method, params)

    def new_id(self) -> int:
        """A request id for ``send_request``."""
        rid = self.peer.new_id()
        assert type(rid) is int  # the peer's ids: 1, 2, …
        return rid

    async def send_request(self, rid: int, method: str, params: Any) -> None:
        """Send request ``rid`` (from ``new_id``); its answer comes as a ``Response`` on
        the events stream, in order with the agent's notifications. Raises ``AgentUnavailable``."""
        await self.peer.send_request(rid, method, params)

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification (no answer expected). Raises ``AgentUnavailable``."""
        await self.peer.notify(method, params)

    async def respond(self, rid: Id | None, result: Any = None, error: Mapping[str, Any] | None = None) -> None:
        """Answer one of the agent's requests (exactly once, by the caller's contract)."""
        try:
            await self.peer.respond(rid, result, error)
        except AgentUnavailable:
            log.info("answer to a gone agent dropped", agent=self.name, id=rid)

    def _kill(self) -> None:
        if self.process.returncode is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()

    async def close(self) -> None:
        """End the agent: close stdin, then SIGTERM, then SIGKILL (its process group);
        whatever it left running in its process group is killed too."""
        if self.process.returncode is None:
            if self.recorder is not None:
                self.recorder.closing()
            if self.process.stdin is not None:
                with anyio.move_on_after(0.5):
                    await self.process.stdin.aclose()
            with anyio.move_on_after(TERM_GRACE):
                await self.process.wait()
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if self.process.returncode is not None:
                    break
                try:
                    os.killpg(self.process.pid, sig)
                except (ProcessLookupError, PermissionError):
                    self.process.send_signal(sig)
                with anyio.move_on_after(TERM_GRACE):
                    await self.process.wait()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # helpers that outlived the agent
        except (ProcessLookupError, PermissionError):
            pass
        watchdog.ended(self.process)
        if self.process.returncode is not None:
            # Its pipes and transport closed now, not when collected after the loop ends.
            with anyio.move_on_after(STDERR_GRACE):
                await self.process.aclose()
        if self.stdout is not self.process.stdout:  # ours (``spawn``'s pipe), if serve() never ran
            await self.stdout.aclose()
        if self.recorder is not None and self.process.returncode is not None:
            self.recorder.exited(self.process.returncode, self.stderr_tail)  # serve() may be cancelled first
        if not self.exit_reason:
            self.exit_reason = f"agent {self.name!r} was stopped"
