"""The real gemini-cli 0.61.0 reading and writing files through lmbridge (``fs/*``): through a
shim (the dev client answering ``client/readTextFile``/``client/writeTextFile`` the way the VS
Code extension does, with an "editor" holding unsaved text), and from disk without one.

What gemini-cli 0.61.0 sends through the client (read in its bundle, seen here): ``write_file``
reads the file's current text (for the diff on its permission card) and writes the new text;
``replace`` reads the text it edits and writes the result. Its ``read_file`` tool reads the disk
itself, whatever the client offers (docs/agents.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lmbridge.core.permissions import EDIT_TOOL  # noqa: E402
from lmbridge.devtools.client import DaemonClient, SentRequest, approve, skip, tool_calls  # noqa: E402
from tests.fakes.fake_gemini import FakeGemini  # noqa: E402
from tests.real_agent.copilot import Conversation, options  # noqa: E402
from tests.real_agent.gemini import gemini_bridge, is_installed  # noqa: E402

pytestmark = [
    pytest.mark.real_agent,
    pytest.mark.anyio,
    pytest.mark.skipif(not is_installed(), reason="gemini-cli is not installed: make real-agent-deps"),
]
TIMEOUT = 300  # seconds per test body: ≥10x idle (the agent's start and two turns, ~10 s idle)
MODEL = "gemini"


async def send(client: DaemonClient, messages: list[dict[str, Any]]) -> SentRequest:
    call = await client.chat(MODEL, messages, timeout=TIMEOUT, options=options())
    assert call.error is None, call.error
    return call


class Editor:
    """The VS Code side as vscode-shim/src/chat/files.ts serves it: open documents with their
    (unsaved) text; a write applies to the document and saves it."""

    def __init__(self) -> None:
        self.documents: dict[str, str] = {}  # path → the editor's text
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def serve(self, method: str, params: Any) -> Any:
        self.asked.append((method, params))
        path = params["path"]
        if method == "client/readTextFile":
            text = self.documents.get(path)
            if text is None:
                text = Path(path).read_text()
            return {"content": text}
        if method == "client/writeTextFile":
            self.documents[path] = params["content"]
            Path(path).write_text(params["content"])  # applied and saved
            return {}
        raise AssertionError(method)


async def edit_card(client: DaemonClient, chat: Conversation, request: str) -> dict[str, Any]:
    call = await send(client, chat.ask(request))
    assert call.result == {"stopReason": "tool_calls"}, (call.result, call.parts)
    (card,) = tool_calls(call)
    assert card["name"] == EDIT_TOOL, card
    chat.answered(call)
    return card


async def test_write_file_through_the_editor_after_the_user_approved(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    target = workspace / "notes.txt"
    target.write_text("saved text\n")
    editor = Editor()
    editor.documents[str(target)] = "unsaved text in the editor\n"
    write = {"call": {"name": "write_file", "args": {"file_path": str(target), "content": "written by gemini\n"}}}
    with FakeGemini([[{"text": "Writing."}, write], [{"text": "Wrote it."}]]) as fake:
        async with gemini_bridge(tmp_path, fake.url, capabilities={"fs": True}) as client:
            client.on_request = editor.serve
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                card = await edit_card(client, chat, "Please write my notes")
                # gemini read the editor's text for its diff, through the client: nothing written yet.
                assert editor.asked == [("client/readTextFile", {"path": str(target)})]
                assert "unsaved text in the editor" in card["input"]["message"]
                call = await send(client, chat.result(approve(card)))
            assert call.result == {"stopReason": "end_turn"}
    # It reads the text again just before it writes (to see whether it changed meanwhile).
    assert [m for m, _ in editor.asked] == ["client/readTextFile", "client/readTextFile", "client/writeTextFile"]
    assert editor.asked[-1][1] == {"path": str(target), "content": "written by gemini\n"}
    assert target.read_text() == "written by gemini\n"
    (response,) = fake.function_responses()
    assert response["name"] == "write_file" and "error" not in json.dumps(response["response"]).lower()


async def test_replace_edits_the_editors_unsaved_text(tmp_path: Path) -> None:
    """gemini's ``replace`` reads the text it edits through the client: the editor's, unsaved
    changes included; the old string exists only there."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    target = workspace / "app.py"
    target.write_text("x = 1\n")
    editor = Editor()
    editor.documents[str(target)] = "x = 1\ny = 2  # unsaved\n"
    edit = {"call": {"name": "replace", "args": {"file_path": str(target), "instruction": "set y to 3", "old_string": "y = 2  # unsaved", "new_string": "y = 3"}}}
    with FakeGemini([[edit], [{"text": "Edited."}]]) as fake:
        async with gemini_bridge(tmp_path, fake.url, capabilities={"fs": True}) as client:
            client.on_request = editor.serve
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                card = await edit_card(client, chat, "Set y to 3")
                call = await send(client, chat.result(approve(card)))
            assert call.result == {"stopReason": "end_turn"}
    assert editor.documents[str(target)] == "x = 1\ny = 3\n"
    assert target.read_text() == "x = 1\ny = 3\n"
    assert ("client/writeTextFile", {"path": str(target), "content": "x = 1\ny = 3\n"}) in editor.asked


async def test_skip_writes_nothing_and_without_a_shim_the_disk_is_used(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    target = workspace / "notes.txt"
    target.write_text("old\n")
    writes = [
        [{"call": {"name": "write_file", "args": {"file_path": str(target), "content": "skipped\n"}}}],
        [{"text": "Not written."}],
        [{"call": {"name": "write_file", "args": {"file_path": str(target), "content": "approved\n"}}}],
        [{"text": "Written."}],
    ]
    with FakeGemini(writes) as fake:
        async with gemini_bridge(tmp_path, fake.url) as client:  # no clientCapabilities: from disk
            chat = Conversation(workspace)
            with anyio.fail_after(TIMEOUT):
                card = await edit_card(client, chat, "Write it")
                call = await send(client, chat.result(skip(card)))
                chat.answered(call)
                assert target.read_text() == "old\n"
                card = await edit_card(client, chat, "Now write it, please")
                call = await send(client, chat.result(approve(card)))
            assert call.result == {"stopReason": "end_turn"}
    assert target.read_text() == "approved\n"
    assert client.requests == []  # nothing asked of a client that offers nothing
