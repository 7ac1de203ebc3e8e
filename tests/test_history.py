"""The history core, walked row by row (after h11's test_state.py), plus
hypothesis properties over random conversations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.core.history import CLASSIFICATION, Fingerprint, HistoryCore, HistoryError, Kind, Last, PendingCall, conversation
from lmbridge.core.messages import VSCODE_SKIP_TEXT, Message, ToolResultPart
from lmbridge.core.permissions import ACTION_TOOL as AGENT_ACTION_TOOL
from lmbridge.core.permissions import Answer


def u(text: str) -> Message:
    return Message.model_validate({"role": "user", "content": [{"type": "text", "value": text}]})


def sysm(text: str) -> Message:
    return Message.model_validate({"role": "system", "content": [{"type": "text", "value": text}]})


def a(text: str, *calls: str) -> Message:
    content = [{"type": "text", "value": text}] if text else []
    content += [{"type": "tool_call", "callId": c, "name": AGENT_ACTION_TOOL, "input": {}} for c in calls]
    return Message.model_validate({"role": "assistant", "content": content})


def tr(call_id: str, text: str) -> Message:
    return Message.model_validate(
        {"role": "user", "content": [{"type": "tool_result", "callId": call_id, "content": [{"type": "text", "value": text}]}]}
    )


def fp(msg: Message) -> Fingerprint:
    return Fingerprint.of_message(msg)


def start(core: HistoryCore, first: str = "hello", answer: Message | None = None, *, last=Last.DONE, pending=()) -> tuple[str, list[Message]]:
    """A new chat whose first response was ``answer``; returns (session id, history)."""
    turn = core.begin("m", [u(first)], 0)
    assert turn.kind is Kind.NEW_CHAT and turn.fresh
    answer = answer or a(f"answer to {first}")
    core.end(turn.session_id, fp(answer), last, list(pending), 1)
    return turn.session_id, [u(first), answer]


# ---------------------------------------------------------------- the table


def test_table_covers_every_combination():
    assert set(CLASSIFICATION) == {(ack, last, new) for ack in (True, False) for last in Last for new in (True, False)}


def test_new_chat_single_user_message_even_if_text_equals_another_chat():
    core = HistoryCore()
    s1, _ = start(core, "same")
    turn = core.begin("m", [sysm("copilot"), u("same")], 2)
    assert turn.kind is Kind.NEW_CHAT and turn.session_id != s1
    assert turn.prompt == (u("same"),) and turn.context == ()


@pytest.mark.parametrize(
    ("before", "kind"),
    [
        ([], Kind.NEW_CHAT),  # the words alone
        (["<repoMemory>\nnone yet\n</repoMemory>"], Kind.NEW_CHAT),  # Copilot's global context first (seen, Copilot 0.67)
        (["<environment_info>linux</environment_info>\n<workspace_info>w</workspace_info>"], Kind.NEW_CHAT),
        (["<userRequest>\nearlier words\n</userRequest>"], Kind.DIVERGENCE),  # a turn stopped before any answer
        (["plain earlier words"], Kind.DIVERGENCE),
    ],
)
def test_new_chat_when_the_last_message_holds_the_only_words(before: list[str], kind: Kind):
    core = HistoryCore()
    turn = core.begin("m", [sysm("copilot"), *map(u, before), u("<userRequest>\nfirst words\n</userRequest>")], 0)
    assert (turn.kind, turn.fresh) == (kind, True)
    assert turn.prompt == (u("<userRequest>\nfirst words\n</userRequest>"),)


def test_continuation_sends_only_the_new_message():
    core = HistoryCore()
    sid, hist = start(core)
    turn = core.begin("m", hist + [u("next")], 2)
    assert (turn.kind, turn.session_id, turn.fresh) == (Kind.CONTINUATION, sid, False)
    assert turn.prompt == (u("next"),) and turn.context == () and not turn.cancel_first


def test_tool_results_exact_token_allows():
    core = HistoryCore()
    sid, hist = start(core, "go", a("asking", "c1"), last=Last.PENDING, pending=[PendingCall("c1", "T1")])
    turn = core.begin("m", hist + [tr("c1", "  T1\n")], 2)
    assert turn.kind is Kind.TOOL_RESULTS and turn.session_id == sid
    assert turn.answers == {"c1": Answer.ALLOW} and turn.prompt == () and not turn.cancel_first


@pytest.mark.parametrize("text", [VSCODE_SKIP_TEXT, "", "T2", "T1 and more", "t1"])
def test_tool_results_anything_but_the_token_rejects(text):
    core = HistoryCore()
    _, hist = start(core, "go", a("asking", "c1"), last=Last.PENDING, pending=[PendingCall("c1", "T1")])
    turn = core.begin("m", hist + [tr("c1", text)], 2)
    assert turn.kind is Kind.TOOL_RESULTS and turn.answers == {"c1": Answer.REJECT}


def test_tool_results_each_permission_answered_on_its_own():
    core = HistoryCore()
    pending = [PendingCall("c1", "T1"), PendingCall("c2", "T2"), PendingCall("c3", "T3")]
    _, hist = start(core, "go", a("asking", "c1", "c2", "c3"), last=Last.PENDING, pending=pending)
    # Copilot keeps only tool calls that have a result (docs/vscode.md, "Kept rounds"): c3 has none.
    turn = core.begin("m", hist + [tr("c1", "T1"), tr("c2", VSCODE_SKIP_TEXT)], 2)
    assert turn.kind is Kind.TOOL_RESULTS
    assert turn.answers == {"c1": Answer.ALLOW, "c2": Answer.REJECT, "c3": Answer.CANCELLED}


def test_a_token_of_another_call_rejects():
    core = HistoryCore()
    pending = [PendingCall("c1", "T1"), PendingCall("c2", "T2")]
    _, hist = start(core, "go", a("", "c1", "c2"), last=Last.PENDING, pending=pending)
    turn = core.begin("m", hist + [tr("c1", "T2"), tr("c2", "T1")], 2)
    assert turn.answers == {"c1": Answer.REJECT, "c2": Answer.REJECT}


def test_soft_cancel_token_plus_new_content_never_approves():
    core = HistoryCore()
    sid, hist = start(core, "go", a("asking", "c1"), last=Last.PENDING, pending=[PendingCall("c1", "T1")])
    turn = core.begin("m", hist + [tr("c1", "T1"), u("actually, do something else")], 2)
    assert (turn.kind, turn.session_id) == (Kind.SOFT_CANCEL, sid)
    assert turn.answers == {"c1": Answer.CANCELLED} and turn.cancel_first
    assert turn.prompt == (u("actually, do something else"),)


def test_stopped_absent_tool_call_cancels_and_prompts():
    core = HistoryCore()
    sid, hist = start(core)
    turn = core.begin("m", hist + [u("write it")], 2)
    core.end(sid, fp(a("asking", "c1")), Last.PENDING, [PendingCall("c1", "T1")], 3)
    # Stop pressed at the confirmation: the round is gone, the user message stays.
    turn = core.begin("m", hist + [u("write it"), u("never mind")], 4)
    assert (turn.kind, turn.session_id) == (Kind.STOPPED, sid)
    assert turn.answers == {"c1": Answer.CANCELLED} and turn.cancel_first
    assert turn.prompt == (u("never mind"),) and turn.context == ()


def test_stopped_first_turn_is_matched_by_user_messages():
    core = HistoryCore()
    sid, _ = start(core, "please write notes", a("asking", "c1"), last=Last.PENDING, pending=[PendingCall("c1", "T")])
    turn = core.begin("m", [sysm("changed"), u("please write notes"), u("stop that")], 2)
    assert (turn.kind, turn.session_id) == (Kind.STOPPED, sid)


def test_cancelled_then_new_prompt_continues_the_session():
    core = HistoryCore()
    sid, _ = start(core, "long story", a("once upon"), last=Last.CANCELLED)
    turn = core.begin("m", [u("long story"), u("shorter please")], 2)
    assert (turn.kind, turn.session_id) == (Kind.CONTINUATION, sid)
    assert turn.prompt == (u("shorter please"),) and not turn.cancel_first


def test_cancelled_partial_answer_kept_by_vscode_continues():
    core = HistoryCore()
    sid, hist = start(core, "long story", a("once upon"), last=Last.CANCELLED)
    turn = core.begin("m", hist + [u("go on")], 2)
    assert (turn.kind, turn.session_id) == (Kind.CONTINUATION, sid)


def _stopped(parts: list[str], kept: int, last: Last) -> tuple[HistoryCore, str, list[Message]]:
    """A chat whose response streamed ``parts`` and ended ``last``, its fingerprint as the
    session actor builds it (digests at part boundaries for a stopped one), and the history
    VS Code re-sends when it kept the first ``kept`` parts."""
    import hashlib

    from lmbridge.core.history import PREFIXES, squeezed

    core = HistoryCore()
    turn = core.begin("m", [u("tell me slowly")], 0)
    text, prefixes = hashlib.blake2b(digest_size=16), []
    for i, part in enumerate(parts):
        if i:
            prefixes.append(text.digest())
        text.update(squeezed(part))
    stopped = last is Last.CANCELLED
    core.end(turn.session_id, Fingerprint(text.digest(), (), None, tuple(prefixes[-PREFIXES:]) if stopped else ()), last, [], 1)
    return core, turn.session_id, [u("tell me slowly"), a("".join(parts[:kept]))]


@pytest.mark.parametrize(("count", "kept"), [(17, 9), (17, 15), (17, 16), (17, 17), (3, 1), (3, 2), (29, 5)])
def test_a_stopped_answer_vscode_kept_up_to_a_part_boundary_continues(count: int, kept: int) -> None:
    """Stop catches parts in flight: VS Code drops the parts that reach it after Stop, so it
    re-sends the stopped answer cut at a part boundary (one of the last PREFIXES). That is
    still the session's answer."""
    parts = [f"chunk {i} " for i in range(1, count + 1)]
    core, sid, hist = _stopped(parts, kept, Last.CANCELLED)
    turn = core.begin("m", hist + [u("and now hello")], 2)
    assert (turn.kind, turn.session_id) == (Kind.CONTINUATION, sid)
    assert turn.prompt == (u("and now hello"),)


