"""An agent's subagents: whose chat a child session's frames go to, and which tool call they sit under.

Pure (no I/O). Theory of operation (docs/agents.md, "Subagents"):

* An agent may run a subagent in a **child session** of its own ``sessionId``, which it
  announces with an update in the **parent** session naming the child
  (``ANNOUNCEMENTS``: the subagents RFD's ``subagent_update`` and its earlier draft's
  ``subagent_spawned``). ``Children`` remembers each link; a frame of a child goes to the
  chat of the session at the top of its chain of parents, if that session is open
  (``route``), and nowhere else. A frame of a session that is neither open nor a child of
  an open one has no chat: ``Route.NONE`` (its permission is denied, as today).
* A child's session-state updates (its own modes, options, commands, usage:
  ``session_state.STATE_KINDS``) are its own, not the chat's: ``Route.DROP``.
* Within a chat, a subagent's tool calls, and the ``toolCall`` of its permission requests,
  name the tool call that spawned it: ``_meta.claudeCode.parentToolUseId``
  (``parent_tool_call``). claude-agent-acp stamps it on everything a subagent reports, in
  the parent session (a client without ``clientCapabilities.subagents``, as lmbridge is)
  and in a child session alike; ``core.present`` shows such a call under its parent.

The table (``route``), first row that matches wins:

| the frame's ``sessionId`` | the frame | route |
|---|---|---|
| an open session | anything | ``OWN``: that session's chat |
| a child whose chain of parents reaches an open session | a session-state update | ``DROP`` |
| same | anything else | ``CHILD``: the open session's chat |
| anything else | anything | ``NONE`` |
"""

from __future__ import annotations

import enum
from collections.abc import Container
from typing import Any, NamedTuple

from lmbridge.core.session_state import state_kind

#: ``sessionUpdate`` of an update in a parent session that announces a child → the field
#: holding the child's ``sessionId``.
ANNOUNCEMENTS: dict[str, str] = {
    "subagent_update": "sessionId",  # the subagents RFD (claude-agent-acp's "rfd" form)
    "subagent_spawned": "subagentSessionId",  # its earlier draft (claude-agent-acp's "air" form)
}
#: Links kept per agent process; past it the oldest is forgotten (an agent's ids are untrusted).
CHILDREN_KEPT = 256
#: Characters of an id kept (an agent's ids are untrusted).
ID_LIMIT = 200


class Route(enum.Enum):
    """Where one frame of an agent goes."""

    OWN = "own"  # the chat of its own session
    CHILD = "child"  # the chat of the open session its child session descends from
    DROP = "drop"  # a child's own session state: nowhere
    NONE = "none"  # no chat: answered as a frame for no open session


class Routed(NamedTuple):
    """``route``'s answer: the route and the open session whose chat takes the frame (None
    for ``DROP``/``NONE``). A named tuple: one is made per frame an agent sends."""

    route: Route
    session: str | None = None


def announced_child(update: Any) -> str | None:
    """The child ``sessionId`` an update announces (``ANNOUNCEMENTS``), else None."""
    if not isinstance(update, dict):
        return None
    kind = update.get("sessionUpdate")
    field = ANNOUNCEMENTS.get(kind) if isinstance(kind, str) else None
    child = update.get(field) if field is not None else None
    return child if isinstance(child, str) and 0 < len(child) <= ID_LIMIT else None


def parent_tool_call(item: Any) -> str | None:
    """The tool call that spawned the subagent an update or a ``toolCall`` comes from:
    its ``_meta.claudeCode.parentToolUseId`` (a non-empty string), else None."""
    meta = item.get("_meta") if isinstance(item, dict) else None
    claude = meta.get("claudeCode") if isinstance(meta, dict) else None
    parent = claude.get("parentToolUseId") if isinstance(claude, dict) else None
    return parent if isinstance(parent, str) and parent else None


class Children:
    """The child sessions one agent process announced: child ``sessionId`` → parent ``sessionId``."""

    def __init__(self, kept: int = CHILDREN_KEPT) -> None:
        self.kept = kept
        self.parents: dict[str, str] = {}

    def learn(self, session_id: str, update: Any) -> str | None:
        """Remember the child an update of ``session_id`` announces (none: nothing); the child, or None.
        A session is never its own child; a child announced again keeps its first parent."""
        child = announced_child(update)
        if child is None or child == session_id or child in self.parents:
            return None
        self.parents[child] = session_id
        while len(self.parents) > self.kept:
            del self.parents[next(iter(self.parents))]
        return child

    def top(self, session_id: str, open_sessions: Container[str]) -> str | None:
        """The open session ``session_id`` descends from (itself if open), else None. A
        chain longer than the links kept (a loop) reaches none."""
        sid = session_id
        for _ in range(len(self.parents) + 1):
            if sid in open_sessions:
                return sid
            parent = self.parents.get(sid)
            if parent is None:
                return None
            sid = parent
        return None

    def route(self, session_id: object, method: str, params: Any, open_sessions: Container[str]) -> Routed:
        """Where a frame of ``method`` with ``params`` for ``session_id`` goes (the table above)."""
        if not isinstance(session_id, str):
            return Routed(Route.NONE)
        if session_id in open_sessions:
            return Routed(Route.OWN, session_id)
        top = self.top(session_id, open_sessions)
        if top is None:
            return Routed(Route.NONE)
        if method == "session/update" and state_kind(params.get("update") if isinstance(params, dict) else None) is not None:
            return Routed(Route.DROP)
        return Routed(Route.CHILD, top)

    def forget(self, session_id: str) -> None:
        """Forget ``session_id``'s own link and those of the children announced in it."""
        self.parents.pop(session_id, None)
        for child in [c for c, p in self.parents.items() if p == session_id]:
            self.forget(child)
