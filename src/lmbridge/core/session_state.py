"""What an agent offers one chat, kept per ACP session: its modes and other select
options, its slash commands and its context usage (ACP "Session Modes", "Session Config
Options", "Slash Commands" and the ``usage_update`` session update; docs/protocol.md,
"Per-chat controls"). Pure: no I/O, immutable values in, new values out.

A session's **controls** are what the user may choose for that chat alone:

* each ``select`` config option (``configOptions`` in the answers to ``session/new``,
  ``session/resume``, ``session/load``, ``session/set_config_option``, and in
  ``config_option_update``) except the one of category ``model`` (the agent's models are
  entries of VS Code's model picker: agent_models). Set with ``session/set_config_option``.
* the older ``modes`` (``{currentModeId, availableModes}``), as one control with the id
  ``LEGACY_MODE``, when no config option is of category ``mode`` (ACP: config options
  supersede modes). Set with ``session/set_mode``.

``current_mode_update`` moves the current value of the legacy control, or, where the agent
has none, of its config option of category ``mode`` (claude-agent-acp reports leaving plan
mode so). ``available_commands_update`` replaces the commands, ``usage_update`` the usage.
``session_info_update`` sets (or, with ``"title": null``, clears) the session's **title**
(claude-agent-acp 0.101 and codex-acp 2.6 name a session after its first prompt); its
other fields (``updatedAt``, ``_meta``) are not state. The **tokens** of the latest prompt
result (``turn_usage``: ACP's ``PromptResponse.usage``, else ``_meta.quota.token_count``,
the shape claude-agent-acp and codex-acp share) go with the usage.
Everything an agent sends is untrusted: malformed entries are skipped, never raised on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lmbridge.core.agent_models import Choice, select_options

#: The control id of the older ACP ``modes`` (set with ``session/set_mode``).
LEGACY_MODE = "mode"

#: ``session/update`` kinds that change a session's state (the rest are the turn's).
STATE_KINDS = frozenset({"current_mode_update", "config_option_update", "available_commands_update", "usage_update", "session_info_update"})


def state_kind(change: Any) -> str | None:
    """The ``sessionUpdate`` kind of a ``session/update``'s ``update`` when it is one of
    ``STATE_KINDS``, else None. An agent may send anything there (a list, an object): only a
    string is looked up (docs/protocol.md, "Transport": a frame the daemon cannot use is dropped)."""
    kind = change.get("sessionUpdate") if isinstance(change, dict) else None
    return kind if isinstance(kind, str) and kind in STATE_KINDS else None

#: At most this many commands, controls and choices are kept (an agent's lists are untrusted).
LIMIT = 200
#: Characters kept of a name, description or hint.
TEXT_LIMIT = 500


@dataclass(frozen=True)
class Control:
    """One choice for a chat: ``id`` (the configId, or ``LEGACY_MODE``), its ``name``, the
    ACP ``category`` (``mode``, ``thought_level``, ... or None), its ``choices`` and the
    ``current`` value (None when the agent did not say). ``legacy``: set with
    ``session/set_mode`` rather than ``session/set_config_option``."""

    id: str
    name: str
    category: str | None
    choices: tuple[Choice, ...]
    current: str | None
    legacy: bool = False

    def offers(self, value: str) -> bool:
        return any(c.value == value for c in self.choices)

    def label(self, value: str | None) -> str | None:
        """The name of ``value`` (or the value itself if the agent named it not)."""
        return next((c.name for c in self.choices if c.value == value), value)


@dataclass(frozen=True)
class Command:
    """One slash command (ACP ``AvailableCommand``): typed as ``/<name> <input>``."""

    name: str
    description: str
    hint: str | None = None


@dataclass(frozen=True)
class Usage:
    """ACP ``usage_update``: ``used`` tokens in the context, of ``size`` (the context
    window), and the session's cumulative ``cost`` (``amount`` in ``currency``, ISO 4217).
    Any of them None when the agent sent none or a malformed one."""

    used: int | None
    size: int | None
    amount: float | None = None
    currency: str | None = None
    # The latest prompt result's token counts (``turn_usage``), in ACP's names: ((name, count), ...).
    tokens: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class SessionState:
    """One ACP session's controls, commands and usage."""

    controls: tuple[Control, ...] = ()
    commands: tuple[Command, ...] = ()
    usage: Usage | None = None
    title: str | None = None  # session_info_update's title, one line

    def control(self, control_id: str) -> Control | None:
        return next((c for c in self.controls if c.id == control_id), None)