def test_only_a_stopped_answer_matches_a_prefix() -> None:
    """A finished answer VS Code shows cut is not ours (an edit): a divergence, as before;
    and a stopped answer cut inside a part, or more than PREFIXES parts back, is not matched."""
    parts = [f"chunk {i} " for i in range(1, 18)]
    core, _, hist = _stopped(parts, 16, Last.DONE)
    assert core.begin("m", hist + [u("and now hello")], 2).kind is Kind.DIVERGENCE
    core, _, hist = _stopped(parts, 17, Last.CANCELLED)
    cut = [hist[0], a("".join(parts)[:-3])]
    assert core.begin("m", cut + [u("and now hello")], 2).kind is Kind.DIVERGENCE
    from lmbridge.core.history import PREFIXES

    many = [f"chunk {i} " for i in range(1, PREFIXES + 10)]
    core, _, hist = _stopped(many, len(many) - PREFIXES - 1, Last.CANCELLED)
    assert core.begin("m", hist + [u("and now hello")], 2).kind is Kind.DIVERGENCE


@pytest.mark.parametrize("last", [Last.CANCELLED, Last.PENDING])
@pytest.mark.parametrize("partial", ["with output", "before any output"])
def test_a_stopped_turn_dropped_whole_continues_the_session(last: Last, partial: str):
    """A Stop while an approved command runs (CANCELLED), or at the turn's second card
    (PENDING): VS Code may drop the stopped turn whole, its first round (the card and its
    answer) with it. The session goes on (its agent keeps what it did); only the new words
    are prompted, and the dropped rounds are forgotten."""
    core = HistoryCore()
    sid, hist = start(core, "one")
    core.begin("m", hist + [u("run it")], 2)
    core.end(sid, fp(a("asking", "c1")), Last.PENDING, [PendingCall("c1", "T1")], 3)
    core.begin("m", hist + [u("run it"), a("asking", "c1"), tr("c1", "T1")], 4)  # Allow
    stopped = a("running the command" if partial == "with output" else "", *(["c2"] if last is Last.PENDING else []))
    core.end(sid, fp(stopped), last, [PendingCall("c2", "T2")] if last is Last.PENDING else [], 5)
    turn = core.begin("m", hist + [u("run it"), u("never mind")], 6)
    assert (turn.kind, turn.session_id, turn.fresh) == (Kind.CONTINUATION if last is Last.CANCELLED else Kind.STOPPED, sid, False)
    assert turn.prompt == (u("never mind"),) and turn.context == ()
    assert turn.answers == ({"c2": Answer.CANCELLED} if last is Last.PENDING else {})
    core.end(sid, fp(a("ok")), Last.DONE, [], 7)
    nxt = core.begin("m", hist + [u("run it"), u("never mind"), a("ok"), u("next")], 8)
    assert (nxt.kind, nxt.session_id, nxt.prompt) == (Kind.CONTINUATION, sid, (u("next"),))
    assert core.plan("m", hist + [u("run it"), a("asking", "c1"), tr("c1", "T1"), u("x")]).session_id is None  # forgotten


def test_a_finished_turn_dropped_whole_is_a_divergence():
    """Only a stopped turn may be dropped: a finished one dropped is an edit or a regenerate."""
    core = HistoryCore()
    sid, hist = start(core, "one")
    core.begin("m", hist + [u("run it")], 2)
    core.end(sid, fp(a("asking", "c1")), Last.PENDING, [PendingCall("c1", "T1")], 3)
    core.begin("m", hist + [u("run it"), a("asking", "c1"), tr("c1", "T1")], 4)
    core.end(sid, fp(a("done it")), Last.DONE, [], 5)
    turn = core.begin("m", hist + [u("run it"), u("never mind")], 6)
    assert turn.kind is Kind.DIVERGENCE and turn.fresh


