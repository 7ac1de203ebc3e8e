"""``lmbridge console``: script mode and the interactive console under a pseudo-terminal,
end to end against the real daemon and the built-in demo agent.

The demo agent asks permission to write ``notes.txt`` into ``$LMBRIDGE_DEMO_SCRATCH``
for prompts containing "write", streams 40 chunks 50 ms apart for "slow", and asks two
permissions at once for "two files".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lmbridge.core.messages import VSCODE_SKIP_TEXT
from lmbridge.devtools.client import without_last_round
from lmbridge.devtools.console import ConsoleError, daemon_command, parse_script

ROOT = Path(__file__).resolve().parent.parent
NOTES_HEADER = "Notes from the lmbridge demo agent.\n"


def _env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LMBRIDGE_")}
    env.update(LMBRIDGE_DEMO_SCRATCH=str(scratch), NO_COLOR="1", PYTHONUNBUFFERED="1")
    return env


def run_script(tmp_path: Path, script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``lmbridge console --script`` in ``tmp_path`` (the workspace); scratch is tmp_path/scratch.
    The bound: a script takes ~4 s idle (a console, a daemon and the demo agent start)."""
    path = tmp_path / "session.console"
    path.write_text(script, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "lmbridge", "console", "--script", str(path), *args],
        cwd=tmp_path,
        env=_env(tmp_path / "scratch"),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def daemon_pid(transcript: str) -> int:
    match = re.search(r"\(pid (\d+)\)", transcript)
    assert match, transcript
    return int(match.group(1))


