"""``lmbridge replay FILE...``: recorded sessions re-run through the real daemon.

The recording's shim frames are fed to a real ``Server`` (in this process, on
in-memory line streams); every agent it spawns is played back from the
recording (a ``PlaybackConnection``: the real ``AgentConnection`` on a fake
process). Walking the recording in order, each input (shim → daemon, agent →
daemon, an agent's exit) is fed only once the daemon has produced every output
recorded before it, on every link, each link compared in its own order. What is
legitimately nondeterministic is normalised (docs/replay.md): callIds and approval
tokens are bound on first sight (recorded ↔ actual) and the
actual values are substituted into later inputs; temp dirs, ports, the working
directory, the Python executable and lmbridge's version are normalised; response
text is compared as each request's concatenated text stream (the daemon merges
consecutive text parts when they queue up, so part boundaries may differ).

The first divergence raises ``Divergence`` with a readable report.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from lmbridge import __version__
from lmbridge.rpc.record import FORMAT, HEADER_KEY, _dump, walk_strings

DEFAULT_TIMEOUT = 10.0  # seconds an expected output may take, beyond the recorded gap
SHUTDOWN_TIMEOUT = 15.0  # seconds for the daemon to exit after the recording's last input
TERM_GRACE = 2.0

CALL_ID = r"lmbridge-[A-Za-z0-9_.-]*?-[0-9a-f]{12}"
BINDABLE = re.compile(rf"<redacted:approval-token:\d+>|\b{CALL_ID}\b")
PORT = re.compile(r"\b(127\.0\.0\.1|localhost|\[::1\]):\d{2,5}\b")
MERGEABLE = ("text", "thinking")


class RecordingError(Exception):
    """The file is not a recording this version can replay."""


class Divergence(Exception):
    """The daemon did not do what the recording says; ``str()`` is the report."""


# ---------------------------------------------------------------- the file


@dataclass
class Entry:
    line: int  # 1-based line number in the file
    t: float
    link: str
    dir: str
    data: dict[str, Any]

    @property
    def event(self) -> str | None:
        return self.data.get("event")

    @property
    def is_input(self) -> bool:
        return self.dir == "in"

    def value(self) -> Any:
        """What is compared: the frame, ``{"raw": line}``, or the event's fields."""
        if "frame" in self.data:
            return self.data["frame"]
        return {k: v for k, v in self.data.items() if k not in ("t", "link", "dir")}


@dataclass
class Recording:
    path: Path
    header: dict[str, Any]
    entries: list[Entry]


def load(path: str | Path) -> Recording:
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RecordingError(f"{path}: {exc.strerror or exc}") from exc
    if not lines:
        raise RecordingError(f"{path}: empty file")
    try:
        header = json.loads(lines[0])
    except ValueError as exc:
        raise RecordingError(f"{path}:1: not JSON: {exc}") from exc
    if not isinstance(header, dict) or HEADER_KEY not in header:
        raise RecordingError(f"{path}:1: not an lmbridge recording (no {HEADER_KEY!r} header)")
    if header[HEADER_KEY] != FORMAT:
        raise RecordingError(f"{path}: recording format {header[HEADER_KEY]!r}; this lmbridge replays format {FORMAT}")
    entries = []
    for number, text in enumerate(lines[1:], start=2):
        if not text.strip():
            continue
        try:
            data = json.loads(text)
            entry = Entry(number, float(data["t"]), str(data["link"]), str(data["dir"]), data)
        except (ValueError, KeyError, TypeError) as exc:
            raise RecordingError(f"{path}:{number}: not a recording entry: {exc}") from exc
        if entry.dir not in ("in", "out") or not (entry.link == "shim" or entry.link.startswith(("agent:", "mcp:"))):
            raise RecordingError(f"{path}:{number}: bad link/dir {entry.link!r}/{entry.dir!r}")
        if entry.link == "shim" and entry.dir == "out" and _is_notice(entry.data):
            continue  # "Starting <agent>…", "Waiting for a free <agent> session…": wall-clock artefacts; replay shows none
        entries.append(entry)
    return Recording(path, header, entries)


