#!/usr/bin/env python3
"""Regenerate the replay corpus (``make record-sessions``): short real sessions, each
recorded by ``lmbridge serve --record`` while this script plays VS Code's part through
``lmbridge.devtools.client``, then replayed once to check it.

    python tests/sessions/record.py                 # every scenario
    python tests/sessions/record.py demo-approve    # just these
    python tests/sessions/record.py --list

Agents: the demo agent (``lmbridge demo-agent``), claude-agent-acp against the fake
Anthropic API (``tests/fakes/fake_anthropic.py``; needs ``make real-agent-deps``), and
the scripted agent (``tests/agents/scripted_agent.py``) for a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.devtools.client import DaemonClient, SentRequest, approve, assistant, chat_options, skip, tool_calls, tool_result, user, without_last_round  # noqa: E402
from lmbridge.devtools.replay import Divergence, replay  # noqa: E402

HERE = Path(__file__).resolve().parent
SCRIPTED_AGENT = ROOT / "tests" / "agents" / "scripted_agent.py"
TIMEOUT = 90.0


@dataclass
class Run:
    """One recording in progress: the daemon, a scratch dir, the workspace."""

    client: DaemonClient
    scratch: Path
    workspace: Path


def venv_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment: this Python's bin dir first on PATH (agents are started
    as ``lmbridge demo-agent``, a command line that reads the same on any machine)."""
    env = dict(os.environ)
    env.pop("IS_SANDBOX", None)  # must never reach claude-agent-acp (tests/real_agent/claude.py)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("LMBRIDGE_LOG_LEVEL", "warning")
    env.setdefault("LMBRIDGE_DEMO_LOG_LEVEL", "WARNING")  # its stderr tail is recorded at its exit
    # "Starting <agent>…" depends on how fast the agent started on the recording machine:
    # never in a recording (replay never shows it either), so replays do not depend on load.
    env["LMBRIDGE_START_NOTICE"] = "1e9"
    env.update(extra or {})
    return env


@asynccontextmanager
async def recording(
    path: Path, agents: list[dict[str, Any]], env: dict[str, str] | None = None, scratch: Path | None = None,
    serve: Callable[[str, Any], Awaitable[Any]] | None = None, more_folders: tuple[str, ...] = (),
) -> AsyncIterator[Run]:
    """``serve``: the client answers the daemon's ``client/*`` requests with it (and says
    ``clientCapabilities.fs``), as the VS Code extension does. ``more_folders``: workspace
    folders after the scratch one (a multi-root workspace)."""
    scratch = scratch or Path(tempfile.mkdtemp(prefix="lmbridge-rec-"))
    workspace = scratch / "ws"
    workspace.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "lmbridge", "serve", "--record", str(path)]
    async with DaemonClient.spawn(command, env=env or venv_env(), stderr=sys.stderr) as client:
        client.on_request = serve
        capabilities = {"fs": True} if serve is not None else None
        await client.initialize(workspace=[str(workspace), *more_folders], agents=agents, client_name="record-sessions", capabilities=capabilities)
        yield Run(client, scratch, workspace)
    shutil.rmtree(scratch, ignore_errors=True)


def demo_spec(scratch: Path) -> dict[str, Any]:
    return {"id": "demo", "name": "lmbridge demo agent", "command": "lmbridge", "args": ["demo-agent", "--scratch", str(scratch / "notes")]}


async def chat(run: Run, model: str, history: list[dict[str, Any]], stop: str | None = None, options: dict[str, Any] | None = None) -> SentRequest:
    call = await run.client.chat(model, history, timeout=TIMEOUT, options=options)
    if call.error is not None:
        raise RuntimeError(f"unexpected error: {call.error}")
    if stop is not None and call.result != {"stopReason": stop}:
        raise RuntimeError(f"expected stopReason {stop}, got {call.result}")
    return call


# ---------------------------------------------------------------- the demo agent


async def demo_permission(path: Path, answer: str) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="lmbridge-rec-"))
    async with recording(path, [demo_spec(scratch)], scratch=scratch) as run:
        await run.client.request("lm/provideLanguageModelChatInformation", {"silent": True})
        history = [user("Please write a file with my notes.")]
        call = await chat(run, "demo", history, "tool_calls")
        (perm,) = tool_calls(call)
        history.append(assistant(call.parts))
        if answer == "approve":
            await chat(run, "demo", history + [approve(perm)], "end_turn")
        elif answer == "skip":
            await chat(run, "demo", history + [skip(perm)], "end_turn")
        else:  # stop: the round leaves the history, a new message follows
            await chat(run, "demo", without_last_round(history) + [user("Never mind, just say hello.")], "end_turn")


