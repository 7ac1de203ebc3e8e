"""Every workspace folder (docs/agents.md, "Every workspace folder"): the pure rules of
``core.paths`` row by row and with hypothesis, then the daemon with the scripted agent
(``additionalDirectories`` on ``session/new``, the spare session, ``terminal/create``'s cwd)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core import paths

# A multi-root workspace: /a and /b; /a/lnk links into /b, /b/esc out of both, /c is not open.
LINKS = {"/a/lnk": "/b/sub", "/b/esc": "/etc", "/b/up": "..", "/home/b": "/b"}


def readlink(path: str) -> str | None:
    return LINKS.get(path)


# ---------------------------------------------------------------- additionalDirectories


@pytest.mark.parametrize(
    ("folders", "cwd", "expected"),
    [
        (["/a"], "/a", ()),
        (["/a", "/b"], "/a", ("/b",)),
        (["/a", "/b", "/c"], "/a", ("/b", "/c")),  # VS Code's order kept
        (["/a", "/c", "/b"], "/a", ("/c", "/b")),
        (["/a", "/b", "/b"], "/a", ("/b",)),  # each once
        (["/a", "/b", "/a"], "/a", ("/b",)),  # never the cwd itself
        (["/a", "rel", "/b"], "/a", ("/b",)),  # a relative entry is no folder
        (["/a", "", "/b"], "/a", ("/b",)),
        (["/a", "/b\0x"], "/a", ()),  # nothing a request could not carry
        (["/a", 7, None, "/b"], "/a", ("/b",)),  # not a string
        (["/a", "/a/sub"], "/a", ("/a/sub",)),  # a nested folder is a folder of its own in VS Code
        ([], None, ()),
        ([], "/a", ()),
        (["/a", "/b"], None, ("/a", "/b")),  # no cwd given: every folder
    ],
)
def test_additional_directories(folders: list[Any], cwd: str | None, expected: tuple[str, ...]) -> None:
    assert paths.additional_directories(folders, cwd) == expected


folder = st.lists(st.sampled_from(["a", "b", "c", "sub", ".."]), min_size=0, max_size=3).map(lambda parts: "/" + "/".join(parts))
entry = st.one_of(folder, st.sampled_from(["", "rel", "rel/x", "/x\0"]), st.none(), st.integers())


@given(folders=st.lists(entry, max_size=8), cwd=st.one_of(st.none(), folder))
def test_additional_directories_properties(folders: list[Any], cwd: str | None) -> None:
    out = paths.additional_directories(folders, cwd)
    assert cwd not in out
    assert len(set(out)) == len(out)
    assert all(f.startswith("/") and "\0" not in f for f in out)
    # What is given is the folders in their order (an order-preserving subsequence), nothing else.
    given_order = [f for f in folders if f in out]
    assert list(dict.fromkeys(given_order)) == list(out)
    # Every usable folder but the cwd is given.
    assert {f for f in folders if isinstance(f, str) and f.startswith("/") and "\0" not in f} - {cwd} == set(out)


# ---------------------------------------------------------------- the path rule across folders


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/a/x.txt", "/a/x.txt"),
        ("/b/x.txt", "/b/x.txt"),  # the second folder: as the first
        ("/b", "/b"),
        ("/a/lnk/x.txt", "/b/sub/x.txt"),  # a link from one folder into another: what is touched is inside
        ("/a/../b/x.txt", "/b/x.txt"),
        ("/home/b/x.txt", "/b/x.txt"),
        ("/b/esc/passwd", None),  # a link out of the second folder
        ("/b/up/c/x", None),
        ("/c/x.txt", None),  # a folder VS Code does not have open
        ("/bb/x.txt", None),  # a sibling sharing the prefix
        ("/", None),
    ],
)
def test_check_across_folders(path: str, allowed: str | None) -> None:
    decision = paths.check(path, ["/a", "/b"], readlink)
    if allowed is None:
        assert isinstance(decision, paths.Refused)
        assert "(/a, /b)" in decision.message  # names every folder
    else:
        assert decision == paths.Allowed(allowed)


@pytest.mark.parametrize(
    ("real", "folders", "expected"),
    [
        ("/a/x", ["/a", "/b"], "/a"),
        ("/b/x", ["/a", "/b"], "/b"),
        ("/b", ["/a", "/b"], "/b"),
        ("/a/sub/x", ["/a", "/a/sub"], "/a/sub"),  # nested: the deepest
        ("/a/sub/x", ["/a/sub", "/a"], "/a/sub"),
        ("/ab/x", ["/a"], None),
        ("/c/x", ["/a", "/b"], None),
        ("/a/x", ["/a/"], "/a/"),
        ("/a", [], None),
    ],
)
def test_holder(real: str, folders: list[str], expected: str | None) -> None:
    assert paths.holder(real, folders) == expected


@pytest.mark.parametrize(
    ("cwd", "allowed"),
    [
        (None, "/a"),  # the session's cwd
        ("", "/a"),
        ("src", "/a/src"),  # relative: from the session's cwd
        ("/b", "/b"),  # the second folder
        ("/b/sub/deep", "/b/sub/deep"),
        ("../b", "/b"),
        ("/a/lnk", "/b/sub"),
        ("..", None),  # above the first folder: no folder holds /
        ("/c", None),
        ("/b/esc", None),  # a link out
        ("../c", None),
    ],
)
def test_working_folder(cwd: str | None, allowed: str | None) -> None:
    decision = paths.working_folder(cwd, "/a", ["/a", "/b"], readlink)
    if allowed is None:
        assert isinstance(decision, paths.Refused)
        assert decision.message.startswith("terminal/create: cwd refused: ") and "outside the workspace folders (/a, /b)" in decision.message
    else:
        assert decision == paths.Allowed(allowed)


@given(cwd=st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "c", "..", ".", "lnk", "esc", "sub"]), max_size=5).map("/".join)))
def test_working_folder_is_always_inside_a_folder(cwd: str | None) -> None:
    for base in ("/a", "/b"):
        decision = paths.working_folder(cwd, base, ["/a", "/b"], readlink)
        if isinstance(decision, paths.Allowed):
            assert paths.holder(decision.real, ["/a", "/b"]) is not None
        for absolute in (cwd and "/" + cwd,):
            if absolute:
                again = paths.working_folder(absolute, base, ["/a", "/b"], readlink)
                assert isinstance(again, paths.Allowed) == isinstance(paths.check(absolute, ["/a", "/b"], readlink), paths.Allowed)