def _is_notice(data: dict[str, Any]) -> bool:
    from lmbridge.core.cap import is_waiting_notice
    from lmbridge.core.turn import is_start_notice

    frame = data.get("frame")
    params = frame.get("params") if isinstance(frame, dict) and frame.get("method") == "lm/responsePart" else None
    part = params.get("part") if isinstance(params, dict) else None
    value = part.get("value") if isinstance(part, dict) and part.get("type") == "text" else None
    return is_start_notice(value) or is_waiting_notice(value)


# ---------------------------------------------------------------- normalising and binding


class Matcher:
    """Compares recorded frames with actual ones, modulo what is legitimately
    nondeterministic, and binds recorded ids/tokens to the actual ones."""

    def __init__(self, header: dict[str, Any]) -> None:
        host = header.get("host") or {}
        self.version = header.get("lmbridge")
        prefixes: list[tuple[str, str]] = []
        for key, label, now in (("python", "<python>", sys.executable), ("cwd", "<cwd>", os.getcwd())):
            for value in {host.get(key), now}:
                if isinstance(value, str) and len(value) > 1:
                    prefixes.append((value, label))
        prefixes.sort(key=lambda p: len(p[0]), reverse=True)
        self._prefixes = prefixes
        tmps = {t.rstrip("/") for t in (host.get("tmp"), tempfile.gettempdir(), "/tmp") if isinstance(t, str) and len(t) > 1}
        self._tmp = re.compile("(?:" + "|".join(re.escape(t) for t in sorted(tmps, key=len, reverse=True)) + r")/[^/\s\"'`]+")
        self.bound: dict[str, str] = {}  # recorded → actual
        self._reverse: dict[str, str] = {}
        self._subst: re.Pattern[str] | None = None

    # -- normalising

    def norm(self, s: str) -> str:
        for value, label in self._prefixes:
            if value in s:
                s = s.replace(value, label)
        s = self._tmp.sub("<tmp>", s)
        return PORT.sub(r"\1:<port>", s)

    # -- comparing

    def match(self, expected: Any, actual: Any, path: str = "") -> tuple[str, Any, Any] | None:
        """None when equal (binding what is new), else (path, expected, actual) of the first difference."""
        if isinstance(expected, dict) and isinstance(actual, dict):
            for key in expected:
                if key not in actual:
                    return (_join(path, key), expected[key], "<missing>")
            for key in actual:
                if key not in expected:
                    return (_join(path, key), "<absent in the recording>", actual[key])
            for key, value in expected.items():
                if key == "version" and value == self.version and actual[key] == __version__:
                    continue
                diff = self.match(value, actual[key], _join(path, key))
                if diff is not None:
                    return diff
            return None
        if isinstance(expected, list) and isinstance(actual, list):
            for index, (e, a) in enumerate(zip(expected, actual)):
                diff = self.match(e, a, f"{path}[{index}]")
                if diff is not None:
                    return diff
            if len(expected) != len(actual):
                n = min(len(expected), len(actual))
                return (f"{path}[{n}]", expected[n] if n < len(expected) else "<absent in the recording>", actual[n] if n < len(actual) else "<missing>")
            return None
        if isinstance(expected, str) and isinstance(actual, str):
            return None if self.match_str(expected, actual) else (path or "(frame)", expected, actual)
        if type(expected) is bool or type(actual) is bool or expected is None or actual is None:
            return None if expected is actual else (path or "(frame)", expected, actual)
        if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
            return None if expected == actual else (path or "(frame)", expected, actual)
        return (path or "(frame)", expected, actual)

    def match_str(self, expected: str, actual: str) -> bool:
        e, a = self.norm(expected), self.norm(actual)
        tokens = list(BINDABLE.finditer(e))
        if not tokens:
            return e == a
        pattern: list[str] = []
        pos = 0
        groups: dict[str, str] = {}
        for m in tokens:
            pattern.append(re.escape(e[pos : m.start()]))
            token = m.group(0)
            if token in self.bound:
                pattern.append(re.escape(self.bound[token]))
            elif token in groups:
                pattern.append(f"(?P={groups[token]})")
            else:
                name = groups[token] = f"g{len(groups)}"
                body = re.escape(token[:-12]) + "[0-9a-f]{12}" if token.startswith("lmbridge-") else r"[^\s\"'<>]+?"
                pattern.append(f"(?P<{name}>{body})")
            pos = m.end()
        pattern.append(re.escape(e[pos:]))
        found = re.fullmatch("".join(pattern), a, re.S)
        if found is None:
            return False
        new = {token: found.group(name) for token, name in groups.items()}
        if any(self._reverse.get(value, token) != token for token, value in new.items()):
            return False  # one actual value bound to two recorded ones
        for token, value in new.items():
            self.bound[token] = value
            self._reverse[value] = token
        if new:
            keys = sorted(self.bound, key=len, reverse=True)
            self._subst = re.compile("|".join(re.escape(k) for k in keys))
        return True

    # -- inputs

    def substitute(self, obj: Any) -> Any:
        """An input with every bound recorded value replaced by its actual value."""
        pattern = self._subst
        if pattern is None:
            return obj
        return walk_strings(obj, lambda s: pattern.sub(lambda m: self.bound[m.group(0)], s))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


