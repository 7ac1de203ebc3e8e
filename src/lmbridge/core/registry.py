"""The ACP registry feed (``registry.json``): its agents, for one platform, as the shim installs them.

Pure: the shim fetches the feed (over https, cached in the extension's storage) and sends it
with ``agents/registry`` (docs/protocol.md); this module validates it and picks, per agent,
the one distribution lmbridge installs on the platform the shim names, with the command line
that starts it (docs/vscode-shim.md, "Agents from the ACP registry", for the feed's format).

A distribution is chosen in this order: ``npx`` (``npx -y <package> [args]``, or
``npx -y --package <package> <cmd> [args]`` when it names a ``cmd``), ``uvx``
(``uvx <package> [args]``, or ``uvx --from <package> <cmd> [args]``), then the ``binary`` for
the platform: a package manager fetches and caches its package itself, a binary has to be
downloaded and unpacked by the shim. A binary's archive must be an https URL (plain http only
from 127.0.0.1, a feed served on this machine) and its ``cmd`` a relative path inside the
unpacked archive. An entry that does not validate, or has no distribution for the platform, is
left out and said in ``problems``; the others are offered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: The registry's platform names (its FORMAT: ``<os>-<arch>``).
PLATFORMS = frozenset({"darwin-aarch64", "darwin-x86_64", "linux-aarch64", "linux-x86_64", "windows-aarch64", "windows-x86_64"})

#: Most agents read from one feed (the public registry lists a few dozen).
MAX_AGENTS = 1000

Kind = Literal["npx", "uvx", "binary"]


class RegistryParams(BaseModel):
    """``agents/registry`` params: the feed as the shim fetched it, and the platform to install for."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    feed: Any
    platform: str | None = None


class _Lenient(BaseModel):
    # Fields the registry adds later (icons, authors, …) are not ours to refuse.
    model_config = ConfigDict(extra="ignore")


class PackageDistribution(_Lenient):
    """``distribution.npx`` / ``distribution.uvx``: a package run by its package manager."""

    package: str = Field(min_length=1, max_length=300)
    cmd: str | None = Field(default=None, min_length=1, max_length=300)
    args: list[str] = []
    env: dict[str, str] = {}


class BinaryTarget(_Lenient):
    """``distribution.binary.<platform>``: an archive (or a raw executable) to unpack and run."""

    archive: str = Field(min_length=1, max_length=2000)
    sha256: str | None = Field(default=None, pattern=r"^[A-Fa-f0-9]{64}$")
    cmd: str = Field(min_length=1, max_length=300)
    args: list[str] = []
    env: dict[str, str] = {}


class Distribution(_Lenient):
    npx: PackageDistribution | None = None
    uvx: PackageDistribution | None = None
    binary: dict[str, BinaryTarget] | None = None


class FeedAgent(_Lenient):
    """One entry of the feed's ``agents``."""

    id: str = Field(pattern=r"^[a-z][a-z0-9-]*$", max_length=100)
    name: str = Field(min_length=1, max_length=200)
    version: str = Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+-]*$", max_length=100)
    description: str = Field(default="", max_length=2000)
    repository: str | None = None
    website: str | None = None
    license: str | None = None
    distribution: Distribution


