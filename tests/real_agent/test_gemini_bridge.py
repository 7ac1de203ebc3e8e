"""The real gemini-cli 0.61.0 through the real daemon, driven over the wire protocol with
Copilot-shaped requests (tests/real_agent/copilot.py: Copilot's system prompt, its global
context, scaffolded user messages, cache_control parts, Agent mode's 40-odd tools), against
the fake Gemini API (tests/fakes/fake_gemini.py).

Each test asserts on real effects: a file on disk, what the fake model received (its
``contents``: the user's words, earlier turns, ``functionResponse`` parts).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.core.permissions import ACTION_TOOLS  # noqa: E402
from lmbridge.devtools.client import DaemonClient, SentRequest, approve, is_agent_action, skip, text_of, tool_calls, tool_result  # noqa: E402
from tests.fakes.fake_gemini import FakeGemini, function_declarations, texts  # noqa: E402
from tests.real_agent.acp_probe import AcpProbe, AgentError, initialize_params, text_prompt  # noqa: E402
from tests.real_agent.copilot import Conversation, options  # noqa: E402
from tests.real_agent.gemini import gemini_agent_command, gemini_bridge, gemini_environ, is_installed  # noqa: E402

pytestmark = [
    pytest.mark.real_agent,
    pytest.mark.anyio,
    pytest.mark.skipif(not is_installed(), reason="gemini-cli is not installed: make real-agent-deps"),
]
TIMEOUT = 300  # seconds per test body: ≥10x idle (the agent's start and a few turns, 5-20 s idle)
MODEL = "gemini"
SHELL = "run_shell_command"  # gemini-cli's shell tool: {"command": ...}


def shell(command: str) -> dict[str, Any]:
    return {"call": {"name": SHELL, "args": {"command": command}}}


async def send(client: DaemonClient, messages: list[dict[str, Any]]) -> SentRequest:
    """One request as Agent mode sends it (its tools in ``options``), run to its end."""
    call = await client.chat(MODEL, messages, timeout=TIMEOUT, options=options())
    assert call.error is None, call.error
    return call


async def ask_for_shell(client: DaemonClient, chat: Conversation, request: str, command: str) -> dict[str, Any]:
    """The first request: the agent asks to run ``command``; returns the permission part."""
    call = await send(client, chat.ask(request))
    assert call.result == {"stopReason": "tool_calls"}, (call.result, call.parts)
    (perm,) = tool_calls(call)
    assert perm["name"] in ACTION_TOOLS and is_agent_action(perm)
    card = perm["input"]["message"]
    assert "**run a command**" in card and f"```sh\n{command}\n```" in card  # gemini names the command in its title
    assert command in perm["input"]["title"] and "The agent offered: " in card
    chat.answered(call)
    return perm


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


async def test_plain_chat(tmp_path: Path, workspace: Path) -> None:
    reply = [{"thought": "**Greeting**\nThe user wants a hello."}, {"text": "Hello from the fake Gemini."}]
    with FakeGemini([reply]) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                call = await send(client, chat.ask("Say hello to me, please."))
            assert call.result == {"stopReason": "end_turn"}
            assert "Hello from the fake Gemini." in text_of(call)
            # The model's thought summary comes as agent_thought_chunk: a thinking part.
            thinking = "".join(p["value"] for p in call.parts if p["type"] == "thinking")
            assert "The user wants a hello." in thinking and "wants a hello" not in text_of(call)
            (body,) = fake.main_requests()
            sent = "\n".join(texts(body, "user"))
            assert "Say hello to me, please." in sent
            # Copilot's scaffolding of the turn stays with VS Code.
            for wrapper in ("<userRequest>", "<reminderInstructions>", "cache_control"):
                assert wrapper not in sent, wrapper


async def test_approve_runs_the_command(tmp_path: Path, workspace: Path) -> None:
    marker = workspace / "approved.txt"
    command = f"touch {marker} && echo made-it-4711"
    with FakeGemini([[{"text": "I'll create it."}, shell(command)], [{"text": "Created the file."}]]) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                perm = await ask_for_shell(client, chat, f"Please create {marker.name}", command)
                assert not marker.exists()  # nothing runs before the user answers
                call = await send(client, chat.result(approve(perm)))
            assert call.result == {"stopReason": "end_turn"}, call.result
            assert marker.exists()
            assert "Created the file." in text_of(call)
            (response,) = fake.function_responses()
            assert response["name"] == SHELL
            assert "made-it-4711" in json.dumps(response["response"])


async def test_skip_does_not_run_and_the_turn_finishes(tmp_path: Path, workspace: Path) -> None:
    marker = workspace / "skipped.txt"
    command = f"touch {marker}"
    with FakeGemini([[shell(command)], [{"text": "Understood, I did not run it."}]]) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                perm = await ask_for_shell(client, chat, f"Please create {marker.name}", command)
                call = await send(client, chat.result(skip(perm)))
            assert call.result == {"stopReason": "end_turn"}, call.result
            assert not marker.exists()
            assert "I did not run it." in text_of(call)
            (response,) = fake.function_responses()
            assert response["name"] == SHELL and "error" in response["response"]


async def _next_minute(within: float = 60.0) -> None:
    """Wait until the wall clock's minute turns, if it turns within ``within`` seconds."""
    left = 60.0 - time.time() % 60.0
    if left <= within:
        await anyio.sleep(left + 0.2)