def test_the_end_of_a_turn_a_later_request_overtook_is_not_recorded():
    """A new message sent before the Stop of the answer in progress: its request begins
    turn 2 first, then turn 1 ends (stopped). That end is superseded: not placed after the
    new message, and the session stays busy while turn 2 streams; turn 2's end counts, once."""
    core = HistoryCore()
    first = core.begin("m", [u("one")], 0)
    second = core.begin("m", [u("one"), u("two")], 1)
    assert (second.kind, second.session_id, second.number) == (Kind.CONTINUATION, first.session_id, first.number + 1)
    assert not core.end(first.session_id, fp(a("partial")), Last.CANCELLED, [], 2, request=first.number)
    s = core.sessions[first.session_id]
    assert s.busy and len(s.items) == 2 and s.last is Last.DONE
    assert core.end(first.session_id, fp(a("answer two")), Last.DONE, [], 3, request=second.number)
    assert not core.end(first.session_id, fp(a("again")), Last.CANCELLED, [], 4, request=second.number)  # once
    nxt = core.begin("m", [u("one"), u("two"), a("answer two"), u("three")], 5)
    assert (nxt.kind, nxt.session_id, nxt.prompt) == (Kind.CONTINUATION, first.session_id, (u("three"),))


def test_a_stop_recorded_before_the_next_request_is_matched():
    """The Stop first: the stopped partial answer is recorded, so a request that keeps it
    continues the session; the session actor's own later report of the same end is dropped."""
    core = HistoryCore()
    first = core.begin("m", [u("one")], 0)
    assert core.end(first.session_id, fp(a("partial")), Last.CANCELLED, [], 1, request=first.number)
    turn = core.begin("m", [u("one"), a("partial"), u("two")], 2)
    assert (turn.kind, turn.session_id) == (Kind.CONTINUATION, first.session_id)
    assert not core.end(first.session_id, fp(a("partial")), Last.CANCELLED, [], 3, request=first.number)
    assert core.sessions[first.session_id].busy


def test_cancelled_before_any_output_continues():
    core = HistoryCore()
    turn = core.begin("m", [u("q")], 0)
    core.end(turn.session_id, fp(a("")), Last.CANCELLED, [], 1)
    turn2 = core.begin("m", [u("q"), u("again")], 2)
    assert (turn2.kind, turn2.session_id) == (Kind.CONTINUATION, turn.session_id)


@pytest.mark.parametrize(
    "build",
    [
        # regenerate: the last answer dropped, nothing new
        lambda h: h[:-1],
        # edit the last user message after a finished answer
        lambda h: h[:-2] + [u("edited")],
        # an earlier turn edited: history shorter than what the agent saw
        lambda h: h[:1],
        # the last answer written by another model
        lambda h: h[:-1] + [a("someone else wrote this"), u("next")],
    ],
)
def test_divergence_starts_fresh_with_the_conversation_as_context(build):
    core = HistoryCore()
    sid, hist = start(core, "one")
    turn = core.begin("m", hist + [u("two")], 2)
    core.end(sid, fp(a("answer two")), Last.DONE, [], 3)
    hist = hist + [u("two"), a("answer two")]
    req = build(hist)
    if req[-1].role != "user":
        req = req + [u("more")]
    turn = core.begin("m", req, 4)
    assert turn.fresh and turn.session_id != sid
    if len(conversation(req)) > 1:
        assert turn.kind is Kind.DIVERGENCE
    assert turn.context + turn.prompt == tuple(conversation(req))


def test_stop_then_retry_is_divergence():
    core = HistoryCore()
    sid, hist = start(core, "write", a("asking", "c1"), last=Last.PENDING, pending=[PendingCall("c1", "T")])
    turn = core.begin("m", [u("zero"), a("answer to zero"), u("write")], 2)  # unrelated: no match
    assert turn.fresh
    turn = core.begin("m", hist[:1] + [u("retry")], 3)
    assert turn.kind is Kind.STOPPED  # matched by user messages; new content → a new prompt


def test_tool_result_for_an_unknown_call_after_done_is_divergence():
    core = HistoryCore()
    sid, hist = start(core)
    turn = core.begin("m", hist + [tr("someone-elses", "r")], 2)
    assert turn.kind is Kind.DIVERGENCE and turn.fresh


def test_rerendered_system_and_user_text_still_match():
    core = HistoryCore()
    turn = core.begin("m", [sysm("prompt v1"), u("<context>editor: a.py</context>\nfix the bug")], 0)
    core.end(turn.session_id, fp(a("Fixed it.")), Last.DONE, [], 1)
    req = [sysm("prompt v2, longer"), u("fix the bug"), a("Fixed  it. "), u("<context>editor: b.py</context>\nthanks")]
    turn2 = core.begin("m", req, 2)
    assert (turn2.kind, turn2.session_id) == (Kind.CONTINUATION, turn.session_id)
    assert turn2.prompt == (req[-1],)


def test_two_chats_with_identical_answers_do_not_cross():
    core = HistoryCore()
    s1, h1 = start(core, "first chat question", a("ok"))
    s2, h2 = start(core, "second chat question", a("ok"))
    assert core.begin("m", h1 + [u("more 1")], 2).session_id == s1
    assert core.begin("m", h2 + [u("more 2")], 2).session_id == s2


def test_other_model_is_separate():
    core = HistoryCore()
    sid, hist = start(core)
    turn = core.begin("other-model", hist + [u("next")], 2)
    assert turn.fresh and turn.session_id != sid


def test_empty_response_is_not_recorded():
    core = HistoryCore()
    turn = core.begin("m", [u("q")], 0)
    core.end(turn.session_id, fp(a("")), Last.DONE, [], 1)
    assert core.sessions[turn.session_id].items[-1].role == "user"
    turn2 = core.begin("m", [u("q"), a(""), u("q2")], 2)
    assert (turn2.kind, turn2.session_id) == (Kind.CONTINUATION, turn.session_id)


def test_requests_must_end_with_a_user_message():
    core = HistoryCore()
    with pytest.raises(HistoryError):
        core.begin("m", [u("q"), a("x")], 0)
    with pytest.raises(HistoryError):
        core.begin("m", [sysm("only system")], 0)


def test_forget_and_idle():
    core = HistoryCore()
    s1, h1 = start(core, "a1")
    assert core.idle(now=100, max_idle=10) == [s1]
    assert core.idle(now=5, max_idle=10) == []
    core.forget(s1)
    turn = core.begin("m", h1 + [u("again")], 200)
    assert turn.kind is Kind.DIVERGENCE and turn.fresh  # evicted: fresh with context
    assert turn.context == tuple(h1)


def test_end_unknown_session_raises():
    with pytest.raises(HistoryError):
        HistoryCore().end("nope", fp(a("x")), Last.DONE, [], 0)


# ---------------------------------------------------------------- properties

TOKENS = ["T0", "T1", "T2", "T3"]


@st.composite
def scripts(draw):
    """A random conversation: each step is what the next request does."""
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        steps.append(
            draw(
                st.fixed_dictionaries(
                    {
                        "perms": st.integers(0, 3),  # permissions the response ends on
                        "results": st.lists(st.sampled_from(["token", "other-token", "skip", "empty", "absent"]), min_size=3, max_size=3),
                        "new_content": st.booleans(),
                        "drop_response": st.booleans(),
                        "cancelled": st.booleans(),
                    }
                )
            )
        )
    return steps


