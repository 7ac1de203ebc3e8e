"""Consecutive text chunks merged: one rule of the streaming hot path (docs/performance.md,
"The profile of the hot path"). No I/O.

An agent streams its answer as many small ``session/update`` notifications, one
``agent_message_chunk`` (or ``agent_thought_chunk``) per token or so. Those that queue up
in a session actor's mailbox while it works are handed on as one update whose text is
theirs joined, so the turn machine, the renderer and the fingerprint run once per burst,
not once per chunk. What the chat shows does not change: the server's writer already
joins consecutive text parts of a request into one (``daemon.stdio``).

Only a *plain* chunk merges (``plain_chunk``): the shape agents stream, where the text is
all there is to it. A chunk that carries anything else (``_meta``: a notice, an
``annotations``, a non-text content block, any other field) is handed on as it came, and
nothing merges across it. Two chunks merge only when their ``key`` is equal: the same
session, the same kind (message or thought), the same ``messageId``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The kinds of ``session/update`` whose text merges.
KINDS = ("agent_message_chunk", "agent_thought_chunk")

_ABSENT = object()

#: What two plain chunks must share to merge: (sessionId, sessionUpdate, messageId or None).
Key = tuple[str, str, str | None]


def plain_chunk(params: Any) -> tuple[Key, str] | None:
    """``(key, text)`` of a ``session/update`` notification's ``params`` when it is a plain
    text chunk: exactly ``{"sessionId": str, "update": {"sessionUpdate": one of KINDS,
    "content": {"type": "text", "text": str}, "messageId"?: str | None}}``; else None."""
    # Subscripts, not ``.get``: a missing member raises (rare) instead of a method call per
    # member (every chunk an agent streams passes here).
    if type(params) is not dict or len(params) != 2:
        return None
    try:
        sid = params["sessionId"]
        update = params["update"]
        if type(sid) is not str or type(update) is not dict:
            return None
        kind = update["sessionUpdate"]
        if kind != KINDS[0] and kind != KINDS[1]:  # (not ``in``: an unhashable value must not raise)
            return None
        content = update["content"]
        if type(content) is not dict or len(content) != 2 or content["type"] != "text":
            return None
        text = content["text"]
    except KeyError:
        return None
    if type(text) is not str:
        return None
    if len(update) == 2:
        return (sid, kind, None), text
    message_id = update.get("messageId", _ABSENT)
    if len(update) != 3 or not (message_id is None or type(message_id) is str):
        return None
    return (sid, kind, message_id), text


def joined(params: dict[str, Any], texts: Sequence[str]) -> dict[str, Any]:
    """The params of the one update that stands for a run of plain chunks: the first's
    (``params``), with ``texts`` (each chunk's, in order) joined as its text."""
    update = params["update"]
    return {"sessionId": params["sessionId"], "update": {**update, "content": {"type": "text", "text": "".join(texts)}}}


def merge(updates: Sequence[Any]) -> list[Any]:
    """The rule over a sequence of ``session/update`` params, in arrival order: each run of
    consecutive plain chunks with one ``key`` becomes one (``joined``); everything else is
    kept as it came (the same object), in its place."""
    out: list[Any] = []
    run: list[str] = []
    first: Any = None
    key: Key | None = None
    for params in updates:
        chunk = plain_chunk(params)
        if chunk is not None and key is not None and chunk[0] == key:
            run.append(chunk[1])
            continue
        if key is not None:
            out.append(first if len(run) == 1 else joined(first, run))
        if chunk is None:
            out.append(params)
            first, key, run = None, None, []
        else:
            first, key, run = params, chunk[0], [chunk[1]]
    if key is not None:
        out.append(first if len(run) == 1 else joined(first, run))
    return out
