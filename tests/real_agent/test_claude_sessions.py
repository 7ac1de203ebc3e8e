"""Sessions that keep the agent's memory (docs/sessions.md) with the real agent: claude-agent-acp 0.101.0 through ``lmbridge serve``, against
the fake Anthropic API, looking at what the fake model receives.

The agent keeps its own memory of a chat: after a Stop at a permission or while a command
runs (claude-agent-acp 0.101 answers the next prompt in the same session: the stale turn
0.23.1 gave after a cancel is gone, so the chat simply goes on), after a daemon restart
with the same state folder and agent HOME, after an eviction, after a crash of its
process, the next model request still holds the first turn's ``tool_use``/``tool_result``
blocks (session/close + session/resume; claude offers both). Two chats share one agent
process and never cross.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.devtools.client import DaemonClient, approve, assistant, chat_options, text_of, tool_calls, user  # noqa: E402
from tests.conftest import children  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.real_agent.claude import claude_bridge  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds per test body: ≥10x idle (the agent's start and a few turns, 5-20 s idle)


def bridge(tmp_path: Path, fake: FakeAnthropic, *args: str) -> Any:
    return claude_bridge(tmp_path, fake.url, *args)


def bash(command: str) -> dict:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "Run it"}}}


def blocks(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [b for m in body.get("messages") or [] if isinstance(m.get("content"), list) for b in m["content"] if b.get("type") == kind]


def remembers_first_turn(body: dict[str, Any], command: str) -> bool:
    """The model request holds the first turn's Bash tool_use and its (successful) tool_result."""
    uses = [b for b in blocks(body, "tool_use") if b.get("input", {}).get("command") == command]
    results = [b for b in blocks(body, "tool_result") if uses and b.get("tool_use_id") == uses[0].get("id")]
    return bool(uses and results and not results[0].get("is_error"))


async def first_turn(client: DaemonClient, marker: Path) -> list[dict]:
    """A turn that runs ``touch marker`` with the user's approval; returns the history."""
    history = [user(f"Please create {marker.name}")]
    call = await client.chat("claude", history, timeout=TIMEOUT)
    assert call.error is None and call.result == {"stopReason": "tool_calls"}, call.error
    (perm,) = tool_calls(call)
    history += [assistant(call.parts), approve(perm)]
    done = await client.chat("claude", history, timeout=TIMEOUT)
    assert done.error is None and done.result == {"stopReason": "end_turn"}, done.error
    assert marker.exists()
    return [*history, assistant(done.parts)]


def agent_processes(client: DaemonClient) -> list[int]:
    """The daemon's direct children: its agent processes."""
    return children(client.process.pid)


def log_of(tmp_path: Path) -> str:
    return (tmp_path / "daemon.stderr").read_text(errors="replace")


def sessions_opened(log: str) -> list[str]:
    """How the daemon opened each ACP session it logged (``how=``: new, spare, session/resume, session/load)."""
    return re.findall(r"\] acp session .* how=(\S+)", log)


async def test_after_a_stop_at_a_permission_the_agent_still_holds_the_first_turn(tmp_path: Path) -> None:
    marker, second = tmp_path / "one.txt", tmp_path / "two.txt"
    replies = [[{"text": "Creating it."}, bash(f"touch {marker}")], [{"text": "Created."}], [bash(f"touch {second}")]]
    with FakeAnthropic(replies, done_text="I remember the first file.") as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                history = await first_turn(client, marker)
                ask = await client.chat("claude", [*history, user("Now create two.txt")], timeout=TIMEOUT)
                assert ask.result == {"stopReason": "tool_calls"}
                # Stop at the card: VS Code drops that round and sends the next message.
                call = await client.chat("claude", [*history, user("Now create two.txt"), user("Never mind. What did you do first?")], timeout=TIMEOUT)
            assert call.error is None and "I remember the first file." in text_of(call)
            assert not second.exists()
            assert remembers_first_turn(fake.main_requests()[-1], f"touch {marker}")
    # claude-agent-acp 0.101 answers the prompt after a cancel in the same session (0.23.1
    # ended it at once, empty: closed and resumed), so the chat went on in its one session.
    assert sessions_opened(log_of(tmp_path)) == ["new"]


