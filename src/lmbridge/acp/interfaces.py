"""The seam between an ACP session and the agent process it runs on (docs/architecture.md,
"The acp/ package"), after httpcore's ``AsyncConnectionInterface``: what ``AcpSession``
(``acp.session``) asks of a process is the ``AgentProcessInterface`` protocol, which
``acp.process.AgentProcess`` implements; the records both speak (``Mailbox``,
``AgentMessage``, ``AgentGone``, ``AgentFeatures``, ``Spare``) live here. So ``session``
imports nothing of ``process``, and ``process`` imports ``session`` (no import circle):
``connection`` ← ``interfaces`` ← ``session`` ← ``process``.

Nothing here does I/O; the MCP SDK is named for the type checker only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from lmbridge.acp.connection import AgentConnection, Incoming, Response
from lmbridge.core import auth, profiles
from lmbridge.core.json_values import json_object

if TYPE_CHECKING:
    import weakref

    from lmbridge.core.messages import AgentSpec, ToolInfo
    from lmbridge.tools.mcp_bridge import McpHost, McpServer, ToolBridge


@dataclass(frozen=True)
class AgentGone:
    """Mailbox message: the process behind ``conn`` has ended (``conn.describe_exit()`` says why)."""

    conn: AgentConnection


#: What the agent side puts in a session actor's mailbox: the agent's frames for its ACP
#: session (``Incoming``: updates and requests; ``Response``: its prompt's answer), and
#: ``AgentGone`` when the process ends.
AgentMessage = Incoming | Response | AgentGone


class Mailbox(Protocol):
    """A session actor's mailbox as the agent side sees it (an anyio memory object stream's
    send side whose item type takes every ``AgentMessage``): put without waiting. The
    mailbox is also who uses a process: ``AgentProcess`` keeps its users by mailbox."""

    def send_nowait(self, item: AgentMessage, /) -> None: ...



@dataclass(frozen=True)
class AgentFeatures:
    """What an agent offered in its ``initialize`` answer (ACP ``AgentCapabilities``, ``authMethods``, ``agentInfo``),
    read defensively: a wrong-typed field is read as not offered."""

    images: bool = False  # promptCapabilities.image
    embedded_context: bool = False  # promptCapabilities.embeddedContext
    load: bool = False  # loadSession: session/load
    resume: bool = False  # sessionCapabilities.resume: session/resume
    close: bool = False  # sessionCapabilities.close: session/close
    # sessionCapabilities.additionalDirectories: session/new, resume and load take every workspace folder
    additional_directories: bool = False
    auth_methods: tuple[auth.Method, ...] = ()  # authMethods, read by auth.methods
    # Which agent it is, by agentInfo.name (acp.profiles): its quirks as named flags.
    profile: profiles.AgentProfile = profiles.OTHER

    @classmethod
    def of(cls, init: dict[str, Any]) -> AgentFeatures:
        caps = json_object(init.get("agentCapabilities"))
        prompt = json_object(caps.get("promptCapabilities"))
        sessions = json_object(caps.get("sessionCapabilities"))
        methods = init.get("authMethods")
        return cls(
            images=prompt.get("image") is True,
            embedded_context=prompt.get("embeddedContext") is True,
            load=caps.get("loadSession") is True,
            resume=isinstance(sessions.get("resume"), dict),
            close=isinstance(sessions.get("close"), dict),
            additional_directories=isinstance(sessions.get("additionalDirectories"), dict),
            auth_methods=auth.methods(methods) if isinstance(methods, list) else (),
            profile=profiles.profile_of(json_object(init.get("agentInfo")).get("name")),
        )


@dataclass(frozen=True)
class Spare:
    """An ACP session opened ahead for the next new chat, with its VS Code tools endpoint
    (``bridge``, registered with ``host``; both None, and no ``mcp_servers``, when it offers
    no tools)."""

    session_id: str
    bridge: ToolBridge | None
    mcp_servers: list[McpServer]
    host: McpHost | None
    # Its session/new answer whole (configOptions, modes, ...): the chat that takes it gets
    # what a session/new of its own would have answered (acp.session.AcpSession.open).
    answer: dict[str, Any] = field(default_factory=dict)
    tools: list[ToolInfo] = field(default_factory=list)  # what its endpoint serves from the start
    additional: tuple[str, ...] = ()  # the additionalDirectories it was opened with (``AgentProcess.additional``)


class Bounds(Protocol):
    """The bounds an agent process's requests are held to (``acp.process.AgentPool``'s)."""

    @property
    def start_timeout(self) -> float: ...  # seconds a new process may take to answer initialize
    @property
    def session_timeout(self) -> float: ...  # seconds a running one may take to answer a session request


class AgentProcessInterface(Protocol):
    """What an ``AcpSession`` uses of the agent process it runs on (``acp.process.AgentProcess``
    implements it; a test may give a stand-in). Each member's contract is
    ``AgentProcess``'s docstring of the same name."""

    @property
    def pool(self) -> Bounds: ...
    @property
    def spec(self) -> AgentSpec: ...
    @property
    def cwd(self) -> str | None: ...
    @property
    def caps(self) -> AgentFeatures: ...
    @property
    def sessions(self) -> dict[str, Mailbox]: ...  # ACP sessionId → the mailbox its frames go to
    @property
    def stopped_stuck(self) -> weakref.WeakSet[AgentConnection]: ...
    @property
    def spawned_by(self) -> Mailbox | None: ...

    async def connect(self, mailbox: Mailbox, step: Callable[[str], None] = ...) -> AgentConnection: ...
    def stuck(self, conn: AgentConnection | None, waited_on: str, seconds: float) -> Exception: ...
    def open(self, session_id: str, mailbox: Mailbox) -> None: ...
    def expect(self, rid: int, mailbox: Mailbox) -> None: ...
    def detach(self, mailbox: Mailbox, session_ids: tuple[str, ...] = ...) -> None: ...
    def additional(self) -> tuple[str, ...]: ...
    async def take_spare(self, tools: Sequence[ToolInfo] = ...) -> Spare | None: ...
    def want_spare(self) -> None: ...
    def retire(self) -> None: ...  # the agent said it needs a login: exit once no chat uses it
