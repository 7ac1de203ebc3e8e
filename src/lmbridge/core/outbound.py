"""Wire models of what the daemon sends the shim, v1 (docs/protocol.md): methods' results,
notifications, ``client/*`` requests and the data of its errors; ``core/messages.py`` has
what the shim sends (requests' params) and the parts both send.

Together they are the wire's one definition: the shim's ``vscode-shim/src/chat/wire.ts`` is
generated from their JSON Schema (``lmbridge.devtools.wire_schema``, ``make wire``), and
``make lint`` fails when the checked-in file differs. The daemon builds these shapes as
plain dicts on its hot paths; tests/test_wire_schema.py checks that what it builds is
exactly what these models give back. Field names are the wire's (camelCase). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from lmbridge.core.messages import ModelInfo, ResponsePart, StopReason


class _Out(BaseModel):
    # What the daemon sends is exactly this: a field not here is a bug (tests/test_wire_schema.py).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, use_attribute_docstrings=True)


# ---------------------------------------------------------------- results


class ServerInfo(_Out):
    name: str
    version: str


class InitializeResult(_Out):
    """``initialize`` → the protocol spoken and the daemon's name and version."""

    protocolVersion: int
    serverInfo: ServerInfo


class ChatInformationResult(_Out):
    """``lm/provideLanguageModelChatInformation`` → one model per agent."""

    models: list[ModelInfo]


class ChatResponseResult(_Out):
    """``lm/provideLanguageModelChatResponse`` → how the turn ended (its parts came before)."""

    stopReason: StopReason


class AgentPreset(_Out):
    """One of the agents the daemon can start from its id alone (``agents/presets``)."""

    id: str
    name: str
    description: str | None
    requires: str | None
    """What has to be installed first, e.g. "Node.js 22+ (npx)"."""
    command: str | None
    args: list[str]
    package: str | None
    """The package ``command`` runs, e.g. "@agentclientprotocol/claude-agent-acp"."""
    registryId: str | None = None
    """The id of the same agent in the ACP registry, e.g. "claude-acp": the two are one agent."""


class AgentPresetsResult(_Out):
    presets: list[AgentPreset]


class RegistryAgent(_Out):
    """One agent of the ACP registry feed, by the distribution the daemon chose for this
    platform (``npx``, then ``uvx``, then ``binary``). ``npx``/``uvx``: ``command`` and
    ``args`` start it. ``binary``: ``archive`` (with ``sha256`` where the registry gives
    one) is unpacked and ``cmd`` (relative to the unpacked folder) run with ``args``."""

    id: str
    name: str
    version: str
    description: str
    website: str | None = None
    repository: str | None = None
    license: str | None = None
    distribution: Literal["npx", "uvx", "binary"]
    command: str | None = None
    args: list[str]
    env: dict[str, str]
    archive: str | None = None
    sha256: str | None = None
    cmd: str | None = None


class AgentRegistryResult(_Out):
    agents: list[RegistryAgent]
    problems: list[str]
    """Entries left out, and why (no distribution for this platform, malformed, …)."""


# ---------------------------------------------------------------- notifications


class ResponsePartParams(_Out):
    """``lm/responsePart``: one part of the answer to request ``requestId``."""

    requestId: int | str
    part: ResponsePart


Approver = Literal["user", "agent"]


class ControlChoice(_Out):
    value: str
    name: str
    approver: Approver | None = None
    """A mode's choices only, where the daemon knows: who approves the agent's edits and commands in that mode, the user (the agent asks first) or the agent itself."""


class Control(_Out):
    """One choice of a chat: an agent's mode or another select option."""

    id: str
    name: str
    category: str | None = None
    current: str | None = None
    choices: list[ControlChoice]


class Command(_Out):
    """One of the agent's slash commands."""

    name: str
    description: str
    hint: str | None = None


class Cost(_Out):
    amount: float
    currency: str


class Usage(_Out):
    """The agent's ``usage_update``: tokens in the context, the context window, the session's cost."""

    used: int | None = None
    size: int | None = None
    cost: Cost | None = None
    tokens: dict[str, int] | None = None
    """The latest prompt result's token counts, in ACP's names (``inputTokens``, ``outputTokens``, ``totalTokens``, …)."""


class SessionStateParams(_Out):
    """``client/sessionState``: one chat's state; ``requestId`` when the chat just got that request."""

    chatId: str
    modelId: str
    requestId: int | str | None = None
    controls: list[Control]
    commands: list[Command]
    usage: Usage | None = None
    title: str | None = None
    """The agent's title for the chat's session (its ``session_info_update``)."""


# ---------------------------------------------------------------- client/* requests


class ReadTextFileParams(_Out):
    """``client/readTextFile``: ``line`` is 1-based, ``limit`` a number of lines. → ``ReadTextFileResult``."""

    path: str
    line: int | None = None
    limit: int | None = None


class ReadTextFileResult(_Out):
    content: str


class WriteTextFileParams(_Out):
    """``client/writeTextFile`` → ``{}``."""

    path: str
    content: str


# ---------------------------------------------------------------- error data and tool input


class LoginCommand(_Out):
    """A command to run in a terminal to sign in to an agent."""

    command: str
    args: list[str]
    env: dict[str, str]


class NamedLogin(LoginCommand):
    """One of an agent's logins: its auth method's id and name, and the command a terminal runs."""

    id: str
    name: str
    description: str | None


class AuthMethod(_Out):
    id: str
    name: str
    description: str | None


class AuthRequiredData(_Out):
    """``error.data`` of a chat request whose agent needs a sign-in or a key (core/auth.py)."""

    reason: Literal["auth_required"]
    agentId: str
    agentName: str
    login: LoginCommand | None
    """The first of ``logins``; null when there is none."""
    logins: list[NamedLogin]
    """Every login the agent lists (its ``terminal`` auth methods, else the preset's)."""
    env: list[str]
    """Environment variables any of which would do, set in the agent's ``env`` in lmbridge.agents."""
    methods: list[AuthMethod]


class AgentActionInput(_Out):
    """``input`` of an agent-action tool call. The daemon renders the whole card; the
    extension shows it as it is and never reads the agent's request itself."""

    title: str
    """The card's heading: one line."""
    message: str
    """The card's body: markdown, the agent's text escaped by the daemon."""
    approvalToken: str
    """What ``invoke`` returns; the next request carries it back as the tool result."""


class RpcError(_Out):
    """A JSON-RPC 2.0 error object (codes: core/errors.py)."""

    code: int
    message: str
    data: Any = None
