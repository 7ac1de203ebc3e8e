"""An agent's notices: information for the user that is not the agent's answer
(docs/protocol.md, "What response parts mean"; docs/agents.md, "Notices"). Pure: no I/O.

ACP (schema 1.21+, ``session.notices``): a client that advertises
``clientCapabilities.session.notices: {}`` may get ``session/update``s
``{"sessionUpdate": "notice", "severity": "info"|"warning"|"error"|<other>, "title": str,
"description"?: str|null, "_meta"?: {...}}``: "live events rather than session history",
plain text. An agent that has no such client says the same thing as an agent message;
claude-agent-acp marks those ``_meta.claudeCode.kind: "informational"`` (with
``_meta.claudeCode.level``), so they are told apart from its answer all the same.

The rule, one home:

* ``of_update``: the ``Notice`` a ``session/update``'s ``update`` carries (a ``notice``,
  or an informational ``agent_message_chunk``), else None. Malformed fields are read as
  absent; a notice with no title and no text is None.
* ``render``: the line the user reads, apart from the answer: a blockquote starting with
  the severity's mark (``MARKS``), the agent's text escaped (it is plain text: nothing in it
  renders as markdown, a link or HTML).
* ``strip``: the text of an answer as VS Code re-sends it, without the notices shown in it:
  what a fresh session is told of the conversation never holds them as the model's words.
  It removes every blockquote line that starts with a mark (``> ⓘ ``, ``> ⚠ ``, ``> ⛔ ``)
  and the blockquote lines that continue it: a model's own blockquote written exactly so
  is left out of that retelling too (a loss of context, never a gain of words).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lmbridge.core.text import clip

#: The mark each severity's line starts with; any other severity reads as ``info``.
MARKS = {"info": "ⓘ", "warning": "⚠", "error": "⛔"}
#: Characters kept of a notice's title and of its description.
TITLE_LIMIT = 500
DESCRIPTION_LIMIT = 4000

_ESCAPE = re.compile(r"([\\`*_{}\[\]()<>#+|~!])")
#: A rendered notice inside a longer text: its first line and the lines that continue it.
_RENDERED = re.compile(r"(?m)^> (?:" + "|".join(MARKS.values()) + r")\ufe0f? [^\n]*(?:\n> [^\n]*)*\n?")


@dataclass(frozen=True)
class Notice:
    """One notice: ``severity`` (``info``, ``warning``, ``error``; anything else kept as
    sent, shown as ``info``), ``title`` (one line) and ``description`` (may be empty)."""

    severity: str
    title: str
    description: str = ""


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _informational(raw: dict[str, Any]) -> str | None:
    """The ``_meta.claudeCode.level`` of an informational agent message, else None."""
    meta = raw.get("_meta")
    claude = meta.get("claudeCode") if isinstance(meta, dict) else None
    if not isinstance(claude, dict) or claude.get("kind") != "informational":
        return None
    return _str(claude.get("level")) or "info"


def of_update(raw: Any) -> Notice | None:
    """The notice ``raw`` (a ``session/update``'s ``update``) carries, else None: a
    ``notice`` update, or an ``agent_message_chunk`` marked
    ``_meta.claudeCode.kind: "informational"`` (its level ``warning`` a warning, any other
    level info; its text block's first line the title, the rest the description)."""
    if not isinstance(raw, dict):
        return None
    kind = raw.get("sessionUpdate")
    if kind == "notice":
        title, description = _str(raw.get("title")).strip(), _str(raw.get("description")).strip()
        if not title and not description:
            return None
        return Notice(_str(raw.get("severity")) or "info", title or "Notice", description)
    if kind == "agent_message_chunk":
        level = _informational(raw)
        content = raw.get("content")
        text = _str(content.get("text")).strip() if isinstance(content, dict) and content.get("type") == "text" else ""
        if level is None or not text:
            return None
        title, _, rest = text.partition("\n")
        return Notice("warning" if level == "warning" else "info", title.strip(), rest.strip())
    return None


def _escaped(text: str) -> str:
    """Plain text as markdown that shows it as it is, on one blockquote's lines."""
    lines = [_ESCAPE.sub(r"\\\1", line.strip()) for line in text.splitlines()]
    return "\n> ".join(line for line in lines if line)


def render(notice: Notice) -> str:
    """The markdown the user reads for ``notice``: its own blockquote, apart from the text
    around it (blank lines before and after): ``> ⚠ Title — description``."""
    mark = MARKS.get(notice.severity, MARKS["info"])
    line = f"> {mark} {_escaped(clip(notice.title, TITLE_LIMIT))}"
    if notice.description:
        line += f" — {_escaped(clip(notice.description, DESCRIPTION_LIMIT))}"
    return f"\n\n{line}\n\n"


def is_notice(text: object) -> bool:
    """Whether ``text`` (a part's value) is one ``render``ed notice, whole: not the agent's
    answer, so it does not make a turn's answer non-empty."""
    return isinstance(text, str) and text.startswith("\n\n> ") and _RENDERED.fullmatch(text.strip("\n") + "\n") is not None


def strip(text: str) -> str:
    """``text`` without the rendered notices in it (module docstring)."""
    return _RENDERED.sub("", text) if "> " in text else text
