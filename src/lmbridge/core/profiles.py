"""Agent profiles: what lmbridge knows about each agent's ACP adapter, as named flags.

An agent is recognised once, from its ``initialize`` answer's ``agentInfo.name``
(``profile_of``); the rest of the daemon reads the profile's flags and never names an agent.
Any agent not listed gets ``OTHER``: no quirk assumed, no name trusted.

Pure: no I/O, importable from the pure core (permissions, turn, render, history).
docs/architecture.md ("Agent profiles") lists the flags and why each agent has them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class ToolNaming(enum.Enum):
    """Where an agent's ``session/request_permission`` names the MCP tool it is for
    (read by ``permissions.bridged_tool``)."""

    CLAUDE_META = "claude-meta"  # _meta.claudeCode.toolName: mcp__<server>__<tool>
    FUNCTION_CALL_ID = "function-call-id"  # toolCallId: mcp_<server>_<tool>__<n>
    CODEX_RAW_INPUT = "codex-raw-input"  # rawInput.server_name + request._meta.codex_approval_kind + its message
    TITLE = "title"  # title only: <server>/<tool> (the agent names the tool nowhere else)
    NONE = "none"  # no name is trusted: every request is put to the user


def codex_output(raw_output: object) -> str | None:
    """What a codex-acp command printed, from its ``tool_call_update``'s ``rawOutput``
    (codex-acp 0.16.0 sends no ``content``: ``{stdout, stderr, aggregated_output,
    formatted_output, exit_code, …}``): ``formatted_output`` (else ``aggregated_output``,
    else ``stdout``), with a last line ``exit code N`` when N is not 0. None when it holds
    neither (not an object, no string output)."""
    if not isinstance(raw_output, Mapping):
        return None
    text = next((v for v in (raw_output.get(k) for k in ("formatted_output", "aggregated_output", "stdout")) if isinstance(v, str)), None)
    code = raw_output.get("exit_code")
    failed = isinstance(code, int) and not isinstance(code, bool) and code != 0
    if text is None and not failed:
        return None
    lines = (text or "").rstrip("\n")
    return f"{lines}\nexit code {code}".lstrip("\n") if failed else lines


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

    ``permission_content_is_prompt``: a permission's ``toolCall.content`` is the agent's
    approval prompt (codex-acp: "Proposed Amendment … Available Decisions …"), not the
    call's content: the card may show it, the call's output never does
    (``render.TurnRenderer.permission_tool``). ``raw_output``: where the agent puts a
    call's output instead of ``content``: a function of the ``rawOutput`` → the text shown
    as the call's output when it ends without ``content`` (None: nothing read from it).

    ``cancel_breaks_history``: a cancel can leave the session's history unusable, so the
    first prompt after it fails and keeps failing in that session, resumed or not
    (fast-agent: a Stop mid-stream leaves an empty assistant message, which model APIs
    refuse with HTTP 400). Recovered in a fresh session told the conversation, never by
    taking the same session up again (``session_actor.SessionActor._recover_session``).

    ``cancel_leaves_commands``: a ``session/cancel`` ends the turn but not a command it runs
    (codex-acp 0.16.0: the command keeps running until ``session/close``, which ends it
    within a second). A turn cancelled while one runs has its session closed and taken up
    again (``turn``; ``core.present.TurnRenderer.left_running``).

    ``skip_option``: the ``optionId`` a Skip selects when the agent offers more than one
    ``reject_once`` option (``permissions.outcome``; docs/protocol.md, "Which option an
    answer selects"). codex-acp 2.6.0's default set for a command offers ``decline`` ("No,
    continue without running it") and ``cancel`` ("No, and tell Codex what to do
    differently": it ends its turn); a Skip is ``decline``. A Stop is ACP's ``cancelled``
    outcome, after ``session/cancel``, for every agent: codex-acp reads an answer that
    selects no option as its ``cancel``.
    """

    name: str
    tool_naming: ToolNaming = ToolNaming.NONE
    shared_mcp_registry: bool = False
    keeps_spare: bool = True
    permission_content_is_prompt: bool = False
    raw_output: Callable[[Any], str | None] | None = None
    cancel_breaks_history: bool = False
    cancel_leaves_commands: bool = False
    skip_option: str | None = None


CLAUDE = AgentProfile("claude", ToolNaming.CLAUDE_META)
GEMINI = AgentProfile("gemini", ToolNaming.FUNCTION_CALL_ID)
CODEX = AgentProfile("codex", ToolNaming.CODEX_RAW_INPUT, permission_content_is_prompt=True, raw_output=codex_output, cancel_leaves_commands=True, skip_option="decline")
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
    "codex-acp": CODEX,
    "fast-agent-acp": FAST_AGENT,
}


def profile_of(agent_name: object) -> AgentProfile:
    """The profile of an agent by its ``initialize`` answer's ``agentInfo.name`` (any
    JSON value: a name that is not a listed string is ``OTHER``)."""
    return PROFILES.get(agent_name, OTHER) if isinstance(agent_name, str) else OTHER
