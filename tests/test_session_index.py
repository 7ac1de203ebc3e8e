"""Dormant sessions and the persisted session index (docs/sessions.md): the history core's
``sleep``/``export``/``restore``, the index file, and ``lmbridge sessions``."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_history import a, fp, start, tr, u

from lmbridge.core.history import MAX_DORMANT, HistoryCore, HistoryError, Kind, Last, PendingCall
from lmbridge.core.permissions import Answer
from lmbridge.daemon.session_index import MAX_ENTRIES, SessionIndex, entry, state_dir


def test_a_session_without_a_resume_token_is_forgotten_not_slept() -> None:
    core = HistoryCore()
    sid, _ = start(core)
    assert core.sleep(sid) is False and sid not in core.sessions


def test_a_dormant_session_wakes_with_its_resume_token_and_only_what_it_has_not_seen() -> None:
    core = HistoryCore()
    sid, history = start(core, "question one")
    core.sessions[sid].resume = "acp-1"
    assert core.sleep(sid) and core.sessions[sid].dormant
    assert core.idle(100.0, 1.0) == []  # dormant sessions are not evicted again
    turn = core.begin("m", [*history, u("question two")], 5)
    assert turn.kind is Kind.CONTINUATION and turn.session_id == sid and turn.resume == "acp-1"
    assert [m.content[0].value for m in turn.prompt] == ["question two"] and turn.context == ()  # type: ignore[union-attr]
    assert not core.sessions[sid].dormant
    again = core.begin("m", [*history, u("question two"), a("answer two"), u("three")], 6)
    assert again.resume is None  # awake: nothing to take up


def test_a_turn_pending_when_the_agent_session_ended_is_interrupted_and_a_late_allow_approves_nothing() -> None:
    core = HistoryCore()
    ask = a("may I?", "call-1")
    sid, history = start(core, "do it", ask, last=Last.PENDING, pending=[PendingCall("call-1", "tok")])
    core.sessions[sid].resume = "acp-1"
    core.sleep(sid)
    assert core.sessions[sid].last is Last.INTERRUPTED
    data = core.export(sid)
    assert data is not None and "tok" not in json.dumps(data)  # no approval token persisted
    # The user clicks Allow on the old card with the right token: the agent's turn is gone,
    # its session is woken (not replaced) and told; the card is answered cancelled.
    turn = core.begin("m", [*history, tr("call-1", "tok")], 5)
    assert (turn.kind, turn.session_id, turn.resume) == (Kind.LATE_ANSWERS, sid, "acp-1")
    assert turn.answers == {"call-1": Answer.CANCELLED} and not turn.cancel_first
    assert "tok" not in repr(turn.prompt) and "approved" in turn.prompt[0].content[0].value  # type: ignore[union-attr]


def test_an_older_index_entry_of_a_turn_that_waited_on_cards_restores_interrupted() -> None:
    data = {"model": "m", "resume": "r", "items": [["u", []], ["a", "00" * 16, "", ["c1"]]], "last": "cancelled",
            "pending": [["c1", False]], "unacked": True}  # fmt: skip
    core = HistoryCore()
    sid = core.restore(data, 0.0)
    assert core.sessions[sid].last is Last.INTERRUPTED and core.sessions[sid].items[0].words is None


def test_at_most_max_dormant_sessions_sleep_the_oldest_go_first() -> None:
    core = HistoryCore()
    ids = []
    for i in range(MAX_DORMANT + 3):
        sid, _ = start(core, f"chat {i}")
        core.sessions[sid].resume = f"acp-{i}"
        core.sessions[sid].last_active = float(i)
        core.sleep(sid)
        ids.append(sid)
    assert sum(s.dormant for s in core.sessions.values()) == MAX_DORMANT
    assert all(i not in core.sessions for i in ids[:3]) and all(i in core.sessions for i in ids[3:])


@settings(max_examples=50, deadline=None)
@given(turns=st.lists(st.tuples(st.text(min_size=1, max_size=20), st.booleans()), min_size=1, max_size=6))
def test_export_then_restore_matches_the_same_requests(turns: list[tuple[str, bool]]) -> None:
    """A restored session is matched exactly as the live one was: same kind, same prompt."""
    core = HistoryCore()
    history: list = []
    sid = None
    for i, (text, with_call) in enumerate(turns):
        turn = core.begin("m", [*history, u(f"q{i}")], i)
        sid = turn.session_id
        answer = a(f"{text} {i}", *([f"call-{i}"] if with_call else []))
        core.end(sid, fp(answer), Last.DONE, [], i)
        history += [u(f"q{i}"), answer] if not with_call else [u(f"q{i}"), answer, tr(f"call-{i}", "result")]
    assert sid is not None
    core.sessions[sid].resume = "acp-x"
    data = json.loads(json.dumps(core.export(sid)))
    new = HistoryCore()
    rid = new.restore(data, 0.0)
    request = [*history, u("next")]
    live, woken = core.begin("m", request, 99), new.begin("m", request, 99)
    assert (woken.kind, woken.session_id, woken.resume) == (live.kind, rid, "acp-x")
    assert woken.prompt == live.prompt and woken.context == live.context


@pytest.mark.parametrize("bad", [{}, {"model": "m"}, {"model": "m", "resume": "r", "items": [["x"]]},
                                 {"model": "m", "resume": "r", "items": [["a", "zz", "", []]]}, {"model": 1, "resume": "r", "items": []}])  # fmt: skip
def test_restore_rejects_what_export_did_not_write(bad: dict) -> None:
    with pytest.raises(HistoryError):
        HistoryCore().restore(bad, 0.0)


# ---------------------------------------------------------------- the file


def test_state_dir_follows_xdg_state_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert state_dir() == tmp_path / "lmbridge"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/is/ignored")
    assert state_dir() == Path.home() / ".local" / "state" / "lmbridge"


def test_save_is_atomic_private_and_bounded(tmp_path: Path) -> None:
    index = SessionIndex(tmp_path / "state")
    entries = [entry({"model": "m", "resume": f"r{i}", "items": []}, "m", "/w") for i in range(MAX_ENTRIES + 5)]
    index.save(entries)
    assert stat.S_IMODE(os.stat(index.path).st_mode) == 0o600
    loaded = index.load()
    assert len(loaded) == MAX_ENTRIES and loaded[-1]["resume"] == f"r{MAX_ENTRIES + 4}"  # the newest kept
    assert [p.name for p in index.path.parent.iterdir()] == ["sessions.json"]  # no temporary left


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"program": "other", "version": 1, "sessions": []}',
                                     b'{"program": "lmbridge", "version": 99, "sessions": []}', b'{"program": "lmbridge", "version": 1}'])  # fmt: skip
def test_a_corrupt_or_foreign_file_is_ignored(tmp_path: Path, content: bytes) -> None:
    index = SessionIndex(tmp_path)
    index.path.write_bytes(content)
    assert index.load() == []
    index.save([entry({"model": "m", "resume": "r", "items": []}, "m", None)])  # and replaced at the next save
    assert len(index.load()) == 1


def test_the_agents_profiles_are_cached_with_their_options_and_an_older_cache_is_dropped(tmp_path: Path) -> None:
    index = SessionIndex(tmp_path)
    options = {"claude": [{"type": "select", "id": "mode", "name": "Mode", "category": "mode", "currentValue": "default", "options": []}]}
    index.save_models(options, {"claude": True}, {"claude": "claude"})
    assert (index.models(), index.images(), index.profiles()) == (options, {"claude": True}, {"claude": "claude"})
    # A cache of version 1 held, as a mode's default, the mode the agent started in (claude 0.101:
    # auto, VS Code would send it back as the chat's choice): dropped, learnt again.
    old = {"program": "lmbridge", "version": 1, "agents": {"claude": [{**options["claude"][0], "currentValue": "auto"}]}, "images": {"claude": True}}
    (tmp_path / "models.json").write_text(json.dumps(old))
    assert (index.models(), index.images(), index.profiles()) == ({}, {}, {})


def test_lmbridge_sessions_lists_and_clears(tmp_path: Path) -> None:
    index = SessionIndex(tmp_path / "lmbridge")
    index.save([entry({"model": "claude", "resume": "acp-123", "items": [["u", []], ["a", "00", "", []]]}, "claude", "/work")])
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}

    def run(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "lmbridge", "sessions", *args], env=env, capture_output=True, text=True, check=True).stdout

    listing = run()
    assert "1 session" in listing and "claude" in listing and "acp-123" in listing and "/work" in listing
    assert json.loads(run("--json"))[0]["resume"] == "acp-123"
    assert "1 session forgotten" in run("--clear")
    assert "no sessions" in run()