async def demo_question(path: Path) -> None:
    """The demo agent asks (elicitation/create); VS Code's question tool answers it."""
    scratch = Path(tempfile.mkdtemp(prefix="lmbridge-rec-"))
    options = {"tools": [{"name": "vscode_askQuestions", "description": "Ask the user questions"}]}
    async with recording(path, [demo_spec(scratch)], scratch=scratch) as run:
        await run.client.request("lm/provideLanguageModelChatInformation", {"silent": True})
        history = [user("Please ask me something.")]
        call = await chat(run, "demo", history, "tool_calls", options)
        (question,) = tool_calls(call)
        history.append(assistant(call.parts))
        answer = {"Colour": {"selected": ["Green"], "freeText": None, "skipped": False}, "Note": {"selected": [], "freeText": "matte", "skipped": False}}
        await chat(run, "demo", history + [tool_result(question["callId"], json.dumps({"answers": answer}))], "end_turn", options)


async def demo_approve(path: Path) -> None:
    await demo_permission(path, "approve")


async def demo_skip(path: Path) -> None:
    await demo_permission(path, "skip")


async def demo_stop(path: Path) -> None:
    await demo_permission(path, "stop")


async def demo_two_files(path: Path) -> None:
    """Two permissions outstanding together: one allowed, one skipped, in one request."""
    scratch = Path(tempfile.mkdtemp(prefix="lmbridge-rec-"))
    async with recording(path, [demo_spec(scratch)], scratch=scratch) as run:
        history = [user("Please write two files with my notes.")]
        call = await chat(run, "demo", history, "tool_calls")
        first, second = tool_calls(call)
        history.append(assistant(call.parts))
        await chat(run, "demo", history + [approve(first), skip(second)], "end_turn")


async def demo_files(path: Path) -> None:
    """fs/* through the shim: the agent reads a file the "editor" holds unsaved text of, then
    appends a line to it after Allow; the editor answers client/readTextFile and
    client/writeTextFile (the recording holds both directions)."""
    editor = {"notes.md": "# Notes\nunsaved line\n"}

    async def serve(method: str, params: Any) -> Any:
        name = Path(params["path"]).name
        if method == "client/readTextFile":
            return {"content": editor[name]}
        editor[name] = params["content"]
        return {}

    scratch = Path(tempfile.mkdtemp(prefix="lmbridge-rec-"))
    async with recording(path, [demo_spec(scratch)], scratch=scratch, serve=serve) as run:
        await chat(run, "demo", [user("show me notes.md")], "end_turn")
        history = [user("append a line to notes.md")]
        call = await chat(run, "demo", history, "tool_calls")
        (perm,) = tool_calls(call)
        await chat(run, "demo", [*history, assistant(call.parts), approve(perm)], "end_turn")
    if editor["notes.md"] != "# Notes\nunsaved line\nAppended by the demo agent.\n":
        raise RuntimeError(f"the edit did not reach the editor: {editor}")


async def demo_cancel(path: Path) -> None:
    """Cancel mid-stream ($/cancelRequest after a few parts), then continue the chat."""
    scratch = Path(tempfile.mkdtemp(prefix="lmbridge-rec-"))
    async with recording(path, [demo_spec(scratch)], scratch=scratch) as run:
        history = [user("Tell me something slow.")]
        parts: list[dict[str, Any]] = []
        call = await run.client.start("lm/provideLanguageModelChatResponse", {"modelId": "demo", "messages": history, "options": chat_options()}, parts.append)
        with anyio.fail_after(TIMEOUT):
            while sum(1 for p in parts if p["type"] == "text" and "chunk" in p["value"]) < 3:
                await anyio.sleep(0.01)
        await run.client.cancel(call)
        with anyio.fail_after(TIMEOUT):
            await call.done.wait()
        assert call.result == {"stopReason": "cancelled"}, call.result
        history.append(assistant(call.parts))
        await chat(run, "demo", history + [user("Thanks, that is enough. Say hello.")], "end_turn")


# ---------------------------------------------------------------- a crash (scripted agent)


