"""The agent's questions (ACP ``elicitation/create``, form mode) as VS Code shows them. Pure.

docs/protocol.md, "Questions" (the shapes), docs/vscode.md, "Questions" (the UI).

Theory of operation
-------------------
An agent that asks the user something sends ``elicitation/create`` with a ``message`` and
a ``requestedSchema`` (a flat JSON Schema object: string, number, integer and boolean
properties, single-select strings with ``oneOf``/``enum``, multi-select arrays with
``items.anyOf``/``items.enum``). ``read`` makes it a ``Question`` (one ``Field`` a
property), or a ``Malformed`` answered with a JSON-RPC error at once.

How the chat shows it (``route``, by the tools the request offers):

* ``vscode_askQuestions`` offered (VS Code's own question tool, Agent mode): a call of that
  tool (``ask_input``: one question a field). VS Code shows its question carousel and
  returns ``{"answers": {header: {"selected": [...], "freeText": s | null, "skipped": b}}}``;
  ``response`` turns it back into the form's ``content``.
* else lmbridge's own card (``permissions.ACTION_TOOL``, ``card_input``): the question and
  its choices; **Allow** accepts with the defaults the agent gave (declines where a required
  question has none: the card says so), **Skip** declines.
* neither (Ask mode): answered ``cancel`` at once, and the user is told.

The answer (``response``, ACP ``CreateElicitationResponse``): ``accept`` with ``content``;
``decline`` when the user pressed Skip, skipped every question, or left a required one
unanswered, or pressed the card's Allow where a required question has no default (when
unsure, nothing is accepted); ``cancel`` when the user pressed Stop or sent
a new message instead (no result came), or VS Code's result cannot be read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from acp.schema import (
    CreateFormSessionElicitationRequest,
    ElicitationBooleanPropertySchema,
    ElicitationIntegerPropertySchema,
    ElicitationMultiSelectPropertySchema,
    ElicitationNumberPropertySchema,
    ElicitationStringPropertySchema,
    StringMultiSelectItems,
    TitledMultiSelectItems,
)
from pydantic import ValidationError

from lmbridge.core.errors import INVALID_PARAMS
from lmbridge.core.permissions import ACTION_TOOL, Answer, escape

METHOD = "elicitation/create"
ASK_TOOL = "vscode_askQuestions"  # VS Code's own question tool (workbench, core tools)
HEADER_MAX = 50  # vscode_askQuestions' input schema: header maxLength
QUESTION_MAX = 200  # ... question maxLength
YES, NO = "Yes", "No"

Kind = Literal["single", "multi", "text", "number", "integer", "boolean"]
Via = Literal["ask", "card", "none"]

ACCEPT = "accept"
DECLINE: Mapping[str, Any] = {"action": "decline"}
CANCEL: Mapping[str, Any] = {"action": "cancel"}


@dataclass(frozen=True)
class Choice:
    value: str  # what goes back (the enum const)
    label: str  # what the user reads
    description: str | None = None


@dataclass(frozen=True)
class Field:
    """One property of the form: ``key`` (its name), ``header`` (unique in the question,
    at most ``HEADER_MAX``), ``question`` (at most ``QUESTION_MAX``), ``detail`` (longer
    text, markdown), ``choices`` (single/multi/boolean), ``default`` (the agent's)."""

    key: str
    kind: Kind
    header: str
    question: str
    detail: str | None = None
    choices: tuple[Choice, ...] = ()
    required: bool = False
    default: Any = None


@dataclass(frozen=True)
class Question:
    """A readable form elicitation: its ``message``, its ``fields`` in the agent's order,
    and the agent's ``tool_call_id`` it belongs to (None: the session's)."""

    message: str
    fields: tuple[Field, ...]
    tool_call_id: str | None = None

    def defaults(self) -> dict[str, Any]:
        """The content an accept without answers carries: the defaults the agent gave."""
        return {f.key: f.default for f in self.fields if f.default is not None}

    def unanswerable(self) -> tuple[Field, ...]:
        """The required fields the agent gave no default: an accept with the defaults leaves them
        out, so it would be no answer (the card's Allow declines instead)."""
        return tuple(f for f in self.fields if f.required and f.default is None)


@dataclass(frozen=True)
class Malformed:
    """A request lmbridge cannot show (url mode, no readable schema): answered ``error`` now."""

    problem: str

    @property
    def error(self) -> Mapping[str, Any]:
        return {"code": INVALID_PARAMS, "message": f"invalid params: {self.problem}"}


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _choices_of(options: Sequence[Any] | None, enum: Sequence[str] | None) -> tuple[Choice, ...]:
    if options:
        return tuple(Choice(o.const, o.title or o.const, o.description) for o in options)
    return tuple(Choice(v, v) for v in enum or ())


def read(params: object) -> Question | Malformed:
    """``elicitation/create``'s ``params`` (as received) → ``Question``; ``Malformed`` for a
    mode other than ``form`` (lmbridge advertises form only) or a schema it cannot show
    (a property of an unknown type, none at all)."""
    if isinstance(params, Mapping) and params.get("mode") != "form":
        return Malformed(f"elicitation mode {str(params.get('mode'))[:40]!r} is not supported (form only)")
    try:
        req = CreateFormSessionElicitationRequest.model_validate(params)
    except ValidationError as exc:
        return Malformed(f"elicitation: {exc.errors()[0].get('msg', 'unreadable')}"[:300])
    props = req.requested_schema.properties or {}
    if not props:
        return Malformed("elicitation: requestedSchema has no properties")
    required = set(req.requested_schema.required or ())
    fields: list[Field] = []
    headers: set[str] = set()
    for key, prop in props.items():
        kind: Kind
        choices: tuple[Choice, ...] = ()
        if isinstance(prop, ElicitationStringPropertySchema):
            choices = _choices_of(prop.one_of, prop.enum)
            kind = "single" if choices else "text"
        elif isinstance(prop, ElicitationMultiSelectPropertySchema):
            kind = "multi"
            items = prop.items
            if isinstance(items, TitledMultiSelectItems):
                choices = _choices_of(items.any_of, None)
            elif isinstance(items, StringMultiSelectItems):
                choices = _choices_of(None, items.enum)
            if not choices:
                return Malformed(f"elicitation: property {key[:40]!r} offers no choices")
        elif isinstance(prop, ElicitationBooleanPropertySchema):
            kind, choices = "boolean", (Choice(YES, YES), Choice(NO, NO))
        elif isinstance(prop, ElicitationIntegerPropertySchema):
            kind = "integer"
        elif isinstance(prop, ElicitationNumberPropertySchema):
            kind = "number"
        else:
            return Malformed(f"elicitation: property {key[:40]!r} has a type lmbridge cannot show")
        title = " ".join((prop.title or key).split()) or f"Question {len(fields) + 1}"
        # The message asks the first question when that property does not ask its own.
        text = prop.description or (req.message if not fields and req.message.strip() else title)
        header = _clip(title, HEADER_MAX)
        n = 2
        while header in headers:  # answers come back by header: each must be unique
            suffix = f" ({n})"
            header, n = _clip(title, HEADER_MAX - len(suffix)) + suffix, n + 1
        headers.add(header)
        question = _clip(text, QUESTION_MAX) or _clip(title, QUESTION_MAX)
        detail = text if question != " ".join(text.split()) else None
        fields.append(Field(key, kind, header, question, detail, choices, key in required, prop.default))
    return Question(req.message, tuple(fields), req.tool_call_id)


def route(offered: frozenset[str]) -> Via:
    """How a question is shown, by the tools the request offers (module docstring)."""
    if ASK_TOOL in offered:
        return "ask"
    if ACTION_TOOL in offered:
        return "card"
    return "none"


def ask_input(q: Question) -> dict[str, Any]:
    """The input of a ``vscode_askQuestions`` call asking ``q`` (the tool's input schema:
    ``questions[]`` of ``header``, ``question``, ``message``, ``multiSelect``,
    ``allowFreeformInput``, ``options[]`` of ``label``, ``description``, ``recommended``). A
    select takes no free text, but one with a single choice does: VS Code 1.139 refuses the
    whole call for a question with one option and no free text (docs/vscode.md, "Questions")."""
    questions = []
    for i, f in enumerate(q.fields):
        item: dict[str, Any] = {"header": f.header, "question": f.question}
        detail = f.detail
        if i == 0 and q.message.strip() and " ".join(q.message.split()) not in (f.question, " ".join((f.detail or "").split())):
            detail = f"{q.message}\n\n{detail}" if detail else q.message
        if detail:
            item["message"] = detail
        if f.choices:
            defaults = {str(d) for d in f.default} if isinstance(f.default, list) else {_shown(f, f.default)}
            item["options"] = [{"label": c.label, **({"description": c.description} if c.description else {}), **({"recommended": True} if c.value in defaults else {})} for c in f.choices]
            # Free text only where VS Code requires it: its tool refuses the whole call when a
            # question has a single option and no free text. There, free text that is not the
            # choice answers nothing (``_value``).
            item["allowFreeformInput"] = len(f.choices) == 1
            if f.kind == "multi":
                item["multiSelect"] = True
        questions.append(item)
    return {"questions": questions}


def _shown(f: Field, value: Any) -> str:
    if f.kind == "boolean" and isinstance(value, bool):
        return YES if value else NO
    return str(value)


def _default_text(f: Field) -> str:
    """The agent's default as the card shows it: a choice by the label the card lists it by."""
    labels = {c.value: c.label for c in f.choices}
    values = f.default if isinstance(f.default, list) else [f.default]
    return ", ".join(labels.get(_shown(f, v), _shown(f, v)) for v in values)


def card_input(q: Question, agent: str, token: str) -> dict[str, Any]:
    """The input of lmbridge's own card (``permissions.ACTION_TOOL``) asking ``q``: its
    ``title``, ``message`` (markdown) and ``approvalToken``."""
    lines = [f"**{escape(agent)}** asks: {escape(q.message)}", ""]
    for f in q.fields:
        line = f"- **{escape(f.header)}**"
        if f.question != f.header:
            line += f": {escape(f.question)}"
        if f.choices:
            line += " (" + ", ".join(escape(c.label) for c in f.choices) + ")"
        if f.default is not None:
            line += f"; default: {escape(_default_text(f))}"
        lines.append(line)
    missing = q.unanswerable()
    if missing:
        names = ", ".join(f"**{escape(f.header)}**" for f in missing)
        allow = f"{names} {'is' if len(missing) == 1 else 'are'} required and {'has' if len(missing) == 1 else 'have'} no default, so **Allow** declines, as **Skip** does."
    else:
        allow = "**Allow** answers with the defaults shown; **Skip** declines."
    lines += [
        "",
        f"VS Code's question tool (**askQuestions**, Agent mode) is not offered to this chat, so the answers cannot be chosen here. {allow}",
    ]
    return {"title": _clip(f"{agent} asks a question", 80), "message": "\n".join(lines), "approvalToken": token}


def unshown_line(agent: str) -> str:
    """What the user reads when a question cannot be shown (no tool to show it offered)."""
    return f"{agent} asked a question, which this chat cannot show (Agent mode shows it): it was cancelled."


def response(q: Question, answer: Answer, result: str | None) -> dict[str, Any]:
    """The ``elicitation/create`` result for the user's ``answer`` (``history``'s: RESULT,
    DECLINED, CANCELLED for VS Code's tool; ALLOW, REJECT, CANCELLED for the card) and, for
    RESULT, VS Code's tool ``result`` text."""
    if answer is Answer.ALLOW:  # the card's: the defaults, as it showed (``card_input``)
        return {"action": ACCEPT, "content": q.defaults()} if not q.unanswerable() else dict(DECLINE)
    if answer in (Answer.REJECT, Answer.DECLINED):
        return dict(DECLINE)
    if answer is not Answer.RESULT or result is None:
        return dict(CANCEL)
    try:
        data = json.loads(result)
    except ValueError:
        return dict(CANCEL)
    answers = data.get("answers") if isinstance(data, dict) else None
    if not isinstance(answers, dict):
        return dict(CANCEL)
    content: dict[str, Any] = {}
    for f in q.fields:
        value = _value(f, answers.get(f.header))
        if value is not None:
            content[f.key] = value
        elif f.required:
            return dict(DECLINE)  # a required answer left out: nothing is accepted
    if not content:
        return dict(DECLINE)
    return {"action": ACCEPT, "content": content}


def _value(f: Field, given: Any) -> Any:
    """One field's value from VS Code's answer to its question; None: not answered (or not
    one of its choices, or not a number)."""
    if not isinstance(given, dict) or given.get("skipped") is True:
        return None
    selected = [s for s in given.get("selected") or () if isinstance(s, str)]
    free = given.get("freeText")
    free = free.strip() if isinstance(free, str) and free.strip() else None
    by_label = {c.label: c.value for c in f.choices}
    if f.kind == "multi":
        picked = [by_label[s] for s in selected if s in by_label]
        return picked or None
    if f.kind in ("single", "boolean"):
        one = next((by_label[s] for s in selected if s in by_label), None)
        if one is None and free in by_label:
            one = by_label[free]
        if f.kind == "boolean" and one is not None:
            return one == YES
        return one
    text = free if free is not None else (selected[0] if selected else None)
    if text is None or f.kind == "text":
        return text
    try:
        number = float(text)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    if f.kind == "integer":
        return int(number) if number.is_integer() else None
    return number