@settings(max_examples=300, deadline=None)
@given(scripts(), st.integers(0, 2))
def test_no_approval_without_the_exact_token_and_every_permission_answered_once(steps, n_chats):
    core = HistoryCore()
    issued: dict[str, str] = {}  # callId → token
    answered: dict[str, int] = {}
    counter = 0
    chats = []
    for c in range(n_chats + 1):
        turn = core.begin("m", [u(f"chat {c} start")], 0)
        chats.append({"sid": turn.session_id, "hist": [u(f"chat {c} start")]})
    for i, step in enumerate(steps):
        chat = chats[i % len(chats)]
        # End the previous request with a response, maybe waiting on permissions.
        calls = []
        for _ in range(step["perms"]):
            counter += 1
            calls.append((f"c{counter}", TOKENS[counter % 4]))
            issued[f"c{counter}"] = TOKENS[counter % 4]
        answer = a(f"response {i}", *[c for c, _ in calls])
        last = Last.PENDING if calls else (Last.CANCELLED if step["cancelled"] else Last.DONE)
        session = core.sessions.get(chat["sid"])
        if session is None or not session.busy:
            break
        core.end(chat["sid"], fp(answer), last, [PendingCall(c, t) for c, t in calls], i)
        # Build the next request the way VS Code would.
        req = list(chat["hist"])
        tail: list[Message] = []
        if not step["drop_response"]:
            req.append(answer)
            for (cid, tok), how in zip(calls, step["results"]):
                if how == "absent":
                    continue
                text = {"token": tok, "other-token": tok + "x", "skip": VSCODE_SKIP_TEXT, "empty": ""}[how]
                tail.append(tr(cid, text))
        if step["new_content"] or step["drop_response"] or not calls:
            tail.append(u(f"user says {i}"))
        if not tail:
            tail.append(u(f"user says {i}"))
        req += tail
        turn = core.begin("m", req, i + 0.5)
        # Property 1: ALLOW only with the exact token for that callId and no new user content.
        new_content = any(m.role == "user" and any(p.type == "text" for p in m.content) for m in tail)
        for cid, ans in turn.answers.items():
            answered[cid] = answered.get(cid, 0) + 1
            if ans is Answer.ALLOW:
                results = [p for m in req for p in m.content if isinstance(p, ToolResultPart) and p.callId == cid]
                assert results and results[-1].text() == issued[cid], (cid, turn)
                assert not new_content and not step["drop_response"]
        chat["sid"] = turn.session_id
        chat["hist"] = list(turn.context) + list(turn.prompt) if turn.fresh else req
    # Whatever is still pending is answered once, cancelled, when sessions go.
    for sid in list(core.sessions):
        for p in core.forget(sid).pending:
            answered[p.call_id] = answered.get(p.call_id, 0) + 1
    # Property 2: every permission issued was answered exactly once, or belongs
    # to a session superseded by divergence (left for eviction, then answered).
    assert all(n == 1 for n in answered.values()), answered
    assert set(answered) <= set(issued)


@pytest.mark.parametrize("replay", ["The answer is 4.", "Let me think.The answer is 4."])
def test_thinking_shown_as_text_still_matches(replay):
    # The shim's `lmbridge.thinking: "text"` replays thinking inside the text.
    core = HistoryCore()
    turn = core.begin("m", [u("q")], 0)
    shown = Fingerprint.of_text("Let me think. The answer is 4.").text
    core.end(turn.session_id, Fingerprint(Fingerprint.of_text("The answer is 4.").text, (), shown), Last.DONE, [], 1)
    t = core.begin("m", [u("q"), a(replay), u("next")], 2)
    assert (t.kind, t.session_id) == (Kind.CONTINUATION, turn.session_id)


# ---------------------------------------------------------------- VS Code tool calls (docs/tools.md)


def test_tool_calls_result_skip_absent():
    core = HistoryCore()
    pending = [PendingCall("t1", "", tool=True), PendingCall("t2", "", tool=True), PendingCall("t3", "", tool=True)]
    _, hist = start(core, "go", a("", "t1", "t2", "t3"), last=Last.PENDING, pending=pending)
    turn = core.begin("m", hist + [tr("t1", "found 3"), tr("t2", VSCODE_SKIP_TEXT)], 2)
    assert turn.kind is Kind.TOOL_RESULTS
    assert turn.answers == {"t1": Answer.RESULT, "t2": Answer.DECLINED, "t3": Answer.CANCELLED}
    assert turn.results["t1"].text() == "found 3" and set(turn.results) == {"t1"}


def test_tool_results_plus_new_content_still_delivers_results():
    core = HistoryCore()
    _, hist = start(core, "go", a("", "t1", "p1"), last=Last.PENDING, pending=[PendingCall("t1", "", tool=True), PendingCall("p1", "T")])
    turn = core.begin("m", hist + [tr("t1", "data"), tr("p1", "T"), u("also do this")], 2)
    assert turn.kind is Kind.SOFT_CANCEL and turn.cancel_first
    assert turn.answers == {"t1": Answer.RESULT, "p1": Answer.CANCELLED}  # the tool ran; the action never
    assert turn.prompt == (u("also do this"),)


def test_tool_calls_stopped():
    core = HistoryCore()
    sid, hist = start(core, "go", a("", "t1"), last=Last.PENDING, pending=[PendingCall("t1", "", tool=True)])
    turn = core.begin("m", [u("go"), u("stop it")], 2)
    assert (turn.kind, turn.session_id) == (Kind.STOPPED, sid)
    assert turn.answers == {"t1": Answer.CANCELLED} and turn.cancel_first


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "calls": st.integers(1, 3),
                "outcomes": st.lists(st.sampled_from(["result", "skip", "absent"]), min_size=3, max_size=3),
                "stop": st.booleans(),
                "new_content": st.booleans(),
                "evict": st.booleans(),
            }
        ),
        min_size=1,
        max_size=10,
    )
)
def test_every_mcp_call_gets_exactly_one_result(steps):
    """Over random interleavings of calls, results, skips, stops and evictions,
    each MCP call is resolved exactly once, as the session actor applies Turns."""
    from lmbridge.tools.mcp_bridge import ToolCall, error_result

    core = HistoryCore()
    calls: dict[str, ToolCall] = {}
    resolved: dict[str, int] = {}

    def resolve(call_id: str, how: str) -> None:
        # Every attempt counts: a second answer for one call is the bug looked for.
        resolved[call_id] = resolved.get(call_id, 0) + 1
        assert calls[call_id].resolve(error_result(how)), f"{call_id} answered twice"

    turn = core.begin("m", [u("start")], 0)
    sid, hist = turn.session_id, [u("start")]
    n = 0
    for i, step in enumerate(steps):
        ids = []
        for _ in range(step["calls"]):
            n += 1
            ids.append(f"t{n}")
            calls[f"t{n}"] = ToolCall(f"t{n}", "tool", {})
        answer = a(f"calling {i}", *ids)
        core.end(sid, fp(answer), Last.PENDING, [PendingCall(c, "", tool=True) for c in ids], i)
        if step["evict"]:
            for c in core.forget(sid).pending:  # what eviction does: release them all
                resolve(c.call_id, "closed")
            turn = core.begin("m", [u(f"again {i}")], i + 0.5)
            sid, hist = turn.session_id, [u(f"again {i}")]
            continue
        if step["stop"]:
            req = hist + [u(f"stop {i}")]
        else:
            req = hist + [answer]
            for c, how in zip(ids, step["outcomes"]):
                if how != "absent":
                    req.append(tr(c, VSCODE_SKIP_TEXT if how == "skip" else f"result of {c}"))
            if step["new_content"] or req[-1].role != "user":
                req.append(u(f"more {i}"))
        turn = core.begin("m", req, i + 0.5)
        assert set(turn.answers) == set(ids)
        for c, ans in turn.answers.items():
            resolve(c, ans.value)
            if ans is Answer.RESULT:
                assert c in turn.results and not step["stop"]
        sid = turn.session_id
        hist = list(turn.context) + list(turn.prompt) if turn.fresh else req
    for s in list(core.sessions):
        for c in core.forget(s).pending:
            resolve(c.call_id, "closed")
    assert resolved == {c: 1 for c in calls}