def gone(pid: int, within: float = 30.0) -> bool:
    """Whether a process has exited (or is an unreaped zombie) within ``within`` seconds
    (the daemon after its console quits: well under 1 s idle)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def frames(transcript: str, arrow: str) -> list[dict]:
    """The frames shown by ``/raw on`` (``→ {frame}`` sent, ``← {frame}`` received)."""
    return [json.loads(line[2:]) for line in transcript.splitlines() if line.startswith(arrow + " {")]


def sent_chat_requests(transcript: str) -> list[dict]:
    """The chat requests the console sent."""
    return [f for f in frames(transcript, "→") if f.get("method") == "lm/provideLanguageModelChatResponse"]


def streamed_text(transcript: str) -> str:
    """The text parts the daemon streamed (with ``/raw on`` the rendered text is cut by frame lines)."""
    parts = [f["params"]["part"] for f in frames(transcript, "←") if f.get("method") == "lm/responsePart"]
    return "".join(p["value"] for p in parts if p["type"] == "text")


# --------------------------------------------------------------------- pure parts


def test_parse_script_format() -> None:
    steps = parse_script(
        ["# comment\n", "\n", "> hello there\n", "allow\n", "s\n", "T\n", "/model demo\n", "/new\n", ">no space\n"]
    )
    assert [(s.lineno, s.kind, s.text) for s in steps] == [
        (3, "message", "hello there"),
        (4, "answer", "allow"),
        (5, "answer", "skip"),
        (6, "answer", "stop"),
        (7, "command", "/model demo"),
        (8, "command", "/new"),
        (9, "message", "no space"),
    ]
    with pytest.raises(ConsoleError, match="script:2: expected"):
        parse_script(["> hi\n", "hello without a prompt marker\n"])
    with pytest.raises(ConsoleError, match="unknown command /frobnicate"):
        parse_script(["/frobnicate\n"])


def test_daemon_command_is_assembled_in_one_place() -> None:
    assert daemon_command() == [sys.executable, "-E", "-P", "-m", "lmbridge", "serve"]  # -P: the working folder is not on its sys.path; -E: no PYTHON* variable
    assert daemon_command("lmbridge serve --agent 'x=my agent --flag'") == ["lmbridge", "serve", "--agent", "x=my agent --flag"]
    assert daemon_command(None, ["--record", "f.jsonl"])[-2:] == ["--record", "f.jsonl"]
    with pytest.raises(ConsoleError):
        daemon_command("  ")


def test_without_last_round_drops_the_stopped_round_and_its_results() -> None:
    u1 = {"role": "user", "content": [{"type": "text", "value": "write"}]}
    a1 = {"role": "assistant", "content": [{"type": "tool_call", "callId": "c1", "name": "symposium-agent-action", "input": {}}]}
    r1 = {"role": "user", "content": [{"type": "tool_result", "callId": "c1", "content": [{"type": "text", "value": "tok"}]}]}
    a2 = {"role": "assistant", "content": [{"type": "tool_call", "callId": "c2", "name": "symposium-agent-action", "input": {}}]}
    assert without_last_round([u1, a1, r1, a2]) == [u1, a1, r1]
    assert without_last_round([u1, a1, r1]) == [u1]
    assert without_last_round([u1]) == [u1]


# --------------------------------------------------------------------- script mode


def test_script_allow_writes_the_file(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "> Hello!\n> Please write a file with my notes.\nallow\n")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "You said: Hello!" in out
    assert "💭 Thinking about: Hello!" in out
    assert "⚙ permission requested: Write notes.txt  [symposium-agent-action-edit " in out
    assert "    The agent asks to **edit files** (kind: `edit`)." in out
    assert "[a]llow / [s]kip / s[t]op? allow" in out
    notes = tmp_path / "scratch" / "notes.txt"
    assert notes.read_text() == NOTES_HEADER + "Please write a file with my notes."
    assert f"I wrote `{notes}`" in out
    assert out.count("[end_turn]") == 2
    assert gone(daemon_pid(out))
    assert "daemon exited (code 0)" in out


def test_script_skip_answers_with_vscode_skip_text(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "/raw on\n> Please write a file.\nskip\n")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert not (tmp_path / "scratch" / "notes.txt").exists()
    assert "I did not write the file: permission was declined." in streamed_text(out)
    first, second = sent_chat_requests(out)
    assert [m["role"] for m in second["params"]["messages"]] == ["user", "assistant", "user"]
    call = next(p for p in second["params"]["messages"][1]["content"] if p["type"] == "tool_call")
    assert second["params"]["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "callId": call["callId"], "content": [{"type": "text", "value": VSCODE_SKIP_TEXT}]}],
    }


def test_script_stop_drops_the_round_and_the_next_message_works(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "/raw on\n> Please write a file.\nstop\n> Just say hi.\n")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert not (tmp_path / "scratch" / "notes.txt").exists()
    assert "You said: Just say hi." in streamed_text(out)
    first, second = sent_chat_requests(out)
    # The next request holds both user messages and neither the stopped round nor a result.
    assert [m["role"] for m in second["params"]["messages"]] == ["user", "user"]
    assert "tool_call" not in json.dumps(second["params"]["messages"])
    # Nothing went to the daemon between the stop and the next message.
    lines = out.splitlines()
    stop_at = next(i for i, line in enumerate(lines) if line.endswith("s[t]op? stop"))
    next_at = next(i for i, line in enumerate(lines) if line == "you> Just say hi.")
    assert not any(line.startswith("→ ") for line in lines[stop_at:next_at])
    time.sleep(0.5)  # a late write of the cancelled turn would land now
    assert not (tmp_path / "scratch" / "notes.txt").exists()


def test_script_two_permissions_asked_one_by_one_answered_together(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "/raw on\n> Please write two files.\nallow\nskip\n/history\n")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "permission 1/2 'Write " in out and "permission 2/2 'Write " in out
    first, second = sent_chat_requests(out)
    results = [m["content"][0] for m in second["params"]["messages"][2:]]
    assert [r["type"] for r in results] == ["tool_result", "tool_result"]
    assert results[1]["content"][0]["value"] == VSCODE_SKIP_TEXT
    written = sorted(p.name for p in (tmp_path / "scratch").glob("*.txt"))
    assert len(written) == 1  # the allowed one
    # Both answers stream into one response; the two tool calls' words may interleave.
    assert "permission was declined." in streamed_text(out)


def test_script_send_raw_frame_and_history(tmp_path: Path) -> None:
    script = (
        '/send {"jsonrpc":"2.0","id":100,"method":"lm/provideTokenCount","params":{"modelId":"demo","text":"abcdefgh"}}\n'
        "> Hi.\n"
        "/history\n"
        "/new\n"
        "/history\n"
    )
    proc = run_script(tmp_path, script)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert '← result {"count": 2}' in out
    assert "history: 2 message(s), model demo" in out
    assert "history: 0 message(s), model demo" in out


def test_script_exits_nonzero_on_an_error_response(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "/model nope\n> Hi.\n> Never sent.\n")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "error: unknown model 'nope'" in out
    assert "Never sent" not in out
    assert gone(daemon_pid(out))

    proc = run_script(tmp_path, '/send {"jsonrpc":"2.0","id":7,"method":"no/such/method"}\n')
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "(code -32601)" in proc.stdout


def test_script_needs_an_answer_at_each_permission_prompt(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "> Please write a file.\n> Not an answer.\n")
    assert proc.returncode == 1
    assert "a permission prompt needs an answer" in proc.stdout
    assert not (tmp_path / "scratch" / "notes.txt").exists()


def test_script_syntax_error_exits_2_before_starting(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "> Hi.\nwhat is this\n")
    assert proc.returncode == 2
    assert "session.console:2: expected" in proc.stderr
    assert proc.stdout == ""


def test_example_script_runs(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lmbridge", "console", "--script", str(ROOT / "examples" / "demo.console")],
        cwd=tmp_path,
        env=_env(tmp_path / "scratch"),
        capture_output=True,
        text=True,
        timeout=300,  # ~4 s idle
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name for p in (tmp_path / "scratch").iterdir()] == ["notes.txt"]


# --------------------------------------------------------------------- under a pseudo-terminal

PROMPT = "you>"
QUESTION = r"s\[t\]op\?"


def spawn_console(tmp_path: Path) -> Any:
    """``lmbridge console`` in a pseudo-terminal (pexpect), in tmp_path."""
    pexpect = pytest.importorskip("pexpect")
    env = _env(tmp_path / "scratch")
    env.update(TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "lmbridge", "console"],
        cwd=str(tmp_path),
        env=env,
        encoding="utf-8",
        timeout=60,  # seconds per expect: the first waits on the daemon starting, ~2 s idle
        dimensions=(50, 250),
    )
    child.logfile_read = open(tmp_path / "console.log", "w", encoding="utf-8")  # noqa: SIM115
    return child


def finish(child: Any) -> None:
    import pexpect

    child.expect(pexpect.EOF)
    child.close()
    child.logfile_read.close()


def test_pty_allow_skip_stop(tmp_path: Path) -> None:
    child = spawn_console(tmp_path)
    try:
        child.expect(r"\(pid (\d+)\)")
        pid = int(child.match.group(1))
        notes = tmp_path / "scratch" / "notes.txt"

        child.expect(PROMPT)
        child.sendline("Please write a file")
        child.expect(QUESTION)
        child.sendline("a")
        child.expect("I wrote")
        child.expect(PROMPT)
        assert notes.read_text() == NOTES_HEADER + "Please write a file"

        child.sendline("Write it again")
        child.expect(QUESTION)
        child.sendline("s")
        child.expect("permission was declined")
        child.expect(PROMPT)
        assert notes.read_text() == NOTES_HEADER + "Please write a file"

        child.sendline("Write it a third time")
        child.expect(QUESTION)
        child.sendline("t")
        child.expect("stopped")
        child.expect(PROMPT)
        child.sendline("hello after the stop")
        child.expect("You said: hello after the stop")
        child.expect(PROMPT)
        assert notes.read_text() == NOTES_HEADER + "Please write a file"

        child.sendline("/quit")
        finish(child)
        assert child.exitstatus == 0
        assert gone(pid)
    finally:
        child.terminate(force=True)


def test_pty_ctrl_c_cancels_then_quits(tmp_path: Path) -> None:
    child = spawn_console(tmp_path)
    try:
        child.expect(r"\(pid (\d+)\)")
        pid = int(child.match.group(1))
        child.expect(PROMPT)
        # Each expect(PROMPT) follows an output of the line just entered: the line's own
        # echo ("you> /raw on") must not be taken for the next prompt.
        child.sendline("/raw on")
        child.expect("raw frames on")
        child.expect(PROMPT)
        child.sendline("something slow")
        child.expect("chunk 3 ")
        child.sendintr()
        child.expect(r'→ \{"jsonrpc": "2.0", "method": "\$/cancelRequest", "params": \{"id": \d+\}\}')
        child.expect(r'"result": \{"stopReason": "cancelled"\}')
        child.expect(r"\[cancelled\]")
        child.expect(PROMPT)
        assert "chunk 40 " not in child.before

        child.sendline("/raw off")
        child.expect("raw frames off")
        child.expect(PROMPT)
        # Ctrl-C at a prompt holding text clears the line; it does not quit.
        child.send("garbage")
        time.sleep(0.3)
        child.sendintr()
        time.sleep(0.3)
        child.sendline("hello after the cancel")
        child.expect("You said: hello after the cancel")
        child.expect(PROMPT)

        # The history holds the cancelled user message without an answer.
        child.sendline("/history")
        child.expect(r"history: 3 message\(s\)")
        child.expect(PROMPT)

        child.sendline("slow again")
        child.expect("chunk 2 ")
        child.sendintr()
        time.sleep(0.05)
        child.sendintr()
        finish(child)
        assert child.exitstatus == 0
        assert gone(pid)
    finally:
        child.terminate(force=True)
