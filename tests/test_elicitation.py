"""The agent's questions (ACP ``elicitation/create``): ``core.elicitation`` row by row, then
the daemon end to end with a scripted agent that asks (docs/protocol.md, "Questions").

VS Code's side is played as in tests/test_daemon.py: its question tool
(``vscode_askQuestions``) answers with the JSON it returns in VS Code 1.139
(``{"answers": {header: {"selected", "freeText", "skipped"}}}``), Skip with VS Code's skip text,
Stop by dropping the round and sending a new message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core import elicitation as E
from lmbridge.core.permissions import ACTION_TOOL, Answer
from lmbridge.devtools.client import approve, assistant, skip, text_of, tool_calls, tool_result, user

LIMIT = 180  # seconds: the bound of each daemon test (~2 s idle)

# claude-agent-acp 0.101.0's AskUserQuestion with one question (dist/elicitation.js,
# askUserQuestionsToCreateRequest): the question in `message`, a titled oneOf, an "Other" box.
CLAUDE_ONE = {
    "mode": "form",
    "sessionId": "s1",
    "toolCallId": "toolu_1",
    "message": "Which colour should the button be?",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "question_0": {"type": "string", "title": "Colour", "oneOf": [
                {"const": "Red", "title": "Red", "description": "Warm"}, {"const": "Blue", "title": "Blue"}]},
            "question_0_custom": {"type": "string", "title": "Other",
                                  "description": "Type your own answer, or add a note to the option you chose above (optional)."},
        },
    },
}  # fmt: skip

# Two questions, one multi-select, as claude sends them (each question in its field's description).
CLAUDE_TWO = {
    "mode": "form",
    "sessionId": "s1",
    "message": "Please answer the following questions.",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "question_0": {"type": "string", "title": "Colour", "description": "Which colour?", "oneOf": [
                {"const": "Red", "title": "Red"}, {"const": "Blue", "title": "Blue"}]},
            "question_0_custom": {"type": "string", "title": "Other", "description": "Your own answer."},
            "question_1": {"type": "array", "title": "Sizes", "description": "Which sizes?", "items": {"anyOf": [
                {"const": "S", "title": "Small"}, {"const": "L", "title": "Large"}]}},
            "question_1_custom": {"type": "string", "title": "Other", "description": "Your own answer."},
        },
    },
}  # fmt: skip

# Every property type of ACP's ElicitationSchema, with defaults and required fields.
EVERY_TYPE = {
    "mode": "form",
    "sessionId": "s1",
    "message": "Configure the run",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name", "description": "Run name"},
            "level": {"type": "string", "enum": ["low", "high"], "default": "low"},
            "tags": {"type": "array", "title": "Tags", "items": {"type": "string", "enum": ["a", "b"]}},
            "retries": {"type": "integer", "title": "Retries", "default": 2},
            "ratio": {"type": "number", "title": "Ratio"},
            "dry": {"type": "boolean", "title": "Dry run", "default": True},
        },
        "required": ["name"],
    },
}  # fmt: skip


def _answers(**by_header: Any) -> str:
    """VS Code's question tool result: each header's answer (a label, labels, or free text)."""
    out = {}
    for header, value in by_header.items():
        if value is None:
            out[header] = {"selected": [], "freeText": None, "skipped": True}
        elif isinstance(value, list):
            out[header] = {"selected": value, "freeText": None, "skipped": False}
        elif isinstance(value, tuple):  # free text
            out[header] = {"selected": [], "freeText": value[0], "skipped": False}
        else:
            out[header] = {"selected": [value], "freeText": None, "skipped": False}
    return json.dumps({"answers": out})


# ---------------------------------------------------------------- reading


def test_claude_one_question_is_asked_in_its_message_with_its_choices() -> None:
    q = E.read(CLAUDE_ONE)
    assert isinstance(q, E.Question) and q.tool_call_id == "toolu_1"
    assert E.ask_input(q) == {"questions": [
        {"header": "Colour", "question": "Which colour should the button be?",
         "options": [{"label": "Red", "description": "Warm"}, {"label": "Blue"}], "allowFreeformInput": False},
        {"header": "Other", "question": "Type your own answer, or add a note to the option you chose above (optional)."},
    ]}  # fmt: skip


def test_two_questions_keep_headers_unique_and_the_message_goes_first() -> None:
    q = E.read(CLAUDE_TWO)
    assert isinstance(q, E.Question)
    asked = E.ask_input(q)["questions"]
    assert [a["header"] for a in asked] == ["Colour", "Other", "Sizes", "Other (2)"]
    assert asked[0]["message"] == "Please answer the following questions."
    assert asked[2]["multiSelect"] is True and [o["label"] for o in asked[2]["options"]] == ["Small", "Large"]


def test_every_property_type_and_its_default() -> None:
    q = E.read(EVERY_TYPE)
    assert isinstance(q, E.Question)
    assert [(f.key, f.kind, f.required) for f in q.fields] == [
        ("name", "text", True), ("level", "single", False), ("tags", "multi", False),
        ("retries", "integer", False), ("ratio", "number", False), ("dry", "boolean", False),
    ]  # fmt: skip
    asked = {a["header"]: a for a in E.ask_input(q)["questions"]}
    assert asked["level"]["options"] == [{"label": "low", "recommended": True}, {"label": "high"}]
    assert asked["Dry run"]["options"] == [{"label": "Yes", "recommended": True}, {"label": "No"}]
    assert "options" not in asked["Retries"] and asked["Name"]["question"] == "Run name"
    assert q.defaults() == {"level": "low", "retries": 2, "dry": True}


MALFORMED = {
    "url mode": {"mode": "url", "sessionId": "s1", "message": "Sign in", "url": "https://example.com", "elicitationId": "e1"},
    "no mode": {"sessionId": "s1", "message": "x", "requestedSchema": {"type": "object", "properties": {"a": {"type": "string"}}}},
    "no properties": {"mode": "form", "sessionId": "s1", "message": "x", "requestedSchema": {"type": "object", "properties": {}}},
    "unknown type": {"mode": "form", "sessionId": "s1", "message": "x", "requestedSchema": {"type": "object", "properties": {"a": {"type": "_file"}}}},
    "no message": {"mode": "form", "sessionId": "s1", "requestedSchema": {"type": "object", "properties": {"a": {"type": "string"}}}},
    "not an object": ["form"],
}


@pytest.mark.parametrize("name", MALFORMED)
def test_what_cannot_be_shown_is_refused_with_invalid_params(name: str) -> None:
    got = E.read(MALFORMED[name])
    assert isinstance(got, E.Malformed), got
    assert got.error["code"] == -32602


def test_long_texts_are_cut_to_the_tools_limits_and_kept_whole_in_the_detail() -> None:
    long = "why " * 100
    params = {"mode": "form", "sessionId": "s", "message": "m", "requestedSchema": {"properties": {
        "a": {"type": "string", "title": "t" * 80, "description": long}, "b": {"type": "string", "title": "t" * 80}}}}  # fmt: skip
    q = E.read(params)
    assert isinstance(q, E.Question)
    asked = E.ask_input(q)["questions"]
    assert all(len(a["header"]) <= E.HEADER_MAX and len(a["question"]) <= E.QUESTION_MAX for a in asked)
    assert len({a["header"] for a in asked}) == 2
    assert long.strip() in asked[0]["message"]


# ---------------------------------------------------------------- routing


@pytest.mark.parametrize(
    ("offered", "via"),
    [({E.ASK_TOOL, ACTION_TOOL}, "ask"), ({E.ASK_TOOL}, "ask"), ({ACTION_TOOL}, "card"), (set(), "none"), ({"other_tool"}, "none")],
)
def test_route(offered: set[str], via: str) -> None:
    assert E.route(frozenset(offered)) == via


# ---------------------------------------------------------------- answers

_ONE = E.read(CLAUDE_ONE)
_TWO = E.read(CLAUDE_TWO)
_EVERY = E.read(EVERY_TYPE)
_EVERY_OPTIONAL = E.read(dict(EVERY_TYPE, requestedSchema=dict(EVERY_TYPE["requestedSchema"], required=[])))  # type: ignore[arg-type]
assert isinstance(_ONE, E.Question) and isinstance(_TWO, E.Question) and isinstance(_EVERY, E.Question) and isinstance(_EVERY_OPTIONAL, E.Question)

#: (question, the answer history gave, VS Code's result text) → the elicitation's result.
RESPONSES = {
    "a pick": (_ONE, Answer.RESULT, _answers(Colour="Blue", Other=None), {"action": "accept", "content": {"question_0": "Blue"}}),
    "a pick and a note": (_ONE, Answer.RESULT, _answers(Colour="Red", Other=("brick red",)),
                          {"action": "accept", "content": {"question_0": "Red", "question_0_custom": "brick red"}}),
    "own answer only": (_ONE, Answer.RESULT, _answers(Colour=None, Other=("green",)), {"action": "accept", "content": {"question_0_custom": "green"}}),
    "a label that is no choice": (_ONE, Answer.RESULT, _answers(Colour="Green", Other=None), {"action": "decline"}),
    "every question skipped": (_ONE, Answer.RESULT, _answers(Colour=None, Other=None), {"action": "decline"}),
    "multi-select": (_TWO, Answer.RESULT, _answers(Colour="Red", Other=None, Sizes=["Small", "Large"], **{"Other (2)": None}),
                     {"action": "accept", "content": {"question_0": "Red", "question_1": ["S", "L"]}}),
    "every type": (_EVERY, Answer.RESULT, _answers(Name=("nightly",), level="high", Tags=["a"], Retries=("3",), Ratio=("0.5",), **{"Dry run": "No"}),
                   {"action": "accept", "content": {"name": "nightly", "level": "high", "tags": ["a"], "retries": 3, "ratio": 0.5, "dry": False}}),
    "not a number": (_EVERY, Answer.RESULT, _answers(Name=("n",), Retries=("three",), Ratio=("nan",)), {"action": "accept", "content": {"name": "n"}}),
    "not an integer": (_EVERY, Answer.RESULT, _answers(Name=("n",), Retries=("2.5",)), {"action": "accept", "content": {"name": "n"}}),
    "a required one left out": (_EVERY, Answer.RESULT, _answers(Name=None, level="high"), {"action": "decline"}),
    "Skip": (_ONE, Answer.DECLINED, None, {"action": "decline"}),
    "Stop or a new message": (_ONE, Answer.CANCELLED, None, {"action": "cancel"}),
    "a result that is not JSON": (_ONE, Answer.RESULT, "Tool vscode_askQuestions is currently disabled", {"action": "cancel"}),
    "JSON without answers": (_ONE, Answer.RESULT, '{"x": 1}', {"action": "cancel"}),
    "the card's Allow": (_EVERY_OPTIONAL, Answer.ALLOW, None, {"action": "accept", "content": {"level": "low", "retries": 2, "dry": True}}),
    "the card's Allow, a required question with no default": (_EVERY, Answer.ALLOW, None, {"action": "decline"}),
    "the card's Allow, no defaults": (_ONE, Answer.ALLOW, None, {"action": "accept", "content": {}}),
    "the card's Skip": (_ONE, Answer.REJECT, None, {"action": "decline"}),
}  # fmt: skip


@pytest.mark.parametrize("row", RESPONSES)
def test_response(row: str) -> None:
    q, answer, result, expected = RESPONSES[row]
    assert E.response(q, answer, result) == expected


@given(st.text(max_size=300))
def test_any_result_text_gives_a_valid_acp_response(text: str) -> None:
    from acp.schema import AcceptElicitationResponse, CancelElicitationResponse, DeclineElicitationResponse

    for q in (_ONE, _TWO, _EVERY):
        got = E.response(q, Answer.RESULT, text)
        model = {"accept": AcceptElicitationResponse, "decline": DeclineElicitationResponse, "cancel": CancelElicitationResponse}[got["action"]]
        model.model_validate(got)
        if got["action"] == "accept":
            assert set(got["content"]) <= {f.key for f in q.fields}


def test_the_card_says_what_allow_answers() -> None:
    """The card's Allow sends exactly what the card says: the defaults shown, or, where a
    required question has none (an accept without it would be no answer), a decline."""
    card = E.card_input(_EVERY_OPTIONAL, "Demo", "tok")["message"]
    assert "**Allow** answers with the defaults shown" in card and "declines" in card.split("**Allow**")[1].split("**Skip**")[1]
    card = E.card_input(_EVERY, "Demo", "tok")["message"]
    assert "**Allow** answers with the defaults shown" not in card
    assert "**Name** is required and has no default, so **Allow** declines, as **Skip** does" in card


def test_the_card_shows_a_default_as_the_choice_the_user_reads() -> None:
    """A default is one of the choices the card lists by label: it is shown by that label,
    not by the value the agent gets back (which the user never sees)."""
    q = E.read({"mode": "form", "sessionId": "s", "message": "Pick", "requestedSchema": {"properties": {
        "fruit": {"type": "string", "title": "Fruit", "oneOf": [{"const": "a", "title": "Apple"}, {"const": "b", "title": "Banana"}], "default": "b"},
        "more": {"type": "array", "title": "More", "items": {"anyOf": [{"const": "c", "title": "Cherry"}, {"const": "d", "title": "Date"}]}, "default": ["c", "d"]},
    }}})  # fmt: skip
    assert isinstance(q, E.Question)
    card = E.card_input(q, "Demo", "tok")["message"]
    assert "**Fruit**: Pick (Apple, Banana); default: Banana" in card
    assert "**More** (Cherry, Date); default: Cherry, Date" in card
    assert E.response(q, Answer.ALLOW, None) == {"action": "accept", "content": {"fruit": "b", "more": ["c", "d"]}}


# ---------------------------------------------------------------- the daemon end to end

ASK_TOOLS = {"tools": [{"name": E.ASK_TOOL, "description": "Ask the user questions"}]}


def asking_turn(params: dict[str, Any] = CLAUDE_ONE, handle: str = "e1") -> list[dict[str, Any]]:
    """A turn that asks ``params`` (its sessionId the turn's), waits for the answer, and goes on.
    ``handle``: unique in the agent process (its answers are kept by handle)."""
    p = {k: v for k, v in params.items() if k != "sessionId"}
    return [
        {"text": "One question first."},
        {"client": {"method": "elicitation/create", "params": p}, "id": handle},
        {"client_await": [handle]},
        {"text": "Thanks."},
    ]


def answered(agent: Any) -> list[Any]:
    """The agent's elicitation answers (its ``e1`` requests), in order."""
    return [e.get("result", e.get("error")) for e in agent.events("client_result") if str(e.get("id")).startswith("e")]


@pytest.mark.anyio
async def test_initialize_advertises_form_elicitation(scripted: Any, shared: Any) -> None:
    agent = scripted({})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            await c.chat(agent.id, [user("hi")])
    caps = agent.frames("initialize")[0]["params"]["clientCapabilities"]
    assert caps["elicitation"] == {"form": {}}


@pytest.mark.anyio
async def test_a_question_goes_to_vscodes_question_tool_and_the_answer_back(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [asking_turn()]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            history = [user("paint the button")]
            first = await c.chat(agent.id, history, options=ASK_TOOLS)
            assert first.result == {"stopReason": "tool_calls"}
            [part] = tool_calls(first)
            assert part["name"] == E.ASK_TOOL
            assert part["input"]["questions"][0]["question"] == "Which colour should the button be?"
            assert not answered(agent)  # the agent waits on the user
            history += [assistant(first.parts), tool_result(part["callId"], _answers(Colour="Blue", Other=None))]
            second = await c.chat(agent.id, history, options=ASK_TOOLS)
            assert second.result == {"stopReason": "end_turn"} and "Thanks." in text_of(second)
    assert answered(agent) == [{"action": "accept", "content": {"question_0": "Blue"}}]
    assert len(agent.prompts()) == 1 and not agent.events("cancel")  # the answer continued the open turn


@pytest.mark.anyio
async def test_skip_declines_the_question(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [asking_turn()]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("paint it")], options=ASK_TOOLS)
            [part] = tool_calls(first)
            second = await c.chat(agent.id, [user("paint it"), assistant(first.parts), skip(part)], options=ASK_TOOLS)
            assert "Thanks." in text_of(second)
    assert answered(agent) == [{"action": "decline"}]


@pytest.mark.anyio
async def test_stop_then_a_new_message_cancels_the_question(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [asking_turn(), [{"text": "Something else."}]]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("paint it")], options=ASK_TOOLS)
            assert tool_calls(first)
            # Stop at the question: VS Code drops the round; the next message is new.
            second = await c.chat(agent.id, [user("paint it"), user("never mind")], options=ASK_TOOLS)
            assert text_of(second) == "Something else."
    assert answered(agent) == [{"action": "cancel"}]
    assert len(agent.events("cancel")) == 1