async def agent_crash(path: Path) -> None:
    """The agent dies mid-turn (exit code 3, a line on stderr): the request gets an error
    naming it; the next request of the chat starts a fresh agent given the transcript."""
    scratch = Path(tempfile.mkdtemp(prefix="lmbridge-rec-"))
    scenario = scratch / "scenario.json"
    scenario.write_text(json.dumps({"turns": [[{"text": "Starting on it."}, {"stderr": "fatal: out of cheese"}, {"crash": 3}]]}))
    spec = {"id": "crashy", "command": sys.executable, "args": [str(SCRIPTED_AGENT), str(scenario)]}
    async with recording(path, [spec], scratch=scratch) as run:
        history = [user("Do something risky.")]
        call = await run.client.chat("crashy", history, timeout=TIMEOUT)
        assert call.error is not None and "exited with code 3" in call.error.message, call.error
        scenario.write_text(json.dumps({"turns": [[{"text": "Fresh start: all good."}]]}))
        history += [assistant(call.parts), user("Are you still there?")]
        await chat(run, "crashy", history, "end_turn")


# ---------------------------------------------------------------- VS Code tools

VSCODE_TOOLS = {
    "tools": [
        {"name": "search_workspace", "description": "Search the workspace for text", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
        {"name": "read_file", "description": "Read a workspace file", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    ],
    "toolMode": "auto",
}
TOOL_ANSWERS = {"search_workspace": "a.py:3: # TODO fix", "read_file": "print('hello')"}


async def tools_chat(run: Run, model: str, skip_tool: str | None = None) -> None:
    """Chat as VS Code does while the agent calls VS Code tools: each response that ends
    in tool calls is answered with their results (``skip_tool``: VS Code's Skip text)."""
    history = [user("Find the TODOs and read a.py")]
    for _ in range(5):
        call = await chat(run, model, history, options=VSCODE_TOOLS)
        history.append(assistant(call.parts))
        if call.result != {"stopReason": "tool_calls"}:
            assert call.result == {"stopReason": "end_turn"}, call.result
            return
        for part in tool_calls(call):
            history.append(skip(part) if part["name"] == skip_tool else tool_result(part["callId"], TOOL_ANSWERS[part["name"]]))
    raise RuntimeError("the agent kept calling tools")


async def scripted_tools(path: Path) -> None:
    """The scripted agent lists the VS Code tools and calls two in one turn over the
    stdio relay (lmbridge mcp-stdio); both results return."""
    scratch = Path(tempfile.mkdtemp(prefix="lmbridge-rec-"))
    scenario = scratch / "scenario.json"
    turn = [
        {"mcp_connect": True},
        {"mcp_list": True},
        {"text": "Looking around."},
        {"mcp_call": {"name": "search_workspace", "arguments": {"q": "TODO"}}, "id": "m1"},
        {"mcp_call": {"name": "read_file", "arguments": {"path": "a.py"}}, "id": "m2"},
        {"mcp_await": ["m1", "m2"]},
        {"text": "Done with the tools."},
    ]
    scenario.write_text(json.dumps({"turns": [turn]}))
    spec = {"id": "tooly", "command": sys.executable, "args": [str(SCRIPTED_AGENT), str(scenario)]}
    async with recording(path, [spec], scratch=scratch) as run:
        await tools_chat(run, "tooly")


async def scripted_terminal(path: Path) -> None:
    """The scripted agent asks to run a command (a card, approved), then runs it through
    lmbridge (``terminal/create``, then ``wait_for_exit``, ``output``, ``release``): its
    output streams into the answer as one block, its exit code after it."""
    scratch = Path(tempfile.mkdtemp(prefix="lmbridge-rec-"))
    scenario = scratch / "scenario.json"
    # A command runs only in a workspace folder; the scratch one is gone when the recording is
    # replayed, so a second folder that is there on any Linux machine: /tmp (its card names it).
    run = {"command": "/bin/sh", "args": ["-c", "echo one; echo two; echo three; exit 3"], "cwd": "/tmp"}
    turn = [
        {"tool_call": {"toolCallId": "t1", "title": "Count to three", "kind": "execute", "status": "in_progress"}},
        {"ask": {"toolCall": {"toolCallId": "t1", "kind": "execute", "status": "pending", "rawInput": run}}, "id": "p1"},
        {"client": {"method": "terminal/create", "params": {**run, "outputByteLimit": 1000}}, "id": "c1"},
        {"client_await": "c1"},
        {"client": {"method": "terminal/wait_for_exit", "params": {"terminalId": "$c1.terminalId"}}, "id": "c2"},
        {"client_await": "c2"},
        {"client": {"method": "terminal/output", "params": {"terminalId": "$c1.terminalId"}}, "id": "c3"},
        {"client_await": "c3"},
        {"client": {"method": "terminal/release", "params": {"terminalId": "$c1.terminalId"}}, "id": "c4"},
        {"client_await": "c4"},
        {"tool_call_update": {"toolCallId": "t1", "status": "failed", "content": [{"type": "terminal", "terminalId": "term-1"}]}},
        {"text": "It counted, then failed."},
    ]
    scenario.write_text(json.dumps({"turns": [turn]}))
    spec = {"id": "termy", "command": sys.executable, "args": [str(SCRIPTED_AGENT), str(scenario)]}
    async with recording(path, [spec], scratch=scratch, more_folders=("/tmp",)) as rec:
        first = await chat(rec, "termy", [user("Count to three.")], "tool_calls")
        [card] = tool_calls(first)
        call = await chat(rec, "termy", [user("Count to three."), assistant(first.parts), approve(card)], "end_turn")
        text = "".join(p["value"] for p in call.parts if p["type"] == "text")
        assert "one\ntwo\nthree\n" in text and "exit code 3" in text, text


# ---------------------------------------------------------------- claude-agent-acp


def claude_available() -> str | None:
    from tests.real_agent.claude import is_installed

    return None if is_installed() else "claude-agent-acp is not installed (make real-agent-deps) or node is missing"


@asynccontextmanager
async def claude_recording(path: Path, replies: list[Any], **fake_options: Any) -> AsyncIterator[Run]:
    from tests.fakes.fake_anthropic import FakeAnthropic
    from tests.real_agent.claude import agent_environ, claude_agent_command, claude_agent_env

    scratch = Path(tempfile.mkdtemp(prefix="lmbridge-rec-"))
    with FakeAnthropic(replies, **fake_options) as fake:
        node, entry = claude_agent_command()
        spec = {"id": "claude", "name": "Claude Code", "command": node, "args": [entry], "env": claude_agent_env(scratch / "home", fake.url)}
        env = venv_env(agent_environ())
        async with recording(path, [spec], env=env, scratch=scratch) as run:
            yield run


def bash(command: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "Create the marker file"}}}


