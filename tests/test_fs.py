"""An agent's ``fs/read_text_file`` and ``fs/write_text_file`` (docs/agents.md, "Files through
VS Code"; docs/protocol.md, "Daemon → shim").

First the pure rule (``core.paths``): tables, then hypothesis against the real file system
(symlinks, ``..``); then the daemon with scripted agents: from disk (no shim), and through a
shim (the dev client answering ``client/*`` as the VS Code extension does).
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmbridge.core import paths
from lmbridge.devtools.client import RPCError, approve, assistant, skip, tool_calls, user

# ---------------------------------------------------------------- the rule, pure

LINKS = {
    "/w/up": "..",  # → /
    "/w/out": "/etc",
    "/w/in": "sub",  # → /w/sub
    "/w/sub/back": "../sub",  # → /w/sub
    "/w/loop": "loop",
    "/x/into": "/w/sub",
    "/home/me": "/w",  # the workspace folder itself through a link
}


def fake_readlink(path: str) -> str | None:
    return LINKS.get(path)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/w/a.txt", "/w/a.txt"),
        ("/w/./sub//a.txt", "/w/sub/a.txt"),
        ("/w/sub/../a.txt", "/w/a.txt"),
        ("/w/in/a.txt", "/w/sub/a.txt"),
        ("/w/sub/back/back/a.txt", "/w/sub/a.txt"),
        ("/w/out/passwd", "/etc/passwd"),
        ("/w/out/../w/a.txt", "/w/a.txt"),  # .. after the link: the parent of /etc
        ("/w/up/etc/passwd", "/etc/passwd"),
        ("/x/into/../a.txt", "/w/a.txt"),
        ("/../../w/a.txt", "/w/a.txt"),
        ("/w/new/dir/file.txt", "/w/new/dir/file.txt"),
        ("/w", "/w"),
        ("/", "/"),
    ],
)
def test_resolve_follows_links_then_takes_dotdot(path: str, expected: str) -> None:
    assert paths.resolve(path, fake_readlink) == expected


def test_resolve_refuses_loops_relative_paths_and_nul() -> None:
    for bad in ("/w/loop/a", "w/a.txt", "", "/w/a\0b"):
        with pytest.raises(paths.Unresolvable):
            paths.resolve(bad, fake_readlink)


@pytest.mark.parametrize(
    ("path", "folders", "allowed"),
    [
        ("/w/a.txt", ["/w"], "/w/a.txt"),
        ("/w", ["/w"], "/w"),
        ("/w/in/a.txt", ["/w"], "/w/sub/a.txt"),
        ("/x/into/b.txt", ["/w"], "/w/sub/b.txt"),  # a link outside pointing in: what is touched is inside
        ("/home/me/a.txt", ["/w"], "/w/a.txt"),
        ("/w/a.txt", ["/home/me"], "/w/a.txt"),  # the folder given through its link
        ("/w2/a.txt", ["/w", "/w2"], "/w2/a.txt"),
        ("/w/out/passwd", ["/w"], None),
        ("/w/up/etc/passwd", ["/w"], None),
        ("/w/../etc/passwd", ["/w"], None),
        ("/w2/a.txt", ["/w"], None),  # a sibling sharing the prefix
        ("/wx", ["/w"], None),
        ("/w/a.txt", [], None),
        ("/w/a.txt", ["relative"], None),
        ("w/a.txt", ["/w"], None),
        ("/w/loop/a", ["/w"], None),
        (None, ["/w"], None),
        (7, ["/w"], None),
    ],
)
def test_check(path: Any, folders: list[str], allowed: str | None) -> None:
    decision = paths.check(path, folders, fake_readlink)
    if allowed is None:
        assert isinstance(decision, paths.Refused) and decision.message.startswith("refused: ")
    else:
        assert decision == paths.Allowed(allowed)


def test_a_refusal_names_the_path_and_the_folders() -> None:
    decision = paths.check("/w/out/passwd", ["/w"], fake_readlink)
    assert decision == paths.Refused("refused: /w/out/passwd is outside the workspace folders (/w)")
    assert paths.check("/w/a", [], fake_readlink) == paths.Refused("refused: /w/a is outside the workspace folders (none is open)")


@pytest.mark.parametrize(
    ("line", "limit", "expected"),
    [
        (None, None, "a\nb\r\nc\nd"),
        (2, None, "b\r\nc\nd"),
        (2, 2, "b\r\nc\n"),
        (None, 1, "a\n"),
        (4, 1, "d"),
        (9, 3, ""),
        (1, 0, ""),
    ],
)
def test_cut_lines(line: int | None, limit: int | None, expected: str) -> None:
    assert paths.cut_lines("a\nb\r\nc\nd", line, limit) == expected


@given(text=st.text(alphabet="ab\n\r", max_size=30), line=st.none() | st.integers(1, 12), limit=st.none() | st.integers(0, 12))
def test_cut_lines_takes_whole_lines_in_order(text: str, line: int | None, limit: int | None) -> None:
    cut = paths.cut_lines(text, line, limit)
    lines = text.split("\n")
    start = (line or 1) - 1
    wanted = lines[start:] if limit is None else lines[start : start + limit]
    assert cut.split("\n")[: len(wanted)] == wanted[: len(cut.split("\n"))] or cut == ""
    assert cut in text
    if line is None and limit is None:
        assert cut == text
    if limit is not None:
        assert cut.count("\n") <= limit


EDIT = {"toolCallId": "w1", "kind": "edit", "title": "Write", "locations": [{"path": "/w/a.txt"}], "rawInput": {"file_path": "/w/b.txt"},
        "content": [{"type": "diff", "path": "/w/c.txt", "oldText": "", "newText": "x"}]}  # fmt: skip


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (EDIT, ["/w/a.txt", "/w/c.txt", "/w/b.txt"]),
        ({**EDIT, "locations": [{"path": "/w/b.txt"}]}, ["/w/b.txt", "/w/c.txt"]),  # each once
        ({"locations": [{"path": "rel.txt"}, {"path": 5}, "x"], "content": "nope", "rawInput": ["x"]}, []),
        ({"locations": [{"path": f"/w/{i}"} for i in range(80)]}, [f"/w/{i}" for i in range(paths.MAX_PATHS)]),
        (None, []),
    ],
)  # fmt: skip
def test_the_files_a_request_names(call: Any, expected: list[str]) -> None:
    """What an approved edit lets be written (the rule: tests/test_permissions_grants.py)."""
    assert paths.named_files(call) == expected


# ---------------------------------------------------------------- the rule against the real file system

NAMES = ["a", "b", "c"]
component = st.sampled_from([*NAMES, "..", ".", "out", "w"])


@st.composite
def trees(draw: Any) -> list[tuple[str, str, str]]:
    """Entries under a root holding ``w`` (the workspace) and ``out``: (kind, relative path,
    target) with kind dir, file or link (a relative or absolute-in-root target)."""
    entries: list[tuple[str, str, str]] = []
    for _ in range(draw(st.integers(0, 8))):
        where = draw(st.sampled_from(["w", "out", "w/a", "out/a", "w/b"]))
        name = draw(st.sampled_from(NAMES))
        kind = draw(st.sampled_from(["dir", "file", "link", "link"]))
        target = "/".join(draw(st.lists(component, min_size=1, max_size=4))) if kind == "link" else ""
        absolute = kind == "link" and draw(st.booleans())
        entries.append((kind, f"{where}/{name}", ("/" + target) if absolute else target))
    return entries


def build(root: Path, entries: list[tuple[str, str, str]]) -> None:
    (root / "w").mkdir()
    (root / "out").mkdir()
    for kind, rel, target in entries:
        path = root / rel
        if os.path.lexists(path) or not path.parent.is_dir() or path.parent.is_symlink():
            continue
        if kind == "dir":
            path.mkdir()
        elif kind == "file":
            path.write_text("x")
        else:
            # An absolute target stays inside the test's root (the rule is the same anywhere).
            os.symlink(f"{root}{target}" if target.startswith("/") else target, path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(entries=trees(), parts=st.lists(component, min_size=1, max_size=7))
def test_the_rule_agrees_with_the_operating_system(tmp_path_factory: pytest.TempPathFactory, entries: Any, parts: list[str]) -> None:
    root = Path(os.path.realpath(tmp_path_factory.mktemp("tree")))
    build(root, entries)
    path = f"{root}/w/" + "/".join(parts)
    try:
        resolved = paths.resolve(path, _readlink)
    except paths.Unresolvable:
        with pytest.raises(OSError):  # a loop: the OS agrees (ELOOP) or the path does not resolve at all
            os.stat(path)
        return
    if os.path.exists(path):
        # Where the OS can follow the path, it ends where the rule says.
        assert os.path.realpath(path) == resolved
    decision = paths.check(path, [f"{root}/w"], _readlink)
    if isinstance(decision, paths.Allowed):
        # What is touched is under the workspace, whatever links or .. the path held.
        real = os.path.realpath(decision.real)
        assert real == f"{root}/w" or real.startswith(f"{root}/w/")
    else:
        assert not posixpath.normpath(resolved).startswith(f"{root}/w/") and resolved != f"{root}/w"


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def test_hypothesis_finds_escapes_through_links(tmp_path: Path) -> None:
    """The property above is not vacuous: with a link out of the workspace, the lexical
    reading (normpath) and the rule disagree, and the rule's answer is the OS's."""
    root = Path(os.path.realpath(tmp_path))
    build(root, [("link", "w/a", "/out"), ("file", "out/b", "")])
    path = f"{root}/w/a/../w/x"
    assert posixpath.normpath(path) == f"{root}/w/w/x"  # lexically inside
    assert paths.resolve(path, _readlink) == f"{root}/w/x"  # the OS: /out/.. is the root
    escape = f"{root}/w/a/b"
    assert posixpath.normpath(escape).startswith(f"{root}/w/")
    assert isinstance(paths.check(escape, [f"{root}/w"], _readlink), paths.Refused)
    assert os.path.realpath(escape) == f"{root}/out/b"


# ---------------------------------------------------------------- the daemon, scripted agents

LIMIT = 180  # seconds: each test starts one daemon and one agent (~2 s idle)


def fs_answers(agent: Any) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in agent.events("fs_answer")}


def edit_permission(path: str, handle: str = "p1", content: str = "approved\n") -> dict[str, Any]:
    """An edit of ``path`` whose card shows its new ``content`` (an ACP diff): what a write may carry."""
    call = {"toolCallId": f"w-{handle}", "title": f"Write {os.path.basename(path)}", "kind": "edit", "status": "pending", "locations": [{"path": path}],
            "content": [{"type": "diff", "path": path, "oldText": None, "newText": content}]}  # fmt: skip
    return {"permission": {"toolCall": call}, "id": handle}


@pytest.mark.anyio
async def test_reads_from_disk_without_a_shim_inside_the_workspace_only(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    work = Path(os.path.realpath(tmp_path)) / "work"
    work.mkdir()
    (work / "a.txt").write_text("one\ntwo\nthree\n")
    outside = Path(os.path.realpath(tmp_path)) / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    os.symlink(outside, work / "escape")
    agent = scripted({"turns": [[
        {"fs": {"method": "fs/read_text_file", "path": str(work / "a.txt")}, "id": "whole"},
        {"fs": {"method": "fs/read_text_file", "path": str(work / "a.txt"), "line": 2, "limit": 1}, "id": "cut"},
        {"fs": {"method": "fs/read_text_file", "path": str(work / "missing.txt")}, "id": "missing"},
        {"fs": {"method": "fs/read_text_file", "path": str(outside / "secret.txt")}, "id": "outside"},
        {"fs": {"method": "fs/read_text_file", "path": f"{work}/../outside/secret.txt"}, "id": "dotdot"},
        {"fs": {"method": "fs/read_text_file", "path": str(work / "escape" / "secret.txt")}, "id": "symlink"},
        {"fs": {"method": "fs/read_text_file", "path": "a.txt"}, "id": "relative"},
        {"fs": {"method": "fs/read_text_file", "path": str(work / "a.txt"), "line": 0}, "id": "line0"},
        {"fs": {"method": "fs/read_text_file", "path": str(work / "a.txt"), "sessionId": "other"}, "id": "session"},
        {"text": "done"},
    ]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], workspace=[str(work)]) as c:
            call = await c.chat(agent.id, [user("read")])
    assert call.error is None
    answers = fs_answers(agent)
    assert answers["whole"]["result"] == {"content": "one\ntwo\nthree\n"}
    assert answers["cut"]["result"] == {"content": "two\n"}
    assert answers["missing"]["error"]["code"] == -32002 and "Resource not found" in answers["missing"]["error"]["message"]
    for refused in ("outside", "dotdot", "symlink"):
        error = answers[refused]["error"]
        assert error["code"] == -32602 and f"is outside the workspace folders ({work})" in error["message"], refused
    assert answers["relative"]["error"]["code"] == -32602 and "absolute" in answers["relative"]["error"]["message"]
    assert answers["line0"]["error"]["code"] == -32602
    assert answers["session"]["error"]["code"] == -32602 and "sessionId" in answers["session"]["error"]["message"]
    caps = agent.frames("initialize")[0]["params"]["clientCapabilities"]
    assert caps["fs"] == {"readTextFile": True, "writeTextFile": True}


@pytest.mark.anyio
async def test_a_write_needs_an_approved_edit_of_that_file_in_the_turn(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    work = Path(os.path.realpath(tmp_path)) / "work"
    work.mkdir()
    target, other = work / "notes.txt", work / "other.txt"
    target.write_text("old\n")
    agent = scripted({"turns": [[
        # Unasked: refused.
        {"fs": {"method": "fs/write_text_file", "path": str(target), "content": "unasked\n"}, "id": "unasked"},
        edit_permission(str(target)),
        {"branch": "p1", "allow": [
            {"fs": {"method": "fs/write_text_file", "path": str(other), "content": "not this one\n"}, "id": "other-file"},
            {"fs": {"method": "fs/write_text_file", "path": str(target), "content": "approved\n[core]\n\tfsmonitor = touch X\n"}, "id": "other-content"},
            {"fs": {"method": "fs/write_text_file", "path": str(target), "content": "approved\n"}, "id": "approved"},
            {"fs": {"method": "fs/write_text_file", "path": str(target), "content": "again\n"}, "id": "again"},
            {"text": "wrote it"},
        ], "reject": [{"text": "not written"}]},
    ], [
        # The next prompt: the approval given before does not carry over.
        {"fs": {"method": "fs/write_text_file", "path": str(target), "content": "next turn\n"}, "id": "next-turn"},
        {"text": "done"},
    ]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], workspace=[str(work)]) as c:
            first = await c.chat(agent.id, [user("write")])
            assert first.result == {"stopReason": "tool_calls"}
            [card] = tool_calls(first)
            history = [user("write"), assistant(first.parts), approve(card)]
            second = await c.chat(agent.id, history)
            assert second.error is None
            third = await c.chat(agent.id, [*history, assistant(second.parts), user("more")])
            assert third.error is None
    answers = fs_answers(agent)
    assert "only after the user approved an edit" in answers["unasked"]["error"]["message"]
    assert answers["other-file"]["error"]["code"] == -32602
    # Not what the card showed: refused, and the approval stays for the content it did show.
    assert answers["other-content"]["error"]["code"] == -32602 and "content the card showed" in answers["other-content"]["error"]["message"]
    assert answers["approved"]["result"] == {}
    assert answers["again"]["error"]["code"] == -32602  # one approval, one write
    assert answers["next-turn"]["error"]["code"] == -32602
    assert target.read_text() == "approved\n"
    assert not other.exists()


@pytest.mark.anyio
async def test_a_rejected_edit_writes_nothing(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    work = Path(os.path.realpath(tmp_path))
    target = work / "notes.txt"
    target.write_text("old\n")
    agent = scripted({"turns": [[
        edit_permission(str(target)),
        {"branch": "p1", "reject": [
            {"fs": {"method": "fs/write_text_file", "path": str(target), "content": "rejected\n"}, "id": "after-reject"},
            {"text": "ok"},
        ]},
    ]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], workspace=[str(work)]) as c:
            first = await c.chat(agent.id, [user("write")])
            [card] = tool_calls(first)
            second = await c.chat(agent.id, [user("write"), assistant(first.parts), skip(card)])
            assert second.error is None
    assert fs_answers(agent)["after-reject"]["error"]["code"] == -32602
    assert target.read_text() == "old\n"


@pytest.mark.anyio
async def test_through_the_shim_reads_the_editors_text_and_writes_by_asking_it(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    work = Path(os.path.realpath(tmp_path)) / "work"
    work.mkdir()
    target = work / "a.txt"
    target.write_text("on disk\n")
    os.symlink(target, work / "link.txt")
    agent = scripted({"turns": [[
        {"fs": {"method": "fs/read_text_file", "path": str(work / "link.txt"), "line": 2, "limit": 3}, "id": "read"},
        {"fs": {"method": "fs/read_text_file", "path": str(work / "gone.txt")}, "id": "shim-error"},
        {"fs": {"method": "fs/read_text_file", "path": "/etc/hostname"}, "id": "outside"},
        edit_permission(str(target), content="new text\n"),
        {"branch": "p1", "allow": [
            {"fs": {"method": "fs/write_text_file", "path": str(target), "content": "new text\n"}, "id": "write"},
            {"text": "wrote"},
        ]},
    ]]})
    asked: list[tuple[str, Any]] = []

    async def serve(method: str, params: Any) -> Any:  # the VS Code extension's part (vscode-shim/src/chat/files.ts)
        asked.append((method, params))
        if method == "client/readTextFile" and params["path"].endswith("gone.txt"):
            raise RPCError({"code": -32002, "message": "Resource not found: gone.txt"})
        if method == "client/readTextFile":
            return {"content": "the editor's unsaved text"}
        return {}

    with anyio.fail_after(LIMIT):
        async with daemon([agent], workspace=[str(work)], initialize=False) as c:
            c.on_request = serve
            await c.initialize(workspace=[str(work)], agents=[agent.spec], capabilities={"fs": True})
            first = await c.chat(agent.id, [user("go")])
            [card] = tool_calls(first)
            second = await c.chat(agent.id, [user("go"), assistant(first.parts), approve(card)])
            assert second.error is None
    answers = fs_answers(agent)
    assert answers["read"]["result"] == {"content": "the editor's unsaved text"}
    assert answers["shim-error"]["error"] == {"code": -32002, "message": "Resource not found: gone.txt"}
    assert answers["outside"]["error"]["code"] == -32602  # refused before VS Code is asked
    assert answers["write"]["result"] == {}
    # The shim is asked with the resolved path (what was checked), line and limit passed on.
    assert asked == [
        ("client/readTextFile", {"path": str(target), "line": 2, "limit": 3}),
        ("client/readTextFile", {"path": str(work / "gone.txt")}),
        ("client/writeTextFile", {"path": str(target), "content": "new text\n"}),
    ]
    assert target.read_text() == "on disk\n"  # the editor writes, not the daemon
    assert all(r["id"].startswith("lmbridge-") for r in c.requests)


@pytest.mark.anyio
async def test_the_demo_agent_reads_and_appends_through_fs(daemon: Any, tmp_path: Path) -> None:
    """The demo agent's "show me" and "append a line to" rows (what the Chat-view test drives
    in VS Code), here from disk: the write waits for Allow, and lands once."""
    work = Path(os.path.realpath(tmp_path)) / "work"
    work.mkdir()
    (work / "notes.md").write_text("# Notes\n")
    with anyio.fail_after(LIMIT):
        async with daemon(workspace=[str(work)]) as c:
            shown = await c.chat("demo", [user("show me notes.md")])
            assert "`notes.md` says:" in "".join(p["value"] for p in shown.parts if p["type"] == "text")
            assert "# Notes" in "".join(p["value"] for p in shown.parts if p["type"] == "text")
            first = await c.chat("demo", [user("append a line to notes.md")])
            [card] = tool_calls(first)
            assert "Append to notes.md" in card["input"]["title"]
            assert (work / "notes.md").read_text() == "# Notes\n"  # nothing before Allow
            second = await c.chat("demo", [user("append a line to notes.md"), assistant(first.parts), approve(card)])
            assert second.error is None
            assert "I appended a line to `notes.md`." in "".join(p["value"] for p in second.parts if p["type"] == "text")
    assert (work / "notes.md").read_text() == "# Notes\nAppended by the demo agent.\n"


@pytest.mark.anyio
async def test_a_link_to_git_config_is_asked_on_the_protected_tool_naming_its_target(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """A repository ships ``notes.txt -> .git/config``: the card of an edit of notes.txt names
    .git/config and goes out on the tool no session approval of edits covers; the write then
    goes where the card said, with what it showed."""
    work = Path(os.path.realpath(tmp_path)) / "work"
    (work / ".git").mkdir(parents=True)
    config = work / ".git" / "config"
    config.write_text("[core]\n")
    os.symlink(".git/config", work / "notes.txt")
    agent = scripted({"turns": [[
        edit_permission(str(work / "notes.txt"), content="[core]\n\tbare = false\n"),
        {"branch": "p1", "allow": [
            {"fs": {"method": "fs/write_text_file", "path": str(work / "notes.txt"), "content": "[core]\n\tfsmonitor = touch X\n"}, "id": "other"},
            {"fs": {"method": "fs/write_text_file", "path": str(work / "notes.txt"), "content": "[core]\n\tbare = false\n"}, "id": "shown"},
            {"text": "wrote"},
        ]},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with daemon([agent], workspace=[str(work)]) as c:
            first = await c.chat(agent.id, [user("write")])
            [card] = tool_calls(first)
            assert card["name"] == "symposium-agent-action-protected"
            message = card["input"]["message"]
            assert f"`{work}/notes.txt` is a link to `{config}`" in message and "Asked again" in message
            second = await c.chat(agent.id, [user("write"), assistant(first.parts), approve(card)])
            assert second.error is None
    answers = fs_answers(agent)
    assert answers["other"]["error"]["code"] == -32602
    assert answers["shown"]["result"] == {}
    assert config.read_text() == "[core]\n\tbare = false\n"
