"""The agent's client actions (``terminal/create``, ``fs/write_text_file``) under the one rule of
``lmbridge.core.permissions`` (``Grants``, ``grant``, ``permit``, ``runs``), walked as one table:
the cards the user approved in a turn (as fast-agent, codex-acp, gemini-cli and claude-agent-acp
word them, and hostile ones), the turn's boundaries (a new prompt, a Stop), then the actions the
agent sends → permitted or refused with which code. Hypothesis then drives random sequences of
approvals, boundaries and commands and checks that nothing runs that the user did not approve,
with ``sh`` itself as the judge of what a shown command runs."""

from __future__ import annotations

import shlex
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lmbridge.core import errors
from lmbridge.core import permissions as P

OPTIONS = [
    {"optionId": "allow_once", "name": "Allow Once", "kind": "allow_once"},
    {"optionId": "reject_once", "name": "Reject Once", "kind": "reject_once"},
]
WORKSPACE = "/w"


def resolve(path: str) -> str | None:
    """The workspace is /w (a write's path rule, ``paths.check``, stands in here)."""
    return path if path.startswith(WORKSPACE + "/") else None


LINKS = {"/w/notes.txt": "/w/.git/config"}  # a link the repository ships
WS = P.Workspace((WORKSPACE,), resolve=lambda path: resolve(LINKS.get(path, path)))


def card(tool_call: dict[str, Any]) -> P.Permission:
    """The request as the turn machine read it for its card (``permissions.read``)."""
    p = P.read({"sessionId": "s", "toolCall": {"toolCallId": "t1", "status": "pending", **tool_call}, "options": OPTIONS}, "call-1", "tok-1", workspace=WS)
    assert isinstance(p, P.Permission)
    return p


def fast(command: str, **raw: Any) -> dict[str, Any]:
    """fast-agent's execute card (``--shell``): title ``acp_terminal/execute``, ``rawInput`` its arguments."""
    return {"title": "acp_terminal/execute", "kind": "execute", "rawInput": {"command": command, **raw}}


