"""How to run the real fast-agent (PyPI ``fast-agent-mcp``) as an ACP agent offline.

Recipe (checked with fast-agent-mcp 0.10.48, Python 3.13)::

    make real-agent-deps   # tests/real_agent/install.sh: a venv in the test cache (cache.py)
    env -u IS_SANDBOX HOME=<scratch> \\
        ~/.cache/lmbridge-test/fast-agent-0.10.48/bin/fast-agent-acp \\
        --config-path <scratch>/fastagent.config.yaml --home <scratch>/fast-agent-home \\
        --model generic.fake-model --servers shell --no-shell

with a fake OpenAI Chat Completions API (``tests/fakes/fake_openai_chat.py``) listening
on PORT, named in the config file::

    default_model: generic.fake-model
    generic: {api_key: x, base_url: "http://127.0.0.1:PORT/v1"}
    mcp:
      servers:
        shell: {command: <python>, args: [tests/fakes/shell_mcp.py]}

- ``generic.<model>`` is fast-agent's OpenAI-compatible **Chat Completions** provider
  (``openai.<model>`` speaks the Responses API). It streams (``stream: true``,
  ``stream_options.include_usage``).
- fast-agent asks ``session/request_permission`` for **MCP tools** only (its aggregator's
  permission handler), and for ACP terminals and fs when the client offers them (lmbridge
  does not). Its own local shell (``--shell``) never asks, so it stays off (``--no-shell``):
  the ``shell`` MCP server (``tests/fakes/shell_mcp.py``, ``run_command``) is what it
  asks about. MCP servers from ``session/new`` (lmbridge's ``vscode`` server) ask too.
- Everything it writes (sessions, permissions ``auths.md``, logs) goes under ``--home``
  and ``HOME`` in the scratch folder.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.real_agent.cache import FAST_AGENT_VENV, FAST_AGENT_VERSION, missing

AGENT_ENTRY = FAST_AGENT_VENV / "bin" / "fast-agent-acp"
MODEL = "generic.fake-model"
SHELL_MCP = Path(__file__).resolve().parents[1] / "fakes" / "shell_mcp.py"

# Variables that must never reach the agent: this machine sets IS_SANDBOX=yes (claude.py);
# provider keys and proxies of the caller's environment must not reach it either.
REMOVED_ENV_VARS = ("IS_SANDBOX",)
REMOVED_ENV_PREFIXES = ("OPENAI_", "GENERIC_", "ANTHROPIC_", "FAST_AGENT_", "HF_", "GOOGLE_", "GEMINI_")


class RealAgentNotInstalled(RuntimeError):
    pass


def is_installed() -> bool:
    return AGENT_ENTRY.is_file()


def fast_agent_command(config: Path, home: Path, *extra: str, model: str = MODEL, shell: bool = False) -> list[str]:
    """argv that starts fast-agent speaking ACP on its stdio with ``config``. ``shell``:
    its own local shell (``--shell``), which runs commands without asking; else
    ``--no-shell``, which also keeps skills from turning it on."""
    if not AGENT_ENTRY.is_file():
        raise RealAgentNotInstalled(missing(AGENT_ENTRY, f"fast-agent-mcp {FAST_AGENT_VERSION}"))
    shell_flag = "--shell" if shell else "--no-shell"
    return [str(AGENT_ENTRY), "--config-path", str(config), "--home", str(home), "--model", model, "--servers", "shell", shell_flag, *extra]


def write_config(folder: Path, base_url: str) -> Path:
    """``fastagent.config.yaml`` in ``folder``: the fake as the generic provider, the
    ``shell`` MCP server, its log in ``folder/fast-agent.log.jsonl``. JSON is YAML, so
    it is written as JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "default_model": MODEL,
        "generic": {"api_key": "x", "base_url": base_url.rstrip("/") + "/v1"},
        # Its log (warnings and errors, JSON lines) beside the config: a failed request's reason.
        "logger": {"type": "file", "level": "warning", "path": str(folder / "fast-agent.log.jsonl"), "progress_display": False, "show_chat": False, "show_tools": False},
        "mcp": {"servers": {"shell": {"command": sys.executable, "args": [str(SHELL_MCP)]}}},
    }
    path = folder / "fastagent.config.yaml"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def fast_agent_env(home: Path) -> dict[str, str]:
    """The extra environment variables: a scratch ``HOME``, no proxy for the loopback fake."""
    home.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"}


def agent_environ(extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) minus IS_SANDBOX, provider keys and proxies, plus ``extra``."""
    env = dict(os.environ if base is None else base)
    for name in list(env):
        if name in REMOVED_ENV_VARS or name.startswith(REMOVED_ENV_PREFIXES) or name.lower() in ("http_proxy", "https_proxy", "all_proxy"):
            env.pop(name)
    env.update(extra or {})
    return env


def fast_agent_launch(scratch: Path, base_url: str, *extra: str, model: str = MODEL, shell: bool = False) -> tuple[list[str], dict[str, str]]:
    """``(argv, extra environment)`` to start fast-agent against ``base_url``, its files in ``scratch``."""
    config = write_config(scratch / "fast-agent", base_url)
    argv = fast_agent_command(config, scratch / "fast-agent" / "home", *extra, model=model, shell=shell)
    return argv, fast_agent_env(scratch / "home")


@asynccontextmanager
async def fast_agent_bridge(
    tmp_path: Path, base_url: str, *args: str, agent_args: tuple[str, ...] = (), model: str = MODEL, shell: bool = False
) -> AsyncIterator[Any]:
    """``lmbridge serve *args`` (an initialized ``lmbridge.devtools.client.DaemonClient``) with
    fast-agent as model ``fast-agent`` against ``base_url``. Its state folder, fast-agent's
    config, home and HOME, and the daemon's stderr (``daemon.stderr``) live in
    ``tmp_path``; the workspace (every session's cwd) is ``tmp_path / "workspace"``."""
    from lmbridge.devtools.client import DaemonClient

    argv, agent_env = fast_agent_launch(tmp_path, base_url, *agent_args, model=model, shell=shell)
    spec = {"id": "fast-agent", "name": "fast-agent", "command": argv[0], "args": argv[1:], "env": agent_env}
    env = agent_environ({"LMBRIDGE_LOG_LEVEL": "info", "XDG_STATE_HOME": str(tmp_path / "state")})
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    with open(tmp_path / "daemon.stderr", "ab") as stderr:
        async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve", *args], env=env, stderr=stderr) as client:
            await client.initialize(workspace=[str(workspace)], agents=[spec])
            yield client
            await client.close(timeout=60)  # EOF: the daemon stops the agent, ~1-3 s idle (4.5 s loaded)