# ---------------------------------------------------------------- chat identity: what is byte-stable

SCAFFOLD = (
    "<environment_info>\nThe user's current OS is: Linux\n</environment_info>\n"
    "<workspace_info>\nI am working in a workspace with the following folders:\n- /work\n</workspace_info>\n"
)
REMINDERS = (
    "<reminderInstructions>\nWhen using the insert_edit_into_file tool, avoid repeating existing code.\n"
    "Prefer the replace_string_in_file tool for making edits.\nDo not ask the user to apply changes.\n"
    "Keep your answers short and impersonal.\n</reminderInstructions>\n"
)


def cur(words: str, date: str = "2026-11-25") -> Message:
    """A user message as Copilot renders the current one: full scaffolding around the words."""
    return u(f"<context>\nThe current date is {date}.\n</context>\n{REMINDERS}<userRequest>\n{words}\n</userRequest>\n")


def past(words: str, date: str = "2026-11-25") -> Message:
    """The same turn replayed later: less scaffolding, the same words."""
    return u(f"<context>\nThe current date is {date}.\n</context>\n<userRequest>\n{words}\n</userRequest>\n")


def copilot_chat(core: HistoryCore, words: str, answer: Message, now: float, **end) -> tuple[str, list[Message]]:
    """A new Copilot chat (system prompt, global context, the rendered turn) answered ``answer``."""
    turn = core.begin("m", [sysm("copilot v1"), u(SCAFFOLD), cur(words)], now)
    assert turn.fresh
    core.end(turn.session_id, fp(answer), end.get("last", Last.DONE), list(end.get("pending", ())), now + 0.5)
    return turn.session_id, [sysm("copilot v2"), u(SCAFFOLD), past(words)]


def test_identical_answers_and_different_words_never_swap():
    # Chat A "remember alpha", chat B "remember bravo", the agent answers "OK" to both;
    # every user message shares most of its lines with every other (Copilot's scaffolding).
    core = HistoryCore()
    sa, ha = copilot_chat(core, "remember alpha", a("OK"), 0)
    sb, hb = copilot_chat(core, "remember bravo", a("OK"), 1)  # B is the more recent
    turn = core.begin("m", ha + [a("OK"), cur("what did I ask you to remember?")], 2)
    assert (turn.kind, turn.session_id) == (Kind.CONTINUATION, sa)
    core.end(sa, fp(a("alpha")), Last.DONE, [], 3)
    turn = core.begin("m", hb + [a("OK"), cur("what did I ask you to remember?")], 4)
    assert (turn.kind, turn.session_id) == (Kind.CONTINUATION, sb)


def test_identical_stopped_turns_with_different_words_never_swap():
    # Every turn stopped at its card: no answer of ours to match on, only the words.
    core = HistoryCore()
    pa, pb = PendingCall("ca", "TA"), PendingCall("cb", "TB")
    sa, ha = copilot_chat(core, "delete build/", a("asking", "ca"), 0, last=Last.PENDING, pending=[pa])
    sb, hb = copilot_chat(core, "delete dist/", a("asking", "cb"), 1, last=Last.PENDING, pending=[pb])
    turn = core.begin("m", ha + [cur("no, keep it")], 2)
    assert (turn.kind, turn.session_id, turn.answers) == (Kind.STOPPED, sa, {"ca": Answer.CANCELLED})
    turn = core.begin("m", hb + [cur("no, keep it")], 3)
    assert (turn.kind, turn.session_id, turn.answers) == (Kind.STOPPED, sb, {"cb": Answer.CANCELLED})


def test_identical_words_and_answers_go_to_a_fresh_session_never_the_other_chats():
    core = HistoryCore()
    sa, ha = copilot_chat(core, "hello", a("Hi."), 0)
    sb, hb = copilot_chat(core, "hello", a("Hi."), 1)
    assert ha == hb  # nothing byte-stable tells the two chats apart
    req = ha + [a("Hi."), cur("and now?")]
    turn = core.begin("m", req, 2)
    assert turn.fresh and turn.session_id not in (sa, sb) and turn.kind is Kind.DIVERGENCE
    assert turn.context + turn.prompt == tuple(conversation(req))  # the conversation as context
    assert not core.sessions[sa].busy and not core.sessions[sb].busy  # neither was touched


def test_identical_chats_are_told_apart_by_what_else_they_hold():
    # Same first words, same answers; A went on before B started: each request holds a
    # turn the other chat's session never saw, or misses one it did.
    core = HistoryCore()
    sa, ha = copilot_chat(core, "hello", a("OK"), 0)
    turn = core.begin("m", ha + [a("OK"), cur("again")], 1)
    assert turn.session_id == sa
    core.end(sa, fp(a("OK")), Last.DONE, [], 2)
    sb, hb = copilot_chat(core, "hello", a("OK"), 3)
    turn = core.begin("m", hb + [a("OK"), cur("something else")], 4)
    assert (turn.kind, turn.session_id) == (Kind.CONTINUATION, sb)
    core.end(sb, fp(a("OK")), Last.DONE, [], 5)
    turn = core.begin("m", ha + [a("OK"), past("again"), a("OK"), cur("and again")], 6)
    assert (turn.kind, turn.session_id) == (Kind.CONTINUATION, sa)


def test_a_session_that_did_not_see_the_answer_that_names_it_is_not_continued():
    # B's session is gone; A's holds the same first turn and answer. B's request also
    # holds a later answer "OK" that A never emitted: it must not go to A.
    core = HistoryCore()
    sa, ha = copilot_chat(core, "hello", a("OK"), 0)
    sb, hb = copilot_chat(core, "hello", a("OK"), 1)
    core.begin("m", hb + [a("OK"), cur("second")], 2)  # ambiguous: fresh session sc
    for sid in list(core.sessions):
        if sid != sa:
            core.forget(sid)
    req = hb + [a("OK"), past("second"), a("OK"), cur("third")]
    turn = core.begin("m", req, 3)
    assert turn.fresh and turn.session_id != sa


