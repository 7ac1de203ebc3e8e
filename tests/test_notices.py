"""An agent's notices apart from its answer, its housekeeping tools shown quietly, and what
the daemon cannot use counted, never logged per update (core/notices.py, core/present.py), pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.acp.process import client_capabilities
from lmbridge.core import notices
from lmbridge.core.messages import Message
from lmbridge.core.notices import Notice
from lmbridge.core.present import Skipped, TurnRenderer
from lmbridge.core.transcript import prompt_blocks
from lmbridge.devtools.client import assistant, text_of, user


def informational(text: str, level: str = "warning") -> dict:
    """claude-agent-acp 0.101's notice to a client without ``session.notices``."""
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}, "_meta": {"claudeCode": {"kind": "informational", "level": level}}}


# (the update, the notice it carries)
OF_UPDATE = [
    (
        {"sessionUpdate": "notice", "severity": "warning", "title": "Codex warning", "description": "model x is not in the catalogue"},
        Notice("warning", "Codex warning", "model x is not in the catalogue"),
    ),
    ({"sessionUpdate": "notice", "severity": "info", "title": "Model rerouted"}, Notice("info", "Model rerouted")),
    ({"sessionUpdate": "notice", "severity": "error", "title": "Quota", "description": None}, Notice("error", "Quota")),
    ({"sessionUpdate": "notice", "severity": "_custom", "title": "T"}, Notice("_custom", "T")),
    ({"sessionUpdate": "notice", "title": "no severity"}, Notice("info", "no severity")),
    ({"sessionUpdate": "notice", "severity": "info", "description": "only a description"}, Notice("info", "Notice", "only a description")),
    ({"sessionUpdate": "notice", "severity": "info", "title": 7, "description": ["x"]}, None),  # nothing readable
    ({"sessionUpdate": "notice", "severity": "info", "title": "   "}, None),
    (informational("**Warning:** model is unknown"), Notice("warning", "**Warning:** model is unknown")),
    (informational("Hook blocked\nbecause of policy", "notice"), Notice("info", "Hook blocked", "because of policy")),
    (informational("plain info", "info"), Notice("info", "plain info")),
    (informational(""), None),
    # Not notices: the agent's answer, and look-alikes.
    ({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}, None),
    ({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}, "_meta": {"claudeCode": {"kind": "other"}}}, None),
    ({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}, "_meta": {"claudeCode": "informational"}}, None),
    ({"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "", "mimeType": "image/png"}, "_meta": {"claudeCode": {"kind": "informational"}}}, None),
    ({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}, "_meta": {"claudeCode": {"kind": "informational"}}}, None),
    ([1, 2], None),
    (None, None),
]


@pytest.mark.parametrize(("raw", "notice"), OF_UPDATE)
def test_which_updates_are_notices(raw: object, notice: Notice | None) -> None:
    assert notices.of_update(raw) == notice


# (notice, what the user reads)
RENDER = [
    (Notice("warning", "Codex warning", "model x"), "\n\n> ⚠ Codex warning — model x\n\n"),
    (Notice("info", "Model rerouted"), "\n\n> ⓘ Model rerouted\n\n"),
    (Notice("error", "Quota"), "\n\n> ⛔ Quota\n\n"),
    (Notice("_custom", "T"), "\n\n> ⓘ T\n\n"),
    # Plain text: nothing renders as markdown, a link or HTML; lines stay in the quote.
    (Notice("info", "**bold** [x](http://e) <img>"), "\n\n> ⓘ \\*\\*bold\\*\\* \\[x\\]\\(http://e\\) \\<img\\>\n\n"),
    (Notice("warning", "T", "line one\n\n# line two\n> three"), "\n\n> ⚠ T — line one\n> \\# line two\n> \\> three\n\n"),
]


@pytest.mark.parametrize(("notice", "shown"), RENDER)
def test_what_the_user_reads(notice: Notice, shown: str) -> None:
    assert notices.render(notice) == shown
    assert notices.strip(shown).strip() == ""


@given(st.text(), st.text(), st.sampled_from(["info", "warning", "error", "other"]), st.text(), st.text())
def test_a_notice_is_stripped_whole_from_any_answer_around_it(title: str, description: str, severity: str, before: str, after: str) -> None:
    shown = notices.render(Notice(severity, title.strip() or "T", description.strip()))
    assert notices.MARKS.get(severity, "ⓘ") in shown
    # Whatever text surrounds it, the notice goes and nothing of the notice is left.
    stripped = notices.strip(before + shown + after)
    assert shown.strip() not in stripped


