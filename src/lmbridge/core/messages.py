"""Wire models of the shim ↔ daemon protocol, v1 (docs/protocol.md).

Pydantic models of every request's params and every shape the daemon sends.
Names follow VS Code's classes (``LanguageModelTextPart`` → ``{"type": "text"}``,
``LanguageModelToolCallPart`` → ``{"type": "tool_call", "callId", ...}``) so the
shim is a one-to-one conversion. This module does no I/O. It holds the chat's models and
re-exports the set-up's (``core.link``: ``initialize``, the agents' specs, the model list),
which are all ``lmbridge serve`` loads before it answers ``initialize``: this module loads
after (docs/performance.md, "Start-up: the parser, the wire models and the catalog").
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field

from lmbridge.core.link import PROTOCOL_VERSION as PROTOCOL_VERSION
from lmbridge.core.link import AgentEntry as AgentEntry
from lmbridge.core.link import AgentSpec as AgentSpec
from lmbridge.core.link import CancelParams as CancelParams
from lmbridge.core.link import ChatInformationParams as ChatInformationParams
from lmbridge.core.link import ClientInfo as ClientInfo
from lmbridge.core.link import InitializeParams as InitializeParams
from lmbridge.core.link import ModelCapabilities as ModelCapabilities
from lmbridge.core.link import ModelConfiguration as ModelConfiguration
from lmbridge.core.link import ModelInfo as ModelInfo
from lmbridge.core.link import ShimCapabilities as ShimCapabilities
from lmbridge.core.link import TokenCountParams as TokenCountParams
from lmbridge.core.link import ToolFilter as ToolFilter
from lmbridge.core.link import _Wire
from lmbridge.core.link import dump as dump

#: The only text VS Code puts in a tool result when the user presses Skip (docs/vscode.md, "Skip and Stop").
VSCODE_SKIP_TEXT = "The user chose to skip the tool call, they want to proceed without running it"

#: The wire's methods, by the shim's name for them (wire.ts ``Method``): the method and what
#: it is (docs/protocol.md). One definition: wire.ts is generated from it (``make wire``).
METHODS: dict[str, tuple[str, str]] = {
    "initialize": ("initialize", ""),
    "chatInformation": ("lm/provideLanguageModelChatInformation", ""),
    "chatResponse": ("lm/provideLanguageModelChatResponse", ""),
    "tokenCount": ("lm/provideTokenCount", ""),
    "shutdown": ("shutdown", ""),
    "agentPresets": ("agents/presets", 'The agents the daemon knows by id alone (`{"id": "claude"}` in lmbridge.agents).'),
    "agentRegistry": ("agents/registry", "The agents of an ACP registry feed the shim fetched, for this platform."),
    "responsePart": ("lm/responsePart", "Notification daemon → shim while a chat response runs."),
    "modelsChanged": ("lm/modelsChanged", "Notification daemon → shim: the models changed (an agent's own models were learnt)."),
    "cancelRequest": ("$/cancelRequest", "Notification shim → daemon."),
    "sessionState": ("client/sessionState", "Notification daemon → shim: a chat's modes and options, commands and usage (when the shim says `sessionState`)."),
    "setControl": ("chat/setControl", "Request shim → daemon: set one of a chat's controls on its live agent session."),
    "readTextFile": ("client/readTextFile", "Request daemon → shim: a file's text as the editor has it (unsaved changes included)."),
    "writeTextFile": ("client/writeTextFile", "Request daemon → shim: a file's new text, applied as a WorkspaceEdit and saved."),
    "terminalOpen": ("client/terminal/open", "Request daemon → shim: mirror a command lmbridge runs for an agent in a VS Code terminal."),
    "terminalOutput": ("client/terminal/output", "Notification daemon → shim: that command's output."),
    "terminalExit": ("client/terminal/exit", "Notification daemon → shim: that command's end."),
    "terminalKilled": ("$/terminalKilled", "Notification shim → daemon: the user closed (or Ctrl+C'd) that terminal: kill the command."),
    "workspaceFolders": ("$/workspaceFolders", "Notification shim → daemon: the workspace folders changed (every folder on disk, in VS Code's order); sessions opened later get them."),
}

StopReason = Literal["end_turn", "tool_calls", "cancelled", "max_tokens", "max_turn_requests", "refusal"]


# ---------------------------------------------------------------- input parts


class TextPart(_Wire):
    """``LanguageModelTextPart``: ``{"type": "text", "value": str}``."""

    type: Literal["text"] = "text"
    value: str


class ThinkingPart(_Wire):
    """``LanguageModelThinkingPart`` (proposed API): ``{"type": "thinking", "value", "id"?}``."""

    type: Literal["thinking"] = "thinking"
    value: str
    id: str | None = None


class DataPart(_Wire):
    """``LanguageModelDataPart``: ``{"type": "data", "mimeType", "data": base64 str}``."""

    type: Literal["data"] = "data"
    mimeType: str
    data: str

    @property
    def internal(self) -> bool:
        """Copilot Chat's own marker, not content anyone wrote or attached: ``cache_control``
        (9 bytes, ``ephemeral``, beside the system prompt, the current turn and every tool
        result), ``stateful_marker`` and the like. None of them is a media type, so the rule
        is the shim's (docs/vscode-shim.md, "Requests"): no ``/`` in the mime type."""
        return "/" not in self.mimeType


