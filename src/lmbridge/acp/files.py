"""``fs/read_text_file`` and ``fs/write_text_file``: an agent's file requests, served through
VS Code when the shim offers it, else from disk (docs/agents.md, "Files through VS Code";
docs/protocol.md, "Daemon → shim").

- The path rule is ``core.paths``: only inside the workspace folders, after ``..`` and
  symlinks; what is read or written is the resolved path.
- Through the shim (``clientCapabilities.fs``): ``client/readTextFile`` returns the editor's
  text, unsaved changes included; ``client/writeTextFile`` applies a WorkspaceEdit and saves
  (undoable in the editor). The shim checks the workspace rule again.
- Without it (the console, replay, an older shim): the file on disk, cut by ``line``/``limit``
  the same way; a write replaces the file's content in place.
- Whether a write may happen at all (an edit the user approved) is decided by the permission
  rule (``core.permissions.permit``), which the session actor asks before it calls ``write``
  (docs/agents.md, "What protects what").

Errors are ``FsError`` (a JSON-RPC error object for the agent): -32602 for bad params and
refused paths, -32002 "Resource not found" for a missing file (ACP's code; gemini-cli reads
"not found" in the message as ENOENT), the shim's own error or the channel's (-32010 gone,
-32011 timeout) passed on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from lmbridge.core import paths
from lmbridge.core.errors import INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND
from lmbridge.rpc.channel import ClientChannel, ClientFailed

#: Bytes of a file read from disk, at most (a larger one is refused, never cut silently).
MAX_FILE = 32 * 1024 * 1024
#: Seconds the shim may take to read or write a file.
SHIM_TIMEOUT = 30.0

READ = "fs/read_text_file"
WRITE = "fs/write_text_file"
METHODS = frozenset({READ, WRITE})


class FsError(Exception):
    """An fs request that fails: ``error()`` is the JSON-RPC error object for the agent."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def error(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


def readlink(path: str) -> str | None:
    """``os.readlink``, None when ``path`` is not a symlink (a file, a folder, nothing there)."""
    try:
        return os.readlink(path)
    except (OSError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class ReadParams:
    path: str
    line: int | None
    limit: int | None


@dataclass(frozen=True, slots=True)
class WriteParams:
    path: str
    content: str


def _int_or_none(params: Mapping[str, Any], name: str, least: int) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if type(value) is not int or value < least:
        raise FsError(INVALID_PARAMS, f"invalid params: {name} must be an integer ≥ {least}")
    return value


def read_params(params: Any) -> ReadParams:
    """ACP ``ReadTextFileRequest``'s fields (``path``, ``line`` ≥ 1, ``limit`` ≥ 0). Raises ``FsError``."""
    if not isinstance(params, Mapping) or not isinstance(params.get("path"), str):
        raise FsError(INVALID_PARAMS, "invalid params: path must be a string")
    return ReadParams(params["path"], _int_or_none(params, "line", 1), _int_or_none(params, "limit", 0))


def write_params(params: Any) -> WriteParams:
    """ACP ``WriteTextFileRequest``'s fields (``path``, ``content``). Raises ``FsError``."""
    if not isinstance(params, Mapping) or not isinstance(params.get("path"), str):
        raise FsError(INVALID_PARAMS, "invalid params: path must be a string")
    if not isinstance(params.get("content"), str):
        raise FsError(INVALID_PARAMS, "invalid params: content must be a string")
    return WriteParams(params["path"], params["content"])


class Files:
    """The agents' file requests. ``channel``: the shim (used when it offers ``fs``);
    ``folders``: the workspace folders (``initialize``'s, read at each request); ``edit_rules``:
    the user's ``chat.tools.edits.autoApprove`` (``initialize``'s ``editAutoApprove``)."""

    def __init__(
        self, channel: ClientChannel, folders: Callable[[], Sequence[str]], timeout: float = SHIM_TIMEOUT, edit_rules: Callable[[], object] = lambda: None
    ) -> None:
        self.channel = channel
        self.folders = folders
        self.timeout = timeout
        self.edit_rules = edit_rules  # the user's chat.tools.edits.autoApprove (``initialize``'s), None: VS Code's default

    @property
    def through_vscode(self) -> bool:
        """Whether requests go to the editor (the shim offers ``fs``) rather than the disk."""
        return self.channel.offers("fs")

    def allowed(self, path: str) -> str:
        """The resolved path, if the rule allows ``path``; else raises ``FsError`` (-32602)."""
        decision = paths.check(path, self.folders(), readlink)
        if isinstance(decision, paths.Refused):
            raise FsError(INVALID_PARAMS, decision.message)
        return decision.real

    async def read(self, params: Any) -> dict[str, Any]:
        """``fs/read_text_file`` → ``{"content": str}``. Raises ``FsError``."""
        p = read_params(params)
        real = self.allowed(p.path)
        if self.through_vscode:
            ask: dict[str, Any] = {"path": real}
            if p.line is not None:
                ask["line"] = p.line
            if p.limit is not None:
                ask["limit"] = p.limit
            result = await self._ask("client/readTextFile", ask)
            content = result.get("content") if isinstance(result, Mapping) else None
            if not isinstance(content, str):
                raise FsError(INTERNAL_ERROR, "VS Code answered client/readTextFile without a text content")
            return {"content": content}
        text = await anyio.to_thread.run_sync(_read_disk, real, p.path)
        return {"content": paths.cut_lines(text, p.line, p.limit)}

    async def write(self, p: WriteParams, real: str) -> dict[str, Any]:
        """``fs/write_text_file`` of ``p`` at ``real`` (``allowed(p.path)``) → ``{}``. Raises ``FsError``."""
        if self.through_vscode:
            await self._ask("client/writeTextFile", {"path": real, "content": p.content})
        else:
            await anyio.to_thread.run_sync(_write_disk, real, p.content, p.path)
        return {}

    async def _ask(self, method: str, params: dict[str, Any]) -> Any:
        try:
            return await self.channel.request(method, params, self.timeout)
        except ClientFailed as exc:
            raise FsError(exc.code, exc.message) from None


def _read_disk(real: str, shown: str) -> str:
    try:
        size = os.stat(real).st_size
        if size > MAX_FILE:
            raise FsError(INVALID_PARAMS, f"refused: {shown} is {size} bytes; lmbridge reads files of up to {MAX_FILE} bytes")
        with open(real, encoding="utf-8", errors="replace", newline="") as f:
            return f.read(MAX_FILE + 1)
    except FileNotFoundError:
        raise FsError(RESOURCE_NOT_FOUND, f"Resource not found: {shown} (ENOENT: no such file)") from None
    except IsADirectoryError:
        raise FsError(INVALID_PARAMS, f"refused: {shown} is a folder") from None
    except OSError as exc:
        raise FsError(INTERNAL_ERROR, f"{shown}: {exc.strerror or exc}") from None


def _write_disk(real: str, content: str, shown: str) -> None:
    try:
        os.makedirs(os.path.dirname(real), exist_ok=True)
        with open(real, "w", encoding="utf-8", newline="") as f:
            f.write(content)
    except IsADirectoryError:
        raise FsError(INVALID_PARAMS, f"refused: {shown} is a folder") from None
    except OSError as exc:
        raise FsError(INTERNAL_ERROR, f"{shown}: {exc.strerror or exc}") from None