# (an answer as VS Code re-sends it, what a fresh session is told of it)
STRIP = [
    ("Done.\n\n> ⚠ Codex warning — model x\n\nThe file is written.", "Done.\n\n\nThe file is written."),
    ("> ⓘ Model rerouted\n", ""),
    ("> ⚠️ with a variation selector\n", ""),
    ("> a quote of the model's own\n", "> a quote of the model's own\n"),
    ("no quote ⚠ at all", "no quote ⚠ at all"),
    ("> ⚠ T — one\n> two\nafter", "after"),
]


@pytest.mark.parametrize(("text", "told"), STRIP)
def test_what_is_told_again(text: str, told: str) -> None:
    assert notices.strip(text) == told


def test_a_notice_is_a_part_apart_and_never_told_again_as_the_agents_words() -> None:
    r = TurnRenderer()
    answer = r.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hello."}})
    shown = r.update(informational("**Warning:** claude-x is not a model this API knows"))
    assert answer == [{"type": "text", "value": "Hello."}]
    assert shown == [{"type": "text", "value": "\n\n> ⚠ \\*\\*Warning:\\*\\* claude-x is not a model this API knows\n\n"}]
    # VS Code re-sends the answer with the notice in it (one text part, or several): a
    # fresh session is told the answer without it.
    for content in ([{"type": "text", "value": "Hello." + shown[0]["value"]}], [{"type": "text", "value": "Hello."}, {"type": "text", "value": shown[0]["value"]}]):
        history = [
            Message.model_validate({"role": "user", "content": [{"type": "text", "value": "hi"}]}),
            Message.model_validate({"role": "assistant", "content": content}),
        ]
        context = prompt_blocks(history, [Message.model_validate({"role": "user", "content": [{"type": "text", "value": "next"}]})], images=False)[0]["text"]
        assert "Hello." in context and "Warning" not in context and "⚠" not in context


def test_a_notice_update_shown_and_an_empty_one_skipped() -> None:
    warnings: list[str] = []
    r = TurnRenderer(warnings.append)
    assert r.update({"sessionUpdate": "notice", "severity": "info", "title": "Model rerouted", "description": "to y"}) == [{"type": "text", "value": "\n\n> ⓘ Model rerouted — to y\n\n"}]
    assert r.update({"sessionUpdate": "notice", "severity": "info"}) == [] and warnings == ["notice: no title or description, skipped"]


def test_the_daemon_advertises_notices_and_terminal_auth() -> None:
    caps = client_capabilities(terminal=True)
    # ACP schema 1.21: session.notices an object ({} offers the whole contract), auth.terminal a bool.
    assert caps["session"] == {"notices": {}} and caps["auth"] == {"terminal": True}


def test_claudes_tool_search_is_one_quiet_line() -> None:
    r = TurnRenderer()
    meta = {"claudeCode": {"toolName": "ToolSearch"}}
    start = r.update({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "ToolSearch", "kind": "other", "status": "pending", "_meta": meta})
    assert start == [{"type": "thinking", "value": "ToolSearch\n"}]
    assert (
        r.update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "t1",
                "status": "completed",
                "_meta": meta,
                "content": [{"type": "content", "content": {"type": "text", "text": "vscode__read_file loaded"}}],
            }
        )
        == []
    )
    assert r.close() == []  # not "ended without a result" either
    # Any other of claude's tools is a step the user reads.
    bash = r.update({"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "ls", "kind": "execute", "status": "pending", "_meta": {"claudeCode": {"toolName": "Bash"}}})
    assert "🔧" in bash[0]["value"]


def test_a_command_shown_from_terminal_output_alone() -> None:
    """claude 0.101 sends a finished Bash call's output only as ``_meta.terminal_output``
    (then ``terminal_exit``), codex 2.6 live; neither sends ``rawOutput``."""
    r = TurnRenderer()
    r.update(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "b",
            "title": "echo hi",
            "kind": "execute",
            "status": "in_progress",
            "_meta": {"claudeCode": {"toolName": "Bash"}, "terminal_info": {"terminal_id": "b"}},
        }
    )
    end = r.update(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "b",
            "status": "completed",
            "_meta": {"claudeCode": {"toolName": "Bash"}, "terminal_output": {"terminal_id": "b", "data": "hi\n"}, "terminal_exit": {"terminal_id": "b", "exit_code": 0}},
            "_unknown": {"x": 1},
        }
    )
    text = "".join(p["value"] for p in end)
    assert text == "\n\n````text\nhi\n````\n\n\n\n✓ **echo hi** (execute) completed · exit code 0\n\n", text


