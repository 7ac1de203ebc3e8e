"""The real agent through the real daemon: claude-agent-acp 0.101.0, driven by
``lmbridge serve`` over the wire protocol exactly as the VS Code shim drives it,
against the fake Anthropic Messages API.

approve → the Bash command ran; skip → it did not and the turn finished;
stop → it did not, and the next request was answered promptly.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.core.permissions import ACTION_TOOL as AGENT_ACTION_TOOL  # noqa: E402
from lmbridge.devtools.client import DaemonClient, approve, assistant, skip, text_of, tool_calls, user  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic, deferred_tools  # noqa: E402
from tests.real_agent.claude import claude_bridge  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds per test body: ≥10x idle (the agent's start and a few turns, 5-20 s idle)


def bridge(tmp_path: Path, fake: FakeAnthropic) -> Any:
    return claude_bridge(tmp_path, fake.url)


def bash(command: str) -> dict:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "Create the marker file"}}}


async def ask_for_bash(client: DaemonClient, marker: Path) -> tuple[list[dict], dict]:
    history = [user(f"Please create {marker.name}")]
    call = await client.chat("claude", history, timeout=TIMEOUT)
    assert call.error is None, call.error
    assert call.result == {"stopReason": "tool_calls"}
    (perm,) = tool_calls(call)
    assert perm["name"] == AGENT_ACTION_TOOL
    card = perm["input"]["message"]
    assert "**run a command**" in card and "```sh\n" in card and str(marker) in card
    assert "The agent offered: " in card and "Allow" in card
    assert not marker.exists()  # nothing runs before the user answers
    history.append(assistant(call.parts))
    return history, perm


async def test_approve_runs_the_command(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    with FakeAnthropic([[{"text": "I'll create it."}, bash(f"touch {marker}")], [{"text": "Created the file."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                history, perm = await ask_for_bash(client, marker)
                call = await client.chat("claude", history + [approve(perm)], timeout=TIMEOUT)
            assert call.error is None and call.result == {"stopReason": "end_turn"}
            assert marker.exists()
            assert "Created the file." in text_of(call)
            (result,) = fake.tool_results()
            assert result["is_error"] is False


async def test_skip_does_not_run_and_the_turn_finishes(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    with FakeAnthropic([[bash(f"touch {marker}")], [{"text": "Understood, I did not run it."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                history, perm = await ask_for_bash(client, marker)
                call = await client.chat("claude", history + [skip(perm)], timeout=TIMEOUT)
            assert call.error is None and call.result == {"stopReason": "end_turn"}
            assert not marker.exists()
            assert "I did not run it." in text_of(call)
            (result,) = fake.tool_results()
            assert result["is_error"] is True


async def test_stop_does_not_run_and_the_next_request_is_answered_promptly(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    with FakeAnthropic([[bash(f"touch {marker}")]], done_text="Fine, moving on.") as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                history, _ = await ask_for_bash(client, marker)
                # Stop at the confirmation: VS Code drops the round, keeps the user message.
                started = time.monotonic()
                call = await client.chat("claude", history[:1] + [user("Never mind, just say hi.")], timeout=TIMEOUT)
                elapsed = time.monotonic() - started
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.result
            assert "Fine, moving on." in text_of(call)
            assert not marker.exists()
            assert elapsed < 60, f"took {elapsed:.1f} s"  # ~2-5 s idle
            assert "cancelled turn did not end" not in (tmp_path / "daemon.stderr").read_text(errors="replace")  # promptly: the stopped turn ended, no drain deadline (10 s) waited
            # The cancelled tool_use reached the model as an error, never as a success.
            assert all(r["is_error"] for r in fake.tool_results())
            assert os.path.exists(tmp_path)


# ---------------------------------------------------------------- VS Code tools (docs/tools.md)

VSCODE_TOOLS = {
    "tools": [
        {"name": "search_workspace", "description": "Search the workspace for text", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
        {"name": "read_file", "description": "Read a workspace file", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    ]
}


def two_vscode_tools() -> list[dict]:
    return [
        {"text": "Let me look."},
        {"tool_use": {"name": "mcp__vscode__search_workspace", "input": {"q": "TODO"}}},
        {"tool_use": {"name": "mcp__vscode__read_file", "input": {"path": "a.py"}}},
    ]


async def run_tools(client: DaemonClient, answer) -> tuple[list[dict], list[dict], object]:
    """Drive a chat the way VS Code does while the agent calls VS Code tools:
    after each response ending in tool calls, ``answer(part)`` gives the user
    message with its result. claude-agent-acp runs MCP tools one after another,
    so the two calls of one model turn arrive in two responses."""
    from lmbridge.devtools.client import tool_result

    history = [user("Find the TODOs and read a.py")]
    seen: list[dict] = []
    while True:
        call = await client.chat("claude", history, timeout=TIMEOUT, options=VSCODE_TOOLS)
        assert call.error is None, call.error
        history.append(assistant(call.parts))
        if call.result != {"stopReason": "tool_calls"}:
            return history, seen, call
        for part in tool_calls(call):
            assert part["name"] in ("search_workspace", "read_file")
            seen.append(part)
            history.append(answer(part) if answer else tool_result(part["callId"], "x"))


def mcp_results(fake: FakeAnthropic) -> dict[str, dict]:
    by_id = {}
    for request in fake.main_requests():
        for message in request["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block.get("type") == "tool_use":
                    by_id[block["id"]] = block["name"]
    return {by_id.get(r["tool_use_id"], r["tool_use_id"]): r for r in fake.tool_results()}


async def test_two_vscode_tools_in_one_turn_both_results_return(tmp_path: Path) -> None:
    from lmbridge.devtools.client import tool_result

    answers = {"search_workspace": "a.py:3: # TODO fix", "read_file": "print('hello')"}
    with FakeAnthropic([two_vscode_tools(), [{"text": "Found it all."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                _, seen, last = await run_tools(client, lambda p: tool_result(p["callId"], answers[p["name"]]))
            assert [(p["name"], p["input"]) for p in seen] == [("search_workspace", {"q": "TODO"}), ("read_file", {"path": "a.py"})]
            assert last.result == {"stopReason": "end_turn"} and "Found it all." in text_of(last)
            results = mcp_results(fake)
            assert answers["search_workspace"] in results["mcp__vscode__search_workspace"]["text"]
            assert answers["read_file"] in results["mcp__vscode__read_file"]["text"]
            assert not any(r.get("is_error") for r in results.values())


async def test_vscode_tools_one_skipped_one_allowed(tmp_path: Path) -> None:
    from lmbridge.devtools.client import tool_result

    with FakeAnthropic([two_vscode_tools(), [{"text": "Partly done."}]]) as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                _, seen, last = await run_tools(
                    client, lambda p: skip(p) if p["name"] == "search_workspace" else tool_result(p["callId"], "print('hello')")
                )
            assert [p["name"] for p in seen] == ["search_workspace", "read_file"]
            assert last.result == {"stopReason": "end_turn"}
            results = mcp_results(fake)
            assert results["mcp__vscode__search_workspace"]["is_error"] is True
            assert "declined" in results["mcp__vscode__search_workspace"]["text"]
            assert "print('hello')" in results["mcp__vscode__read_file"]["text"]
            assert not results["mcp__vscode__read_file"].get("is_error")


async def test_vscode_tools_stop_with_a_call_pending(tmp_path: Path) -> None:
    with FakeAnthropic([two_vscode_tools()], done_text="OK, stopped.") as fake:
        async with bridge(tmp_path, fake) as client:
            with anyio.fail_after(TIMEOUT):
                first = await client.chat("claude", [user("Find the TODOs and read a.py")], timeout=TIMEOUT, options=VSCODE_TOOLS)
                assert first.result == {"stopReason": "tool_calls"} and tool_calls(first)
                started = time.monotonic()
                call = await client.chat("claude", [user("Find the TODOs and read a.py"), user("Stop that, just say OK.")], timeout=TIMEOUT, options=VSCODE_TOOLS)
                elapsed = time.monotonic() - started
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.result
            assert "OK, stopped." in text_of(call)
            assert elapsed < 60, f"took {elapsed:.1f} s"  # ~2-5 s idle
            assert "cancelled turn did not end" not in (tmp_path / "daemon.stderr").read_text(errors="replace")  # promptly: the stopped turn ended, no drain deadline (10 s) waited
            # Whatever reached the model for the calls was an error, never a success (the
            # ToolSearch that loaded the tools first is claude-agent-acp's own, and succeeds).
            results = {name: r for name, r in mcp_results(fake).items() if name.startswith("mcp__vscode__")}
            assert results and all(r.get("is_error") for r in results.values()), results


class CommandLines:
    """Every command line any process had, as any local user can read it
    (``/proc/<pid>/cmdline``). A process is read again and again through its first seconds:
    it shows its parent's command line until it execs, and Claude Code overwrites its own
    (its process title becomes ``claude``) once it has started."""

    WATCH = 3.0  # seconds each process is watched from its first sight

    def __init__(self) -> None:
        self.seen: dict[int, set[str]] = {}
        self.parent: dict[int, int] = {}
        self._first: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def lines(self, root: int) -> list[tuple[int, str]]:
        """The command lines of ``root`` and the processes under it (other tests' processes
        on this machine are not this daemon's business)."""
        tree, grew = {root}, True
        while grew:
            more = {pid for pid, parent in self.parent.items() if parent in tree} - tree
            tree |= more
            grew = bool(more)
        return [(pid, line) for pid, lines in self.seen.items() if pid in tree for line in lines]

    def _watch(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                if now - self._first.setdefault(pid, now) > self.WATCH:
                    continue
                try:
                    if pid not in self.parent:
                        with open(f"/proc/{pid}/stat", "rb") as f:
                            self.parent[pid] = int(f.read().rsplit(b")", 1)[1].split()[1])
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        line = f.read()
                except (OSError, ValueError, IndexError):
                    continue
                if line:
                    self.seen.setdefault(pid, set()).add(line.replace(b"\0", b" ").decode(errors="replace"))
            self._stop.wait(0.001)


async def test_no_command_line_holds_a_credential_for_the_tools(tmp_path: Path) -> None:
    """claude-agent-acp starts Claude Code with the MCP servers of ``session/new`` on its
    command line (``--mcp-config {…}``), which every local user can read. Through a chat that
    calls a VS Code tool, no process's command line holds a secret: what Claude Code's holds,
    the relay's socket and session, opens the tools to the daemon's own user only
    (docs/tools.md, "Who can reach the tools"; another user refused: tests/test_security.py)."""
    record = tmp_path / "session.jsonl"
    with FakeAnthropic([two_vscode_tools(), [{"text": "Found it all."}]]) as fake, CommandLines() as lines:
        async with claude_bridge(tmp_path, fake.url, "--record", str(record)) as client:
            daemon = client.process.pid
            with anyio.fail_after(TIMEOUT):
                first = await client.chat("claude", [user("Find the TODOs and read a.py")], timeout=TIMEOUT, options=VSCODE_TOOLS)
                assert first.error is None and [p["name"] for p in tool_calls(first)] == ["search_workspace"], (first.error, first.parts)
    ours = lines.lines(daemon)
    with_config = [line for _, line in ours if "--mcp-config" in line]
    assert with_config, "Claude Code's command line, with the MCP servers on it, was seen"
    for pid, line in ours:
        for needle in ("x-lmbridge-secret", "LMBRIDGE_MCP_SECRET", '"headers"', "secret"):
            assert needle.lower() not in line.lower(), f"process {pid} held {needle!r} on its command line: {line[:300]}"
    assert any("mcp-stdio" in line and "--session" in line for line in with_config), with_config
    # What the daemon gave the agent for its tools: nothing secret to put anywhere.
    frames = [json.loads(line) for line in record.read_text().splitlines()[1:]]
    (new,) = [f["frame"] for f in frames if isinstance(f.get("frame"), dict) and f["frame"].get("method") == "session/new"]
    (server,) = new["params"]["mcpServers"]
    assert set(server) == {"name", "command", "args", "env"} and server["env"] == []


def vscode_names(body: dict[str, Any]) -> list[str]:
    """The VS Code tools the model was offered in one Messages API request: loaded (in
    ``tools``) or deferred (named for ToolSearch: claude-agent-acp 0.101 defers MCP tools)."""
    names = [str(t.get("name", "")) for t in body.get("tools") or []] + deferred_tools(body)
    return sorted({n for n in names if n.startswith("mcp__vscode__")})


async def spare_ready(log: Path, count: int) -> None:
    """Wait until the daemon has logged ``count`` spare sessions ready."""
    while log.read_text(errors="replace").count("spare session ready") < count:
        await anyio.sleep(0.1)


async def test_a_chat_that_takes_the_spare_session_sees_its_vscode_tools(tmp_path: Path) -> None:
    """The spare session (on by default) is opened with the VS Code tools the previous new
    chat offered, served from the start (claude-agent-acp lists an MCP server's tools once, at
    session start): a chat offering the same tools takes it, and its model is offered them
    and its calls reach VS Code. A chat offering other tools does not take the spare (it is
    closed): it gets a fresh session whose model is offered its own tools."""
    from lmbridge.devtools.client import tool_result

    both = ["mcp__vscode__read_file", "mcp__vscode__search_workspace"]

    def call_both(body: dict[str, Any]) -> list[dict[str, Any]]:
        return two_vscode_tools() if vscode_names(body) == both else [{"text": f"NO TOOLS: {vscode_names(body)}"}]

    def say_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"text": f"TOOLS: {vscode_names(body)}"}]

    read_only = {"tools": [VSCODE_TOOLS["tools"][1]]}
    with FakeAnthropic([[{"text": "Hi."}], call_both, [{"text": "Found it all."}], say_tools]) as fake:
        async with claude_bridge(tmp_path, fake.url) as client:
            log = tmp_path / "daemon.stderr"
            with anyio.fail_after(TIMEOUT):
                first = await client.chat("claude", [user("Hello")], timeout=TIMEOUT, options=VSCODE_TOOLS)
                assert first.error is None and "Hi." in text_of(first), (first.error, text_of(first))
                await spare_ready(log, 1)
                _, seen, last = await run_tools(client, lambda p: tool_result(p["callId"], "x"))
                assert [p["name"] for p in seen] == ["search_workspace", "read_file"], text_of(last)
                assert last.result == {"stopReason": "end_turn"} and "Found it all." in text_of(last)
                assert not any(r.get("is_error") for r in mcp_results(fake).values())
                assert log.read_text(errors="replace").count("how=spare") == 1  # the second chat took the spare
                await spare_ready(log, 2)
                other = await client.chat("claude", [user("Read a.py")], timeout=TIMEOUT, options=read_only)
                assert other.error is None and "TOOLS: ['mcp__vscode__read_file']" in text_of(other), (other.error, text_of(other))
    text = log.read_text(errors="replace")
    assert text.count("how=spare") == 1 and "spare session not taken: other tools" in text
