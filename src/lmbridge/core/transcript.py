"""VS Code messages → ACP prompt content blocks (no I/O).

A turn's ``prompt`` messages become the content of one ``session/prompt``;
its ``context`` (messages the agent has not seen that come before them, the
whole conversation for a fresh session: docs/architecture.md, "Divergence") becomes one
leading text block that tells the agent what was said, so the agent's view
equals VS Code's without re-sending anything it has seen.

Blocks are plain dicts in ACP's ``ContentBlock`` shape (schema v1).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath as Path
from typing import Any

from lmbridge.core import notices, permissions, session_state
from lmbridge.core.history import Decision, conversation, has_user_content
from lmbridge.core.messages import DataPart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from lmbridge.core.permissions import ACTION_TOOLS
from lmbridge.core.user_message import Attachment, UserInput, parse_user_message

Block = dict[str, Any]

CONTEXT_OPEN = (
    "<conversation-so-far>\n"
    "This conversation started before this session. Earlier turns, oldest first; "
    "answer the request that follows it.\n"
)
CONTEXT_CLOSE = "</conversation-so-far>"


def _data_size(part: DataPart) -> int:
    try:
        return len(base64.b64decode(part.data, validate=False))
    except (binascii.Error, ValueError):
        return 0


def _result_text(part: ToolResultPart) -> str:
    out = []
    for c in part.content:
        if isinstance(c, TextPart):
            out.append(c.value)
        elif not c.internal:  # Copilot's markers are nothing the tool returned
            out.append(f"[{c.mimeType}, {_data_size(c)} bytes]")
    return "\n".join(out)


Actions = dict[str, tuple[str, str]]  # callId -> (title, approvalToken) of our permission tool calls


def agent_actions(messages: Sequence[Message]) -> Actions:
    """The ``symposium-agent-action`` calls in ``messages``: how to read their results."""
    out: Actions = {}
    for m in messages:
        for p in m.content:
            if isinstance(p, ToolCallPart) and p.name in ACTION_TOOLS:
                out[p.callId] = (str(p.input.get("title", "")), str(p.input.get("approvalToken", "")))
    return out


def user_words(message: Message, verbatim: bool = False) -> UserInput | None:
    """The user's words in a user message's text parts (``user_message``), or None when
    it has no text. ``verbatim``: Copilot's markup is kept (the ``userTurns`` setting)."""
    text = "".join(p.value for p in message.content if isinstance(p, TextPart))
    if message.role != "user" or not text:
        return None
    return UserInput(text) if verbatim else parse_user_message(text)


def message_text(message: Message, actions: Actions | None = None, verbatim: bool = False) -> str:
    """A message as readable text, for the context block.

    ``actions``: our permission tool calls (``agent_actions``); their results are
    told as the user's answer, never as the approval token itself. A user message is
    the user's words (``user_words``) and the names of what they attached. An assistant
    message is told without the agent's notices shown in it (``notices.strip``): they were
    never the agent's words.
    """
    lines: list[str] = []
    words = user_words(message, verbatim)
    if words is not None and words.request:
        lines.append(words.request)
        lines += [f"[attached: {a.path}{_line_range(a)}]" for a in words.attachments if a.path]
    for p in message.content:
        if isinstance(p, TextPart):
            if words is None:
                lines.append(notices.strip(p.value) if message.role == "assistant" else p.value)
        elif isinstance(p, ThinkingPart):
            continue  # the agent's own reasoning is not replayed
        elif isinstance(p, ToolCallPart):
            if p.name in ACTION_TOOLS:
                lines.append(f"[asked permission: {p.input.get('title', '')}]")
            else:
                lines.append(f"[called tool {p.name} with {json.dumps(p.input, ensure_ascii=False)}]")
        elif isinstance(p, ToolResultPart) and actions is not None and p.callId in actions:
            # An approval token means nothing to a new session; say what it was.
            title, token = actions[p.callId]
            text = p.text()
            allowed = permissions.answer(token, p) is permissions.Answer.ALLOW
            answer = "allowed" if allowed else f"declined ({text})" if text else "declined"
            lines.append(f"[permission {title!r}: {answer} by the user]")
        elif isinstance(p, ToolResultPart):
            text = _result_text(p)
            lines.append(f"[tool result {p.callId}]\n{text}" if text else f"[tool result {p.callId}: empty]")
        elif isinstance(p, DataPart) and not p.internal:
            # Copilot's markers (cache_control beside every current turn and tool result)
            # are nothing the user attached: a fresh session is not told of them.
            lines.append(f"[attachment: {p.mimeType}, {_data_size(p)} bytes]")
    return "\n".join(lines)


STOPPED_NOTE = "[stopped by the user before it was answered]"


def _from_user(message: Message) -> bool:
    return has_user_content((message,))


def _line_range(a: Attachment) -> str:
    return f", lines {a.lines[0]}-{a.lines[1]}" if a.lines else ""


def attachment_block(a: Attachment, embedded_context: bool) -> Block | None:
    """An attachment as ACP content: a ``resource`` (EmbeddedResource with its text) when
    the agent's ``promptCapabilities.embeddedContext`` allows and the text came along,
    else a ``resource_link``. None for an attachment with no path."""
    if not a.path:
        return None
    uri = a.path if "://" in a.path else Path(a.path).as_uri() if a.path.startswith("/") else f"file:{a.path}"
    if embedded_context and a.text is not None:
        return {"type": "resource", "resource": {"uri": uri + (f"#L{a.lines[0]}-{a.lines[1]}" if a.lines else ""), "text": a.text, "mimeType": "text/plain"}}
    return {"type": "resource_link", "uri": uri, "name": Path(a.path).name or a.path}