def archive_allowed(url: str) -> bool:
    """Whether lmbridge downloads from ``url``: https, or plain http from 127.0.0.1 only."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return (parts.scheme == "https" and bool(parts.hostname)) or (parts.scheme == "http" and parts.hostname == "127.0.0.1")


def relative_inside(cmd: str) -> bool:
    """Whether ``cmd`` (``./bin/agent``) is a relative path that stays inside its folder."""
    parts = cmd.replace("\\", "/").split("/")
    if cmd.startswith(("/", "\\")) or (len(cmd) > 1 and cmd[1] == ":") or "\0" in cmd:
        return False
    return ".." not in parts and any(p not in ("", ".") for p in parts)


def package_line(kind: Literal["npx", "uvx"], d: PackageDistribution) -> tuple[str, list[str]]:
    """The command line that runs a package distribution (the registry's FORMAT, "Distribution Types")."""
    if kind == "npx":
        return "npx", (["-y", "--package", d.package, d.cmd] if d.cmd else ["-y", d.package]) + d.args
    return "uvx", (["--from", d.package, d.cmd] if d.cmd else [d.package]) + d.args


def _package_name(spec: str, kind: str) -> str | None:
    """``@scope/name@1.2.3`` (npx) or ``name==1.2.3``, ``name[extra]>=1``, ``name@1`` (uvx) →
    the package's name; None for what names no registry package (a path, a URL, a GitHub
    ``owner/repo``, empty)."""
    if not spec or ":" in spec:
        return None
    if kind == "npx":
        if spec.startswith("@"):
            scope, _, rest = spec[1:].partition("/")
            name = rest.split("@", 1)[0]
            return f"@{scope}/{name}" if scope and name and "/" not in name else None
        name = spec.split("@", 1)[0]
        return name if name and "/" not in name else None
    if "/" in spec or "\\" in spec:
        return None
    for mark in ("[", "=", "<", ">", "~", "!", "@", ";", " "):
        spec = spec.split(mark, 1)[0]
    return spec.strip() or None


def package_of(command: str, args: Sequence[str]) -> str | None:
    """The package an ``npx`` or ``uvx`` command line runs (``package_line``'s forms, and
    ``npx --yes``, ``--package=X``, ``-p X``, ``uvx --python V``): its name without the
    version (``@agentclientprotocol/claude-agent-acp``, ``fast-agent-mcp``). None for any
    other command, or one naming no package."""
    kind = command.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".cmd").removesuffix(".exe")
    if kind not in ("npx", "uvx"):
        return None
    with_value = {"npx": ("--package", "-p", "--cache", "--registry", "--userconfig"), "uvx": ("--from", "--python", "-p", "--with", "--index", "--index-url")}[kind]
    explicit = {"npx": ("--package", "-p"), "uvx": ("--from",)}[kind]
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, value = arg.partition("=")
        if eq and flag in explicit:
            return _package_name(value, kind)
        if arg in with_value:
            if arg in explicit and i + 1 < len(args):
                return _package_name(args[i + 1], kind)
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return _package_name(arg, kind)
    return None


def node_major(version: str) -> int | None:
    """``node --version``'s answer (``v20.20.2``) → 20; None when it is not one."""
    head = version.strip().removeprefix("v").split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def registry_agents(feed: Any, platform: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The feed's agents for ``platform`` (one of ``PLATFORMS``, or None: no binaries), and
    the problems of the entries left out.

    Each agent is ``{id, name, version, description, website?, repository?, license?,
    distribution: "npx"|"uvx"|"binary", args, env}`` plus ``command`` (npx, uvx: the
    executable; ``args`` follow it) or ``archive``, ``sha256?``, ``cmd`` (binary: ``cmd``
    relative to the unpacked archive, run with ``args``). Raises ValueError when the feed has
    no ``agents`` list or ``platform`` is not a registry platform.
    """
    if platform is not None and platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r} (one of {', '.join(sorted(PLATFORMS))})")
    if not isinstance(feed, dict) or not isinstance(feed.get("agents"), list):
        raise ValueError('the feed has no "agents" list')
    agents: list[dict[str, Any]] = []
    problems: list[str] = []
    seen: set[str] = set()
    raw_agents: list[Any] = feed["agents"]
    if len(raw_agents) > MAX_AGENTS:
        problems.append(f"the feed lists {len(raw_agents)} agents: only the first {MAX_AGENTS} are read")
    for index, raw in enumerate(raw_agents[:MAX_AGENTS]):
        label = f"agents[{index}]" + (f" ({raw['id']})" if isinstance(raw, dict) and isinstance(raw.get("id"), str) else "")
        try:
            entry = FeedAgent.model_validate(raw)
        except ValidationError as exc:
            problems.append(f"{label} left out: {_first_error(exc)}")
            continue
        if entry.id in seen:
            problems.append(f"{label} left out: the id {entry.id!r} is listed twice")
            continue
        info: dict[str, Any] = {"id": entry.id, "name": entry.name, "version": entry.version, "description": entry.description}
        for key in ("website", "repository", "license"):
            if getattr(entry, key):
                info[key] = getattr(entry, key)
        d = entry.distribution
        if d.npx or d.uvx:
            kind: Literal["npx", "uvx"] = "npx" if d.npx else "uvx"
            package = d.npx or d.uvx
            assert package is not None
            command, args = package_line(kind, package)
            agents.append({**info, "distribution": kind, "command": command, "args": args, "env": dict(package.env)})
        elif d.binary and platform in d.binary:
            target = d.binary[platform]
            if not archive_allowed(target.archive):
                problems.append(f"{label} left out: its archive for {platform} is not an https URL: {target.archive}")
            elif not relative_inside(target.cmd):
                problems.append(f"{label} left out: its cmd {target.cmd!r} is not a relative path inside the archive")
            else:
                binary = {"archive": target.archive, "cmd": target.cmd, **({"sha256": target.sha256.lower()} if target.sha256 else {})}
                agents.append({**info, "distribution": "binary", **binary, "args": list(target.args), "env": dict(target.env)})
        else:
            problems.append(f"{label} left out: no distribution for {platform or 'this platform'}")
        seen.add(entry.id)
    return agents, problems
