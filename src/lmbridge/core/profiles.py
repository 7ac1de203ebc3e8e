"""Agent profiles: what lmbridge knows about each agent's ACP adapter, as named flags.

An agent is recognised once, from its ``initialize`` answer's ``agentInfo.name``
(``profile_of``); the rest of the daemon reads the profile's flags and never names an agent.
Any agent not listed gets ``OTHER``: no quirk assumed, no name trusted.

Pure: no I/O, importable from the pure core (permissions, turn, render, history).
docs/architecture.md ("Agent profiles") lists the flags and why each agent has them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ToolNaming(enum.Enum):
    """Where an agent's ``session/request_permission`` names the MCP tool it is for
    (read by ``permissions.bridged_tool``)."""

    CLAUDE_META = "claude-meta"  # _meta.claudeCode.toolName: mcp__<server>__<tool>
    FUNCTION_CALL_ID = "function-call-id"  # toolCallId: mcp_<server>_<tool>__<n>
    TITLE = "title"  # title only: <server>/<tool> (the agent names the tool nowhere else)
    NONE = "none"  # no name is trusted: every request is put to the user


@dataclass(frozen=True, slots=True)
class AgentProfile:
    """One agent's quirks.

    ``name``: a short name for logs. ``tool_naming``: where it names the MCP tool a
    permission is for. ``shared_mcp_registry``: one registry of MCP servers for all the
    process's sessions, so each session's VS Code tools server needs its own name
    (``mcp_bridge.server_name``), or a second chat's ``session/new`` is refused.
    ``keeps_spare``: it may be kept a spare session (``acp.process``); fast-agent 0.10.48 may
    not: with a spare open beside a chat's session, that session could not be taken up again
    after an eviction or a daemon restart (``session/resume`` and ``session/load`` answered
    "Session not found": seen in its real-agent tests; the cause is not known).
    ``spares``: how many spare sessions a process of it keeps ready (``core.spares``; where
    ``keeps_spare``): claude-agent-acp 0.101.0 keeps 4, enough for a burst of new chats back
    to back, each a Claude Code child of about 165 MiB idle (docs/performance.md, "A burst of new
    chats"); any other agent 2.

    ``permission_content_is_prompt``: a permission's ``toolCall.content`` says what is asked
    (codex-acp 2.6.0: the network access, or the added permissions, a command asks for; the
    message of an MCP server's question), not the call's content: the card may show it, the
    call's output never does (``present.TurnRenderer.permission_tool``).

    ``cancel_breaks_history``: a cancel can leave the session's history unusable, so the
    first prompt after it fails and keeps failing in that session, resumed or not
    (fast-agent: a Stop mid-stream leaves an empty assistant message, which model APIs
    refuse with HTTP 400; gemini-cli: a Stop at a permission leaves a function call without
    its response, refused the same way). Recovered in a fresh session told the conversation, never by
    taking the same session up again (``acp.lifecycle.SessionLife.recover``).

    ``cancel_leaves_commands``: a ``session/cancel`` ends the turn but not a command it runs
    (codex-acp 2.6.0: ``session/cancel`` interrupts the turn, its command goes on as a
    background terminal until ``session/close``, which terminates the thread's background
    terminals). A turn cancelled while one runs has its session closed and taken up
    again (``turn``; ``core.present.TurnRenderer.left_running``).

    ``asking_mode``: the value of its mode control in which it asks the client
    (``session/request_permission``) before an edit and a command; each new session starts in
    it unless the user chose another (``core.modes``). ``self_approving``: its modes in which
    it runs some edits or commands on its own judgement, unasked: entered only by the user's
    choice, and shown as such. Both as seen on the wire (docs/agents.md, "Modes: who approves").
    ``skip_option``: the ``optionId`` a Skip selects when the agent offers more than one
    ``reject_once`` option (``permissions.outcome``; docs/protocol.md, "Which option an
    answer selects"). codex-acp 2.6.0's default set for a command offers ``decline`` ("No,
    continue without running it") and ``cancel`` ("No, and tell Codex what to do
    differently": it ends its turn); a Skip is ``decline``. A Stop is ACP's ``cancelled``
    outcome, after ``session/cancel``, for every agent: codex-acp reads an answer that
    selects no option as its ``cancel``.

    ``session_meta``: the ``_meta`` sent with each ``session/new``, ``session/resume`` and
    ``session/load`` (``acp.session``), a JSON object; None: none. claude-agent-acp 0.101.0
    passes ``_meta.claudeCode.options`` to the Claude Agent SDK, whose ``settings`` are
    Claude Code's flag settings: ``permissions.ask: ["Bash"]`` makes it ask the client before
    every command, in every mode, the read-only ones (``ls``) included (docs/agents.md,
    "Modes: who approves").
    """

    name: str
    tool_naming: ToolNaming = ToolNaming.NONE
    shared_mcp_registry: bool = False
    keeps_spare: bool = True
    spares: int = 2
    permission_content_is_prompt: bool = False
    cancel_breaks_history: bool = False
    cancel_leaves_commands: bool = False
    asking_mode: str | None = None
    self_approving: frozenset[str] = frozenset()
    skip_option: str | None = None
    session_meta: Mapping[str, Any] | None = field(default=None, hash=False)


# claude-agent-acp 0.101: "default" (Manual) asks for each edit and command; acceptEdits runs edits
# in the workspace unasked, auto lets its classifier decide. With the ask rule for Bash every command
# asks, in every mode (else default runs read-only ones unasked, and plan lets the classifier decide
# commands): plan then asks for everything (seen), so it is not a mode that approves on its own.
CLAUDE_ASK_EVERY_COMMAND: Mapping[str, Any] = {"claudeCode": {"options": {"settings": {"permissions": {"ask": ["Bash"]}}}}}
CLAUDE = AgentProfile(
    "claude", ToolNaming.CLAUDE_META, asking_mode="default", self_approving=frozenset({"acceptEdits", "auto", "bypassPermissions"}),
    session_meta=CLAUDE_ASK_EVERY_COMMAND, spares=4,
)  # fmt: skip
# gemini-cli 0.61.0: a Stop at a permission leaves its function call without a response, which
# the model API refuses (HTTP 400); loaded again (session/load works in a later minute than the
# session's start: docs/sessions.md) the session keeps that call, so it is never taken up again.
GEMINI = AgentProfile(
    "gemini", ToolNaming.FUNCTION_CALL_ID, asking_mode="default", self_approving=frozenset({"autoEdit", "yolo"}), cancel_breaks_history=True,
)  # fmt: skip
# codex-acp 2.6.0 names an MCP tool only in the tool_call before its permission (rawInput
# {server, tool}), which asks as kind "execute": put to the user, never named (ToolNaming.NONE).
# No mode asks before every command; read-only asks before each edit and before a command leaves
# its sandbox, and runs other commands unasked in a read-only, offline sandbox.
CODEX = AgentProfile(
    "codex", permission_content_is_prompt=True, cancel_leaves_commands=True,
    asking_mode="read-only", self_approving=frozenset({"workspace-write", "agent", "agent-full-access"}), skip_option="decline",
)  # fmt: skip
FAST_AGENT = AgentProfile("fast-agent", ToolNaming.TITLE, shared_mcp_registry=True, keeps_spare=False, cancel_breaks_history=True)  # fast-agent 0.10.48
OTHER = AgentProfile("other")

#: Every profile (for tests and docs).
ALL: tuple[AgentProfile, ...] = (CLAUDE, GEMINI, CODEX, FAST_AGENT, OTHER)

#: ``agentInfo.name`` → profile; any other agent is ``OTHER``.
PROFILES: Mapping[str, AgentProfile] = {
    "@zed-industries/claude-agent-acp": CLAUDE,
    "@zed-industries/claude-code-acp": CLAUDE,
    "@agentclientprotocol/claude-agent-acp": CLAUDE,
    "gemini-cli": GEMINI,
    "@agentclientprotocol/codex-acp": CODEX,  # 2.x
    "codex-acp": CODEX,  # @zed-industries/codex-acp 0.x
    "fast-agent-acp": FAST_AGENT,
}


def profile_of(agent_name: object) -> AgentProfile:
    """The profile of an agent by its ``initialize`` answer's ``agentInfo.name`` (any
    JSON value: a name that is not a listed string is ``OTHER``)."""
    return PROFILES.get(agent_name, OTHER) if isinstance(agent_name, str) else OTHER
