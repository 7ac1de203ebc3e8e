"""Agent configuration: which ACP agents the daemon offers as models.

Agents come from, in increasing precedence (a later spec with the same id
replaces an earlier one): the built-in ``demo`` agent (only when nothing else
is configured), a config file, ``lmbridge serve --agent ID=COMMAND``, and
``initialize.agents``.

Config file (JSON)::

    {"agents": [{"id": "claude", "name": "Claude Code", "command": "npx",
                 "args": ["@zed-industries/claude-agent-acp"], "env": {}}],
     "idleTimeout": 1800}
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from lmbridge import __version__
from lmbridge.agent_models import Choice, model_id
from lmbridge.wire import AgentSpec, Capabilities, ModelInfo

MAX_INPUT_TOKENS = 200_000
MAX_OUTPUT_TOKENS = 64_000


def demo_agent() -> AgentSpec:
    """The built-in demo agent: this Python running ``lmbridge demo-agent``."""
    return AgentSpec(id="demo", name="lmbridge demo agent", command=sys.executable, args=["-m", "lmbridge", "demo-agent"])


def parse_agent_option(value: str) -> AgentSpec:
    """``ID=COMMAND`` (COMMAND split shell-style) → AgentSpec.

    Raises ``ValueError`` naming what is wrong.
    """
    ident, sep, command = value.partition("=")
    words = shlex.split(command) if sep else []
    if not ident.strip() or not words:
        raise ValueError(f"--agent expects ID=COMMAND, got {value!r}")
    return AgentSpec(id=ident.strip(), command=words[0], args=words[1:])


def load_config(path: Path) -> tuple[list[AgentSpec], float | None]:
    """Read a config file: (agents, idleTimeout seconds or None).

    Raises ``ValueError`` with the file name and the problem.
    """
    try:
        data = json.loads(path.read_text())
        agents = [AgentSpec.model_validate(a) for a in data.get("agents", [])]
        idle = data.get("idleTimeout")
        return agents, (float(idle) if idle is not None else None)
    except (OSError, ValueError, ValidationError, AttributeError, TypeError) as exc:
        raise ValueError(f"config file {path}: {exc}") from exc


def merge(*sources: Iterable[AgentSpec]) -> dict[str, AgentSpec]:
    """Agents by id, later sources winning; the demo agent when there are none."""
    out: dict[str, AgentSpec] = {}
    for source in sources:
        for spec in source:
            out[spec.id] = spec
    return out or {"demo": demo_agent()}


def model_info(spec: AgentSpec, choice: Choice | None = None) -> ModelInfo:
    """The ``LanguageModelChatInformation`` VS Code shows for an agent, or for one of its
    own models (``choice``, a value of its ``model`` config option: agent_models)."""
    name = spec.name or spec.id
    return ModelInfo(
        id=spec.id if choice is None else model_id(spec.id, choice.value),
        name=name if choice is None else f"{name} · {choice.name}",
        family="acp",
        version=__version__,
        maxInputTokens=MAX_INPUT_TOKENS,
        maxOutputTokens=MAX_OUTPUT_TOKENS,
        capabilities=Capabilities(toolCalling=True, imageInput=False),
        tooltip=f"ACP agent: {shlex.join([spec.command, *spec.args])}",
        detail="ACP agent",
    )
