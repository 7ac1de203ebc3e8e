"""The path rule of ``fs/read_text_file`` and ``fs/write_text_file``: which files an agent may
read and write through lmbridge, and how a read is cut (docs/protocol.md, "Daemon → shim";
docs/agents.md, "Files through VS Code").

Rules of this file (like ``permissions``): no I/O. A path is resolved as the operating system
resolves it, with the file system's symlinks read through the ``readlink`` the caller passes
(``acp.files`` passes ``os.readlink``; the tests pass a dict): each component that is a symlink
is replaced by its target (relative to the directory holding it, or from ``/``), and ``..``
is taken *after* that, so ``/w/link/..`` is the parent of the link's target, not ``/w``. A
component that does not exist (a file to create) is kept as written. More than
``MAX_LINKS`` symlinks in one path is a loop: refused.

The decision: the resolved path must be one of the workspace folders (each resolved the same
way) or lie under one; anything else is refused with a message that names the path and the
folders. Whoever then reads or writes uses the *resolved* path, so what is checked is what is
touched.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: Symlinks followed in one path before it counts as a loop (Linux's ELOOP limit).
MAX_LINKS = 40

#: ``readlink(path)``: the target of ``path`` when it is a symlink, else None (a file, a
#: directory, or nothing there).
Readlink = Callable[[str], "str | None"]


class Unresolvable(ValueError):
    """The path is not absolute, holds a NUL, or has more than ``MAX_LINKS`` symlinks."""


def resolve(path: str, readlink: Readlink) -> str:
    """``path`` (absolute, POSIX) with every symlink followed and ``.``/``..`` taken as the
    OS takes them; a missing tail kept as written. Raises ``Unresolvable``."""
    if not path.startswith("/"):
        raise Unresolvable(f"not an absolute path: {path!r}")
    if "\0" in path:
        raise Unresolvable("a path cannot hold NUL")
    resolved: list[str] = []  # components below "/"
    pending = deque(path.split("/"))
    links = 0
    while pending:
        part = pending.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = "/" + "/".join([*resolved, part])
        target = readlink(candidate)
        if target is None:
            resolved.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise Unresolvable(f"too many symlinks in {path!r}")
        if target.startswith("/"):
            resolved = []
        pending.extendleft(reversed(target.split("/")))
    return "/" + "/".join(resolved)


def inside(real: str, folders: Sequence[str]) -> bool:
    """Whether the resolved path ``real`` is one of the resolved ``folders`` or lies under one."""
    return any(real == f or real.startswith(f.rstrip("/") + "/") for f in folders)


@dataclass(frozen=True, slots=True)
class Allowed:
    """The path may be used: ``real`` is what to read or write."""

    real: str


@dataclass(frozen=True, slots=True)
class Refused:
    """The path may not be used: ``message`` says why (for the agent, and the model, to read)."""

    message: str


def check(path: object, folders: Sequence[str], readlink: Readlink) -> Allowed | Refused:
    """The rule: ``path`` (as the agent sent it) against the workspace ``folders`` (as the
    shim sent them, absolute)."""
    if not isinstance(path, str) or not path.startswith("/"):
        return Refused(f"refused: path must be an absolute path, not {str(path)[:200]!r}")
    try:
        real = resolve(path, readlink)
        roots = [resolve(f, readlink) for f in folders if isinstance(f, str) and f.startswith("/")]
    except Unresolvable as exc:
        return Refused(f"refused: {str(path)[:500]} cannot be resolved ({exc})")
    if not inside(real, roots):
        where = ", ".join(roots) if roots else "none is open"
        return Refused(f"refused: {path[:500]} is outside the workspace folders ({where})")
    return Allowed(real)


def cut_lines(text: str, line: int | None = None, limit: int | None = None) -> str:
    """The lines ``line`` (1-based) … ``line + limit - 1`` of ``text``, line ends kept
    (ACP ``fs/read_text_file``'s ``line`` and ``limit``). None: from the first / to the end."""
    if line is None and limit is None:
        return text
    # Lines end at "\n" only (a "\r\n" line too), as the shim cuts them (vscode-shim/src/files.ts).
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    start = max(0, (line or 1) - 1)
    end = len(lines) if limit is None else start + max(0, limit)
    return "".join(lines[start:end])


# ---------------------------------------------------------------- the files a request names

#: ACP tool kinds whose approval lets lmbridge write the files the request names: the
#: kinds ``permissions`` never grants without the user's card (``permissions.Grants``).
EDIT_KINDS = frozenset({"edit", "delete", "move"})
#: ``rawInput`` fields agents put the file in (gemini-cli: ``file_path``).
PATH_KEYS = ("path", "file_path", "filePath", "abs_path", "absolute_path", "destination")
#: Paths taken from one request, at most (a request naming more is still approved for these).
MAX_PATHS = 50


def named_files(call: object) -> list[str]:
    """The absolute paths a ``toolCall`` names (``locations``, ``diff`` contents, ``rawInput``'s
    path fields), in that order, each once, at most ``MAX_PATHS``: the files an approved edit
    of it lets lmbridge write (``permissions.Grants``). Anything else in it: none."""
    if not isinstance(call, Mapping):
        return []
    locations, contents = call.get("locations"), call.get("content")
    found: list[object] = []
    for location in locations if isinstance(locations, list) else []:
        if isinstance(location, Mapping):
            found.append(location.get("path"))
    for content in contents if isinstance(contents, list) else []:
        if isinstance(content, Mapping) and content.get("type") == "diff":
            found.append(content.get("path"))
    raw = call.get("rawInput")
    if isinstance(raw, Mapping):
        found += [raw.get(key) for key in PATH_KEYS]
    out: list[str] = []
    for path in found:
        if isinstance(path, str) and path.startswith("/") and path not in out:
            out.append(path)
    return out[:MAX_PATHS]