def _text(value: Any) -> str | None:
    return value[:TEXT_LIMIT] if isinstance(value, str) and value else None


def _count(value: Any) -> int | None:
    """A token count: a non-negative integer (bool is not one), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return int(value)


def _select_controls(config_options: Any) -> tuple[Control, ...]:
    """The controls of a ``configOptions`` list: its select options but the ``model`` one."""
    raw = {o["id"]: o for o in config_options if isinstance(o, dict) and isinstance(o.get("id"), str)} if isinstance(config_options, list) else {}
    out = []
    for option in select_options(config_options):
        if option.category == "model" or not option.choices:
            continue
        current = raw.get(option.id, {}).get("currentValue")
        out.append(Control(option.id, option.name[:TEXT_LIMIT], option.category, option.choices[:LIMIT], current if isinstance(current, str) else None))
    return tuple(out[:LIMIT])


def _legacy_modes(modes: Any) -> Control | None:
    """The control of ACP's ``modes`` (``SessionModeState``), None when malformed or empty."""
    if not isinstance(modes, dict) or not isinstance(modes.get("availableModes"), list):
        return None
    choices = []
    for mode in modes["availableModes"][:LIMIT]:
        if isinstance(mode, dict) and isinstance(mode.get("id"), str) and mode["id"]:
            choices.append(Choice(mode["id"], _text(mode.get("name")) or mode["id"]))
    if not choices:
        return None
    current = modes.get("currentModeId")
    return Control(LEGACY_MODE, "Mode", "mode", tuple(choices), current if isinstance(current, str) else None, legacy=True)


def _merge(selects: tuple[Control, ...], legacy: Control | None) -> tuple[Control, ...]:
    """The select controls, plus the legacy modes when none is of category mode nor named
    ``LEGACY_MODE``; a mode control first (it is the one VS Code's picker shows)."""
    if legacy is not None and not any(c.category == "mode" or c.id == LEGACY_MODE for c in selects):
        selects = (legacy, *selects)
    return tuple(sorted(selects, key=lambda c: 0 if c.category == "mode" else 1 if c.category == "thought_level" else 2))


def opened(answer: Any) -> SessionState:
    """The state a ``session/new`` / ``session/resume`` / ``session/load`` answer gives
    (its ``modes`` and ``configOptions``; anything else in it is not state)."""
    answer = answer if isinstance(answer, dict) else {}
    return SessionState(controls=_merge(_select_controls(answer.get("configOptions")), _legacy_modes(answer.get("modes"))))


def _commands(raw: Any) -> tuple[Command, ...]:
    out: dict[str, Command] = {}
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        name = _text(item.get("name"))
        if name is None or any(ch.isspace() for ch in name):
            continue
        name = name.removeprefix("/")
        hint = item.get("input")
        out.setdefault(name, Command(name, _text(item.get("description")) or "", _text(hint.get("hint")) if isinstance(hint, dict) else None))
    return tuple(out.values())[:LIMIT]


def _usage(update: Mapping[str, Any]) -> Usage:
    cost = update.get("cost")
    amount = cost.get("amount") if isinstance(cost, dict) else None
    amount = float(amount) if isinstance(amount, int | float) and not isinstance(amount, bool) and math.isfinite(amount) else None
    currency = _text(cost.get("currency")) if isinstance(cost, dict) else None
    return Usage(_count(update.get("used")), _count(update.get("size")), amount, currency[:8] if currency else None)


