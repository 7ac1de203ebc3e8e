"""A new session starts in its agent's asking mode, through the daemon (core/modes.py;
docs/agents.md, "Modes: who approves"), against the scripted agent answering as today's
claude-agent-acp (its ``agentInfo.name``, its four modes, starting in ``auto``): the
daemon sets ``default`` before the first prompt, unless the user chose another mode for
the agent (its ``mode`` setting) or for the chat (VS Code's model configuration,
``chat/setControl``); the shim is told who approves in each mode, and the model's tooltip
and configuration default follow."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from test_agent_sessions import models_changed
from test_controls import control, initialize, states
from test_daemon import LIMIT, eventually, ok

from lmbridge.acp.session import Opened
from lmbridge.core.profiles import CLAUDE
from lmbridge.daemon.chat_controls import ChatControls, ControlSet, SetControl
from lmbridge.devtools.client import assistant, user

pytestmark = pytest.mark.anyio

CLAUDE_NAME = {"agentInfo": {"name": "@agentclientprotocol/claude-agent-acp", "version": "0.101.0"}}
MODES = {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "auto",
         "options": [{"value": "default", "name": "Manual"}, {"value": "acceptEdits", "name": "Accept Edits"},
                     {"value": "plan", "name": "Plan Mode"}, {"value": "auto", "name": "Auto"}]}  # fmt: skip
RESUME = {"agentCapabilities": {"sessionCapabilities": {"resume": {}, "close": {}}}}
APPROVERS = {"default": "user", "acceptEdits": "agent", "plan": None, "auto": "agent"}  # plan asks for everything under the Bash ask rule


def like_claude(scripted: Any) -> Any:
    return scripted({"initialize": CLAUDE_NAME, "config_options": [MODES], "default_turn": [{"text": "ok"}], "turns_per_session": True})


def mode_sets(agent: Any) -> list[tuple[str, str]]:
    return [(e["sessionId"], e["value"]) for e in agent.events("set_config_option") if e["configId"] == "mode"]


async def test_a_new_session_starts_in_the_asking_mode_and_the_chats_choice_then_stays(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    agent = like_claude(scripted)
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            first = await c.chat(agent.id, [user("hello")])
            ok(first)
            state = states(c)[-1]
            mode = control(state, "mode")
            assert mode["current"] == "default"
            assert {x["value"]: x.get("approver") for x in mode["choices"]} == APPROVERS
            # The model's configuration default and tooltip now say the asking mode.
            listed = await c.request("lm/provideLanguageModelChatInformation", {})
            model = next(m for m in listed["models"] if m["id"] == agent.id)
            assert model["configurationSchema"]["properties"]["mode"]["default"] == "default"
            assert "New chats start in Manual. In Manual the agent asks you before it changes anything." in model["tooltip"]

            # The user switches this chat to Auto in the status bar: it stays Auto.
            answer = await c.request("chat/setControl", {"chatId": state["chatId"], "controlId": "mode", "value": "auto"})
            assert control(answer, "mode")["current"] == "auto"
            ok(await c.chat(agent.id, [user("hello"), assistant(first.parts), user("go on")]))
            assert control(states(c)[-1], "mode")["current"] == "auto"
    assert mode_sets(agent) == [("s1", "default"), ("s1", "auto")]
    prompts = agent.frames("session/prompt")
    assert [p["params"]["sessionId"] for p in prompts] == ["s1", "s1"]


async def test_the_users_mode_for_the_agent_or_the_model_configuration_wins(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    agent = like_claude(scripted)
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [{**agent.spec, "mode": "acceptEdits"}], str(tmp_path))
            ok(await c.chat(agent.id, [user("chat A")]))  # the agent's mode setting
            assert control(states(c)[-1], "mode")["current"] == "acceptEdits"
            listed = await c.request("lm/provideLanguageModelChatInformation", {})
            model = next(m for m in listed["models"] if m["id"] == agent.id)
            assert model["configurationSchema"]["properties"]["mode"]["default"] == "acceptEdits"
            assert "the agent approves its own actions" in model["tooltip"]
            # VS Code's model configuration: the user picked Manual beside the model picker.
            before = models_changed(c)
            ok(await c.chat(agent.id, [user("chat B")], options={"configuration": {"mode": "default"}}))
            assert control(states(c)[-1], "mode")["current"] == "default"
            await eventually(lambda: models_changed(c) > before, what="lm/modelsChanged after the configuration changed")
            listed = await c.request("lm/provideLanguageModelChatInformation", {})
            tooltip = next(m for m in listed["models"] if m["id"] == agent.id)["tooltip"]
            assert "New chats start in Manual" in tooltip and "approves its own" not in tooltip
            # A self-approving mode from the configuration (one per model, so maybe another chat's
            # choice) is never set: chat C starts in the agent's own mode setting, and the model's
            # tooltip does not claim that new chats start in Auto.
            ok(await c.chat(agent.id, [user("chat C")], options={"configuration": {"mode": "auto"}}))
            assert control(states(c)[-1], "mode")["current"] == "acceptEdits"
            listed = await c.request("lm/provideLanguageModelChatInformation", {})
            tooltip = next(m for m in listed["models"] if m["id"] == agent.id)["tooltip"]
            assert "New chats start in Auto" not in tooltip
    assert mode_sets(agent) == [("s1", "acceptEdits"), ("s2", "default"), ("s3", "acceptEdits")]


async def test_an_agent_whose_asking_mode_is_not_known_keeps_its_own(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    agent = scripted({"config_options": [MODES], "default_turn": [{"text": "ok"}]})  # agentInfo "scripted-agent": no profile
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            ok(await c.chat(agent.id, [user("hello")]))
            mode = control(states(c)[-1], "mode")
            assert mode["current"] == "auto" and all("approver" not in x for x in mode["choices"])
    assert mode_sets(agent) == []



def test_a_chats_own_choice_is_set_again_on_a_session_opened_new_for_it() -> None:
    """A chat whose session is replaced by a fresh one (``SessionActor._recover_session``)
    keeps the mode the user set on it with chat/setControl; a later choice beside the model
    picker replaces it."""
    acp = SimpleNamespace(id="s1", process=SimpleNamespace(caps=SimpleNamespace(profile=CLAUDE)))
    controls = ChatControls("chat", acp, None, lambda: True, None, lambda options: None)  # type: ignore[arg-type]
    controls.ready(Opened("s1", "new", False, True, [MODES]))
    assert controls.chosen(None, {}) == {"mode": "default"}  # the asking mode
    controls.answered(ControlSet(SetControl("mode", "default", by_user=False), {}))
    controls.answered(ControlSet(SetControl("mode", "auto"), {}))  # the user's chat/setControl
    controls.ready(Opened("s2", "new", True, True, [MODES]))  # the agent says auto again: nothing to set
    assert controls.chosen({"mode": "default"}, {}) == {}
    controls.ready(Opened("s3", "new", True, True, [{**MODES, "currentValue": "plan"}]))
    assert controls.chosen({"mode": "default"}, {}) == {"mode": "auto"}
    controls.answered(ControlSet(SetControl("mode", "auto", by_user=False), {}))
    # Accept Edits beside the model picker (one configuration per model: maybe another chat's
    # choice) is a mode that approves on its own: not set.
    assert controls.chosen({"mode": "acceptEdits"}, {"mode": "acceptEdits"}) == {}
    # The user then picks Manual beside the model picker: that is the chat's choice now.
    assert controls.chosen({"mode": "default"}, {"mode": "default"}) == {"mode": "default"}
    controls.answered(ControlSet(SetControl("mode", "default", by_user=False), {}))
    controls.ready(Opened("s4", "new", True, True, [MODES]))
    assert controls.chosen({"mode": "default"}, {}) == {"mode": "default"}


async def test_a_message_is_not_sent_when_the_agent_refuses_the_asking_mode(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    """The agent refuses to leave auto: the prompt is not sent in a mode nobody chose, the
    chat is told, and the next message (its turn ended in error: a new session) tries the
    asking mode again."""
    agent = scripted({"initialize": CLAUDE_NAME, "config_options": [MODES], "refuse_values": ["default"], "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            first = await c.chat(agent.id, [user("hello")])
            assert first.error is not None and "did not take the mode Manual" in first.error.message, first.error
            second = await c.chat(agent.id, [user("hello")])
            assert second.error is not None and "did not take the mode Manual" in second.error.message
    assert agent.frames("session/prompt") == []  # nothing reached the agent in auto
    assert [e["value"] for e in agent.events("set_config_option_refused")] == ["default", "default"]  # tried again on the next message


async def test_a_session_taken_up_again_in_the_agents_own_mode_is_set_to_the_asking_mode(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    """VS Code reloaded: the new agent process takes the session up (session/resume) in its own
    starting mode, auto (as codex-acp 2.6 does): set to the asking mode before the prompt."""
    scenario = {"initialize": {**CLAUDE_NAME, **RESUME}, "config_options": [MODES], "default_turn": [{"text": "ok"}]}
    agent = scripted(scenario)
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user("hello")])
            ok(first)
        agent.write(scenario)  # for the new process
        async with daemon([agent]) as c:
            ok(await c.chat(agent.id, [user("hello"), assistant(first.parts), user("and then?")]))
    assert [f["params"]["sessionId"] for f in agent.frames("session/resume")] == ["s1"]
    assert mode_sets(agent) == [("s1", "default"), ("s1", "default")]
    assert [p["params"]["sessionId"] for p in agent.frames("session/prompt")] == ["s1", "s1"]


async def test_a_spare_is_set_to_the_asking_mode_before_the_chat_that_takes_it_is_sent(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    """docs/sessions.md, "Pre-warming and the spare session": a spare is set to the mode a
    new chat's session starts in (here the asking mode) once its session/new is answered, so
    the chat that takes it sends its prompt at once: its state says the asking mode, and no
    session/set_config_option is sent after the chat was."""
    agent = like_claude(scripted)
    with anyio.fail_after(LIMIT):
        async with daemon(args=["--spare-session"], initialize=False, env={"LMBRIDGE_SPARE_SESSIONS": "1"}) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            ok(await c.chat(agent.id, [user("first chat")]))
            await eventually(lambda: len(mode_sets(agent)) == 2, what="the spare set to the asking mode")
            sent = time.monotonic()  # the scripted agent logs CLOCK_MONOTONIC times
            second = await c.chat(agent.id, [user("second chat")])
            ok(second)
            assert control(states(c)[-1], "mode")["current"] == "default"
    spare = agent.events("session_new")[1]["sessionId"]
    # The replacement spare (opened once the second chat took this one) is set so too.
    assert mode_sets(agent)[:2] == [("s1", "default"), (spare, "default")]
    assert [p["params"]["sessionId"] for p in agent.frames("session/prompt")] == ["s1", spare]
    assert not [e for e in agent.events("set_config_option") if e["sessionId"] == spare and e["t"] >= sent]


async def test_a_spare_whose_agent_refuses_the_asking_mode_sends_no_prompt(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    """The agent refuses to set the spare's mode ahead: the spare keeps its own mode (auto),
    and the chat that takes it asks again before its prompt; refused again, the prompt is not
    sent in a mode nobody chose. (The first chat runs in Plan, from VS Code's model
    configuration, which the agent takes: its process stays, with the spare.)"""
    agent = scripted({"initialize": CLAUDE_NAME, "config_options": [MODES], "refuse_values": ["default"], "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT):
        async with daemon(args=["--spare-session"], initialize=False, env={"LMBRIDGE_SPARE_SESSIONS": "1"}) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            ok(await c.chat(agent.id, [user("hello")], options={"configuration": {"mode": "plan"}}))
            await eventually(lambda: agent.events("set_config_option_refused"), what="the spare's mode refused")
            second = await c.chat(agent.id, [user("another chat")])
            assert second.error is not None and "did not take the mode Manual" in second.error.message, second.error
    spare = agent.events("session_new")[1]["sessionId"]
    assert mode_sets(agent) == [("s1", "plan")]
    refused = [e["sessionId"] for e in agent.events("set_config_option_refused")]
    assert refused[:2] == [spare, spare]  # ahead, then by the chat that took it (then its replacement's)
    assert [p["params"]["sessionId"] for p in agent.frames("session/prompt")] == ["s1"]  # nothing reached the agent in auto
