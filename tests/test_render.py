"""Part rendering (ACP updates → wire parts) and prompt building, pure."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.core.messages import Message
from lmbridge.core.permissions import ACTION_TOOL as AGENT_ACTION_TOOL
from lmbridge.core.present import TurnRenderer
from lmbridge.core.transcript import CONTEXT_OPEN, prompt_blocks


def chunk(kind: str, text: str) -> dict:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def test_text_and_thinking():
    r = TurnRenderer()
    assert r.update(chunk("agent_message_chunk", "hi")) == [{"type": "text", "value": "hi"}]
    assert r.update(chunk("agent_thought_chunk", "hmm")) == [{"type": "thinking", "value": "hmm"}]
    assert r.update(chunk("agent_message_chunk", "")) == []


def test_resource_link_becomes_markdown_link():
    r = TurnRenderer()
    parts = r.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "resource_link", "name": "a.py", "uri": "file:///a.py"}})
    assert parts == [{"type": "text", "value": "[a.py](file:///a.py)"}]


def test_tool_call_renders_at_start_and_end_only():
    r = TurnRenderer()
    start = r.update({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Run `ls`", "kind": "execute", "status": "pending"})
    assert len(start) == 1 and "Run `ls`" in start[0]["value"] and "(execute)" in start[0]["value"]
    for _ in range(5):
        assert r.update({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "in_progress"}) == []
    end = r.update(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "a.txt\nb.txt"}}],
        }
    )
    assert len(end) == 1 and "completed" in end[0]["value"] and "a.txt\nb.txt" in end[0]["value"]
    assert r.update({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed"}) == []
    assert r.close() == []


def test_diff_preview_is_a_diff_block():
    r = TurnRenderer()
    r.update({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Edit", "kind": "edit", "status": "pending"})
    end = r.update(
        {"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed", "content": [{"type": "diff", "path": "/a", "oldText": "x\n", "newText": "y\n"}]}
    )
    assert "```diff" in end[0]["value"] and "-x" in end[0]["value"] and "+y" in end[0]["value"]


@pytest.mark.parametrize(
    ("content", "block"),
    [
        ({"type": "content", "content": {"type": "text", "text": "before\n```\n# not a heading\n```"}},
         "````\nbefore\n```\n# not a heading\n```\n````"),
        ({"type": "content", "content": {"type": "text", "text": "a ````` run"}}, "``````\na ````` run\n``````"),
        ({"type": "diff", "path": "/a.md", "oldText": "x\n", "newText": "```\n"}, "````diff\n--- /a.md\n+++ /a.md\n@@ -1 +1 @@\n-x\n+```\n````"),
    ],
    ids=["output holding a fence", "output holding five backticks", "a diff adding a fence"],
)
def test_a_preview_holding_backticks_stays_one_code_block(content: dict, block: str) -> None:
    """The agent's text cannot end the preview's block early: its fence is longer than any backtick run inside."""
    r = TurnRenderer()
    r.update({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Run", "kind": "other", "status": "pending"})
    end = r.update({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed", "content": [content]})
    assert block in end[0]["value"]


def test_update_before_create_and_duplicate_create():
    # codex asks before announcing; claude sends two tool_calls with one id (docs/agents.md).
    r = TurnRenderer()
    assert r.update({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "in_progress"}) == []
    first = r.update({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Read", "status": "pending"})
    again = r.update({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Read file", "status": "pending"})
    assert len(first) == 1 and again == []


def test_open_tool_calls_are_closed_at_turn_end():
    r = TurnRenderer()
    r.update({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Long", "status": "in_progress"})
    closed = r.close()
    assert len(closed) == 1 and "ended without a result" in closed[0]["value"]
    assert r.close() == []


def test_placeholder_tool_call_id_of_a_permission_names_no_tool_call():
    """fast-agent asks permissions with toolCallId "pending" when its model answer did
    not stream, one for each call: each keeps its own title and input, none is rendered
    as a tool call or closed at the turn's end; the call it allows comes under its own id."""
    r = TurnRenderer()
    assert r.permission_tool({"toolCallId": "pending", "title": "shell/run_command", "kind": "execute", "status": "pending", "rawInput": {"command": "echo one"}}) == []
    assert r.permission_tool({"toolCallId": "pending", "title": "other/read_thing", "kind": "read", "rawInput": {"path": "a"}}) == []
    assert r.known("pending") is None  # each permission is read from its own request alone
    start = r.update({"sessionUpdate": "tool_call", "toolCallId": "19900b10", "title": "shell/run_command", "kind": "execute", "status": "pending"})
    assert len(start) == 1 and "shell/run_command" in start[0]["value"]
    assert r.close() == [{"type": "text", "value": "\n\n_shell/run_command: ended without a result._\n\n"}]
    assert r.close() == []
    # Any other id is a tool call, created or updated by the permission (codex, claude).
    parts = r.permission_tool({"toolCallId": "call_1", "title": "Run ls", "kind": "execute", "rawInput": {"command": "ls"}})
    assert len(parts) == 1 and "Run ls" in parts[0]["value"]
    assert r.known("call_1") == {"toolCallId": "call_1", "title": "Run ls", "kind": "execute", "rawInput": {"command": "ls"}}


