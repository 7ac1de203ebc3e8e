"""Every workspace folder (docs/agents.md, "Every workspace folder"): the pure rules of
``core.paths`` row by row and with hypothesis, then the daemon with the scripted agent
(``additionalDirectories`` on ``session/new``, the spare session, ``terminal/create``'s cwd)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_daemon import eventually, ok
from test_terminals import approved, results

from lmbridge.core import paths, permissions
from lmbridge.devtools.client import assistant, text_of, user

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


# ---------------------------------------------------------------- the card says which folder

TWO = permissions.Workspace(("/a", "/b"), resolve=lambda p: real if (real := paths.resolve(p, readlink)) and paths.holder(real, ("/a", "/b")) else None)


@pytest.mark.parametrize(
    ("files", "cwd", "workspace", "expected"),
    [
        (["/b/x.py"], None, TWO, ("/b",)),
        (["/a/x.py", "/b/y.py", "/a/z.py"], None, TWO, ("/a", "/b")),  # each once, in order
        (["/a/lnk/x.py"], None, TWO, ("/b",)),  # where the link leads: what is touched
        (["/c/x.py"], None, TWO, (permissions.OUTSIDE,)),
        (["/b/esc/passwd"], None, TWO, (permissions.OUTSIDE,)),
        ([], "/b/sub", TWO, ("/b",)),  # a command's cwd
        ([], "sub", TWO, ("/a",)),  # relative: from the first folder
        ([], "../b", TWO, ("/b",)),
        ([], None, TWO, ()),  # no cwd: where the agent's tool is, not said
        (["/b/x.py"], None, permissions.Workspace(("/b",), resolve=lambda p: p), ()),  # one folder: every card is in it
    ],
)
def test_folders_of(files: list[str], cwd: str | None, workspace: permissions.Workspace, expected: tuple[str, ...]) -> None:
    command = permissions.Command("make", cwd) if cwd is not None else None
    assert permissions.folders_of(files, command, workspace) == expected


def test_the_card_names_the_folder() -> None:
    params = {
        "toolCall": {"toolCallId": "t1", "title": "Edit y.py", "kind": "edit", "content": [{"type": "diff", "path": "/b/y.py", "oldText": "a", "newText": "b"}]},
        "options": [{"optionId": "ok", "name": "Yes", "kind": "allow_once"}, {"optionId": "no", "name": "No", "kind": "reject_once"}],
    }
    request = permissions.read(params, "c1", "tok", workspace=TWO)
    assert isinstance(request, permissions.Permission) and request.folders == ("/b",)
    assert "**Workspace folder**: `/b`" in permissions.render(request).message
    alone = permissions.read(params, "c1", "tok", workspace=permissions.Workspace(("/b",), resolve=lambda p: p))
    assert isinstance(alone, permissions.Permission) and "Workspace folder" not in permissions.render(alone).message


# ---------------------------------------------------------------- the daemon, with the scripted agent

LIMIT = 180  # seconds, each test (~2-5 s idle)
#: An agent that takes every workspace folder (ACP ``sessionCapabilities.additionalDirectories``).
TAKES_FOLDERS = {"agentCapabilities": {"sessionCapabilities": {"additionalDirectories": {}, "resume": {}, "close": {}}}}


def workspace(tmp_path: Path, *names: str) -> list[str]:
    out = []
    for name in names:
        (tmp_path / name).mkdir(exist_ok=True)
        out.append(str(tmp_path / name))
    return out


@pytest.mark.anyio
async def test_every_folder_beyond_the_first_goes_to_session_new_and_resume(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """A multi-root workspace: the session opens in the first folder, the others are its
    ``additionalDirectories``, on ``session/new`` and again when the chat's session is taken
    up after a restart (``session/resume``), with the folders VS Code has then."""
    a, b, c = workspace(tmp_path, "a", "b", "c")
    agent = scripted({"initialize": TAKES_FOLDERS, "turns": [[{"text": "First."}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], workspace=[a, b, c]) as client:
            first = await client.chat(agent.id, [user("one")])
            ok(first)
        agent.write({"initialize": TAKES_FOLDERS, "turns": [[{"text": "Second."}]]})
        async with daemon([agent], workspace=[a, c]) as client:  # b closed meanwhile
            ok(await client.chat(agent.id, [user("one"), assistant(first.parts), user("two")]))
    (new,) = agent.frames("session/new")
    assert new["params"]["cwd"] == a and new["params"]["additionalDirectories"] == [b, c]
    (resume,) = agent.frames("session/resume")
    assert resume["params"]["cwd"] == a and resume["params"]["additionalDirectories"] == [c]


@pytest.mark.anyio
async def test_an_agent_without_the_capability_gets_the_first_folder_only(scripted: Any, shared: Any, tmp_path: Path) -> None:
    a, b = workspace(tmp_path, "a", "b")
    agent = scripted({"initialize": {"agentCapabilities": {"sessionCapabilities": {"resume": {}}}}})
    with anyio.fail_after(LIMIT):
        async with shared([agent], workspace=[a, b]) as client:
            ok(await client.chat(agent.id, [user("one")]))
    (new,) = agent.frames("session/new")
    assert new["params"]["cwd"] == a and "additionalDirectories" not in new["params"]


# One spare, so the sessions opened can be counted (the default keeps more: docs/sessions.md).
ONE_SPARE = {"LMBRIDGE_SPARE_SESSIONS": "1"}


@pytest.mark.anyio
async def test_a_spare_opened_for_other_folders_is_not_taken(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """The spare session is opened with the folders of its time; VS Code's folders change
    (``$/workspaceFolders``): the next new chat opens a session of its own with the new
    folders, the old spare is closed, and the next spare has the new folders."""
    a, b, c = workspace(tmp_path, "a", "b", "c")
    agent = scripted({"initialize": TAKES_FOLDERS, "turns_per_session": True, "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], workspace=[a, b], args=["--spare-session"], env=ONE_SPARE) as client:
            ok(await client.chat(agent.id, [user("first chat")]))
            await eventually(lambda: len(agent.frames("session/new")) == 2, what="the spare session")
            first, spare = agent.frames("session/new")
            assert first["params"]["additionalDirectories"] == spare["params"]["additionalDirectories"] == [b]
            await client.send_frame({"jsonrpc": "2.0", "method": "$/workspaceFolders", "params": {"workspaceFolders": [a, c]}})
            second = await client.chat(agent.id, [user("second chat")])
            ok(second)
            assert text_of(second) == "ok"
            await eventually(lambda: len(agent.frames("session/new")) == 4, what="the next spare")
            await eventually(lambda: agent.frames("session/close"), what="the old spare closed")
    news = agent.frames("session/new")
    prompts = agent.prompts()
    spare_id = agent.events("session_new")[1]["sessionId"]
    assert prompts[1]["sessionId"] != spare_id  # not the spare opened for a and b
    assert [n["params"]["additionalDirectories"] for n in news[2:]] == [[c], [c]]  # the chat's own, then the next spare
    assert agent.frames("session/close")[0]["params"]["sessionId"] == spare_id  # closed while the daemon ran (the rest at its end)


@pytest.mark.anyio
async def test_a_spare_for_the_same_folders_is_taken(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    a, b = workspace(tmp_path, "a", "b")
    agent = scripted({"initialize": TAKES_FOLDERS, "turns_per_session": True, "default_turn": [{"text": "ok"}]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], workspace=[a, b], args=["--spare-session"], env=ONE_SPARE) as client:
            ok(await client.chat(agent.id, [user("first chat")]))
            await eventually(lambda: len(agent.frames("session/new")) == 2, what="the spare session")
            await client.send_frame({"jsonrpc": "2.0", "method": "$/workspaceFolders", "params": {"workspaceFolders": [a, b]}})  # the same folders again
            ok(await client.chat(agent.id, [user("second chat")]))
    assert agent.prompts()[1]["sessionId"] == agent.events("session_new")[1]["sessionId"]


@pytest.mark.anyio
async def test_fs_and_terminal_take_any_folder_and_nothing_outside(scripted: Any, shared: Any, tmp_path: Path) -> None:
    """``fs/read_text_file`` of a file in the second folder is served; ``terminal/create`` with
    a cwd in the second folder runs there; a cwd outside every folder is refused (the grant
    used, nothing started), as is a read outside."""
    a, b = workspace(tmp_path, "a", "b")
    (tmp_path / "b" / "notes.txt").write_text("in b\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "secret.txt").write_text("no\n")
    where = str(tmp_path / "where")

    def run_in(cwd: str) -> dict[str, Any]:
        return {"command": sys.executable, "args": ["-c", f"import os; open({where!r} + os.path.basename(os.getcwd()), 'w')"], "cwd": cwd}

    def ask(params: dict[str, Any], handle: str) -> dict[str, Any]:
        shown = {k: v for k, v in params.items() if k in ("command", "args", "cwd")}
        call = {"toolCallId": f"t-{handle}", "title": "run", "kind": "execute", "status": "pending", "rawInput": shown}
        return {"permission": {"toolCall": call}, "id": handle}

    outside = str(tmp_path / "out")
    agent = scripted({"turns": [[
        ask(run_in(b), "p1"),
        ask(run_in(outside), "p2"),
        {"await": ["p1", "p2"]},
        {"client": {"method": "fs/read_text_file", "params": {"path": str(tmp_path / "b" / "notes.txt")}}, "id": "read-b"},
        {"client": {"method": "fs/read_text_file", "params": {"path": str(tmp_path / "out" / "secret.txt")}}, "id": "read-out"},
        {"client": {"method": "terminal/create", "params": run_in(b)}, "id": "run-b"},
        {"client": {"method": "terminal/create", "params": run_in(outside)}, "id": "run-out"},
        {"client_await": ["read-b", "read-out", "run-b", "run-out"]},
        {"client": {"method": "terminal/wait_for_exit", "params": {"terminalId": "$run-b.terminalId"}}, "id": "wait"},
        {"client_await": "wait"},
        {"text": "done"},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with shared([agent], workspace=[a, b]) as client:
            history = await approved(client, agent.id, "go")
            call = await client.chat(agent.id, history)
            assert call.error is None
    r = results(agent)
    assert r["read-b"]["result"] == {"content": "in b\n"}
    assert "outside the workspace folders" in r["read-out"]["error"]["message"]
    assert r["run-b"]["result"]["terminalId"].startswith("term-") and r["wait"]["result"] == {"exitCode": 0, "signal": None}
    assert r["run-out"]["error"]["code"] == -32000 and "outside the workspace folders" in r["run-out"]["error"]["message"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("where")) == ["whereb"]  # ran in b, never outside


@pytest.mark.anyio
async def test_a_folder_removed_is_out_of_reach_and_a_bad_notice_changes_nothing(scripted: Any, shared: Any, tmp_path: Path) -> None:
    """``$/workspaceFolders`` without the second folder: a read there is refused and the next
    session is given no other folder; a notice of another shape is ignored (the folders stay)."""
    a, b = workspace(tmp_path, "a", "b")
    (tmp_path / "a" / "x.txt").write_text("in a\n")
    (tmp_path / "b" / "y.txt").write_text("in b\n")
    agent = scripted({"initialize": TAKES_FOLDERS, "turns": [[
        {"client": {"method": "fs/read_text_file", "params": {"path": str(tmp_path / "a" / "x.txt")}}, "id": "read-a"},
        {"client": {"method": "fs/read_text_file", "params": {"path": str(tmp_path / "b" / "y.txt")}}, "id": "read-b"},
        {"client_await": ["read-a", "read-b"]},
        {"text": "read"},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with shared([agent], workspace=[a, b]) as client:
            notice = {"jsonrpc": "2.0", "method": "$/workspaceFolders"}
            await client.send_frame({**notice, "params": {"workspaceFolders": [a]}})
            for bad in ({"workspaceFolders": a}, {"workspaceFolders": [a, b, 7]}, {"folders": [a, b]}, {"workspaceFolders": [a, b], "more": 1}):
                await client.send_frame({**notice, "params": bad})
            ok(await client.chat(agent.id, [user("read both")]))
    r = results(agent)
    assert r["read-a"]["result"] == {"content": "in a\n"}
    assert "outside the workspace folders" in r["read-b"]["error"]["message"]
    (new,) = agent.frames("session/new")
    assert new["params"]["cwd"] == a and "additionalDirectories" not in new["params"]