@pytest.mark.parametrize(
    "current, replayed",
    [
        (cur("fix the bug"), past("fix the bug")),
        (cur("fix   the\nbug "), past("fix the bug")),  # whitespace is not part of the words
        (u("<context>editor: a.py</context>\nfix the bug"), u("fix the bug")),  # no userRequest
        (cur("<b>literal tags</b> typed"), past("<b>literal tags</b> typed")),
    ],
)
def test_the_users_words_are_matched_however_copilot_renders_them(current, replayed):
    core = HistoryCore()
    turn = core.begin("m", [u(SCAFFOLD), current], 0)
    core.end(turn.session_id, fp(a("done")), Last.DONE, [], 1)
    t2 = core.begin("m", [u(SCAFFOLD + "<repoMemory>changed</repoMemory>\n"), replayed, a("done"), cur("next")], 2)
    assert (t2.kind, t2.session_id) == (Kind.CONTINUATION, turn.session_id)


def test_other_words_before_an_answer_of_ours_diverge():
    core = HistoryCore()
    sid, hist = copilot_chat(core, "fix the bug", a("Fixed."), 0)
    turn = core.begin("m", hist[:-1] + [past("fix the other bug"), a("Fixed."), cur("thanks")], 1)
    assert turn.fresh and turn.session_id != sid


# ---------------------------------------------------------------- a session is never lost by a classification


def asleep_at_a_card(core: HistoryCore, token: str = "T1") -> tuple[str, list[Message]]:
    """A chat whose response waits on card c1 when its agent session ends (eviction, a
    crash): the session sleeps, resumable as acp-1."""
    sid, hist = start(core, "go", a("asking", "c1"), last=Last.PENDING, pending=[PendingCall("c1", token)])
    core.sessions[sid].resume = "acp-1"
    assert core.sleep(sid)
    assert core.sessions[sid].last is Last.INTERRUPTED and core.sessions[sid].dormant
    return sid, hist


@pytest.mark.parametrize(
    "tail, kind, told, new",
    [
        ([tr("c1", "T1")], Kind.LATE_ANSWERS, "approved it", None),  # a late Allow
        ([tr("c1", VSCODE_SKIP_TEXT)], Kind.LATE_ANSWERS, "declined it", None),  # a late Skip
        ([tr("c1", "T9")], Kind.LATE_ANSWERS, "answered it", None),  # not the token: not "approved"
        ([tr("c1", "T1"), u("do this instead")], Kind.CONTINUATION, "approved it", "do this instead"),
        ([u("do this instead")], Kind.CONTINUATION, None, "do this instead"),  # the round replayed, a new message
    ],
)
def test_a_late_answer_or_message_for_a_dormant_card_wakes_its_session(tail, kind, told, new):
    core = HistoryCore()
    sid, hist = asleep_at_a_card(core)
    turn = core.begin("m", hist + tail, 2)
    assert (turn.kind, turn.session_id, turn.resume, turn.fresh) == (kind, sid, "acp-1", False)
    assert turn.answers == {"c1": Answer.CANCELLED} and turn.results == {} and not turn.cancel_first
    texts = [p.value for m in turn.prompt for p in m.content if hasattr(p, "value")]
    assert "T1" not in " ".join(texts)  # a token never reaches the agent
    if told:
        assert told in texts[0]  # the agent is told first what became of its request
    else:
        assert not any("interrupted" in t for t in texts)
    if new:
        assert texts[-1] == new
    else:
        assert len(texts) == 1
    assert not any(isinstance(p, ToolResultPart) for m in turn.prompt for p in m.content)


def test_stop_at_a_dormant_card_then_a_new_message_wakes_its_session():
    core = HistoryCore()
    sid, hist = asleep_at_a_card(core)
    turn = core.begin("m", hist[:1] + [u("never mind, do this")], 2)  # the round dropped
    assert (turn.kind, turn.session_id, turn.resume) == (Kind.CONTINUATION, sid, "acp-1")
    assert turn.answers == {"c1": Answer.CANCELLED} and turn.prompt == (u("never mind, do this"),)


def test_a_woken_session_that_was_restored_says_answered_not_approved():
    # A restored card has no token (none is persisted): nothing can tell an Allow.
    core = HistoryCore()
    sid, hist = asleep_at_a_card(core)
    data = core.export(sid)
    new = HistoryCore()
    rid = new.restore(data, 0.0)
    turn = new.begin("m", hist + [tr("c1", "T1")], 1)
    assert (turn.kind, turn.session_id, turn.resume) == (Kind.LATE_ANSWERS, rid, "acp-1")
    assert turn.answers == {"c1": Answer.CANCELLED} and "answered it" in turn.prompt[0].content[0].value


def test_plan_changes_nothing():
    core = HistoryCore()
    sid, hist = asleep_at_a_card(core)
    before = repr(core.sessions[sid])
    plan = core.plan("m", hist + [tr("c1", "T1")])
    assert (plan.session_id, plan.kind) == (sid, Kind.LATE_ANSWERS)
    assert repr(core.sessions[sid]) == before and core.sessions[sid].dormant
    fresh = core.plan("m", [u("a new chat")])
    assert fresh.session_id is None and len(core.sessions) == 1
    turn = core.begin("m", hist + [tr("c1", "T1")], 2, plan=plan)
    assert turn.resume == "acp-1" and turn.kind is Kind.LATE_ANSWERS


# ---------------------------------------------------------------- stateful markers (core/marker.py)

from lmbridge.core import marker as markers  # noqa: E402
from lmbridge.core.marker import Marker  # noqa: E402

KEY = bytes(range(32))


def marked(core: HistoryCore, text: str, sid: str, number: int, *calls: str) -> Message:
    """The assistant message VS Code re-sends for the session's answer ``number``: ``text``
    (what VS Code kept of it) and the answer's marker part."""
    mk = core.marker(sid, number)
    assert mk is not None
    msg = a(text, *calls)
    part = markers.part("m", mk, KEY)
    return msg.model_copy(update={"content": [*msg.content, Message.model_validate({"role": "assistant", "content": [part]}).content[0]]})


def with_marker(msg: Message, part: dict[str, str]) -> Message:
    return msg.model_copy(update={"content": [*msg.content, Message.model_validate({"role": "assistant", "content": [part]}).content[0]]})


def keyed() -> HistoryCore:
    return HistoryCore(key=KEY, nonce="n0")


def marked_start(core: HistoryCore, first: str, answer: str, *, last: Last = Last.DONE) -> tuple[str, list[Message]]:
    turn = core.begin("m", [u(first)], 0)
    core.end(turn.session_id, fp(a(answer)), last, [], 1, request=turn.number)
    return turn.session_id, [u(first), marked(core, answer, turn.session_id, turn.number)]


def test_each_answer_is_named_by_its_session_and_number() -> None:
    core = keyed()
    sid, hist = marked_start(core, "hello", "hi")
    turn = core.begin("m", [*hist, u("next")], 2)
    assert core.marker(sid, turn.number) == Marker(core.sessions[sid].token, 2)
    assert core.sessions[sid].token.startswith("n0")
    plain = HistoryCore()
    assert plain.marker(plain.begin("m", [u("q")], 0).session_id, 1) is None  # no key: no markers


def _two(core: HistoryCore) -> tuple[str, str, list[Message]]:
    sid1, h1 = marked_start(core, "same words", "same answer")
    sid2, _ = marked_start(core, "same words", "same answer")
    return sid1, sid2, h1


