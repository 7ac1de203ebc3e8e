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

What a feed may not do (docs/vscode-shim.md, "What the registry may not do"): an entry is
left out when a ``package``, ``cmd``, argument, environment variable or archive URL is not
what it seems. A package is a plain npm or PyPI package spec (``PACKAGE_GRAMMAR``): never an
option of the package manager (``--call=…``, ``--with=…``), a path, a URL, a git or alias
spec, or anything with whitespace; a ``cmd`` is a plain command name (npx, uvx) or a plain
relative path (binary); no text holds a control or format character; no environment
variable is one a package manager, a loader or an interpreter reads (``REFUSED_ENV``);
an archive URL is ``https://host/…``
(``http://127.0.0.1…`` only) with no user name, backslash, fragment, or host that a browser
would read as another (``URL_GRAMMAR``). The shim applies the same rules to what it installs
(vscode-shim/src/product/registry.ts), and both are tested against one table
(tests/fixtures/registry_rules.json).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: The registry's platform names (its FORMAT: ``<os>-<arch>``).
PLATFORMS = frozenset({"darwin-aarch64", "darwin-x86_64", "linux-aarch64", "linux-x86_64", "windows-aarch64", "windows-x86_64"})

#: Most agents read from one feed (the public registry lists a few dozen).
MAX_AGENTS = 1000

Kind = Literal["npx", "uvx", "binary"]


# ---------------------------------------------------------------- what a feed may not do

_NPM_PART = r"[a-z0-9][a-z0-9._~-]*"
_PY_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_PY_VERSION = r"[A-Za-z0-9][A-Za-z0-9.+!*_-]*"
_PY_OP = r"(?:===|==|!=|<=|>=|~=|<|>)"

#: A package spec each package manager reads as a package of its registry and nothing else:
#: npm ``[@scope/]name[@version|@tag|@range]`` (lower case, as npm names new packages), PyPI
#: ``name[extras][@version|<op>version,…]``. No leading ``-`` (an option: ``--call=CMD``,
#: ``--with=PKG``), no whitespace, ``:``, ``/`` outside an npm scope, ``#`` or ``\``: so no
#: URL, path, git, ``github:`` or ``npm:`` alias spec, and no GitHub ``user/repo``.
PACKAGE_GRAMMAR: dict[Literal["npx", "uvx"], re.Pattern[str]] = {
    "npx": re.compile(rf"(?:@{_NPM_PART}/)?{_NPM_PART}(?:@[A-Za-z0-9^~<>=*][A-Za-z0-9.+_^~<>=*-]*)?"),
    "uvx": re.compile(rf"{_PY_NAME}(?:\[{_PY_NAME}(?:,{_PY_NAME})*\])?(?:@{_PY_VERSION}|{_PY_OP}{_PY_VERSION}(?:,{_PY_OP}{_PY_VERSION})*)?"),
}

#: npm (npm-package-arg) reads a spec ending so as a file to install, uv as a local archive.
ARCHIVE_ENDINGS = (".tgz", ".tar", ".gz", ".bz2", ".xz", ".zip", ".whl", ".egg")

#: The command a package runs (``npx --package P <cmd>``, ``uvx --from P <cmd>``): a plain
#: name. npx runs it through a shell unquoted, so nothing a shell reads is allowed.
COMMAND_GRAMMAR = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

#: A binary's ``cmd``: a relative path of plain names (``./bin/agent``, ``agent.exe``).
BINARY_CMD_GRAMMAR = re.compile(r"(?:\./)?[A-Za-z0-9_.][A-Za-z0-9._+-]*(?:/[A-Za-z0-9_.][A-Za-z0-9._+-]*)*")

#: An environment variable's name.
ENV_NAME_GRAMMAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: Variables an entry may not set, by why (compared in upper case: npm reads ``npm_config_*``
#: in any case, curl and pip ``https_proxy``): each changes what a package manager fetches,
#: where it or the agent reads its configuration, which certificates are trusted, or what a
#: loader or interpreter runs before the agent's own code. Names, then prefixes.
REFUSED_ENV: dict[str, tuple[str, str]] = {
    "where programs and configuration are found": (
        "PATH PATHEXT HOME USERPROFILE APPDATA LOCALAPPDATA COMSPEC SHELL TMPDIR TEMP TMP XDG_CONFIG_HOME XDG_CONFIG_DIRS XDG_DATA_HOME XDG_DATA_DIRS XDG_CACHE_HOME XDG_RUNTIME_DIR",
        "",
    ),
    "shells, and the programs tools start": (
        "BASH_ENV ENV SHELLOPTS BASHOPTS PS4 IFS CDPATH PROMPT_COMMAND EDITOR VISUAL PAGER BROWSER LESSOPEN LESSCLOSE SSH_ASKPASS SUDO_ASKPASS",
        "BASH_FUNC_",
    ),
    "the network: proxies, trusted certificates, name resolution": (
        "HTTP_PROXY HTTPS_PROXY ALL_PROXY NO_PROXY FTP_PROXY REQUESTS_CA_BUNDLE CURL_CA_BUNDLE HOSTALIASES RES_OPTIONS LOCALDOMAIN SSLKEYLOGFILE",
        "SSL_ OPENSSL_",
    ),
    "package managers (npm_config_registry, npm_config_userconfig, UV_INDEX_URL, PIP_INDEX_URL, git's GIT_SSH_COMMAND)": (
        "GOFLAGS GOPROXY GOPATH GOTOOLCHAIN",
        "NPM_ NODE_ YARN_ PNPM_ COREPACK_ BUN_ DENO_ PYTHON PIP_ PIPX_ UV_ VIRTUAL_ENV CONDA CARGO_ GEM_ BUNDLE_ GIT_",
    ),
    "loaders, runtimes and their hooks (LD_PRELOAD, NODE_OPTIONS, PYTHONPATH)": (
        "GCONV_PATH GLIBC_TUNABLES LOCPATH NLSPATH CLASSPATH JAVA_TOOL_OPTIONS _JAVA_OPTIONS JDK_JAVA_OPTIONS PERLLIB",
        "LD_ DYLD_ MALLOC_ DOTNET_ CORECLR_ COMPLUS_ ELECTRON_ RUBY PERL5",
    ),
    "compilers an install may run (native npm modules, source distributions)": (
        "CC CXX CPP LD CFLAGS CXXFLAGS CPPFLAGS LDFLAGS MAKEFLAGS RUSTC_WRAPPER RUSTFLAGS",
        "",
    ),
    "lmbridge's own (the MCP relay an agent starts reads them)": ("", "LMBRIDGE_"),
}
REFUSED_ENV_NAMES = frozenset(name for names, _ in REFUSED_ENV.values() for name in names.split())
REFUSED_ENV_PREFIXES = tuple(prefix for _, prefixes in REFUSED_ENV.values() for prefix in prefixes.split())

_UNSEEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs"})


def plain_text(text: str) -> bool:
    """Whether ``text`` shows as it is: no control, format (bidi, zero-width), line or
    paragraph separator, private-use or surrogate character."""
    return not any(unicodedata.category(c) in _UNSEEN for c in text)


def package_allowed(kind: Literal["npx", "uvx"], package: str) -> bool:
    """Whether ``package`` is a plain package spec of ``kind``'s registry (``PACKAGE_GRAMMAR``)."""
    return PACKAGE_GRAMMAR[kind].fullmatch(package) is not None and not package.lower().endswith(ARCHIVE_ENDINGS)


def command_allowed(cmd: str) -> bool:
    """Whether ``cmd`` is a plain command name (``COMMAND_GRAMMAR``)."""
    return COMMAND_GRAMMAR.fullmatch(cmd) is not None


def env_refused(name: str) -> bool:
    """Whether an entry may not set ``name``: not a plain name, or one of ``REFUSED_ENV_NAMES``
    or ``REFUSED_ENV_PREFIXES`` (case-insensitively)."""
    upper = name.upper()
    return ENV_NAME_GRAMMAR.fullmatch(name) is None or upper in REFUSED_ENV_NAMES or upper.startswith(REFUSED_ENV_PREFIXES)


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_PCHAR = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})"

