"""``terminal/*`` served to agents: commands lmbridge runs for them (ACP "Terminals").

An agent offered ``clientCapabilities.terminal: true`` may run a command through the client
instead of on its own: ``terminal/create`` starts it and answers a ``terminalId`` at once;
``terminal/output`` answers what it printed so far (``{output, truncated, exitStatus?}``);
``terminal/wait_for_exit`` waits for its end (``{exitCode, signal}``); ``terminal/kill``
ends it and keeps its output; ``terminal/release`` ends it and forgets it.

Here (docs/agents.md, docs/protocol.md "Terminals"):

* Whether a command may run at all (one a card the user approved showed) is decided by the
  permission rule (``core.permissions.permit``), which the session actor asks before it calls
  ``Terminals.handle`` for a ``terminal/create`` (docs/agents.md, "What protects what").

* The command runs in the workspace: the session's cwd, or the ``cwd`` it names (a relative
  one taken from the session's cwd) if that lies in one of the workspace folders
  (``core.paths.working_folder``, the rule of the files; any folder of a multi-root
  workspace; anything else refused), ``command`` with ``args`` as given (no shell), ``env`` added to the daemon's, stdout
  and stderr as one stream, in its own process group (a kill ends what it started too).
* Its output is kept bounded: at most ``outputByteLimit`` bytes (the agent's, capped at
  ``OUTPUT_LIMIT``), cut from the start at a character boundary (``truncated``). Each chunk
  also goes to ``on_output`` (the session actor streams it into the chat: ``core.present``'s
  ``TERMINAL_UPDATE``) and, where the shim mirrors terminals, to a VS Code terminal
  (``Mirror``: ``client/terminal/open``/``output``/``exit``).
* Every terminal dies with its session (``aclose``), with the daemon (``TerminalHost.aclose``;
  a daemon killed with SIGKILL or crashed: ``acp.watchdog``), when the user closes its VS Code terminal (``killed``), and a
  session holds at most ``MAX_TERMINALS`` at once (a never-released terminal cannot pile up).

Requests name a terminal of their own session only: another session's id is unknown here.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import Process, TaskGroup

from lmbridge.acp import files, watchdog
from lmbridge.core import errors, paths
from lmbridge.core.errors import INVALID_PARAMS, METHOD_NOT_FOUND, REFUSED, RESOURCE_NOT_FOUND
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from lmbridge.rpc.channel import ClientChannel

log = get_logger("terminals")

#: Bytes of a terminal's output kept at most, whatever ``outputByteLimit`` asks (or none).
OUTPUT_LIMIT = 1 << 20
#: Terminals one session may hold at once (not released); past it ``terminal/create`` is refused.
MAX_TERMINALS = 16
#: The client methods served here (ACP "Terminals"); any other ``terminal/…`` is an unknown method.
METHODS = frozenset({"terminal/create", "terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"})
#: Seconds between SIGTERM and SIGKILL when a terminal is killed.
KILL_GRACE = 2.0
READ_SIZE = 64 * 1024
#: Seconds the output may take to end once the command has exited.
EXIT_GRACE = 0.5

NOT_FOUND = RESOURCE_NOT_FOUND  # an unknown terminalId


class TerminalError(Exception):
    """A ``terminal/*`` request that cannot be served: answered with ``code`` and the message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code

    def error(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self)}


class Mirror(Protocol):
    """Where terminals are shown besides the chat: the shim's VS Code terminals
    (docs/protocol.md, ``client/terminal/*``). Each call must not block for long."""

    async def open(self, terminal_id: str, title: str, cwd: str) -> None: ...
    def output(self, terminal_id: str, data: str) -> None: ...
    def exit(self, terminal_id: str, exit_code: int | None, signal: str | None) -> None: ...


@dataclass
class Terminal:
    """One command run for the agent. ``output``: its last ``limit`` bytes (decoded as
    they came); ``truncated``: some were cut from the start."""

    id: str
    command: str
    process: Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    exit_code: int | None = None
    signal: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    def keep(self, data: bytes) -> None:
        self.output += data
        if len(self.output) > self.limit:
            cut = len(self.output) - self.limit
            while cut < len(self.output) and (self.output[cut] & 0xC0) == 0x80:  # a character boundary
                cut += 1
            del self.output[:cut]
            self.truncated = True

    def status(self) -> dict[str, Any] | None:
        if not self.done.is_set():
            return None
        return {"exitCode": self.exit_code, "signal": self.signal}


#: Bytes of one terminal's output mirrored in VS Code at most (past it a last line says so):
#: a command printing without end must not flood the shim's pipe, which chats share.
MIRROR_LIMIT = 4 << 20
#: Seconds the shim may take to open a VS Code terminal.
OPEN_TIMEOUT = 10.0


class ClientMirror:
    """``Mirror`` over the daemon → shim channel (``rpc.channel.ClientChannel``), where the
    shim says it serves ``terminal`` (docs/protocol.md, "client/terminal/*"): a
    ``client/terminal/open`` request, then ``client/terminal/output`` and
    ``client/terminal/exit`` notifications, for the terminals it opened only. Output is
    mirrored up to ``MIRROR_LIMIT`` bytes a terminal."""

    def __init__(self, channel: ClientChannel) -> None:
        self.channel = channel
        self.sent: dict[str, int] = {}  # terminal id → bytes of output mirrored

    async def open(self, terminal_id: str, title: str, cwd: str) -> None:
        if not self.channel.offers("terminal"):
            return
        await self.channel.request("client/terminal/open", {"terminalId": terminal_id, "title": title, "cwd": cwd}, OPEN_TIMEOUT)
        self.sent[terminal_id] = 0

    def output(self, terminal_id: str, data: str) -> None:
        sent = self.sent.get(terminal_id)
        if sent is None or sent >= MIRROR_LIMIT:
            return
        size = len(data.encode("utf-8", "surrogatepass"))
        if sent + size > MIRROR_LIMIT:
            data = data.encode("utf-8", "surrogatepass")[: MIRROR_LIMIT - sent].decode("utf-8", "ignore")
            data += f"\n[… lmbridge mirrors at most {MIRROR_LIMIT >> 20} MiB of a command's output; the rest is left out here]\n"
            size = MIRROR_LIMIT - sent
        self.sent[terminal_id] = sent + size
        self.channel.notify("client/terminal/output", {"terminalId": terminal_id, "data": data})

    def exit(self, terminal_id: str, exit_code: int | None, signal: str | None) -> None:
        if self.sent.pop(terminal_id, None) is not None:
            self.channel.notify("client/terminal/exit", {"terminalId": terminal_id, "exitCode": exit_code, "signal": signal})


class TerminalHost:
    """The daemon's terminals: ids, the VS Code mirror (when the shim serves it), and the
    kill of every one at the daemon's end. One per daemon; each session actor gets its
    ``Terminals`` from ``session``."""

    def __init__(self, mirror: Mirror | None = None) -> None:
        self.mirror = mirror
        self._ids = itertools.count(1)
        self.sessions: set[Terminals] = set()

    def new_id(self) -> str:
        return f"term-{next(self._ids)}"

    def session(
        self, cwd: str | None, on_output: Callable[[dict[str, Any]], None], tg: TaskGroup, folders: Callable[[], Sequence[str]] | None = None,
    ) -> Terminals:
        """The terminals of one session: run in ``cwd``, or a ``cwd`` the agent names inside
        one of the workspace ``folders`` (read at each ``terminal/create``; None: ``cwd``
        alone); ``on_output`` gets each ``core.present.TERMINAL_UPDATE`` (output and exit);
        their tasks run in ``tg``."""
        terminals = Terminals(self, cwd, on_output, tg, folders)
        self.sessions.add(terminals)
        return terminals

    def killed(self, terminal_id: str) -> None:
        """The user closed the terminal's VS Code mirror (``$/terminalKilled``): it is killed;
        the agent sees it exit as any killed command."""
        for terminals in self.sessions:
            terminal = terminals.terminals.get(terminal_id)
            if terminal is not None:
                log.info("terminal closed by the user: killed", terminal=terminal_id)
                terminals.tg.start_soon(terminals.stop, terminal)
                return

    async def aclose(self) -> None:
        """Kill every terminal (the daemon is ending); bounded by ``KILL_GRACE``."""
        with anyio.CancelScope(shield=True):
            for terminals in list(self.sessions):
                await terminals.aclose()


class Terminals:
    """The terminals of one ACP session (``TerminalHost.session``): ``handle`` serves one
    ``terminal/*`` request; ``aclose`` kills them all (the session ended)."""

    def __init__(
        self, host: TerminalHost, cwd: str | None, on_output: Callable[[dict[str, Any]], None], tg: TaskGroup, folders: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.host = host
        self.cwd = cwd or os.getcwd()
        self.folders = folders or (lambda: [self.cwd])
        self.on_output = on_output
        self.tg = tg
        self.terminals: dict[str, Terminal] = {}
        self.closed = False

    async def handle(self, method: str, params: Any) -> Any:
        """The result of ``terminal/<method>`` with ``params``; raises ``TerminalError``."""
        if not isinstance(params, Mapping):
            raise TerminalError(INVALID_PARAMS, f"{method}: params must be an object")
        if method == "terminal/create":
            return await self.create(params)
        terminal_id = params.get("terminalId")
        terminal = self.terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None:
            raise TerminalError(NOT_FOUND, f"{method}: no terminal {terminal_id!r} in this session")
        if method == "terminal/output":
            out: dict[str, Any] = {"output": terminal.output.decode("utf-8", "replace"), "truncated": terminal.truncated}
            status = terminal.status()
            if status is not None:
                out["exitStatus"] = status
            return out
        if method == "terminal/wait_for_exit":
            await terminal.done.wait()
            return terminal.status()
        if method == "terminal/kill":
            await self.stop(terminal)
            return {}
        if method == "terminal/release":
            self.terminals.pop(terminal.id, None)
            await self.stop(terminal)
            return {}
        raise TerminalError(METHOD_NOT_FOUND, errors.message(METHOD_NOT_FOUND, method))

    async def create(self, params: Mapping[str, Any]) -> dict[str, Any]:
        if self.closed:
            raise TerminalError(REFUSED, "terminal/create: the session has ended")
        command, args = params.get("command"), params.get("args") or []
        if not isinstance(command, str) or not command or not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise TerminalError(INVALID_PARAMS, "terminal/create: command must be a string and args a list of strings")
        env: dict[str, str] = {}
        for item in params.get("env") or []:
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not isinstance(item.get("value"), str):
                raise TerminalError(INVALID_PARAMS, "terminal/create: env must be a list of {name, value} strings")
            env[item["name"]] = item["value"]
        limit = params.get("outputByteLimit")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise TerminalError(INVALID_PARAMS, "terminal/create: outputByteLimit must be a non-negative integer")
        cwd = params.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise TerminalError(INVALID_PARAMS, "terminal/create: cwd must be a string")
        # What the spawn cannot take is refused here, named, rather than raised by it.
        if any("\0" in text for text in (command, *args, cwd or "", *env, *env.values())):
            raise TerminalError(INVALID_PARAMS, "terminal/create: a command, argument, cwd or environment variable cannot hold NUL")
        if any(not name or "=" in name for name in env):
            raise TerminalError(INVALID_PARAMS, "terminal/create: an environment variable's name must be non-empty and hold no '='")
        # No folder known: where the session runs, as for files (the daemon's cwd without any).
        inside = paths.working_folder(cwd, self.cwd, list(self.folders()) or [self.cwd], files.readlink)
        if isinstance(inside, paths.Refused):
            raise TerminalError(REFUSED, inside.message[:1000])
        where = inside.real
        try:
            is_dir = Path(where).is_dir()
        except (OSError, ValueError) as exc:
            raise TerminalError(REFUSED, f"terminal/create: cwd {where[:500]} cannot be used: {getattr(exc, 'strerror', None) or exc}") from None
        if not is_dir:
            raise TerminalError(REFUSED, f"terminal/create: cwd {where[:500]} is not a directory")
        if len(self.terminals) >= MAX_TERMINALS:
            raise TerminalError(REFUSED, f"terminal/create: this session holds {MAX_TERMINALS} terminals already (release some)")
        try:
            process = await watchdog.open_group(
                [command, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd=where, env={**os.environ, **env},
            )  # fmt: skip
        except (OSError, ValueError) as exc:  # ValueError: what the spawn itself refuses to take
            raise TerminalError(REFUSED, f"terminal/create: {command[:500]}: {getattr(exc, 'strerror', None) or exc}") from None
        terminal = Terminal(self.host.new_id(), " ".join([command, *args]), process, min(OUTPUT_LIMIT, OUTPUT_LIMIT if limit is None else limit))
        self.terminals[terminal.id] = terminal
        log.info("terminal started", terminal=terminal.id, pid=process.pid, command=terminal.command[:200], cwd=where)
        # Watched from now on, whatever happens to this request (its session ending while
        # the mirror opens cancels it): the pump kills and reaps it at the session's end.
        opened = anyio.Event()
        self.tg.start_soon(self._pump, terminal, opened)
        mirror = self.host.mirror
        try:
            if mirror is not None:
                with anyio.move_on_after(KILL_GRACE):
                    await mirror.open(terminal.id, terminal.command[:80], where)
        except Exception as exc:  # the command runs all the same; only its mirror is missing
            log.info("terminal not mirrored in VS Code", terminal=terminal.id, error=str(exc) or type(exc).__name__)
        finally:
            opened.set()  # its output is read from now on (mirrored, when the mirror opened)
        return {"terminalId": terminal.id}

    async def _pump(self, terminal: Terminal, opened: anyio.Event) -> None:
        """Once ``opened`` (its VS Code mirror is open, or will not be), read the command's
        output until it has exited (and its output ended, or ``EXIT_GRACE`` passed: a
        helper it left may hold the pipe open), then reap it; cancelled (the session
        ended), kill it first."""
        mirror = self.host.mirror
        try:
            await opened.wait()
            async with anyio.create_task_group() as tg:
                read_done = anyio.Event()
                tg.start_soon(self._read, terminal, read_done)
                await terminal.process.wait()
                with anyio.move_on_after(EXIT_GRACE):
                    await read_done.wait()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await _kill(terminal.process)  # what it left in its process group goes too
                watchdog.ended(terminal.process)
                code = terminal.process.returncode
                if code is not None and code < 0:
                    terminal.signal = _signal_name(-code)
                else:
                    terminal.exit_code = code
                terminal.done.set()
                log.info("terminal exited", terminal=terminal.id, exit_code=terminal.exit_code, signal=terminal.signal)
                self.on_output({"sessionUpdate": "lmbridge/terminal", "terminalId": terminal.id, "exited": True,
                                "exitCode": terminal.exit_code, "signal": terminal.signal})  # fmt: skip
                if mirror is not None:
                    mirror.exit(terminal.id, terminal.exit_code, terminal.signal)
                if terminal.process.stdout is not None:
                    try:
                        await terminal.process.stdout.aclose()
                    except Exception:
                        pass

    async def _read(self, terminal: Terminal, done: anyio.Event) -> None:
        assert terminal.process.stdout is not None
        decoder = _Utf8()
        mirror = self.host.mirror
        try:
            async for chunk in _chunks(terminal.process.stdout):
                terminal.keep(chunk)
                text = decoder.feed(chunk)
                if text:
                    self.on_output({"sessionUpdate": "lmbridge/terminal", "terminalId": terminal.id, "data": text})
                    if mirror is not None:
                        mirror.output(terminal.id, text)
        finally:
            done.set()

    async def stop(self, terminal: Terminal) -> None:
        """Kill ``terminal``'s command (its process group) and wait for its end."""
        if not terminal.done.is_set():
            await _kill(terminal.process)
            with anyio.move_on_after(KILL_GRACE * 2):
                await terminal.done.wait()

    async def aclose(self) -> None:
        """The session ended: every terminal is killed and forgotten; later creates are refused."""
        self.closed = True
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for terminal in list(self.terminals.values()):
                    tg.start_soon(self.stop, terminal)
        self.terminals.clear()
        self.host.sessions.discard(self)

    def kill_running(self) -> None:
        """Kill every command still running (a Stop): their terminals stay, with their output."""
        for terminal in self.terminals.values():
            if not terminal.done.is_set():
                self.tg.start_soon(self.stop, terminal)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


async def _chunks(stream: Any) -> Any:
    while True:
        try:
            yield await stream.receive(READ_SIZE)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return


async def _kill(process: Process) -> None:
    """SIGTERM to the process group, SIGKILL after ``KILL_GRACE``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.returncode is not None:
            break
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                process.send_signal(sig)
            except ProcessLookupError:
                break
        with anyio.move_on_after(KILL_GRACE):
            await process.wait()
    try:
        os.killpg(process.pid, signal.SIGKILL)  # what it left in its group
    except (ProcessLookupError, PermissionError):
        pass
    if process.returncode is None:
        with anyio.move_on_after(KILL_GRACE):
            await process.wait()


class _Utf8:
    """Bytes → text across chunk boundaries (a character split between two reads)."""

    def __init__(self) -> None:
        import codecs

        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> str:
        return str(self._decoder.decode(data))