# (row, what the request's last answer carries, its text, where the request goes)
MARKER_ROWS = [
    # The marker names the answer whatever VS Code kept of its text (a Stop mid-part).
    ("ours, text cut", "ours", "same ans", "own"),
    ("ours, text whole", "ours", "same answer", "own"),
    # Two chats alike in words and answers: the marker tells them apart (by text: a tie).
    ("ours, the other chat alike", "ours", "same answer", "own"),
    # Fallback rows: no marker (a chat from before markers, or a summarised one): by text.
    ("none, text whole", "none", "same answer", "tie"),
    ("none, text cut", "none", "same ans", "fresh"),
    # A marker that is not ours is ignored: as if none (by text).
    ("another key's (forged)", "forged", "same answer", "tie"),
    ("another provider's", "foreign", "same answer", "tie"),
    # A valid marker of another chat's session in this chat's history (the words are this
    # chat's): no chat, a fresh session. (A chat alike in words too is that chat.)
    ("the other chat's", "other", "same answer", "fresh"),
]


@pytest.mark.parametrize(("row", "carries", "text", "goes"), MARKER_ROWS, ids=[r[0] for r in MARKER_ROWS])
def test_marker_rows(row: str, carries: str, text: str, goes: str) -> None:
    core = keyed()
    sid1, sid2, h1 = _two(core)
    answer = a(text)
    if carries == "ours":
        answer = marked(core, text, sid1, 1)
    elif carries == "other":  # a chat whose answer is the same but whose words are not
        sid3, _ = marked_start(core, "other words", "same answer")
        answer = marked(core, text, sid3, 1)
    elif carries == "forged":
        answer = with_marker(answer, markers.part("m", Marker(core.sessions[sid1].token, 1), bytes(32)))
    elif carries == "foreign":
        answer = with_marker(answer, {"type": "data", "mimeType": "stateful_marker", "data": "bT5yZXNwXzAxMjM="})
    known = set(core.sessions)
    assert core.plan("m", [h1[0], answer, u("more")]).by == ("marker" if carries in ("ours", "other") else "text")
    turn = core.begin("m", [h1[0], answer, u("more")], 2)
    if goes == "own":
        assert (turn.kind, turn.session_id) == (Kind.CONTINUATION, sid1)
        assert turn.prompt == (u("more"),) and turn.context == ()
    else:  # a tie of two chats nothing tells apart, or nothing matches: never either chat
        assert turn.kind is Kind.DIVERGENCE and turn.fresh and turn.session_id not in known
        if goes == "fresh":
            assert turn.context  # told the conversation


def test_by_text_each_of_two_chats_alike_continues_when_their_answers_differ() -> None:
    # The fallback is today's matching: without markers, different answers still tell chats apart.
    core = keyed()
    s1, h1 = marked_start(core, "q", "answer one")
    s2, h2 = marked_start(core, "q", "answer two")
    assert core.begin("m", [h1[0], a("answer one"), u("x")], 2).session_id == s1
    assert core.begin("m", [h2[0], a("answer two"), u("y")], 2).session_id == s2


def test_a_marker_of_a_session_of_another_model_does_not_continue_it() -> None:
    # Copilot re-stamps the marker with the current model's id after a model switch.
    core = keyed()
    sid, hist = marked_start(core, "q", "a1")
    turn = core.begin("other-model", [*hist, u("next")], 2)
    assert turn.fresh and turn.session_id != sid


def test_a_stopped_answer_cut_inside_a_part_continues_by_its_marker() -> None:
    # By text alone this is a divergence (test_only_a_stopped_answer_matches_a_prefix).
    core = keyed()
    sid, hist = marked_start(core, "tell me slowly", "chunk 1 chunk 2 chunk 3", last=Last.CANCELLED)
    turn = core.begin("m", [hist[0], marked(core, "chunk 1 chu", sid, 1), u("and now hello")], 2)
    assert (turn.kind, turn.session_id) == (Kind.CONTINUATION, sid)


def test_a_fresh_session_keeps_the_markers_it_was_told_and_continues_by_them() -> None:
    # An edit of the second message: a fresh session told the first answer (with its marker);
    # its next request is matched to it, not to the old chat.
    core = keyed()
    s1, hist = marked_start(core, "one", "answer one")
    t2 = core.begin("m", [*hist, u("two")], 2)
    core.end(s1, fp(a("answer two")), Last.DONE, [], 3, request=t2.number)
    edit = core.begin("m", [*hist, u("two, edited")], 4)
    assert edit.kind is Kind.DIVERGENCE and edit.fresh
    core.end(edit.session_id, fp(a("edited answer")), Last.DONE, [], 5, request=edit.number)
    again = core.begin("m", [*hist, u("two, edited"), marked(core, "edited answer", edit.session_id, edit.number), u("three")], 6)
    assert (again.kind, again.session_id) == (Kind.CONTINUATION, edit.session_id)


def test_a_marker_of_a_restored_session_wakes_it_after_a_restart() -> None:
    core = keyed()
    sid, hist = marked_start(core, "q", "a1")
    core.sessions[sid].resume = "acp-1"
    core.sleep(sid)
    data = core.export(sid)
    assert data is not None
    new = HistoryCore(key=KEY, nonce="n1")  # the next daemon: same key (the state folder's), new nonce
    rid = new.restore(data, 0.0)
    turn = new.begin("m", [*hist, u("again")], 1)
    assert (turn.kind, turn.session_id, turn.resume) == (Kind.CONTINUATION, rid, "acp-1")
    assert new.marker(rid, turn.number) == Marker(core.sessions[sid].token, 2)  # numbering goes on
    # The key lost (another state folder): the marker does not verify, the text still matches.
    lost = HistoryCore(key=bytes(32), nonce="n2")
    rid = lost.restore(data, 0.0)
    assert lost.begin("m", [*hist, u("again")], 1).session_id == rid


def test_an_index_entry_without_markers_restores_and_matches_by_text() -> None:
    core = keyed()
    sid, hist = marked_start(core, "q", "a1")
    core.sessions[sid].resume = "acp-1"
    data = core.export(sid)
    assert data is not None
    data = {k: v for k, v in data.items() if k not in ("marker_session", "requests")}
    data["items"] = [item[:4] for item in data["items"]]  # type: ignore[attr-defined]
    new = HistoryCore(key=KEY, nonce="n1")
    rid = new.restore(data, 0.0)
    assert new.begin("m", [hist[0], a("a1"), u("again")], 1).session_id == rid


def test_stop_at_a_card_the_round_back_with_its_marker_and_call_without_result_cancels_the_card() -> None:
    # As the Chat view shows (docs/vscode.md, "Kept rounds"): a marked round stopped at its card
    # comes back with its tool call and no result; the card is answered cancelled, never approved.
    core = keyed()
    turn = core.begin("m", [u("write it")], 0)
    core.end(turn.session_id, fp(a("asking", "c1")), Last.PENDING, [PendingCall("c1", "T1")], 1, request=turn.number)
    back = marked(core, "asking", turn.session_id, turn.number, "c1")
    plan = core.plan("m", [u("write it"), back, u("are you there")])
    assert plan.by == "marker"
    again = core.begin("m", [u("write it"), back, u("are you there")], 2)
    assert (again.kind, again.session_id) == (Kind.SOFT_CANCEL, turn.session_id)
    assert again.answers == {"c1": Answer.CANCELLED} and again.cancel_first and again.prompt == (u("are you there"),)