def update(state: SessionState, change: Any) -> SessionState | None:
    """The state after one ``session/update``'s ``update`` object, or None when it changes
    nothing (another kind, or malformed, or the same again). Never raises."""
    if not isinstance(change, dict):
        return None
    kind = change.get("sessionUpdate")
    new = state
    if kind == "current_mode_update":
        mode = change.get("currentModeId")
        if not isinstance(mode, str):
            return None
        target = state.control(LEGACY_MODE)
        if target is None or not target.legacy:
            target = next((c for c in state.controls if c.category == "mode"), None)
        if target is None or not target.offers(mode):
            return None
        new = with_value(state, target.id, mode)
    elif kind == "config_option_update":
        if not isinstance(change.get("configOptions"), list):
            return None
        legacy = next((c for c in state.controls if c.legacy), None)
        new = replace(state, controls=_merge(_select_controls(change["configOptions"]), legacy))
    elif kind == "available_commands_update":
        new = replace(state, commands=_commands(change.get("availableCommands")))
    elif kind == "usage_update":
        new = replace(state, usage=replace(_usage(change), tokens=state.usage.tokens if state.usage else ()))
    elif kind == "session_info_update":
        if "title" not in change:
            return None
        title = change["title"]
        if title is not None and not isinstance(title, str):
            return None
        new = replace(state, title=_text(" ".join(title.split())) if title is not None else None)
    return new if new != state else None


#: A prompt result's token counts, ACP ``Usage`` names (``PromptResponse.usage``), in order.
TOKEN_FIELDS = ("inputTokens", "outputTokens", "totalTokens", "thoughtTokens", "cachedReadTokens", "cachedWriteTokens")
#: ``_meta.quota.token_count`` (claude-agent-acp 0.101, codex-acp 2.6) → ACP's name.
QUOTA_FIELDS = {
    "inputTokens": "inputTokens", "outputTokens": "outputTokens", "totalTokens": "totalTokens",
    "reasoningOutputTokens": "thoughtTokens", "cachedInputTokens": "cachedReadTokens", "cachedWriteTokens": "cachedWriteTokens",
}  # fmt: skip


def turn_usage(state: SessionState, result: Any) -> SessionState | None:
    """The state after a ``session/prompt`` result: its token counts kept with the usage
    (``result.usage``, else ``result._meta.quota.token_count``; each a non-negative integer,
    the others left out), or None when it holds none or the same again. Never raises."""
    result = result if isinstance(result, dict) else {}
    usage, meta = result.get("usage"), result.get("_meta")
    quota = meta.get("quota") if isinstance(meta, dict) else None
    counts = quota.get("token_count") if isinstance(quota, dict) else None
    tokens: dict[str, int] = {}
    if isinstance(usage, dict):
        tokens = {name: n for name in TOKEN_FIELDS if (n := _count(usage.get(name))) is not None}
    if not tokens and isinstance(counts, dict):
        found = {QUOTA_FIELDS[k]: n for k in QUOTA_FIELDS if (n := _count(counts.get(k))) is not None}
        tokens = {name: found[name] for name in TOKEN_FIELDS if name in found}
    if not tokens:
        return None
    old = state.usage or Usage(None, None)
    new = replace(state, usage=replace(old, tokens=tuple(tokens.items())))
    return new if new != state else None


def with_value(state: SessionState, control_id: str, value: str) -> SessionState:
    """``state`` with control ``control_id`` at ``value`` (unchanged if there is no such control)."""
    return replace(state, controls=tuple(replace(c, current=value) if c.id == control_id else c for c in state.controls))


def after_set(state: SessionState, control_id: str, value: str, answer: Any) -> SessionState:
    """The state once the agent accepted ``control_id`` = ``value``: the answer's
    ``configOptions`` when it holds a list (``session/set_config_option``), else the value."""
    options = answer.get("configOptions") if isinstance(answer, dict) else None
    if isinstance(options, list):
        legacy = next((c for c in state.controls if c.legacy), None)
        return with_value(replace(state, controls=_merge(_select_controls(options), legacy)), control_id, value)
    return with_value(state, control_id, value)