@pytest.mark.parametrize("minute", ["same", "next"])
async def test_stop_at_a_permission_then_the_next_message(tmp_path: Path, workspace: Path, minute: str) -> None:
    """A Stop at the card, then a new message: in the minute the session was opened, and in a
    later one ("next"), where gemini-cli's session/load would take up the session with the
    stopped call still unanswered in it
    (test_session_load_takes_a_session_up_only_from_a_recording_of_another_minute)."""
    if minute == "same":
        await _next_minute(within=30.0)
    marker = workspace / "stopped.txt"
    command = f"touch {marker}"
    with FakeGemini([[shell(command)]], done_text="Fine, moving on.") as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                await ask_for_shell(client, chat, f"Please create {marker.name}", command)
                chat.stopped()  # Stop at the confirmation: VS Code drops the round
            if minute == "next":
                await _next_minute()
            with anyio.fail_after(TIMEOUT):
                started = time.monotonic()
                call = await send(client, chat.ask("Never mind, just say hi."))
                elapsed = time.monotonic() - started
            assert call.result == {"stopReason": "end_turn"}, (call.result, call.parts)
            assert "Fine, moving on." in text_of(call)
            assert not marker.exists()
            assert elapsed < 60, f"took {elapsed:.1f} s"  # ~2-5 s idle
            assert "cancelled turn did not end" not in (tmp_path / "daemon.stderr").read_text(errors="replace")  # promptly: the stopped turn ended, no drain deadline (10 s) waited
            last = "\n".join(texts(fake.main_requests()[-1], "user"))
            assert "Never mind, just say hi." in last
            if fake.refused():
                # Mostly: gemini-cli saw the session/cancel before it answered the function
                # call ("canceled by the user"), kept the call without a response, and the
                # first prompt after the cancel was refused (HTTP 400, as the real API does).
                # That history is broken (its profile's cancel_breaks_history): lmbridge goes on
                # in a fresh session told the conversation, never loads it again (in a later
                # minute the load would work, and the retried prompt be refused again).
                assert len(fake.refused()) == 1
                assert "<conversation-so-far>" in last and f"Please create {marker.name}" in last
                assert "how=session/load" not in (tmp_path / "daemon.stderr").read_text(errors="replace")
            else:
                # Sometimes (about 1 in 8 here) gemini-cli had already gone on to send the
                # cancelled call's error ("canceled by the user") when the session/cancel
                # landed: it aborted that request and rolled the whole stopped turn back out of
                # its history. The session continued, without the stopped turn.
                assert len(fake.main_requests()) == 2 and not fake.function_responses()
                assert "<conversation-so-far>" not in last and f"Please create {marker.name}" not in last


