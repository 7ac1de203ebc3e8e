"""The session cap: which live sessions a new chat may close, and when it waits.

Pure (no I/O, no clock), like ``history``: the history actor asks ``admit`` whenever a
request needs an agent session of its own (a new chat, a divergence, a dormant chat
coming back) and carries out what it says: close the sessions it names and go, or
queue the request until a session becomes free (a turn ends, a session is closed or
its agent dies), up to the wait bound (``lmbridge serve --session-wait``).

What a live session is doing decides whether a new chat may close it (``CLOSABLE``):

| the session | may be closed for a new chat |
|---|---|
| ``ANSWERING``: a turn streams, or waits to start | never |
| ``CARD``: its last answer ended on a permission card (or a VS Code tool call) the user still sees | only once the new chat has waited its whole bound (``AT_BOUND``) |
| ``IDLE``: its last answer ended | at once, least recently used first (the chat sleeps and resumes its agent session when it comes back) |

Before the bound, closing a card would cancel it while the user may be about to answer;
after it, cards left unanswered that long must not keep every new chat out. Its chat
sleeps: a late Allow or Skip wakes its session (docs/sessions.md).

Requests queue per agent, first come first served: a new request that needs a session
waits behind those already waiting for that agent, even when one became free just now.
The docs: docs/sessions.md ("The session cap").
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from lmbridge.core.history import Last, Session

#: Seconds a request over the cap waits for a free session before it is refused as busy
#: (``lmbridge serve --session-wait``, ``$LMBRIDGE_SESSION_WAIT``).
SESSION_WAIT = 120.0


class Use(enum.Enum):
    """What a live session is doing, as the cap sees it."""

    ANSWERING = "answering"  # a turn streams (or waits to start): HistoryCore's ``busy``
    CARD = "card"  # its last answer waits on cards the user still sees (``Last.PENDING``)
    IDLE = "idle"  # its last answer ended (done, cancelled)


class Close(enum.IntEnum):
    """When a new chat over the cap may close a live session (lower: closed first)."""

    AT_ONCE = 0
    AT_BOUND = 1  # once the new chat has waited its whole bound (``overdue``)
    NEVER = 2


#: Use → when a new chat over the cap may close a session doing it.
CLOSABLE: dict[Use, Close] = {Use.ANSWERING: Close.NEVER, Use.CARD: Close.AT_BOUND, Use.IDLE: Close.AT_ONCE}


def use(s: Session) -> Use:
    """What the live session ``s`` is doing."""
    if s.busy:
        return Use.ANSWERING
    if s.last is Last.PENDING:
        return Use.CARD
    return Use.IDLE


@dataclass(frozen=True)
class Room:
    """``admit``'s answer: ``wait`` (queue the request), or go after closing the sessions
    in ``close`` (ids, least recently used first; empty when there is room already)."""

    wait: bool
    close: tuple[str, ...] = ()


def admit(live: Sequence[Session], cap: int, ahead: int = 0, overdue: bool = False) -> Room:
    """Whether a request that needs one more session of an agent may have it now.

    ``live``: that agent's live sessions (dormant ones hold no agent session and do not
    count); ``cap``: live sessions allowed per agent (``--max-agent-processes``, ≥ 1);
    ``ahead``: requests of that agent already waiting (first come, first served: a
    request with any ahead of it waits); ``overdue``: the request has waited its whole
    bound (it goes first, whatever waits behind it). Closes only sessions ``CLOSABLE``
    now (``AT_ONCE``; ``AT_BOUND`` too when overdue), idle ones before cards, each the
    least recently active first, and only as many as the cap needs.
    """
    if ahead > 0 and not overdue:
        return Room(wait=True)
    excess = len(live) - cap + 1
    if excess <= 0:
        return Room(wait=False)
    allowed = Close.AT_BOUND if overdue else Close.AT_ONCE
    closable = sorted((s for s in live if CLOSABLE[use(s)] <= allowed), key=lambda s: (CLOSABLE[use(s)], s.last_active, s.id))
    if len(closable) < excess:
        return Room(wait=True)
    return Room(wait=False, close=tuple(s.id for s in closable[:excess]))


def waiting_notice(agent: str) -> str:
    """The line a request over the cap shows while it waits (``agent``: the display name)."""
    return f"_Waiting for a free {agent} session…_\n\n"


def is_waiting_notice(text: object) -> bool:
    """Whether ``text`` is a ``waiting_notice`` (a wall-clock artefact: replay skips it)."""
    return isinstance(text, str) and text.startswith("_Waiting for a free ") and text.endswith(" session…_\n\n") and "\n" not in text[:-2]


def busy_message(agent: str, cap: int, waited: float) -> str:
    """The error of a request that found no free session within ``waited`` seconds."""
    within = f" and none became free within {waited:g} s" if waited > 0 else ""
    return (
        f"agent {agent!r}: all {cap} of its sessions are busy with other chats (answering, or "
        f"showing a permission card){within} (lmbridge serve --max-agent-processes, --session-wait); "
        "try again when one has answered"
    )