@pytest.mark.anyio
async def test_without_vscodes_question_tool_lmbridges_card_asks(scripted: Any, shared: Any) -> None:
    params = dict(EVERY_TYPE, requestedSchema=dict(EVERY_TYPE["requestedSchema"], required=[]))  # type: ignore[arg-type]
    agent = scripted({"turns": [asking_turn(params, "e1"), asking_turn(params, "e2")]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            for press in (approve, skip):
                history = [user(f"configure ({press.__name__})")]
                first = await c.chat(agent.id, history)  # Agent mode without the question tool
                [part] = tool_calls(first)
                assert part["name"] == ACTION_TOOL and "Configure the run" in part["input"]["message"]
                history += [assistant(first.parts), press(part)]
                second = await c.chat(agent.id, history)
                assert "Thanks." in text_of(second)
    assert answered(agent) == [{"action": "accept", "content": {"level": "low", "retries": 2, "dry": True}}, {"action": "decline"}]


@pytest.mark.anyio
async def test_a_chat_that_cannot_show_a_question_cancels_it_and_says_so(scripted: Any, shared: Any) -> None:
    agent = scripted({"turns": [asking_turn()]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, [user("paint it")], agent_mode=False)  # Ask mode: no tools
            assert call.result == {"stopReason": "end_turn"} and not tool_calls(call)
            assert "asked a question, which this chat cannot show" in text_of(call) and "Thanks." in text_of(call)
    assert answered(agent) == [{"action": "cancel"}]


@pytest.mark.anyio
async def test_a_url_elicitation_is_refused(scripted: Any, shared: Any, tmp_path: Path) -> None:
    url = {"mode": "url", "message": "Sign in", "url": "https://example.com/login", "elicitationId": "x1"}
    agent = scripted({"turns": [asking_turn(url)]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, [user("go")], options=ASK_TOOLS)
            assert not tool_calls(call) and "Thanks." in text_of(call)
    [error] = answered(agent)
    assert error["code"] == -32602


# ---------------------------------------------------------------- the turn machine


def _machine(tools: frozenset[str]) -> tuple[Any, list[Any]]:
    from lmbridge.core.jobs import JobInfo
    from lmbridge.core.present import TurnRenderer
    from lmbridge.core.turn import NewJob, Ready, TurnMachine

    m = TurnMachine("Demo", TurnRenderer(), gather=0.1)
    log: list[Any] = []
    log += m.handle(NewJob(JobInfo(1, tools=tools)))
    log += m.handle(Ready())
    return m, log


@pytest.mark.parametrize(
    ("tools", "name", "pending_tool"),
    [(frozenset({E.ASK_TOOL, ACTION_TOOL}), E.ASK_TOOL, True), (frozenset({ACTION_TOOL}), ACTION_TOOL, False)],
)
@pytest.mark.parametrize("end", ["answer", "stop", "new message", "close"])
def test_every_question_is_answered_exactly_once(tools: frozenset[str], name: str, pending_tool: bool, end: str) -> None:
    from lmbridge.core import turn
    from lmbridge.core.jobs import JobInfo

    m, log = _machine(tools)
    log += m.handle(turn.ElicitationAsked(9, CLAUDE_ONE, "q-1", "tok-1"))
    timer = [e for e in log if isinstance(e, turn.StartTimer) and e.timer is turn.Timer.GATHER][-1]
    shown = m.handle(turn.TimerFired(timer.timer, timer.tag))
    [part] = [e.part for e in shown if isinstance(e, turn.Emit) and e.part.get("type") == "tool_call"]
    [finish] = [e for e in shown if isinstance(e, turn.Finish)]
    assert part["name"] == name and part["callId"] == "q-1"
    assert finish.stop_reason == "tool_calls" and [(p.call_id, p.tool) for p in finish.pending] == [("q-1", pending_tool)]
    given = Answer.RESULT if pending_tool else Answer.ALLOW
    if end == "answer":
        fx = m.handle(turn.NewJob(JobInfo(2, answers={"q-1": given}, has_prompt=False, tools=tools)))
        expected = [(9, given, 2)]
    elif end == "stop":  # VS Code drops the round; the next message stops the turn first
        fx = m.handle(turn.NewJob(JobInfo(2, cancel_first=True, answers={"q-1": Answer.CANCELLED}, tools=tools)))
        expected = [(9, Answer.CANCELLED, 2)]
    elif end == "new message":  # answered, and new words beside it: the turn is stopped, nothing accepted
        fx = m.handle(turn.NewJob(JobInfo(2, cancel_first=True, answers={"q-1": given}, tools=tools)))
        expected = [(9, Answer.CANCELLED, 2)]
    else:
        fx = m.handle(turn.Close("shutdown"))
        expected = [(9, Answer.CANCELLED, None)]
    got = [(a.rid, a.answer, a.job_id) for a in fx if isinstance(a, turn.AnswerQuestion)]
    assert got == expected
    later = m.handle(turn.Close("again")) if end != "close" else []
    assert not [a for a in later if isinstance(a, turn.AnswerQuestion)]  # never a second answer


def test_a_question_reaching_a_session_that_has_ended_is_cancelled() -> None:
    """The session actor's last reads (requests left in its mailbox when it closed)."""
    from lmbridge.acp.connection import Incoming
    from lmbridge.daemon.mail import unread_answer

    assert unread_answer(Incoming(E.METHOD, CLAUDE_ONE, id=12)) == (12, {"action": "cancel"}, None)


_PROPERTY = st.one_of(
    st.fixed_dictionaries({"type": st.just("string")}, optional={"title": st.text(max_size=120), "description": st.text(max_size=400)}),
    st.fixed_dictionaries({"type": st.just("string"), "enum": st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=5, unique=True)},
                          optional={"title": st.text(max_size=120)}),
    st.fixed_dictionaries({"type": st.sampled_from(["number", "integer", "boolean"])}, optional={"title": st.text(max_size=120)}),
)  # fmt: skip


@given(st.dictionaries(st.text(min_size=1, max_size=20), _PROPERTY, min_size=1, max_size=6), st.text(max_size=300))
def test_any_form_asks_within_the_question_tools_schema(props: dict[str, Any], message: str) -> None:
    q = E.read({"mode": "form", "sessionId": "s", "message": message, "requestedSchema": {"type": "object", "properties": props}})
    assert isinstance(q, E.Question)
    asked = E.ask_input(q)["questions"]
    assert len(asked) == len(props)
    assert len({a["header"] for a in asked}) == len(asked)  # answers come back by header
    for a in asked:
        assert 0 < len(a["header"]) <= E.HEADER_MAX
        assert 0 < len(a["question"]) <= E.QUESTION_MAX
        assert "options" not in a or a["options"]
        assert not _refused_by_vscode(a), a


def _refused_by_vscode(asked: dict[str, Any]) -> bool:
    """VS Code 1.139's ``vscode_askQuestions`` refuses the whole call, before it shows anything,
    when a question has a single option and no free text (``prepareToolInvocation`` in
    ``out/vs/code/browser/workbench/workbench.js``: ``options.length===1&&!allowFreeformInput``;
    ``allowFreeformInput`` defaults to true)."""
    return len(asked.get("options") or ()) == 1 and asked.get("allowFreeformInput", True) is False


ONE_CHOICE = {
    "mode": "form",
    "sessionId": "s1",
    "message": "Go ahead?",
    "requestedSchema": {"type": "object", "required": ["go", "also"], "properties": {
        "go": {"type": "string", "title": "Go", "oneOf": [{"const": "yes", "title": "Yes, go ahead"}]},
        "also": {"type": "array", "title": "Also", "items": {"type": "string", "enum": ["tests"]}},
    }},
}  # fmt: skip


def test_a_question_with_one_choice_is_one_vscodes_tool_shows() -> None:
    """A select with a single choice (a confirmation) would make VS Code refuse the whole call,
    and the question never shows: it takes free text, the one choice still picks its value."""
    q = E.read(ONE_CHOICE)
    assert isinstance(q, E.Question)
    asked = E.ask_input(q)["questions"]
    assert [a["options"] for a in asked] == [[{"label": "Yes, go ahead"}], [{"label": "tests"}]]
    assert not any(_refused_by_vscode(a) for a in asked)
    picked = _answers(Go="Yes, go ahead", Also=["tests"])
    assert E.response(q, Answer.RESULT, picked) == {"action": "accept", "content": {"go": "yes", "also": ["tests"]}}
    # Free text that is not the choice answers nothing: the required question is unanswered.
    typed = _answers(Go=("maybe later",), Also=["tests"])
    assert E.response(q, Answer.RESULT, typed) == {"action": "decline"}
