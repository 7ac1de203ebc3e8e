"""Text helpers shared by the pure core and the logs: clipping, and the one markdown
code fence (``code_block``, ``inline_code``) everything the user reads of an agent's text
is put in."""

from __future__ import annotations

import re

_BACKTICKS = re.compile(r"`+")


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out (for what a user
    or a log reads of a peer's text: it may be megabytes)."""
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters]"


def longest_backticks(text: str) -> int:
    """The length of the longest run of backticks in ``text`` (0: none)."""
    return max((len(run) for run in _BACKTICKS.findall(text)), default=0)


def code_block(text: str, lang: str = "") -> str:
    """``text`` as a fenced markdown code block (CommonMark "Fenced code blocks") whose fence
    is longer than any backtick run in it (three at least), so no line of ``text`` can end
    the block early: ``code_block("a ``` b", "sh")`` is ``"````sh\\na ``` b\\n````"``.
    The one exception is a command's output streamed into one growing block
    (``core/live.py``), whose text is not known when its fence opens: it escapes the lines
    that could close it instead."""
    fence = "`" * max(3, longest_backticks(text) + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


def inline_code(text: str) -> str:
    """``text`` as one markdown code span that survives backticks in it (CommonMark "Code
    spans": the delimiter is a backtick run longer than any inside, padded with a space
    when the text starts or ends with a backtick). ``text`` should hold no line break."""
    fence = "`" * (longest_backticks(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
