"""``python -m lmbridge.devtools.wire_schema``: the shim ↔ daemon wire (docs/protocol.md) as
one JSON Schema document, from the daemon's pydantic models (``core/messages.py``, what the
shim sends; ``core/outbound.py``, what the daemon sends) and its tables (``METHODS``,
``core/errors.py``, the agent-action tools of ``core/permissions.py``).

vscode-shim/scripts/wire.mjs turns it into vscode-shim/src/chat/wire.ts with json-schema-to-typescript
(``make wire``; ``make lint`` fails when the checked-in file differs). The document has:

- ``$defs``: one schema per wire type, by the shim's name for it (``TS_NAMES``), each
  ``additionalProperties: false``. A field is required as the daemon's ``dump`` writes it:
  for what the daemon sends (``Direction.OUT``) every field but those whose default is
  None (left out when None, so never null); for what the shim sends (``Direction.IN``)
  the fields without a default. The unions and literals the wire names (``ALIASES``)
  are ``$defs`` too, and a field whose schema is one of them refers to it.
- ``constants``: ``PROTOCOL_VERSION``, the agent-action tools, ``Method``, ``ErrorCode``,
  each with its doc.
"""

from __future__ import annotations

import enum
import json
import re
import sys
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import models_json_schema

from lmbridge.core import errors, messages, outbound, permissions, registry


class Direction(enum.Enum):
    IN = "in"  # the shim sends it (the daemon validates it: defaults fill what is left out)
    OUT = "out"  # the daemon sends it (``dump``: only None fields are left out)


#: Every wire model, by the shim's name for it, and who sends it (the parts: both, so
#: ``OUT``: the shim writes them whole too).
TS_NAMES: dict[str, tuple[type[BaseModel], Direction]] = {
    "WireTextPart": (messages.TextPart, Direction.OUT),
    "WireThinkingPart": (messages.ThinkingPart, Direction.OUT),
    "WireToolCallPart": (messages.ToolCallPart, Direction.OUT),
    "WireDataPart": (messages.DataPart, Direction.OUT),
    "WireToolResultPart": (messages.ToolResultPart, Direction.OUT),
    "WireMessage": (messages.Message, Direction.IN),
    "WireTool": (messages.ToolInfo, Direction.IN),
    "WireChatOptions": (messages.ChatOptions, Direction.IN),
    "ToolFilter": (messages.ToolFilter, Direction.IN),
    "AgentSpec": (messages.AgentEntry, Direction.IN),
    "ClientInfo": (messages.ClientInfo, Direction.IN),
    "ClientCapabilities": (messages.ShimCapabilities, Direction.IN),
    "InitializeParams": (messages.InitializeParams, Direction.IN),
    "ChatInformationParams": (messages.ChatInformationParams, Direction.IN),
    "ChatResponseParams": (messages.ChatResponseParams, Direction.IN),
    "TokenCountParams": (messages.TokenCountParams, Direction.IN),
    "CancelParams": (messages.CancelParams, Direction.IN),
    "SetControlParams": (messages.SetControlParams, Direction.IN),
    "AgentRegistryParams": (registry.RegistryParams, Direction.IN),
    "ModelCapabilities": (messages.ModelCapabilities, Direction.OUT),
    "ModelInfo": (messages.ModelInfo, Direction.OUT),
    "ServerInfo": (outbound.ServerInfo, Direction.OUT),
    "InitializeResult": (outbound.InitializeResult, Direction.OUT),
    "ChatInformationResult": (outbound.ChatInformationResult, Direction.OUT),
    "ChatResponseResult": (outbound.ChatResponseResult, Direction.OUT),
    "AgentPreset": (outbound.AgentPreset, Direction.OUT),
    "AgentPresetsResult": (outbound.AgentPresetsResult, Direction.OUT),
    "RegistryAgent": (outbound.RegistryAgent, Direction.OUT),
    "AgentRegistryResult": (outbound.AgentRegistryResult, Direction.OUT),
    "ResponsePartParams": (outbound.ResponsePartParams, Direction.OUT),
    "WireControlChoice": (outbound.ControlChoice, Direction.OUT),
    "WireControl": (outbound.Control, Direction.OUT),
    "WireCommand": (outbound.Command, Direction.OUT),
    "WireCost": (outbound.Cost, Direction.OUT),
    "WireUsage": (outbound.Usage, Direction.OUT),
    "SessionStateParams": (outbound.SessionStateParams, Direction.OUT),
    "ReadTextFileParams": (outbound.ReadTextFileParams, Direction.OUT),
    "ReadTextFileResult": (outbound.ReadTextFileResult, Direction.IN),
    "WriteTextFileParams": (outbound.WriteTextFileParams, Direction.OUT),
    "LoginCommand": (outbound.LoginCommand, Direction.OUT),
    "NamedLogin": (outbound.NamedLogin, Direction.OUT),
    "AuthMethod": (outbound.AuthMethod, Direction.OUT),
    "AuthRequiredData": (outbound.AuthRequiredData, Direction.OUT),
    "AgentActionInput": (outbound.AgentActionInput, Direction.OUT),
    "RpcError": (outbound.RpcError, Direction.OUT),
}

#: The unions and literals the wire names: a field whose schema is one of them refers to it.
ALIASES: dict[str, tuple[Any, str]] = {
    "WireRole": (messages.Role, "Who wrote a message."),
    "StopReason": (messages.StopReason, "How a turn ended (ACP's `stopReason`, and `tool_calls`: a permission card waits)."),
    "Approver": (outbound.Approver, "Who approves an agent's actions in a mode (docs/protocol.md, \"Per-chat controls\")."),
    "WireInputPart": (messages.InputPart, "A part of a message the shim sends."),
    "WireResponsePart": (messages.ResponsePart, "The daemon's parts: `stateful_marker` first in an answer, `usage` last (docs/protocol.md, \"Shapes\")."),
}

