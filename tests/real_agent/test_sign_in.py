"""Real agents that are not signed in (issue #12 §2): the chat gets one actionable error
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

from lmbridge.client import DaemonClient, text_of  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.real_agent.claude import agent_environ, claude_agent_command, claude_agent_env  # noqa: E402
from tests.real_agent.copilot import Conversation, options  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 90


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
                assert first.error.message == (
                    f"Claude Code needs you to sign in (Authentication required): sign in by running `{node} {entry} --cli` "
                    "in a terminal. Then send your message again."
                )
                assert first.error.data["login"] == {"command": node, "args": [entry, "--cli"], "env": {}}
                assert first.error.data["methods"] == [{"id": "claude-login", "name": "Log in with Claude", "description": "Run `claude /login` in the terminal"}]
                assert fake.main_requests() == []  # nothing reached the model
                # The user sets a key (the shim sends the changed setting with initialize).
                await client.initialize(workspace=[str(tmp_path)], agents=[{**spec, "env": {**env, "ANTHROPIC_API_KEY": "x"}}])
                with anyio.fail_after(TIMEOUT):
                    second = await client.chat("claude", chat.ask("hello"), timeout=TIMEOUT, options=options())
                assert second.error is None, second.error
                assert "Signed in and answering." in text_of(second)