async def test_second_turn_keeps_the_context(tmp_path: Path, workspace: Path) -> None:
    with FakeGemini([[{"text": "Noted: teal."}], [{"text": "It is teal."}]]) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                first = await send(client, chat.ask("My favourite colour is teal."))
                chat.answered(first)
                second = await send(client, chat.ask("What is my favourite colour?"))
            assert second.result == {"stopReason": "end_turn"} and "It is teal." in text_of(second)
            first_body, second_body = fake.main_requests()
            user_texts = "\n".join(texts(second_body, "user"))
            assert "My favourite colour is teal." in user_texts and "What is my favourite colour?" in user_texts
            assert "Noted: teal." in "\n".join(texts(second_body, "model"))
            # The session continued: the first turn is in the agent's memory, not re-sent.
            assert user_texts.count("My favourite colour is teal.") == 1
            assert second_body["contents"][: len(first_body["contents"])] == first_body["contents"]


async def test_two_actions_in_one_turn(tmp_path: Path, workspace: Path) -> None:
    one, two = workspace / "one.txt", workspace / "two.txt"
    with FakeGemini([[shell(f"touch {one}"), shell(f"touch {two}")], [{"text": "Both made."}]]) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                first = await ask_for_shell(client, chat, "Create one.txt and two.txt", f"touch {one}")
                # gemini asks one at a time: the second permission comes once the first ran.
                call = await send(client, chat.result(approve(first)))
                assert call.result == {"stopReason": "tool_calls"}, call.result
                assert one.exists() and not two.exists()
                (second,) = tool_calls(call)
                assert is_agent_action(second) and f"touch {two}" in second["input"]["title"]
                chat.answered(call)
                call = await send(client, chat.result(approve(second)))
            assert call.result == {"stopReason": "end_turn"}, call.result
            assert one.exists() and two.exists()
            assert "Both made." in text_of(call)
            responses = fake.function_responses()
            assert [r["name"] for r in responses] == [SHELL, SHELL]
            # Both answers went back to the model together, in the turn after its calls.
            last = fake.main_requests()[-1]["contents"]
            assert sum("functionResponse" in p for p in last[-1]["parts"]) == 2


async def test_cancel_mid_stream_then_the_next_message(tmp_path: Path, workspace: Path) -> None:
    script = [[{"text": "Partial answer STOPPED-8812 "}, {"sleep": 15}, {"text": "never seen"}], [{"text": "A fresh answer."}]]
    with FakeGemini(script) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                streaming, shown = anyio.Event(), []

                def on_part(part: dict[str, Any]) -> None:
                    shown.append(part.get("value", "") if part.get("type") == "text" else "")
                    if "STOPPED-8812" in "".join(shown):  # the model's text (not "Starting Gemini CLI…")
                        streaming.set()

                call = await client.start(
                    "lm/provideLanguageModelChatResponse",
                    {"modelId": MODEL, "messages": chat.ask("Tell me a long story."), "options": options()},
                    on_part=on_part,
                )
                await streaming.wait()
                await client.cancel(call)
                await call.done.wait()
                chat.stopped()  # Stop while streaming: the response is dropped, the turn stays
                started = time.monotonic()
                nxt = await send(client, chat.ask("Just answer briefly instead."))
                elapsed = time.monotonic() - started
            assert "STOPPED-8812" in text_of(call)
            assert call.error is not None or call.result == {"stopReason": "cancelled"}, (call.result, call.error)
            assert nxt.result == {"stopReason": "end_turn"} and "A fresh answer." in text_of(nxt), nxt.parts
            assert "never seen" not in text_of(nxt)
            assert elapsed < 60, f"took {elapsed:.1f} s"  # ~2-5 s idle
            assert "cancelled turn did not end" not in (tmp_path / "daemon.stderr").read_text(errors="replace")  # promptly: the stopped turn ended, no drain deadline (10 s) waited
            last = fake.main_requests()[-1]
            assert "Just answer briefly instead." in "\n".join(texts(last, "user"))
            assert "STOPPED-8812" not in json.dumps(last["contents"])


