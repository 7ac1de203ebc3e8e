"""Agents started through a launcher command (``lmbridge serve --agent-launcher``).

The daemon starts each agent process itself (``connection.AgentConnection.spawn``). With a
launcher, it first asks the launcher how: the launcher is told the agent process the
daemon would start and answers with the process to start in its place, or with the
error the start fails with. ``lmbridge replay`` has the daemon start, so, stand-ins that
play a recorded agent back (docs/replay.md, "How it works"). Nothing else about the
agent changes: the daemon speaks ACP with the process started on its stdio.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from lmbridge.acp.connection import AgentConnection, AgentUnavailable, EventSink
from lmbridge.core.text import clip
from lmbridge.rpc import record

if TYPE_CHECKING:
    from lmbridge.acp.process import Launcher

#: Seconds the launcher may take to answer.
LAUNCH_TIMEOUT = 60.0


def spawn_description(name: str, command: str, args: Sequence[str], env: Mapping[str, str], cwd: str | None, session: str | None) -> dict[str, Any]:
    """The agent process the daemon would start, as a launcher is told it: ``agent`` (its
    id), ``link`` (``agent:<session>``, as a recording names it), ``command`` (the
    executable and its arguments), ``env`` (what the agent's spec adds to the daemon's
    environment), ``cwd`` (None: the daemon's)."""
    return {"agent": name, "link": f"agent:{session or name}", "command": [command, *args], "env": dict(env), "cwd": cwd}


def launch_answer(name: str, stdout: bytes) -> list[str]:
    """What a launcher printed (one JSON object): ``{"command": [executable, arg, ...]}``,
    the process to start in the agent's place; or ``{"error": text}``. Raises
    ``AgentUnavailable`` with that error, or saying the answer is not one of these."""
    try:
        answer = json.loads(stdout)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        raise AgentUnavailable(answer["error"])
    command = answer.get("command") if isinstance(answer, dict) else None
    if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        return command
    raise AgentUnavailable(f"agent {name!r} failed to start: its launcher answered {clip(stdout.decode('utf-8', 'replace'), 200)!r}")


def through(launcher: Sequence[str]) -> Launcher:
    """A ``process.Launcher`` that asks ``launcher`` (a command and its arguments) how to
    start each agent: it is run with one argument more, the agent's ``spawn_description``
    as JSON, and prints its answer (``launch_answer``); the process it names is started
    in the agent's place, in the daemon's environment and working directory. Raises
    ``AgentUnavailable``: the launcher's error, a launcher that fails, answers nothing
    usable or takes over ``LAUNCH_TIMEOUT`` seconds, a process that cannot be started."""
    if not launcher:
        raise ValueError("an agent launcher needs a command")

    async def launch(
        name: str, command: str, args: Sequence[str], env: Mapping[str, str], cwd: str | None, events: EventSink,
        session: str | None = None, recorder: record.Recorder | None = None,
    ) -> AgentConnection:
        described = json.dumps(spawn_description(name, command, args, env, cwd, session), ensure_ascii=False)
        try:
            with anyio.fail_after(LAUNCH_TIMEOUT):
                done = await anyio.run_process([*launcher, described], check=False)
        except (OSError, TimeoutError) as exc:
            raise AgentUnavailable(f"agent {name!r} failed to start: its launcher {launcher[0]}: {getattr(exc, 'strerror', None) or exc!r}") from exc
        if done.returncode != 0:
            why = clip(done.stderr.decode("utf-8", "replace").strip(), 500)
            raise AgentUnavailable(f"agent {name!r} failed to start: its launcher exited with code {done.returncode}: {why}")
        started = launch_answer(name, done.stdout)
        return await AgentConnection.spawn(name, started[0], started[1:], {}, None, events, session, recorder)

    return launch
