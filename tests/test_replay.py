"""Record and replay (docs/recording.md, docs/replay.md).

Every recording in ``tests/sessions/`` (``make record-sessions``) replays through the
real daemon code with its agents played back; a recording altered on purpose fails,
and the report names the frame; a recording holds no secret; the console records
through ``--record``; the replay tolerates what is legitimately nondeterministic
(text parts merged differently, other ids and tokens).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Client

from lmbridge.devtools.client import approve, assistant, tool_calls, user
from lmbridge.devtools.replay import Divergence, Matcher, load, replay
from lmbridge.rpc.record import HEADER_KEY

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
SESSIONS = ROOT / "tests" / "sessions"
CORPUS = sorted(SESSIONS.glob("*.jsonl"))
LIMIT = 180  # seconds per test body: ~3 s idle (a daemon, an agent, a relay start); docs/reliability.md


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries), encoding="utf-8")
    return path


def run_replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lmbridge", "replay", *args], capture_output=True, text=True, timeout=300)  # ~3 s idle


# ---------------------------------------------------------------- the corpus


def test_the_corpus_is_there() -> None:
    names = {p.stem for p in CORPUS}
    assert {"demo-approve", "demo-skip", "demo-stop", "demo-cancel", "demo-two-files", "agent-crash"} <= names, names
    assert {"claude-approve", "claude-skip", "claude-stop", "claude-cancel", "tools-scripted", "tools-claude"} <= names, names


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
async def test_recording_replays(path: Path) -> None:
    with anyio.fail_after(LIMIT):
        result = await replay(path)
    # Every frame but the answers' data parts (stateful_marker, usage: MAC'd under each daemon's own key, not compared).
    data_parts = [e for e in lines(path)[1:] if (e.get("frame") or {}).get("method") == "lm/responsePart" and e["frame"]["params"]["part"].get("type") == "data"]
    assert result.entries == len(lines(path)) - 1 - len(data_parts)


# ---------------------------------------------------------------- divergences


def altered(tmp_path: Path, pick: Any, change: Any) -> tuple[Path, int]:
    """A copy of demo-approve with the first entry ``pick`` accepts changed; (path, its line)."""
    entries = lines(SESSIONS / "demo-approve.jsonl")
    index = next(i for i, e in enumerate(entries) if i and pick(e))
    change(entries[index])
    return write(tmp_path / "altered.jsonl", entries), index + 1


def test_an_altered_shim_frame_fails_and_the_report_names_it(tmp_path: Path) -> None:
    def pick(e: dict[str, Any]) -> bool:
        return e["link"] == "shim" and e["dir"] == "out" and (e.get("frame") or {}).get("result") == {"stopReason": "end_turn"}

    def change(e: dict[str, Any]) -> None:
        e["frame"]["result"]["stopReason"] = "max_tokens"

    path, line = altered(tmp_path, pick, change)
    done = run_replay(str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    report = done.stdout
    assert f"recorded at line {line}" in report and "link shim (daemon → shim)" in report, report
    assert "at result.stopReason:" in report and '"max_tokens"' in report and '"end_turn"' in report, report


def test_an_altered_agent_frame_fails_and_the_report_names_it(tmp_path: Path) -> None:
    def pick(e: dict[str, Any]) -> bool:
        return e["link"] == "agent:p1" and e["dir"] == "out" and (e.get("frame") or {}).get("method") == "session/prompt"

    def change(e: dict[str, Any]) -> None:
        e["frame"]["params"]["prompt"][0]["text"] = "Something else entirely."

    path, line = altered(tmp_path, pick, change)
    done = run_replay(str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"recorded at line {line}" in done.stdout and "link agent:p1 (daemon → agent)" in done.stdout, done.stdout
    assert "at params.prompt[0].text:" in done.stdout and "Something else entirely." in done.stdout, done.stdout


async def test_altered_agent_output_shows_in_the_text_stream(tmp_path: Path) -> None:
    """The agent 'says' something else: the daemon's text to the shim diverges, and the
    report points into the request's text stream."""

    def pick(e: dict[str, Any]) -> bool:
        return e["link"] == "agent:p1" and e["dir"] == "in" and "I wrote" in json.dumps(e)

    def change(e: dict[str, Any]) -> None:
        content = e["frame"]["params"]["update"]["content"]
        content["text"] = content["text"].replace("I wrote", "I deleted")

    path, _ = altered(tmp_path, pick, change)
    with pytest.raises(Divergence) as caught:
        with anyio.fail_after(LIMIT):
            await replay(path)
    report = str(caught.value)
    assert "different text in the response to request 4" in report, report
    assert "I deleted" in report and "I wrote" in report, report