async def test_after_a_daemon_restart_the_chat_goes_on(tmp_path: Path, workspace: Path) -> None:
    """VS Code reloaded: a new daemon, same state folder and agent HOME. The session index
    offers gemini's session for session/load (loadSession is advertised). gemini-cli 0.61.0
    refuses it in the minute the session was opened
    (test_session_load_takes_a_session_up_only_from_a_recording_of_another_minute): the chat
    goes on in a fresh session told the conversation. In a later minute it takes it up: the
    chat goes on with its own memory, and nothing is told twice."""
    with FakeGemini([[{"text": "Noted: teal."}], [{"text": "It is teal."}]]) as fake:
        chat = Conversation(workspace)
        with anyio.fail_after(TIMEOUT):
            async with gemini_bridge(tmp_path, fake.url) as client:
                chat.answered(await send(client, chat.ask("My favourite colour is teal.")))
            async with gemini_bridge(tmp_path, fake.url) as client:
                call = await send(client, chat.ask("What is my favourite colour?"))
        assert call.result == {"stopReason": "end_turn"} and "It is teal." in text_of(call)
        last = "\n".join(texts(fake.main_requests()[-1], "user"))
        model = "\n".join(texts(fake.main_requests()[-1], "model"))
    log = (tmp_path / "daemon.stderr").read_text(errors="replace")
    if "how=session/load" in log:  # gemini kept the session: its own history holds the first turn
        assert "<conversation-so-far>" not in last and "My favourite colour is teal." in last and "Noted: teal." in model
        assert log.count("how=new") == 1
    else:
        assert "<conversation-so-far>" in last and "My favourite colour is teal." in last and "Noted: teal." in last
        assert "No previous sessions found for this project." in log and log.count("how=new") == 2


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="gemini-cli 0.61.0 rolls a cancelled turn out of its history, the user's request with it, while "
    "VS Code keeps that request (unanswered) in the chat; lmbridge sends only the new turn to a session that "
    "continues, so the agent no longer knows what was asked before the Stop",
)
async def test_stopped_request_is_remembered_after_a_cancel_mid_stream(tmp_path: Path, workspace: Path) -> None:
    script = [[{"text": "Once upon a time "}, {"sleep": 15}, {"text": "never seen"}], [{"text": "A shorter one."}]]
    with FakeGemini(script) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                streaming = anyio.Event()
                call = await client.start(
                    "lm/provideLanguageModelChatResponse",
                    {"modelId": MODEL, "messages": chat.ask("Tell me a story about cats."), "options": options()},
                    on_part=lambda part: streaming.set() if "Once" in str(part.get("value")) else None,
                )
                await streaming.wait()
                await client.cancel(call)
                await call.done.wait()
                chat.stopped()
                await send(client, chat.ask("Make it shorter."))
        last = fake.main_requests()[-1]
    assert "Make it shorter." in "\n".join(texts(last, "user"))
    assert "Tell me a story about cats." in json.dumps(last["contents"])


async def test_vscode_tool_through_the_mcp_server(tmp_path: Path, workspace: Path) -> None:
    # A tool Agent mode offers (captured schema); gemini names MCP tools mcp_<server>_<tool>.
    found = "src/app.py:3: # TODO tidy this"
    script = [[{"call": {"name": "mcp_vscode_grep_search", "args": {"query": "TODO", "isRegexp": False}}}], [{"text": "Found one TODO."}]]
    with FakeGemini(script) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            seen: list[dict[str, Any]] = []
            with anyio.fail_after(TIMEOUT):
                call = await send(client, chat.ask("Find the TODOs."))
                while call.result == {"stopReason": "tool_calls"}:
                    chat.answered(call)
                    for part in tool_calls(call):
                        seen.append(part)
                        assert not is_agent_action(part), f"VS Code's own tool was put to the user twice: {part}"
                        chat.result(tool_result(part["callId"], found))
                    call = await send(client, chat.messages)
            # Agent mode's tools were offered to the model as gemini's MCP functions, lmbridge's own not.
            offered = function_declarations(fake.main_requests()[0])
            assert {"mcp_vscode_grep_search", "mcp_vscode_read_file", SHELL} <= set(offered)
            assert not [name for name in offered if "symposium" in name]
            assert [(p["name"], p["input"]) for p in seen] == [("grep_search", {"query": "TODO", "isRegexp": False})]
            assert call.result == {"stopReason": "end_turn"} and "Found one TODO." in text_of(call)
            (response,) = fake.function_responses()
            assert response["name"] == "mcp_vscode_grep_search"
            assert found in json.dumps(response["response"])