# ---------------------------------------------------------------- one link's output stream


@dataclass
class Item:
    """One output, or (``run``) the concatenated text of consecutive text parts of
    one request (same request, type and thinking id)."""

    kind: str  # "run" | "frame"
    value: Any = None  # the frame or event (for runs: the first part's frame)
    key: Any = None
    text: str = ""
    sources: list[tuple[int, int, int]] = field(default_factory=list)  # (line, output #, offset in text)


def run_key(frame: Any) -> Any:
    """The merge key of a text/thinking ``lm/responsePart``, else None."""
    if not isinstance(frame, dict) or frame.get("method") != "lm/responsePart":
        return None
    params = frame.get("params")
    part = params.get("part") if isinstance(params, dict) else None
    if not isinstance(params, dict) or not isinstance(part, dict) or part.get("type") not in MERGEABLE or not isinstance(part.get("value"), str):
        return None
    rest = {k: v for k, v in part.items() if k != "value"}
    return (json.dumps(params.get("requestId")), json.dumps(rest, sort_keys=True))


@dataclass
class Stream:
    items: list[Item] = field(default_factory=list)
    count: int = 0  # outputs added

    def add(self, value: Any, line: int = 0) -> None:
        self.count += 1
        key = run_key(value)
        if key is not None:
            text = value["params"]["part"]["value"]
            last = self.items[-1] if self.items else None
            if last is not None and last.kind == "run" and last.key == key:
                last.sources.append((line, self.count, len(last.text)))
                last.text += text
            else:
                self.items.append(Item("run", value, key, text, [(line, self.count, 0)]))
            return
        self.items.append(Item("frame", value, sources=[(line, self.count, 0)]))

    def mark(self) -> tuple[int, int | None]:
        """How far the stream is: (items, characters of the last item when it is a run)."""
        if not self.items:
            return (0, None)
        last = self.items[-1]
        return (len(self.items), len(last.text) if last.kind == "run" else None)


# ---------------------------------------------------------------- the played-back agent


class _Pipe(ByteReceiveStream):
    """The agent's stdout or stderr: what the player feeds, as the daemon reads it."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[bytes](math.inf)

    def feed(self, data: bytes) -> None:
        self._send.send_nowait(data)

    def end(self) -> None:
        self._send.close()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._receive.receive()

    async def aclose(self) -> None:
        self._receive.close()


class _Stdin(ByteSendStream):
    """The agent's stdin: each line the daemon writes goes to the player."""

    def __init__(self, process: FakeProcess) -> None:
        self.process = process
        self.closed = False
        self._partial = b""

    async def send(self, item: bytes) -> None:
        data = self._partial + item
        *lines, self._partial = data.split(b"\n")
        for line in lines:
            if line.strip():
                try:
                    frame: Any = json.loads(line)
                except ValueError:
                    frame = {"raw": line.decode("utf-8", "replace")}
                self.process.player.output(self.process.link, frame)
        if self.closed:
            raise anyio.ClosedResourceError
        if self.process.returncode is not None:
            raise anyio.BrokenResourceError

    async def send_eof(self) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if not self.closed and self.process.returncode is None:
            self.process.player.output(self.process.link, {"event": "close"})
        self.closed = True


