"""What the session actor makes of each of its agent's frames (``daemon/incoming.py``,
docs/architecture.md "Tasks and ownership"): a table, row by row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lmbridge.acp.connection import BAD_ID_ERROR, Incoming
from lmbridge.core import elicitation, errors, permissions, turn
from lmbridge.core.profiles import CLAUDE
from lmbridge.daemon import incoming
from lmbridge.daemon.incoming import Ask, Early, Reply, Serve, Skip

SHOWN, OPENING, OLD = "chat-session", "opening-session", "superseded-session"
CHANGE = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
ASK = {"sessionId": SHOWN, "toolCall": {"toolCallId": "t1"}, "options": []}
OLD_ASK = {**ASK, "sessionId": OLD}
QUESTION = {"sessionId": SHOWN, "message": "Which?", "requestedSchema": {}}
OLD_QUESTION = {**QUESTION, "sessionId": OLD}
READ = {"sessionId": SHOWN, "path": "/w/a"}
CANCELLED = {"outcome": dict(permissions.CANCELLED)}


def _update(session: str | None) -> dict[str, Any]:
    return {"sessionId": session, "update": CHANGE}


ROWS: list[tuple[str, Incoming, str | None, incoming.Read]] = [
    ("the chat's update", Incoming("session/update", _update(SHOWN)), SHOWN, turn.Update(CHANGE)),
    ("the opening session's update", Incoming("session/update", _update(OPENING)), SHOWN, Early(CHANGE)),
    ("before the first Ready, the opening session's", Incoming("session/update", _update(OPENING)), None, Early(CHANGE)),
    ("a superseded session's update", Incoming("session/update", _update(OLD)), SHOWN, None),
    ("an update with an id is a request", Incoming("session/update", _update(SHOWN), 4), SHOWN,
     Reply(4, error=errors.error(errors.METHOD_NOT_FOUND, "session/update"))),
    ("an update with a bad id", Incoming("session/update", _update(SHOWN), None, True), SHOWN, Reply(None, error=dict(BAD_ID_ERROR))),
    ("the chat's permission", Incoming("session/request_permission", ASK, 5), SHOWN, Ask("permission", 5, ASK)),
    ("the chat's permission, id unusable", Incoming("session/request_permission", ASK, None, True), SHOWN,
     Ask("permission", None, ASK, answerable=False)),
    ("another session's permission: cancelled", Incoming("session/request_permission", OLD_ASK, 6), SHOWN, Reply(6, CANCELLED)),
    ("another session's permission, id unusable: nothing", Incoming("session/request_permission", OLD_ASK, None, True), SHOWN, None),
    ("a permission before any session is the chat's", Incoming("session/request_permission", ASK, 7), None, Reply(7, CANCELLED)),
    ("a permission sent as a notification", Incoming("session/request_permission", ASK), SHOWN,
     Skip("agent notification 'session/request_permission' ignored")),
    ("the chat's question", Incoming(elicitation.METHOD, QUESTION, 8), SHOWN, Ask("question", 8, QUESTION)),
    ("another session's question: cancelled", Incoming(elicitation.METHOD, OLD_QUESTION, 9), SHOWN, Reply(9, dict(elicitation.CANCEL))),
    ("a question, id unusable", Incoming(elicitation.METHOD, QUESTION, None, True), SHOWN, Reply(None, error=dict(BAD_ID_ERROR))),
    ("an fs request served", Incoming("fs/read_text_file", READ, 10), SHOWN, Serve(10, "fs/read_text_file", READ)),
    ("an fs request, id unusable", Incoming("fs/read_text_file", READ, None, True), SHOWN, Reply(None, error=dict(BAD_ID_ERROR))),
    ("an unknown notification", Incoming("x/ping", {}), SHOWN, Skip("agent notification 'x/ping' ignored")),
    ("an unknown request", Incoming("x/ask", {}, 11), SHOWN, Reply(11, error=errors.error(errors.METHOD_NOT_FOUND, "x/ask"))),
    ("params not an object", Incoming("fs/read_text_file", ["/w/a"], 12), SHOWN, Serve(12, "fs/read_text_file", {})),
]  # fmt: skip


@pytest.mark.parametrize(("msg", "shown", "expected"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_each_frame_reads_as_its_row(msg: Incoming, shown: str | None, expected: incoming.Read) -> None:
    assert incoming.read(msg, shown, OPENING, lambda method: method.startswith("fs/")) == expected


def test_a_request_not_served_is_method_not_found() -> None:
    msg = Incoming("fs/read_text_file", READ, 13)
    assert incoming.read(msg, SHOWN, OPENING, lambda method: False) == Reply(13, error=errors.error(errors.METHOD_NOT_FOUND, "fs/read_text_file"))


def test_a_long_method_name_is_clipped_in_the_skip() -> None:
    read = incoming.read(Incoming("x" * 1000, {}), SHOWN, OPENING, lambda method: False)
    assert isinstance(read, Skip) and len(read.message) < 300


class _Bridge:
    """What ``asked`` reads of the chat's MCP endpoint (``mcp_bridge.ToolBridge``)."""

    name = "lmbridge-s1"
    tools = {"vscode_search": None, "vscode_run": None}


def _workspace_read(reads: list[int]) -> Callable[[], permissions.Workspace]:
    def workspace() -> permissions.Workspace:
        reads.append(1)
        return permissions.NO_WORKSPACE

    return workspace


@pytest.mark.parametrize("bridge", [None, _Bridge()], ids=["no endpoint", "the chat's endpoint"])
def test_a_permission_asked_carries_fresh_ids_the_endpoint_and_the_workspace(bridge: Any) -> None:
    reads: list[int] = []
    events = [incoming.asked(Ask("permission", 5, ASK), "s1", bridge, CLAUDE, _workspace_read(reads)) for _ in range(2)]
    for event in events:
        assert isinstance(event, turn.PermissionAsked)
        assert (event.rid, event.params, event.answerable, event.profile) == (5, ASK, True, CLAUDE)
        assert event.call_id.startswith("lmbridge-s1-") and len(event.token) >= 24
        expected = None if bridge is None else permissions.Bridge("lmbridge-s1", frozenset({"vscode_search", "vscode_run"}), CLAUDE)
        assert event.bridge == expected
    assert events[0].call_id != events[1].call_id and events[0].token != events[1].token
    assert reads == [1, 1]


def test_a_permission_with_an_unusable_id_is_shown_not_answerable() -> None:
    event = incoming.asked(Ask("permission", None, ASK, answerable=False), "s1", None, CLAUDE, _workspace_read([]))
    assert isinstance(event, turn.PermissionAsked) and event.rid is None and not event.answerable


def test_a_question_asked_never_reads_the_workspace() -> None:
    reads: list[int] = []
    event = incoming.asked(Ask("question", 8, QUESTION), "s1", _Bridge(), CLAUDE, _workspace_read(reads))
    assert isinstance(event, turn.ElicitationAsked) and (event.rid, event.params) == (8, QUESTION)
    assert event.call_id.startswith("lmbridge-s1-") and not reads