async def test_no_api_key_is_reported(tmp_path: Path, workspace: Path) -> None:
    """Not configured, gemini-cli refuses session/new (-32000 "Gemini API key is missing or
    not configured."): the user reads that, with the agent's name."""
    with FakeGemini() as fake:
        async with gemini_bridge(tmp_path, fake.url, api_key=None) as client:
            with anyio.fail_after(TIMEOUT):
                call = await client.chat(MODEL, Conversation(workspace).ask("Hello?"), timeout=TIMEOUT, options=options())
            assert call.error is not None
            assert "API key is missing" in str(call.error.message) + json.dumps(call.error.data), call.error
            assert not fake.main_requests()


@pytest.mark.parametrize("minute", ["same", "next"])
async def test_session_load_takes_a_session_up_only_from_a_recording_of_another_minute(tmp_path: Path, workspace: Path, minute: str) -> None:
    """Straight ACP, no daemon: a session ended by a process exit, then ``session/load`` by a
    new process of the same HOME.

    gemini-cli 0.61.0 names a session's chat recording by the minute it opens it
    (``chats/session-<YYYY-MM-DDTHH-MM>-<first 8 of the id>.jsonl``), and ``session/load``
    opens the recording again before it reads it. In the minute the session was opened, that
    is the same file, left with a new header and no turn: the load is refused (-32603 "No
    previous sessions found for this project."). In a later minute it is a new file (a
    header only, which gemini-cli skips as not resumable) and the old one is read: the load
    takes the session up and the next model request holds the first turn. lmbridge falls
    back to a fresh session told the conversation when the load is refused
    (docs/sessions.md). Which minute the load came in is read from the recordings gemini-cli
    left (``minute`` steers it: "same" starts early in a minute, "next" waits for the next
    minute before the load); a release that fixes the load fails the first branch."""
    if minute == "same":
        await _next_minute(within=30.0)
    with FakeGemini([[{"text": "Noted: teal."}]]) as fake:
        home = tmp_path / "home"
        env = gemini_environ(home, fake.url)
        with anyio.fail_after(TIMEOUT):
            async with AcpProbe.spawn(gemini_agent_command(), env=env, cwd=workspace) as probe:
                await probe.request("initialize", initialize_params())
                session = (await probe.request("session/new", {"cwd": str(workspace), "mcpServers": []}))["sessionId"]
                await probe.request("session/prompt", text_prompt(session, "My favourite colour is teal."))
        if minute == "next":
            await _next_minute()
        with anyio.fail_after(TIMEOUT):
            async with AcpProbe.spawn(gemini_agent_command(), env=env, cwd=workspace) as probe:
                await probe.request("initialize", initialize_params())
                try:
                    await probe.request("session/load", {"sessionId": session, "cwd": str(workspace), "mcpServers": []})
                except AgentError as exc:
                    refused: AgentError | None = exc
                else:
                    refused = None
                    await probe.request("session/prompt", text_prompt(session, "What is my favourite colour?"))
        recordings = sorted(home.glob(f".gemini/tmp/*/chats/session-*-{session[:8]}.jsonl"))
        assert len(recordings) in (1, 2), recordings
        if len(recordings) == 1:  # the load came in the session's own minute
            assert refused is not None and "No previous sessions found for this project." in str(refused), refused
        else:
            assert refused is None, refused
            assert "My favourite colour is teal." in "\n".join(texts(fake.main_requests()[-1], "user"))


PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="



