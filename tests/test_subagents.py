"""Subagents (docs/agents.md, "Subagents"): ``core.subagents``'s routing table row by row,
the renderer's nesting of a subagent's tool calls, and, end to end with the scripted agent,
a child session's updates and permission card in its parent's chat (a stranger's denied)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core import subagents
from lmbridge.core.present import TurnRenderer
from lmbridge.core.subagents import Children, Route, Routed
from lmbridge.devtools.client import approve, assistant, text_of, tool_calls, user

OPEN = frozenset({"root", "other-chat"})


def linked(*pairs: tuple[str, str]) -> Children:
    """Children with each (parent, child) announced by an RFD ``subagent_update``."""
    c = Children()
    for parent, child in pairs:
        c.learn(parent, {"sessionUpdate": "subagent_update", "sessionId": child})
    return c


UPDATE = {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "x"}
# (links, frame's sessionId, method, params, expected) — docs: the table in core/subagents.py
ROUTES: list[tuple[tuple[tuple[str, str], ...], object, str, dict[str, Any], Routed]] = [
    ((), "root", "session/update", {"update": UPDATE}, Routed(Route.OWN, "root")),
    ((("root", "kid"),), "root", "session/update", {"update": {"sessionUpdate": "usage_update"}}, Routed(Route.OWN, "root")),
    ((("root", "kid"),), "kid", "session/update", {"update": UPDATE}, Routed(Route.CHILD, "root")),
    ((("root", "kid"),), "kid", "session/request_permission", {"toolCall": {}}, Routed(Route.CHILD, "root")),
    ((("root", "kid"),), "kid", "fs/read_text_file", {"path": "/x"}, Routed(Route.CHILD, "root")),
    ((("root", "kid"), ("kid", "grandkid")), "grandkid", "session/update", {"update": UPDATE}, Routed(Route.CHILD, "root")),
    ((("root", "kid"),), "kid", "session/update", {"update": {"sessionUpdate": "config_option_update", "configOptions": []}}, Routed(Route.DROP)),
    ((("root", "kid"),), "kid", "session/update", {"update": {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}}, Routed(Route.DROP)),
    ((("root", "kid"),), "stranger", "session/request_permission", {"toolCall": {}}, Routed(Route.NONE)),
    ((("gone", "kid"),), "kid", "session/request_permission", {"toolCall": {}}, Routed(Route.NONE)),  # its parent is no open session
    ((("a", "b"), ("b", "a")), "a", "session/update", {"update": UPDATE}, Routed(Route.NONE)),  # a loop reaches no open session
    ((("root", "kid"),), None, "session/update", {"update": UPDATE}, Routed(Route.NONE)),
    ((("root", "kid"),), ["kid"], "session/update", {"update": UPDATE}, Routed(Route.NONE)),
    ((("root", "other-chat"),), "other-chat", "session/request_permission", {}, Routed(Route.OWN, "other-chat")),  # an open session is never another's child
]


@pytest.mark.parametrize(("links", "sid", "method", "params", "expected"), ROUTES)
def test_route_table(links: tuple[tuple[str, str], ...], sid: object, method: str, params: dict[str, Any], expected: Routed) -> None:
    assert linked(*links).route(sid, method, params, OPEN) == expected


ANNOUNCED: list[tuple[Any, str | None]] = [
    ({"sessionUpdate": "subagent_update", "sessionId": "kid", "state": {"state": "running"}}, "kid"),
    ({"sessionUpdate": "subagent_spawned", "subagentSessionId": "kid", "name": "n", "task": "t"}, "kid"),
    ({"sessionUpdate": "subagent_spawned", "sessionId": "kid"}, None),  # the draft's field is subagentSessionId
    ({"sessionUpdate": "subagent_update", "sessionId": ""}, None),
    ({"sessionUpdate": "subagent_update", "sessionId": "k" * (subagents.ID_LIMIT + 1)}, None),
    ({"sessionUpdate": "subagent_update", "sessionId": 7}, None),
    ({"sessionUpdate": "tool_call", "sessionId": "kid"}, None),
    ({"sessionUpdate": ["subagent_update"], "sessionId": "kid"}, None),
    ("subagent_update", None),
]


@pytest.mark.parametrize(("update", "child"), ANNOUNCED)
def test_announced_child(update: Any, child: str | None) -> None:
    assert subagents.announced_child(update) == child


PARENTS: list[tuple[Any, str | None]] = [
    ({"_meta": {"claudeCode": {"parentToolUseId": "toolu_1", "toolName": "Bash"}}}, "toolu_1"),
    ({"_meta": {"claudeCode": {"toolName": "Bash"}}}, None),
    ({"_meta": {"claudeCode": {"parentToolUseId": ""}}}, None),
    ({"_meta": {"claudeCode": {"parentToolUseId": 3}}}, None),
    ({"_meta": {"claudeCode": "x"}}, None),
    ({"_meta": None}, None),
    ({}, None),
    (None, None),
]


@pytest.mark.parametrize(("item", "parent"), PARENTS)
def test_parent_tool_call(item: Any, parent: str | None) -> None:
    assert subagents.parent_tool_call(item) == parent


def test_a_child_keeps_its_first_parent_and_is_never_its_own() -> None:
    c = linked(("root", "kid"))
    assert c.learn("other-chat", {"sessionUpdate": "subagent_update", "sessionId": "kid"}) is None
    assert c.route("kid", "session/update", {"update": UPDATE}, OPEN) == Routed(Route.CHILD, "root")
    assert c.learn("root", {"sessionUpdate": "subagent_update", "sessionId": "root"}) is None


def test_forget_drops_a_session_and_its_descendants() -> None:
    c = linked(("root", "kid"), ("kid", "grandkid"), ("other-chat", "theirs"))
    c.forget("root")
    assert c.route("grandkid", "session/request_permission", {}, OPEN) == Routed(Route.NONE)
    assert c.route("theirs", "session/request_permission", {}, OPEN) == Routed(Route.CHILD, "other-chat")


@given(st.lists(st.tuples(st.sampled_from(["root", "a", "b", "c", "d"]), st.sampled_from(["a", "b", "c", "d", "root"])), max_size=20), st.sampled_from(["a", "b", "c", "d", "x"]))
def test_a_frame_reaches_an_open_session_or_none_and_the_links_stay_bounded(pairs: list[tuple[str, str]], sid: str) -> None:
    c = Children(kept=3)
    for parent, child in pairs:
        c.learn(parent, {"sessionUpdate": "subagent_update", "sessionId": child})
    assert len(c.parents) <= 3
    routed = c.route(sid, "session/request_permission", {}, {"root"})
    assert routed.route in (Route.CHILD, Route.NONE)
    assert (routed.session == "root") == (routed.route is Route.CHILD)


# ---------------------------------------------------------------- rendering


def test_a_subagents_tool_call_is_shown_under_the_call_that_spawned_it() -> None:
    r = TurnRenderer()
    meta = {"claudeCode": {"parentToolUseId": "task-1", "toolName": "Bash"}}
    r.update({"sessionUpdate": "tool_call", "toolCallId": "task-1", "title": "Explore the repository", "kind": "think", "status": "in_progress"})
    start = "".join(p["value"] for p in r.update({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ls", "kind": "execute", "status": "in_progress", "_meta": meta}))
    assert start == "\n\n> 🔧 **ls** (execute) · _in Explore the repository_\n\n"
    output = [{"type": "content", "content": {"type": "text", "text": "a\nb"}}]
    end = "".join(p["value"] for p in r.update({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed", "content": output}))
    assert end.startswith("\n\n> ✓ **ls** (execute) completed · _in Explore the repository_\n>\n> ")
    assert all(line.startswith(">") for line in end.strip("\n").split("\n"))
    # The spawning call itself, and a call of no subagent, render as before.
    top = "".join(p["value"] for p in r.update({"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "pwd", "status": "in_progress"}))
    assert top == "\n\n🔧 **pwd**\n\n"
    done = "".join(p["value"] for p in r.update({"sessionUpdate": "tool_call_update", "toolCallId": "task-1", "status": "completed"}))
    assert done.startswith("\n\n✓ **Explore the repository** (think) completed")


def test_a_subagent_whose_spawning_call_was_not_shown_still_says_so() -> None:
    r = TurnRenderer()
    meta = {"claudeCode": {"parentToolUseId": "toolu_unseen"}}
    start = "".join(p["value"] for p in r.update({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ls", "status": "in_progress", "_meta": meta}))
    assert start == "\n\n> 🔧 **ls** · _in a subagent_\n\n"


def test_a_spawning_calls_title_over_lines_stays_in_the_quote() -> None:
    """The spawning call's title is the agent's text: a line break in it must not end the
    quote, letting the rest of the line out into the answer as markdown of its own."""
    r = TurnRenderer()
    meta = {"claudeCode": {"parentToolUseId": "task-1"}}
    r.update({"sessionUpdate": "tool_call", "toolCallId": "task-1", "title": "Explore\n# Not a heading", "status": "in_progress"})
    start = "".join(p["value"] for p in r.update({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ls", "status": "in_progress", "_meta": meta}))
    assert start == "\n\n> 🔧 **ls** · _in Explore # Not a heading_\n\n"


# ---------------------------------------------------------------- end to end (scripted agent)


def child_frame(session: str, update: dict[str, Any]) -> dict[str, Any]:
    return {"send": {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}}}


PARENT_META = {"claudeCode": {"parentToolUseId": "task-1"}}
SUBAGENT_TURN: list[dict[str, Any]] = [
    {"tool_call": {"toolCallId": "task-1", "title": "Explore the repository", "kind": "think", "status": "in_progress"}},
    {"update": {"sessionUpdate": "subagent_update", "sessionId": "child-1", "title": "Explore", "state": {"state": "running"}}},
    child_frame("child-1", {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read README", "kind": "read", "status": "in_progress", "_meta": PARENT_META}),
    child_frame("child-1", {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed", "_meta": PARENT_META}),
    # The child's own model choice is not the chat's.
    child_frame("child-1", {"sessionUpdate": "current_mode_update", "currentModeId": "child-mode"}),
    # A session that is neither this chat's nor a child of it: denied at once, no card.
    {"permission": {"sessionId": "stranger-9", "toolCall": {"toolCallId": "s1", "title": "Stranger writes", "kind": "edit", "status": "pending"}}, "id": "p-stranger"},
    {"await": ["p-stranger"]},
    {"permission": {"sessionId": "child-1", "toolCall": {
        "toolCallId": "c2", "title": "Write child.txt", "kind": "edit", "status": "pending",
        "rawInput": {"path": "child.txt", "content": "from the subagent"}, "locations": [{"path": "child.txt"}], "_meta": PARENT_META}}, "id": "p1"},
    {"branch": "p1",
     "allow": [
         {"write_file": {"path": "child.txt", "content": "from the subagent"}},
         child_frame("child-1", {"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "completed", "_meta": PARENT_META}),
         {"tool_call_update": {"toolCallId": "task-1", "status": "completed"}},
         {"text": "The subagent wrote it."},
     ],
     "reject": [{"text": "REJECTED"}],
     "cancelled": [{"text": "CANCELLED"}]},
]


@pytest.mark.anyio
async def test_a_child_sessions_updates_and_card_reach_the_parents_chat(scripted: Any, shared: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [SUBAGENT_TURN]})
    with anyio.fail_after(180):  # ~1 s idle
        async with shared([agent]) as c:
            history = [user("explore with a subagent")]
            first = await c.chat(agent.id, history)
            assert first.error is None and first.result == {"stopReason": "tool_calls"}
            text = text_of(first)
            assert "\n> 🔧 **Read README** (read) · _in Explore the repository_" in text
            assert "\n> ✓ **Read README** (read) completed · _in Explore the repository_" in text
            assert "Stranger writes" not in text
            (card,) = tool_calls(first)
            assert card["input"]["title"] == "Write child.txt"
            assert "+from the subagent" in card["input"]["message"]
            assert not (tmp_path / "child.txt").exists()
            history += [assistant(first.parts), approve(card)]
            second = await c.chat(agent.id, history)
    assert second.error is None and second.result == {"stopReason": "end_turn"}
    text = text_of(second)
    assert "\n> ✓ **Write child.txt** (edit) completed · _in Explore the repository_" in text
    assert "✓ **Explore the repository** (think) completed" in text and text.endswith("The subagent wrote it.")
    assert (tmp_path / "child.txt").read_text() == "from the subagent"
    outcomes = {o["id"]: o for o in agent.outcomes()}
    assert outcomes["p-stranger"]["outcome"] == {"outcome": "cancelled"}
    assert outcomes["p1"]["kind"] == "allow_once"
