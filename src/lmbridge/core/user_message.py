"""The user's words in a Copilot-rendered user message (docs/vscode.md). Pure: no I/O.

Rules of this module:

* It reads one user message's text and returns what the user wrote and what
  they attached; everything else Copilot put around it is dropped.
* When in doubt it returns the text as it is: the user's words are never lost.
  A message with no Copilot markup goes as it is.
* ``words`` is the one thing of a user message the history core matches sessions on:
  the user's words alone, the same however Copilot rendered the message (current or
  replayed). It need not be faithful, only deterministic; it is never shown or sent.

Theory of operation
-------------------
In Agent mode Copilot Chat wraps the current user message in its own scaffolding
(docs/vscode.md, "Copilot's scaffolding around the user's words"; VS Code 1.139.1 / Copilot Chat 0.67.0, ``AgentUserMessage`` in
``extensions/copilot/dist/extension.js``): a sequence of top-level elements
such as ``<environment_info>``, ``<workspace_info>``, ``<userMemory>``,
``<sessionMemory>``, ``<repoMemory>``, ``<context>``, ``<reminderInstructions>``,
``<attachments>`` (the files and selections the user attached, each an
``<attachment id=… filePath=…>`` holding a fenced copy of the text), and last
the user's words in ``<userRequest>`` (``<user_query>`` for some models). Some
renderings put the request's plain text first as well. Earlier turns are
replayed with less of it.

So the text is read as a sequence of top-level elements and text runs. The
request element is the *last* one: it runs to the last closing tag of its name,
so a user who types ``<userRequest>`` or any other tag keeps every character.
Without a request element, or when the sequence does not parse (an element
never closed), the whole text is the request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Tags Copilot puts the user's words in (the name depends on the model family).
REQUEST_TAGS = ("userRequest", "user_query")

_OPEN = re.compile(r"<([A-Za-z_][\w.-]*)((?:\s+[\w.:-]+(?:=\"[^\"]*\"|='[^']*')?)*)\s*>")
_ATTR = re.compile(r"([\w.:-]+)=(?:\"([^\"]*)\"|'([^']*)')")
_FENCE = re.compile(r"\A\s*(`{3,}|~{3,})[^\n]*\n(.*?)\n?\1\s*\Z", re.S)
_OUTSIDE = re.compile(r"<([A-Za-z_][\w.-]*)(?:\s[^>]*)?>.*?</\1>", re.S)
_LINES = re.compile(r"(?:#|:|Lines? )L?(\d+)(?:[-–]L?(\d+))?$")


@dataclass(frozen=True)
class Attachment:
    """A file or selection the user attached: ``path`` (as Copilot wrote it, absolute
    or workspace-relative), the attached ``text`` (fences removed; None when only the
    file was named), and ``lines`` (first, last; 1-based) for a selection."""

    path: str | None
    text: str | None = None
    lines: tuple[int, int] | None = None
    id: str | None = None


@dataclass(frozen=True)
class UserInput:
    """What the user wrote (``request``) and attached. ``rendered``: Copilot's markup
    was found and removed; False means ``request`` is the text as it came."""

    request: str
    attachments: tuple[Attachment, ...] = ()
    rendered: bool = False


def parse_user_message(text: str) -> UserInput:
    """Split a Copilot-rendered user message into the user's words and attachments.

    Never raises; returns ``UserInput(text)`` (verbatim) when the text has no request
    element or does not parse as Copilot's element sequence.
    """
    elements = _top_level(text)
    if elements is None:
        return UserInput(text)
    requests = [e for e in elements if e[0] in REQUEST_TAGS]
    if not requests:
        # Copilot's global context alone: nothing the user wrote.
        return UserInput("", rendered=True) if is_scaffolding(text) else UserInput(text)
    request = requests[-1][2].strip("\n")
    attachments: list[Attachment] = []
    for name, _attrs, body in elements:
        if name == "attachments":
            attachments += _attachments(body)
    return UserInput(request, tuple(attachments), rendered=True)


def words(text: str) -> str:
    """What the user wrote in a user message, as the history core compares it across requests.

    Copilot renders the current user message with more scaffolding than the same message replayed
    later (the captured requests in ``tests/fixtures/copilot``), but the request element's content is the same in both: that is
    the words. A message without a request element counts with its complete top-level
    elements left out (Copilot's context around plain words); one that does not parse
    counts as it is. Whitespace is the caller's to drop (``history`` squeezes it)."""
    parsed = parse_user_message(text)
    if parsed.rendered:
        return parsed.request
    if _top_level(text):
        return _OUTSIDE.sub("", text)
    return text


def is_scaffolding(text: str) -> bool:
    """True when ``text`` is Copilot's markup and nothing else: top-level elements, none of
    them a request, and only whitespace between them. Copilot sends its global context
    (``<environment_info>``, ``<workspace_info>``, memories) as a user message of its own
    before the first turn: no user wrote it, so it is neither a turn nor the request."""
    elements = _top_level(text)
    if not elements or any(name in REQUEST_TAGS for name, _, _ in elements):
        return False
    return not _OUTSIDE.sub("", text).strip()


def _top_level(text: str) -> list[tuple[str, dict[str, str], str]] | None:
    """The top-level elements of ``text`` as (name, attributes, body); text runs
    between them are skipped. None when an element is not closed."""
    out: list[tuple[str, dict[str, str], str]] = []
    pos = 0
    while True:
        m = _OPEN.search(text, pos)
        if m is None:
            return out
        name = m.group(1)
        close = f"</{name}>"
        if name in REQUEST_TAGS:
            # The user's words: to the last closing tag, whatever they typed.
            end = text.rfind(close)
            if end < m.end():
                return None
            out.append((name, _attrs(m.group(2)), text[m.end() : end]))
            pos = end + len(close)
            continue
        end = text.find(close, m.end())
        if end < 0:
            return None
        out.append((name, _attrs(m.group(2)), text[m.end() : end]))
        pos = end + len(close)


def _attrs(raw: str) -> dict[str, str]:
    return {m.group(1): m.group(2) if m.group(2) is not None else m.group(3) for m in _ATTR.finditer(raw)}


def _attachments(body: str) -> list[Attachment]:
    out = []
    for name, attrs, inner in _top_level(body) or []:
        if name != "attachment":
            continue
        path = attrs.get("filePath") or attrs.get("path")
        content = _unfenced(inner)
        lines = None
        for key in ("id", "description"):
            found = _LINES.search(attrs.get(key, ""))
            if found:
                first = int(found.group(1))
                lines = (first, int(found.group(2) or first))
                break
        out.append(Attachment(path, content or None, lines, attrs.get("id")))
    return out


def _unfenced(text: str) -> str:
    """The text of a fenced code block (Copilot's ``// filepath:`` line kept out), or
    the text itself."""
    m = _FENCE.match(text)
    body = m.group(2) if m else text.strip("\n")
    first, _, rest = body.partition("\n")
    if m and re.match(r"\s*(//|#|<!--)\s*filepath:", first):
        return rest
    return body
