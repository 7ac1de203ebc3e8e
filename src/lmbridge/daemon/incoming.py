"""What the session actor makes of one notification or request its agent sent (``read``).

The agent's frames reach the chat's actor as ``acp.connection.Incoming``; ``read`` says,
from the frame and the chat's two session ids alone, what it is (docs/architecture.md
"Tasks and ownership", docs/protocol.md "Agent requests"):

- a ``session/update`` of the chat's session: a ``turn.Update`` for the turn machine (the
  actor also tells it to the chat's controls); of the session being opened, not yet the
  chat's (claude tells its commands just after ``session/new``): ``Early``, kept for its
  ``Ready``; of a superseded session: nothing;
- a permission or a question (``elicitation/create``) of the chat's session: ``Ask``, a
  ``turn.PermissionAsked``/``turn.ElicitationAsked`` once the actor adds its ids; of
  another session: ``Reply``, cancelled at once (nothing approved);
- an fs/* or terminal/* request (``serves``): ``Serve`` (``acp.client_requests``);
- a request whose id cannot be answered: ``Reply`` with ``BAD_ID_ERROR`` and id null;
  another notification: ``Skip``; another request: ``Reply`` with -32601.

``read`` is pure: the actor carries the outcome out (``SessionActor._incoming``); an ``Ask``
becomes the machine's event with fresh ids by ``asked``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from lmbridge.acp.connection import BAD_ID_ERROR, Incoming
from lmbridge.core import elicitation, errors, permissions, turn
from lmbridge.core.json_values import json_object
from lmbridge.core.text import clip

if TYPE_CHECKING:
    from lmbridge.core.profiles import AgentProfile
    from lmbridge.tools.mcp_bridge import ToolBridge


@dataclass(frozen=True, slots=True)
class Early:
    """A ``session/update`` of the session being opened, before it is the chat's: ``change``
    (its ``update`` object) is kept for the session's ``Ready`` (``ChatControls.early``)."""

    change: Any


@dataclass(frozen=True, slots=True)
class Ask:
    """The chat's session asks the user: ``kind`` ``permission`` (``session/request_permission``)
    or ``question`` (``elicitation/create``), ``params`` as received. ``answerable``: False for
    a permission whose id cannot be answered (shown, never answered; ``rid`` is None)."""

    kind: Literal["permission", "question"]
    rid: int | str | None
    params: Any
    answerable: bool = True


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer the agent's request ``rid`` at once, with ``result`` or ``error`` (JSON-RPC)."""

    rid: int | str | None
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Serve:
    """An fs/* or terminal/* request, served by ``acp.client_requests.ClientRequests.handle``."""

    rid: int | str
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Skip:
    """A notification the daemon cannot use: ``message`` logged once, counted after (``present.Skipped``)."""

    message: str


#: What one of the agent's frames is (module docstring); None: nothing to do.
Read: TypeAlias = "turn.Update | Early | Ask | Reply | Serve | Skip | None"


def read(msg: Incoming, shown: str | None, opening: str | None, serves: Callable[[str], bool]) -> Read:
    """What ``msg`` is for the chat whose updates come from ACP session ``shown`` (None
    until its first ``Ready``) while ``opening`` is the session being opened (or the chat's);
    ``serves(method)``: the fs/* and terminal/* requests served for the agent."""
    params = json_object(msg.params)
    rid = msg.id
    match msg:
        case Incoming(method="session/update", id=None, bad_id=False):
            session, change = params.get("sessionId"), params.get("update")
            if session == shown:
                return turn.Update(change)
            return Early(change) if session == opening else None
        case Incoming(method="session/request_permission") if rid is not None or msg.bad_id:
            if params.get("sessionId") != shown:
                return None if msg.bad_id else Reply(rid, {"outcome": dict(permissions.CANCELLED)})
            return Ask("permission", rid, msg.params, answerable=not msg.bad_id)
        case Incoming(method=elicitation.METHOD, bad_id=False) if rid is not None:
            if params.get("sessionId") != shown:
                return Reply(rid, dict(elicitation.CANCEL))
            return Ask("question", rid, msg.params)
        case Incoming(bad_id=True):
            return Reply(None, error=dict(BAD_ID_ERROR))
        case Incoming(id=None):
            return Skip(f"agent notification {clip(repr(msg.method), 200)} ignored")
        case _ if rid is not None and serves(msg.method):
            return Serve(rid, msg.method, params)
        case _:
            return Reply(rid, error=errors.error(errors.METHOD_NOT_FOUND, msg.method))


def asked(
    ask: Ask, chat: str, bridge: ToolBridge | None, profile: AgentProfile, workspace: Callable[[], permissions.Workspace]
) -> turn.PermissionAsked | turn.ElicitationAsked:
    """``ask`` as the turn machine's event, with a fresh callId (``lmbridge-<chat>-<hex>``) and
    token; a permission also with the VS Code tools the chat's MCP endpoint ``bridge`` offers
    (``permissions.Bridge``), the agent's ``profile``, and ``workspace()``, where its files are
    judged (read only for a permission: it resolves the folders on disk)."""
    call_id, token = f"lmbridge-{chat}-{secrets.token_hex(6)}", secrets.token_urlsafe(18)
    if ask.kind == "question":
        return turn.ElicitationAsked(ask.rid, ask.params, call_id, token)
    tools = None if bridge is None else permissions.Bridge(bridge.name, frozenset(bridge.tools), profile)
    return turn.PermissionAsked(ask.rid, ask.params, call_id, token, tools, answerable=ask.answerable, workspace=workspace(), profile=profile)
