"""claude-agent-acp 0.23.1 driven DIRECTLY over ACP (no lmbridge in between).

These tests prove the offline recipe (``tests/real_agent/claude.py`` +
``tests/fakes/fake_anthropic.py``) and pin down, on the wire, the behaviour the bridge
relies on: streaming text, ``session/request_permission`` for Bash (allow / reject),
and ``session/cancel`` while a permission is pending, including the agent's
"one turn behind after a cancel" quirk and the close+resume recovery.

If one of the characterisation tests fails after an upgrade of the agent, the agent's
behaviour changed: update docs/agents.md and the bridge, not just the test.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fakes.fake_anthropic import FakeAnthropic, classify_request  # noqa: E402
from tests.real_agent.acp_probe import (  # noqa: E402
    AcpProbe,
    initialize_params,
    pick_option,
    text_prompt,
)
from tests.real_agent.claude import claude_agent_launch  # noqa: E402

TURN_TIMEOUT = 300  # seconds, per test body: ≥10x idle (the agent's start and a few turns, 5-20 s idle)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Session:
    """A live claude-agent-acp process with one ACP session, and its fake model."""

    def __init__(self, probe: AcpProbe, fake: FakeAnthropic, session_id: str, cwd: Path, init: Any, new: Any):
        self.probe = probe
        self.fake = fake
        self.id = session_id
        self.cwd = cwd
        self.init = init
        self.new = new

    async def prompt(self, text: str) -> dict[str, Any]:
        return await self.probe.request("session/prompt", text_prompt(self.id, text))

    async def prompt_with_permission(self, text: str, answer) -> tuple[dict[str, Any], dict[str, Any]]:
        """Send a prompt, wait for its permission request, let ``answer(request)`` deal
        with it; returns ``(prompt result, permission request)``."""
        result: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                result.update(await self.prompt(text))

            tg.start_soon(run)
            request = await self.probe.next_request("session/request_permission")
            await answer(request)
        return result, request


@asynccontextmanager
async def claude_session(tmp_path: Path, replies: list, **fake_kwargs: Any) -> AsyncIterator[Session]:
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    with FakeAnthropic(replies=replies, **fake_kwargs) as fake:
        argv, env = claude_agent_launch(tmp_path / "home", fake.url)
        async with AcpProbe.spawn(argv, env=env, cwd=cwd) as probe:
            try:
                init = await probe.request("initialize", initialize_params())
                new = await probe.request("session/new", {"cwd": str(cwd), "mcpServers": []})
                yield Session(probe, fake, new["sessionId"], cwd, init, new)
            except BaseException:
                sys.stderr.write("--- agent stderr ---\n" + probe.stderr_text()[-4000:] + "\n")
                raise


def bash(command: str, description: str = "Run a command") -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": description}}}


def selected(option_id: str) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


CANCELLED = {"outcome": {"outcome": "cancelled"}}


def last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


# --------------------------------------------------------------------------- agent tests


@pytest.mark.real_agent
@pytest.mark.anyio
async def test_plain_text_reply_streams_and_ends_turn(tmp_path: Path) -> None:
    with anyio.fail_after(TURN_TIMEOUT):
        async with claude_session(tmp_path, [[{"text": "Hello from the fake model, streamed in chunks."}]]) as s:
            caps = s.init["agentCapabilities"]
            assert s.init["protocolVersion"] == 1
            assert caps["promptCapabilities"] == {"image": True, "embeddedContext": True}
            assert caps["mcpCapabilities"] == {"http": True, "sse": True}
            assert s.init["agentInfo"]["version"] == "0.23.1"
            assert {"modes", "models", "configOptions"} <= set(s.new)

            start = len(s.probe.updates(s.id))
            result = await s.prompt("say hello")
            assert result["stopReason"] == "end_turn"
            chunks = [u for u in s.probe.updates(s.id)[start:] if u["sessionUpdate"] == "agent_message_chunk"]
            assert len(chunks) > 1, "text should arrive as several agent_message_chunk updates"
            assert s.probe.agent_text(start, s.id) == "Hello from the fake model, streamed in chunks."
            assert [b for b in s.fake.main_requests() if "say hello" in last_user_text(b)]
            assert s.probe.non_json_lines == []


@pytest.mark.real_agent
@pytest.mark.anyio
async def test_bash_allow_once_runs_and_tool_result_reaches_model(tmp_path: Path) -> None:
    target = tmp_path / "work" / "ran.txt"
    replies = [
        [{"text": "I'll create the file."}, bash(f"touch {target}", "Create ran.txt")],
        [{"text": "Created ran.txt."}],
    ]
    with anyio.fail_after(TURN_TIMEOUT):
        async with claude_session(tmp_path, replies) as s:
            start = len(s.probe.updates(s.id))

            async def allow(request: dict[str, Any]) -> None:
                params = request["params"]
                assert params["sessionId"] == s.id
                kinds = {o["kind"] for o in params["options"]}
                assert {"allow_once", "allow_always", "reject_once"} <= kinds
                assert not target.exists(), "the tool must not run before permission"
                await s.probe.respond(request["id"], selected(pick_option(params["options"], "allow_once")))

            result, request = await s.prompt_with_permission("create ran.txt", allow)
            assert result["stopReason"] == "end_turn"
            assert target.exists()

            tool_id = s.fake.tool_use_ids()[0]
            tool_call = request["params"]["toolCall"]
            assert tool_call["toolCallId"] == tool_id
            assert tool_call["kind"] == "execute"
            assert tool_call["rawInput"]["command"] == f"touch {target}"

            updates = s.probe.updates(s.id)[start:]
            tool_updates = [u for u in updates if u.get("toolCallId") == tool_id]
            assert tool_updates[0]["sessionUpdate"] == "tool_call"
            assert tool_updates[-1]["sessionUpdate"] == "tool_call_update"
            assert tool_updates[-1]["status"] == "completed"
            assert s.probe.agent_text(start, s.id).endswith("Created ran.txt.")

            tr = s.fake.tool_result(tool_id)
            assert tr is not None, "the tool_result must reach the model"
            assert tr["is_error"] is False
            assert tr["text"] == "(Bash completed with no output)"

            # Everything this agent sends validates against the acp SDK's schema when the
            # model API reports cache token counts (see test_usage_update_used_null...).
            from acp.schema import SessionNotification

            for params in s.probe.notifications:
                SessionNotification.model_validate(params)


@pytest.mark.real_agent
@pytest.mark.anyio
async def test_bash_reject_once_does_not_run_and_turn_finishes(tmp_path: Path) -> None:
    target = tmp_path / "work" / "ran.txt"
    replies = [
        [bash(f"touch {target}", "Create ran.txt")],
        [{"text": "OK, I won't."}],
    ]
    with anyio.fail_after(TURN_TIMEOUT):
        async with claude_session(tmp_path, replies) as s:
            start = len(s.probe.updates(s.id))

            async def reject(request: dict[str, Any]) -> None:
                options = request["params"]["options"]
                await s.probe.respond(request["id"], selected(pick_option(options, "reject_once")))

            result, _ = await s.prompt_with_permission("create ran.txt", reject)
            assert result["stopReason"] == "end_turn"
            assert not target.exists()
            tool_id = s.fake.tool_use_ids()[0]
            tr = s.fake.tool_result(tool_id)
            assert tr is not None and tr["is_error"] is True
            assert tr["text"] == "User refused permission to run tool"
            assert s.probe.agent_text(start, s.id).endswith("OK, I won't.")
            final = [u for u in s.probe.updates(s.id)[start:] if u.get("toolCallId") == tool_id][-1]
            assert final.get("status") == "failed"


async def _cancel_pending_permission(s: Session, target: Path) -> dict[str, Any]:
    """Prompt → Bash tool_use → permission pending → session/cancel, then answer the
    pending permission ``cancelled`` (as the spec requires).  Returns the prompt result."""

    async def cancel(request: dict[str, Any]) -> None:
        await s.probe.notify("session/cancel", {"sessionId": s.id})
        await s.probe.respond(request["id"], CANCELLED)

    result, _ = await s.prompt_with_permission("create ran.txt", cancel)
    assert not target.exists()
    return result


@pytest.mark.real_agent
@pytest.mark.anyio
async def test_cancel_while_permission_pending_then_next_turn_lags(tmp_path: Path) -> None:
    """Characterises the claude-agent-acp 0.23.1 cancel quirk.

    After a cancel with a permission pending, the session is ONE TURN BEHIND: the next
    prompt is answered at once with ``end_turn``, no update and zero usage, although its
    text WAS sent to the model; the model's answer to it is streamed during the
    following prompt.
    """
    target = tmp_path / "work" / "ran.txt"
    replies = [
        [{"text": "I'll create the file."}, bash(f"touch {target}", "Create ran.txt")],
        [{"text": "Answer to first."}],
        [{"text": "Answer to second."}],
    ]
    with anyio.fail_after(TURN_TIMEOUT):
        async with claude_session(tmp_path, replies) as s:
            result = await _cancel_pending_permission(s, target)
            assert result["stopReason"] == "cancelled"
            tool_id = s.fake.tool_use_ids()[0]

            # 1st prompt after the cancel: answered at once, empty, zero usage ...
            start = len(s.probe.updates(s.id))
            first = await s.prompt("first after cancel")
            assert first["stopReason"] == "end_turn"
            assert first["usage"]["totalTokens"] == 0
            assert s.probe.updates(s.id)[start:] == []
            # ... yet the prompt did reach the model, after the cancelled tool's result.
            assert await anyio.to_thread.run_sync(
                lambda: s.fake.wait_for(
                    lambda reqs: any(
                        r.kind == "main" and "first after cancel" in last_user_text(r.body) for r in reqs
                    ),
                    timeout=10,
                )
            )
            tr = s.fake.tool_result(tool_id)
            assert tr is not None and tr["is_error"] is True
            assert tr["text"] == "Tool permission request failed: AbortError"
            await anyio.sleep(0.5)

            # 2nd prompt: streams the (stale) answer to the 1st one.
            start = len(s.probe.updates(s.id))
            second = await s.prompt("second after cancel")
            assert second["stopReason"] == "end_turn"
            assert s.probe.agent_text(start, s.id).startswith("Answer to first.")
            assert "consuming background task result" in s.probe.stderr_text()


@pytest.mark.real_agent
@pytest.mark.anyio
async def test_cancel_mid_stream_also_leaves_session_a_turn_behind(tmp_path: Path) -> None:
    """The quirk is not about permissions: any cancel of a running turn triggers it."""
    replies = [
        [{"text": "Part one."}, {"sleep": 2}, {"text": "Part two."}],
        [{"text": "Answer to first."}],
    ]
    with anyio.fail_after(TURN_TIMEOUT):
        async with claude_session(tmp_path, replies) as s:
            result: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    result.update(await s.prompt("go"))

                tg.start_soon(run)
                await s.probe.wait_update(lambda n: "Part one." in json.dumps(n))
                await s.probe.notify("session/cancel", {"sessionId": s.id})
            assert result["stopReason"] == "cancelled"
            assert "Part two." not in s.probe.agent_text(0, s.id)

            first = await s.prompt("first after cancel")
            assert first["stopReason"] == "end_turn" and first["usage"]["totalTokens"] == 0
            await anyio.to_thread.run_sync(
                lambda: s.fake.wait_for(
                    lambda reqs: any(r.kind == "main" and "first after cancel" in last_user_text(r.body) for r in reqs),
                    timeout=10,
                )
            )
            await anyio.sleep(0.5)
            start = len(s.probe.updates(s.id))
            await s.prompt("second after cancel")
            assert s.probe.agent_text(start, s.id).startswith("Answer to first.")


@pytest.mark.real_agent
@pytest.mark.anyio
async def test_cancel_recovers_with_session_close_and_resume(tmp_path: Path) -> None:
    """Workaround for the quirk: session/close + session/resume (same id) gives a fresh
    Claude Code process on the same transcript; turns are in step again and the model
    still sees the history (the cancelled tool_use with its AbortError result)."""
    target = tmp_path / "work" / "ran.txt"
    replies = [
        [{"text": "I'll create the file."}, bash(f"touch {target}", "Create ran.txt")],
        [{"text": "Answer to first."}],
        [{"text": "Answer to second."}],
    ]
    with anyio.fail_after(TURN_TIMEOUT):
        async with claude_session(tmp_path, replies) as s:
            assert (await _cancel_pending_permission(s, target))["stopReason"] == "cancelled"
            assert await s.probe.request("session/close", {"sessionId": s.id}) == {}
            resumed = await s.probe.request(
                "session/resume", {"sessionId": s.id, "cwd": str(s.cwd), "mcpServers": []}
            )
            assert resumed["sessionId"] == s.id

            for text, answer in (("first after resume", "Answer to first."), ("second", "Answer to second.")):
                start = len(s.probe.updates(s.id))
                result = await s.prompt(text)
                assert result["stopReason"] == "end_turn"
                assert s.probe.agent_text(start, s.id) == answer

            first_after = next(b for b in s.fake.main_requests() if "first after resume" in last_user_text(b))
            history = json.dumps(first_after["messages"])
            assert "create ran.txt" in history and "Tool permission request failed: AbortError" in history


@pytest.mark.real_agent
@pytest.mark.anyio
async def test_usage_update_used_null_without_cache_usage_fields(tmp_path: Path) -> None:
    """When the Messages API omits cache_*_input_tokens from usage, the agent sends
    ``usage_update`` with ``"used": null``, which acp.schema rejects (and the acp SDK
    would drop with only a log line)."""
    from acp.schema import SessionNotification
    from pydantic import ValidationError

    with anyio.fail_after(TURN_TIMEOUT):
        async with claude_session(tmp_path, [[{"text": "hi"}]], cache_usage_fields=False) as s:
            assert (await s.prompt("hi"))["stopReason"] == "end_turn"
            usage = [n for n in s.probe.notifications if n["update"]["sessionUpdate"] == "usage_update"]
            assert usage and usage[-1]["update"]["used"] is None
            with pytest.raises(ValidationError):
                SessionNotification.model_validate(usage[-1])


# --------------------------------------------------------------------------- the fake itself


def _post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_fake_anthropic_script_side_requests_and_recording() -> None:
    main = {"model": "claude-sonnet-4-6", "max_tokens": 32000, "tools": [{"name": "Bash"}], "messages": []}
    title = {
        "model": "claude-haiku-4-5",
        "max_tokens": 512,
        "system": "Generate a concise title",
        "messages": [{"role": "user", "content": "x"}],
    }
    quota = {"model": "claude-sonnet-4-6", "max_tokens": 1, "messages": [{"role": "user", "content": "quota"}]}
    assert classify_request(main) == "main"
    assert classify_request(title) == "side"
    assert classify_request(quota) == "side"

    with FakeAnthropic(replies=[[{"text": "one"}, bash("ls")]]) as fake:
        status, data = _post(fake.url + "/v1/messages", title)
        assert status == 200 and json.loads(data)["content"][0]["type"] == "text"
        status, data = _post(fake.url + "/v1/messages?beta=true", main)
        msg = json.loads(data)
        assert [c["type"] for c in msg["content"]] == ["text", "tool_use"]
        assert msg["stop_reason"] == "tool_use"
        assert msg["content"][1]["id"] == fake.tool_use_ids()[0]
        status, data = _post(fake.url + "/v1/messages", {**main, "stream": True})
        events = [line[7:] for line in data.decode().splitlines() if line.startswith("event: ")]
        assert events[0] == "message_start" and events[-1] == "message_stop"
        assert '"text": "Done."' in data.decode() and '"stop_reason": "end_turn"' in data.decode()
        status, data = _post(fake.url + "/v1/messages/count_tokens", main)
        assert status == 200 and json.loads(data)["input_tokens"] > 0
        status, data = _post(fake.url + "/v1/nope", {})
        assert status == 404 and json.loads(data)["type"] == "error"
        assert [r.kind for r in fake.snapshot()] == ["side", "main", "main", "count_tokens", "other"]
        assert fake.remaining == 0