# (messages, in order; what ``first`` answers each time)
SKIPPED = [
    (["a"], [True]),
    (["a", "a", "a"], [True, False, False]),
    (["a", "b", "a", "b"], [True, True, False, False]),
]


@pytest.mark.parametrize(("messages", "first"), SKIPPED)
def test_what_is_logged_at_once(messages: list[str], first: list[bool]) -> None:
    s = Skipped()
    assert [s.first(m) for m in messages] == first


def test_twenty_thousand_of_one_kind_are_one_line_and_a_count() -> None:
    warnings: list[str] = []
    s = Skipped()
    r = TurnRenderer(lambda m: warnings.append(m) if s.first(m) else None)
    for i in range(20_000):
        assert r.update({"sessionUpdate": "future_token_update", "token": i}) == []
    assert warnings == ["session/update: unknown kind 'future_token_update' skipped"]
    assert s.take() == [("session/update: unknown kind 'future_token_update' skipped", 19_999)]
    assert s.take() == []  # told once


def test_kinds_told_apart_are_bounded() -> None:
    s = Skipped()
    said = [s.first(f"kind {i}") for i in range(Skipped.KINDS + 1000)]
    assert said.count(True) == Skipped.KINDS
    assert dict(s.take()) == {Skipped.OTHERS: 1000}


# ---------------------------------------------------------------- through the daemon, with the scripted agent

BOUND = 120.0  # seconds for a chat here: ~2 s idle (docs/reliability.md, "Tests under load")