class ToolCallPart(_Wire):
    """``LanguageModelToolCallPart``: ``{"type": "tool_call", "callId", "name", "input": object}``."""

    type: Literal["tool_call"] = "tool_call"
    callId: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


ToolResultContent = Annotated[TextPart | DataPart, Field(discriminator="type")]


class ToolResultPart(_Wire):
    """``LanguageModelToolResultPart``: ``{"type": "tool_result", "callId", "content": [text|data]}``."""

    type: Literal["tool_result"] = "tool_result"
    callId: str
    content: list[ToolResultContent] = Field(default_factory=list)

    def text(self) -> str:
        """The result's text parts concatenated and trimmed (how approval tokens are read)."""
        return "".join(p.value for p in self.content if isinstance(p, TextPart)).strip()


InputPart = Annotated[TextPart | ThinkingPart | ToolCallPart | ToolResultPart | DataPart, Field(discriminator="type")]
# Data parts the daemon sends: ``stateful_marker`` (core/marker.py) first, ``usage`` last (docs/protocol.md, "Shapes").
ResponsePart = Annotated[TextPart | ThinkingPart | ToolCallPart | DataPart, Field(discriminator="type")]


Role = Literal["user", "assistant", "system"]


class Message(_Wire):
    """``LanguageModelChatRequestMessage``: ``{"role", "name"?, "content": [InputPart]}``."""

    role: Role
    name: str | None = None
    content: list[InputPart] = Field(default_factory=list)


class MessageCache:
    """Validated ``Message``s by their JSON shape.

    VS Code sends the whole conversation with every request (docs/vscode.md), so
    a long chat would be validated again and again: with this cache each
    message is validated once and later requests reuse the (frozen, shared)
    Message objects, and with them their fingerprint memo. Bounded: two
    generations of at most ``limit`` messages or ``max_chars`` characters of keys
    each. The validated objects take several times their JSON's size (a 20,000-message,
    32 MiB bound let an agent's tool-call-heavy chats hold 180 MB more of the daemon's
    RSS in the soak run, docs/reliability.md): 8 MiB a generation still holds a 5,000-message chat.
    """

    def __init__(self, limit: int = 10_000, max_chars: int = 8 * 2**20) -> None:
        self.limit = limit
        self.max_chars = max_chars
        # A generation: messages of one text part by role, then text; others (under
        # None, which no role is) by their JSON.
        self._young: dict[str | None, dict[str, Message]] = {}
        self._old: dict[str | None, dict[str, Message]] = {}
        self._size = 0
        self._chars = 0

    def messages(self, raw: Any) -> list[Message] | None:
        """``raw`` (a request's ``messages`` as parsed JSON) as Messages; None
        when it is not a list or a message does not validate (validate the
        request as a whole then, for the error message)."""
        if type(raw) is not list:
            return None
        young = self._young
        out: list[Message] = []
        append = out.append
        for item in raw:
            # The common message, {"role", "content": [{"type": "text", "value"}]}, is
            # looked up by its text without building a key (5,000 of them: ~5 ms).
            if type(item) is dict and len(item) == 2:
                content = item.get("content")
                if type(content) is list and len(content) == 1:
                    part = content[0]
                    if type(part) is dict and len(part) == 2 and part.get("type") == "text":
                        role, value = item.get("role"), part.get("value")
                        if type(role) is str and type(value) is str:
                            by_role = young.get(role)
                            message = by_role.get(value) if by_role is not None else None
                            if message is None:
                                message = self._miss(role, value, item)
                                if message is None:
                                    return None
                            append(message)
                            continue
            # Anything else by its exact JSON (true, 1 and 1.0 stay apart).
            key = json.dumps(item, sort_keys=True, ensure_ascii=False)
            message = young.get(None, {}).get(key) or self._miss(None, key, item)
            if message is None:
                return None
            append(message)
        if self._size > self.limit or self._chars > self.max_chars:
            self._old, self._young, self._size, self._chars = self._young, {}, 0, 0
        return out

    def _miss(self, group: str | None, key: str, item: Any) -> Message | None:
        message = self._old.get(group, {}).pop(key, None)
        if message is None:
            try:
                message = Message.model_validate(item)
            except ValueError:
                return None
        self._young.setdefault(group, {})[key] = message
        self._size += 1
        self._chars += len(key)
        return message


# ---------------------------------------------------------------- requests


class ToolInfo(_Wire):
    """One entry of ``options.tools``: ``LanguageModelChatTool``."""

    name: str
    description: str = ""
    inputSchema: dict[str, Any] | None = None


class ChatOptions(_Wire):
    tools: list[ToolInfo] = Field(default_factory=list)
    toolMode: Literal["auto", "required"] | None = None
    modelOptions: dict[str, Any] = Field(default_factory=dict)
    # VS Code's model configuration (``options.modelConfiguration``): control id → value.
    configuration: ModelConfiguration | None = None


class ChatResponseParams(_Wire):
    """Params of ``lm/provideLanguageModelChatResponse``."""

    modelId: str
    messages: list[Message]
    options: ChatOptions = Field(default_factory=ChatOptions)


class SetControlParams(_Wire):
    """``chat/setControl``: set ``controlId`` to ``value`` on chat ``chatId``'s live session
    (the ids ``client/sessionState`` gave)."""

    chatId: str = Field(min_length=1)
    controlId: str = Field(min_length=1)
    value: str
