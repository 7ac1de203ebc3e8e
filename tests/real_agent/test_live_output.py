"""A running command's output in the chat, with the real agents through the real daemon
(docs/agents.md, "A command's output"): codex-acp streams it while the command runs
(``_meta.terminal_output`` about a second apart), claude-agent-acp sends it once the
command has ended; gemini-cli 0.61.0 does not use ``terminal/*`` even when offered.

Orders, not timings, are asserted (docs/reliability.md, "Tests under load"): the command
waits on a gate file the test opens only once its first line is in the chat, so a chat
that got the output only at the end would never open it. The timeline of a 6 s command
(one line a second) is printed (``-s``) as the figure the docs quote.

The fake model answers codex's next request only once the chat has shown the command's
end (``after_the_end``): a fake that answers at once can end codex's turn before the
command's end reaches codex-acp, which then drops it (docs/agents.md); a real model takes
longer than that.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.core.live import FENCE  # noqa: E402
from lmbridge.devtools.client import DaemonClient, approve, text_of, tool_calls  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.fakes.fake_gemini import FakeGemini  # noqa: E402
from tests.fakes.fake_openai_responses import FakeResponses, escalated_command  # noqa: E402
from tests.real_agent import claude, codex, gemini  # noqa: E402
from tests.real_agent.acp_probe import AcpProbe, initialize_params, text_prompt  # noqa: E402
from tests.real_agent.copilot import Conversation, options  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds a test: ≥10x idle (an agent's start, two turns and a 6 s command: ~15 s)
COUNT = "for i in 1 2 3 4 5 6; do echo line $i; sleep 1; done"

needs_codex = pytest.mark.skipif(not codex.is_installed(), reason="codex-acp is not installed: make real-agent-deps")
needs_claude = pytest.mark.skipif(not claude.is_installed(), reason="claude-agent-acp is not installed: make real-agent-deps")
# Today's releases start sessions in a mode that approves their own commands (claude-agent-acp
# 0.101: auto; codex-acp 2.6: agent, "Auto review"): no card comes to approve.
NO_CARD = pytest.mark.xfail(
    strict=True,
    reason="claude-agent-acp 0.101 (auto) and codex-acp 2.6 (agent) start sessions in a self-approving mode, so no card: lmbridge must start them in their asking mode",
)
needs_gemini = pytest.mark.skipif(not gemini.is_installed(), reason="gemini-cli is not installed: make real-agent-deps")


def running(marker: str) -> list[int]:
    """Pids of processes whose command line holds ``marker`` (not this test's own)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split(None, 1)[0]) for line in out.splitlines() if marker in line and "ps -eo" not in line]


async def until_gone(marker: str) -> float:
    """Seconds until no process holds ``marker`` (bounded by the test's TIMEOUT)."""
    start = time.monotonic()
    while running(marker):
        await anyio.sleep(0.1)
    return time.monotonic() - start


class Timeline:
    """When each text part came, relative to the request."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.text = ""
        self.at: list[tuple[float, str]] = []
        self.seen = anyio.Event()
        self.wanted = ""
        self.ended = threading.Event()  # the chat showed a command's exit code
        self.approved = threading.Event()  # the turn the user approved is streaming

    def __call__(self, part: dict[str, Any]) -> None:
        if part["type"] == "text":
            self.text += part["value"]
            self.at.append((time.monotonic() - self.start, part["value"]))
            if self.wanted and self.wanted in self.text:
                self.seen.set()
            if "exit code" in self.text:
                self.ended.set()

    def first(self, needle: str) -> float:
        """Seconds until the text first held ``needle``."""
        text = ""
        for t, value in self.at:
            text += value
            if needle in text:
                return t
        raise AssertionError(f"{needle!r} never came: {self.text!r}")


def after_the_end(timeline: Timeline, blocks: list[dict[str, Any]]) -> Any:
    """A fake model's reply given once ``timeline`` has shown a command's end (a thread of
    the fake server waits for it, at most TIMEOUT: then the test's own asserts say what is missing)."""

    def reply(body: dict[str, Any]) -> list[dict[str, Any]]:
        if timeline.approved.is_set():  # no approved turn streams (no card came): nothing to wait for
            timeline.ended.wait(TIMEOUT)
        return blocks

    return reply


async def approved_turn(client: DaemonClient, model: str, conv: Conversation, ask: str, timeline: Timeline) -> Any:
    """Ask, approve the command's card, and stream the turn that runs it (``timeline``)."""
    call = await client.chat(model, conv.ask(ask), timeout=TIMEOUT, options=options([]))
    assert call.error is None and call.result == {"stopReason": "tool_calls"}, (call.error, text_of(call))
    (perm,) = tool_calls(call)
    conv.answered(call)
    timeline.start = time.monotonic()
    timeline.approved.set()
    return await client.start("lm/provideLanguageModelChatResponse", {"modelId": model, "messages": conv.result(approve(perm)), "options": options([])}, timeline)


# ---------------------------------------------------------------- codex-acp: streamed
# Each command asks to leave the sandbox (require_escalated): in the read-only mode lmbridge
# starts codex in, that is the command codex shows a card for (docs/agents.md).


@needs_codex
async def test_codex_streams_a_command_output_into_the_chat_as_it_runs(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    cmd = f"sleep 1; echo ready; while [ ! -f {gate} ]; do sleep 0.1; done; echo done"
    timeline = Timeline()
    timeline.wanted = "ready\n"
    with FakeResponses([[escalated_command(cmd)], after_the_end(timeline, [{"text": "Finished."}])]) as fake:
        async with codex.codex_bridge(tmp_path, fake.url) as client:
            conv = Conversation(tmp_path / "work")
            with anyio.fail_after(TIMEOUT):
                call = await approved_turn(client, "codex", conv, "Run the script.", timeline)
                await timeline.seen.wait()  # the command waits for this: its output came live
                gate.touch()
                await call.done.wait()
    assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
    answer = text_of(call)
    assert answer.count(f"{FENCE}text\n") == 1, answer  # one block that grew
    assert answer.count("ready\n") == 1 and answer.index("ready\n") < answer.index("done\n") < answer.index("exit code 0") < answer.index("Finished.")


@needs_codex
async def test_codex_timeline_of_a_six_second_command(tmp_path: Path) -> None:
    """The figure the docs quote: a command printing a line a second for 6 s."""
    timeline = Timeline()
    with FakeResponses([[escalated_command(COUNT)], after_the_end(timeline, [{"text": "Counted."}])]) as fake:
        async with codex.codex_bridge(tmp_path, fake.url) as client:
            conv = Conversation(tmp_path / "work")
            with anyio.fail_after(TIMEOUT):
                call = await approved_turn(client, "codex", conv, "Count.", timeline)
                await call.done.wait()
    answer = text_of(call)
    lines = {n: timeline.first(f"line {n}\n") for n in range(2, 7)}  # codex-acp never sends a command's first output
    end = timeline.first("exit code 0")
    print("\ncodex-acp, one line a second for 6 s: " + ", ".join(f"line {n} at {t:.1f} s" for n, t in lines.items()) + f"; end at {end:.1f} s")
    assert answer.count(f"{FENCE}text\n") == 1 and lines[2] < lines[6] < end
    assert all(answer.count(f"line {n}\n") == 1 for n in range(2, 7))  # once: not again from rawOutput


@needs_codex
async def test_stop_while_codex_runs_a_command_ends_the_command(tmp_path: Path) -> None:
    """codex-acp ends a cancelled turn but not its command (only session/close does): the
    daemon closes the session and takes it up again; the command is gone, and the chat goes on."""
    marker = f"lmbridge-live-{uuid.uuid4().hex[:8]}"
    cmd = f"sleep 1; echo {marker}; sleep 120; echo never"
    with FakeResponses([[escalated_command(cmd)], [{"text": "After the stop."}]]) as fake:
        async with codex.codex_bridge(tmp_path, fake.url) as client:
            conv = Conversation(tmp_path / "work")
            timeline = Timeline()
            timeline.wanted = f"{marker}\n"
            with anyio.fail_after(TIMEOUT):
                call = await approved_turn(client, "codex", conv, "Run it.", timeline)
                await timeline.seen.wait()
                assert running(marker)
                await client.cancel(call)
                stopped = time.monotonic()
                gone_after = await until_gone(marker)
            print(f"\ncodex-acp: the command was gone {time.monotonic() - stopped:.1f} s after Stop ({gone_after:.1f} s of polling)")
            conv.stopped()
            with anyio.fail_after(TIMEOUT):
                after = await client.chat("codex", conv.ask("Are you there?"), timeout=TIMEOUT, options=options([]))
            log = (tmp_path / "daemon.stderr").read_text(errors="replace")
    assert after.error is None, after.error
    assert "After the stop." in text_of(after)
    assert "a cancelled turn left a command running" in log  # ended by closing its session


# ---------------------------------------------------------------- claude-agent-acp: at the end


def bash(command: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "count"}}}


@needs_claude
async def test_claude_shows_a_command_output_once_at_its_end(tmp_path: Path) -> None:
    with FakeAnthropic([[bash(COUNT)], [{"text": "Counted."}]]) as fake:
        async with claude.claude_bridge(tmp_path, fake.url) as client:
            conv = Conversation(tmp_path / "work")
            timeline = Timeline()
            with anyio.fail_after(TIMEOUT):
                call = await approved_turn(client, "claude", conv, "Count.", timeline)
                await call.done.wait()
    assert call.error is None, call.error
    answer = text_of(call)
    assert all(answer.count(f"line {n}") == 1 for n in range(1, 7)), answer  # once, not twice
    assert answer.count(f"{FENCE}text\n") == 1 and "completed · exit code 0" in answer
    first, end = timeline.first("line 1"), timeline.first("exit code 0")
    print(f"\nclaude-agent-acp, one line a second for 6 s: every line at {first:.1f} s, end at {end:.1f} s")


# ---------------------------------------------------------------- gemini-cli: not through terminal/*


@needs_gemini
async def test_on_the_wire_gemini_runs_shell_commands_itself_even_with_terminals_offered(tmp_path: Path) -> None:
    """gemini-cli 0.61.0 reads ``clientCapabilities.terminal`` nowhere: ``run_shell_command``
    runs in its own process and its tool call ends with empty content (no output, no
    terminal). If this fails after an upgrade, gemini now uses terminal/*: update
    docs/agents.md and test its live output through the daemon."""
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "ran.txt"
    with FakeGemini([[{"call": {"name": "run_shell_command", "args": {"command": f"echo hello; touch {marker}"}}}], [{"text": "Done."}]]) as fake:
        env = gemini.gemini_environ(tmp_path / "home", fake.url)
        async with AcpProbe.spawn(gemini.gemini_agent_command(), env=env, cwd=work) as probe:
            with anyio.fail_after(TIMEOUT):
                await probe.request("initialize", initialize_params(terminal=True, _meta={"terminal_output": True}))
                sid = (await probe.request("session/new", {"cwd": str(work), "mcpServers": []}))["sessionId"]
                asked: list[str] = []
                async with anyio.create_task_group() as tg:

                    async def prompt() -> None:
                        await probe.request("session/prompt", text_prompt(sid, "go"))
                        tg.cancel_scope.cancel()

                    tg.start_soon(prompt)
                    while True:
                        req = await probe.next_request(None)
                        asked.append(req["method"])
                        if req["method"] == "session/request_permission":
                            option = next(o["optionId"] for o in req["params"]["options"] if o["kind"] == "allow_once")
                            await probe.respond(req["id"], {"outcome": {"outcome": "selected", "optionId": option}})
                        else:
                            await probe.respond_error(req["id"], -32601, "not in this test")
    assert marker.exists() and not [m for m in asked if m.startswith("terminal/")], asked
    (done,) = [u for u in probe.updates(sid) if u.get("status") == "completed"]
    assert done.get("content") == [] and "_meta" not in done
    assert os.path.exists(marker)