def test_plan_only_when_changed():
    r = TurnRenderer()
    plan = {"sessionUpdate": "plan", "entries": [{"content": "a", "status": "pending", "priority": "high"}]}
    assert "- [ ] a" in r.update(plan)[0]["value"]
    assert r.update(plan) == []
    done = {"sessionUpdate": "plan", "entries": [{"content": "a", "status": "completed", "priority": "high"}]}
    # Only statuses changed: one line with what was just completed, not the plan again.
    assert r.update(done) == [{"type": "text", "value": "\n\n_✓ a_\n\n"}]
    grown = {"sessionUpdate": "plan", "entries": [*done["entries"], {"content": "b", "status": "pending", "priority": "low"}]}
    assert "**Plan**\n- [x] a\n- [ ] b" in r.update(grown)[0]["value"]  # new entries: the plan in full


def test_unknown_and_invalid_updates_are_skipped_not_fatal():
    warnings: list[str] = []
    r = TurnRenderer(warnings.append)
    assert r.update({"sessionUpdate": "future_kind", "x": 1}) == []
    assert r.update({"sessionUpdate": "usage_update", "used": None}) == []  # known, nothing to show
    assert r.update({"sessionUpdate": "agent_message_chunk"}) == []  # required content missing
    assert r.update("not an object") == []
    # a bad optional field is dropped, the rest of the update survives
    parts = r.update({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "T", "status": "pending", "locations": "bad"})
    assert len(parts) == 1
    assert r.update(chunk("agent_message_chunk", "still here")) == [{"type": "text", "value": "still here"}]
    assert any("future_kind" in w for w in warnings)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["tool_call", "tool_call_update"]),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from([None, "pending", "in_progress", "completed", "failed"]),
            st.sampled_from([None, "Title"]),
        ),
        max_size=40,
    )
)
def test_each_tool_call_renders_at_most_twice(updates):
    r = TurnRenderer()
    counts: dict[str, int] = {}
    for kind, tid, status, title in updates:
        raw = {"sessionUpdate": kind, "toolCallId": tid, "title": title or ("" if kind == "tool_call" else None), "status": status}
        raw = {k: v for k, v in raw.items() if v is not None}
        counts[tid] = counts.get(tid, 0) + len(r.update(raw))
    for tid, n in counts.items():
        assert n <= 2, (tid, n)


def _m(role, *content):
    return Message.model_validate({"role": role, "content": list(content)})