async def test_coalesced_text_parts_replay_the_same(tmp_path: Path) -> None:
    """The daemon merges consecutive text parts of a request when they queue up (stdout
    lagging): a recording whose part boundaries differ from the replay's replays the same.
    Here every text part of the shim link waits and goes out with the next one."""
    entries = lines(SESSIONS / "demo-cancel.jsonl")

    def text_part(e: dict[str, Any]) -> dict[str, Any] | None:
        if e.get("link") != "shim" or e.get("dir") != "out":
            return None
        part = ((e.get("frame") or {}).get("params") or {}).get("part")
        return part if isinstance(part, dict) and part.get("type") == "text" else None

    merged: list[dict[str, Any]] = []
    last: int | None = None  # index in merged of the previous shim output, when a text part
    count = 0
    for e in entries:
        part = text_part(e)
        if part is not None and last is not None:
            previous = merged.pop(last)
            if previous["frame"]["params"]["requestId"] == e["frame"]["params"]["requestId"]:
                part["value"] = text_part(previous)["value"] + part["value"]  # type: ignore[index]
                count += 1
            else:
                merged.insert(last, previous)
        if e.get("link") == "shim" and e.get("dir") == "out":
            last = len(merged) if part is not None else None
        merged.append(e)
    assert count >= 3, "the recording has no consecutive text parts to merge"
    with anyio.fail_after(LIMIT):
        await replay(write(tmp_path / "merged.jsonl", merged))


def test_a_file_that_is_not_a_recording(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text('{"hello": 1}\n')
    done = run_replay(str(tmp_path / "x.jsonl"))
    assert done.returncode == 2 and "not an lmbridge recording" in done.stdout, done.stdout
    (tmp_path / "y.jsonl").write_text(json.dumps({HEADER_KEY: 99}) + "\n")
    done = run_replay(str(tmp_path / "y.jsonl"))
    assert done.returncode == 2 and "format 99" in done.stdout, done.stdout


def test_matcher_binds_generated_values_and_substitutes_them() -> None:
    m = Matcher({"host": {"cwd": "/rec/cwd", "tmp": "/tmp"}, "lmbridge": "0.0.1"})
    expected = {"callId": "lmbridge-s1-0123456789ab", "input": {"approvalToken": "<redacted:approval-token:1>"}}
    actual = {"callId": "lmbridge-s1-fedcba987654", "input": {"approvalToken": "Zm9vYmFy-real_token"}}
    assert m.match(expected, actual) is None
    later = {"content": [{"value": "<redacted:approval-token:1>"}], "callId": "lmbridge-s1-0123456789ab"}
    assert m.substitute(later) == {"content": [{"value": "Zm9vYmFy-real_token"}], "callId": "lmbridge-s1-fedcba987654"}
    # Bound once: another actual value for the same recorded one is a divergence.
    assert m.match({"callId": "lmbridge-s1-0123456789ab"}, {"callId": "lmbridge-s1-aaaaaaaaaaaa"}) == (
        "callId", "lmbridge-s1-0123456789ab", "lmbridge-s1-aaaaaaaaaaaa")
    # A callId of another session is not the same callId.
    assert m.match({"c": "lmbridge-s2-0123456789ab"}, {"c": "lmbridge-s3-0123456789ab"}) is not None
    # Ports, temp dirs, the recording's cwd and lmbridge's version are normalised.
    assert m.match({"url": "http://127.0.0.1:41000/mcp/s1"}, {"url": "http://127.0.0.1:52000/mcp/s1"}) is None
    assert m.match({"p": "/tmp/lmbridge-mcp-abc/mcp.sock"}, {"p": "/tmp/lmbridge-mcp-xyz/mcp.sock"}) is None
    assert m.match({"cwd": "/rec/cwd/sub"}, {"cwd": os.getcwd() + "/sub"}) is None
    assert m.match({"version": "0.0.1"}, {"version": __import__("lmbridge").__version__}) is None
    assert m.match({"text": "hello"}, {"text": "hullo"}) == ("text", "hello", "hullo")


# ---------------------------------------------------------------- recording


async def test_a_recording_holds_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    secret_env = "sk-this-must-never-be-written-42"
    spec = {"id": "demo", "command": sys.executable, "args": ["-m", "lmbridge", "demo-agent", "--scratch", str(tmp_path / "notes")], "env": {"API_KEY": secret_env}}
    env = {**os.environ, "LMBRIDGE_LOG_LEVEL": "warning"}
    with anyio.fail_after(LIMIT):
        async with Client.spawn([sys.executable, "-m", "lmbridge", "serve", "--record", str(path)], env=env) as client:
            await client.initialize(workspace=[str(tmp_path)], agents=[spec])
            history = [user("Please write a file.")]
            call = await client.chat("demo", history)
            (perm,) = tool_calls(call)
            token = perm["input"]["approvalToken"]
            done = await client.chat("demo", history + [assistant(call.parts), approve(perm)])
            assert done.result == {"stopReason": "end_turn"}
    text = path.read_text(encoding="utf-8")
    assert secret_env not in text and token not in text
    entries = lines(path)
    assert entries[0][HEADER_KEY] == 1
    assert "<redacted:env:API_KEY:1>" in text and "<redacted:approval-token:1>" in text
    links = {(e["link"], e["dir"]) for e in entries[1:]}
    assert links == {("shim", "in"), ("shim", "out"), ("agent:p1", "in"), ("agent:p1", "out")}
    events = [(e["link"], e["event"]) for e in entries[1:] if "event" in e]
    assert events == [("agent:p1", "spawn"), ("shim", "eof"), ("agent:p1", "close"), ("agent:p1", "exit")], events
    assert all(isinstance(e["t"], float) for e in entries[1:])
    with anyio.fail_after(LIMIT):
        await replay(path)


def test_the_console_records_with_record(tmp_path: Path) -> None:
    script = tmp_path / "chat.console"
    script.write_text("> Hello there\n")
    path = tmp_path / "console.jsonl"
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "lmbridge", "console", "--script", str(script), "--record", str(path)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,  # ~4 s idle
    )
    assert done.returncode == 0, done.stdout + done.stderr
    frames = [e.get("frame", {}) for e in lines(path)[1:]]
    assert any(f.get("method") == "lm/provideLanguageModelChatResponse" for f in frames)
    replayed = run_replay(str(path))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_load_reports_the_line_of_a_broken_entry(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps({HEADER_KEY: 1}) + "\n" + '{"t": 0.1, "link": "shim"}\n')
    with pytest.raises(Exception, match=r"broken.jsonl:2"):
        load(path)