async def test_after_a_daemon_restart_the_agent_still_holds_the_first_turn(tmp_path: Path) -> None:
    marker = tmp_path / "one.txt"
    with FakeAnthropic([[bash(f"touch {marker}")], [{"text": "Created."}]], done_text="Still here.") as fake:
        with anyio.fail_after(TIMEOUT):
            async with bridge(tmp_path, fake) as client:
                history = await first_turn(client, marker)
            async with bridge(tmp_path, fake) as client:  # VS Code reloaded: a new daemon
                call = await client.chat("claude", [*history, user("And now?")], timeout=TIMEOUT)
        assert call.error is None and "Still here." in text_of(call)
        last = fake.main_requests()[-1]
        assert remembers_first_turn(last, f"touch {marker}")
        # Continued, not told: no transcript of the conversation in the new user message.
        assert "<conversation" not in str(last["messages"][-1]["content"])
    assert log_of(tmp_path).count("how=session/resume") == 1


async def test_after_an_eviction_the_agent_still_holds_the_first_turn(tmp_path: Path) -> None:
    marker = tmp_path / "one.txt"
    with FakeAnthropic([[bash(f"touch {marker}")], [{"text": "Created."}]], done_text="Back again.") as fake:
        async with bridge(tmp_path, fake, "--idle-timeout", "2") as client:
            with anyio.fail_after(TIMEOUT):
                history = await first_turn(client, marker)
                while "session asleep" not in log_of(tmp_path):
                    await anyio.sleep(0.2)
                call = await client.chat("claude", [*history, user("Still there?")], timeout=TIMEOUT)
            assert call.error is None and "Back again." in text_of(call)
            assert remembers_first_turn(fake.main_requests()[-1], f"touch {marker}")
    assert "how=session/resume" in log_of(tmp_path)


async def test_two_chats_share_one_process_and_never_cross(tmp_path: Path) -> None:
    with FakeAnthropic([[{"text": "Apples are red."}], [{"text": "Bananas are yellow."}]], done_text="Follow-up answer.") as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                a = await client.chat("claude", [user("alpha: tell me about apples")], timeout=TIMEOUT)
                b = await client.chat("claude", [user("beta: tell me about bananas")], timeout=TIMEOUT)
                assert len(agent_processes(client)) == 1
                for history in ([user("alpha: tell me about apples"), assistant(a.parts)], [user("beta: tell me about bananas"), assistant(b.parts)]):
                    call = await client.chat("claude", [*history, user("and more?")], timeout=TIMEOUT)
                    assert call.error is None
    follow_ups = fake.main_requests()[-2:]
    assert "apples" in str(follow_ups[0]["messages"]) and "bananas" not in str(follow_ups[0]["messages"])
    assert "bananas" in str(follow_ups[1]["messages"]) and "apples" not in str(follow_ups[1]["messages"])


async def test_a_crash_of_the_shared_process_recovers_every_chat(tmp_path: Path) -> None:
    """Two chats on the one process; it is killed. Each chat's next request restarts it and
    takes its session up again where claude still has it (session/resume)."""
    marker = tmp_path / "one.txt"
    with FakeAnthropic([[bash(f"touch {marker}")], [{"text": "Created."}], [{"text": "Other chat."}]], done_text="Recovered.") as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                history = await first_turn(client, marker)
                other = await client.chat("claude", [user("a second chat")], timeout=TIMEOUT)
                (pid,) = agent_processes(client)
                os.killpg(pid, signal.SIGKILL)  # the agent and its Claude Code children
                # As a user would, the next message comes once the daemon has seen the crash
                # (a request sent in the few ms before it reaps the process fails with the crash).
                while "agent ended" not in log_of(tmp_path):
                    await anyio.sleep(0.1)
                call = await client.chat("claude", [*history, user("Still there?")], timeout=TIMEOUT)
                assert call.error is None and "Recovered." in text_of(call), call.error
                assert remembers_first_turn(fake.main_requests()[-1], f"touch {marker}")
                again = await client.chat("claude", [user("a second chat"), assistant(other.parts), user("and you?")], timeout=TIMEOUT)
                assert again.error is None and "Recovered." in text_of(again)
                assert "a second chat" in str(fake.main_requests()[-1]["messages"])
    log = log_of(tmp_path)
    assert log.count("how=session/resume") >= 1  # the first chat, idle for a while, was on disk
    # The second chat was killed right after its first answer. Claude Code may not have
    # written it to disk yet: resume and load are then refused ("Resource not found"), and
    # it continues in a fresh session told the conversation (seen; either way it goes on).
    assert log.count("how=session/resume") == 2 or "agent refused to take up its session" in log