#: An archive's (and the feed's) URL: ``scheme://host[:port][/path][?query]`` and nothing
#: more: no user name (``http://evil@127.0.0.1``), no backslash (a browser reads
#: ``http://evil\@127.0.0.1/`` as host ``evil``, Python's urllib as ``127.0.0.1``), no
#: fragment, whitespace or non-ASCII, no IPv6 literal.
URL_GRAMMAR = re.compile(rf"(https|http)://({_LABEL}(?:\.{_LABEL})*)(?::([1-9][0-9]{{0,4}}))?((?:/{_PCHAR}*)*)(?:\?(?:{_PCHAR}|[/?])*)?")
_IPV4 = re.compile(r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}")
_NUMBER = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")


def url_allowed(url: str) -> bool:
    """Whether lmbridge fetches from ``url``: ``URL_GRAMMAR``, https, or plain http from
    127.0.0.1 only. A host whose last label is a number is an IPv4 address to a browser
    (``0x7f.1``, ``2130706433`` are 127.0.0.1): only its dotted-decimal form is accepted."""
    m = URL_GRAMMAR.fullmatch(url)
    if m is None or (m.group(3) is not None and int(m.group(3)) > 65535):
        return False
    scheme, host = m.group(1), m.group(2)
    if _NUMBER.fullmatch(host.rsplit(".", 1)[-1]) and not _IPV4.fullmatch(host):
        return False
    return scheme == "https" or host == "127.0.0.1"