def with_attachment_and_image(messages: list[dict[str, Any]], notes: Path | None, image: bool) -> list[dict[str, Any]]:
    """The current user message with ``notes`` attached the way Copilot renders it
    (``<attachments>`` before ``<userRequest>``) and a pasted image (a data part)."""
    turn = messages[-1]["content"]
    if notes is not None:
        attached = (
            f'<attachments>\n<attachment id="file:{notes.name}" filePath="{notes}">\n```markdown\n'
            f"// filepath: {notes}\n{notes.read_text(encoding='utf-8').strip()}\n```\n</attachment>\n</attachments>\n"
        )
        turn[0]["value"] = turn[0]["value"].replace("<userRequest>", attached + "<userRequest>", 1)
    if image:
        turn.insert(1, {"type": "data", "mimeType": "image/png", "data": PNG_1PX})
    return messages


async def pasted(tmp_path: Path, workspace: Path, *, attach: bool, image: bool) -> dict[str, Any]:
    """One Copilot-shaped turn with an attachment and/or an image; the model's request."""
    notes = workspace / "notes.md"
    notes.write_text("# Notes\n- buy oat milk 5521\n", encoding="utf-8")
    with FakeGemini([[{"text": "Seen."}]]) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            messages = with_attachment_and_image(Conversation(workspace).ask("What do you see?"), notes if attach else None, image)
            with anyio.fail_after(TIMEOUT):
                call = await send(client, messages)
            assert call.result == {"stopReason": "end_turn"} and "Seen." in text_of(call)
            (body,) = fake.main_requests()
    sent = "\n".join(texts(body, "user"))
    assert "What do you see?" in sent and "<attachments>" not in sent and "<userRequest>" not in sent
    return body


def user_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for c in body["contents"] if c["role"] == "user" for p in c["parts"]]


IMAGE_PART = {"inlineData": {"mimeType": "image/png", "data": PNG_1PX}}


async def test_pasted_image_reaches_the_model(tmp_path: Path, workspace: Path) -> None:
    """promptCapabilities.image: the image goes as an ACP image block, gemini sends inlineData."""
    body = await pasted(tmp_path, workspace, attach=False, image=True)
    assert IMAGE_PART in user_parts(body)


async def test_attached_file_reaches_the_model(tmp_path: Path, workspace: Path) -> None:
    """promptCapabilities.embeddedContext: the attachment goes as a resource with its text."""
    body = await pasted(tmp_path, workspace, attach=True, image=False)
    assert "buy oat milk 5521" in "\n".join(texts(body, "user"))


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="gemini-cli 0.61.0 drops a prompt's image and audio blocks when the prompt also holds a resource "
    "or a file resource_link: its #resolvePrompt rebuilds the prompt from the text parts and the resources' contents",
)
async def test_image_with_an_attached_file_reaches_the_model(tmp_path: Path, workspace: Path) -> None:
    body = await pasted(tmp_path, workspace, attach=True, image=True)
    assert "buy oat milk 5521" in "\n".join(texts(body, "user"))
    assert IMAGE_PART in user_parts(body)


GREP = {"call": {"name": "mcp_vscode_grep_search", "args": {"query": "TODO", "isRegexp": False}}}


async def test_vscode_tool_skipped(tmp_path: Path, workspace: Path) -> None:
    """Skip at VS Code's own confirmation: the MCP call gets an error result, the model hears it."""
    with FakeGemini([[GREP], [{"text": "Skipped then."}]]) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                call = await send(client, chat.ask("Find the TODOs."))
                assert call.result == {"stopReason": "tool_calls"}, call.parts
                (part,) = tool_calls(call)
                assert part["name"] == "grep_search" and not is_agent_action(part)
                chat.answered(call)
                call = await send(client, chat.result(skip(part)))
            assert call.result == {"stopReason": "end_turn"} and "Skipped then." in text_of(call)
            (response,) = fake.function_responses()
            assert response["name"] == "mcp_vscode_grep_search"
            assert "declined" in json.dumps(response["response"])


