"""How to run the real ``@zed-industries/codex-acp`` agent offline.

Recipe (checked with codex-acp 0.16.0, codex core 0.137.0)::

    make real-agent-deps   # tests/real_agent/install.sh: into the test cache (cache.py)
    env -u IS_SANDBOX HOME=<scratch> CODEX_HOME=<scratch>/.codex FAKE_OPENAI_API_KEY=x \\
        ~/.cache/lmbridge-test/agents/node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp

with ``$CODEX_HOME/config.toml`` naming a fake Responses API
(``tests/fakes/fake_openai_responses.py``) as the model provider (:func:`write_config`).
The binary is run directly (the npm wrapper ``codex-acp`` only finds and execs it).
Its only command-line option is ``-c key=value``.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.real_agent.cache import missing, npm_package
from tests.real_agent.claude import agent_environ

AGENT_PACKAGE = "@zed-industries/codex-acp"
AGENT_VERSION = "0.16.0"
BINARY_PACKAGE = "@zed-industries/codex-acp-linux-x64"
AGENT_BINARY = npm_package(BINARY_PACKAGE) / "bin" / "codex-acp"
#: The variable the fake provider's ``env_key`` names.
KEY_VAR = "FAKE_OPENAI_API_KEY"
MODEL = "gpt-5.4"  # a model codex knows: an unknown one puts a metadata warning into the answer


class RealAgentNotInstalled(RuntimeError):
    pass


def is_installed() -> bool:
    return AGENT_BINARY.is_file() and sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


def codex_agent_command() -> list[str]:
    """argv that starts codex-acp speaking ACP on its stdio."""
    if not AGENT_BINARY.is_file():
        raise RealAgentNotInstalled(missing(AGENT_BINARY, BINARY_PACKAGE))
    return [str(AGENT_BINARY)]


def config_toml(base_url: str, *, logged_in: bool = True) -> str:
    """``config.toml`` for a provider ``fake`` at ``base_url`` (``http://127.0.0.1:PORT/v1``)
    whose key is in ``$FAKE_OPENAI_API_KEY``. ``logged_in=False``: codex's built-in
    ``openai`` provider (pointed at ``base_url`` all the same) with no key anywhere, so
    codex is not logged in at all (a custom provider without ``env_key`` needs no login)."""
    lines = [
        f'model = "{MODEL}"',
        'approval_policy = "untrusted"',  # asks before commands (on-request does not)
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
    ]
    if not logged_in:
        return "\n".join([*lines, f'openai_base_url = "{base_url}"']) + "\n"
    lines += [
        'model_provider = "fake"',
        "",
        "[model_providers.fake]",
        'name = "fake"',
        f'base_url = "{base_url}"',
        'wire_api = "responses"',
        f'env_key = "{KEY_VAR}"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
    ]
    return "\n".join(lines) + "\n"


def codex_agent_env(home: Path, base_url: str, *, logged_in: bool = True) -> dict[str, str]:
    """The extra environment variables for codex-acp against a fake Responses API, with its
    ``config.toml`` written into ``home/.codex`` (``CODEX_HOME``). Merge into the
    environment with :func:`agent_environ` (drops ``IS_SANDBOX``)."""
    home = Path(home)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(config_toml(base_url, logged_in=logged_in), encoding="utf-8")
    env = {
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "RUST_LOG": "warn",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    if logged_in:
        env[KEY_VAR] = "x"
    return env


def codex_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``os.environ`` without ``IS_SANDBOX``, proxies and any real OpenAI/codex settings,
    plus ``extra``."""
    env = agent_environ()
    for name in list(env):
        if name.startswith(("OPENAI_", "CODEX_")) or name == KEY_VAR:
            env.pop(name)
    env.update(extra or {})
    return env


def codex_agent_launch(home: Path, base_url: str, *, logged_in: bool = True) -> tuple[list[str], dict[str, str]]:
    """``(argv, full environment)`` to start codex-acp against ``base_url``."""
    return codex_agent_command(), codex_environ(codex_agent_env(home, base_url, logged_in=logged_in))


@asynccontextmanager
async def codex_bridge(tmp_path: Path, base_url: str, *args: str, logged_in: bool = True) -> AsyncIterator[Any]:
    """``lmbridge serve *args`` (an initialized ``lmbridge.devtools.client.DaemonClient``) with codex as
    model ``codex`` against ``base_url``. Its state folder, codex's HOME and the daemon's
    stderr (``daemon.stderr``) live in ``tmp_path``; the workspace is ``tmp_path/work``."""
    from lmbridge.devtools.client import DaemonClient

    (tmp_path / "work").mkdir(exist_ok=True)
    spec = {
        "id": "codex",
        "name": "Codex",
        "command": codex_agent_command()[0],
        "args": [],
        "env": codex_agent_env(tmp_path / "home", base_url, logged_in=logged_in),
    }
    env = codex_environ({"LMBRIDGE_LOG_LEVEL": "info", "XDG_STATE_HOME": str(tmp_path / "state")})
    with open(tmp_path / "daemon.stderr", "ab") as stderr:
        async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve", *args], env=env, stderr=stderr) as client:
            await client.initialize(workspace=[str(tmp_path / "work")], agents=[spec])
            yield client
            await client.close(timeout=60)  # EOF: the daemon stops the agent, ~1-3 s idle (4.5 s loaded)