@pytest.mark.anyio
async def test_an_unknown_kind_streamed_per_token_is_one_warning_and_a_count(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """20,000 updates of a kind the daemon does not know (an agent streaming it per token):
    the answer goes on, and the log says so once, then how many more: not 20,000 lines."""
    flood = [{"update": {"sessionUpdate": "future_token_update", "token": i}} for i in range(20_000)]
    agent = scripted({"turns": [[{"text": "before "}, *flood, {"text": "after"}]]})
    async with daemon(agents=[agent.spec]) as client:
        call = await client.chat(agent.id, [user("flood")], timeout=BOUND)
    assert call.error is None and text_of(call) == "before after"
    log = (tmp_path / "daemon.stderr").read_text(errors="replace").splitlines()
    lines = [line for line in log if "future_token_update" in line]
    assert len(lines) == 2, lines[:5]
    assert "unknown kind 'future_token_update' skipped" in lines[0] and "skipped again" in lines[1] and "count=19999" in lines[1], lines
    assert sum(len(line) for line in log) < 100_000


@pytest.mark.anyio
async def test_a_notice_is_shown_apart_and_a_fresh_session_is_never_told_it(scripted: Any, daemon: Any) -> None:
    """claude-agent-acp's warning without ``session.notices`` (an informational agent message)
    and a ``notice`` update: each its own blockquote in the response, not in the agent's
    sentence; a fresh session told the conversation so far gets the answer without them."""
    agent = scripted({"turns_per_session": True, "turns": [[
        {"text": "The answer"},
        {"update": informational("claude-x is not a model this API knows")},
        {"update": {"sessionUpdate": "notice", "severity": "info", "title": "Model rerouted", "description": "to y"}},
        {"text": " goes on."},
    ]]})  # fmt: skip
    async with daemon(agents=[agent.spec]) as client:
        first = await client.chat(agent.id, [user("hi")], timeout=BOUND)
        assert first.error is None
        assert text_of(first) == "The answer\n\n> ⚠ claude-x is not a model this API knows\n\n\n\n> ⓘ Model rerouted — to y\n\n goes on."
        # VS Code re-sends the answer with the notices in it: the chat goes on in its session
        # (what the daemon emitted, notices included, is what it matches), sent only the new turn.
        going_on = await client.chat(agent.id, [user("hi"), assistant(first.parts), user("go on")], timeout=BOUND)
        assert going_on.error is None
        # The user edits their first message: the history no longer extends the session, and
        # a fresh one is told the conversation so far (docs/architecture.md, "Divergence").
        second = await client.chat(agent.id, [user("hi, edited"), assistant(first.parts), user("next")], timeout=BOUND)
        assert second.error is None
    (init,) = agent.frames("initialize")
    assert init["params"]["clientCapabilities"]["session"] == {"notices": {}}
    prompts = agent.prompts()
    assert [(p["sessionId"], p["text"]) for p in prompts[:2]] == [(prompts[0]["sessionId"], "hi"), (prompts[0]["sessionId"], "go on")]
    assert prompts[2]["sessionId"] != prompts[0]["sessionId"]
    told = prompts[-1]["text"]
    assert "The answer" in told and "goes on." in told, told
    assert "claude-x" not in told and "rerouted" not in told and "⚠" not in told, told


# (a part's value, whether it is one notice whole)
IS_NOTICE = [
    (notices.render(Notice("warning", "T", "d\ne")), True),
    (notices.render(Notice("info", "T")), True),
    ("\n\n> ⚠ hand-made\n\n", True),
    ("Answer" + notices.render(Notice("info", "T")), False),  # merged with the answer: not one notice
    (notices.render(Notice("info", "T")) + "Answer", False),
    ("\n\n> a quote\n\n", False),
    ("plain", False),
    (None, False),
]


@pytest.mark.parametrize(("value", "whole"), IS_NOTICE)
def test_which_parts_are_a_notice_whole(value: object, whole: bool) -> None:
    assert notices.is_notice(value) is whole


def test_a_turn_with_only_a_notice_is_an_answer_without_a_reply() -> None:
    """A notice is not the agent's answer: a turn that sent only a notice still says it ended
    without a reply, and the first turn after a cancel that sent only a notice is the stale
    turn claude-agent-acp ends at once (taken up again), not an answer."""
    from lmbridge.core import turn
    from lmbridge.core.jobs import JobInfo
    from lmbridge.core.profiles import OTHER

    machine = turn.TurnMachine("Claude Code", TurnRenderer(profile=OTHER), drain=5.0, notice=1.0, progress=1.0, buffer_limit=1 << 20)
    machine.handle(turn.NewJob(JobInfo(id=1, answers={}, cancel_first=False, has_prompt=True, messages=(), tools=frozenset(), cancelled=False)))
    machine.handle(turn.Ready(None, False, False))
    machine.handle(turn.Update(informational("a warning")))
    effects = machine.handle(turn.PromptEnded(machine.prompt_seq, stop_reason="end_turn"))
    said = [fx.part["value"] for fx in effects if isinstance(fx, turn.Emit)]
    assert said == ["_Claude Code ended its turn without a reply._"], said


def test_a_stale_turn_after_a_cancel_that_sends_only_a_notice_is_still_the_stale_turn() -> None:
    """claude-agent-acp ends the first prompt after a cancel at once, empty (docs/agents.md,
    "Quirks"); claude 0.101 behind a gateway adds a notice to each turn: still empty."""
    from lmbridge.core import turn
    from tests.test_turn import after_cancel, of

    d = after_cancel()
    d(turn.Update(informational("the gateway cannot bill auto mode")))
    fx = d(turn.PromptEnded(d.prompt().seq, "end_turn"))
    assert [n.reason for n in of(fx, turn.NewSession)] == ["the first turn after a cancel failed"], fx
    assert not of(fx, turn.Finish | turn.Fail)


def test_the_same_notice_again_in_a_session_is_not_shown_again() -> None:
    r = TurnRenderer()
    warning = {"sessionUpdate": "notice", "severity": "warning", "title": "Claude reported a warning", "description": "auto mode billing"}
    assert len(r.update(warning)) == 1
    r.close()  # the turn ends; the session goes on
    assert r.update(warning) == []
    assert r.update(informational("Claude reported a warning\nauto mode billing")) == []  # the same words, either way
    assert len(r.update({**warning, "description": "something else"})) == 1
    assert len(TurnRenderer().update(warning)) == 1  # another session: shown
