"""core/text.py: the one markdown fence, row by row and for any text (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core.text import code_block, inline_code

BLOCK_ROWS = [
    ("plain", "ls -la", "sh", "```sh\nls -la\n```"),
    ("a fence inside", "a\n```\nb", "", "````\na\n```\nb\n````"),
    ("a longer run inside", "x ````` y", "text", "``````text\nx ````` y\n``````"),
]


@pytest.mark.parametrize(("row", "text", "lang", "block"), BLOCK_ROWS, ids=[r[0] for r in BLOCK_ROWS])
def test_code_block_rows(row: str, text: str, lang: str, block: str) -> None:
    assert code_block(text, lang) == block


INLINE_ROWS = [
    ("plain", "a.txt", "`a.txt`"),
    ("a backtick inside", "a`b", "``a`b``"),
    ("starting with one", "`x", "`` `x ``"),
]


@pytest.mark.parametrize(("row", "text", "code"), INLINE_ROWS, ids=[r[0] for r in INLINE_ROWS])
def test_inline_code_rows(row: str, text: str, code: str) -> None:
    assert inline_code(text) == code


@given(st.text(alphabet=st.sampled_from("`a \n~")))
def test_no_line_of_the_text_closes_the_block(text: str) -> None:
    """CommonMark: a block closes at a line of at least as many backticks as its fence (up to 3
    spaces before); none of the text's lines is one, and the text comes back whole."""
    block = code_block(text)
    fence = block.split("\n", 1)[0]
    assert len(fence) >= 3 and set(fence) == {"`"}
    for line in text.split("\n"):
        assert not line.lstrip(" ").startswith(fence)
    assert block == f"{fence}\n{text}\n{fence}"
