"""The path rule of ``fs/read_text_file``, ``fs/write_text_file`` and ``terminal/create``'s
``cwd``: which files an agent may read and write through lmbridge and where its commands run,
how a read is cut, and which folders a session is given (docs/protocol.md, "Daemon → shim";
docs/agents.md, "Files through VS Code", "Every workspace folder").

Rules of this file (like ``permissions``): no I/O. A path is resolved as the operating system
resolves it, with the file system's symlinks read through the ``readlink`` the caller passes
(``acp.files`` passes ``os.readlink``; the tests pass a dict): each component that is a symlink
is replaced by its target (relative to the directory holding it, or from ``/``), and ``..``
is taken *after* that, so ``/w/link/..`` is the parent of the link's target, not ``/w``. A
component that does not exist (a file to create) is kept as written. More than
``MAX_LINKS`` symlinks in one path is a loop: refused.

The decision: the resolved path must be one of the workspace folders (each resolved the same
way, every folder of a multi-root workspace alike) or lie under one; anything else is refused
with a message that names the path and the folders. Whoever then reads or writes uses the *resolved* path, so what is checked is what is
touched.
"""

from __future__ import annotations

import re
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
    return holder(real, folders) is not None


def holder(real: str, folders: Sequence[str]) -> str | None:
    """The folder of ``folders`` (resolved) that holds the resolved path ``real`` (is it, or
    lies above it): the deepest one where folders nest, as given; None when none does."""
    holding = [f for f in folders if real == f or real.startswith(f.rstrip("/") + "/")]
    return max(holding, key=len) if holding else None


def additional_directories(folders: Sequence[object], cwd: str | None) -> tuple[str, ...]:
    """ACP's ``additionalDirectories`` of a session opened in ``cwd`` in a workspace of
    ``folders`` (as the shim sent them, in VS Code's order; the first is the agents' cwd):
    every other absolute folder, each once, in order; never ``cwd`` itself, never a relative
    or NUL-holding entry (docs/protocol.md, "initialize"; docs/agents.md, "Every workspace folder")."""
    out: list[str] = []
    for folder in folders:
        if isinstance(folder, str) and folder.startswith("/") and "\0" not in folder and folder != cwd and folder not in out:
            out.append(folder)
    return tuple(out)


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


def working_folder(cwd: str | None, base: str, folders: Sequence[str], readlink: Readlink) -> Allowed | Refused:
    """Where a ``terminal/create`` runs: its ``cwd`` (None: ``base``, the session's cwd; a
    relative one taken from ``base``) under the same rule as a file (``check``): one of the
    workspace ``folders`` or under one, resolved; anything else refused."""
    where = base if not cwd else cwd if cwd.startswith("/") else base.rstrip("/") + "/" + cwd
    decision = check(where, folders, readlink)
    if isinstance(decision, Refused):
        return Refused(f"terminal/create: cwd {decision.message}")
    return decision


def cut_lines(text: str, line: int | None = None, limit: int | None = None) -> str:
    """The lines ``line`` (1-based) … ``line + limit - 1`` of ``text``, line ends kept
    (ACP ``fs/read_text_file``'s ``line`` and ``limit``). None: from the first / to the end."""
    if line is None and limit is None:
        return text
    # Lines end at "\n" only (a "\r\n" line too), as the shim cuts them (vscode-shim/src/chat/files.ts).
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


# ---------------------------------------------------------------- protected files