def run(command: str, *args: str, cwd: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``terminal/create`` params as an agent sends them."""
    params: dict[str, Any] = {"sessionId": "s", "command": command, "args": list(args)}
    if cwd is not None:
        params["cwd"] = cwd
    if env is not None:
        params["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return params


def write(path: str, content: str = "x") -> P.WriteFile:
    real = resolve(LINKS.get(path, path))
    return P.WriteFile(path, real if real is not None else path, content)


def diff(path: str, new: str = "x", old: str | None = "") -> dict[str, Any]:
    return {"type": "diff", "path": path, "oldText": old, "newText": new}


EDIT = {"title": "Write", "kind": "edit", "locations": [{"path": "/w/a.txt"}], "rawInput": {"file_path": "/w/b.txt"},
        "content": [diff("/w/c.txt")]}  # fmt: skip
NEW_TURN, STOP, CLOSED = "new prompt", "stop", "turn ended"
OK, REFUSED, BAD = "permit", errors.REFUSED, errors.INVALID_PARAMS

# (row, what happened in the turn: approved cards and boundaries, the actions in order, what each gets)
# An action is terminal/create params, a WriteFile, or CLOSED (every later action comes with no turn open).
ROWS: list[tuple[str, list[Any], list[Any], list[Any]]] = [
    # -- commands: real agents' cards and their terminal/create
    ("fast-agent: a shell line runs as sh -lc", [fast("touch /w/x; echo did")], [run("/bin/sh", "-lc", "touch /w/x; echo did")], [OK]),
    ("fast-agent: plain words run split", [fast("ls -la")], [run("ls", "-la")], [OK]),
    ("fast-agent: quoted words", [fast('grep -n "a b" notes.txt')], [run("grep", "-n", "a b", "notes.txt")], [OK]),
    ("fast-agent: command and args", [fast("ls", args=["-la", "/w"])], [run("ls", "-la", "/w")], [OK]),
    ("fast-agent: its cwd", [fast("make", cwd="/w/sub")], [run("make", cwd="/w/sub")], [OK]),
    ("fast-agent: its env", [fast("make", env={"A": "1", "B": "2"})], [run("make", env={"B": "2", "A": "1"})], [OK]),
    ("codex argv", [{"title": "touch x", "kind": "execute", "rawInput": {"command": ["/bin/bash", "-lc", "touch x"], "cwd": "/w"}}],
     [run("/bin/bash", "-lc", "touch x", cwd="/w")], [OK]),
    ("a command named by its title (gemini, codex)", [{"title": "npm test", "kind": "execute"}], [run("/usr/bin/bash", "-c", "npm test")], [OK]),
    ("a command in a card of another kind is still the command shown", [{"title": "look", "kind": "read", "rawInput": {"command": "ls"}}], [run("ls")], [OK]),
    ("two cards, two runs, in any order", [fast("ls"), fast("pwd")], [run("pwd"), run("ls")], [OK, OK]),
    # -- no approval, or not this one
    ("no card", [], [run("ls")], [REFUSED]),
    ("one approval runs once", [fast("ls")], [run("ls"), run("ls")], [OK, REFUSED]),
    ("another command", [fast("ls")], [run("rm", "-rf", "/w")], [REFUSED]),
    ("arguments the card did not show", [fast("ls")], [run("ls", "-la", "/")], [REFUSED]),
    ("the args a card did show are part of it", [fast("ls", args=["-la"])], [run("ls")], [REFUSED]),
    ("a shell running more than was shown", [fast("ls")], [run("sh", "-c", "ls; rm -rf /w")], [REFUSED]),
    ("a shell that is not one", [fast("ls")], [run("python3", "-c", "ls")], [REFUSED]),
    ("a shell with other flags", [fast("ls")], [run("bash", "--rcfile", "/tmp/x", "-c", "ls")], [REFUSED]),
    ("a shell's name with a trailing newline is not one", [fast("ls")], [run("sh\n", "-c", "ls"), run("/bin/bash\n", "-lc", "ls")], [REFUSED, REFUSED]),
    ("a card showing an argv of sh\\n shows it whole", [{"title": "t", "kind": "execute", "rawInput": {"command": ["sh\n", "-c", "ls"]}}],
     [run("sh", "-c", "ls"), run("sh\n", "-c", "ls")], [REFUSED, OK]),
    ("a command with a bare CR grants nothing", [fast("echo ok\r# ; touch X")], [run("sh", "-c", "echo ok\r# ; touch X")], [REFUSED]),
    ("a program named like a shell is not one", [fast("ls")], [run("/w/bash", "-lc", "ls"), run("./sh", "-c", "ls"), run("/tmp/x/sh", "-c", "ls")],
     [REFUSED, REFUSED, REFUSED]),
    ("a card showing such a program shows it whole, and runs it as shown",
     [{"title": "t", "kind": "execute", "rawInput": {"command": ["/w/bash", "-lc", "ls"]}}], [run("/w/bash", "-lc", "ls"), run("sh", "-c", "ls")], [OK, REFUSED]),
    ("operators only through a shell", [fast("ls; rm x")], [run("ls;", "rm", "x")], [REFUSED]),
    ("a glob only through a shell", [fast("ls *.py")], [run("ls", "*.py")], [REFUSED]),
    ("a variable only through a shell", [fast('echo "$HOME"')], [run("echo", "$HOME"), run("sh", "-c", 'echo "$HOME"')], [REFUSED, OK]),
    ("a tilde only through a shell", [fast("cat ~/x")], [run("cat", "~/x")], [REFUSED]),
    ("a comment only through a shell", [fast("ls # x")], [run("ls", "#", "x")], [REFUSED]),
    ("another cwd", [fast("make", cwd="/w/sub")], [run("make"), run("make", cwd="/")], [REFUSED, REFUSED]),
    ("a cwd the card did not show", [fast("make")], [run("make", cwd="/")], [REFUSED]),
    ("an env the card did not show", [fast("make")], [run("make", env={"LD_PRELOAD": "/tmp/evil.so"})], [REFUSED]),
    ("another env value", [fast("make", env={"A": "1"})], [run("make", env={"A": "2"}), run("make")], [REFUSED, REFUSED]),
    ("an env the card could not read matches nothing", [fast("make", env={"A": 1})], [run("make", env={"A": "1"})], [REFUSED]),
    ("a card that named no command", [{"title": "", "kind": "execute"}], [run("sh", "-c", P.NO_COMMAND)], [REFUSED]),
    ("an edit card runs nothing", [EDIT], [run("sh", "-c", "Write")], [REFUSED]),
    ("a new prompt ends the approval", [fast("ls"), NEW_TURN], [run("ls")], [REFUSED]),
    ("a Stop ends the approval", [fast("ls"), STOP], [run("ls")], [REFUSED]),
    ("an approval after the new prompt counts", [fast("pwd"), NEW_TURN, fast("ls")], [run("ls"), run("pwd")], [OK, REFUSED]),
    ("no prompt turn open", [fast("ls")], [CLOSED, run("ls")], [None, REFUSED]),
    ("unreadable params", [fast("ls")], [{"command": 7}, {"command": "ls", "args": "-la"}, {"command": "ls", "env": {"A": "1"}}, {"command": "ls", "cwd": 3}],
     [BAD, BAD, BAD, BAD]),
    ("what no process can be started with", [fast("make", env={"A=B": "1"}), fast("ls", args=["a\x00b"])],
     [run("make", env={"A=B": "1"}), run("ls", "a\x00b"), run("make", cwd="/w\x00"), run("make", env={"": "1"})], [BAD, BAD, BAD, BAD]),
    # -- writes: an approved edit grants each file its card shows a change of, with that text, once
    ("an edit: the file whose change it shows, once", [EDIT], [write("/w/c.txt"), write("/w/c.txt")], [OK, BAD]),
    ("two changes on one card: each once", [{**EDIT, "content": [diff("/w/c.txt"), diff("/w/d.txt", "y")]}], [write("/w/d.txt", "y"), write("/w/c.txt")], [OK, OK]),
    ("no edit approved", [], [write("/w/a.txt")], [BAD]),
    ("a file the edit did not name", [EDIT], [write("/w/d.txt")], [BAD]),
    # Issue points: a path in a rawInput field the card does not show, or a location with no
    # content shown, grants nothing; the content must be the card's, byte for byte.
    ("a rawInput path the card does not show grants nothing", [EDIT], [write("/w/b.txt")], [BAD]),
    ("a location with no change shown grants nothing", [EDIT], [write("/w/a.txt")], [BAD]),
    ("other content than the card showed", [EDIT], [write("/w/c.txt", "x\nrm -rf ~"), write("/w/c.txt", "x ")], [BAD, BAD]),
    ("the content shown, after other content was refused", [EDIT], [write("/w/c.txt", "y"), write("/w/c.txt")], [BAD, OK]),
    ("a delete grants no write", [{**EDIT, "kind": "delete"}], [write("/w/c.txt"), write("/w/a.txt")], [BAD, BAD]),
    ("a move grants only its destination", [{"kind": "move", "title": "mv", "rawInput": {"path": "/w/c.txt", "destination": "/w/e.txt"},
                                             "content": [diff("/w/c.txt"), diff("/w/e.txt")]}],
     [write("/w/c.txt"), write("/w/e.txt")], [BAD, OK]),
    ("a change the card shows only through a merged call grants nothing", [{"kind": "edit", "title": "x", "locations": [{"path": "/w/c.txt"}]}],
     [write("/w/c.txt")], [BAD]),
    ("a link: the write goes to its target, as the card names it", [{"kind": "edit", "title": "x", "content": [diff("/w/notes.txt")]}],
     [write("/w/notes.txt"), write("/w/.git/config")], [OK, BAD]),
    ("a read names nothing writable", [{**EDIT, "kind": "read"}], [write("/w/a.txt")], [BAD]),
    ("a command card names nothing writable", [{**EDIT, "kind": "execute"}], [write("/w/a.txt")], [BAD]),
    ("no kind names nothing writable", [{**EDIT, "kind": None}], [write("/w/a.txt")], [BAD]),
    ("relative paths and junk name nothing", [{"kind": "edit", "title": "x", "locations": [{"path": "rel.txt"}, {"path": 5}, "x"]}], [write("/w/rel.txt")], [BAD]),
    ("outside the workspace: never writable", [{"kind": "edit", "title": "x", "locations": [{"path": "/etc/passwd"}]}], [write("/etc/passwd")], [BAD]),
    ("a new prompt ends the edit", [EDIT, NEW_TURN], [write("/w/a.txt")], [BAD]),
    ("a Stop ends the edit", [EDIT, STOP], [write("/w/a.txt")], [BAD]),
    ("no prompt turn open: no write", [EDIT], [CLOSED, write("/w/a.txt")], [None, BAD]),
]  # fmt: skip


def walk(events: list[Any], actions: list[Any]) -> list[Any]:
    """The session actor's part, as it does it: approved cards granted, none at a prompt and at
    a Stop, each action permitted or denied in order."""
    grants = P.NO_GRANTS
    for happened in events:
        grants = P.NO_GRANTS if happened in (NEW_TURN, STOP) else P.grant(grants, card(happened), WS.resolve)
    got: list[Any] = []
    turn_open = True
    for action in actions:
        if action == CLOSED:
            turn_open = False
            got.append(None)
            continue
        parsed = P.run_command(action) if isinstance(action, dict) else action
        if isinstance(parsed, P.Deny):
            got.append(parsed.code)
            continue
        grants, decision = P.permit(grants, parsed, turn_open)
        got.append(OK if isinstance(decision, P.Permit) else decision.code)
    return got


@pytest.mark.parametrize(("row", "events", "actions", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_the_client_action_table(row: str, events: list[Any], actions: list[Any], expected: list[Any]) -> None:
    assert walk(events, actions) == expected


def test_a_refusal_says_what_was_not_approved_and_how_to_ask() -> None:
    _, denied = P.permit(P.NO_GRANTS, P.RunCommand("rm", ("-rf", "/w"), "/w"), True)
    assert isinstance(denied, P.Deny) and denied.code == -32000
    assert "has not approved running 'rm -rf /w' in '/w'" in denied.message and "session/request_permission" in denied.message
    _, denied = P.permit(P.NO_GRANTS, write("/w/a.txt"), True)
    assert isinstance(denied, P.Deny) and denied.code == -32602
    assert denied.message.startswith("refused: lmbridge writes /w/a.txt only after the user approved an edit of it in this turn")


def test_the_card_shows_the_args_and_the_environment_a_run_would_get() -> None:
    message = P.render(card(fast("ls", args=["-la", "my dir"], env={"A": "1"}))).message
    assert "```sh\nls -la 'my dir'\n```" in message and "```sh\nA=1\n```" in message


def test_grants_stay_bounded() -> None:
    grants = P.NO_GRANTS
    for i in range(100):
        grants = P.grant(grants, card(fast(f"echo {i}")), resolve)
        grants = P.grant(grants, card({"kind": "edit", "title": "x", "content": [diff(f"/w/{i}")]}), resolve)
    assert len(grants.commands) == P.MAX_GRANTED_COMMANDS and grants.commands[-1].text == "echo 99"
    assert len(grants.writes) == 50 and grants.writes[-1].real == "/w/99"


# ---------------------------------------------------------------- no sequence lets an unapproved command through

PLAIN = ["ls", "echo", "a", "-la", "x.py", "'q r'", '"s t"', "\\z"]
SHELLY = ["b c", "*", "~", "#", "$X", ";", "&&", "|", ">f", '"$Y"', "(x)", "`v`"]
WORDS = PLAIN + SHELLY
texts = st.lists(st.sampled_from(PLAIN) | st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
cwds = st.sampled_from([None, "/w", "/w/sub"])
envs = st.sampled_from([None, {"A": "1"}, {"A": "2"}])


@st.composite
def runs_of(draw: st.DrawFn, shown: list[tuple[str, str | None, dict[str, str] | None]]) -> P.RunCommand:
    """A ``terminal/create`` an agent might send: mostly one a card showed (through a shell,
    split into words, with a word more, in its cwd with its env or not), else its own."""
    text, cwd, env = draw(st.sampled_from(shown)) if shown and draw(st.integers(0, 4)) else (draw(texts), draw(cwds), draw(envs))
    how = draw(st.sampled_from(["sh", "sh", "split", "split", "own", "shifted"]))
    if how == "sh":
        argv = [draw(st.sampled_from(["sh", "/bin/sh", "bash", "/usr/bin/zsh", "python3"])), draw(st.sampled_from(["-c", "-lc", "-e"])), text]
    elif how == "split":
        try:
            argv = shlex.split(text) or ["ls"]
        except ValueError:
            argv = text.split()
    elif how == "shifted":
        argv = [*text.split(), draw(st.sampled_from(WORDS))]
    else:
        argv = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
    if not draw(st.integers(0, 4)):
        cwd, env = draw(cwds), draw(envs)
    return P.RunCommand(argv[0], tuple(argv[1:]), cwd, tuple(sorted((env or {}).items())))


@cache
def sh_words(text: str, where: str) -> tuple[str, ...] | None:
    """The words ``sh`` makes of ``text`` as a command line: the judge of what a card that
    showed ``text`` runs. None when it is not exactly one command of words: anything else
    runs, prints, fails or writes (``where`` holds a file, so a listing shows), or the words
    go elsewhere (a pipe, a redirect)."""
    done = subprocess.run(
        ["sh", "-c", f"set -f; x() {{ printf '\\002'; printf '%s\\0' \"$@\"; printf '\\003'; }}; x {text}"],
        cwd=where, capture_output=True, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "X": "ex", "Y": "why"}, timeout=10,
    )  # fmt: skip
    out = done.stdout
    if done.returncode != 0 or done.stderr or not (out.startswith(b"\x02") and out.endswith(b"\x03")) or out.count(b"\x02") != 1:
        return None
    return tuple(out[1:-1].decode().split("\0")[:-1])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_sequence_of_events_lets_an_unapproved_command_through(data: st.DataObject, tmp_path: Path) -> None:
    """Random approvals (cards showing commands of words, quotes, operators, globs, variables),
    Skips (no grant), new prompts, Stops, turns that ended, and ``terminal/create``s. Each
    run permitted is one the user approved in this turn and not yet run: the same cwd and
    env, and its program and arguments are either a shell running exactly the shown text, or
    exactly the words ``sh`` itself makes of the shown text (``set -f``: the judge expands
    variables and ``~``, but a glob is left as written, so a glob never passes as a word)."""
    (tmp_path / "f0").touch()
    grants = P.NO_GRANTS
    approved: list[P.Command] = []  # this turn's, not yet run
    shown: list[tuple[str, str | None, dict[str, str] | None]] = []
    turn_open = True
    for _ in range(data.draw(st.integers(1, 16))):
        step = data.draw(st.sampled_from(["approve", "approve", "skip", "new prompt", "stop", "end", "run", "run", "run", "run", "run"]))
        if step in ("approve", "skip"):
            text, cwd, env = data.draw(texts), data.draw(cwds), data.draw(envs)
            raw: dict[str, Any] = {"command": text} | ({"cwd": cwd} if cwd else {}) | ({"env": env} if env else {})
            shown.append((text, cwd, env))
            if step == "approve":  # a Skip answers the card without an approval: nothing is granted
                p = card({"title": text, "kind": "execute", "rawInput": raw})
                grants = P.grant(grants, p, resolve)
                assert p.command is not None
                approved.append(p.command)
        elif step in ("new prompt", "stop"):
            grants, approved, turn_open = P.NO_GRANTS, [], True
        elif step == "end":
            turn_open = False
        else:
            action = data.draw(runs_of(shown))
            argv = [action.command, *action.args]
            grants, decision = P.permit(grants, action, turn_open)
            if isinstance(decision, P.Deny):
                continue
            assert turn_open, "a command ran with no prompt turn open"
            match = next((c for c in approved if c.cwd == action.cwd and c.env == action.env and (
                (Path(argv[0]).name in ("sh", "bash", "zsh", "dash") and argv[1] in ("-c", "-lc") and len(argv) == 3 and argv[2] == c.text)
                or sh_words(c.text, str(tmp_path)) == tuple(argv))), None)  # fmt: skip
            assert match is not None, f"{argv} (cwd {action.cwd}, env {action.env}) ran, approved: {approved}"
            approved.remove(match)
            event("a command ran")


# ---------------------------------------------------------------- no sequence writes what no card showed

FILES = ["/w/a.txt", "/w/b.txt", "/w/notes.txt", "/w/.git/config", "/etc/passwd", "rel.txt"]
TEXTS = ["x", "x\n", "x\r\n", "y", "", "x\rtouch X", "\u202ex"]


@st.composite
def edit_cards(draw: st.DrawFn) -> dict[str, Any]:
    """An agent's edit, delete or move request: diffs, locations and rawInput paths, shown or not."""
    kind = draw(st.sampled_from(["edit", "edit", "move", "delete", "read", "execute"]))
    diffs = [diff(draw(st.sampled_from(FILES)), draw(st.sampled_from(TEXTS))) for _ in range(draw(st.integers(0, 3)))]
    call: dict[str, Any] = {"title": "t", "kind": kind, "content": diffs}
    if draw(st.booleans()):
        call["locations"] = [{"path": draw(st.sampled_from(FILES))}]
    if draw(st.booleans()):
        call["rawInput"] = {draw(st.sampled_from(["filePath", "path", "abs_path", "destination"])): draw(st.sampled_from(FILES))}
    return call


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_no_sequence_of_events_writes_what_no_approved_card_showed(data: st.DataObject) -> None:
    """Random edit cards approved or skipped, new prompts, Stops, and writes of any file with any
    content: each write permitted is, byte for byte, a change an approved card of this turn
    showed (its diff's file, or the file it named as that file's link target, and its newText,
    both on the card), and each is used once."""
    grants = P.NO_GRANTS
    shown: list[tuple[str, str]] = []  # (file written, content) that approved cards of this turn showed, unused
    for _ in range(data.draw(st.integers(1, 12))):
        step = data.draw(st.sampled_from(["approve", "approve", "skip", "new prompt", "write", "write", "write"]))
        if step in ("approve", "skip"):
            call = data.draw(edit_cards())
            p = card(call)
            if step == "approve":
                grants = P.grant(grants, p, WS.resolve)
                message = P.render(p).message
                for w in p.writes:
                    # The card shows what it grants: the file, and the change (unified_diff, one rendering per text).
                    shown_diff = next(d for d in p.diffs if d.path == w.path and d.new == w.content)
                    assert P.code_block(P.unified_diff(shown_diff), "diff") in message and f"`{w.real}`" in message
                    shown.append((w.real, w.content))
        elif step == "new prompt":
            grants, shown = P.NO_GRANTS, []
        else:
            path, content = data.draw(st.sampled_from(FILES)), data.draw(st.sampled_from(TEXTS))
            real = WS.resolve(path)
            grants, decision = P.permit(grants, P.WriteFile(path, real or path, content), True)
            if isinstance(decision, P.Permit):
                assert real is not None and (real, content) in shown, f"wrote {content!r} to {path} ({real}), shown: {shown}"
                shown.remove((real, content))
                event("a write was permitted")


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([None, "", "a\n", "a\r\n"]), st.text(alphabet="ab\r\n\u2028\\ ", max_size=8), st.text(alphabet="ab\r\n\u2028\\ ", max_size=8))
def test_two_contents_never_look_the_same_on_a_card(old: str | None, a: str, b: str) -> None:
    """A change's rendering is one per text: a CR, a missing last newline, CRLF line ends, a
    U+2028 all show, so a card's approval of one content is never one of another."""
    if a != b:
        show = lambda new: P.code_block(P.unified_diff(P.Diff("/w/a.txt", old, new)), "diff")  # noqa: E731
        assert show(a) != show(b)
