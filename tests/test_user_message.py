"""``user_message``: the user's words in Copilot-rendered user messages (docs/vscode.md).

Table-tested on real turns captured from VS Code 1.139.1's Chat view (Copilot Chat
0.67.0, Agent mode; tests/fixtures/copilot/*.json, each an
``lm/provideLanguageModelChatResponse``'s params as the daemon received them), on hand
cases, and with hypothesis: the user's words always survive, a turn with no markup is
unchanged, nothing raises.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core.messages import Message
from lmbridge.core.transcript import prompt_blocks
from lmbridge.core.user_message import Attachment, UserInput, parse_user_message

FIXTURES = Path(__file__).parent / "fixtures" / "copilot"

SCAFFOLD = """<environment_info>
The user's current OS is: Linux
</environment_info>
<workspace_info>
I am working in a workspace with the following folders:
- /home/u/ws
</workspace_info>
<userMemory>
No user preferences or notes saved yet.
</userMemory>
<context>
The current date is November 24, 2026.
</context>
<reminderInstructions>
When using the insert_edit_into_file tool, avoid repeating existing code, instead use a line comment with \\`...existing code...\\` to represent regions of unchanged code.
</reminderInstructions>
"""

ATTACHED = """<attachments>
<attachment id="file:notes.md" filePath="/home/u/ws/notes.md">
```markdown
// filepath: /home/u/ws/notes.md
# Notes
- buy milk
```
</attachment>
<attachment id="file:app.py:3-4" filePath="/home/u/ws/app.py">
```python
def main():
    return 1
```
</attachment>
</attachments>
"""

CASES: list[tuple[str, str, UserInput]] = [
    ("plain text", "Please write a file with my notes.", UserInput("Please write a file with my notes.")),
    ("agent mode", SCAFFOLD + "<userRequest>\nPlease write a file with my notes.\n</userRequest>", UserInput("Please write a file with my notes.", rendered=True)),
    ("user_query tag", SCAFFOLD + "<user_query>\nhi\n</user_query>", UserInput("hi", rendered=True)),
    (
        "attachments",
        SCAFFOLD + ATTACHED + "<userRequest>\nsummarise these\n</userRequest>",
        UserInput("summarise these", (
            Attachment("/home/u/ws/notes.md", "# Notes\n- buy milk", None, "file:notes.md"),
            Attachment("/home/u/ws/app.py", "def main():\n    return 1", (3, 4), "file:app.py:3-4"),
        ), rendered=True),
    ),
    ("the user types the tag", SCAFFOLD + "<userRequest>\nwhat does <userRequest>x</userRequest> mean?\n</userRequest>",
     UserInput("what does <userRequest>x</userRequest> mean?", rendered=True)),
    ("the user types html", "<b>bold</b> and <i>", UserInput("<b>bold</b> and <i>")),
    ("never closed", SCAFFOLD + "<userRequest>\ncut off", UserInput(SCAFFOLD + "<userRequest>\ncut off")),
    ("request text first, then the element", "fix it\n<reminder>\nbe brief\n</reminder>\n<user_query>\nfix it\n</user_query>", UserInput("fix it", rendered=True)),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_table(text: str, expected: UserInput) -> None:
    assert parse_user_message(text) == expected


def _captured() -> list[Path]:
    return sorted(FIXTURES.glob("*.json"))


@pytest.mark.parametrize("path", _captured(), ids=[p.stem for p in _captured()])
def test_captured_copilot_turns(path: Path) -> None:
    """Every captured request: its last user message gives exactly what the user typed
    (``expect`` in the fixture), and nothing of Copilot's scaffolding reaches the agent."""
    fixture = json.loads(path.read_text(encoding="utf-8"))
    messages = [Message.model_validate(m) for m in fixture["params"]["messages"]]
    last = [m for m in messages if m.role == "user" and any(p.type == "text" for p in m.content)][-1]
    blocks = prompt_blocks((), (last,), images=False, embedded_context=True)
    texts = [b["text"] for b in blocks if b["type"] == "text"]
    assert texts == [fixture["expect"]["request"]]
    assert [b["resource"]["uri"] for b in blocks if b["type"] == "resource"] == fixture["expect"].get("resources", [])
    for tag in ("<environment_info>", "<workspace_info>", "<reminderInstructions>", "<context>", "<userRequest>"):
        assert tag not in json.dumps(blocks)


