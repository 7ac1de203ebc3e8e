"""Per-chat controls through the daemon (docs/protocol.md, "Per-chat controls"), against the
scripted agent: each session/update kind the chat's state follows (current_mode_update,
config_option_update, available_commands_update, usage_update), client/sessionState,
chat/setControl (session/set_config_option and session/set_mode on the live session), VS
Code's model configuration, the "//" escape for an agent's command, maxInputTokens."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from test_daemon import LIMIT, eventually, ok

from lmbridge.devtools.client import assistant, user

pytestmark = pytest.mark.anyio

MODE = {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "default",
        "options": [{"value": "default", "name": "Default"}, {"value": "plan", "name": "Plan Mode"}]}  # fmt: skip
EFFORT = {"id": "reasoning_effort", "name": "Reasoning Effort", "category": "thought_level", "type": "select", "currentValue": "medium",
          "options": [{"value": v, "name": v.title()} for v in ("low", "medium", "high")]}  # fmt: skip
COMMANDS = {"sessionUpdate": "available_commands_update", "availableCommands": [
    {"name": "compact", "description": "Compact the conversation"}, {"name": "review", "description": "Review", "input": {"hint": "what"}}]}  # fmt: skip


async def initialize(c: Any, agents: list[dict[str, Any]], workspace: str, state: bool = True) -> None:
    params = {"protocolVersion": 1, "clientInfo": {"name": "test", "version": "1"}, "workspaceFolders": [workspace], "agents": agents}
    if state:
        params["clientCapabilities"] = {"sessionState": True}
    await c.request("initialize", params)


def states(c: Any) -> list[dict[str, Any]]:
    return [f["params"] for f in c.notifications if f.get("method") == "client/sessionState"]


def control(state: dict[str, Any], control_id: str) -> dict[str, Any]:
    return next(x for x in state["controls"] if x["id"] == control_id)


async def test_each_update_kind_reaches_the_chats_state_and_a_control_is_set_on_the_live_session(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    agent = scripted({
        "config_options": [MODE, EFFORT],
        "turns_per_session": True,
        "turns": [[{"update": COMMANDS}, {"update": {"sessionUpdate": "usage_update", "used": 1200, "size": 150000, "cost": {"amount": 0.25, "currency": "USD"}}},
                   {"text": "ok"}],
                  [{"update": {"sessionUpdate": "current_mode_update", "currentModeId": "default"}}, {"text": "left plan mode"}],
                  [{"recall": "told: "}]],
    })  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            first = await c.chat(agent.id, [user("hello")])
            ok(first)
            last = await eventually(lambda: [s for s in states(c) if s.get("usage")], what="the usage in client/sessionState")
            chat = last[-1]["chatId"]
            assert last[-1]["modelId"] == agent.id
            assert last[-1]["usage"] == {"used": 1200, "size": 150000, "cost": {"amount": 0.25, "currency": "USD"}}
            assert [x["name"] for x in last[-1]["commands"]] == ["compact", "review"]
            assert control(last[-1], "mode")["current"] == "default" and control(last[-1], "reasoning_effort")["current"] == "medium"
            assert any(s.get("requestId") == first.id for s in states(c))  # the shim learns which chat its request is

            # The status bar's choice: set on the live session at once, the state follows.
            answer = await c.request("chat/setControl", {"chatId": chat, "controlId": "mode", "value": "plan"})
            assert control(answer, "mode")["current"] == "plan"
            assert control(states(c)[-1], "mode")["current"] == "plan"
            bad = await c.start("chat/setControl", {"chatId": chat, "controlId": "mode", "value": "warp"})
            await bad.done.wait()
            assert bad.error is not None and "no value 'warp'" in bad.error.message
            gone = await c.start("chat/setControl", {"chatId": "no-such-chat", "controlId": "mode", "value": "plan"})
            await gone.done.wait()
            assert gone.error is not None and gone.error.code == -32602

            # The agent leaves plan mode on its own: the state says so.
            history = [user("hello"), assistant(first.parts), user("go on")]
            second = await c.chat(agent.id, history)
            ok(second)
            await eventually(lambda: control(states(c)[-1], "mode")["current"] == "default", what="current_mode_update in the state")

            # "//compact" reaches the agent as its /compact command; "//other" is sent as typed.
            third = await c.chat(agent.id, [*history, assistant(second.parts), user("//compact now")])
            ok(third)
    sets = [(e["configId"], e["value"]) for e in agent.events("set_config_option")]
    assert sets == [("mode", "plan")]
    texts = [p["params"]["prompt"][0]["text"] for p in agent.frames("session/prompt")]
    assert texts[-1] == "/compact now"
    assert {p["params"]["sessionId"] for p in agent.frames("session/prompt")} == {"s1"}


async def test_vs_codes_model_configuration_sets_a_new_session_and_then_only_what_the_user_changes(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    agent = scripted({"config_options": [MODE, EFFORT], "default_turn": [{"text": "ok"}], "turns_per_session": True})
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            plan = {"mode": "plan", "reasoning_effort": "medium"}
            a1 = await c.chat(agent.id, [user("chat A")], options={"configuration": plan})  # a fresh session: all of it
            ok(a1)
            history_a = [user("chat A"), assistant(a1.parts), user("A again")]
            a2 = await c.chat(agent.id, history_a, options={"configuration": plan})  # nothing changed: nothing set
            ok(a2)
            # Chat B: the user picks Default there; VS Code now sends Default for every chat of this model.
            default = {"mode": "default", "reasoning_effort": "high"}
            ok(await c.chat(agent.id, [user("chat B")], options={"configuration": default}))
            # Back in chat A (VS Code shows A's own Plan there, but sends the model's last choice):
            # not a change, so A keeps plan.
            ok(await c.chat(agent.id, [*history_a, assistant(a2.parts), user("A once more")], options={"configuration": default}))
            listed = await c.request("lm/provideLanguageModelChatInformation", {})
            schema = next(m for m in listed["models"] if m["id"] == agent.id)["configurationSchema"]
            assert list(schema["properties"]) == ["mode", "reasoning_effort"]
            assert schema["properties"]["mode"]["enum"] == ["default", "plan"] and schema["properties"]["mode"]["group"] == "navigation"
    sets = [(e["sessionId"], e["configId"], e["value"]) for e in agent.events("set_config_option")]
    assert sets == [("s1", "mode", "plan"), ("s2", "reasoning_effort", "high")]  # B new: default mode is its own already
    assert [p["params"]["sessionId"] for p in agent.frames("session/prompt")] == ["s1", "s1", "s2", "s1"]


async def test_the_older_modes_are_set_with_set_mode(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    modes = {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}]}
    agent = scripted({"modes": modes, "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            ok(await c.chat(agent.id, [user("hello")]))
            chat = states(c)[-1]["chatId"]
            assert control(states(c)[-1], "mode")["current"] == "ask"
            answer = await c.request("chat/setControl", {"chatId": chat, "controlId": "mode", "value": "code"})
            assert control(answer, "mode")["current"] == "code"
    assert [e["modeId"] for e in agent.events("set_mode")] == ["code"]


async def test_the_context_window_an_agent_reports_is_its_models_max_input_tokens(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    agent = scripted({"default_turn": [{"update": {"sessionUpdate": "usage_update", "used": None, "size": 123456}}, {"text": "ok"}]})
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [agent.spec], str(tmp_path), state=False)
            ok(await c.chat(agent.id, [user("hello")]))
            await eventually(lambda: [f for f in c.notifications if f.get("method") == "lm/modelsChanged"], what="lm/modelsChanged")
            listed = await c.request("lm/provideLanguageModelChatInformation", {})
            assert next(m for m in listed["models"] if m["id"] == agent.id)["maxInputTokens"] == 123456
            assert states(c) == []  # a client that did not say sessionState gets none


async def test_commands_told_right_after_session_new_are_kept(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    """claude-agent-acp tells its commands just after answering session/new, before the
    session is the chat's (and to the spare, before any chat takes it)."""
    agent = scripted({"after_new": [COMMANDS], "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            first = await c.chat(agent.id, [user("hello")])
            ok(first)
            # The commands come just after session/new's answer: before the session is the
            # chat's (kept for its Ready, told with the request) or, on a busy machine, after
            # (told then, without a requestId). Either way the chat's latest state holds them;
            # a lost one times out.
            def commands() -> list[str] | None:
                chat = next((s["chatId"] for s in states(c) if s.get("requestId") == first.id), None)
                told = [s for s in states(c) if s.get("chatId") == chat]
                return [x["name"] for x in told[-1]["commands"]] if told else None

            await eventually(lambda: commands() == ["compact", "review"], timeout=LIMIT, what="the commands told")
            ok(await c.chat(agent.id, [user("hello"), assistant(first.parts), user("//review it")]))
    assert agent.frames("session/prompt")[-1]["params"]["prompt"][0]["text"] == "/review it"


async def test_the_session_title_and_the_prompt_results_tokens_reach_the_chats_state(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    """claude-agent-acp 0.101 and codex-acp 2.6 name a session (``session_info_update``) and
    answer a prompt with its tokens (``usage``, ``_meta.quota``): the chat's state carries
    both; ``_auth/status_update`` (a notification for the whole process) is logged once."""
    status = {"send": {"jsonrpc": "2.0", "method": "_auth/status_update", "params": {"authStatus": {"kind": "api_key", "label": "Anthropic API key"}}}}
    agent = scripted({"turns": [[
        status, status,
        {"update": {"sessionUpdate": "session_info_update", "title": "Say hello", "_meta": {"claudeCode": {"x": 1}}}},
        {"text": "hello"},
        {"stop": "end_turn", "result": {"usage": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15},
                                        "_meta": {"quota": {"token_count": {"totalTokens": 15}}, "unknown": {"y": 2}}}},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            first = await c.chat(agent.id, [user("hello")])
            ok(first)
            last = await eventually(lambda: [s for s in states(c) if s.get("usage", {}).get("tokens")], what="the tokens in client/sessionState")
            assert last[-1]["usage"] == {"tokens": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15}}
            assert last[-1]["title"] == "Say hello"
    log = (tmp_path / "daemon.stderr").read_text(errors="replace").splitlines()
    assert len([line for line in log if "agent sign-in status" in line and "kind=api_key" in line]) == 1
    assert [line for line in log if "session title" in line and "Say hello" in line]
    assert not [line for line in log if "_auth/status_update" in line and "ignored" in line]
WIDE = {"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": "default",
        "options": [{"value": v, "name": v} for v in ("default", "plan", "acceptEdits", "bypassPermissions")]}  # fmt: skip


async def test_a_mode_that_widens_what_runs_is_set_only_for_the_chat_that_chose_it(scripted: Any, daemon: Any, tmp_path: Any) -> None:
    """VS Code's model configuration is one per model: the mode a user picked for one chat comes
    with every chat's next request. A mode that runs more without asking is set only through
    chat/setControl, which names the chat; from the configuration only an asking mode is."""
    agent = scripted({"config_options": [WIDE], "default_turn": [{"text": "ok"}], "turns_per_session": True})
    with anyio.fail_after(LIMIT):
        async with daemon(initialize=False) as c:
            await initialize(c, [agent.spec], str(tmp_path))
            a1 = await c.chat(agent.id, [user("chat A")])
            ok(a1)
            chat_a = states(c)[-1]["chatId"]
            # Chat A's user chooses bypassPermissions for chat A.
            answer = await c.request("chat/setControl", {"chatId": chat_a, "controlId": "mode", "value": "bypassPermissions"})
            assert control(answer, "mode")["current"] == "bypassPermissions"
            # VS Code now sends that mode as the model's configuration with chat B's first request,
            # and as a change with chat A's next one: neither sets it.
            wide = {"mode": "bypassPermissions"}
            ok(await c.chat(agent.id, [user("chat B")], options={"configuration": wide}))
            ok(await c.chat(agent.id, [user("chat C")], options={"configuration": {"mode": "acceptEdits"}}))
            # An asking mode still comes from the configuration.
            ok(await c.chat(agent.id, [user("chat D")], options={"configuration": {"mode": "plan"}}))
    sets = [(e["sessionId"], e["configId"], e["value"]) for e in agent.events("set_config_option")]
    assert sets == [("s1", "mode", "bypassPermissions"), ("s4", "mode", "plan")]