# ---------------------------------------------------------------- a stopped turn VS Code kept as one message

# Recorded in the Chat view (`make chatview`, step "live-stop": code-server 4.139.1, Copilot
# Chat 0.67.0): the user allowed `sh ticker.sh` and pressed Stop while its output streamed. The
# next request re-sent that turn with the words alone, and the two rounds the daemon streamed
# (the card's round, the stopped answer) as ONE assistant message: no marker, no tool call, no
# result, the file name linkified (docs/vscode.md, "A stopped turn kept as one message").
TICKER_WORDS = "run the script ticker.sh"
TICKER_CARD = "\n\n🔧 **Run sh ticker.sh** (execute)\n\n"
TICKER_PARTS = ["\n\n````text\ntick 1 of 6\n", "tick 2 of 6\n", "tick 3 of 6\n"]
TICKER_KEPT = "\n\n🔧 **Run sh [`ticker.sh`](ticker.sh )** (execute)\n\n\n\n````text\ntick 1 of 6\ntick 2 of 6\ntick 3 of 6\n"


def _ticker_stopped(core: HistoryCore) -> tuple[str, list[Message]]:
    """A marked chat whose last turn ran ticker.sh (the card allowed) and was stopped while the
    command streamed; returns (session id, the request's messages before the stopped turn)."""
    sid, hist = copilot_chat(core, "hello there", a("Hello from the demo agent."), 0)
    hist[-1:] = [past("hello there"), marked(core, "Hello from the demo agent.", sid, 1)]
    card = core.begin("m", [*hist, cur(TICKER_WORDS)], 1)
    assert (card.kind, card.session_id) == (Kind.CONTINUATION, sid)
    asking = marked(core, TICKER_CARD, sid, card.number, "c1")
    core.end(sid, fp(a(TICKER_CARD, "c1")), Last.PENDING, [PendingCall("c1", "T1")], 2, request=card.number)
    run = core.begin("m", [*hist, past(TICKER_WORDS), asking, tr("c1", "T1")], 3)
    assert (run.kind, run.answers) == (Kind.TOOL_RESULTS, {"c1": Answer.ALLOW})
    streamed, prefixes = "", []
    for part in TICKER_PARTS:
        streamed += part
        prefixes.append(fp(a(streamed)).text)
    core.end(sid, Fingerprint(fp(a(streamed)).text, (), None, tuple(prefixes)), Last.CANCELLED, [], 4, request=run.number)
    return sid, hist


def _kept(text: str = TICKER_KEPT, *extra: dict[str, str]) -> Message:
    msg = a(text)
    return with_marker(msg, extra[0]) if extra else msg


# (row, the request after the Stop (built from the chat's messages before the stopped turn), goes)
KEPT_ROWS = [
    # As recorded: the turn's words, its rounds joined and linkified, new words.
    ("as recorded", lambda h: [*h, u(f"<userRequest>\n{TICKER_WORDS}\n</userRequest>\n"), _kept(), cur("are you still there")], "own"),
    ("the text kept whole", lambda h: [*h, past(TICKER_WORDS), _kept(TICKER_CARD + "".join(TICKER_PARTS)), cur("are you still there")], "own"),
    # Not the stopped turn: an edit of its words, or of an earlier message, is a divergence.
    ("its words edited", lambda h: [*h, past("run the script other.sh"), _kept(), cur("are you still there")], "fresh"),
    ("an earlier message edited", lambda h: [h[0], u(SCAFFOLD), past("hello, edited"), h[3], past(TICKER_WORDS), _kept(), cur("x")], "fresh"),
    # A retry (no new words), or another provider's answer (its own marker): not this rule.
    ("no new words", lambda h: [*h, past(TICKER_WORDS), _kept(), tr("c9", "x")], "fresh"),
    (
        "another provider's answer",
        lambda h: [*h, past(TICKER_WORDS), _kept(TICKER_KEPT, {"type": "data", "mimeType": "stateful_marker", "data": "bT5yZXNwXzAxMjM="}), cur("x")],
        "fresh",
    ),
    ("a tool call kept", lambda h: [*h, past(TICKER_WORDS), a(TICKER_KEPT, "c7"), cur("are you still there")], "fresh"),
]


@pytest.mark.parametrize(("row", "build", "goes"), KEPT_ROWS, ids=[r[0] for r in KEPT_ROWS])
def test_a_stopped_turn_kept_as_one_message_continues(row: str, build, goes: str) -> None:
    core = keyed()
    sid, hist = _ticker_stopped(core)
    request = build(hist)
    plan = core.plan("m", request)
    assert plan.by == "marker"
    turn = core.begin("m", request, 5)
    if goes == "own":
        assert (turn.kind, turn.session_id, turn.fresh, turn.cancel_first) == (Kind.CONTINUATION, sid, False, False)
        assert turn.prompt == (request[-1],) and turn.context == ()  # the agent streamed that turn itself
        # The next request replays the kept message (an equal object, not the same one) and goes on.
        core.end(sid, fp(a("Hello again.")), Last.DONE, [], 6, request=turn.number)
        again = [*(m.model_copy() for m in request[:-1]), past("are you still there"), marked(core, "Hello again.", sid, turn.number), cur("bye")]
        nxt = core.begin("m", again, 7)
        assert (nxt.kind, nxt.session_id, nxt.prompt) == (Kind.CONTINUATION, sid, (again[-1],))
    else:
        assert turn.kind is Kind.DIVERGENCE and turn.fresh and turn.session_id != sid


def test_a_finished_turn_kept_as_one_unmarked_message_is_a_divergence() -> None:
    # Only a stopped turn: a finished answer comes back with its marker; one without it is an edit.
    core = keyed()
    sid, hist = copilot_chat(core, "hello there", a("Hello."), 0)
    hist[-1:] = [past("hello there"), marked(core, "Hello.", sid, 1)]
    turn = core.begin("m", [*hist, cur(TICKER_WORDS)], 1)
    core.end(sid, fp(a("ran it")), Last.DONE, [], 2, request=turn.number)
    again = core.begin("m", [*hist, past(TICKER_WORDS), a("ran it, edited"), cur("x")], 3)
    assert again.kind is Kind.DIVERGENCE and again.fresh


@settings(max_examples=40, deadline=None)
@given(words=st.text(min_size=1, max_size=12).filter(lambda w: "".join(w.split()) not in ("", "".join(TICKER_WORDS.split()))), kept=st.text(min_size=1, max_size=40))
def test_a_kept_stop_never_continues_under_other_words(words: str, kept: str) -> None:
    # Whatever VS Code kept of the turn, the words that began it must be the session's.
    core = keyed()
    sid, hist = _ticker_stopped(core)
    for said, goes in ((TICKER_WORDS, sid), (words, None)):
        request = [*hist, past(said), a(kept + "x"), cur("next")]
        turn = core.plan("m", request)
        assert turn.session_id == goes
