"""``core.spares.to_open``: how many spare sessions a process opens now (docs/sessions.md,
"When they are opened"), row by row, and its invariants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core.spares import AT_ONCE, to_open


@pytest.mark.parametrize(
    ("keep", "ready", "opening", "quiet", "opened"),
    [
        (4, 4, 0, False, 0),  # as many as kept: none
        (4, 2, 2, True, 0),  # ready or being opened, they count alike
        (4, 0, 0, False, 2),  # none left while a chat answers: two at once, not four beside it
        (4, 0, 0, True, 4),  # quiet (pre-warming, no chat there): all
        (1, 0, 0, False, 1),  # never more than kept
        (4, 3, 0, False, 0),  # a burst: the next chats take the ones left, none opened beside them
        (4, 0, 1, False, 0),  # one being opened is left for the next chat
        (4, 1, 0, True, 3),  # quiet: up to the number kept
        (2, 1, 0, False, 0),
        (2, 1, 0, True, 1),
    ],
)
def test_to_open(keep: int, ready: int, opening: int, quiet: bool, opened: int) -> None:
    assert to_open(keep, ready, opening, quiet) == opened


@given(st.integers(1, 8), st.integers(0, 8), st.integers(0, 8), st.booleans())
def test_to_open_keeps_one_for_the_next_chat_and_never_more_than_kept(keep: int, ready: int, opening: int, quiet: bool) -> None:
    n = to_open(keep, ready, opening, quiet)
    have = ready + opening
    assert 0 <= n and have + n <= max(keep, have)
    assert have + n >= min(1, keep)  # a chat that comes next finds one ready or being opened
    assert n <= AT_ONCE or quiet  # a busy process never starts more than AT_ONCE
    if quiet:
        assert have + n >= keep
    elif have:
        assert n == 0  # others are left: nothing starts beside an answer