async def test_claudes_own_models_are_in_the_picker_and_reach_the_model_api(tmp_path: Path) -> None:
    """claude's configOptions models listed as "Claude Code · …"; a chat on one gets
    session/set_config_option first, and the model API sees that model."""
    with FakeAnthropic([], done_text="Hi.") as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                first = await client.chat("claude", [user("hello")], timeout=TIMEOUT)
                assert first.error is None
                while not [n for n in client.notifications if n.get("method") == "lm/modelsChanged"]:
                    await anyio.sleep(0.05)
                listed = await client.request("lm/provideLanguageModelChatInformation", {})
                names = {m["id"]: m["name"] for m in listed["models"]}
                # claude-agent-acp 0.101's model option: default, opus, fable, sonnet, haiku
                # (0.23.1 also had "opus[1m]").
                assert names["claude/opus"].startswith("Claude Code · Opus"), names
                assert "claude/haiku" in names
                before = fake.main_requests()[-1]["model"]
                call = await client.chat("claude/haiku", [user("hello"), assistant(first.parts), user("again, quickly")], timeout=TIMEOUT)
                assert call.error is None
            after = fake.main_requests()[-1]["model"]
    assert "haiku" in after and "haiku" not in before, (before, after)
    assert "configId=model" in log_of(tmp_path) and "how=new" in log_of(tmp_path)


@pytest.mark.parametrize("shape", ["round_kept", "turn_dropped"])
async def test_after_a_stop_while_a_command_runs_the_agent_still_holds_the_first_turn(tmp_path: Path, shape: str) -> None:
    """A Stop while claude runs an approved command: the next message is answered from the
    same ACP session (claude-agent-acp 0.101 goes on after a cancel), so the model still sees the first turn's tool_use/tool_result blocks, not a transcript told as text.
    VS Code's next request keeps the round that showed the card (``round_kept``), or drops
    the stopped turn whole (``turn_dropped``): both go on in the chat's own session."""
    marker, slow = tmp_path / "one.txt", tmp_path / "slow.txt"
    # Claude Code 0.3.x refuses a command that starts with a long sleep ("Blocked: sleep 30
    # followed by: ..."), so the slow command does something first.
    command = f"echo started && sleep 30 && touch {slow}"
    replies = [[{"text": "Creating it."}, bash(f"touch {marker}")], [{"text": "Created."}], [bash(command)]]
    with FakeAnthropic(replies, done_text="I remember the first file.") as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                history = await first_turn(client, marker)
                history.append(user("Now run the slow one"))
                ask = await client.chat("claude", history, timeout=TIMEOUT)
                assert ask.result == {"stopReason": "tool_calls"}, ask.error
                (perm,) = tool_calls(ask)
                history += [assistant(ask.parts), approve(perm)]
                params = {"modelId": "claude", "messages": history, "options": chat_options()}
                running = await client.start("lm/provideLanguageModelChatResponse", params)
                await anyio.sleep(3.0)  # the command runs
                await client.cancel(running)
                await running.done.wait()
                assert running.result == {"stopReason": "cancelled"}
                kept = history if shape == "round_kept" else history[:-2]
                call = await client.chat("claude", [*kept, user("Never mind. What did you do first?")], timeout=TIMEOUT)
            assert call.error is None and "I remember the first file." in text_of(call), (call.error, text_of(call))
            assert not slow.exists()
            last = fake.main_requests()[-1]
            assert remembers_first_turn(last, f"touch {marker}")
            assert "<conversation" not in str(last["messages"][-1]["content"])
    log = log_of(tmp_path)
    assert sessions_opened(log) == ["new"], log  # the one session went on: not resumed, not a fresh one
