"""Wire models of the shim link's set-up, v1 (docs/protocol.md): ``initialize`` (with the
agents' specs), the model list, token counts, cancels; and ``dump``.

What ``lmbridge serve`` needs before it answers ``initialize``: the chat's models (the parts,
``Message``, ``ChatResponseParams``) are in ``core.messages``, which re-exports these, and
load after the answer (docs/performance.md, "Start-up: the parser, the wire models and the
catalog"). Each class is a pydantic model built on first use (``defer_build``), but declaring
one costs its module's import ~0.5 ms. This module does no I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PROTOCOL_VERSION = 1


class _Wire(BaseModel):
    # Unknown fields are tolerated (newer shims) but not kept.
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class ToolFilter(_Wire):
    """Which VS Code tools an agent is offered (glob patterns on the tool name):
    those matching ``allow`` (all when empty) and no ``deny`` pattern."""

    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)


class AgentSpec(_Wire):
    """How to start one agent: ``{"id", "name"?, "command", "args"?, "env"?}``.

    ``command`` is an executable (looked up on PATH), ``args`` its arguments,
    ``env`` added to the daemon's own environment. The model id is ``id``.
    ``tools``: ``{"allow": [glob], "deny": [glob]}`` filters the VS Code tools
    offered to it (Copilot passes up to 128, many duplicating the agent's own).
    ``mode``: the value of its ``mode`` config option set on each session (agent_models).
    """

    id: str = Field(min_length=1)
    name: str | None = None
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    tools: ToolFilter = Field(default_factory=lambda: ToolFilter())
    mode: str | None = None  # a value of the agent's configOptions option of category "mode"


class AgentEntry(AgentSpec):
    """An agent as configured (``initialize.agents``, a config file): an ``AgentSpec`` whose
    ``command`` may be left out to name a preset (``agents.PRESETS``: ``{"id": "claude"}``);
    ``agents.resolve`` makes it an ``AgentSpec``."""

    command: str | None = Field(default=None, min_length=1)  # type: ignore[assignment]


class ClientInfo(_Wire):
    name: str
    version: str | None = None


class ShimCapabilities(_Wire):
    """``initialize``'s ``clientCapabilities``: what the shim serves of the daemon's
    ``client/*`` requests and notifications (docs/protocol.md, "Daemon → shim"). Absent
    (the console, replay, older shims): nothing, and the daemon sends no ``client/*``."""

    fs: bool = False  # client/readTextFile, client/writeTextFile
    terminal: bool = False  # client/terminal/*
    sessionState: bool = False  # client/sessionState


class InitializeParams(_Wire):
    """``initialize``. ``userTurns``: what the agent gets of a Copilot-rendered user
    turn: ``"request"`` the user's words and attachments (``user_message``), ``"verbatim"``
    the text as it came (the shim's ``lmbridge.userTurns`` setting). ``clientCapabilities``:
    what the shim serves of the daemon's requests (``ShimCapabilities``). ``editAutoApprove``:
    the user's ``chat.tools.edits.autoApprove``, which says which files are protected."""

    protocolVersion: int
    clientInfo: ClientInfo | None = None
    #: Every workspace folder on disk, in VS Code's order: agents run in the first, and are
    #: given the others (ACP ``additionalDirectories``) where they take them.
    workspaceFolders: list[str] = Field(default_factory=list)
    agents: list[AgentEntry] = Field(default_factory=list)
    userTurns: Literal["request", "verbatim"] = "request"
    clientCapabilities: ShimCapabilities = Field(default_factory=ShimCapabilities)
    #: The user's ``chat.tools.edits.autoApprove`` (glob → may VS Code's agent edit it unasked),
    #: VS Code's value in its order; absent: VS Code's default (``core.paths.EDIT_AUTO_APPROVE``).
    editAutoApprove: dict[str, bool] | None = None


class ChatInformationParams(_Wire):
    silent: bool = False


#: VS Code's model configuration (``options.modelConfiguration``): control id → value, as
#: sent (each value checked where it is used: ``permissions.from_configuration``, ``session_state``).
ModelConfiguration = dict[str, object]


class TokenCountParams(_Wire):
    modelId: str
    text: str


class CancelParams(_Wire):
    id: int | str


# ---------------------------------------------------------------- results


class ModelCapabilities(_Wire):
    toolCalling: bool | int = True
    imageInput: bool = False


class ModelInfo(_Wire):
    """``LanguageModelChatInformation``, one per configured agent (``id`` = the agent's id)."""

    id: str
    name: str
    family: str
    version: str
    maxInputTokens: int
    maxOutputTokens: int
    capabilities: ModelCapabilities
    tooltip: str | None = None
    detail: str | None = None
    # VS Code's per-model configuration (session_state.configuration_schema): the agent's modes
    # and options, chosen beside the model picker.
    configurationSchema: dict[str, Any] | None = None


def dump(model: BaseModel) -> dict[str, Any]:
    """A model as the JSON object sent on the wire (``None`` fields left out)."""
    return model.model_dump(mode="json", exclude_none=True)
