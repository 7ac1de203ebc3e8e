"""``lmbridge serve --agent-launcher`` (``acp.launcher``): the launcher is told the agent
process the daemon would start and answers what to start in its place, or the error the
start fails with; anything else fails the start with a message that says so. The path
where a stand-in is started is run by every replay (tests/test_replay.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import anyio
import pytest

from lmbridge.acp.connection import AgentUnavailable
from lmbridge.acp.launcher import launch_answer, spawn_description, through

pytestmark = pytest.mark.anyio

LIMIT = 60  # seconds: one Python process start (~50 ms idle)


def test_the_launcher_is_told_the_process_the_daemon_would_start() -> None:
    assert spawn_description("demo", "lmbridge", ["demo-agent"], {"K": "v"}, "/w", "p2") == {
        "agent": "demo", "link": "agent:p2", "command": ["lmbridge", "demo-agent"], "env": {"K": "v"}, "cwd": "/w"}  # fmt: skip
    assert spawn_description("demo", "x", [], {}, None, None)["link"] == "agent:demo"


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        (b'{"command": ["/usr/bin/python3", "standin.py", "/s", "agent:p1"]}', ["/usr/bin/python3", "standin.py", "/s", "agent:p1"]),
        (b'{"error": "agent \'ghost\' failed to start: /x: No such file or directory"}', "agent 'ghost' failed to start: /x: No such file or directory"),
        (b'{"command": []}', "its launcher answered"),
        (b'{"command": ["a", 1]}', "its launcher answered"),
        (b'{"error": 5}', "its launcher answered"),
        (b"[1]", "its launcher answered"),
        (b"not json", "its launcher answered 'not json'"),
        (b"", "its launcher answered ''"),
    ],
)
def test_what_a_launcher_prints_is_a_command_or_the_error(printed: bytes, expected: Any) -> None:
    if isinstance(expected, list):
        assert launch_answer("demo", printed) == expected
        return
    with pytest.raises(AgentUnavailable) as caught:
        launch_answer("demo", printed)
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ('print(json.dumps({"error": "agent ghost: refused"}))', "agent ghost: refused"),
        ('sys.stderr.write("boom"); sys.exit(3)', "its launcher exited with code 3: boom"),
        ('print("hello")', "its launcher answered 'hello"),
    ],
)
async def test_a_launch_that_fails_fails_the_agents_start(script: str, expected: str) -> None:
    code = f"import json, sys\nspawn = json.loads(sys.argv[-1])\nassert spawn['agent'] == 'demo' and spawn['command'] == ['demo-cmd', '--x']\n{script}\n"
    launch = through([sys.executable, "-c", code])
    with anyio.fail_after(LIMIT), pytest.raises(AgentUnavailable) as caught:
        await launch("demo", "demo-cmd", ["--x"], {}, None, None, session="p1")  # type: ignore[arg-type]
    assert expected in str(caught.value)


async def test_a_launcher_that_cannot_start_fails_the_agents_start() -> None:
    launch = through(["/nonexistent/launcher"])
    with anyio.fail_after(LIMIT), pytest.raises(AgentUnavailable) as caught:
        await launch("demo", "demo-cmd", [], {}, None, None)  # type: ignore[arg-type]
    assert "its launcher /nonexistent/launcher" in str(caught.value)


def test_a_launcher_needs_a_command() -> None:
    with pytest.raises(ValueError):
        through([])
    done = subprocess.run([sys.executable, "-m", "lmbridge", "serve", "--no-state", "--agent-launcher", "  "], capture_output=True, text=True, timeout=LIMIT)
    assert done.returncode == 2 and "--agent-launcher: an agent launcher needs a command" in done.stderr, done.stderr
