"""``lmbridge replay FILE...``: recorded sessions re-run through the real daemon.

The recording's shim frames are fed to a real daemon, ``lmbridge serve`` run as a
subprocess, through its stdio alone; every agent it starts is a stand-in process
(``standin.py``, which the daemon's agent launcher, ``--agent-launcher``, has it start in
the agent's place) that plays the recorded agent back; the VS Code tools are reached
through the stdio relay the daemon offers agents. Walking the recording in order, each
input (shim → daemon, agent → daemon, an agent's exit, an agent's tools request) is fed
only once the daemon has produced every output recorded before it, on every link, each
link compared in its own order; after each input the player waits for the daemon's
answer to ``debug/idle`` (it handled the input as far as it can). Nothing reads the
daemon's state. What is legitimately nondeterministic is normalised (docs/replay.md):
callIds and approval tokens are bound on first sight (recorded ↔ actual) and the actual
values are substituted into later inputs; temp dirs, ports, the working directory, the
Python executable and lmbridge's version are normalised; response text is compared as
each request's concatenated text stream (the daemon merges consecutive text parts when
they queue up, so part boundaries may differ).

The first divergence raises ``Divergence`` with a readable report.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream
from anyio.streams.buffered import BufferedByteReceiveStream

from lmbridge import __version__
from lmbridge.rpc.record import FORMAT, HEADER_KEY, _dump, walk_strings

DEFAULT_TIMEOUT = 10.0  # seconds an expected output may take, beyond the recorded gap
SHUTDOWN_TIMEOUT = 15.0  # seconds for the daemon to exit after the recording's last input
TERM_GRACE = 2.0

CALL_ID = r"lmbridge-[A-Za-z0-9_.-]*?-[0-9a-f]{12}"
BINDABLE = re.compile(rf"<redacted:approval-token:\d+>|\b{CALL_ID}\b")
PORT = re.compile(r"\b(127\.0\.0\.1|localhost|\[::1\]):\d{2,5}\b")
MERGEABLE = ("text", "thinking")
IDLE_ID = "replay-idle-"  # the ids of the player's debug/idle requests (a recording's are the shim's)


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
        if entry.link == "shim" and entry.dir == "out" and _is_data_part(entry.data.get("frame")):
            continue  # an answer's stateful_marker and usage parts: not compared (_is_data_part)
        entries.append(entry)
    return Recording(path, header, entries)


def _is_data_part(frame: Any) -> bool:
    """An ``lm/responsePart`` of a data part (an answer's ``stateful_marker`` and ``usage``,
    docs/protocol.md "Shapes"): left out of the comparison on both sides, for the marker
    is MAC'd under each daemon's own random key, and recordings made before markers have none."""
    params = frame.get("params") if isinstance(frame, dict) and frame.get("method") == "lm/responsePart" else None
    part = params.get("part") if isinstance(params, dict) else None
    return isinstance(part, dict) and part.get("type") == "data"


def _is_notice(data: dict[str, Any]) -> bool:
    from lmbridge.core.cap import is_waiting_notice
    from lmbridge.core.present import is_start_notice

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


# ---------------------------------------------------------------- the played-back agents and tools relays

STANDIN = Path(__file__).with_name("standin.py")  # run as a script: no package import, a fast start


class _StandIn:
    """The player's end of one stand-in agent process (``standin.py``): what the daemon
    writes to the agent comes in as outputs of ``link``; recorded agent output and the
    agent's exit go out to it."""

    def __init__(self, player: Player, link: str, stream: anyio.abc.SocketStream) -> None:
        self.player, self.link, self.stream = player, link, stream
        self.sent = self.acked = 0
        self.exited = False
        self._acks = anyio.Event()

    async def read(self, lines: Any) -> None:
        async for raw in lines:
            message = json.loads(raw)
            if "in" in message:
                try:
                    frame: Any = json.loads(message["in"])
                except ValueError:
                    frame = {"raw": message["in"]}
                self.player.output(self.link, frame)
            elif "ack" in message:
                self.acked = int(message["ack"])
                self._acks.set()
            elif message.get("eof") and not self.exited:
                self.player.output(self.link, {"event": "close"})
        self.exited = True  # the process is gone: nothing more will be acknowledged
        self._acks.set()

    async def tell(self, message: dict[str, Any]) -> None:
        try:
            await self.stream.send((json.dumps(message) + "\n").encode())
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.exited = True

    async def print(self, line: str) -> None:
        """Have the agent print ``line``; returns once it did (or is gone)."""
        self.sent += 1
        await self.tell({"out": line})
        with anyio.move_on_after(self.player.timeout):  # a daemon that does not read: the waits report it
            while self.acked < self.sent and not self.exited:
                self._acks = anyio.Event()
                await self._acks.wait()

    async def exit(self, code: int | None, stderr: Sequence[str]) -> None:
        if not self.exited:
            self.exited = True
            await self.tell({"exit": code if code is not None else 0, "stderr": list(stderr)})


