"""The daemon end to end: ``lmbridge serve`` as a subprocess, driven over stdio.

Each test drives the real daemon (``DaemonClient.spawn``: ``python -m lmbridge serve``)
with scripted ACP agents (``tests/agents/scripted_agent.py``, one log per agent process):
conversation tests share one daemon per module (``shared``, unique model ids), tests of
the daemon's lifetime, options and wire errors start their own (``daemon``). Each plays
VS Code's part: it replays the history the way VS Code does (``assistant(parts)``, tool results
as user messages, Copilot's re-rendered system and user messages), then checks both ends:
what the shim received (parts, results, errors) and what the agent received (its log:
prompts, permission outcomes, cancels, sessions, processes).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import alive

from lmbridge.core import permissions
from lmbridge.core.messages import VSCODE_SKIP_TEXT
from lmbridge.core.permissions import PROTECTED_TOOL
from lmbridge.core.transcript import CONTEXT_OPEN
from lmbridge.devtools.client import RPCError, approve, assistant, skip, text_of, tool_calls, tool_result, user

pytestmark = pytest.mark.anyio

# Wall-clock bounds hold under load (docs/reliability.md, "Tests under load"): each is at least
# 10x what it takes on an idle machine. A bound only bites when something is wrong, so it is
# generous; a test whose point is that something happens promptly checks an order instead.
LIMIT = 180  # seconds: the bound of every test (the slowest takes ~5 s idle, two daemon starts; 47 s loaded)


# ---------------------------------------------------------------- helpers


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": [{"type": "text", "value": text}]}


async def eventually(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy (then return it). The bound:
    what is waited on takes at most an agent's start, ~1 s idle."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await anyio.sleep(0.02)


def ok(call: Any, stop: str = "end_turn") -> None:
    """The call ended with this stopReason (and no error)."""
    assert call.error is None, f"unexpected error: {call.error}"
    assert call.result == {"stopReason": stop}


def write_turn(path: str = "notes.txt", options: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A turn that asks permission to write ``path`` and branches on the answer."""
    permission: dict[str, Any] = {
        "toolCall": {
            "toolCallId": "w1",
            "title": f"Write {path}",
            "kind": "edit",
            "status": "pending",
            "rawInput": {"path": path, "content": "approved notes"},
            "locations": [{"path": path}],
        }
    }
    if options is not None:
        permission["options"] = options
    return [
        {"text": f"I will write {path}."},
        {"permission": permission, "id": "p1"},
        {"branch": "p1",
         "allow": [
             {"write_file": {"path": path, "content": "approved notes"}},
             {"tool_call_update": {"toolCallId": "w1", "status": "completed"}},
             {"text": "Wrote the file."},
         ],
         "reject": [
             {"tool_call_update": {"toolCallId": "w1", "status": "failed"}},
             {"text": "Not writing it; carrying on without the file."},
         ],
         "cancelled": [{"text": "LATE-FROM-CANCELLED-BRANCH"}, {"sleep": 0.2}]},
    ]


# Claude-style ids, allow_always listed first: the daemon must choose by kind.
ODD_OPTIONS = [
    {"optionId": "always", "name": "Always", "kind": "allow_always"},
    {"optionId": "yes-once", "name": "Allow", "kind": "allow_once"},
    {"optionId": "never", "name": "Never", "kind": "reject_always"},
    {"optionId": "no-once", "name": "Reject", "kind": "reject_once"},
]


def only(items: list[Any]) -> Any:
    assert len(items) == 1, items
    return items[0]


# ---------------------------------------------------------------- basics


async def test_initialize_models_and_token_count(scripted: Any, daemon: Any) -> None:
    agent = scripted({})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], initialize=False) as c:
            info = await c.initialize(agents=[agent.spec])
            assert info["protocolVersion"] == 1 and info["serverInfo"]["name"] == "lmbridge"
            models = (await c.request("lm/provideLanguageModelChatInformation", {"silent": True}))["models"]
            model = only(models)
            assert model["id"] == agent.id and model["capabilities"]["toolCalling"]
            assert {"name", "family", "version", "maxInputTokens", "maxOutputTokens"} <= set(model)
            count = await c.request("lm/provideTokenCount", {"modelId": agent.id, "text": "hello world, hello"})
            assert isinstance(count["count"], int) and count["count"] > 0
    assert not agent.pids()  # no chat, no agent started