async def claude_permission(path: Path, answer: str) -> None:
    replies: list[Any] = [[{"text": "I'll create it."}, bash("touch ran.txt")]]
    replies.append([{"text": "Created the file."}] if answer == "approve" else [{"text": "Understood, I did not run it."}])
    async with claude_recording(path, replies, done_text="Fine, moving on.") as run:
        history = [user("Please create ran.txt")]
        call = await chat(run, "claude", history, "tool_calls")
        (perm,) = tool_calls(call)
        history.append(assistant(call.parts))
        if answer == "approve":
            await chat(run, "claude", history + [approve(perm)], "end_turn")
            assert (run.workspace / "ran.txt").exists(), "the approved command did not run"
        elif answer == "skip":
            await chat(run, "claude", history + [skip(perm)], "end_turn")
        else:
            await chat(run, "claude", without_last_round(history) + [user("Never mind, just say hi.")], "end_turn")
        if answer != "approve":
            assert not (run.workspace / "ran.txt").exists(), "a declined command ran"


async def claude_approve(path: Path) -> None:
    await claude_permission(path, "approve")


async def claude_skip(path: Path) -> None:
    await claude_permission(path, "skip")


async def claude_stop(path: Path) -> None:
    await claude_permission(path, "stop")


async def claude_cancel(path: Path) -> None:
    """Cancel while claude streams (the fake model pauses mid-answer), then continue."""
    replies = [[{"text": "Let me think about this carefully. "}, {"sleep": 3}, {"text": "NEVER-SHOWN after the cancel."}]]
    async with claude_recording(path, replies, done_text="Hello again, after the cancel.") as run:
        history = [user("Tell me a long story.")]
        parts: list[dict[str, Any]] = []
        call = await run.client.start("lm/provideLanguageModelChatResponse", {"modelId": "claude", "messages": history}, parts.append)
        with anyio.fail_after(TIMEOUT):
            while "carefully" not in "".join(p.get("value", "") for p in parts if p["type"] == "text"):
                await anyio.sleep(0.01)
        await run.client.cancel(call)
        with anyio.fail_after(TIMEOUT):
            await call.done.wait()
        assert call.result == {"stopReason": "cancelled"}, call.result
        history.append(assistant(call.parts))
        await chat(run, "claude", history + [user("Just say hello.")], "end_turn")