def context_block(context: Sequence[Message], verbatim: bool = False) -> Block | None:
    """One text block holding the earlier conversation, or None when there is none.

    A user message followed by another user message (or by the prompt) with no answer
    between them was stopped by the user: it is marked so (``STOPPED_NOTE``), so
    the agent does not take it up again."""
    if not context:
        return None
    actions = agent_actions(context)
    turns = []
    for i, m in enumerate(context):
        text = message_text(m, actions, verbatim)
        if not text.strip():
            continue  # Copilot's global context message: nothing anyone said
        following = context[i + 1 :]
        nxt = next((n for n in following if n.role == "assistant" or _from_user(n)), None)
        if _from_user(m) and (nxt is None or nxt.role == "user"):
            text += f"\n{STOPPED_NOTE}"
        turns.append(f"## {m.role}\n{text}")
    if not turns:
        return None
    return {"type": "text", "text": CONTEXT_OPEN + "\n\n".join(turns) + "\n" + CONTEXT_CLOSE}


def prompt_blocks(
    context: Sequence[Message], prompt: Sequence[Message], *, images: bool, embedded_context: bool = False, verbatim: bool = False
) -> list[Block]:
    """The ``session/prompt`` content for a turn (ACP ``ContentBlock``s, schema v1).

    A Copilot-rendered user message gives the user's words as a text block and each
    attachment as a ``resource`` block (``embedded_context``: the agent's
    ``promptCapabilities.embeddedContext``) or a ``resource_link``; the rest of
    Copilot's scaffolding is dropped (docs/vscode.md), unless ``verbatim``.
    ``images``: whether the agent's ``promptCapabilities.image`` allows image
    blocks; otherwise an image becomes a short text note. Data parts that are
    not images (Copilot's ``cache_control``/``stateful_marker``, JSON) are
    left out. Always returns at least one block.
    """
    blocks: list[Block] = []
    actions = agent_actions([*context, *prompt])
    head = context_block(context, verbatim)
    if head is not None:
        blocks.append(head)
    for m in prompt:
        words = user_words(m, verbatim)
        if words is not None and words.rendered:
            if words.request:
                blocks.append({"type": "text", "text": words.request})
            blocks += [b for b in (attachment_block(a, embedded_context) for a in words.attachments) if b is not None]
        for p in m.content:
            if isinstance(p, TextPart) and p.value:
                if words is None or not words.rendered:
                    blocks.append({"type": "text", "text": p.value})
            elif isinstance(p, DataPart) and p.mimeType.startswith("image/"):
                if images:
                    blocks.append({"type": "image", "mimeType": p.mimeType, "data": p.data})
                else:
                    blocks.append({"type": "text", "text": f"[image omitted: {p.mimeType}, {_data_size(p)} bytes]"})
            elif isinstance(p, ToolResultPart):
                blocks.append({"type": "text", "text": message_text(Message(role="user", content=[p]), actions)})
    return blocks or [{"type": "text", "text": ""}]


def whole_conversation(
    history: Sequence[Message], prompt: tuple[Message, ...], answered: Iterable[str] = ()
) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """``(context, prompt)`` for a fresh ACP session (docs/architecture.md, "Divergence"):
    everything of ``history`` (VS Code's messages, the request's whole conversation) before
    ``prompt`` as context, system messages and empty assistant messages left out
    (``history.conversation``), and the results of the permissions just ``answered``
    (their callIds: ``Decision.answers``) too: they answer the agent, they are not context.
    ``prompt`` is the conversation's tail, save what the history core put before it (what a
    woken session is told about its interrupted turn): only the part of ``history`` that
    equals the prompt's tail is left out of the context. ``prompt`` is returned as given."""
    left_out = set(answered)
    conv: list[Message] = []
    for m in conversation(history):
        content = [p for p in m.content if not (isinstance(p, ToolResultPart) and p.callId in left_out)]
        if content:
            conv.append(m if len(content) == len(m.content) else m.model_copy(update={"content": content}))
    tail = 0
    while tail < min(len(conv), len(prompt)) and conv[-1 - tail] == prompt[-1 - tail]:
        tail += 1
    return tuple(conv[: len(conv) - tail]), prompt


def turn_blocks(
    decision: Decision,
    history: Sequence[Message],
    *,
    whole: bool,
    unsent: Sequence[Message] = (),
    images: bool,
    embedded_context: bool = False,
    verbatim: bool = False,
    commands: tuple[session_state.Command, ...] = (),
) -> list[Block]:
    """The content of one ``session/prompt`` (``turn.Prompt``) for a request the history actor
    classified as ``decision``, ``history`` its messages: the decision's context and prompt,
    or with ``whole`` the whole conversation (``whole_conversation``: the ACP session has seen
    nothing of the chat), after the ``unsent`` messages of requests stopped before the agent
    saw them; as ``prompt_blocks`` makes them (``images``, ``embedded_context``: the agent's
    prompt capabilities; ``verbatim``); then a ``//<command>`` escape undone for one of the
    session's ``commands`` (``session_state.agent_command``; docs/sessions.md)."""
    if whole:
        context, prompt = whole_conversation(history, decision.prompt, decision.answers)
    else:
        context, prompt = decision.context, decision.prompt
    blocks = prompt_blocks(tuple(unsent) + tuple(context), prompt, images=images, embedded_context=embedded_context, verbatim=verbatim)
    return session_state.agent_command(blocks, commands)
