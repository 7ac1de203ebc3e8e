"""Where ``tests/real_agent/install.sh`` puts the real agents: the test cache, outside the
clone (``$LMBRIDGE_TEST_CACHE``, default ``~/.cache/lmbridge-test``), reused by CI.

``npm_package(name)`` is an installed npm agent's folder; ``FAST_AGENT_VENV`` the virtual
environment holding fast-agent. ``missing(path, what)`` is the message a test fails with
when something is not installed: run ``make real-agent-deps``.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("LMBRIDGE_TEST_CACHE") or Path.home() / ".cache" / "lmbridge-test")
NODE_MODULES = CACHE / "agents" / "node_modules"


def _fast_agent_version() -> str:
    for line in (HERE / "fast-agent-requirements.txt").read_text().splitlines():
        if line.startswith("fast-agent-mcp=="):
            return line.split("==", 1)[1].strip()
    raise RuntimeError("fast-agent-requirements.txt pins no fast-agent-mcp")


FAST_AGENT_VERSION = _fast_agent_version()
#: ``$LMBRIDGE_FAST_AGENT_VENV`` names another (``newest.py``: the newest release, installed apart).
FAST_AGENT_VENV = Path(os.environ["LMBRIDGE_FAST_AGENT_VENV"]) if os.environ.get("LMBRIDGE_FAST_AGENT_VENV") else CACHE / f"fast-agent-{FAST_AGENT_VERSION}"


def npm_package(name: str) -> Path:
    """The folder of npm package ``name`` (``@scope/pkg``) in the agents' install."""
    return NODE_MODULES / name


def missing(path: Path, what: str) -> str:
    return f"{what} is not installed ({path} missing): run `make real-agent-deps` (tests/real_agent/install.sh)"