def test_prompt_blocks_with_context_and_images():
    context = [
        _m("user", {"type": "text", "value": "earlier question"}),
        _m("assistant", {"type": "text", "value": "earlier answer"}, {"type": "tool_call", "callId": "c", "name": AGENT_ACTION_TOOL, "input": {"title": "Run ls"}}),
        _m("user", {"type": "tool_result", "callId": "c", "content": [{"type": "text", "value": "tok"}]}),
    ]
    prompt = [_m("user", {"type": "text", "value": "now this"}, {"type": "data", "mimeType": "image/png", "data": "aGVsbG8="}, {"type": "data", "mimeType": "cache_control", "data": "eA=="})]
    blocks = prompt_blocks(context, prompt, images=True)
    assert blocks[0]["text"].startswith(CONTEXT_OPEN) and "earlier answer" in blocks[0]["text"] and "asked permission: Run ls" in blocks[0]["text"]
    assert blocks[1] == {"type": "text", "text": "now this"}
    assert blocks[2] == {"type": "image", "mimeType": "image/png", "data": "aGVsbG8="}
    assert len(blocks) == 3  # cache_control dropped
    no_images = prompt_blocks((), prompt, images=False)
    assert no_images[1] == {"type": "text", "text": "[image omitted: image/png, 5 bytes]"}


CACHE_CONTROL = {"type": "data", "mimeType": "cache_control", "data": "ZXBoZW1lcmFs"}  # 9 bytes: "ephemeral", as Copilot sends it


def test_a_fresh_sessions_context_holds_no_copilot_markers():
    """Copilot's cache_control/stateful_marker parts (beside the current turn and every tool
    result, and inside results) are nothing anyone wrote or attached: the context a fresh
    session is told holds none of them, while a real attachment and a result's JSON data
    are still told."""
    context = [
        _m("user", {"type": "text", "value": "<userRequest>\nremember kiwi\n</userRequest>"}, CACHE_CONTROL, {"type": "data", "mimeType": "image/png", "data": "aGVsbG8="}),
        _m("assistant", {"type": "text", "value": "noted"}, {"type": "tool_call", "callId": "t", "name": "search", "input": {"q": "x"}}),
        _m(
            "user",
            {"type": "tool_result", "callId": "t", "content": [{"type": "text", "value": "found"}, CACHE_CONTROL, {"type": "data", "mimeType": "application/json", "data": "e30="}]},
            CACHE_CONTROL,
            {"type": "data", "mimeType": "stateful_marker", "data": "eA=="},
        ),
    ]
    (head, prompt) = prompt_blocks(context, [_m("user", {"type": "text", "value": "and now?"}, CACHE_CONTROL)], images=True)
    told = head["text"]
    assert "remember kiwi" in told and "found" in told and "[attachment: image/png, 5 bytes]" in told and "[application/json, 2 bytes]" in told, told
    assert "cache_control" not in told and "stateful_marker" not in told and "9 bytes" not in told, told
    assert prompt == {"type": "text", "text": "and now?"}


# codex-acp 2.6.0 (its dist/index.js, CommandReporter.permission): a command asking for network
# access has the access it asks for as its permission's content; the command's output comes in
# _meta.terminal_output (core.live), its end's rawOutput holds no output.
CODEX_PERMISSION_CALL = {
    "toolCallId": "call_1", "kind": "execute", "status": "pending", "title": "curl https://example.com",
    "content": [{"type": "content", "content": {"type": "text", "text": "https access to example.com"}}],
    "rawInput": {"command": "curl https://example.com", "cwd": "/w"},
}
CODEX_DONE = {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "failed", "rawOutput": {"exit_code": 3}}