def answer_after_set(answer: Any, control: Control, value: str, set_answer: Any) -> dict[str, Any]:
    """A ``session/new`` answer (``answer``, a JSON object) as it stands once the agent
    accepted ``control`` = ``value`` on that session (``set_answer``: the answer to the
    ``session/set_config_option`` or ``session/set_mode``), so a chat taking the session
    sees its state as ``after_set`` would have made it: a config option's ``configOptions``
    from ``set_answer`` when it holds a list, else the answer's; the option ``control.id``'s
    ``currentValue`` (or, for the legacy control, ``modes.currentModeId``) at ``value``.
    A new object; ``answer`` is not changed. Never raises (the answers are untrusted)."""
    out = dict(answer) if isinstance(answer, dict) else {}
    options = set_answer.get("configOptions") if isinstance(set_answer, dict) else None
    if isinstance(options, list):
        out["configOptions"] = options
    if control.legacy:
        modes = out.get("modes")
        if isinstance(modes, dict):
            out["modes"] = {**modes, "currentModeId": value}
        return out
    options = out.get("configOptions")
    if isinstance(options, list):
        out["configOptions"] = [{**o, "currentValue": value} if isinstance(o, dict) and o.get("id") == control.id else o for o in options]
    return out


class UnknownControl(ValueError):
    """A control or value the session does not offer."""


def set_request(state: SessionState, session_id: str, control_id: str, value: str) -> tuple[str, dict[str, Any]]:
    """The ACP request that sets ``control_id`` to ``value``: ``(method, params)``.
    Raises ``UnknownControl`` when the session has no such control or value."""
    control = state.control(control_id)
    if control is None:
        raise UnknownControl(f"this chat's agent has no option {control_id!r}")
    if not control.offers(value):
        known = ", ".join(c.value for c in control.choices)
        raise UnknownControl(f"{control.name} has no value {value!r} (it offers: {known})")
    if control.legacy:
        return "session/set_mode", {"sessionId": session_id, "modeId": value}
    return "session/set_config_option", {"sessionId": session_id, "configId": control_id, "value": value}


def wanted(state: SessionState, values: Mapping[str, Any]) -> dict[str, str]:
    """Of ``values`` (control id → value, as VS Code's model configuration sends them),
    those the session offers and does not have already."""
    out = {}
    for control_id, value in values.items():
        control = state.control(control_id) if isinstance(control_id, str) else None
        if control is not None and isinstance(value, str) and control.offers(value) and control.current != value:
            out[control_id] = value
    return out


def picked(previous: Mapping[str, object] | None, received: Mapping[str, object]) -> dict[str, object]:
    """What the user chose since ``previous``: the entries of ``received`` (a request's
    model configuration) whose value differs from ``previous``'s (all of them when there is
    no previous one). VS Code sends one configuration per model, not per chat, so only a
    change is the user's choice for the chat that sends it (docs/vscode-shim.md, "Modes and
    options")."""
    if previous is None:
        return dict(received)
    return {k: v for k, v in received.items() if previous.get(k) != v}