#: The tools that carry an agent's permission requests, in the order the shim registers them, with what each carries.
ACTION_TOOLS: list[tuple[str, str]] = [
    (permissions.ACTION_TOOL, "Commands (and any request that carries one, whatever its kind), other and unknown actions."),
    (permissions.READ_TOOL, "Reading, searching, thinking."),
    (permissions.EDIT_TOOL, "Editing, deleting, moving files."),
    (permissions.FETCH_TOOL, "Fetching from the network."),
    (permissions.MODE_TOOL, "Switching the agent's mode (leaving plan mode)."),
    (
        permissions.PROTECTED_TOOL,
        "Changing a protected file (VS Code's `chat.tools.edits.autoApprove` says no), or files the request"
        " does not name: never covered by a session approval of the edit tool.",
    ),
]

_REF = "#/$defs/{model}"


def _markdown(text: str) -> str:
    """A docstring's RST literals (````x````) as markdown's (```x```)."""
    return text.replace("``", "`")


def _strip_titles(node: Any, keep: bool = False) -> Any:
    """``node`` without pydantic's property titles (json-schema-to-typescript would make each a named type)."""
    if isinstance(node, dict):
        return {
            k: {name: _strip_titles(p) for name, p in v.items()} if k == "properties" else _strip_titles(v)
            for k, v in node.items()
            if keep or k != "title"
        }
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def _rename(node: Any, names: dict[str, str]) -> Any:
    if isinstance(node, dict):
        out = {k: _rename(v, names) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = "#/$defs/" + names.get(ref[8:], ref[8:])
        return out
    if isinstance(node, list):
        return [_rename(v, names) for v in node]
    return node


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``X | None`` as ``X`` (a field left out when None is never null)."""
    options = schema.get("anyOf")
    if not isinstance(options, list) or {"type": "null"} not in options:
        return schema
    rest = [o for o in options if o != {"type": "null"}]
    base = {k: v for k, v in schema.items() if k != "anyOf"}
    return {**base, **rest[0]} if len(rest) == 1 else {**base, "anyOf": rest}


def _model_def(model: type[BaseModel], direction: Direction, schema: dict[str, Any], name: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field_name, field in model.model_fields.items():
        key = field.alias or field_name
        prop = {k: v for k, v in schema["properties"][key].items() if k != "default"}
        has_default = not field.is_required()
        none_default = has_default and field.default_factory is None and field.default is None
        if direction is Direction.OUT:
            needed = not none_default
        else:
            needed = not has_default
        if none_default:
            prop = _not_null(prop)
        if "description" in prop:
            prop["description"] = _markdown(prop["description"])
        properties[key] = prop
        if needed:
            required.append(key)
    out: dict[str, Any] = {"title": name, "type": "object"}
    if model.__doc__:
        out["description"] = _markdown(" ".join(model.__doc__.split()))
    return {**out, "properties": properties, "required": required, "additionalProperties": False}


def _refer(node: Any, aliases: dict[str, Any], top: bool = True) -> Any:
    """``node`` with every subschema equal to an alias's replaced by a reference to it."""
    if isinstance(node, dict):
        if not top:
            bare = {k: v for k, v in node.items() if k not in ("description",)}
            for name, schema in aliases.items():
                if bare == schema:
                    # Its own doc stays on the alias: beside a $ref it would make another type.
                    return {"$ref": f"#/$defs/{name}"}
        return {k: _refer(v, aliases, top=False) for k, v in node.items()}
    if isinstance(node, list):
        return [_refer(v, aliases, top=False) for v in node]
    return node


def document() -> dict[str, Any]:
    """The wire as one JSON Schema document (this module's docstring)."""
    by_class = {model.__name__: name for name, (model, _) in TS_NAMES.items()}
    _, top = models_json_schema([(model, "validation") for model, _ in TS_NAMES.values()], ref_template=_REF)
    raw = {by_class.get(k, k): v for k, v in _rename(top["$defs"], by_class).items()}
    defs: dict[str, Any] = {}
    for name, (model, direction) in TS_NAMES.items():
        defs[name] = _model_def(model, direction, raw[name], name)
    aliases: dict[str, Any] = {}
    for name, (target, _doc) in ALIASES.items():
        schema = TypeAdapter(target).json_schema(ref_template=_REF)
        schema.pop("$defs", None)
        aliases[name] = _rename(_strip_titles(schema), by_class)
    defs = {name: _refer(_strip_titles(d, keep=True), aliases) for name, d in defs.items()}
    for name, (_target, doc) in ALIASES.items():
        defs[name] = {"title": name, "description": doc, **aliases[name]}
    constants = {
        "PROTOCOL_VERSION": messages.PROTOCOL_VERSION,
        "AGENT_ACTION_TOOLS": [{"name": tool, "doc": doc} for tool, doc in ACTION_TOOLS],
        "Method": {key: {"method": method, "doc": doc} for key, (method, doc) in messages.METHODS.items()},
        "ErrorCode": errors.SHIM_CODES,
    }
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "lmbridge wire v1", "$defs": defs, "constants": constants}


def main() -> None:
    json.dump(document(), sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


# A name the shim reads must be a TypeScript identifier.
assert all(re.fullmatch(r"[A-Za-z_]\w*", n) for n in [*TS_NAMES, *ALIASES])

if __name__ == "__main__":
    main()