class FakeProcess:
    """The process an agent would have been: fed and ended by the player."""

    pid = -1  # never signalled: PlaybackConnection overrides close() and _kill()

    def __init__(self, player: Player, link: str) -> None:
        self.player = player
        self.link = link
        self.returncode: int | None = None
        self._exited = anyio.Event()
        self.stdin = _Stdin(self)
        self.stdout = _Pipe()
        self.stderr = _Pipe()

    def exit(self, code: int | None, stderr: Sequence[str] = ()) -> None:
        if self.returncode is not None:
            return
        for line in stderr:
            self.stderr.feed((str(line) + "\n").encode())
        self.stderr.end()
        self.stdout.end()
        self.returncode = code if code is not None else 0
        self._exited.set()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        self.exit(-9)

    def terminate(self) -> None:
        self.exit(-15)

    def send_signal(self, sig: int) -> None:
        self.exit(-int(sig))


@functools.cache
def _connection_class() -> Any:
    from lmbridge.acp.connection import AgentConnection

    class PlaybackConnection(AgentConnection):
        """The real ACP connection code on a played-back process."""

        def _kill(self) -> None:
            self.process.kill()

        async def close(self) -> None:
            if self.process.returncode is None:
                if self.process.stdin is not None:
                    await self.process.stdin.aclose()
                with anyio.move_on_after(TERM_GRACE):
                    await self.process.wait()
                if self.process.returncode is None:
                    self.process.kill()
            if not self.exit_reason:
                self.exit_reason = f"agent {self.name!r} was stopped"

    return PlaybackConnection


@dataclass(frozen=True)
class _McpSession:
    """The MCP client session the tools handlers see (for ``tools/list_changed``)."""

    player: Player
    link: str

    async def send_tool_list_changed(self) -> None:
        self.player.output(self.link, {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})


@dataclass(frozen=True)
class _McpContext:
    session: _McpSession


# ---------------------------------------------------------------- the player


@dataclass
class Result:
    path: Path
    entries: int
    seconds: float
    recorded_seconds: float


