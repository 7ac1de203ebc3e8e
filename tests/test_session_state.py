"""A chat's modes, options, commands and usage (core/session_state.py): the pure part."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core import session_state as ss
from lmbridge.core.agent_models import Choice

MODE = {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "default",
        "options": [{"value": "default", "name": "Default"}, {"value": "acceptEdits", "name": "Accept Edits"},
                    {"value": "plan", "name": "Plan Mode"}, {"value": "dontAsk", "name": "Don't Ask"}]}  # fmt: skip
MODEL = {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "default",
         "options": [{"value": "default", "name": "Default"}, {"value": "haiku", "name": "Haiku"}]}  # fmt: skip
EFFORT = {"id": "reasoning_effort", "name": "Reasoning Effort", "category": "thought_level", "type": "select", "currentValue": "medium",
          "options": [{"value": v, "name": v.title()} for v in ("low", "medium", "high", "xhigh")]}  # fmt: skip
LEGACY = {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}, {"bad": 1}]}


def test_claudes_answer_gives_its_mode_as_a_control_and_leaves_its_models_to_the_picker() -> None:
    state = ss.opened({"configOptions": [MODEL, MODE], "modes": LEGACY})
    assert [c.id for c in state.controls] == ["mode"]  # config options supersede the older modes
    mode = state.controls[0]
    assert (mode.current, mode.legacy, mode.category) == ("default", False, "mode")
    assert mode.choices[2] == Choice("plan", "Plan Mode")


def test_codexs_answer_gives_its_reasoning_effort() -> None:
    state = ss.opened({"configOptions": [MODEL, EFFORT]})
    assert [(c.id, c.current) for c in state.controls] == [("reasoning_effort", "medium")]


def test_the_older_modes_are_a_control_set_with_set_mode() -> None:
    state = ss.opened({"modes": LEGACY, "configOptions": [EFFORT]})
    assert [c.id for c in state.controls] == [ss.LEGACY_MODE, "reasoning_effort"]  # a mode first
    legacy = state.control(ss.LEGACY_MODE)
    assert legacy is not None and legacy.legacy and legacy.current == "ask"
    assert [c.value for c in legacy.choices] == ["ask", "code"]  # the malformed one skipped
    assert ss.set_request(state, "s1", ss.LEGACY_MODE, "code") == ("session/set_mode", {"sessionId": "s1", "modeId": "code"})
    assert ss.set_request(state, "s1", "reasoning_effort", "high") == (
        "session/set_config_option", {"sessionId": "s1", "configId": "reasoning_effort", "value": "high"})  # fmt: skip


@pytest.mark.parametrize(("control", "value", "says"), [("nope", "x", "no option 'nope'"), ("reasoning_effort", "max", "has no value 'max'")])
def test_setting_what_the_session_does_not_offer_is_refused(control: str, value: str, says: str) -> None:
    state = ss.opened({"configOptions": [EFFORT]})
    with pytest.raises(ss.UnknownControl, match=says):
        ss.set_request(state, "s1", control, value)


def test_the_agent_leaving_plan_mode_moves_the_mode() -> None:
    """claude-agent-acp reports leaving plan mode with current_mode_update, and has no older modes."""
    state = ss.opened({"configOptions": [MODE]})
    planning = ss.with_value(state, "mode", "plan")
    left = ss.update(planning, {"sessionUpdate": "current_mode_update", "currentModeId": "default"})
    assert left is not None and left.control("mode").current == "default"  # type: ignore[union-attr]
    assert ss.update(left, {"sessionUpdate": "current_mode_update", "currentModeId": "default"}) is None  # no change
    assert ss.update(left, {"sessionUpdate": "current_mode_update", "currentModeId": "warp"}) is None  # not offered
    legacy = ss.opened({"modes": LEGACY})
    moved = ss.update(legacy, {"sessionUpdate": "current_mode_update", "currentModeId": "code"})
    assert moved is not None and moved.control(ss.LEGACY_MODE).current == "code"  # type: ignore[union-attr]


def test_config_option_update_replaces_the_options_and_keeps_the_older_modes() -> None:
    state = ss.opened({"modes": LEGACY})
    new = ss.update(state, {"sessionUpdate": "config_option_update", "configOptions": [{**EFFORT, "currentValue": "high"}]})
    assert new is not None
    assert [(c.id, c.current) for c in new.controls] == [(ss.LEGACY_MODE, "ask"), ("reasoning_effort", "high")]
    assert ss.update(state, {"sessionUpdate": "config_option_update", "configOptions": "junk"}) is None


def test_available_commands_are_kept_well_formed_once_each() -> None:
    update = {"sessionUpdate": "available_commands_update", "availableCommands": [
        {"name": "compact", "description": "Compact the conversation"},
        {"name": "/review", "description": "Review changes", "input": {"hint": "branch or commit"}},
        {"name": "compact", "description": "again"}, {"name": "two words", "description": "x"}, {"description": "no name"}, "junk",
    ]}  # fmt: skip
    state = ss.update(ss.SessionState(), update)
    assert state is not None
    assert state.commands == (ss.Command("compact", "Compact the conversation"), ss.Command("review", "Review changes", "branch or commit"))
    assert ss.update(state, update) is None  # the same again changes nothing


@pytest.mark.parametrize(
    ("update", "usage"),
    [
        ({"used": 53000, "size": 200000, "cost": {"amount": 0.42, "currency": "USD"}}, ss.Usage(53000, 200000, 0.42, "USD")),
        ({"used": None, "size": 200000}, ss.Usage(None, 200000)),  # claude-agent-acp 0.23.1 sends used: null
        ({"used": -1, "size": True, "cost": {"amount": "x", "currency": "USD"}}, ss.Usage(None, None, None, "USD")),
        ({}, ss.Usage(None, None)),
    ],
)
def test_usage_is_taken_as_far_as_it_is_well_formed(update: dict[str, Any], usage: ss.Usage) -> None:
    state = ss.update(ss.SessionState(), {"sessionUpdate": "usage_update", **update})
    assert state is not None and state.usage == usage


def test_the_state_on_the_wire() -> None:
    state = ss.opened({"configOptions": [MODE]})
    state = ss.update(state, {"sessionUpdate": "usage_update", "used": 10, "size": 100, "cost": {"amount": 0.5, "currency": "EUR"}}) or state
    state = ss.update(state, {"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "init", "description": "Init"}]}) or state
    wire = ss.to_wire(state)
    assert wire["usage"] == {"used": 10, "size": 100, "cost": {"amount": 0.5, "currency": "EUR"}}
    assert wire["commands"] == [{"name": "init", "description": "Init"}]
    assert wire["controls"][0]["id"] == "mode" and wire["controls"][0]["current"] == "default"
    assert wire["controls"][0]["choices"][2] == {"value": "plan", "name": "Plan Mode"}
    assert ss.to_wire(ss.SessionState()) == {"controls": [], "commands": []}


def test_after_a_set_the_agents_answer_wins() -> None:
    state = ss.opened({"configOptions": [EFFORT]})
    assert ss.after_set(state, "reasoning_effort", "high", {}).control("reasoning_effort").current == "high"  # type: ignore[union-attr]
    answer = {"configOptions": [{**EFFORT, "currentValue": "high"}, {**MODE, "currentValue": "plan"}]}
    after = ss.after_set(state, "reasoning_effort", "high", answer)
    assert [(c.id, c.current) for c in after.controls] == [("mode", "plan"), ("reasoning_effort", "high")]


@pytest.mark.parametrize(
    ("previous", "received", "picked"),
    [
        (None, {"mode": "plan"}, {"mode": "plan"}),  # the first request seen: all of it
        ({"mode": "default"}, {"mode": "plan"}, {"mode": "plan"}),  # the user chose plan
        ({"mode": "plan"}, {"mode": "plan"}, {}),  # the same: nothing chosen (another chat's pick stays its own)
        ({"mode": "plan", "reasoning_effort": "low"}, {"mode": "plan", "reasoning_effort": "high"}, {"reasoning_effort": "high"}),
    ],
)
def test_only_a_change_of_vs_codes_configuration_is_the_users_choice(
    previous: dict[str, Any] | None, received: dict[str, Any], picked: dict[str, Any]
) -> None:
    assert ss.picked(previous, received) == picked


def test_wanted_keeps_what_is_offered_and_not_already_so() -> None:
    state = ss.opened({"configOptions": [MODE, EFFORT]})
    assert ss.wanted(state, {"mode": "plan", "reasoning_effort": "medium", "nope": "x", "model": "haiku"}) == {"mode": "plan"}
    assert ss.wanted(state, {"mode": "warp", "reasoning_effort": 3}) == {}


def test_the_configuration_schema_vs_code_shows_beside_the_model_picker() -> None:
    controls = ss.controls_from_json([MODEL, MODE, EFFORT])
    schema = ss.configuration_schema(controls, {"mode": "plan"})
    assert schema is not None
    assert list(schema["properties"]) == ["mode", "reasoning_effort"]  # the mode first: the picker shows the first
    mode = schema["properties"]["mode"]
    assert mode == {"type": "string", "title": "Mode", "enum": ["default", "acceptEdits", "plan", "dontAsk"],
                    "enumItemLabels": ["Default", "Accept Edits", "Plan Mode", "Don't Ask"], "default": "plan", "group": "navigation"}  # fmt: skip
    assert schema["properties"]["reasoning_effort"]["default"] == "medium"  # the agent's own
    assert ss.configuration_schema(ss.controls_from_json([MODEL])) is None
    unknown_default = ss.configuration_schema(ss.controls_from_json([{**EFFORT, "currentValue": None}]), {"reasoning_effort": "max"})
    assert unknown_default is not None and unknown_default["properties"]["reasoning_effort"]["default"] == "low"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
KINDS = st.sampled_from(sorted(ss.STATE_KINDS) + ["agent_message_chunk", "plan"])


@given(kind=KINDS, body=st.dictionaries(st.sampled_from(["currentModeId", "configOptions", "availableCommands", "used", "size", "cost", "title", "updatedAt"]), JSON))
def test_any_update_gives_a_state_or_nothing_and_never_raises(kind: str, body: dict[str, Any]) -> None:
    state = ss.opened({"configOptions": [MODE, EFFORT], "modes": LEGACY})
    new = ss.update(state, {"sessionUpdate": kind, **body})
    assert new is None or (isinstance(new, ss.SessionState) and new != state)
    if new is not None:
        ss.to_wire(new)  # always encodable
        assert kind in ss.STATE_KINDS


@given(answer=JSON)
def test_any_session_answer_gives_a_state(answer: Any) -> None:
    state = ss.opened(answer)
    assert isinstance(state, ss.SessionState)
    ss.to_wire(state)


COMMANDS = (ss.Command("compact", "Compact"), ss.Command("review", "Review"))


@pytest.mark.parametrize(
    ("text", "sent"),
    [
        ("//compact", "/compact"),
        ("//review the last commit", "/review the last commit"),
        ("  //compact", "/compact"),
        ("//frobnicate", "//frobnicate"),  # not the agent's: as typed
        ("/compact", "/compact"),  # VS Code let it through: as typed
        ("please //compact", "please //compact"),
        ("//", "//"),
    ],
)
def test_a_double_slash_reaches_the_agents_command(text: str, sent: str) -> None:
    blocks = [{"type": "text", "text": text}, {"type": "resource_link", "uri": "file:///a", "name": "a"}]
    out = ss.agent_command(blocks, COMMANDS)
    assert out[0]["text"] == sent and out[1] == blocks[1]
    assert blocks[0]["text"] == text  # not mutated


def test_a_command_after_other_content_is_left_alone() -> None:
    assert ss.agent_command([{"type": "image", "data": "", "mimeType": "image/png"}, {"type": "text", "text": "//compact"}], COMMANDS)[1]["text"] == "/compact"
    assert ss.agent_command([{"type": "text", "text": "context"}, {"type": "text", "text": "//compact"}], COMMANDS)[1]["text"] == "//compact"
    assert ss.agent_command([], COMMANDS) == []


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        ({"sessionUpdate": "usage_update", "used": 1, "size": 2}, "usage_update"),
        ({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}, "current_mode_update"),
        ({"sessionUpdate": "agent_message_chunk"}, None),
        ({"sessionUpdate": ["usage_update"]}, None),  # unhashable: once raised and closed the session
        ({"sessionUpdate": {"k": 1}}, None),
        ({"sessionUpdate": None}, None),
        (["usage_update"], None),
        ("usage_update", None),
        (None, None),
    ],
)
def test_only_a_string_kind_is_a_state_update(change: Any, kind: str | None) -> None:
    assert ss.state_kind(change) == kind


# (session_info_update fields, the title after it, from the title "Old")
TITLES = [
    ({"title": "Fix the failing test"}, "Fix the failing test"),
    ({"title": "  two\n lines\tand tabs "}, "two lines and tabs"),
    ({"title": "x" * 600}, "x" * ss.TEXT_LIMIT),
    ({"title": None}, None),  # ACP: null clears it
    ({"title": ""}, None),
    ({"title": 7}, "Old"),  # malformed: no change
    ({"updatedAt": "2026-11-28T12:00:00Z"}, "Old"),  # no title: no change
    ({"_meta": {"x": 1}}, "Old"),
]


@pytest.mark.parametrize(("fields", "title"), TITLES)
def test_a_session_title_is_kept_one_line(fields: dict[str, Any], title: str | None) -> None:
    state = ss.SessionState(title="Old")
    new = ss.update(state, {"sessionUpdate": "session_info_update", **fields}) or state
    assert new.title == title
    assert ss.to_wire(new).get("title") == title


# (a session/prompt result, the tokens kept)
RESULTS = [
    # claude-agent-acp 0.101 (turnOutcome): usage and _meta.quota; usage wins.
    ({"stopReason": "end_turn", "usage": {"inputTokens": 10, "outputTokens": 5, "cachedReadTokens": 100, "cachedWriteTokens": 0, "totalTokens": 115},
      "_meta": {"quota": {"token_count": {"totalTokens": 1, "inputTokens": 1}, "model_usage": []}}},
     {"inputTokens": 10, "outputTokens": 5, "totalTokens": 115, "cachedReadTokens": 100, "cachedWriteTokens": 0}),
    # codex-acp 2.6's quota only: its names read as ACP's.
    ({"stopReason": "end_turn", "_meta": {"quota": {"token_count": {"totalTokens": 30, "inputTokens": 20, "cachedInputTokens": 4, "outputTokens": 10, "reasoningOutputTokens": 3}}}},
     {"inputTokens": 20, "outputTokens": 10, "totalTokens": 30, "thoughtTokens": 3, "cachedReadTokens": 4}),
    ({"stopReason": "end_turn", "usage": {"inputTokens": -1, "outputTokens": True, "totalTokens": "9"}}, None),
    ({"stopReason": "end_turn", "usage": {"inputTokens": 1.5e400}}, None),
    ({"stopReason": "end_turn", "_meta": {"quota": "lots"}}, None),
    ({"stopReason": "end_turn"}, None),
    ("end_turn", None),
    (None, None),
]  # fmt: skip


@pytest.mark.parametrize(("result", "tokens"), RESULTS)
def test_a_prompt_results_tokens_go_with_the_usage(result: Any, tokens: dict[str, int] | None) -> None:
    state = ss.update(ss.SessionState(), {"sessionUpdate": "usage_update", "used": 50, "size": 1000}) or ss.SessionState()
    new = ss.turn_usage(state, result)
    if tokens is None:
        assert new is None
        return
    assert new is not None and new.usage is not None
    assert ss.to_wire(new)["usage"] == {"used": 50, "size": 1000, "tokens": tokens}
    assert ss.turn_usage(new, result) is None  # the same again
    # A later usage_update keeps them; tokens alone are usage too.
    later = ss.update(new, {"sessionUpdate": "usage_update", "used": 60, "size": 1000})
    assert later is not None and later.usage is not None and dict(later.usage.tokens) == tokens
    alone = ss.turn_usage(ss.SessionState(), result)
    assert alone is not None and ss.to_wire(alone)["usage"] == {"tokens": tokens}


#: (the session/new answer, the control set, its value, the answer to the set): a spare
#: session set to its start mode ahead (acp.session.start_in_mode).
AHEAD = [
    ({"configOptions": [MODEL, MODE]}, "mode", "plan", {}),  # no list in the answer: the value
    ({"configOptions": [MODEL, MODE]}, "mode", "plan", {"configOptions": None}),
    ({"configOptions": [MODEL, MODE]}, "mode", "plan", {"configOptions": [MODEL, {**MODE, "currentValue": "plan"}, EFFORT]}),  # the agent's list wins
    ({"configOptions": [MODE, EFFORT]}, "mode", "acceptEdits", {"configOptions": [{**MODE, "currentValue": "default"}, EFFORT]}),  # the value wins in it
    ({"modes": LEGACY}, ss.LEGACY_MODE, "code", {}),
    ({"modes": LEGACY, "configOptions": [EFFORT]}, ss.LEGACY_MODE, "code", None),
    ({"modes": LEGACY, "configOptions": [EFFORT]}, ss.LEGACY_MODE, "code", {"configOptions": [{**EFFORT, "currentValue": "high"}]}),
]


@pytest.mark.parametrize(("answer", "control_id", "value", "set_answer"), AHEAD)
def test_a_session_set_ahead_gives_the_state_a_set_after_taking_it_would(answer: dict[str, Any], control_id: str, value: str, set_answer: Any) -> None:
    """The chat taking a session set ahead sees the state it would have after setting the
    control itself (``after_set``): so it sets nothing more before its prompt."""
    state = ss.opened(answer)
    control = state.control(control_id)
    assert control is not None and control.current != value
    ahead = ss.answer_after_set(answer, control, value, set_answer)
    assert ss.opened(ahead) == ss.after_set(state, control_id, value, set_answer)
    assert ss.opened(ahead).control(control_id).current == value  # type: ignore[union-attr]
    assert ss.wanted(ss.opened(ahead), {control_id: value}) == {}
    assert ss.opened(answer) == state  # the answer itself is left as it was


@given(answer=JSON, set_answer=JSON, value=st.text(max_size=5))
def test_any_answers_set_ahead_give_an_answer(answer: Any, set_answer: Any, value: str) -> None:
    for control in (ss.Control("mode", "Mode", "mode", (), None), ss.Control(ss.LEGACY_MODE, "Mode", "mode", (), None, legacy=True)):
        ss.opened(ss.answer_after_set(answer, control, value, set_answer))
