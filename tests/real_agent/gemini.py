"""How to run the real ``@google/gemini-cli`` (0.61.0) as an ACP agent offline.

Recipe (docs/agents.md, "Running them offline"; checked with gemini-cli 0.61.0, Node 20)::

    make real-agent-deps   # tests/real_agent/install.sh: into the test cache (cache.py)
    env -u IS_SANDBOX HOME=<scratch> GEMINI_CLI_NO_RELAUNCH=true \\
        GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT GEMINI_API_KEY=x \\
        node ~/.cache/lmbridge-test/agents/node_modules/@google/gemini-cli/bundle/gemini.js \\
        --acp -m gemini-2.5-flash

with a fake Gemini API (``tests/fakes/fake_gemini.py``) listening on PORT, and
``<scratch>/.gemini/settings.json`` as :func:`write_settings` writes it: API-key auth
selected, folder trust off (else an untrusted workspace restricts the tools), no
auto-update, no usage statistics, no telemetry, no IDE integration.
``GEMINI_CLI_NO_RELAUNCH=true`` keeps it to one process (it would otherwise re-spawn
itself with a bigger heap). ``IS_SANDBOX`` is dropped as for claude (:func:`agent_environ`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.real_agent.cache import missing, npm_package
from tests.real_agent.claude import RealAgentNotInstalled, agent_environ, node_executable

AGENT_PACKAGE = "@google/gemini-cli"
AGENT_VERSION = "0.61.0"
AGENT_ENTRY = npm_package(AGENT_PACKAGE) / "bundle" / "gemini.js"
MODEL = "gemini-2.5-flash"

SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "ide": {"enabled": False},
}


def gemini_agent_command() -> list[str]:
    """argv that starts gemini-cli speaking ACP on its stdio."""
    if not AGENT_ENTRY.is_file():
        raise RealAgentNotInstalled(missing(AGENT_ENTRY, AGENT_PACKAGE))
    return [node_executable(), str(AGENT_ENTRY), "--acp", "-m", MODEL]


def is_installed() -> bool:
    try:
        gemini_agent_command()
    except RealAgentNotInstalled:
        return False
    return True


def write_settings(home: Path) -> Path:
    """``home/.gemini/settings.json`` as the recipe wants it; returns its path."""
    path = Path(home) / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(SETTINGS, indent=2), encoding="utf-8")
    return path


def gemini_agent_env(home: Path, base_url: str, *, api_key: str | None = "x") -> dict[str, str]:
    """The extra environment variables for gemini-cli against a fake Gemini API at
    ``base_url`` (no ``/v1beta``), with a scratch ``home`` (settings written).
    ``api_key=None`` leaves the key out (``session/new`` then fails). Merge into the
    environment with :func:`agent_environ`."""
    write_settings(home)
    env = {
        "HOME": str(home),
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    if api_key is not None:
        env["GEMINI_API_KEY"] = api_key
    return env


def gemini_environ(home: Path, base_url: str, **kw: Any) -> dict[str, str]:
    """The agent's full environment: ours minus ``IS_SANDBOX``, proxies and any
    ``GEMINI_*``/``GOOGLE_*`` of the caller, plus :func:`gemini_agent_env`."""
    env = agent_environ()
    for name in list(env):
        if name.startswith(("GEMINI_", "GOOGLE_")):
            env.pop(name)
    env.update(gemini_agent_env(home, base_url, **kw))
    return env


@asynccontextmanager
async def gemini_bridge(
    tmp_path: Path, base_url: str, *args: str, api_key: str | None = "x", capabilities: dict[str, bool] | None = None
) -> AsyncIterator[Any]:
    """``lmbridge serve *args`` (an initialized ``lmbridge.devtools.client.DaemonClient``) with
    gemini-cli as model ``gemini`` against ``base_url``. Its state folder, gemini's HOME
    and the daemon's stderr (``daemon.stderr``) live in ``tmp_path``; the workspace (the
    agent's cwd) is ``tmp_path / "ws"``. ``api_key=None``: gemini-cli gets no key.
    ``capabilities``: ``initialize``'s ``clientCapabilities`` (the client then serves
    ``client/*`` through its ``on_request``, set before the first chat)."""
    from lmbridge.devtools.client import DaemonClient

    argv = gemini_agent_command()
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    spec = {"id": "gemini", "name": "Gemini CLI", "command": argv[0], "args": argv[1:], "env": gemini_agent_env(home, base_url, api_key=api_key)}
    env = agent_environ({"LMBRIDGE_LOG_LEVEL": "info", "XDG_STATE_HOME": str(tmp_path / "state")})
    for name in list(env):
        if name.startswith(("GEMINI_", "GOOGLE_")):
            env.pop(name)
    with open(tmp_path / "daemon.stderr", "ab") as stderr:
        async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve", *args], env=env, stderr=stderr) as client:
            await client.initialize(workspace=[str(workspace)], agents=[spec], capabilities=capabilities)
            yield client
            await client.close(timeout=60)  # EOF: the daemon stops the agent, ~1-3 s idle (4.5 s loaded)
