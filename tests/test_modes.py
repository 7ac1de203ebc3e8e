"""The mode rule (core/modes.py; docs/agents.md, "Modes: who approves"), row by row: the mode
a new session starts in, and who approves in each mode of today's agents."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core import modes, profiles
from lmbridge.core.modes import Approver
from lmbridge.core.profiles import CLAUDE, CODEX, FAST_AGENT, GEMINI, OTHER

CLAUDE_MODES = ("default", "acceptEdits", "plan", "auto")  # claude-agent-acp 0.101.0, as offered
CODEX_MODES = ("read-only", "workspace-write", "agent", "agent-full-access")  # codex-acp 2.6.0
GEMINI_MODES = ("default", "autoEdit", "yolo", "plan")  # gemini-cli 0.61.0


@pytest.mark.parametrize(
    ("profile", "offered", "setting", "start"),
    [
        # No setting: the asking mode, whatever the agent started in.
        (CLAUDE, CLAUDE_MODES, None, "default"),
        (CODEX, CODEX_MODES, None, "read-only"),
        (GEMINI, GEMINI_MODES, None, "default"),
        # The user's setting for the agent wins, self-approving or not.
        (CLAUDE, CLAUDE_MODES, "auto", "auto"),
        (CLAUDE, CLAUDE_MODES, "plan", "plan"),
        (CODEX, CODEX_MODES, "agent-full-access", "agent-full-access"),
        # A setting the agent does not offer: the asking mode, never the agent's own default.
        (CLAUDE, CLAUDE_MODES, "dontAsk", "default"),
        (CODEX, CODEX_MODES, "", "read-only"),
        # An agent that does not offer its asking mode (another release): left as it is, unless set.
        (CLAUDE, ("acceptEdits", "auto"), None, None),
        (CLAUDE, ("acceptEdits", "auto"), "auto", "auto"),
        # No mode control at all.
        (CLAUDE, (), None, None),
        (CLAUDE, (), "default", None),
        # Agents whose asking mode is not known: only the user's setting.
        (FAST_AGENT, ("agent",), None, None),
        (OTHER, ("ask", "code"), None, None),
        (OTHER, ("ask", "code"), "code", "code"),
    ],
)
def test_the_mode_a_new_session_starts_in(profile: profiles.AgentProfile, offered: tuple[str, ...], setting: str | None, start: str | None) -> None:
    assert modes.start_mode(profile, offered, setting) == start


@pytest.mark.parametrize(
    ("profile", "mode", "who"),
    [
        (CLAUDE, "default", Approver.USER),
        (CLAUDE, "acceptEdits", Approver.AGENT),  # edits and `touch` in the workspace unasked (seen)
        (CLAUDE, "auto", Approver.AGENT),  # its classifier decides (seen)
        (CLAUDE, "plan", None),  # with the Bash ask rule (session_meta) edits and commands ask (seen): not the agent's
        (CLAUDE, "bypassPermissions", Approver.AGENT),
        (CLAUDE, "dontAsk", None),
        (CODEX, "read-only", Approver.USER),
        (CODEX, "workspace-write", Approver.AGENT),
        (CODEX, "agent", Approver.AGENT),
        (CODEX, "agent-full-access", Approver.AGENT),
        (CODEX, "profile:custom", None),
        (GEMINI, "default", Approver.USER),
        (GEMINI, "autoEdit", Approver.AGENT),
        (GEMINI, "yolo", Approver.AGENT),
        (GEMINI, "plan", None),
        (FAST_AGENT, "agent", None),
        (OTHER, "default", None),
        (CLAUDE, None, None),
    ],
)
def test_who_approves_in_each_mode(profile: profiles.AgentProfile, mode: str | None, who: Approver | None) -> None:
    assert modes.approver(profile, mode) is who


def test_the_wire_marks_only_the_modes_whose_approver_is_known() -> None:
    assert modes.approvers(CLAUDE, (*CLAUDE_MODES, "dontAsk")) == {"default": "user", "acceptEdits": "agent", "auto": "agent"}
    assert modes.approvers(OTHER, ("ask", "code")) == {}


def test_the_tooltip_note_says_who_approves() -> None:
    assert modes.approval_note(CLAUDE, "default", "Manual") == "In Manual the agent asks you before it changes anything."
    assert modes.approval_note(CLAUDE, "auto", "Auto") == "In Auto the agent approves its own actions: some edits and commands run without asking you."
    assert modes.approval_note(CODEX, "read-only", None) == "In read-only the agent asks you before it changes anything."
    assert modes.approval_note(OTHER, "code", "Code") is None


@pytest.mark.parametrize("profile", profiles.ALL)
def test_no_profile_asks_in_a_mode_it_also_calls_self_approving(profile: profiles.AgentProfile) -> None:
    assert profile.asking_mode not in profile.self_approving


@given(
    profile=st.sampled_from(profiles.ALL),
    offered=st.lists(st.sampled_from([*CLAUDE_MODES, *CODEX_MODES, *GEMINI_MODES, "x"]), unique=True),
    setting=st.none() | st.sampled_from([*CLAUDE_MODES, *CODEX_MODES, "x", ""]),
)
def test_a_self_approving_mode_is_started_only_when_the_user_set_it(profile: profiles.AgentProfile, offered: list[str], setting: str | None) -> None:
    start = modes.start_mode(profile, offered, setting)
    assert start is None or start in offered
    if start is not None and start != setting:
        assert modes.approver(profile, start) is Approver.USER