async def test_agents_from_the_command_line_and_a_config_file(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    cli = scripted({"turns": [[{"text": "from the command line"}]]}, id="cli")
    from_file = scripted({"turns": [[{"text": "from the config file"}]]}, id="filed")
    config = tmp_path / "lmbridge.json"
    config.write_text(json.dumps({"agents": [{**from_file.spec, "name": "Filed agent", "env": {"X_TEST": "1"}}], "idleTimeout": 60}))
    command = " ".join(json.dumps(w) for w in [cli.spec["command"], *cli.spec["args"]])
    with anyio.fail_after(LIMIT):
        async with daemon(args=["--agent", f"cli={command}", "--config", str(config)], initialize=False) as c:
            await c.initialize(workspace=[str(tmp_path)])  # no agents here: the configured ones stay
            models = (await c.request("lm/provideLanguageModelChatInformation", {}))["models"]
            assert sorted(m["id"] for m in models) == ["cli", "filed"]
            assert {m["id"]: m["name"] for m in models}["filed"] == "Filed agent"
            assert text_of(await c.chat("cli", [user("hi")])) == "from the command line"
            assert text_of(await c.chat("filed", [user("hi")])) == "from the config file"
    bad = subprocess.run([sys.executable, "-m", "lmbridge", "serve", "--agent", "no-command-here"],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2 and "ID=COMMAND" in bad.stderr and not bad.stdout


async def test_streams_text_thinking_plan_and_tool_rendering(scripted: Any, shared: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [[
        {"thought": "pondering"},
        {"plan": [{"content": "Read", "priority": "high", "status": "completed"},
                  {"content": "Answer", "priority": "high", "status": "in_progress"}]},
        {"plan": [{"content": "Read", "priority": "high", "status": "completed"},
                  {"content": "Answer", "priority": "high", "status": "in_progress"}]},
        {"tool_call": {"toolCallId": "r1", "title": "Read README", "kind": "read", "status": "pending"}},
        {"tool_call_update": {"toolCallId": "r1", "status": "in_progress"}},
        {"tool_call_update": {"toolCallId": "r1", "status": "in_progress", "title": "Read README"}},
        {"tool_call_update": {"toolCallId": "r1", "status": "completed",
                              "content": [{"type": "content", "content": {"type": "text", "text": "line one"}}]}},
        {"text": "Hello "},
        {"text": "there."},
    ]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, [user("hi")])
    ok(call)
    assert {"type": "thinking", "value": "pondering"} in call.parts
    text = text_of(call)
    assert text.count("**Plan**") == 1  # unchanged plan not repeated
    assert text.count("Read README") == 2  # start and end, never once per update
    assert "line one" in text and text.endswith("Hello there.")
    prompt = only(agent.prompts())
    assert prompt["text"] == "hi"
    assert only(agent.events("session_new"))["cwd"] == str(tmp_path)


# ---------------------------------------------------------------- permission bridging


async def test_approve_selects_allow_once_and_the_agent_acts(scripted: Any, shared: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [write_turn(options=ODD_OPTIONS)]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            history = [user("please write my notes")]
            first = await c.chat(agent.id, history)
            ok(first, "tool_calls")
            part = only(tool_calls(first))
            # kind "edit" of "notes.txt": a relative path names no file, so no session approval of edits covers it
            assert part["name"] == PROTECTED_TOOL
            data = part["input"]
            # The card as the daemon renders it: the shim shows title and message, nothing else.
            assert set(data) == {"title", "message", "approvalToken"}
            assert data["title"] == "Write notes.txt" and "**edit files**" in data["message"]
            assert "+approved notes" in data["message"] and "- `notes.txt`" in data["message"]
            assert all(permissions.escape(o["name"]) in data["message"] for o in ODD_OPTIONS)
            token = data["approvalToken"]
            assert isinstance(token, str) and len(token) >= 16 and token not in part["callId"]
            assert "I will write notes.txt." in text_of(first)
            await anyio.sleep(0.2)
            assert not (tmp_path / "notes.txt").exists()
            assert not agent.outcomes()  # the ACP turn stays open, unanswered

            history += [assistant(first.parts), approve(part)]
            second = await c.chat(agent.id, history)
            ok(second)
            assert not tool_calls(second)
            assert "Wrote the file." in text_of(second)
            assert "✓" in text_of(second) and "Write notes.txt" in text_of(second)
    assert (tmp_path / "notes.txt").read_text() == "approved notes"
    outcome = only(agent.outcomes())
    assert outcome["id"] == "p1" and outcome["kind"] == "allow_once"
    assert outcome["outcome"] == {"outcome": "selected", "optionId": "yes-once"}
    assert len(agent.prompts()) == 1  # the tool result continued the open turn
    assert not agent.events("cancel")


SKIP_ANSWERS = {
    "vscode-skip": VSCODE_SKIP_TEXT,
    "empty": "",
    "other-token": "some-other-token",
    "token-inside-other-text": "not the token, but: {token}x",
}


async def test_skip_or_anything_but_the_token_rejects_and_the_turn_continues(scripted: Any, shared: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [write_turn(options=ODD_OPTIONS)], "turns_per_session": True})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            for name, answer in SKIP_ANSWERS.items():  # one chat (one ACP session on the agent's process) each
                history = [user(f"please write my notes ({name})")]
                first = await c.chat(agent.id, history)
                ok(first, "tool_calls")
                part = only(tool_calls(first))
                text = answer.format(token=part["input"]["approvalToken"])
                result = skip(part) if answer == VSCODE_SKIP_TEXT else tool_result(part["callId"], text)
                history += [assistant(first.parts), result]
                second = await c.chat(agent.id, history)
                ok(second)
                assert "Not writing it; carrying on without the file." in text_of(second), name
                assert "✗" in text_of(second)
    assert not (tmp_path / "notes.txt").exists()
    assert len(agent.pids()) == 1
    prompts = agent.events("prompt")
    assert len(prompts) == len(SKIP_ANSWERS) == len({p["sessionId"] for p in prompts})  # one prompt a chat
    outcomes = agent.outcomes()
    assert len(outcomes) == len(SKIP_ANSWERS)
    for outcome in outcomes:
        assert outcome["kind"] == "reject_once" and outcome["outcome"] == {"outcome": "selected", "optionId": "no-once"}
    assert not agent.events("cancel")


async def test_reject_without_a_reject_once_option_is_cancelled(scripted: Any, shared: Any) -> None:
    options = [{"optionId": "ok", "name": "OK", "kind": "allow_once"}, {"optionId": "never", "name": "Never", "kind": "reject_always"}]
    agent = scripted({"turns": [write_turn(options=options)]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("write")])
            part = only(tool_calls(first))
            second = await c.chat(agent.id, [user("write"), assistant(first.parts), skip(part)])
    assert second.error is None
    assert only(agent.outcomes())["kind"] == "cancelled"


async def test_stop_cancels_the_permission_and_the_new_content_is_a_new_prompt(scripted: Any, shared: Any, tmp_path: Path) -> None:
    agent = scripted({
        "turns": [write_turn(), [{"text": "Answer to the new question."}]],
        "after_cancel": [{"text": "LATE-AFTER-CANCEL"}],
    })
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("please write my notes")])
            ok(first, "tool_calls")
            # The user pressed Stop on the confirmation: the turn and its tool call are gone.
            second = await c.chat(agent.id, [user("please write my notes"), user("never mind, what is 2+2?")])
            ok(second)
            assert text_of(second) == "Answer to the new question."
    assert not (tmp_path / "notes.txt").exists()
    outcome = only(agent.outcomes())
    assert outcome["kind"] == "cancelled" and outcome["outcome"] == {"outcome": "cancelled"}
    cancel = only(agent.events("cancel"))
    assert cancel["sessionId"] == "s1" and cancel["active"]
    prompts = agent.prompts()
    assert len(prompts) == 2 and prompts[1]["sessionId"] == "s1"  # same agent session
    assert prompts[1]["text"] == "never mind, what is 2+2?"  # only the new content
    answered = agent.events("prompt_answered")
    assert answered[0]["stopReason"] == "cancelled"
    # session/cancel came first, then the permission's cancelled answer (ACP's order: answered
    # first, an agent may call its model again), and the new prompt came after the old one ended.
    events = agent.events()
    order = [e["event"] for e in events if e["event"] in ("permission_outcome", "cancel", "prompt", "prompt_answered")]
    assert order.index("cancel") < order.index("permission_outcome"), order  # the agent may end the turn before it reads the answer
    assert sorted(order) == sorted(["prompt", "cancel", "permission_outcome", "prompt_answered", "prompt", "prompt_answered"]), order
    assert order[:2] == ["prompt", "cancel"] and order[-2:] == ["prompt", "prompt_answered"] and order.index("prompt_answered") < 4, order
    assert len(agent.pids()) == 1


@pytest.mark.parametrize("result", ["approve", "skip"])
async def test_tool_result_plus_new_user_content_is_a_soft_cancel(scripted: Any, shared: Any, tmp_path: Path, result: str) -> None:
    agent = scripted({"turns": [write_turn(), [{"text": "Doing the other thing."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            history = [user("please write my notes")]
            first = await c.chat(agent.id, history)
            part = only(tool_calls(first))
            token = part["input"]["approvalToken"]
            answer = approve(part) if result == "approve" else skip(part)
            history += [assistant(first.parts), answer, user("actually, do the other thing")]
            second = await c.chat(agent.id, history)
            ok(second)
            assert text_of(second) == "Doing the other thing."
    assert not (tmp_path / "notes.txt").exists()
    assert only(agent.outcomes())["kind"] == "cancelled"  # never approved, not even with the token
    assert only(agent.events("cancel"))["active"]
    prompts = agent.prompts()
    assert len(prompts) == 2 and prompts[1]["sessionId"] == "s1"
    assert prompts[1]["text"] == "actually, do the other thing"
    assert token not in json.dumps(prompts[1]["blocks"])


async def test_concurrent_permissions_surface_together_and_are_answered_each_on_its_own(scripted: Any, shared: Any) -> None:
    def ask(call_id: str, title: str) -> dict[str, Any]:
        return {"toolCall": {"toolCallId": call_id, "title": title, "kind": "execute", "status": "pending"}}

    agent = scripted({"turns": [[
        {"text": "Two things to do."},
        {"permission": ask("a", "Run ls"), "id": "pa"},
        {"sleep": 0.005},
        {"permission": ask("b", "Delete tmp"), "id": "pb"},
        {"branch": "pa", "allow": [{"text": "[ls ran]"}], "reject": [{"text": "[ls refused]"}]},
        {"branch": "pb", "allow": [{"text": "[delete ran]"}], "reject": [{"text": "[delete refused]"}]},
    ]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            history = [user("do two things")]
            first = await c.chat(agent.id, history)
            ok(first, "tool_calls")
            calls = tool_calls(first)
            assert [p["input"]["title"] for p in calls] == ["Run ls", "Delete tmp"]
            assert len({p["callId"] for p in calls}) == 2
            assert len({p["input"]["approvalToken"] for p in calls}) == 2
            # VS Code: one user message per tool result; Allow on the first, Skip on the second.
            history += [assistant(first.parts), approve(calls[0]), skip(calls[1])]
            second = await c.chat(agent.id, history)
            ok(second)
            assert "[ls ran]" in text_of(second) and "[delete refused]" in text_of(second)
    kinds = {o["id"]: o["kind"] for o in agent.outcomes()}
    assert kinds == {"pa": "allow_once", "pb": "reject_once"}
    assert len(agent.outcomes()) == 2 and len(agent.prompts()) == 1


async def test_stop_at_the_second_of_two_confirmations(scripted: Any, shared: Any, tmp_path: Path) -> None:
    # VS Code ran our tool for the first call (Allow: the token), then the user pressed
    # Stop at the second confirmation. The round is replayed with the first call only
    # (docs/vscode.md, "Kept rounds": only tool calls with a stored result are kept), then a new message.
    def ask(call_id: str) -> dict[str, Any]:
        return {"toolCall": {"toolCallId": call_id, "title": f"Action {call_id}", "status": "pending"}}

    agent = scripted({"turns": [[
        {"text": "Two things."},
        {"permission": ask("a"), "id": "pa"},
        {"permission": ask("b"), "id": "pb"},
        {"branch": "pa", "allow": [{"write_file": {"path": "a.txt", "content": "a"}}]},
        {"await": "pb"},
    ], [{"text": "On to the new request."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("do two things")])
            ok(first, "tool_calls")
            a, b = tool_calls(first)
            replayed = assistant([p for p in first.parts if p is not b])
            second = await c.chat(agent.id, [user("do two things"), replayed, approve(a), user("something else")])
            ok(second)
            assert text_of(second) == "On to the new request."
    assert not (tmp_path / "a.txt").exists()  # a Stop approves nothing
    assert sorted((o["id"], o["kind"]) for o in agent.outcomes()) == [("pa", "cancelled"), ("pb", "cancelled")]
    assert len(agent.pids()) == 1 and only(agent.events("cancel"))["sessionId"] == "s1"
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s1"] and prompts[1]["text"] == "something else"


async def test_sequential_permissions_in_one_turn(scripted: Any, shared: Any) -> None:
    def ask(call_id: str) -> dict[str, Any]:
        return {"toolCall": {"toolCallId": call_id, "title": f"Step {call_id}", "status": "pending"}}

    agent = scripted({"turns": [[
        {"permission": ask("one"), "id": "p1"},
        {"branch": "p1", "allow": [{"text": "[one ran]"}], "reject": [{"text": "[one refused]"}]},
        {"permission": ask("two"), "id": "p2"},
        {"branch": "p2", "allow": [{"text": "[two ran]"}], "reject": [{"text": "[two refused]"}]},
        {"text": " Done."},
    ], [{"text": "Next turn."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            history = [user("two steps")]
            first = await c.chat(agent.id, history)
            ok(first, "tool_calls")
            history += [assistant(first.parts), approve(only(tool_calls(first)))]
            second = await c.chat(agent.id, history)
            ok(second, "tool_calls")
            assert "[one ran]" in text_of(second)
            assert only(tool_calls(second))["input"]["title"] == "Step two"
            history += [assistant(second.parts), skip(only(tool_calls(second)))]
            third = await c.chat(agent.id, history)
            ok(third)
            assert text_of(third).startswith("[two refused] Done.")
            history += [assistant(third.parts), user("and then?")]
            ok(await c.chat(agent.id, history))
    assert [(o["id"], o["kind"]) for o in agent.outcomes()] == [("p1", "allow_once"), ("p2", "reject_once")]
    prompts = agent.prompts()
    assert [p["text"] for p in prompts] == ["two steps", "and then?"] and {p["sessionId"] for p in prompts} == {"s1"}


async def test_a_response_of_only_thinking_continues_in_its_session(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"thought": "hmm"}], [{"text": "Now with words."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("think only")])
            ok(first)
            # Copilot Chat shows "Sorry, no response was returned." for a response with no
            # text: the daemon says that the agent's turn ended, and VS Code replays that.
            assert first.parts == [{"type": "thinking", "value": "hmm"}, {"type": "text", "value": f"_{agent.id} ended its turn without a reply._"}]
            ok(await c.chat(agent.id, [user("think only"), assistant(first.parts), user("now say something")]))
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s1"] and prompts[1]["text"] == "now say something"
    assert len(agent.pids()) == 1


async def test_crossed_tokens_approve_nothing(scripted: Any, shared: Any) -> None:
    def ask(call_id: str) -> dict[str, Any]:
        return {"toolCall": {"toolCallId": call_id, "title": f"Action {call_id}", "status": "pending"}}

    agent = scripted({"turns": [[
        {"permission": ask("a"), "id": "pa"},
        {"permission": ask("b"), "id": "pb"},
        {"await": ["pa", "pb"]},
    ]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("go")])
            a, b = tool_calls(first)
            history = [user("go"), assistant(first.parts),
                       tool_result(a["callId"], b["input"]["approvalToken"]),
                       tool_result(b["callId"], a["input"]["approvalToken"])]
            ok(await c.chat(agent.id, history))
    assert {o["id"]: o["kind"] for o in agent.outcomes()} == {"pa": "reject_once", "pb": "reject_once"}


async def test_stop_with_two_pending_permissions_cancels_both(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[
        {"permission": {}, "id": "pa"},
        {"permission": {}, "id": "pb"},
        {"await": ["pa", "pb"]},
        {"text": "LATE"},
    ], [{"text": "New answer."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("go")])
            assert len(tool_calls(first)) == 2
            second = await c.chat(agent.id, [user("go"), user("stop that")])
            ok(second)
            assert text_of(second) == "New answer."
    assert sorted((o["id"], o["kind"]) for o in agent.outcomes()) == [("pa", "cancelled"), ("pb", "cancelled")]
    assert len(agent.events("cancel")) == 1


async def test_a_permission_asked_after_the_response_ended_comes_with_the_next_one(scripted: Any, shared: Any) -> None:
    def ask(call_id: str) -> dict[str, Any]:
        return {"toolCall": {"toolCallId": call_id, "title": f"Action {call_id}", "status": "pending"}}

    agent = scripted({"turns": [[
        {"permission": ask("a"), "id": "pa"},
        {"sleep": 0.3},
        {"permission": ask("b"), "id": "pb"},
        {"branch": "pa", "allow": [{"text": "[a ran]"}]},
        {"branch": "pb", "allow": [{"text": "[b ran]"}]},
    ]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            history = [user("go")]
            first = await c.chat(agent.id, history)
            ok(first, "tool_calls")
            assert [p["input"]["title"] for p in tool_calls(first)] == ["Action a"]
            await anyio.sleep(0.5)  # "b" is asked while no request streams
            history += [assistant(first.parts), approve(only(tool_calls(first)))]
            second = await c.chat(agent.id, history)
            ok(second, "tool_calls")
            assert [p["input"]["title"] for p in tool_calls(second)] == ["Action b"]
            history += [assistant(second.parts), approve(only(tool_calls(second)))]
            third = await c.chat(agent.id, history)
            ok(third)
            texts = text_of(second) + text_of(third)
            assert texts.count("[a ran]") == 1 and texts.count("[b ran]") == 1
    assert {o["id"]: o["kind"] for o in agent.outcomes()} == {"pa": "allow_once", "pb": "allow_once"}


async def test_output_while_no_request_streams_is_kept_for_the_next_response(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[
        {"permission": {}, "id": "p1"},
        {"sleep": 0.3},
        {"text": "(said while waiting)"},
        {"branch": "p1", "allow": [{"text": " then allowed."}]},
    ]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("go")])
            ok(first, "tool_calls")
            part = only(tool_calls(first))
            await anyio.sleep(0.6)  # the text arrives between the two requests
            second = await c.chat(agent.id, [user("go"), assistant(first.parts), approve(part)])
            ok(second)
            assert text_of(second).startswith("(said while waiting) then allowed.")
            assert "(said while waiting)" not in text_of(first)


# ---------------------------------------------------------------- history and sessions


async def test_chats_whose_turns_were_all_stopped_are_found_by_their_user_messages(scripted: Any, shared: Any) -> None:
    def asking(handle: str) -> list[dict[str, Any]]:
        return [{"text": "I need permission."}, {"permission": {}, "id": handle}, {"await": handle}]

    # Same answers everywhere: only the (re-rendered) user messages tell the two chats apart.
    agent = scripted({"turns": [asking("p1"), asking("p2"), [{"text": "Finally an answer."}]], "turns_per_session": True})
    chats = {
        "A": ["please fix the login bug", "the one in auth.py", "just answer"],
        "B": ["write a haiku about rain", "make it about snow", "just answer"],
    }
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            for turn in range(3):
                for texts in chats.values():
                    # Each turn is stopped at the confirmation, so no assistant turn is
                    # replayed; the current turn carries Copilot's context, earlier ones not.
                    history = [user(t) for t in texts[:turn]] + [user(f"<context>date {turn}</context>\n{texts[turn]}")]
                    call = await c.chat(agent.id, history)
                    ok(call, "tool_calls" if turn < 2 else "end_turn")
    assert len(agent.pids()) == 1  # one process, a session a chat
    for sid, (name, texts) in zip(["s1", "s2"], chats.items()):
        prompts = [p for p in agent.prompts() if p["sessionId"] == sid]
        assert [p["text"].split("\n")[-1] for p in prompts] == texts, name  # only the new turn each time
    outcomes = agent.outcomes()
    assert len(outcomes) == 4 and {o["kind"] for o in outcomes} == {"cancelled"}
    assert len(agent.events("cancel")) == 4


async def test_two_concurrent_chats_never_cross(scripted: Any, shared: Any) -> None:
    # Both chats get the same first answer: only their user messages tell them apart.
    agent = scripted({"turns": [[{"sleep": 0.2}, {"text": "Same answer."}], [{"text": "Second answer."}]], "turns_per_session": True})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            chats = {"A": [user("alpha: tell me about apples")], "B": [user("beta: tell me about bananas")]}
            calls: dict[str, Any] = {}

            async def run(name: str) -> None:
                calls[name] = await c.chat(agent.id, chats[name])

            async with anyio.create_task_group() as tg:
                for name in chats:
                    tg.start_soon(run, name)
            for name in chats:
                ok(calls[name])
                assert text_of(calls[name]) == "Same answer."
                chats[name] += [assistant(calls[name].parts), user(f"{name} follow-up question")]
            async with anyio.create_task_group() as tg:
                for name in chats:
                    tg.start_soon(run, name)
            for name in chats:
                ok(calls[name])
                assert text_of(calls[name]) == "Second answer."
    prompts = agent.prompts()
    assert len(prompts) == 4 and len(agent.pids()) == 1  # one agent process, multiplexed
    first_of = {p["text"][0].upper(): p["sessionId"] for p in prompts if ":" in p["text"]}
    for name in ("A", "B"):
        follow = only([p for p in prompts if p["text"] == f"{name} follow-up question"])
        assert follow["sessionId"] == first_of[name], f"chat {name}'s second request went to another session"
    assert first_of["A"] != first_of["B"]


async def test_identical_chats_never_continue_a_session_that_could_be_the_others(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"sleep": 0.2}, {"text": "Same answer."}], [{"text": "Second answer."}]], "turns_per_session": True})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            calls: list[Any] = []

            async def run(messages: list[dict[str, Any]]) -> None:
                calls.append(await c.chat(agent.id, messages))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, [user("hello")])
                tg.start_soon(run, [user("hello")])
            first = calls[0]
            calls.clear()
            history = [user("hello"), assistant(first.parts), user("follow-up")]
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, history)
                tg.start_soon(run, history)
            for call in calls:
                ok(call)
    prompts = agent.prompts()
    assert len(agent.pids()) == 1
    follow_ups = [p for p in prompts if p["blocks"][-1]["text"] == "follow-up"]
    # Nothing tells the two chats apart (same words, same answer): neither request may
    # continue a session that could be the other chat's. Each goes to a fresh session
    # told the conversation.
    assert len(follow_ups) == 2 and {p["sessionId"] for p in follow_ups} == {"s3", "s4"}
    assert all(p["blocks"][0]["text"].startswith(CONTEXT_OPEN) for p in follow_ups)


async def test_rerendered_system_prompt_and_user_context_still_match(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"text": "First answer."}], [{"text": "Second answer."}], [{"text": "Third answer."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            current = "<context>\nThe current date is 2025-01-01.\nActive editor: main.py\n</context>\nfix the bug in main.py"
            first = await c.chat(agent.id, [system("You are Copilot. Version 1."), user(current)])
            ok(first)
            history = [
                system("You are Copilot. Version 2, re-rendered with other rules."),
                user("fix the bug in main.py"),  # replayed: rendered without its context
                assistant(first.parts),
                user("<context>\nThe current date is 2025-01-02.\n</context>\nnow add a test"),
            ]
            second = await c.chat(agent.id, history)
            ok(second)
            assert text_of(second) == "Second answer."
            history = [
                system("You are Copilot. Version 3."),
                user("<reminder>be brief</reminder>\nfix the bug in main.py"),
                assistant(first.parts),
                user("now add a test"),
                assistant(second.parts),
                user("<context>date 2025-01-03</context>\nand run it"),
            ]
            third = await c.chat(agent.id, history)
            ok(third)
    prompts = agent.prompts()
    assert len(agent.pids()) == 1 and len(agent.events("session_new")) == 1
    assert [p["sessionId"] for p in prompts] == ["s1", "s1", "s1"]
    assert prompts[0]["text"] == current  # system messages are not forwarded
    assert prompts[1]["text"] == "<context>\nThe current date is 2025-01-02.\n</context>\nnow add a test"
    assert prompts[2]["text"] == "<context>date 2025-01-03</context>\nand run it"
    assert not any("Copilot" in p["text"] or CONTEXT_OPEN in p["text"] for p in prompts)


async def test_edited_earlier_turn_starts_a_fresh_session_with_the_conversation(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"text": "First answer."}], [{"text": "Second answer."}],
                                [{"text": "Answer to the edited question."}], [{"text": "Later answer."}]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("question one")])
            history = [user("question one"), assistant(first.parts), user("question two")]
            ok(await c.chat(agent.id, history))
            # The user edited "question two": VS Code sends the conversation up to the edit.
            edited = [user("question one"), assistant(first.parts), user("question two, edited")]
            third = await c.chat(agent.id, edited)
            ok(third)
            assert text_of(third) == "Answer to the edited question."
            fourth = await c.chat(agent.id, [*edited, assistant(third.parts), user("question three")])
            ok(fourth)
            assert text_of(fourth) == "Later answer."
    assert len(agent.pids()) == 1
    old = [p for p in agent.prompts() if p["sessionId"] == "s1"]
    new = [p for p in agent.prompts() if p["sessionId"] == "s2"]
    assert [p["text"] for p in old] == ["question one", "question two"]  # nothing re-sent to the old session
    context, *rest = new[0]["blocks"]
    assert context["text"].startswith(CONTEXT_OPEN)
    assert "question one" in context["text"] and "First answer." in context["text"]
    assert "question two" not in context["text"] and "Second answer." not in context["text"]
    assert [b["text"] for b in rest] == ["question two, edited"]
    assert new[1]["text"] == "question three"  # the fresh session continues normally


async def test_assistant_turn_the_daemon_never_emitted_diverges(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"text": "First answer."}], [{"text": "Second answer."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            ok(await c.chat(agent.id, [user("question one")]))
            # The user regenerated the answer with another model, then asked on.
            other = {"role": "assistant", "content": [{"type": "text", "value": "An answer from another model."}]}
            second = await c.chat(agent.id, [user("question one"), other, user("question two")])
            ok(second)
    assert len(agent.pids()) == 1
    old = [p for p in agent.prompts() if p["sessionId"] == "s1"]
    new = only([p for p in agent.prompts() if p["sessionId"] == "s2"])
    assert [p["text"] for p in old] == ["question one"]
    assert new["blocks"][0]["text"].startswith(CONTEXT_OPEN)
    assert "An answer from another model." in new["blocks"][0]["text"]
    assert "question one" in new["blocks"][0]["text"]
    assert new["blocks"][-1]["text"] == "question two"


async def test_unseen_turns_in_the_middle_are_given_as_context(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"text": "First answer."}], [{"text": "Second answer."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("question one")])
            other = {"role": "assistant", "content": [{"type": "text", "value": "Another model's answer."}]}
            history = [user("question one"), assistant(first.parts), user("question two"), other, user("question three")]
            ok(await c.chat(agent.id, history))
    prompts = agent.prompts()
    assert len(prompts) == 2
    last = prompts[-1]["text"]
    # The agent never saw "question two" or the other model's answer: it gets them, and not what it saw.
    assert "question two" in last and "Another model's answer." in last and last.endswith("question three")
    assert "question one" not in last and "First answer." not in last


async def test_daemon_restart_gives_the_new_agent_the_conversation(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [[{"text": "First answer."}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user("question one")])
        async with daemon([agent]) as c:
            ok(await c.chat(agent.id, [user("question one"), assistant(first.parts), user("question two")]))
    new = agent.prompts()[-1]
    assert "question one" in new["blocks"][0]["text"] and "First answer." in new["blocks"][0]["text"]
    assert new["blocks"][-1]["text"] == "question two"


# ---------------------------------------------------------------- cancellation


@pytest.mark.parametrize("on_cancel", ["cancelled", "end_turn", "error"])
async def test_cancel_mid_stream(scripted: Any, shared: Any, on_cancel: str, tmp_path: Path) -> None:
    gate = tmp_path / "end-the-cancelled-turn"
    agent = scripted({
        "turns": [[{"text": "Streaming..."}, {"sleep": 30}, {"text": "NEVER"}], [{"text": "Fresh answer."}]],
        "on_cancel": on_cancel,
        "after_cancel": [{"gate": str(gate)}, {"text": "LATE-AFTER-CANCEL"}, {"thought": "LATE-THOUGHT"},
                         {"tool_call": {"toolCallId": "late", "title": "LATE-TOOL", "status": "pending"}}],
    })
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": [user("stream please")]})
            await eventually(lambda: call.parts, what="the first part")
            await c.cancel(call)
            with anyio.fail_after(10):  # ms idle
                await call.done.wait()
            # Promptly: answered while the agent has not ended its turn (it waits on the gate).
            assert not agent.events("prompt_answered")
            gate.touch()
            assert call.error is None and call.result == {"stopReason": "cancelled"}
            parts_at_cancel = list(call.parts)
            await eventually(lambda: agent.events("cancel"), what="session/cancel at the agent")
            # VS Code keeps the partial answer; the next request asks on.
            history = [user("stream please"), assistant(parts_at_cancel), user("and now?")]
            second = await c.chat(agent.id, history)
            ok(second)
            assert text_of(second) == "Fresh answer."
            assert all("LATE" not in json.dumps(p) for p in second.parts)
            await anyio.sleep(0.2)
    assert call.late_parts == 0 and call.parts == parts_at_cancel
    assert not [f for f in c.unmatched if f.get("method") == "lm/responsePart"]
    assert only(agent.events("cancel"))["active"]
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s1"] and prompts[1]["text"] == "and now?"
    events = [e["event"] for e in agent.events() if e["event"] in ("prompt", "prompt_answered")]
    assert events == ["prompt", "prompt_answered", "prompt", "prompt_answered"]  # drained before the next prompt


async def test_cancelled_turn_never_ended_by_the_agent_gets_a_fresh_session_with_context(scripted: Any, daemon: Any) -> None:
    agent = scripted({
        "turns": [[{"text": "Streaming..."}, {"sleep": 30}], [{"text": "Fresh answer."}]],
        "on_cancel": "never",
        "after_cancel": [{"text": "LATE-AFTER-CANCEL"}],
    })
    with anyio.fail_after(LIMIT):
        async with daemon([agent], env={"LMBRIDGE_DRAIN_TIMEOUT": "0.5"}) as c:
            call = await c.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": [user("stream please")]})
            await eventually(lambda: call.parts, what="the first part")
            await c.cancel(call)
            with anyio.fail_after(10):  # ms idle
                await call.done.wait()
            assert call.result == {"stopReason": "cancelled"}
            history = [system("sys"), user("stream please"), assistant(call.parts), user("and now?")]
            second = await c.chat(agent.id, history)
            ok(second)
            assert text_of(second) == "Fresh answer."
    assert [e["sessionId"] for e in agent.events("session_new")] == ["s1", "s2"]
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s2"]
    # The new ACP session has seen nothing: it gets the conversation so far.
    context = prompts[1]["blocks"][0]["text"]
    assert context.startswith(CONTEXT_OPEN) and "stream please" in context and "Streaming..." in context
    assert "sys" not in context.replace("session", "")
    assert prompts[1]["blocks"][-1]["text"] == "and now?"


async def test_a_request_cancelled_while_waiting_for_the_drain_loses_nothing(scripted: Any, shared: Any, tmp_path: Path) -> None:
    gate = tmp_path / "end-the-cancelled-turn"
    agent = scripted({
        "turns": [[{"text": "Streaming..."}, {"sleep": 30}], [{"text": "Third answer."}]],
        "after_cancel": [{"gate": str(gate)}],
    })
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            chat = "lm/provideLanguageModelChatResponse"
            first = await c.start(chat, {"modelId": agent.id, "messages": [user("one")]})
            await eventually(lambda: first.parts, what="the first part")
            await c.cancel(first)
            await first.done.wait()
            history = [user("one"), assistant(first.parts), user("two")]
            # The agent is still ending the cancelled turn: this request waits, and is cancelled too.
            second = await c.start(chat, {"modelId": agent.id, "messages": history})
            await anyio.sleep(0.1)
            await c.cancel(second)
            with anyio.fail_after(10):  # ms idle
                await second.done.wait()
            assert second.result == {"stopReason": "cancelled"} and not second.parts
            gate.touch()
            third = await c.chat(agent.id, [*history, user("three")])
            ok(third)
            assert text_of(third) == "Third answer."
    prompts = agent.prompts()
    assert len(prompts) == 2 and prompts[1]["sessionId"] == "s1"
    # "two" never reached the agent when its request was cancelled: it comes with "three".
    assert "two" in prompts[1]["text"] and prompts[1]["text"].endswith("three")
    assert "one" not in prompts[1]["text"] and "Streaming..." not in prompts[1]["text"]


async def test_string_request_ids(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"text": "Streaming..."}, {"sleep": 30}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            frame = {"jsonrpc": "2.0", "id": "req-abc", "method": "lm/provideLanguageModelChatResponse",
                     "params": {"modelId": agent.id, "messages": [user("hi")]}}
            call = await c.start_frame(frame)
            await eventually(lambda: call.parts, what="the first part")
            await c.send_frame({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "req-abc"}})
            with anyio.fail_after(10):  # ms idle
                await call.done.wait()
            assert call.result == {"stopReason": "cancelled"}


async def test_cancelled_partial_answer_dropped_by_vscode(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"text": "Streaming..."}, {"sleep": 30}], [{"text": "Second."}], [{"text": "Third."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": [user("first question")]})
            await eventually(lambda: call.parts, what="the first part")
            await c.cancel(call)
            await call.done.wait()
            # VS Code shows the stopped turn without its answer: only user messages remain.
            history = [user("first question"), user("second question")]
            second = await c.chat(agent.id, history)
            ok(second)
            third = await c.chat(agent.id, [*history, assistant(second.parts), user("third question")])
            ok(third)
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1"] * 3 and len(agent.pids()) == 1
    assert [p["text"] for p in prompts] == ["first question", "second question", "third question"]


async def test_cancel_before_the_first_part(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"sleep": 30}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": [user("hi")]})
            await eventually(lambda: agent.events("prompt"), what="the prompt at the agent")
            await c.cancel(call)
            with anyio.fail_after(10):  # ms idle
                await call.done.wait()
            assert call.result == {"stopReason": "cancelled"} and not call.parts
            await eventually(lambda: agent.events("cancel"), what="session/cancel at the agent")
            # A cancel for a request that already ended is ignored.
            await c.cancel(call)
            ok(await c.chat(agent.id, [user("hi"), user("again")]))
    assert not c.unmatched


async def test_cancel_while_waiting_on_a_permission_cancels_it(scripted: Any, shared: Any, tmp_path: Path) -> None:
    # The second request answers the permission; cancelled before it ends, it must approve nothing.
    agent = scripted({"turns": [[{"permission": {}, "id": "p1"}, {"branch": "p1", "allow": [{"sleep": 30}]}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("go")])
            part = only(tool_calls(first))
            history = [user("go"), assistant(first.parts), approve(part)]
            call = await c.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": history})
            await eventually(lambda: agent.outcomes(), what="the permission's answer")
            await c.cancel(call)
            with anyio.fail_after(10):  # ms idle
                await call.done.wait()
            assert call.result == {"stopReason": "cancelled"}
            await eventually(lambda: agent.events("cancel"), what="session/cancel")


# ---------------------------------------------------------------- agent misbehaviour


async def test_agent_crash_reports_stderr_and_the_next_request_starts_fresh(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"text": "Partial output."}, {"stderr": "fatal: the scripted agent blew up"}, {"crash": 3}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("question one")])
            assert first.result is None and isinstance(first.error, RPCError)
            assert first.error.code == -32000
            assert f"'{agent.id}'" in first.error.message and "code 3" in first.error.message
            assert "fatal: the scripted agent blew up" in first.error.message
            (crashed,) = agent.pids()
            agent.write({"turns": [[{"text": "I am the new agent."}]]})
            history = [user("question one"), assistant(first.parts), user("question two")]
            second = await c.chat(agent.id, history)
            ok(second)
            assert text_of(second) == "I am the new agent."
    pids = agent.pids()
    assert len(pids) == 2 and pids[0] == crashed
    new = only([p for p in agent.prompts() if p["pid"] == pids[1]])
    assert new["blocks"][0]["text"].startswith(CONTEXT_OPEN) and "question one" in new["blocks"][0]["text"]
    assert new["blocks"][-1]["text"] == "question two"


async def test_agent_crash_is_noticed_while_a_grandchild_holds_its_stdout(scripted: Any, shared: Any, tmp_path: Path) -> None:
    # The agent started a helper that inherited its stdout: no EOF when the agent dies.
    agent = scripted({"turns": [[{"text": "Partial output."}, {"stderr": "dying now"}, {"crash": 5}]]})
    pidfile = tmp_path / "helper.pid"
    script = f"sleep 60 & echo $! > {pidfile}; exec {sys.executable} \"$@\""
    spec = {**agent.spec, "command": "sh", "args": ["-c", script, "sh", *agent.spec["args"]]}
    with anyio.fail_after(LIMIT):
        async with shared([spec]) as c:
            started = time.monotonic()
            call = await c.chat(agent.id, [user("hi")], timeout=50)
            assert call.error is not None and "code 5" in call.error.message and "dying now" in call.error.message
            # ~1 s idle; not when the helper's stdout closes (its sleep 60 ends)
            assert time.monotonic() - started < 50
            helper = int(pidfile.read_text())
            await eventually(lambda: not alive(helper), what="the helper to be stopped with its agent")


async def test_agent_crash_while_a_permission_waits(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"permission": {}, "id": "p1"}, {"branch": "p1", "allow": [{"crash": 9}]}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("go")])
            part = only(tool_calls(first))
            second = await c.chat(agent.id, [user("go"), assistant(first.parts), approve(part)])
            assert second.error is not None and "code 9" in second.error.message
            agent.write({})
            ok(await c.chat(agent.id, [user("go"), assistant(first.parts), approve(part), user("still there?")]))
    assert len(agent.pids()) == 2


async def test_prompt_error_names_the_agent(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"text": "partial"}, {"error": {"code": -32603, "message": "model overloaded"}}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, [user("hi")])
            assert call.error is not None and call.error.code == -32000
            assert f"'{agent.id}'" in call.error.message and "model overloaded" in call.error.message
            agent.write({})
            ok(await c.chat(agent.id, [user("hi"), assistant(call.parts), user("again")]))


async def test_stop_reasons_pass_through(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[{"text": "a"}, {"stop": reason}] for reason in ("max_tokens", "refusal", "something_new")]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            ok(await c.chat(agent.id, [user("one")]), "max_tokens")
            ok(await c.chat(agent.id, [user("two")]), "refusal")
            ok(await c.chat(agent.id, [user("three")]), "end_turn")


@pytest.mark.parametrize("images", [True, False])
async def test_user_content_becomes_acp_blocks(scripted: Any, shared: Any, images: bool) -> None:
    agent = scripted({"initialize": {"agentCapabilities": {"promptCapabilities": {"image": images}}}})
    png = "iVBORw0KGgo="
    message = {"role": "user", "content": [
        {"type": "text", "value": "look at this"},
        {"type": "data", "mimeType": "image/png", "data": png},
        {"type": "data", "mimeType": "cache_control", "data": "ZXBoZW1lcmFs"},
        {"type": "data", "mimeType": "stateful_marker", "data": "eHl6"},
        {"type": "thinking", "value": "not for the agent"},
    ]}
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            ok(await c.chat(agent.id, [message]))
    blocks = only(agent.prompts())["blocks"]
    assert blocks[0] == {"type": "text", "text": "look at this"}
    if images:
        assert blocks[1:] == [{"type": "image", "mimeType": "image/png", "data": png}]
    else:
        assert len(blocks) == 2 and blocks[1]["type"] == "text" and "image" in blocks[1]["text"]


async def test_agent_dying_while_a_permission_waits_approves_nothing(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    # The response ends with the permission; then, while no request runs, the agent dies.
    turn = write_turn()
    agent = scripted({"turns": [[*turn[:2], {"sleep": 0.3}, {"stderr": "oom"}, {"crash": 137}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            history = [user("please write my notes")]
            first = await c.chat(agent.id, history)
            ok(first, "tool_calls")
            part = only(tool_calls(first))
            await eventually(lambda: not alive(agent.pids()[0]), what="the agent's death")
            # ...and the daemon noticed it (a request racing the death gets the crash error instead).
            await eventually(lambda: "session dropped" in (tmp_path / "daemon.stderr").read_text(), what="the daemon noticing")
            agent.write({"turns": [[{"text": "Fresh agent here."}]]})
            second = await c.chat(agent.id, [*history, assistant(first.parts), approve(part)])
            ok(second)
            assert text_of(second) == "Fresh agent here."
    assert not (tmp_path / "notes.txt").exists() and not agent.outcomes()
    pids = agent.pids()
    assert len(pids) == 2
    fresh = only([p for p in agent.prompts() if p["pid"] == pids[1]])
    assert fresh["blocks"][0]["text"].startswith(CONTEXT_OPEN) and "please write my notes" in fresh["text"]
    assert "asked permission: Write notes.txt" in fresh["text"]
    assert "[permission 'Write notes.txt': allowed by the user]" in fresh["text"]
    assert part["input"]["approvalToken"] not in fresh["text"]  # the token means nothing to it


async def test_lone_surrogates_both_ways(scripted: Any, shared: Any) -> None:
    # JSON allows escaped lone surrogates ("\\ud800"); JavaScript strings hold them.
    agent = scripted({"turns": [[{"text": "bad \ud800 char"}, {"text": " and fine"}], [{"text": "still here"}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, [user("hi \udc00 there")])
            ok(call)
            assert "and fine" in text_of(call)
            ok(await c.chat(agent.id, [user("hi \udc00 there"), assistant(call.parts), user("more")]))
    assert "hi" in agent.prompts()[0]["text"]


async def test_agent_that_cannot_start(shared: Any) -> None:
    spec = {"id": "broken", "command": "/nonexistent/acp-agent-binary", "args": ["--acp"]}
    dies = {"id": "dies-at-start", "command": sys.executable,
            "args": ["-c", "import sys; sys.stderr.write('unknown flag --acp\\n'); sys.exit(2)"]}
    with anyio.fail_after(LIMIT):
        async with shared([spec, dies]) as c:
            for _ in range(2):
                call = await c.chat("broken", [user("hi")])
                assert call.error is not None and call.error.code == -32000
                assert "'broken'" in call.error.message and "/nonexistent/acp-agent-binary" in call.error.message
            call = await c.chat("dies-at-start", [user("hi")])
            assert call.error is not None and call.error.code == -32000
            assert "'dies-at-start'" in call.error.message and "code 2" in call.error.message
            assert "unknown flag --acp" in call.error.message


async def test_non_json_agent_stdout_is_skipped(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[
        {"text": "before "},
        {"stdout_raw": "Debugger listening on ws://127.0.0.1:9229 {not json"},
        {"stdout_raw": "[1, 2, 3]"},
        {"stdout_raw": ""},
        {"text": "after"},
    ]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, [user("hi")])
    ok(call)
    assert text_of(call) == "before after"


async def test_invalid_updates_and_unknown_kinds_are_skipped_without_losing_others(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[
        {"text": "one "},
        {"update": {"sessionUpdate": "usage_update", "used": None, "size": 1000}},  # claude-agent-acp 0.23.1
        {"update": {"sessionUpdate": "brand_new_unstable_kind", "x": 1}},
        {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}}},  # no text
        {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "two "},
                    "_meta": "not an object"}},  # a bad optional field: the rest survives
        {"update": 5},
        {"update": {"no": "kind"}},
        {"tool_call": {"toolCallId": "t1", "title": "Read config", "kind": "not-a-kind", "status": "pending"}},
        {"update": {"sessionUpdate": "plan", "entries": "not a list"}},
        {"text": "three"},
    ]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, [user("hi")])
    ok(call)
    text = text_of(call)
    assert text.startswith("one two ") and "three" in text
    assert "Read config" in text  # the tool call survived its bad kind...
    assert "ended without a result" in text  # ...and, never finished, was closed at the turn's end
    assert text.count("Read config") == 2


async def test_agent_requests_the_client_does_not_offer_get_method_not_found(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [[
        {"send": {"jsonrpc": "2.0", "id": 900, "method": "x/not_offered", "params": {"sessionId": "s1", "path": "/etc/hostname"}}},
        {"sleep": 0.2},
        {"text": "done"},
    ]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            ok(await c.chat(agent.id, [user("hi")]))
    answer = only([e for e in agent.entries() if e.get("id") == 900 and "method" not in e])
    assert answer["error"]["code"] == -32601


# ---------------------------------------------------------------- the wire


async def test_malformed_frames_get_parse_errors_and_the_daemon_keeps_working(daemon: Any) -> None:
    with anyio.fail_after(LIMIT):
        async with daemon() as c:
            await c.send_raw("this is not json\n")
            await c.send_raw(b"\xff\xfe{\x80\n")
            await c.send_raw('{"jsonrpc": "2.0", "id": 500, "method": "initialize", "params": {\n')
            await c.send_raw("\n   \n")
            await eventually(lambda: len(c.unmatched) >= 3, what="three parse errors")
            errors = [f["error"] for f in c.unmatched]
            assert all(e["code"] == -32700 and "parse error" in e["message"] for e in errors)
            assert all(f["id"] is None for f in c.unmatched) and len(c.unmatched) == 3
            await c.send_raw('{"jsonrpc": "2.0", "id": 501}\n')  # no method
            await c.send_raw('"a string"\n')
            await eventually(lambda: len(c.unmatched) >= 5, what="two invalid-request errors")
            assert [f["error"]["code"] for f in c.unmatched[3:]] == [-32600, -32600]
            models = await c.request("lm/provideLanguageModelChatInformation", {}, timeout=30)
            assert [m["id"] for m in models["models"]] == ["demo"]


async def test_unknown_method(daemon: Any) -> None:
    with anyio.fail_after(LIMIT):
        async with daemon() as c:
            with pytest.raises(RPCError) as err:
                await c.request("lm/noSuchMethod", {})
            assert err.value.code == -32601 and "lm/noSuchMethod" in err.value.message
            await c.send_frame({"jsonrpc": "2.0", "method": "$/noSuchNotification", "params": {}})
            assert (await c.request("lm/provideTokenCount", {"modelId": "demo", "text": "abcd"}))["count"] >= 1
            await anyio.sleep(0.1)
            assert not c.unmatched  # a notification is never answered


INVALID = {
    "no-messages": ("lm/provideLanguageModelChatResponse", {"modelId": "demo"}, "messages"),
    "bad-role": ("lm/provideLanguageModelChatResponse", {"modelId": "demo", "messages": [{"role": "robot", "content": []}]}, "role"),
    "text-without-value": ("lm/provideLanguageModelChatResponse", {"modelId": "demo", "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "value"),
    "result-without-callId": ("lm/provideLanguageModelChatResponse", {"modelId": "demo", "messages": [{"role": "user", "content": [{"type": "tool_result", "content": []}]}]}, "callId"),
    "empty-messages": ("lm/provideLanguageModelChatResponse", {"modelId": "demo", "messages": []}, "user message"),
    "ends-with-assistant": ("lm/provideLanguageModelChatResponse", {"modelId": "demo", "messages": [
        {"role": "user", "content": [{"type": "text", "value": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "value": "x"}]}]}, "user message"),
    "only-system": ("lm/provideLanguageModelChatResponse", {"modelId": "demo", "messages": [
        {"role": "system", "content": [{"type": "text", "value": "sys"}]}]}, "user message"),
    "bad-toolMode": ("lm/provideLanguageModelChatResponse", {"modelId": "demo", "messages": [{"role": "user", "content": []}], "options": {"toolMode": "sometimes"}}, "toolMode"),
    "count-without-text": ("lm/provideTokenCount", {"modelId": "demo"}, "text"),
    "protocol-2": ("initialize", {"protocolVersion": 2}, "protocolVersion"),
    # An agent without a command names a preset, or is left out with a reason: tests/test_auth.py.
    "agent-with-empty-command": ("initialize", {"protocolVersion": 1, "agents": [{"id": "x", "command": ""}]}, "command"),
    "positional-params": ("lm/provideLanguageModelChatResponse", ["demo", []], "params"),
    "count-of-a-number": ("lm/provideTokenCount", {"modelId": "demo", "text": 5}, "text"),
}


async def test_invalid_params(daemon: Any) -> None:
    with anyio.fail_after(LIMIT):
        async with daemon() as c:
            for name, (method, params, says) in INVALID.items():
                with pytest.raises(RPCError) as err:
                    await c.request(method, params, timeout=60)  # ms idle; the first request up to ~0.5 s (imports)
                assert err.value.code == -32602, (name, err.value)
                assert says in err.value.message, (name, err.value.message)
            # The daemon is still fine, and started no agent for any of them.
            assert (await c.request("lm/provideTokenCount", {"modelId": "demo", "text": "abcd"}))["count"] >= 1
            assert not c.unmatched


async def test_unknown_model(scripted: Any, shared: Any) -> None:
    agent = scripted({})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat("no-such-model", [user("hi")])
    assert call.error is not None and call.result is None and not call.parts
    assert "no-such-model" in call.error.message and agent.id in call.error.message
    assert call.error.data == {"kind": "unknown_model"}
    assert not agent.pids()


async def test_ten_megabyte_lines_both_ways(scripted: Any, shared: Any) -> None:
    size = 10 * 1024 * 1024
    agent = scripted({"turns": [[{"big_text": size}, {"text": "|end"}]]})
    big = "y" * size
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, [user(big)])
            ok(call)
            text = text_of(call)
            assert len(text) == size + len("|end") and text.endswith("x|end")
            assert (await c.request("lm/provideTokenCount", {"modelId": agent.id, "text": big}))["count"] > 1000
    assert only(agent.prompts())["text"] == big


# ---------------------------------------------------------------- lifetime


async def test_shutdown_then_eof_stops_every_agent(scripted: Any, daemon: Any) -> None:
    # Two chats on the agent's one process: one waits on a permission, one streams.
    agent = scripted({"turns": [[{"permission": {}, "id": "p1"}, {"await": "p1"}], [{"text": "working"}, {"sleep": 60}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            first = await c.chat(agent.id, [user("chat one")])
            ok(first, "tool_calls")
            streaming = await c.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": [user("chat two")]})
            await eventually(lambda: streaming.parts, what="the second chat streaming")
            pids = agent.pids()
            assert len(pids) == 1 and all(alive(p) for p in pids) and len(agent.events("session_new")) == 2
            started = time.monotonic()
            assert await c.request("shutdown", None, timeout=30) is None
            with anyio.fail_after(30):
                await streaming.done.wait()
            assert streaming.error is not None  # the request in flight ended with an error
            late = await c.chat(agent.id, [user("after shutdown")], timeout=30)
            assert late.error is not None and "shutting down" in late.error.message
            code = await c.close(timeout=30)
            assert code == 0
            # ~0.3 s idle; not when the streaming turn's sleep 60 ends
            assert time.monotonic() - started < 50
            assert not any(alive(p) for p in pids)
    assert only(agent.outcomes())["kind"] == "cancelled"  # the pending permission was answered


async def test_eof_without_shutdown_stops_every_agent(scripted: Any, daemon: Any) -> None:
    agent = scripted({"turns": [[{"permission": {}, "id": "p1"}, {"await": "p1"}], [{"text": "working"}, {"sleep": 60}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            ok(await c.chat(agent.id, [user("chat one")]), "tool_calls")
            streaming = await c.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": [user("chat two")]})
            await eventually(lambda: streaming.parts, what="the second chat streaming")
            pids = agent.pids()
            assert len(pids) == 1 and len(agent.events("session_new")) == 2
            started = time.monotonic()
            code = await c.close(timeout=50)
            elapsed = time.monotonic() - started
    assert code == 0 and elapsed < 50  # ~0.3 s idle; not when the streaming turn's sleep 60 ends
    assert not any(alive(p) for p in pids)


async def test_eof_stops_an_agent_that_ignores_eof_and_sigterm(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    agent = scripted({})
    pidfile = tmp_path / "stubborn.pid"
    # The shell ignores SIGTERM (so does everything it starts) and outlives the agent's EOF.
    script = f"trap '' TERM; echo $$ > {pidfile}; {sys.executable} \"$@\"; exec sleep 60"
    spec = {**agent.spec, "command": "sh", "args": ["-c", script, "sh", *agent.spec["args"]]}
    with anyio.fail_after(LIMIT):
        async with daemon([spec]) as c:
            ok(await c.chat(agent.id, [user("hi")]))
            shell = int(pidfile.read_text())
            assert alive(shell)
            started = time.monotonic()
            code = await c.close(timeout=50)
            elapsed = time.monotonic() - started
    # stdin closed, SIGTERM ignored, SIGKILL: ~4.5 s idle; not when the shell's sleep 60 ends
    assert code == 0 and elapsed < 50
    assert not alive(shell) and not any(alive(p) for p in agent.pids())


async def test_idle_eviction_cancels_the_pending_permission_and_stops_the_agent(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [write_turn()]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], args=["--idle-timeout", "0.5"]) as c:
            history = [user("please write my notes")]
            first = await c.chat(agent.id, history)
            ok(first, "tool_calls")
            (pid,) = agent.pids()
            outcome = await eventually(lambda: agent.outcomes(), what="the eviction's answer")
            assert only(outcome)["kind"] == "cancelled"
            await eventually(lambda: not alive(pid), what="the evicted agent to exit")
            # A late Allow for the evicted session approves nothing: a fresh session gets the story.
            agent.write({"turns": [[{"text": "Fresh session."}]]})
            second = await c.chat(agent.id, [*history, assistant(first.parts), approve(only(tool_calls(first)))])
            assert second.error is None
    assert not (tmp_path / "notes.txt").exists()
    assert [o["kind"] for o in agent.outcomes()] == ["cancelled"]
    assert len(agent.pids()) == 2


async def test_claude_quirk_empty_turn_after_cancel_recovers_in_a_fresh_session(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [
        write_turn(),
        [{"stop": "end_turn"}],  # claude-agent-acp after a cancel: at once, empty
        [{"text": "Recovered answer."}],
        [{"text": "Third answer."}],
    ]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [system("You are Copilot."), user("please write my notes")])
            ok(first, "tool_calls")
            history = [system("You are Copilot, again."), user("please write my notes"), user("forget it; say hi")]
            second = await c.chat(agent.id, history)  # Stop pressed, then a new message
            ok(second)
            assert text_of(second) == "Recovered answer."
            third = await c.chat(agent.id, [*history, assistant(second.parts), user("and again")])
            ok(third)
            assert text_of(third) == "Third answer."
    sessions = [e["sessionId"] for e in agent.events("session_new")]
    assert sessions == ["s1", "s2"] and len(agent.pids()) == 1
    prompts = agent.prompts()
    assert [p["sessionId"] for p in prompts] == ["s1", "s1", "s2", "s2"]
    recovery = prompts[2]
    assert recovery["blocks"][0]["text"].startswith(CONTEXT_OPEN)
    assert "please write my notes" in recovery["blocks"][0]["text"]
    assert "Copilot" not in recovery["text"]  # system messages are not forwarded, not even as context
    assert recovery["blocks"][-1]["text"] == "forget it; say hi"
    assert prompts[3]["text"] == "and again"


async def test_a_silent_turn_end_after_an_approval_is_not_the_claude_quirk(scripted: Any, shared: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [
        [{"text": "Streaming..."}, {"sleep": 30}],
        [{"permission": {"toolCall": {"toolCallId": "w", "title": "Write", "status": "pending"}}, "id": "p1"},
         {"branch": "p1", "allow": [{"write_file": {"path": "once.txt", "content": "x"}},
                                    {"tool_call_update": {"toolCallId": "w", "status": "completed"}}]}],
        [{"text": "A THIRD PROMPT: the action would run twice"}],
    ]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": [user("one")]})
            await eventually(lambda: call.parts, what="the first part")
            await c.cancel(call)
            await call.done.wait()
            history = [user("one"), assistant(call.parts), user("two")]
            first = await c.chat(agent.id, history)
            ok(first, "tool_calls")
            second = await c.chat(agent.id, [*history, assistant(first.parts), approve(only(tool_calls(first)))])
            ok(second)
            assert "THIRD" not in text_of(second)
    assert (tmp_path / "once.txt").exists()
    assert len(agent.prompts()) == 2 and len(agent.events("session_new")) == 1



# ---------------------------------------------------------------- stateful markers and usage (docs/vscode.md)


def _marker_text(part: dict[str, Any]) -> str:
    import base64

    return base64.b64decode(part["data"]).decode()


async def test_every_answer_carries_its_marker_first_and_its_usage_last(scripted: Any, shared: Any) -> None:
    usage = {"sessionUpdate": "usage_update", "used": 1234, "size": 200000}
    agent = scripted({"turns": [[{"update": usage}, {"text": "One."}], [{"text": "Two."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("count")])
            ok(first)
            second = await c.chat(agent.id, [user("count"), assistant(first.parts, first.data), user("on")])
            ok(second)
    for call in (first, second):
        assert call.data[0]["mimeType"] == "stateful_marker"
        model, marker = _marker_text(call.data[0]).split("\\")
        assert model == agent.id and marker.startswith("lmb1.")
    assert _marker_text(first.data[0]).split(".")[1] == _marker_text(second.data[0]).split(".")[1]  # one session
    assert [_marker_text(c.data[0]).split(".")[2] for c in (first, second)] == ["1", "2"]  # its answers 1 and 2
    import base64

    ring = json.loads(base64.b64decode(first.data[-1]["data"]))
    assert first.data[-1]["mimeType"] == "usage"
    assert ring["prompt_tokens"] == 1234 and ring["total_tokens"] == ring["prompt_tokens"] + ring["completion_tokens"]
    assert [p["sessionId"] for p in agent.prompts()] == ["s1", "s1"]


@pytest.mark.parametrize("with_marker", [True, False])
async def test_a_stopped_answer_vscode_kept_cut_mid_part_continues_by_its_marker(scripted: Any, shared: Any, with_marker: bool) -> None:
    # What VS Code re-sends of a stopped answer may end inside a part the daemon sent (a Stop
    # while a command's output streamed): by text that is no answer of the daemon's; its
    # marker still names it.
    agent = scripted({"turns": [[{"text": "Streaming a long line of output"}, {"sleep": 30}], [{"text": "Next."}]], "on_cancel": "cancelled"})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": [user("stream please")]})
            await eventually(lambda: call.parts, what="the first text part")
            await c.cancel(call)
            await call.done.wait()
            await eventually(lambda: agent.events("cancel"), what="session/cancel at the agent")
            kept = assistant([{"type": "text", "value": "Streaming a long li"}], call.data if with_marker else ())
            second = await c.chat(agent.id, [user("stream please"), kept, user("and now?")])
            ok(second)
    prompts = agent.prompts()
    if with_marker:
        assert [p["sessionId"] for p in prompts] == ["s1", "s1"] and prompts[1]["text"] == "and now?"
    else:  # by text alone: a divergence, a fresh session told the conversation
        assert [p["sessionId"] for p in prompts] == ["s1", "s2"]