async def claude_tools(path: Path) -> None:
    """claude-agent-acp calls two VS Code tools through the daemon's MCP server (its stdio relay),
    one after the other: the first is skipped, the second returns its result."""
    replies = [
        [
            {"text": "Let me look."},
            {"tool_use": {"name": "mcp__vscode__search_workspace", "input": {"q": "TODO"}}},
            {"tool_use": {"name": "mcp__vscode__read_file", "input": {"path": "a.py"}}},
        ],
        [{"text": "Partly done."}],
    ]
    async with claude_recording(path, replies) as run:
        await tools_chat(run, "claude", skip_tool="search_workspace")


# ---------------------------------------------------------------- running

Scenario = Callable[[Path], Awaitable[None]]
SCENARIOS: dict[str, tuple[str, Scenario, Callable[[], str | None] | None]] = {
    "demo-approve": ("demo agent: write a file, Allow", demo_approve, None),
    "demo-skip": ("demo agent: write a file, Skip", demo_skip, None),
    "demo-stop": ("demo agent: write a file, Stop, then a new message", demo_stop, None),
    "demo-cancel": ("demo agent: cancel mid-stream, then continue", demo_cancel, None),
    "demo-question": ("demo agent: asks a question (elicitation), VS Code's question tool answers", demo_question, None),
    "demo-two-files": ("demo agent: two concurrent permissions, one allowed and one skipped", demo_two_files, None),
    "demo-files": ("demo agent: reads a file through the editor (fs/*), appends a line after Allow", demo_files, None),
    "agent-crash": ("scripted agent crashes mid-turn; the next request starts a fresh agent", agent_crash, None),
    "claude-approve": ("claude-agent-acp: Bash command, Allow", claude_approve, claude_available),
    "claude-skip": ("claude-agent-acp: Bash command, Skip", claude_skip, claude_available),
    "claude-stop": ("claude-agent-acp: Bash command, Stop, then a new message", claude_stop, claude_available),
    "claude-cancel": ("claude-agent-acp: cancel mid-stream, then continue", claude_cancel, claude_available),
    "tools-scripted": ("scripted agent: two VS Code tools in one turn over the stdio relay, both results", scripted_tools, None),
    "terminal-scripted": ("scripted agent: a command run through lmbridge's terminal/*, its output live", scripted_terminal, None),
    "tools-claude": ("claude-agent-acp: two VS Code tools over the stdio relay, one skipped, one answered", claude_tools, claude_available),
}


async def record_one(name: str, out_dir: Path, attempts: int = 3) -> tuple[Path, int]:
    """Record a scenario and replay it; a recording that does not replay (a race the
    replay cannot reproduce) is recorded again."""
    _, scenario, _ = SCENARIOS[name]
    path = out_dir / f"{name}.jsonl"
    for attempt in range(1, attempts + 1):
        tmp = path.with_suffix(".jsonl.tmp")
        await scenario(tmp)
        try:
            await replay(tmp)
        except Divergence as exc:
            print(f"{name}: attempt {attempt} does not replay:\n{exc}", file=sys.stderr)
            continue
        tmp.replace(path)
        return path, sum(1 for _ in path.open()) - 1
    raise SystemExit(f"{name}: no recording replayed in {attempts} attempts")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="scenarios to record (default: all)")
    parser.add_argument("--out", type=Path, default=HERE, help="where the recordings go (default: tests/sessions)")
    parser.add_argument("--list", action="store_true", help="list the scenarios")
    args = parser.parse_args(argv)
    if args.list:
        for name, (what, _, _) in SCENARIOS.items():
            print(f"{name:16} {what}")
        return 0
    unknown = [n for n in args.names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)} (see --list)")
    from lmbridge.log import configure

    configure("error")
    args.out.mkdir(parents=True, exist_ok=True)
    status = 0
    for name in args.names or list(SCENARIOS):
        what, _, check = SCENARIOS[name]
        missing = check() if check else None
        if missing:
            print(f"skipped  {name}: {missing}")
            status = 1
            continue
        started = time.monotonic()
        path, frames = anyio.run(record_one, name, args.out, backend="asyncio")
        print(f"recorded {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {frames} frames, {time.monotonic() - started:.1f} s  ({what})")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