class Player:
    """Replays one recording through an in-process daemon."""

    def __init__(self, recording: Recording, realtime: bool = False, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.recording = recording
        self.realtime = realtime
        self.timeout = timeout
        self.matcher = Matcher(recording.header)
        self.expected: dict[str, Stream] = {}
        self.actual: dict[str, Stream] = {}
        self.verified: dict[str, int] = {}
        self.processes: dict[str, FakeProcess] = {}
        self.divergence: Divergence | None = None
        self.server: Any = None
        self._tg: Any = None
        self._mcp_contexts: dict[str, _McpContext] = {}
        self._progress = anyio.Event()
        self._lines_send, self._lines_receive = anyio.create_memory_object_stream[bytes](math.inf)
        # The inputs, each with how far every link's outputs must be before it is fed.
        self.steps: list[tuple[Entry, dict[str, tuple[int, int | None]], float]] = []
        previous_t = 0.0
        for entry in recording.entries:
            if entry.is_input:
                marks = {link: stream.mark() for link, stream in self.expected.items()}
                self.steps.append((entry, marks, max(0.0, entry.t - previous_t)))
                previous_t = entry.t
            else:
                self.expected.setdefault(entry.link, Stream()).add(entry.value(), entry.line)

    # -- running

    async def run(self) -> Result:
        from lmbridge.core.messages import AgentSpec
        from lmbridge.daemon.server import Config, Server, Stdout

        config = self.recording.header.get("config") or {}
        agents = [AgentSpec.model_validate(a) for a in config.get("agents") or []]
        # Agents are played back: the server starts them through this player (its launcher).
        server = self.server = Server(Config(agents=agents, idle_timeout=float(config.get("idleTimeout") or 1800.0), launcher=self.spawn, start_notice=math.inf))
        started = time.monotonic()
        served = anyio.Event()
        failure: Divergence | None = None
        async with anyio.create_task_group() as tg:
            self._tg = tg

            async def serve() -> None:
                try:
                    await server.serve(self._lines(), Stdout(write=self._stdout))
                finally:
                    served.set()

            tg.start_soon(serve)
            try:
                for entry, marks, gap in self.steps:
                    await self._wait(marks, self.timeout + gap, entry)
                    if self.realtime:
                        delay = started + entry.t - time.monotonic()
                        if delay > 0:
                            await anyio.sleep(delay)
                    self._feed(entry)
                    await _settle()
                    self._check()
                final = {link: stream.mark() for link, stream in self.expected.items()}
                await self._wait(final, self.timeout, None)
                with anyio.move_on_after(SHUTDOWN_TIMEOUT):
                    await served.wait()
                self._check(final=True)
                if not served.is_set():
                    raise Divergence(f"DIVERGENCE in {self.recording.path}: the daemon did not exit within {SHUTDOWN_TIMEOUT:.0f} s of the recording's end")
            except Divergence as exc:
                failure = exc
            finally:
                self._lines_send.close()
                tg.cancel_scope.cancel()
        if failure is not None:
            raise failure
        entries = self.recording.entries
        return Result(self.recording.path, len(entries), time.monotonic() - started, entries[-1].t if entries else 0.0)

    async def _lines(self) -> Any:
        async for line in self._lines_receive:
            yield line

    def _feed(self, entry: Entry) -> None:
        data = entry.data
        if entry.link == "shim":
            if entry.event == "eof":
                self._lines_send.close()
            elif "raw" in data:
                self._lines_send.send_nowait((str(data["raw"]) + "\n").encode())
            else:
                frame = self.matcher.substitute(data.get("frame"))
                self._lines_send.send_nowait((json.dumps(frame, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace"))
            return
        if entry.link.startswith("mcp:"):
            self._feed_mcp(entry)
            return
        process = self.processes.get(entry.link)
        if process is None:
            raise self._report("no agent is running on this link (the daemon never spawned it)", entry.link, entry, None)
        if entry.event == "exit":
            process.exit(data.get("code"), data.get("stderr") or ())
        elif "frame" in data:
            frame = self.matcher.substitute(data["frame"])
            process.stdout.feed((json.dumps(frame, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace"))

    def _feed_mcp(self, entry: Entry) -> None:
        """A tools/list or tools/call the agent made: through the session's real tools
        handlers (the MCP transport, the SDK's, is not replayed)."""
        import mcp_types

        session = entry.link.split(":", 1)[1]
        history = self.server.history
        actor = history.actors.get(session) if history is not None else None
        bridge = getattr(actor, "bridge", None)
        if bridge is None:
            raise self._report("the session has no VS Code tools server", entry.link, entry, None)
        frame = self.matcher.substitute(entry.data.get("frame") or {})
        method, rid, params = frame.get("method"), frame.get("id"), frame.get("params")
        if method == "tools/call":
            parsed: Any
            handle, parsed = bridge._call_tool, mcp_types.CallToolRequestParams.model_validate(params)
        elif method == "tools/list":
            handle, parsed = bridge._list_tools, (mcp_types.PaginatedRequestParams.model_validate(params) if params is not None else None)
        else:
            raise self._report(f"cannot replay MCP method {method!r}", entry.link, entry, None)
        context = self._mcp_contexts.setdefault(entry.link, _McpContext(_McpSession(self, entry.link)))

        async def call() -> None:
            try:
                result = await handle(context, parsed)
            except Exception as exc:
                self.output(entry.link, {"jsonrpc": "2.0", "id": rid, "error": {"message": str(exc)}})
                return
            self.output(entry.link, {"jsonrpc": "2.0", "id": rid, "result": _dump(result)})

        self._tg.start_soon(call)

    # -- what the daemon does

    def _stdout(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            if line.strip():
                try:
                    frame: Any = json.loads(line)
                except ValueError:
                    frame = {"raw": line.decode("utf-8", "replace")}
                self.output("shim", frame)

    async def spawn(
        self, name: str, command: str, args: Sequence[str], env: Any, cwd: str | None, events: Any, session: str | None = None, recorder: Any = None
    ) -> Any:
        """The daemon's launcher (``server.Config.launcher``): a played-back agent for this recording."""
        from lmbridge.acp.connection import AgentExited

        link = f"agent:{session or name}"
        expected = self.expected.get(link)
        done = len(self.actual[link].items) if link in self.actual else 0
        recorded = expected.items[done].value if expected is not None and done < len(expected.items) else {}
        event: dict[str, Any] = {"event": "spawn", "agent": name, "command": [command, *args], "env": dict(env), "cwd": cwd}
        if isinstance(recorded, dict) and recorded.get("event") == "spawn" and "error" in recorded:
            event["error"] = recorded["error"]
        self.output(link, event)
        if "error" in event:
            raise AgentExited(str(event["error"]))
        process = FakeProcess(self, link)
        self.processes[link] = process
        return _connection_class()(name, process, events)

    def output(self, link: str, value: Any) -> None:
        """Something the daemon sent (or did) on a link."""
        self.actual.setdefault(link, Stream()).add(value)
        self._progress.set()
        if self.divergence is None:
            try:
                self._verify(link)
            except Divergence as exc:
                self.divergence = exc

    # -- comparing

    def _verify(self, link: str) -> None:
        actual = self.actual[link].items
        expected = self.expected.get(link, Stream()).items
        j = self.verified.get(link, 0)
        while j < len(actual):
            a = actual[j]
            if j >= len(expected):
                raise self._report("the daemon sent more than the recording has on this link", link, None, a, index=j)
            e = expected[j]
            last = j == len(actual) - 1
            if a.kind == "run" or e.kind == "run":
                if a.kind != e.kind or a.key != e.key:
                    raise self._report("the daemon sent a different frame", link, e, a, index=j)
                if last:  # more text may still come
                    if not e.text.startswith(a.text):
                        raise self._text_report(link, e, a, j)
                    break
                if a.text != e.text:
                    raise self._text_report(link, e, a, j)
            else:
                diff = self.matcher.match(e.value, a.value)
                if diff is not None:
                    raise self._report("the daemon sent a different frame", link, e, a, index=j, diff=diff)
            j += 1
            self.verified[link] = j

    def _satisfied(self, link: str, mark: tuple[int, int | None]) -> bool:
        n, chars = mark
        if n == 0:
            return True
        verified = self.verified.get(link, 0)
        if verified >= n:
            return True
        actual = self.actual.get(link)
        if chars is None or actual is None or verified < n - 1 or len(actual.items) < n:
            return False
        item = actual.items[n - 1]
        return item.kind == "run" and len(item.text) >= chars

    async def _wait(self, marks: dict[str, tuple[int, int | None]], timeout: float, before: Entry | None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._check()
            pending = [link for link, mark in marks.items() if not self._satisfied(link, mark)]
            if not pending:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                link = pending[0]
                j = self.verified.get(link, 0)
                expected = self.expected[link].items[j]
                actual = self.actual.get(link, Stream()).items
                got = actual[j] if j < len(actual) else None
                when = f"before the input at line {before.line} was fed" if before else "by the end of the recording"
                raise self._report(f"expected output not produced within {timeout:.1f} s ({when})", link, expected, got, index=j, missing=True)
            self._progress = anyio.Event()
            with anyio.move_on_after(min(remaining, 0.5)):
                await self._progress.wait()

    def _check(self, final: bool = False) -> None:
        if self.divergence is not None:
            raise self.divergence
        if not final:
            return
        for link, stream in self.expected.items():
            actual = self.actual.get(link, Stream()).items
            verified = self.verified.get(link, 0)
            if verified < len(stream.items):
                e = stream.items[verified]
                a = actual[verified] if verified < len(actual) else None
                if a is not None and a.kind == "run" and e.kind == "run" and a.text != e.text:
                    raise self._text_report(link, e, a, verified)
                raise self._report("expected output not produced (the daemon exited)", link, e, a, index=verified, missing=True)
        for link in self.actual:
            if link not in self.expected:
                raise self._report("the daemon used a link the recording does not have", link, None, self.actual[link].items[0], index=0)

    # -- reports

    def _where(self, link: str, item: Item | None, index: int, offset: int = 0) -> str:
        direction = "daemon → shim" if link == "shim" else "daemon → agent" if link.startswith("agent:") else "tools server → agent"
        if item is None:
            stream = self.expected.get(link)
            after = stream.items[-1].sources[-1][0] if stream and stream.items else None
            return f"link {link} ({direction}), after the last recorded output" + (f" (line {after})" if after else "")
        line, number, _ = item.sources[0]
        for source in item.sources:
            if source[2] <= offset:
                line, number, _ = source
        return f"link {link} ({direction}), output #{number} of this link, recorded at line {line}"

    def _report(
        self,
        what: str,
        link: str,
        expected: Item | Entry | None,
        actual: Item | None,
        index: int = 0,
        diff: tuple[str, Any, Any] | None = None,
        missing: bool = False,
    ) -> Divergence:
        out = [f"DIVERGENCE in {self.recording.path}: {what}"]
        if isinstance(expected, Entry):
            out.append(f"  link {link}, input at line {expected.line}")
            out.append(f"  input:    {_short(expected.value())}")
            return Divergence("\n".join(out))
        out.append("  " + self._where(link, expected, index))
        if diff is not None:
            path, e, a = diff
            out.append(f"  at {path}:")
            out.append(f"    expected: {_short(e)}")
            out.append(f"    got:      {_short(a)}")
        if expected is not None:
            out.append(f"  expected: {_short(_shown(expected))}")
        if actual is not None or missing:
            out.append(f"  got:      {_short(_shown(actual)) if actual is not None else 'nothing'}")
        return Divergence("\n".join(out))

    def _text_report(self, link: str, expected: Item, actual: Item, index: int) -> Divergence:
        e, a = expected.text, actual.text
        at = next((i for i, (x, y) in enumerate(zip(e, a)) if x != y), min(len(e), len(a)))
        start = max(0, at - 40)
        request = json.loads(expected.key[0])
        kind = expected.value["params"]["part"]["type"]
        out = [
            f"DIVERGENCE in {self.recording.path}: different {kind} in the response to request {request!r}",
            "  " + self._where(link, expected, index, at),
            f"  the {kind} stream (parts joined) differs at character {at}:",
            f"    expected: {_excerpt(e, start, at)}",
            f"    got:      {_excerpt(a, start, at)}",
        ]
        if len(a) < len(e) and e.startswith(a):
            out.append("    (the daemon's text stops there)")
        return Divergence("\n".join(out))


def _shown(item: Item) -> Any:
    if item.kind == "run":
        frame = json.loads(json.dumps(item.value))
        frame["params"]["part"]["value"] = item.text
        return frame
    return item.value


def _short(value: Any, limit: int = 600) -> str:
    text = value if isinstance(value, str) and value.startswith("<") and value.endswith(">") else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def _excerpt(text: str, start: int, at: int) -> str:
    shown = json.dumps(text[start : at + 40], ensure_ascii=False)
    return ("…" if start else "") + shown + ("…" if len(text) > at + 40 else "")


async def _settle(rounds: int = 500) -> None:
    """Let the daemon run until every task waits on something (or ``rounds`` passes):
    each input is handled before the next is fed."""
    loop = asyncio.get_running_loop()
    this = asyncio.current_task()
    for _ in range(rounds):
        await asyncio.sleep(0)
        if getattr(loop, "_ready", None):
            continue
        busy = False
        for task in asyncio.all_tasks(loop):
            if task is this:
                continue
            waiter = getattr(task, "_fut_waiter", None)
            if waiter is None or waiter.done():
                busy = True
                break
        if not busy:
            return


# ---------------------------------------------------------------- entry points


async def replay(path: str | Path, realtime: bool = False, timeout: float = DEFAULT_TIMEOUT) -> Result:
    """Replay one recording; raises ``Divergence`` or ``RecordingError``."""
    return await Player(load(path), realtime, timeout).run()


def main(files: Sequence[str | Path], realtime: bool = False, timeout: float = DEFAULT_TIMEOUT, out: Any = None) -> int:
    """``lmbridge replay``: 0 when every recording replays, 1 on a divergence, 2 on a bad file."""
    out = out or sys.stdout
    status = 0
    for path in files:
        try:
            result = anyio.run(replay, path, realtime, timeout, backend="asyncio")
        except RecordingError as exc:
            print(f"error: {exc}", file=out)
            status = max(status, 2)
            continue
        except Divergence as exc:
            print(str(exc), file=out)
            status = max(status, 1)
            continue
        print(f"ok  {path}  ({result.entries} frames; {result.seconds:.2f} s, recorded {result.recorded_seconds:.2f} s)", file=out)
    return status


def iter_files(paths: Sequence[str | Path]) -> Iterator[Path]:
    """Files given, with directories expanded to their ``*.jsonl`` recordings."""
    for path in map(Path, paths):
        if path.is_dir():
            yield from sorted(path.glob("*.jsonl"))
        else:
            yield path
