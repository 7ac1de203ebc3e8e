"""An agent's own models and modes as VS Code sees them (docs/sessions.md, "The agent's models and modes"). Pure: no I/O.

An ACP agent lists its settings in ``configOptions`` (in the answers to
``session/new``, ``session/resume``, ``session/load``): each a ``select`` with an
``id``, a ``category`` (``model``, ``mode``, ``thought_level``, ...), a ``currentValue``
and its ``options`` (``value``, ``name``; possibly in groups). The values of the option
of category ``model`` become models in VS Code's picker, one per value, with the id
``<agent id>/<value>`` (claude-agent-acp 0.23.1: ``claude/opus[1m]``, shown as
"Claude Code · Opus (1M context)"); the agent's own entry (id ``<agent id>``) keeps the
agent's default. A chat on one of them gets ``session/set_config_option`` for that
value before its prompt. The ``mode`` option is set from the agent's ``mode`` setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SEPARATOR = "/"


@dataclass(frozen=True)
class Choice:
    """One value of a select option: what ``session/set_config_option`` sends, and its label."""

    value: str
    name: str


@dataclass(frozen=True)
class SelectOption:
    """One ``select`` config option of an agent (ACP ``SessionConfigOptionSelect``)."""

    id: str
    name: str
    category: str | None
    choices: tuple[Choice, ...]


def select_options(config_options: Any) -> tuple[SelectOption, ...]:
    """The well-formed ``select`` options of a ``configOptions`` list (anything else is
    skipped: agents' answers are not trusted). Grouped values are flattened."""
    out = []
    for raw in config_options if isinstance(config_options, list) else []:
        if not isinstance(raw, dict) or raw.get("type") != "select" or not isinstance(raw.get("id"), str):
            continue
        values = []
        entries = raw.get("options")
        for entry in entries if isinstance(entries, list) else []:
            group = entry.get("options") if isinstance(entry, dict) and "value" not in entry else None
            for item in group if isinstance(group, list) else [entry]:
                if isinstance(item, dict) and isinstance(item.get("value"), str):
                    name = item.get("name")
                    values.append(Choice(item["value"], name if isinstance(name, str) and name else item["value"]))
        category = raw.get("category") if isinstance(raw.get("category"), str) else None
        label = raw.get("name")
        out.append(SelectOption(raw["id"], label if isinstance(label, str) else raw["id"], category, tuple(values)))
    return tuple(out)


def of_category(options: tuple[SelectOption, ...], category: str) -> SelectOption | None:
    """The first option of ``category`` (``model``, ``mode``), if the agent has one."""
    return next((o for o in options if o.category == category), None)


def model_id(agent_id: str, value: str) -> str:
    """The VS Code model id of one of an agent's models."""
    return f"{agent_id}{SEPARATOR}{value}"


def split_model_id(model: str, agents: Any) -> tuple[str, str | None] | None:
    """``(agent id, model value or None)`` for a VS Code model id, or None when it names no
    agent in ``agents`` (a mapping by id). An agent id wins over a split: ids may hold ``/``."""
    if model in agents:
        return model, None
    cut = model.rfind(SEPARATOR)
    while cut > 0:  # the longest agent id first: values may hold "/" too
        if model[:cut] in agents and cut + 1 < len(model):
            return model[:cut], model[cut + 1 :]
        cut = model.rfind(SEPARATOR, 0, cut)
    return None


def to_json(options: tuple[SelectOption, ...], current: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``options`` as the ``configOptions`` JSON they came from (for the state folder's
    cache); ``current``: option id → ``currentValue`` to keep (the agent's defaults)."""
    return [
        {
            "type": "select",
            "id": o.id,
            "name": o.name,
            "category": o.category,
            **({"currentValue": (current or {})[o.id]} if o.id in (current or {}) else {}),
            "options": [{"value": c.value, "name": c.name} for c in o.choices],
        }
        for o in options
    ]


def current_values(config_options: Any) -> dict[str, str]:
    """Option id → ``currentValue`` of a ``configOptions`` list (well-formed entries only)."""
    raw = config_options if isinstance(config_options, list) else []
    return {o["id"]: o["currentValue"] for o in raw if isinstance(o, dict) and isinstance(o.get("id"), str) and isinstance(o.get("currentValue"), str)}