async def test_an_agent_that_cannot_start_replays(tmp_path: Path) -> None:
    """A spawn that failed is recorded with its error, and fails the same way in replay."""
    path = tmp_path / "nostart.jsonl"
    spec = {"id": "ghost", "command": str(tmp_path / "no-such-agent")}
    env = {**os.environ, "LMBRIDGE_LOG_LEVEL": "warning"}
    with anyio.fail_after(LIMIT):
        async with Client.spawn([sys.executable, "-m", "lmbridge", "serve", "--record", str(path)], env=env) as client:
            await client.initialize(workspace=[str(tmp_path)], agents=[spec])
            call = await client.chat("ghost", [user("hello?")])
            assert call.error is not None and "failed to start" in call.error.message
    spawns = [e for e in lines(path)[1:] if e.get("event") == "spawn"]
    assert len(spawns) == 1 and "failed to start" in spawns[0]["error"], spawns
    with anyio.fail_after(LIMIT):
        await replay(path)


def test_redactor_placeholders_are_stable_and_cover_options() -> None:
    from lmbridge.rpc.record import Redactor

    r = Redactor()
    assert r.args(["--api-key", "sk-123456789", "-v", "--token=abcdefghijk", "--model", "x"]) == [
        "--api-key", "<redacted:arg:api-key:1>", "-v", "--token=<redacted:arg:token:1>", "--model", "x"]
    assert r.env({"HOME": "/home/someone", "ONE": "1"}) == {"HOME": "<redacted:env:HOME:1>", "ONE": "<redacted:env:ONE:1>"}
    assert r.env({"HOME": "/home/someone"}) == {"HOME": "<redacted:env:HOME:1>"}  # same value, same placeholder
    assert r.env({"HOME": "/home/other"}) == {"HOME": "<redacted:env:HOME:2>"}
    # Long values are replaced inside any string; short ones ("1") only where they are values.
    assert r.scrub({"text": "key sk-123456789 in /home/someone/x, 1 of 1"}) == {
        "text": "key <redacted:arg:api-key:1> in <redacted:env:HOME:1>/x, 1 of 1"}


def test_a_start_notice_in_a_recording_is_not_expected(tmp_path: Path) -> None:
    """"Starting <agent>…" shows when the recorded agent started slowly: a wall-clock
    artefact, dropped when a recording is loaded (replay shows none)."""
    from lmbridge.core.present import is_start_notice, start_notice
    from lmbridge.devtools.replay import load

    assert is_start_notice(start_notice("Claude Code")) and not is_start_notice("_Starting X…_\n\nmore text")
    path = tmp_path / "rec.jsonl"
    part = {"jsonrpc": "2.0", "method": "lm/responsePart", "params": {"requestId": 2, "part": {"type": "text", "value": start_notice("demo")}}}
    other = {"jsonrpc": "2.0", "method": "lm/responsePart", "params": {"requestId": 2, "part": {"type": "text", "value": "Hello"}}}
    header = json.loads(next(iter(SESSIONS.glob("demo-approve.jsonl"))).read_text().splitlines()[0])
    lines = [header, {"t": 0.1, "link": "shim", "dir": "out", "frame": part}, {"t": 0.2, "link": "shim", "dir": "out", "frame": other}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert [e.data["frame"] for e in load(path).entries] == [other]
