"""``lmbridge serve --record FILE``: every frame on every link, as JSON lines.

Format (docs/recording.md, version ``FORMAT``): a header line
``{"lmbridge-recording": 1, ...}``, then one line per frame or event::

    {"t": 0.0132, "link": "shim", "dir": "in", "frame": {...}}
    {"t": 0.4107, "link": "agent:p1", "dir": "out", "event": "spawn", "agent": "demo", ...}

``t``: seconds since the recording started; ``link``: ``shim`` (shim ↔ daemon),
``agent:p<n>`` (daemon ↔ its n-th agent process, shared by that agent's sessions) or ``mcp:<session id>``
(that agent ↔ the daemon's VS Code tools server, as the tools handlers see it);
``dir``: ``in`` or ``out`` from the daemon's point of view.

Hooks cost nothing when not recording: the server keeps ``config.recorder``
(``None`` unless ``--record``), and an agent connection takes its link from
``current()`` once, at spawn; every hook is a ``None`` check.

Secrets never reach the file: approval tokens, MCP secrets and agent environment
values are replaced by stable placeholders (``<redacted:approval-token:1>``): the
same value, the same placeholder, everywhere in one recording.

Stdlib only: ``acp.connection`` imports this module.
"""

from __future__ import annotations

import datetime
import errno
import itertools
import json
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from lmbridge import __version__

FORMAT = 1  # the value of the header's "lmbridge-recording" key
HEADER_KEY = "lmbridge-recording"
RECORDING_START = b'{"' + HEADER_KEY.encode() + b'":'  # how every recording's file begins (Recorder._line)
MIN_SCRUB = 8  # registered values this long or longer are also replaced inside any string
PLACEHOLDER = re.compile(r"<redacted:[a-z-]+(?::[^<>:\s]+)?:\d+>")
# A command-line option whose value is a secret: --api-key X, --token=X, -p X, ...
SECRET_OPTION = re.compile(r"^--?[\w-]*(?:key|token|secret|password|passwd|auth|credential)[\w-]*$", re.I)

class Redactor:
    """Secret values → stable placeholders, numbered per kind in order of first sight."""

    def __init__(self) -> None:
        self.placeholders: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._pattern: re.Pattern[str] | None = None

    def register(self, value: Any, kind: str, name: str | None = None) -> Any:
        """The placeholder for ``value`` (registered now if new). Non-strings, empty
        strings and placeholders are returned as they are."""
        if not isinstance(value, str) or not value or PLACEHOLDER.fullmatch(value):
            return value
        known = self.placeholders.get(value)
        if known is not None:
            return known
        label = f"{kind}:{_safe(name)}" if name else kind
        self._counts[label] = self._counts.get(label, 0) + 1
        placeholder = f"<redacted:{label}:{self._counts[label]}>"
        self.placeholders[value] = placeholder
        if len(value) >= MIN_SCRUB:
            long = sorted((v for v in self.placeholders if len(v) >= MIN_SCRUB), key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in long))
        return placeholder

    def env(self, env: Any, owner: str = "env") -> Any:
        """An environment mapping with every value replaced by its placeholder."""
        if not isinstance(env, Mapping):
            return env
        return {k: self.register(v, owner, str(k)) for k, v in env.items()}

    def args(self, args: Any) -> Any:
        """A command line with the values of secret-looking options (``SECRET_OPTION``:
        ``--api-key X``, ``--token=X``) replaced by placeholders."""
        if not isinstance(args, list):
            return args
        out: list[Any] = []
        secret_next: str | None = None
        for arg in args:
            if secret_next is not None and isinstance(arg, str):
                out.append(self.register(arg, "arg", secret_next))
                secret_next = None
                continue
            secret_next = None
            if isinstance(arg, str) and arg.startswith("-"):
                option, eq, value = arg.partition("=")
                if SECRET_OPTION.match(option):
                    if eq:
                        out.append(f"{option}={self.register(value, 'arg', option.lstrip('-'))}")
                        continue
                    secret_next = option.lstrip("-")
            out.append(arg)
        return out

    def spec(self, spec: Any) -> Any:
        """An AgentSpec (dict) with its env values and secret-looking options redacted."""
        if not isinstance(spec, dict):
            return spec
        spec = dict(spec)
        if isinstance(spec.get("env"), dict):
            spec["env"] = self.env(spec["env"])
        if isinstance(spec.get("args"), list):
            spec["args"] = self.args(spec["args"])
        return spec

    def scrub(self, obj: Any) -> Any:
        """``obj`` with every registered value (of ``MIN_SCRUB`` characters or more)
        replaced inside every string."""
        pattern = self._pattern
        if pattern is None:
            return obj
        return walk_strings(obj, lambda s: pattern.sub(lambda m: self.placeholders[m.group(0)], s) if len(s) >= MIN_SCRUB else s)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"