async def test_vscode_tool_stopped_then_the_next_message(tmp_path: Path, workspace: Path) -> None:
    """Stop while VS Code runs its tool: the MCP call gets an error, the turn is cancelled,
    and the next message is answered (gemini keeps that call unanswered too: recovered)."""
    with FakeGemini([[GREP]], done_text="OK, stopped.") as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                call = await send(client, chat.ask("Find the TODOs."))
                assert call.result == {"stopReason": "tool_calls"} and tool_calls(call)
                chat.answered(call)
                chat.stopped()
                started = time.monotonic()
                call = await send(client, chat.ask("Stop that, just say OK."))
                elapsed = time.monotonic() - started
            assert call.result == {"stopReason": "end_turn"} and "OK, stopped." in text_of(call)
            assert elapsed < 60, f"took {elapsed:.1f} s"  # ~2-5 s idle
            assert "cancelled turn did not end" not in (tmp_path / "daemon.stderr").read_text(errors="replace")  # promptly: the stopped turn ended, no drain deadline (10 s) waited
            assert "Stop that, just say OK." in "\n".join(texts(fake.main_requests()[-1], "user"))
            # Whatever reached the model for the call was an error, never a result.
            assert all("error" in json.dumps(r["response"]).lower() for r in fake.function_responses())


async def test_a_chat_that_takes_the_spare_session_sees_its_vscode_tools(tmp_path: Path, workspace: Path) -> None:
    """The spare session (on by default) is opened with the VS Code tools the previous new
    chat offered, served from the start (gemini-cli lists an MCP server's tools once, at
    session start): a chat offering the same tools (Agent mode offers every chat the same)
    takes it, and its model is offered them and its call reaches VS Code. A chat offering
    other tools does not take the spare (it is closed): it gets a fresh session whose model
    is offered its own tools."""
    found = "src/app.py:3: # TODO tidy this"

    def vscode(body: dict[str, Any]) -> list[str]:
        return [n for n in function_declarations(body) if n.startswith("mcp_vscode_")]

    def grep_if_offered(body: dict[str, Any]) -> list[dict[str, Any]]:
        if "mcp_vscode_grep_search" not in vscode(body):
            return [{"text": f"NO TOOLS: {vscode(body)}"}]
        return [{"call": {"name": "mcp_vscode_grep_search", "args": {"query": "TODO", "isRegexp": False}}}]

    def say_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"text": f"TOOLS: grep={'mcp_vscode_grep_search' in vscode(body)} n={len(vscode(body))}"}]

    script = [[{"text": "Hi."}], grep_if_offered, [{"text": "Found one TODO."}], say_tools]
    no_grep = options()
    no_grep["tools"] = [t for t in no_grep["tools"] if t["name"] != "grep_search"]
    with FakeGemini(script) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:
            log = tmp_path / "daemon.stderr"
            with anyio.fail_after(TIMEOUT):
                first = await send(client, Conversation(workspace).ask("Hello."))
                assert first.error is None and "Hi." in text_of(first), (first.error, text_of(first))
                while log.read_text(errors="replace").count("spare session ready") < 1:
                    await anyio.sleep(0.1)
                chat = Conversation(workspace)
                call = await send(client, chat.ask("Find the TODOs."))
                while call.result == {"stopReason": "tool_calls"}:
                    chat.answered(call)
                    for part in tool_calls(call):
                        chat.result(tool_result(part["callId"], found))
                    call = await send(client, chat.messages)
                assert call.result == {"stopReason": "end_turn"} and "Found one TODO." in text_of(call), (call.error, text_of(call))
                assert log.read_text(errors="replace").count("how=spare") == 1  # the second chat took the spare
                while log.read_text(errors="replace").count("spare session ready") < 2:
                    await anyio.sleep(0.1)
                other = await client.chat(MODEL, Conversation(workspace).ask("Which tools?"), timeout=TIMEOUT, options=no_grep)
                assert other.error is None, other.error
            offered = len(vscode(fake.main_requests()[1]))
            assert offered > 1 and f"TOOLS: grep=False n={offered - 1}" in text_of(other), (offered, text_of(other))
    text = log.read_text(errors="replace")
    assert text.count("how=spare") == 1 and "spare session not taken: other tools" in text
