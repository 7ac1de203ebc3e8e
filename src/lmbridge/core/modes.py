"""Which mode an agent's session starts in, and who approves its actions in a mode
(docs/agents.md, "Modes: who approves"). Pure: no I/O.

An agent's modes (the values of its control of category ``mode``: core.session_state)
differ in who decides that an edit or a command runs. In its **asking mode**
(``AgentProfile.asking_mode``) the agent asks the client first (``session/request_permission``,
a card the user answers); in a **self-approving** mode (``AgentProfile.self_approving``) it
runs some on its own judgement. The rule:

* a session opened new is set, before its first prompt, to the agent's ``mode`` setting
  (``lmbridge.agents[].mode``: the user's choice for that agent) where the agent offers it,
  else to its asking mode where it offers that, else left as the agent started it;
* the chat's own choices (VS Code's model configuration, ``chat/setControl``) are applied
  after it (daemon.chat_controls), so a self-approving mode is entered only by the user's
  choice;
* ``approver`` says who approves in a mode, for the status bar item and the model's tooltip.
"""

from __future__ import annotations

import enum
from collections.abc import Collection

from lmbridge.core.profiles import AgentProfile


class Approver(enum.Enum):
    """Who decides that an agent's edit or command runs (the wire's ``approver``)."""

    USER = "user"  # the agent asks first: a card the user answers (codex read-only: before anything leaves its read-only sandbox)
    AGENT = "agent"  # the agent runs some edits or commands on its own judgement


def start_mode(profile: AgentProfile, offered: Collection[str], setting: str | None) -> str | None:
    """The mode a new session is set to: ``setting`` (the agent's ``mode`` setting) when
    ``offered`` holds it, else the profile's asking mode when offered, else None (the
    agent's own). ``offered``: the values of the session's mode control (empty: none)."""
    if setting and setting in offered:
        return setting
    if profile.asking_mode is not None and profile.asking_mode in offered:
        return profile.asking_mode
    return None


def approver(profile: AgentProfile, mode: str | None) -> Approver | None:
    """Who approves the agent's actions in ``mode``: ``USER`` in its asking mode, ``AGENT``
    in one of its self-approving modes, None when not known (another mode, another agent)."""
    if mode is None:
        return None
    if mode == profile.asking_mode:
        return Approver.USER
    if mode in profile.self_approving:
        return Approver.AGENT
    return None


def approvers(profile: AgentProfile, offered: Collection[str]) -> dict[str, str]:
    """Mode value → ``"user"`` or ``"agent"``, for each of ``offered`` whose approver is known."""
    out = {}
    for mode in offered:
        who = approver(profile, mode)
        if who is not None:
            out[mode] = who.value
    return out


def approval_note(profile: AgentProfile, mode: str | None, label: str | None) -> str | None:
    """One sentence saying who approves in ``mode`` (named ``label``), for a tooltip; None
    when not known."""
    who = approver(profile, mode)
    name = label or mode
    if who is Approver.USER:
        return f"In {name} the agent asks you before it changes anything."
    if who is Approver.AGENT:
        return f"In {name} the agent approves its own actions: some edits and commands run without asking you."
    return None