#: VS Code 1.139's default of ``chat.tools.edits.autoApprove`` (``out/vs/code/browser/workbench/
#: workbench.js``), in its order: a glob relative to the file's workspace folder → whether VS Code's
#: own agent may edit such a file without asking. What is not auto-approved is *protected*: its
#: edit can run code (a ``.git/config`` ``core.fsmonitor`` line runs on the next ``git status``,
#: which VS Code's Git extension runs by itself), so it never rides a session approval
#: (docs/vscode-shim.md, "Security model").
EDIT_AUTO_APPROVE: tuple[tuple[str, bool], ...] = (
    ("**/*", True),
    ("**/.git/**", False),
    ("**/{package.json,server.xml,build.rs,web.config,.gitattributes,.env,Cargo.toml}", False),
    ("**/{.npmrc,.yarnrc,.yarnrc.yml,.pnpmfile.js,.pnpmfile.cjs,.pnpmfile.mjs,pnpm-workspace.yaml}", False),
    ("**/*.{code-workspace,csproj,fsproj,vbproj,vcxproj,proj,targets,props,gradle,gradle.kts}", False),
    ("**/gradle.properties", False),
    ("**/ruby_lsp/*/addon", False),
    ("**/*.lock", False),
    ("**/*-lock.{yaml,json}", False),
    ("**/.mcp.json", False),
    ("**/.npmrc", False),
    ("**/.vscode/*.json", False),
    ("**/.github/agents/**", False),
    ("**/.github/hooks/**", False),
    ("**/.claude/agents/**", False),
    ("**/.claude/settings.json", False),
    ("**/.claude/settings.local.json", False),
    ("**/.codex/agents/**", False),
    ("**/.codex/config.toml", False),
    ("**/.codex/hooks.json", False),
)
#: Globs Copilot Chat 0.67 protects after the user's own setting, whatever it says
#: (``extensions/copilot/dist/extension.js``): a user's ``true`` does not free them.
ALWAYS_PROTECTED: tuple[str, ...] = ("**/.mcp.json", "**/.npmrc", "**/.vscode/*.json", "**/.github/agents/**", "**/.claude/agents/**")

EditRules = tuple[tuple[str, bool], ...]


def edit_rules(setting: object) -> EditRules:
    """The rules a ``chat.tools.edits.autoApprove`` value (as the shim sends it: VS Code's
    value, its default merged with the user's) stands for, in order; ``ALWAYS_PROTECTED``
    after it. Not an object of booleans, or absent: VS Code's default."""
    rules: list[tuple[str, bool]] = []
    if isinstance(setting, Mapping) and setting:
        rules = [(k, v) for k, v in setting.items() if isinstance(k, str) and isinstance(v, bool)]
    if not rules:
        rules = list(EDIT_AUTO_APPROVE)
    return (*rules, *((g, False) for g in ALWAYS_PROTECTED))


def protected(real: str, folders: Sequence[str], rules: EditRules) -> bool:
    """Whether an edit of ``real`` (absolute, resolved) is protected: outside the (resolved)
    ``folders``, or the last of ``rules`` whose glob matches its path relative to the deepest
    folder holding it says ``False`` (VS Code's reading of ``chat.tools.edits.autoApprove``:
    approved until a matching rule says otherwise). Globs: ``**``, ``*``, ``?``, ``{a,b}``,
    ``[…]``; matched regardless of case (the safer reading on any file system)."""
    folder = holder(real, folders)
    if folder is None:
        return True
    relative = real[len(folder.rstrip("/")) :].lstrip("/")
    if not relative:
        return True  # the folder itself
    approved = True
    for glob, value in rules:
        if value != approved and _glob(glob).fullmatch(relative):
            approved = value
    return not approved


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(_glob_source(pattern.lstrip("/")), re.IGNORECASE | re.DOTALL)


def _glob_source(p: str) -> str:
    out, i = [], 0
    while i < len(p):
        if p.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif p.startswith("/**", i) and i + 3 == len(p):
            out.append("(?:/.*)?")
            i += 3
        elif p.startswith("**", i):
            out.append(".*")
            i += 2
        elif p[i] == "*":
            out.append("[^/]*")
            i += 1
        elif p[i] == "?":
            out.append("[^/]")
            i += 1
        elif p[i] == "{" and "}" in p[i:]:
            end = p.index("}", i)
            out.append("(?:" + "|".join(_glob_source(alt) for alt in p[i + 1 : end].split(",")) + ")")
            i = end + 1
        elif p[i] == "[" and "]" in p[i + 1 :]:
            end = p.index("]", i + 1)
            body = p[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(p[i]))
            i += 1
    return "".join(out)