def configuration_schema(controls: tuple[Control, ...], defaults: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """VS Code's ``configurationSchema`` for a model offering ``controls`` (JSON schema
    properties, each an enum in group ``navigation``: VS Code shows the first beside the
    model picker, all of them under the model's "Configure" actions); None when there are
    none. ``defaults``: a control's default value where set (the agent's ``mode`` setting),
    else the agent's current value."""
    properties: dict[str, Any] = {}
    for c in controls:
        if not c.choices:
            continue
        default = (defaults or {}).get(c.id)
        default = default if default is not None and c.offers(default) else c.current if c.current is not None and c.offers(c.current) else c.choices[0].value
        properties[c.id] = {
            "type": "string",
            "title": c.name,
            "enum": [x.value for x in c.choices],
            "enumItemLabels": [x.name for x in c.choices],
            "default": default,
            "group": "navigation",
        }
    return {"properties": properties} if properties else None


def to_wire(state: SessionState, approvers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The state as ``client/sessionState`` carries it (docs/protocol.md). ``approvers``:
    mode value → who approves in it (``core.modes.approvers``), put on the choices of the
    control of category ``mode`` as ``approver``."""
    marks = approvers or {}
    out: dict[str, Any] = {
        "controls": [
            {
                "id": c.id,
                "name": c.name,
                **({"category": c.category} if c.category else {}),
                **({"current": c.current} if c.current is not None else {}),
                "choices": [
                    {"value": x.value, "name": x.name, **({"approver": marks[x.value]} if c.category == "mode" and x.value in marks else {})}
                    for x in c.choices
                ],
            }
            for c in state.controls
        ],
        "commands": [{"name": m.name, "description": m.description, **({"hint": m.hint} if m.hint else {})} for m in state.commands],
    }
    if state.usage is not None:
        u = state.usage
        usage: dict[str, Any] = {k: v for k, v in (("used", u.used), ("size", u.size)) if v is not None}
        if u.amount is not None and u.currency:
            usage["cost"] = {"amount": u.amount, "currency": u.currency}
        if u.tokens:
            usage["tokens"] = dict(u.tokens)
        out["usage"] = usage
    if state.title:
        out["title"] = state.title
    return out


def controls_from_json(options: Any) -> tuple[Control, ...]:
    """The controls of an agent's cached ``configOptions`` (agent_models.to_json's, which
    keeps no current value): for the model picker's schema before any session runs."""
    return _select_controls(options)


#: What the user types to reach an agent's command whose name VS Code or Copilot Chat
#: takes for its own (``/compact``, ``/review``, ``/init``): ``//compact``.
ESCAPE = "//"


def agent_command(blocks: list[dict[str, Any]], commands: tuple[Command, ...]) -> list[dict[str, Any]]:
    """``session/prompt`` content with the escape undone: the first text block that reads
    ``//<name> ...``, ``<name>`` one of the session's ``commands``, reads ``/<name> ...``
    (ACP "Slash Commands": a command is a prompt that starts with ``/``). Anything else
    is returned as it is."""
    names = {c.name for c in commands}
    for i, block in enumerate(blocks):
        text = block.get("text") if block.get("type") == "text" else None
        if not isinstance(text, str):
            continue
        stripped = text.lstrip()
        if not stripped.startswith(ESCAPE):
            return blocks
        name = stripped[len(ESCAPE) :].split(None, 1)[0] if stripped[len(ESCAPE) :].strip() else ""
        if name not in names:
            return blocks
        return [*blocks[:i], {**block, "text": stripped[1:]}, *blocks[i + 1 :]]
    return blocks


#: The mime type of the data part that tells VS Code an answer's token usage (Copilot Chat's
#: ``CustomDataPartMimeTypes.Usage``; docs/vscode.md, "The context ring").
USAGE_MIME = "usage"


def answer_usage(usage: Usage | None, prompt_usage: Any) -> dict[str, int] | None:
    """What an answer reports in its ``usage`` data part (docs/protocol.md, "Response parts"):
    ``{"prompt_tokens", "completion_tokens", "total_tokens"}`` (Copilot Chat reads the part
    only when all three are numbers; its context ring shows ``prompt_tokens`` against the
    model's ``maxInputTokens``), or None when the agent told nothing.

    ``prompt_tokens``: the context in use, the last ``usage_update``'s ``used``; without one,
    the prompt result's ``usage`` (``inputTokens`` plus ``cachedReadTokens`` and
    ``cachedWriteTokens``: what the turn read, which for a turn of several model calls
    counts the context more than once). ``completion_tokens``: the prompt result's
    ``outputTokens`` (0 when unknown). Never raises."""
    result = prompt_usage if isinstance(prompt_usage, dict) else {}
    read = [_count(result.get(k)) for k in ("inputTokens", "cachedReadTokens", "cachedWriteTokens")]
    prompt = usage.used if usage is not None and usage.used is not None else (sum(n or 0 for n in read) if read[0] is not None else None)
    if prompt is None:
        return None
    completion = _count(result.get("outputTokens")) or 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
