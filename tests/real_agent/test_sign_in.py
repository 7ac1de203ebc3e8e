"""Real agents that are not signed in (docs/agents.md, "Signing in"): the chat gets one actionable error
naming the agent, with what the shim needs for its "Sign in…" button, and a key put in
place afterwards works on the next message with no restart of anything.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.devtools.client import DaemonClient, text_of  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.real_agent.claude import agent_environ, claude_agent_command, claude_agent_env  # noqa: E402
from tests.real_agent.copilot import Conversation, options  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds: ≥10x idle


async def test_claude_without_a_key_says_how_to_sign_in_then_works_once_it_has_one(tmp_path: Path) -> None:
    node, entry = claude_agent_command()
    with FakeAnthropic([[{"text": "Signed in and answering."}]]) as fake:
        env = claude_agent_env(tmp_path / "home", fake.url)
        del env["ANTHROPIC_API_KEY"]  # never signed in: Claude Code answers "Please run /login"
        spec = {"id": "claude", "name": "Claude Code", "command": node, "args": [entry], "env": env}
        chat = Conversation(tmp_path)
        daemon_env = agent_environ({"XDG_STATE_HOME": str(tmp_path / "state")})
        with open(tmp_path / "daemon.stderr", "ab") as stderr:
            async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve"], env=daemon_env, stderr=stderr) as client:
                await client.initialize(workspace=[str(tmp_path)], agents=[spec])
                with anyio.fail_after(TIMEOUT):
                    first = await client.chat("claude", chat.ask("hello"), timeout=TIMEOUT, options=options())
                assert first.error is not None and first.result is None
                # claude-agent-acp 0.101 lists two terminal logins: each is offered, the first is "login".
                assert first.error.message == (
                    f"Claude Code needs you to sign in (Authentication required): sign in by running `{node} {entry} --cli auth login --claudeai` "
                    f"(Claude Subscription) or `{node} {entry} --cli auth login --console` (Anthropic Console) in a terminal. Then send your message again."
                )
                assert first.error.data["login"] == {"command": node, "args": [entry, "--cli", "auth", "login", "--claudeai"], "env": {}}
                assert [(x["id"], x["name"], x["command"], x["args"]) for x in first.error.data["logins"]] == [
                    ("claude-ai-login", "Claude Subscription", node, [entry, "--cli", "auth", "login", "--claudeai"]),
                    ("console-login", "Anthropic Console", node, [entry, "--cli", "auth", "login", "--console"]),
                ]
                assert [(m["id"], m["name"]) for m in first.error.data["methods"]] == [("claude-ai-login", "Claude Subscription"), ("console-login", "Anthropic Console")]
                assert fake.main_requests() == []  # nothing reached the model
                # The user sets a key (the shim sends the changed setting with initialize).
                await client.initialize(workspace=[str(tmp_path)], agents=[{**spec, "env": {**env, "ANTHROPIC_API_KEY": "x"}}])
                with anyio.fail_after(TIMEOUT):
                    second = await client.chat("claude", chat.ask("hello"), timeout=TIMEOUT, options=options())
                assert second.error is None, second.error
                assert "Signed in and answering." in text_of(second)


async def test_codex_uses_a_key_in_its_environment_by_itself(tmp_path: Path) -> None:
    """codex-acp not logged in, OPENAI_API_KEY in its env: session/new says "Authentication
    required", the daemon calls ``authenticate`` with codex-acp 2.6's ``api-key`` method, and
    the chat is answered without the user doing anything."""
    from tests.fakes.fake_openai_responses import FakeResponses
    from tests.real_agent.codex import codex_agent_command, codex_agent_env, codex_environ

    with FakeResponses([[{"text": "Answered with your key."}]]) as fake:
        env = {**codex_agent_env(tmp_path / "home", fake.url, logged_in=False), "OPENAI_API_KEY": "sk-test"}
        argv = codex_agent_command()
        spec = {"id": "codex", "name": "Codex", "command": argv[0], "args": argv[1:], "env": env}
        daemon_env = codex_environ({"LMBRIDGE_LOG_LEVEL": "info", "XDG_STATE_HOME": str(tmp_path / "state")})
        (tmp_path / "work").mkdir()
        with open(tmp_path / "daemon.stderr", "ab") as stderr:
            async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve"], env=daemon_env, stderr=stderr) as client:
                await client.initialize(workspace=[str(tmp_path / "work")], agents=[spec])
                with anyio.fail_after(TIMEOUT):
                    call = await client.chat("codex", Conversation(tmp_path / "work").ask("hello"), timeout=TIMEOUT, options=options())
        assert call.error is None, call.error
        assert "Answered with your key." in text_of(call)
        (request,) = [r for r in fake.snapshot() if r.kind == "responses"]
        assert request.headers.get("authorization") == "Bearer sk-test"  # the key it signed in with
    assert "authenticating" in (tmp_path / "daemon.stderr").read_text() and "method=api-key" in (tmp_path / "daemon.stderr").read_text()


async def test_codex_not_logged_in_names_its_keys_and_nothing_reaches_the_model(tmp_path: Path) -> None:
    from tests.fakes.fake_openai_responses import FakeResponses
    from tests.real_agent.codex import codex_bridge

    with FakeResponses() as fake:
        async with codex_bridge(tmp_path, fake.url, logged_in=False) as client:
            with anyio.fail_after(TIMEOUT):
                call = await client.chat("codex", Conversation(tmp_path / "work").ask("hello"), timeout=TIMEOUT, options=options())
        assert call.error is not None and fake.responses_requests() == []
        assert call.error.message.startswith(
            "Codex needs you to sign in (Authentication required): set CODEX_API_KEY or OPENAI_API_KEY in its \"env\" in the lmbridge.agents setting"
        ), call.error.message
        assert call.error.data["env"] == ["CODEX_API_KEY", "OPENAI_API_KEY"]
        assert [m["id"] for m in call.error.data["methods"]] == ["api-key", "chat-gpt"]  # codex-acp 2.6's


async def test_gemini_without_a_key_says_so_then_answers_once_it_has_one(tmp_path: Path) -> None:
    from tests.fakes.fake_gemini import FakeGemini
    from tests.real_agent.gemini import gemini_agent_command, gemini_agent_env

    with FakeGemini([[{"text": "Hello with a key."}]]) as fake:
        argv = gemini_agent_command()
        spec = {"id": "gemini", "name": "Gemini CLI", "command": argv[0], "args": argv[1:], "env": gemini_agent_env(tmp_path / "home", fake.url, api_key=None)}
        daemon_env = agent_environ({"XDG_STATE_HOME": str(tmp_path / "state")})
        for name in [n for n in daemon_env if n.startswith(("GEMINI_", "GOOGLE_"))]:
            del daemon_env[name]
        chat = Conversation(tmp_path)
        with open(tmp_path / "daemon.stderr", "ab") as stderr:
            async with DaemonClient.spawn([sys.executable, "-m", "lmbridge", "serve"], env=daemon_env, stderr=stderr) as client:
                await client.initialize(workspace=[str(tmp_path)], agents=[spec])
                with anyio.fail_after(TIMEOUT):
                    first = await client.chat("gemini", chat.ask("hello"), timeout=TIMEOUT, options=options())
                assert first.error is not None and fake.main_requests() == []
                assert first.error.message.startswith(
                    "Gemini CLI needs you to sign in (Gemini API key is missing or not configured): one of: Log in with Google"
                ), first.error.message
                assert first.error.data["reason"] == "auth_required" and first.error.data["agentName"] == "Gemini CLI"
                await client.initialize(workspace=[str(tmp_path)], agents=[{**spec, "env": {**spec["env"], "GEMINI_API_KEY": "x"}}])
                with anyio.fail_after(TIMEOUT):
                    second = await client.chat("gemini", chat.ask("hello"), timeout=TIMEOUT, options=options())
                assert second.error is None, second.error
                assert "Hello with a key." in text_of(second)