def test_blocks_resource_or_link_by_capability() -> None:
    msg = Message.model_validate({"role": "user", "content": [{"type": "text", "value": SCAFFOLD + ATTACHED + "<userRequest>\nsummarise\n</userRequest>"}]})
    embedded = prompt_blocks((), (msg,), images=False, embedded_context=True)
    assert embedded[0] == {"type": "text", "text": "summarise"}
    assert embedded[1] == {"type": "resource", "resource": {"uri": "file:///home/u/ws/notes.md", "text": "# Notes\n- buy milk", "mimeType": "text/plain"}}
    assert embedded[2]["resource"]["uri"] == "file:///home/u/ws/app.py#L3-4"
    links = prompt_blocks((), (msg,), images=False, embedded_context=False)
    assert links[1:] == [
        {"type": "resource_link", "uri": "file:///home/u/ws/notes.md", "name": "notes.md"},
        {"type": "resource_link", "uri": "file:///home/u/ws/app.py", "name": "app.py"},
    ]
    verbatim = prompt_blocks((), (msg,), images=False, verbatim=True)
    assert verbatim == [{"type": "text", "text": msg.content[0].value}]  # type: ignore[union-attr]


def test_context_holds_the_users_words_not_the_scaffolding() -> None:
    turn = Message.model_validate({"role": "user", "content": [{"type": "text", "value": SCAFFOLD + ATTACHED + "<userRequest>\nfirst question\n</userRequest>"}]})
    answer = Message.model_validate({"role": "assistant", "content": [{"type": "text", "value": "first answer"}]})
    now = Message.model_validate({"role": "user", "content": [{"type": "text", "value": "second"}]})
    context = prompt_blocks((turn, answer), (now,), images=False)[0]["text"]
    assert "first question\n[attached: /home/u/ws/notes.md]\n[attached: /home/u/ws/app.py, lines 3-4]" in context
    assert "environment_info" not in context and "insert_edit_into_file" not in context


_words = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1).filter(lambda s: s.strip("\n") == s)


@given(words=_words, scaffold=st.sampled_from(["", SCAFFOLD, SCAFFOLD + ATTACHED]))
def test_the_users_words_always_survive(words: str, scaffold: str) -> None:
    turn = parse_user_message(f"{scaffold}<userRequest>\n{words}\n</userRequest>")
    assert turn.request == words


@given(st.text())
def test_never_raises_and_no_markup_is_verbatim(text: Any) -> None:
    turn = parse_user_message(text)
    assert turn.rendered or turn.request == text
    if "<" not in text:
        assert turn == UserInput(text)


def test_copilots_global_context_message_is_no_turn() -> None:
    """Agent mode sends its global context as a user message of its own before the first
    turn (seen in the real Chat view): it is neither the request nor a stopped turn."""
    from lmbridge.core.history import split_prompt

    glob = Message.model_validate({"role": "user", "content": [{"type": "text", "value": SCAFFOLD}]})
    turn = Message.model_validate({"role": "user", "content": [{"type": "text", "value": "<context>\nnow\n</context>\n<userRequest>\nhello there\n</userRequest>"}]})
    assert parse_user_message(SCAFFOLD) == UserInput("", rendered=True)
    context, prompt = split_prompt([glob, turn])
    assert prompt == (turn,)
    assert prompt_blocks(context, prompt, images=False) == [{"type": "text", "text": "hello there"}]
