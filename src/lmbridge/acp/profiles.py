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
from dataclasses import dataclass


class ToolNaming(enum.Enum):
    """Where an agent's ``session/request_permission`` names the MCP tool it is for
    (read by ``permissions.bridged_tool``)."""

    CLAUDE_META = "claude-meta"  # _meta.claudeCode.toolName: mcp__<server>__<tool>
    FUNCTION_CALL_ID = "function-call-id"  # toolCallId: mcp_<server>_<tool>__<n>
    CODEX_RAW_INPUT = "codex-raw-input"  # rawInput.server_name + request._meta.codex_approval_kind + its message
    TITLE = "title"  # title only: <server>/<tool> (the agent names the tool nowhere else)
    NONE = "none"  # no name is trusted: every request is put to the user


@dataclass(frozen=True, slots=True)
class AgentProfile:
    """One agent's quirks.

    ``name``: a short name for logs. ``tool_naming``: where it names the MCP tool a
    permission is for. ``shared_mcp_registry``: one registry of MCP servers for all the
    process's sessions, so each session's VS Code tools server needs its own name
    (``mcp_bridge.server_name``), or a second chat's ``session/new`` is refused.
    """

    name: str
    tool_naming: ToolNaming = ToolNaming.NONE
    shared_mcp_registry: bool = False


CLAUDE = AgentProfile("claude", ToolNaming.CLAUDE_META)
GEMINI = AgentProfile("gemini", ToolNaming.FUNCTION_CALL_ID)
CODEX = AgentProfile("codex", ToolNaming.CODEX_RAW_INPUT)
FAST_AGENT = AgentProfile("fast-agent", ToolNaming.TITLE, shared_mcp_registry=True)  # fast-agent 0.10.48
OTHER = AgentProfile("other")

#: Every profile (for tests and docs).
ALL: tuple[AgentProfile, ...] = (CLAUDE, GEMINI, CODEX, FAST_AGENT, OTHER)

#: ``agentInfo.name`` → profile; any other agent is ``OTHER``.
PROFILES: Mapping[str, AgentProfile] = {
    "@zed-industries/claude-agent-acp": CLAUDE,
    "@zed-industries/claude-code-acp": CLAUDE,
    "@agentclientprotocol/claude-agent-acp": CLAUDE,
    "gemini-cli": GEMINI,
    "codex-acp": CODEX,
    "fast-agent-acp": FAST_AGENT,
}


def profile_of(agent_name: object) -> AgentProfile:
    """The profile of an agent by its ``initialize`` answer's ``agentInfo.name`` (any
    JSON value: a name that is not a listed string is ``OTHER``)."""
    return PROFILES.get(agent_name, OTHER) if isinstance(agent_name, str) else OTHER