def test_codex_s_permission_content_is_never_the_calls_output():
    from lmbridge.core.profiles import CODEX

    r = TurnRenderer(profile=CODEX)
    shown = "".join(p["value"] for p in r.permission_tool(CODEX_PERMISSION_CALL))
    shown += "".join(p["value"] for p in r.update({"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "curl https://example.com", "kind": "execute", "status": "in_progress"}))
    shown += "".join(p["value"] for p in r.update(CODEX_DONE))
    assert "access to example.com" not in shown, shown
    assert "✗ **curl https://example.com** (execute) failed" in shown, shown
    # The permission's own fields are still known to the card (permissions.read merges them).
    assert r.known("call_1")["rawInput"] == CODEX_PERMISSION_CALL["rawInput"]


def test_without_the_profile_flag_a_permissions_content_is_the_calls():
    r = TurnRenderer()
    r.permission_tool(CODEX_PERMISSION_CALL)
    shown = "".join(p["value"] for p in r.update(CODEX_DONE))
    assert "https access to example.com" in shown  # an agent without the quirk: content is content


def test_a_declined_call_left_open_closes_as_declined():
    r = TurnRenderer()
    r.permission_tool(CODEX_PERMISSION_CALL)
    r.permission_tool({"toolCallId": "call_2", "kind": "execute", "title": "touch b", "status": "pending"})
    r.declined("call_1")
    r.declined("never-announced")  # nothing to mark
    r.declined(["not", "an", "id"])
    closed = "".join(p["value"] for p in r.close())
    assert "✗ **curl https://example.com** (execute) declined" in closed and "_touch b: ended without a result._" in closed, closed
    assert r.close() == []


def test_a_huge_diff_is_summarised_not_computed():
    r = TurnRenderer()
    old = "\n".join(f"line {i}" for i in range(30_000))
    new = "\n".join(f"line {i}!" for i in range(30_000))
    call = {"sessionUpdate": "tool_call", "toolCallId": "d", "title": "Rewrite big.txt", "kind": "edit", "status": "completed",
            "content": [{"type": "diff", "path": "/w/big.txt", "oldText": old, "newText": new}]}
    text = "".join(p["value"] for p in r.update(call))
    assert "/w/big.txt: 30000 → 30000 lines (too long to show as a diff)" in text and "```diff" not in text


# What the agents send for a call the user skipped (seen on the wire, 2026-11-28): each call's
# start, then its end. Skipped, it reads "✗ … declined" whatever status it ends with.
CLAUDE_101_SKIPPED = (
    {"sessionUpdate": "tool_call", "toolCallId": "toolu_1", "title": "touch m", "kind": "execute", "status": "pending", "_meta": {"claudeCode": {"toolName": "Bash"}}},
    {"sessionUpdate": "tool_call_update", "toolCallId": "toolu_1", "status": "failed", "rawOutput": "User refused permission to run tool",
     "content": [{"type": "content", "content": {"type": "text", "text": "```\nUser refused permission to run tool\n```"}}],
     "_meta": {"claudeCode": {"toolName": "Bash", "nonExecutionKind": "permission-rule"}}},
)
CODEX_26_SKIPPED = (
    {"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "touch m", "kind": "execute", "status": "in_progress", "content": [{"type": "terminal", "terminalId": "call_1"}]},
    {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "failed", "_meta": {"terminal_exit": {"exit_code": None, "signal": None, "terminal_id": "call_1"}}},
)
SKIPPED_ROWS = [
    ("claude 0.101: failed, its refusal shown", CLAUDE_101_SKIPPED, "failed", "User refused permission to run tool"),
    ("codex 2.6: failed", CODEX_26_SKIPPED, "failed", None),
    ("an agent that says completed", (CODEX_26_SKIPPED[0], {**CODEX_26_SKIPPED[1], "status": "completed"}), "completed", None),
]


@pytest.mark.parametrize(("row", "updates", "status", "preview"), SKIPPED_ROWS, ids=[r[0] for r in SKIPPED_ROWS])
def test_a_call_the_user_skipped_reads_declined_whatever_its_status(row: str, updates: tuple[dict, ...], status: str, preview: str | None) -> None:
    r = TurnRenderer()
    r.update(updates[0])
    r.declined(updates[0]["toolCallId"])
    end = "".join(p["value"] for p in r.update(updates[1]))
    assert "✗ **touch m** (execute) declined" in end and f" {status}" not in end, end
    assert preview is None or preview in end
    assert r.close() == []  # ended once
    # Not skipped, the same end reads as the agent says.
    r = TurnRenderer()
    r.update(updates[0])
    assert f"**touch m** (execute) {status}" in "".join(p["value"] for p in r.update(updates[1]))
