"""The real agents' releases: which package each is, what the tests pin, and the newest one
published (asked of npm with ``npm view`` and of PyPI with ``pip index versions``, their
ordinary clients). Used by ``repin.py`` (``make repin-agents``) and ``newest.py``
(``make real-agents-newest``); docs/agents.md, "Presets" and "Against the newest releases".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PACKAGE_JSON = HERE / "package.json"
FAST_AGENT_REQUIREMENTS = HERE / "fast-agent-requirements.txt"


@dataclass(frozen=True)
class Agent:
    """One real agent: ``name`` (the docs' and the table's), its package on ``registry``
    ("npm" or "pypi"), and the real-agent test files that drive it."""

    name: str
    package: str
    registry: str
    suites: tuple[str, ...]


AGENTS: tuple[Agent, ...] = (
    Agent("claude", "@agentclientprotocol/claude-agent-acp", "npm", ("test_claude_bridge.py", "test_claude_direct.py", "test_claude_sessions.py", "test_sign_in.py", "test_bench_sessions.py")),
    Agent("codex", "@agentclientprotocol/codex-acp", "npm", ("test_codex_bridge.py",)),
    Agent("gemini", "@google/gemini-cli", "npm", ("test_gemini_bridge.py", "test_gemini_files.py")),
    Agent("fast-agent", "fast-agent-mcp", "pypi", ("test_fast_agent_bridge.py",)),
)
#: Suites that drive several agents (their tests name the agent): run with every agent, reported on their own row.
SHARED_SUITES = ("test_live_output.py", "test_controls_real.py")


def pinned() -> dict[str, str]:
    """package → the version the tests pin (``package.json``, ``fast-agent-requirements.txt``)."""
    versions = dict(json.loads(PACKAGE_JSON.read_text())["dependencies"])
    for line in FAST_AGENT_REQUIREMENTS.read_text().splitlines():
        if line.startswith("fast-agent-mcp=="):
            versions["fast-agent-mcp"] = line.split("==", 1)[1].strip()
    return versions


def newest(agent: Agent) -> str:
    """The newest release of ``agent``'s package (npm's ``latest`` tag; PyPI's newest final a
    Python 3.13 can install).
    Raises ``RuntimeError`` when the registry cannot say."""
    if agent.registry == "npm":
        out = _run(["npm", "view", agent.package, "version", "--json"])
        version = json.loads(out)
        if isinstance(version, list):  # npm answers a list when several match
            version = version[-1]
    else:
        # Asked with the Python it runs on: pip lists only the releases that Python can install.
        out = _run([python313(), "-m", "pip", "index", "versions", agent.package, "--disable-pip-version-check"])
        match = re.match(rf"{re.escape(agent.package)} \(([^)]+)\)", out.strip())
        version = match.group(1) if match else None
    if not isinstance(version, str) or not re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", version):
        raise RuntimeError(f"{agent.registry} gave no version for {agent.package}: {out[:200]!r}")
    return version


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[:300]}")
    return done.stdout


def python313() -> str:
    """A Python 3.13 (fast-agent needs it): ``$PYTHON313``, else ``python3.13`` on PATH, else
    pyenv's (each must run: a pyenv shim answers for versions not active). Raises
    ``RuntimeError`` when there is none."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    for candidate in [os.environ.get("PYTHON313", ""), "python3.13", *sorted(str(p) for p in pyenv.glob("versions/3.13*/bin/python3.13"))]:
        try:
            if candidate and subprocess.run([candidate, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 13))"], capture_output=True, check=False).returncode == 0:
                return candidate
        except OSError:
            continue
    raise RuntimeError("no Python 3.13 (fast-agent needs it): set PYTHON313")


def make_venv(venv: Path, *requirements: str) -> Path:
    """A Python 3.13 virtual environment at ``venv`` holding ``requirements`` (pip's forms); its python."""
    subprocess.run([python313(), "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements], check=True)
    return python