def relative_inside(cmd: str) -> bool:
    """Whether ``cmd`` (``./bin/agent``) is a plain relative path (``BINARY_CMD_GRAMMAR``) that stays inside its folder."""
    parts = cmd.split("/")
    return BINARY_CMD_GRAMMAR.fullmatch(cmd) is not None and ".." not in parts and any(p not in ("", ".") for p in parts)


# ---------------------------------------------------------------- the feed's schema


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
    args: list[str] = Field(default=[], max_length=100)
    env: dict[str, str] = {}


class BinaryTarget(_Lenient):
    """``distribution.binary.<platform>``: an archive (or a raw executable) to unpack and run."""

    archive: str = Field(min_length=1, max_length=2000)
    sha256: str | None = Field(default=None, pattern=r"^[A-Fa-f0-9]{64}$")
    cmd: str = Field(min_length=1, max_length=300)
    args: list[str] = Field(default=[], max_length=100)
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


def package_line(kind: Literal["npx", "uvx"], d: PackageDistribution) -> tuple[str, list[str]]:
    """The command line that runs a package distribution (the registry's FORMAT, "Distribution Types")."""
    if kind == "npx":
        return "npx", (["-y", "--package", d.package, d.cmd] if d.cmd else ["-y", d.package]) + d.args
    return "uvx", (["--from", d.package, d.cmd] if d.cmd else [d.package]) + d.args


def _text_refusal(name: str, args: list[str], env: dict[str, str]) -> str | None:
    """Why an entry's name, arguments or environment are refused (None: they are not)."""
    if not plain_text(name):
        return f"its name {name!r} holds a control or format character"
    for arg in args:
        if not plain_text(arg):
            return f"its argument {arg!r} holds a control or format character"
    for key, value in env.items():
        if env_refused(key):
            return f"its env sets {key!r}, which a registry entry may not set (a package manager, loader or interpreter reads it)"
        if not plain_text(value):
            return f"its env value of {key} holds a control or format character"
    return None


def _package_refusal(kind: Literal["npx", "uvx"], d: PackageDistribution) -> str | None:
    """Why a package distribution is refused (None: it is not)."""
    if not package_allowed(kind, d.package):
        return f"its {kind} package {d.package!r} is not a plain {'npm' if kind == 'npx' else 'PyPI'} package spec"
    if d.cmd is not None and not command_allowed(d.cmd):
        return f"its {kind} cmd {d.cmd!r} is not a plain command name"
    return None
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
    relative to the unpacked archive, run with ``args``). An entry is left out when it does
    not validate or does what this module's docstring says a feed may not. Raises ValueError
    when the feed has no ``agents`` list or ``platform`` is not a registry platform.
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
            refusal = _package_refusal(kind, package) or _text_refusal(entry.name, package.args, package.env)
            if refusal:
                problems.append(f"{label} left out: {refusal}")
            else:
                command, args = package_line(kind, package)
                agents.append({**info, "distribution": kind, "command": command, "args": args, "env": dict(package.env)})
        elif d.binary and platform in d.binary:
            target = d.binary[platform]
            if not url_allowed(target.archive):
                problems.append(f"{label} left out: its archive for {platform} is not an https URL lmbridge accepts: {target.archive!r}")
            elif not relative_inside(target.cmd):
                problems.append(f"{label} left out: its cmd {target.cmd!r} is not a relative path inside the archive")
            elif refusal := _text_refusal(entry.name, target.args, target.env):
                problems.append(f"{label} left out: {refusal}")
            else:
                binary = {"archive": target.archive, "cmd": target.cmd, **({"sha256": target.sha256.lower()} if target.sha256 else {})}
                agents.append({**info, "distribution": "binary", **binary, "args": list(target.args), "env": dict(target.env)})
        else:
            problems.append(f"{label} left out: no distribution for {platform or 'this platform'}")
        seen.add(entry.id)
    return agents, problems
