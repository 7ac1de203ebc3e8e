"""The session actor's mailbox: ``Mail``, the closed union of everything it receives.

``daemon/session_actor.py`` reads one typed memory stream (``MemoryObjectReceiveStream[Mail]``)
and dispatches each message with ``match``, ``typing.assert_never`` in the default case, so
mypy proves every kind is handled (docs/architecture.md "Tasks and ownership"). Who sends what:

- the history actor: ``Job`` (``daemon.job``; ``SessionActor.submit``), ``CancelRequest`` (``cancel``),
  ``EndSession`` (``close``); ``chat/setControl`` (``daemon.methods``): ``SetControl``
  (``set_control``);
- the agent's process (``acp.process.AgentProcess``, routing by sessionId and request id):
  ``Incoming`` (the agent's notifications and requests), ``Response`` (a ``session/prompt``'s
  answer, in order with the updates), ``AgentGone``;
- the actor's own child tasks: ``Started`` (a start, ``acp.lifecycle.SessionLife``), ``turn.SessionClosed`` (a close),
  ``turn.TimerFired`` (``daemon.timers``), ``ControlSet`` and ``Response`` (``ChatControls``),
  ``turn.Update`` (a terminal's output, ``acp.terminals``), ``McpCall`` (the chat's MCP endpoint).

What the actor reads after its session ended is answered here too (``left_unread``): nothing
queued is dropped unanswered.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from lmbridge.acp.client_requests import session_ended
from lmbridge.acp.connection import BAD_ID_ERROR, Incoming, Response
from lmbridge.acp.lifecycle import LateAnswer, Started
from lmbridge.acp.process import AgentGone
from lmbridge.core import elicitation, permissions, turn
from lmbridge.daemon.chat_controls import ControlSet, SetControl
from lmbridge.daemon.job import Job

if TYPE_CHECKING:
    from lmbridge.daemon.mailbox import ChunkMailbox
    from lmbridge.tools.mcp_bridge import ToolCall


@dataclass(frozen=True)
class CancelRequest:
    """``SessionActor.cancel``: the shim cancelled ``job``'s request (``turn.CancelJob``)."""

    job: Job


@dataclass(frozen=True)
class McpCall:
    """The agent called a VS Code tool through the chat's MCP endpoint (``tools.mcp_bridge``):
    handed over from the MCP server's task (``turn.ToolInvoked``)."""

    call: ToolCall


@dataclass(frozen=True)
class EndSession:
    """``SessionActor.close``: end the session for ``reason`` (``turn.Close``)."""

    reason: str


#: Everything a session actor's mailbox carries. A new kind is added here and to the
#: actor's ``_handle`` (mypy's ``assert_never`` there fails until it is).
Mail: TypeAlias = (
    Job | CancelRequest | EndSession | SetControl | Incoming | Response | AgentGone | McpCall | ControlSet
    | Started | turn.SessionClosed | turn.TimerFired | turn.Update
)  # fmt: skip

#: An answer to one of the agent's requests: ``(rid, result, error)``, as ``ClientRequests.Respond`` takes it.
Reply: TypeAlias = LateAnswer


def drain(mailbox: MemoryObjectReceiveStream[Mail] | ChunkMailbox[Mail]) -> Iterator[Mail]:
    """What ``mailbox`` holds now, without waiting: each message until it is empty or closed."""
    while True:
        try:
            yield mailbox.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return


def unread_answer(msg: Mail) -> Reply | None:
    """The answer to an agent's request its session ended before reading (``msg`` from the
    mailbox): a permission ``cancelled`` (nothing approved), a question cancelled, a request
    with an unusable id ``BAD_ID_ERROR`` (id null), anything else
    ``client_requests.session_ended``. None: ``msg`` is not an agent's request."""
    if not isinstance(msg, Incoming):
        return None
    if msg.bad_id:
        return None, None, dict(BAD_ID_ERROR)
    if msg.id is None:
        return None
    if msg.method == "session/request_permission":
        return msg.id, {"outcome": dict(permissions.CANCELLED)}, None
    if msg.method == elicitation.METHOD:
        return msg.id, dict(elicitation.CANCEL), None
    return msg.id, None, session_ended(msg.method)


def left_unread(msg: Mail, gone: str, control_gone: str) -> Reply | None:
    """``msg`` read after the session ended (queued behind its close): a job not done ends
    with ``gone``, a control request with ``control_gone``; an agent's request is answered
    (``unread_answer``, returned for the writer), never dropped. Anything else: nothing to do."""
    match msg:
        case Job():
            msg.fail(gone)
        case SetControl():
            msg.fail(control_gone)
        case ControlSet():
            msg.request.fail(control_gone)
        case Incoming():
            return unread_answer(msg)
    return None
