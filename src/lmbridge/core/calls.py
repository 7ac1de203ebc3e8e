"""The calls the agent waits on in one session: a small pure registry.

A *call* is a ``session/request_permission`` of the agent's (answered with an outcome; a card
in VS Code) or a VS Code tool the agent called through the MCP bridge (answered with the
tool's result). Each is known by its ``callId`` (the id of the tool call part that shows
it) and is shown in one response, that of the job streaming when its gather window opened
(``shown_in``); until then it waits for the next request. Which answer a call gets, and
when, is the turn machine's (``core/turn.py``); this registry only holds them. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lmbridge.core import elicitation, permissions
from lmbridge.core.jobs import JobInfo

Part = dict[str, Any]


@dataclass
class AwaitedCall:
    """A call the agent waits on: a permission (``rid`` set) or a VS Code tool call.

    ``part``: the tool call part that shows it; ``rid``: the permission request's JSON-RPC id;
    ``token``: its approval token; ``options``: its ACP options; ``shown_in``: the job whose
    response showed it; ``tool_call_id``: the agent's toolCallId of a permission;
    ``request``: the permission its card shows; ``question``: the agent's question it shows
    (``core.elicitation``); ``by_result``: answered by VS Code's tool result (its question
    tool), not by a token.
    """

    call_id: str
    part: Part
    rid: Any = None
    token: str = ""
    options: tuple[permissions.Option, ...] = ()
    shown_in: int | None = None
    tool_call_id: str | None = None
    request: permissions.Permission | None = None
    question: elicitation.Question | None = None
    by_result: bool = False

    @property
    def tool(self) -> bool:
        """A VS Code tool call (no permission request behind it)."""
        return self.rid is None


class AwaitedCalls:
    """The calls the agent waits on, by callId, in the order they came.

    Iterating gives the callIds (a copy: answering while iterating is safe); ``in`` tests a callId.
    """

    def __init__(self) -> None:
        self._calls: dict[str, AwaitedCall] = {}

    def add(self, call: AwaitedCall) -> AwaitedCall:
        self._calls[call.call_id] = call
        return call

    def get(self, call_id: str) -> AwaitedCall | None:
        """The call waiting as ``call_id``, left in place; None if it does not wait."""
        return self._calls.get(call_id)

    def take(self, call_id: str) -> AwaitedCall | None:
        """Take the call out (it is being answered); None if it does not wait."""
        return self._calls.pop(call_id, None)

    def is_permission(self, call_id: str) -> bool:
        """``call_id`` waits, and is a permission request (not a VS Code tool call)."""
        call = self._calls.get(call_id)
        return call is not None and not call.tool

    def shown_in(self, job_id: int | None) -> list[AwaitedCall]:
        """The calls the response of job ``job_id`` shows (none for None)."""
        return [c for c in self._calls.values() if job_id is not None and c.shown_in == job_id]

    def unshown(self) -> list[AwaitedCall]:
        """The calls no response has shown yet (they came while no job streamed)."""
        return [c for c in self._calls.values() if c.shown_in is None]

    def stale(self, job: JobInfo) -> list[str]:
        """The calls an earlier response showed that ``job`` brings no answer for: it was
        classified before they were shown, so it cannot answer them."""
        return [call_id for call_id, c in self._calls.items() if c.shown_in not in (None, job.id) and call_id not in job.answers]

    def forget_permissions(self) -> None:
        """Drop the permission requests unanswered (nobody is left to answer them); tool calls stay."""
        self._calls = {c: call for c, call in self._calls.items() if call.tool}

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._calls

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._calls))

    def __len__(self) -> int:
        return len(self._calls)
