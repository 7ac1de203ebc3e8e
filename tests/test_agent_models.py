"""An agent's configOptions as VS Code models (docs/sessions.md): the pure part, agent_models.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core.agent_models import Choice, model_id, of_category, select_options, split_model_id

#: claude-agent-acp 0.23.1's session/new answer (docs/agents.md), as it comes.
CLAUDE = [
    {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "default",
     "options": [{"value": "default", "name": "Default"}, {"value": "acceptEdits", "name": "Accept Edits"},
                 {"value": "plan", "name": "Plan Mode"}, {"value": "dontAsk", "name": "Don't Ask"}]},
    {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "default",
     "options": [{"value": "default", "name": "Default (recommended)"}, {"value": "sonnet[1m]", "name": "Sonnet (1M context)"},
                 {"value": "opus[1m]", "name": "Opus (1M context)"}, {"value": "haiku", "name": "Haiku"}]},
]  # fmt: skip


def test_claudes_options_give_its_models_and_modes() -> None:
    options = select_options(CLAUDE)
    model = of_category(options, "model")
    mode = of_category(options, "mode")
    assert model is not None and model.id == "model"
    assert [c.value for c in model.choices] == ["default", "sonnet[1m]", "opus[1m]", "haiku"]
    assert model.choices[2] == Choice("opus[1m]", "Opus (1M context)")
    assert mode is not None and [c.value for c in mode.choices] == ["default", "acceptEdits", "plan", "dontAsk"]


def test_grouped_values_are_flattened_and_junk_is_skipped() -> None:
    raw: list[Any] = [
        {"id": "model", "type": "select", "category": "model", "currentValue": "a",
         "options": [{"group": "g1", "name": "Fast", "options": [{"value": "a", "name": "A"}, {"value": "b"}]}, {"value": 3}, "x"]},
        {"id": "flag", "type": "boolean", "currentValue": True},
        {"type": "select"}, "nonsense", None,
    ]  # fmt: skip
    (model,) = select_options(raw)
    assert model.choices == (Choice("a", "A"), Choice("b", "b"))
    assert select_options(None) == () and select_options({"id": "x"}) == ()


@pytest.mark.parametrize(
    ("model", "expected"),
    [("claude", ("claude", None)), ("claude/opus[1m]", ("claude", "opus[1m]")), ("my/agent", ("my/agent", None)),
     ("my/agent/x", ("my/agent", "x")), ("other/opus", None), ("claude/", None), ("nobody", None)],
)  # fmt: skip
def test_split_model_id(model: str, expected: tuple[str, str | None] | None) -> None:
    assert split_model_id(model, {"claude": 1, "my/agent": 2}) == expected


@given(agent=st.text(min_size=1).filter(lambda a: "/" not in a), value=st.text(min_size=1))
def test_model_id_round_trips(agent: str, value: str) -> None:
    assert split_model_id(model_id(agent, value), {agent: 1}) == (agent, value)