def walk_strings(obj: Any, fn: Callable[[str], str]) -> Any:
    """``obj`` (parsed JSON) with ``fn`` applied to every string in it."""
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: walk_strings(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [walk_strings(v, fn) for v in obj]
    return obj


def _copy(frame: Any) -> Any:
    """A deep, JSON-shaped copy (the daemon's own objects are never touched)."""
    return json.loads(json.dumps(frame, ensure_ascii=False))


def open_private(path: str | Path) -> int:
    """A file descriptor for writing a recording at ``path``, from its start: a new file is
    created 0600; an existing one is reused only if it is a regular file that is empty or
    already a recording (it begins as ``Recorder`` begins one), and is made 0600 and emptied. A
    symbolic link at ``path`` is never followed (``O_NOFOLLOW``), so neither a link planted
    there nor a mistyped ``--record ~/.bashrc`` truncates another file. Raises OSError
    saying why."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o600)  # O_NONBLOCK: a FIFO planted there does not hang the open
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(exc.errno, "is a symbolic link: not followed, choose another file") from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "is not a regular file")
        if info.st_size > 0 and os.pread(fd, len(RECORDING_START), 0) != RECORDING_START:
            raise OSError(errno.EEXIST, "exists and is not an lmbridge recording: not overwritten")
        os.set_blocking(fd, True)
        os.fchmod(fd, 0o600)
        os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Recorder:
    """Writes one recording. Create with ``Recorder.open`` (or on any text stream)."""

    def __init__(self, out: TextIO, agents: Sequence[Any] = (), idle_timeout: float | None = None) -> None:
        self.out = out
        self.redactor = Redactor()
        self.started = time.monotonic()
        specs = [_spec(a) for a in agents]
        header = {
            HEADER_KEY: FORMAT,
            "lmbridge": __version__,
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "config": {"agents": [self.redactor.spec(s) for s in specs], "idleTimeout": idle_timeout},
            "host": {"cwd": os.getcwd(), "python": sys.executable, "tmp": tempfile.gettempdir()},
        }
        self._line(self.redactor.scrub(header))

    @classmethod
    def open(cls, path: str | Path, agents: Sequence[Any] = (), idle_timeout: float | None = None) -> Recorder:
        """Record into ``path`` (``open_private``: a recording holds whole conversations)."""
        # Lone surrogates (JSON escapes in frames) are written back as JSON escapes.
        out = os.fdopen(open_private(path), "w", encoding="utf-8", errors="backslashreplace", buffering=1)
        return cls(out, agents, idle_timeout)

    def close(self) -> None:
        if not self.out.closed:
            self.out.close()

    # -- the shim link --------------------------------------------------------

    def shim_in(self, line: bytes) -> None:
        """A line read from the daemon's stdin."""
        if not line.strip():
            return
        try:
            frame = json.loads(line)
        except ValueError:
            self._entry("shim", "in", raw=line.decode("utf-8", "replace").rstrip("\r\n"))
            return
        if isinstance(frame, dict) and frame.get("method") == "initialize":
            params = frame.get("params")
            agents = params.get("agents") if isinstance(params, dict) else None
            if isinstance(params, dict) and isinstance(agents, list):
                params["agents"] = [self.redactor.spec(a) for a in agents]
        self._entry("shim", "in", frame=frame)

    def shim_eof(self) -> None:
        self._entry("shim", "in", event="eof")

    def shim_out(self, data: bytes) -> None:
        """Bytes written to the daemon's stdout (whole lines)."""
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                frame = json.loads(line)
            except ValueError:
                self._entry("shim", "out", raw=line.decode("utf-8", "replace"))
                continue
            part = (frame.get("params") or {}).get("part") if isinstance(frame, dict) and frame.get("method") == "lm/responsePart" else None
            if isinstance(part, dict) and part.get("type") == "tool_call" and isinstance(part.get("input"), dict):
                self.redactor.register(part["input"].get("approvalToken"), "approval-token")
            self._entry("shim", "out", frame=frame)

    # -- agent links ----------------------------------------------------------

    def agent(self, session: str) -> AgentLink:
        return AgentLink(self, f"agent:{session}")

    def mcp(self, session: str) -> McpLink:
        return McpLink(self, f"mcp:{session}")

    # -- writing --------------------------------------------------------------

    def _entry(self, link: str, direction: str, **fields: Any) -> None:
        entry = {"t": round(time.monotonic() - self.started, 4), "link": link, "dir": direction, **fields}
        self._line(self.redactor.scrub(entry))

    def _line(self, entry: dict[str, Any]) -> None:
        if self.out.closed:
            return
        self.out.write(json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n")


class AgentLink:
    """The recorder's side of one agent connection (``agent:p<n>``)."""

    def __init__(self, recorder: Recorder, link: str) -> None:
        self.recorder = recorder
        self.link = link
        self.agent: str | None = None
        self._exited = False

    def spawned(self, agent: str, command: str, args: Sequence[str], env: Mapping[str, str], cwd: str | None, error: str | None = None) -> None:
        """The daemon started (or failed to start) the agent: its id, command line, the
        environment it added (values redacted), its cwd."""
        redactor = self.recorder.redactor
        self.agent = agent
        fields: dict[str, Any] = {"agent": agent, "command": [command, *redactor.args(list(args))], "env": redactor.env(dict(env)), "cwd": cwd}
        if error is not None:
            fields["error"] = error
        self.recorder._entry(self.link, "out", event="spawn", **fields)

    def sent(self, frame: Any) -> None:
        """A frame written to the agent's stdin."""
        frame = _copy(frame)
        params = frame.get("params") if isinstance(frame, dict) else None
        if isinstance(params, dict) and isinstance(params.get("mcpServers"), list):
            self._redact_mcp(params["mcpServers"])
        self.recorder._entry(self.link, "out", frame=frame)

    def received(self, frame: Any) -> None:
        """A frame read from the agent's stdout."""
        self.recorder._entry(self.link, "in", frame=_copy(frame))

    def closing(self) -> None:
        """The daemon closes the agent's stdin (it is being stopped)."""
        self.recorder._entry(self.link, "out", event="close")

    def exited(self, code: int | None, stderr: Sequence[str]) -> None:
        """The agent process ended: its exit code and the tail of its stderr (once)."""
        if self._exited:
            return
        self._exited = True
        self.recorder._entry(self.link, "in", event="exit", agent=self.agent, code=code, stderr=list(stderr))

    def _redact_mcp(self, servers: list[Any]) -> None:
        register = self.recorder.redactor.register
        for server in servers:
            if not isinstance(server, dict):
                continue
            for key, kind in (("headers", "mcp-header"), ("env", "mcp-env")):
                for item in server.get(key) or []:
                    if isinstance(item, dict) and "value" in item:
                        item["value"] = register(item["value"], kind, str(item.get("name", "")))


class McpLink:
    """The recorder's side of one session's VS Code tools server (``mcp:<session id>``):
    each ``tools/list`` and ``tools/call`` the agent makes (in) and its result (out),
    as JSON-RPC frames numbered per link, and ``tools/list_changed`` notifications (out)."""

    def __init__(self, recorder: Recorder, link: str) -> None:
        self.recorder = recorder
        self.link = link
        self._ids = itertools.count(1)

    def handler(self, method: str, handle: Any) -> Any:
        """``handle(ctx, params)`` (an MCP request handler), recorded."""

        async def recorded(ctx: Any, params: Any) -> Any:
            rid = next(self._ids)
            self.recorder._entry(self.link, "in", frame={"jsonrpc": "2.0", "id": rid, "method": method, "params": _dump(params)})
            try:
                result = await handle(ctx, params)
            except Exception as exc:
                self.recorder._entry(self.link, "out", frame={"jsonrpc": "2.0", "id": rid, "error": {"message": str(exc)}})
                raise
            self.recorder._entry(self.link, "out", frame={"jsonrpc": "2.0", "id": rid, "result": _dump(result)})
            return result

        return recorded

    def notified(self, method: str) -> None:
        self.recorder._entry(self.link, "out", frame={"jsonrpc": "2.0", "method": method})


def _dump(obj: Any) -> Any:
    """An MCP (pydantic) object as its JSON shape."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    return _copy(obj)


def _spec(agent: Any) -> dict[str, Any]:
    if hasattr(agent, "model_dump"):
        dumped: dict[str, Any] = agent.model_dump(exclude_none=True)
        return dumped
    return dict(agent)
