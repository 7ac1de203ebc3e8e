"""Every workspace folder with the real agents that take them (docs/agents.md, "Every
workspace folder"), through the real daemon against the fake model APIs. claude-agent-acp
0.101.0 is given the second folder: it reads a file there without asking (as in its cwd), and
an edit there asks with a card naming that folder. codex-acp 2.6.0 tells its model both
folders as its workspace roots."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.devtools.client import approve, assistant, text_of, tool_calls, user  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.fakes.fake_openai_responses import FakeResponses, input_texts  # noqa: E402
from tests.real_agent.claude import claude_bridge  # noqa: E402
from tests.real_agent.codex import codex_bridge  # noqa: E402
from tests.real_agent.codex import is_installed as codex_installed  # noqa: E402
from tests.real_agent.copilot import Conversation, options  # noqa: E402

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
TIMEOUT = 300  # seconds per test body: ≥10x idle (the agent's start and a few turns, 5-20 s idle)


async def test_claude_reads_and_edits_in_the_second_folder(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (second / "notes.txt").write_text("the second folder's notes\n")
    written = second / "new.txt"
    script = [
        [{"tool_use": {"name": "Read", "input": {"file_path": str(second / "notes.txt")}}}],
        [{"tool_use": {"name": "Write", "input": {"file_path": str(written), "content": "written in the second folder\n"}}}],
        [{"text": "Done in the second folder."}],
    ]
    with FakeAnthropic(script) as fake:
        async with claude_bridge(tmp_path, fake.url, workspace=[str(first), str(second)]) as client:
            with anyio.fail_after(TIMEOUT):
                history = [user("Read notes.txt in the second folder, then write new.txt there")]
                call = await client.chat("claude", history, timeout=TIMEOUT)
                assert call.error is None, call.error
                (card,) = tool_calls(call)  # the Write only: the Read in the second folder did not ask
                message = card["input"]["message"]
                assert str(written) in message and f"**Workspace folder**: `{second}`" in message, message
                assert not written.exists()
                call = await client.chat("claude", [*history, assistant(call.parts), approve(card)], timeout=TIMEOUT)
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            assert "Done in the second folder." in text_of(call)
    assert written.read_text() == "written in the second folder\n"
    read, write = fake.tool_results()[:2]
    assert not read.get("is_error") and "the second folder's notes" in read["text"], read
    assert not write.get("is_error"), write
    log = (tmp_path / "daemon.stderr").read_text(errors="replace")
    assert "acp session" in log


@pytest.mark.skipif(not codex_installed(), reason="codex-acp (linux-x64) is not installed: make real-agent-deps")
async def test_codex_tells_its_model_every_folder(tmp_path: Path) -> None:
    second = tmp_path / "second"
    second.mkdir()
    with FakeResponses([[{"text": "Four."}]]) as fake:
        async with codex_bridge(tmp_path, fake.url, more_folders=(str(second),)) as client:
            with anyio.fail_after(TIMEOUT):
                call = await client.chat("codex", Conversation(tmp_path / "work").ask("What is 2 + 2?"), timeout=TIMEOUT, options=options([]))
            assert call.error is None and call.result == {"stopReason": "end_turn"}, (call.error, call.result)
            assert "Four." in text_of(call)
    (turn,) = [r.body for r in fake.requests if r.kind == "responses"]
    context = next(t for t in input_texts(turn, "user") if "<environment_context>" in t)
    assert f"<workspace_roots><root>{tmp_path / 'work'}</root><root>{second}</root></workspace_roots>" in context, context