class _Relay:
    """The VS Code tools of one session reached as an agent reaches them: the stdio relay
    (``lmbridge mcp-stdio``) the daemon offered in ``session/new``, started by the player;
    every frame it returns (answers, ``notifications/tools/list_changed``) is an output of
    ``link``."""

    INIT_ID = "replay-initialize"

    def __init__(self, player: Player, link: str, server: dict[str, Any]) -> None:
        self.player, self.link, self.server = player, link, server
        self.process: Any = None
        self.methods: dict[str, str] = {}  # request id (as JSON) → method, for the answers
        self._initialized = anyio.Event()

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        env = {**os.environ, **{e["name"]: e["value"] for e in self.server.get("env") or () if isinstance(e, dict)}}
        self.process = await anyio.open_process([self.server["command"], *self.server.get("args", [])], env=env, stderr=None)
        tg.start_soon(self._read)
        from mcp.types import LATEST_PROTOCOL_VERSION  # the latest: its results carry every field the handlers return

        await self.send({"jsonrpc": "2.0", "id": self.INIT_ID, "method": "initialize", "params": {
            "protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "lmbridge-replay", "version": __version__}}})  # fmt: skip
        with anyio.fail_after(self.player.timeout):
            await self._initialized.wait()
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def send(self, frame: Any) -> None:
        if isinstance(frame, dict) and "id" in frame and isinstance(frame.get("method"), str):
            self.methods[json.dumps(frame["id"])] = frame["method"]
        await self.process.stdin.send((json.dumps(frame, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace"))

    async def _read(self) -> None:
        async for line in _read_lines(self.process.stdout):
            try:
                frame: Any = json.loads(line)
            except ValueError:
                frame = {"raw": line.decode("utf-8", "replace")}
            if isinstance(frame, dict) and frame.get("id") == self.INIT_ID:
                self._initialized.set()
            else:
                self.player.output(self.link, self._typed(frame))

    def _typed(self, frame: Any) -> Any:
        """A result as the MCP types read it, as a recording holds it (``record._dump``): the
        wire leaves out fields at their defaults, the typed result has them all."""
        import mcp_types

        if not isinstance(frame, dict) or not isinstance(frame.get("result"), dict):
            return frame
        method = self.methods.get(json.dumps(frame.get("id")), "")
        model: Any = {"tools/list": mcp_types.ListToolsResult, "tools/call": mcp_types.CallToolResult}.get(method)
        if model is None:
            return frame
        try:
            return {**frame, "result": _dump(model.model_validate(frame["result"]))}
        except ValueError:
            return frame  # compared as it came

    async def close(self) -> None:
        if self.process is not None and self.process.returncode is None:
            await self.process.stdin.aclose()
            with anyio.move_on_after(TERM_GRACE):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()


# ---------------------------------------------------------------- the player


@dataclass
class Result:
    path: Path
    entries: int
    seconds: float
    recorded_seconds: float


class Player:
    """Replays one recording through ``lmbridge serve`` run as a subprocess (its logs at
    ``log_level`` on this process's stderr)."""

    def __init__(self, recording: Recording, realtime: bool = False, timeout: float = DEFAULT_TIMEOUT, log_level: str = "error") -> None:
        self.recording = recording
        self.realtime = realtime
        self.timeout = timeout
        self.log_level = log_level
        self.matcher = Matcher(recording.header)
        self.expected: dict[str, Stream] = {}
        self.actual: dict[str, Stream] = {}
        self.verified: dict[str, int] = {}
        self.standins: dict[str, _StandIn] = {}  # by link: the agents the daemon started
        self.relays: dict[str, _Relay] = {}  # by link (mcp:<session>)
        self.divergence: Divergence | None = None
        self._tg: Any = None
        self._socket = ""  # where stand-ins reach the player
        self._idle_answers: dict[str, anyio.Event] = {}
        self._idle_count = 0
        self._shim_closed = False
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

    def _command(self, config_file: str) -> list[str]:
        """``lmbridge serve`` as the recording's daemon ran: its agents and idle timeout (the
        header's ``config``), no state, no pre-warming or spare sessions, the default session
        cap, ``debug/idle`` answered, and every agent started through this player's
        stand-ins (``--agent-launcher``)."""
        from lmbridge.core.cap import SESSION_WAIT

        launcher = shlex.join([sys.executable, str(STANDIN), "--launch", self._socket])
        return [
            sys.executable, "-m", "lmbridge", "serve", "--config", config_file, "--no-state", "--no-prewarm", "--no-spare-session",
            "--max-agent-processes", "4", "--session-wait", repr(SESSION_WAIT), "--debug-idle", "--log-level", self.log_level,
            "--agent-launcher", launcher,
        ]  # fmt: skip

    async def run(self) -> Result:
        config = self.recording.header.get("config") or {}
        started = time.monotonic()
        served = anyio.Event()
        failure: Divergence | None = None
        with tempfile.TemporaryDirectory(prefix="lmbridge-replay-") as scratch:
            self._socket = os.path.join(scratch, "player.sock")
            config_file = os.path.join(scratch, "config.json")
            with open(config_file, "w", encoding="utf-8") as f:
                json.dump({"agents": config.get("agents") or [], "idleTimeout": float(config.get("idleTimeout") or 1800.0)}, f)
            listener = await anyio.create_unix_listener(self._socket)
            # No "Starting <agent>…" notice: a wall-clock artefact is not part of a recording.
            env = {**os.environ, "LMBRIDGE_START_NOTICE": "inf"}
            daemon = await anyio.open_process(self._command(config_file), env=env, stderr=None)
            assert daemon.stdin is not None and daemon.stdout is not None
            exit_code: int | None = None
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(listener.serve, self._accept)

                async def write() -> None:
                    stdin = daemon.stdin
                    assert stdin is not None
                    try:
                        async with self._lines_receive:
                            async for data in self._lines_receive:
                                await stdin.send(data)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        pass  # the daemon is gone: what it did is compared
                    finally:
                        with anyio.CancelScope(shield=True):
                            await stdin.aclose()  # EOF: the daemon shuts down

                async def serve() -> None:
                    nonlocal exit_code
                    stdout = daemon.stdout
                    assert stdout is not None
                    try:
                        async for line in _read_lines(stdout):
                            self._stdout(line)
                        exit_code = await daemon.wait()
                    finally:
                        served.set()
                        for answered in self._idle_answers.values():
                            answered.set()

                tg.start_soon(write)
                tg.start_soon(serve)
                try:
                    for index, (entry, marks, gap) in enumerate(self.steps):
                        await self._wait(marks, self.timeout + gap, entry)
                        if self.realtime:
                            delay = started + entry.t - time.monotonic()
                            if delay > 0:
                                await anyio.sleep(delay)
                        await self._feed(entry)
                        following = self.steps[index + 1] if index + 1 < len(self.steps) else None
                        # An agent's inputs with no output recorded between them go together, as
                        # the agent sent them (two tool calls at once meet the same gather window).
                        if following is None or entry.link == "shim" or following[0].link != entry.link or following[1] != marks:
                            await self._idle()
                        self._check()
                    final = {link: stream.mark() for link, stream in self.expected.items()}
                    await self._wait(final, self.timeout, None)
                    with anyio.move_on_after(SHUTDOWN_TIMEOUT):
                        await served.wait()
                    self._check(final=True)
                    if not served.is_set():
                        raise Divergence(f"DIVERGENCE in {self.recording.path}: the daemon did not exit within {SHUTDOWN_TIMEOUT:.0f} s of the recording's end")
                    if exit_code != 0:
                        raise Divergence(f"DIVERGENCE in {self.recording.path}: the daemon exited with code {exit_code} (its log is above)")
                except Divergence as exc:
                    failure = exc
                finally:
                    self._lines_send.close()
                    with anyio.CancelScope(shield=True):
                        for relay in self.relays.values():
                            await relay.close()
                        await _stop(daemon)
                    tg.cancel_scope.cancel()
        if failure is not None:
            raise failure
        entries = self.recording.entries
        return Result(self.recording.path, len(entries), time.monotonic() - started, entries[-1].t if entries else 0.0)

    async def _idle(self) -> None:
        """Wait (bounded) until the daemon answers ``debug/idle``: it handled the input
        just fed as far as it can before the next one (docs/replay.md)."""
        if self._shim_closed:
            return
        self._idle_count += 1
        rid = f"{IDLE_ID}{self._idle_count}"
        answered = self._idle_answers[rid] = anyio.Event()
        self._lines_send.send_nowait((json.dumps({"jsonrpc": "2.0", "id": rid, "method": "debug/idle"}) + "\n").encode())
        with anyio.move_on_after(self.timeout):
            await answered.wait()
        self._idle_answers.pop(rid, None)

    async def _feed(self, entry: Entry) -> None:
        data = entry.data
        if entry.link == "shim":
            if entry.event == "eof":
                self._shim_closed = True
                self._lines_send.close()
            elif "raw" in data:
                self._lines_send.send_nowait((str(data["raw"]) + "\n").encode())
            else:
                frame = self.matcher.substitute(data.get("frame"))
                self._lines_send.send_nowait((json.dumps(frame, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace"))
            return
        if entry.link.startswith("mcp:"):
            await self._feed_mcp(entry)
            return
        standin = self.standins.get(entry.link)
        if standin is None:
            raise self._report("no agent is running on this link (the daemon never spawned it)", entry.link, entry, None)
        if entry.event == "exit":
            await standin.exit(data.get("code"), data.get("stderr") or ())
        elif "frame" in data:
            await standin.print(json.dumps(self.matcher.substitute(data["frame"]), ensure_ascii=False))

    async def _feed_mcp(self, entry: Entry) -> None:
        """A request the agent made of the VS Code tools server: sent through the stdio
        relay the daemon offered that session's agent, as the agent sent it."""
        relay = self.relays.get(entry.link)
        if relay is None:
            server = self._tools_server(entry.link.split(":", 1)[1])
            if server is None:
                raise self._report("the daemon offered this session no VS Code tools server over stdio", entry.link, entry, None)
            relay = self.relays[entry.link] = _Relay(self, entry.link, server)
            await relay.start(self._tg)
        await relay.send(self.matcher.substitute(entry.data.get("frame") or {}))

    def _tools_server(self, session: str) -> dict[str, Any] | None:
        """The stdio MCP server entry for ``session``'s tools in the last ``session/new``,
        ``session/load`` or ``session/resume`` the daemon sent an agent, else None."""
        for link, stream in self.actual.items():
            if not link.startswith("agent:"):
                continue
            for item in reversed(stream.items):
                frame = item.value
                if not isinstance(frame, dict) or frame.get("method") not in ("session/new", "session/load", "session/resume"):
                    continue
                for server in (frame.get("params") or {}).get("mcpServers") or ():
                    args = server.get("args") if isinstance(server, dict) else None
                    if isinstance(args, list) and "command" in server and any(a == "--session" and b == session for a, b in zip(args, args[1:])):
                        return dict(server)
        return None

    async def _accept(self, stream: anyio.abc.SocketStream) -> None:
        """The daemon's agent launcher asking how to start an agent (``{"spawn": ...}``), or
        a stand-in agent connecting (its first line names its link)."""
        lines = _read_lines(stream)
        try:
            first = json.loads(await lines.__anext__())
        except (StopAsyncIteration, ValueError):
            return
        if isinstance(first, dict) and isinstance(first.get("spawn"), dict):
            error = self._spawn(first["spawn"])
            with anyio.move_on_after(self.timeout):
                await stream.send((json.dumps({"error": error} if error is not None else {"start": True}) + "\n").encode())
            return
        hello = first.get("hello") if isinstance(first, dict) else None
        if not isinstance(hello, str):
            return
        standin = self.standins[hello] = _StandIn(self, hello, stream)
        await standin.read(lines)

    # -- what the daemon does

    def _stdout(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            if line.strip():
                try:
                    frame: Any = json.loads(line)
                except ValueError:
                    frame = {"raw": line.decode("utf-8", "replace")}
                rid = frame.get("id") if isinstance(frame, dict) else None
                if isinstance(rid, str) and rid.startswith(IDLE_ID):  # the player's own request, not the recording's
                    if rid in self._idle_answers:
                        self._idle_answers[rid].set()
                    continue
                self.output("shim", frame)

    def _spawn(self, spawn: dict[str, Any]) -> str | None:
        """The daemon starts an agent (``spawn``: the process it would start, as its launcher
        is told it, ``acp.launcher.spawn_description``): that is an output of the agent's
        link; it fails with the recorded error when the recorded start failed (returned),
        else a stand-in is started in the agent's place (None)."""
        link = str(spawn.get("link"))
        expected = self.expected.get(link)
        done = len(self.actual[link].items) if link in self.actual else 0
        recorded = expected.items[done].value if expected is not None and done < len(expected.items) else {}
        event: dict[str, Any] = {"event": "spawn", **{key: spawn.get(key) for key in ("agent", "command", "env", "cwd")}}
        if isinstance(recorded, dict) and recorded.get("event") == "spawn" and "error" in recorded:
            event["error"] = recorded["error"]
        self.output(link, event)
        return str(event["error"]) if "error" in event else None

    def output(self, link: str, value: Any) -> None:
        """Something the daemon sent (or did) on a link."""
        if link == "shim" and _is_data_part(value):
            return  # not compared (_is_data_part)
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


async def _stop(process: Any) -> None:
    """End ``process`` if it still runs (the daemon after a divergence): SIGTERM (it shuts
    down as at EOF, stopping its agents), then SIGKILL after ``TERM_GRACE`` seconds."""
    if process.returncode is None:
        with anyio.move_on_after(TERM_GRACE):
            await process.wait()
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(SHUTDOWN_TIMEOUT):
            await process.wait()
    if process.returncode is None:
        process.kill()
    await process.aclose()


async def _read_lines(stream: ByteReceiveStream) -> AsyncIterator[bytes]:
    """The lines of ``stream`` (without their newline) until it ends."""
    buffered = BufferedByteReceiveStream(stream)
    while True:
        try:
            yield await buffered.receive_until(b"\n", 1 << 30)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return


# ---------------------------------------------------------------- entry points


async def replay(path: str | Path, realtime: bool = False, timeout: float = DEFAULT_TIMEOUT, log_level: str = "error") -> Result:
    """Replay one recording (the daemon's logs at ``log_level`` on stderr); raises
    ``Divergence`` or ``RecordingError``."""
    return await Player(load(path), realtime, timeout, log_level).run()


def main(files: Sequence[str | Path], realtime: bool = False, timeout: float = DEFAULT_TIMEOUT, out: Any = None, log_level: str = "error") -> int:
    """``lmbridge replay``: 0 when every recording replays, 1 on a divergence, 2 on a bad file."""
    out = out or sys.stdout
    status = 0
    for path in files:
        try:
            result = anyio.run(replay, path, realtime, timeout, log_level, backend="asyncio")
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
