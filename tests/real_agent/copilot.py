"""Copilot-shaped requests for the real-agent tests: what the real Chat view sends.

Built from a request captured in VS Code 1.139.1's Chat view (Copilot Chat 0.67.0, Agent
mode: ``tests/fixtures/copilot/agent-first-turn.json``), so each agent is driven with what
the shim forwards from the real panel, not a tidy version of it (docs/vscode.md):

- a **system** message, Copilot's own prompt (15 KB), with a ``cache_control`` data part;
- a user message holding only Copilot's **global context** (``<environment_info>``,
  ``<workspace_info>``, memories): no turn of the user's;
- each user message wrapped in Copilot's scaffolding (``<context>`` with the date,
  ``<reminderInstructions>``, then ``<userRequest>``), the current one ending with a
  ``cache_control`` data part; earlier turns replayed with less scaffolding;
- tool results as one user message each, with a ``cache_control`` part beside the result;
- ``options.tools``: the 40-odd tools Agent mode offers (Copilot's own and the three
  ``symposium-agent-action*`` tools), with their real schemas.

``Conversation`` keeps one chat's history the way VS Code does: ``ask`` a turn, ``answered``
the response, ``result`` a tool result (``approve``/``skip`` of lmbridge.devtools.client), ``stopped``
for Stop (the round dropped, the user message kept).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from lmbridge.devtools.client import SentRequest, assistant

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "copilot" / "agent-first-turn.json"
CAPTURED_WORKSPACE = "/tmp/cv/r1/workspace"
CACHE_CONTROL = {"type": "data", "mimeType": "cache_control", "data": base64.b64encode(b"ephemeral").decode()}


@cache
def _captured() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))["params"]


def system_message() -> dict[str, Any]:
    """Copilot's system message as captured, with its ``cache_control`` part."""
    message = copy.deepcopy(_captured()["messages"][0])
    assert message["role"] == "system"
    message["content"].append(dict(CACHE_CONTROL))
    return message


def global_context(workspace: Path) -> dict[str, Any]:
    """The user message of Copilot's global context, naming ``workspace``."""
    message = copy.deepcopy(_captured()["messages"][1])
    for part in message["content"]:
        part["value"] = part["value"].replace(CAPTURED_WORKSPACE, str(workspace))
    return message


def _reminders() -> str:
    text = _captured()["messages"][-1]["content"][0]["value"]
    start = text.index("<reminderInstructions>")
    return text[start : text.index("</reminderInstructions>") + len("</reminderInstructions>")]


def user_message(text: str, *, current: bool = True, date: str = "2026-11-25") -> dict[str, Any]:
    """A user message as Copilot renders it: the current turn in full scaffolding with a
    ``cache_control`` part, an earlier one with the date and the request only."""
    body = f"<context>\nThe current date is {date}.\n</context>\n"
    if current:
        body += _reminders() + "\n"
    body += f"<userRequest>\n{text}\n</userRequest>\n"
    content: list[dict[str, Any]] = [{"type": "text", "value": body}]
    if current:
        content.append(dict(CACHE_CONTROL))
    return {"role": "user", "content": content}


def options(extra_tools: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """``options`` as Agent mode sends them: its captured tools (each with its schema),
    plus ``extra_tools`` (VS Code tools a test answers itself)."""
    captured = copy.deepcopy(_captured()["options"])
    names = {t["name"] for t in extra_tools}
    captured["tools"] = [t for t in captured["tools"] if t["name"] not in names] + [dict(t) for t in extra_tools]
    return captured


class Conversation:
    """One chat's history as VS Code keeps and re-sends it (docs/vscode.md)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._turns: list[dict[str, Any]] = []  # user messages, responses and tool results, in order
        self._texts: list[str | None] = []  # the user's words of each entry of _turns (None: not a turn)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's ``messages``: system, global context, then the turns, the last
        user message rendered as current."""
        last_turn = max((i for i, t in enumerate(self._texts) if t is not None), default=-1)
        out = [system_message(), global_context(self.workspace)]
        for index, (message, text) in enumerate(zip(self._turns, self._texts, strict=True)):
            out.append(user_message(text, current=index == last_turn) if text is not None else copy.deepcopy(message))
        return out

    def ask(self, text: str) -> list[dict[str, Any]]:
        """A new user message; returns the messages to send."""
        self._turns.append({})
        self._texts.append(text)
        return self.messages

    def answered(self, call: SentRequest) -> None:
        """The response to the last request, as VS Code replays it (text and tool calls)."""
        self._turns.append(assistant(call.parts))
        self._texts.append(None)

    def result(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        """A tool result message (lmbridge.devtools.client ``approve``/``skip``/``tool_result``), with
        Copilot's ``cache_control`` part beside the result; returns the messages to send."""
        with_marker = copy.deepcopy(dict(message))
        with_marker["content"] = [*with_marker["content"], dict(CACHE_CONTROL)]
        self._turns.append(with_marker)
        self._texts.append(None)
        return self.messages

    def stopped(self) -> None:
        """The user pressed Stop during the last user message's answer: what answered it (its
        responses and tool results) is dropped from the history, the user message stays,
        unanswered (lmbridge.devtools.client.without_last_round)."""
        last_turn = max(i for i, t in enumerate(self._texts) if t is not None)
        del self._turns[last_turn + 1 :], self._texts[last_turn + 1 :]
