"""``terminal/*`` served to agents (``acp/terminals.py``), end to end through ``lmbridge serve``.

A scripted agent (``tests/agents/scripted_agent.py``, its ``client`` steps) runs commands
through the daemon as fast-agent does with a client that offers terminals: it asks first
(``session/request_permission`` showing the command: a card the user approves), then
``terminal/create``, ``terminal/wait_for_exit``, ``terminal/output``, ``terminal/release``.
A command nobody approved never runs (core/permissions.py, tests/test_permissions_grants.py).
The chat shows the output as it comes (one block), a Stop kills the command, and a hostile
agent's terminals (printing without end, never exiting, never released) stay bounded and die
with the session.

Commands wait on gate files the test opens, never on sleeps: the order holds however
slow the machine is (docs/reliability.md, "Tests under load").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from lmbridge.core.live import FENCE, HEAD, TAIL
from lmbridge.devtools.client import approve, assistant, skip, text_of, tool_calls, user

pytestmark = pytest.mark.anyio

LIMIT = 180  # seconds, each test (~2-5 s idle)
PY = sys.executable


def command(script: str) -> dict[str, Any]:
    """``terminal/create`` params running ``script`` with this Python."""
    return {"command": PY, "args": ["-c", script]}


def gated(tmp_path: Path, name: str = "gate") -> tuple[str, Path]:
    """A command printing ``first`` (and its pid into ``pid``), then ``second`` once the gate
    file exists, then exiting 3."""
    gate, pid = tmp_path / name, tmp_path / f"{name}.pid"
    script = (
        "import os, time, pathlib\n"
        f"pathlib.Path({str(pid)!r}).write_text(str(os.getpid()))\n"
        "print('first', flush=True)\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.02)\n"
        "print('second', flush=True)\n"
        "raise SystemExit(3)\n"
    )
    return script, gate


def ask(params: dict[str, Any], handle: str = "p1") -> dict[str, Any]:
    """The agent asks to run ``terminal/create`` ``params`` first, as fast-agent does (its card's
    ``rawInput``: the command, args, cwd, env as it will run them), and waits for the answer."""
    shown = {k: v for k, v in params.items() if k in ("command", "args", "cwd")}
    if "env" in params:
        shown["env"] = {e["name"]: e["value"] for e in params["env"]}
    call = {"toolCallId": f"t-{handle}", "title": "acp_terminal/execute", "kind": "execute", "status": "pending", "rawInput": shown}
    return {"permission": {"toolCall": call}, "id": handle}


async def approved(c: Any, agent_id: str, text: str = "run it") -> list[dict[str, Any]]:
    """The chat's first request ends at the agent's card(s); returns the history that approves
    every one (what VS Code sends when the user presses Allow)."""
    first = await c.chat(agent_id, [user(text)])
    cards = tool_calls(first)
    assert first.result == {"stopReason": "tool_calls"} and cards, (first.error, first.result, text_of(first))
    return [user(text), assistant(first.parts), {"role": "user", "content": [approve(card)["content"][0] for card in cards]}]


def chat_params(agent_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"modelId": agent_id, "messages": messages}


def run_turn(script: str, **create: Any) -> list[dict[str, Any]]:
    params = {**command(script), **create}
    return [
        {"tool_call": {"toolCallId": "t1", "title": "Run the script", "kind": "execute", "status": "in_progress"}},
        ask(params),
        {"await": ["p1"]},
        {"client": {"method": "terminal/create", "params": params}, "id": "c1"},
        {"client_await": "c1"},
        {"client": {"method": "terminal/wait_for_exit", "params": {"terminalId": "$c1.terminalId"}}, "id": "c2"},
        {"client_await": "c2"},
        {"client": {"method": "terminal/output", "params": {"terminalId": "$c1.terminalId"}}, "id": "c3"},
        {"client_await": "c3"},
        {"client": {"method": "terminal/release", "params": {"terminalId": "$c1.terminalId"}}, "id": "c4"},
        {"client_await": "c4"},
        {"tool_call_update": {"toolCallId": "t1", "status": "completed"}},
        {"text": "Ran it."},
    ]


def results(agent: Any) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in agent.events("client_result")}


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone too (reaped by its parent soon).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


async def wait_gone(pid: int) -> None:
    while not gone(pid):
        await anyio.sleep(0.05)


async def test_initialize_offers_terminals_and_terminal_output(scripted: Any, shared: Any) -> None:
    agent = scripted({})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            await c.chat(agent.id, [user("hi")])
    (init,) = agent.frames("initialize")
    caps = init["params"]["clientCapabilities"]
    assert caps["terminal"] is True and caps["_meta"] == {"terminal_output": True}
    assert caps["fs"] == {"readTextFile": True, "writeTextFile": True}  # served too (acp/files.py)


async def test_a_terminal_streams_its_output_live_in_one_block(scripted: Any, shared: Any, tmp_path: Path) -> None:
    script, gate = gated(tmp_path)
    agent = scripted({"turns": [run_turn(script)]})
    seen: list[str] = []

    def on_part(part: dict[str, Any]) -> None:
        if part["type"] == "text":
            seen.append(part["value"])
            if "first" in "".join(seen):
                gate.touch()  # only once the first line is in the chat: it came live

    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, await approved(c, agent.id), on_part=on_part)
    assert call.error is None and call.result == {"stopReason": "end_turn"}
    answer = text_of(call)
    assert answer.count(f"{FENCE}text\n") == 1, answer  # one block, grown, not one per chunk
    assert answer.index("first\n") < answer.index("second\n") < answer.index("exit code 3") < answer.index("Ran it.")
    r = results(agent)
    assert r["c1"]["result"]["terminalId"].startswith("term-")
    assert r["c2"]["result"] == {"exitCode": 3, "signal": None}
    assert r["c3"]["result"] == {"output": "first\nsecond\n", "truncated": False, "exitStatus": {"exitCode": 3, "signal": None}}
    assert r["c4"]["result"] == {}


async def test_stop_kills_the_running_command(scripted: Any, shared: Any, tmp_path: Path) -> None:
    script, _gate = gated(tmp_path)  # the gate is never opened: it would run forever
    agent = scripted({"turns": [run_turn(script)], "on_cancel": "cancelled"})
    first = anyio.Event()

    def on_part(part: dict[str, Any]) -> None:
        if part["type"] == "text" and "first" in part["value"]:
            first.set()

    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.start("lm/provideLanguageModelChatResponse", chat_params(agent.id, await approved(c, agent.id)), on_part)
            await first.wait()
            pid = int((tmp_path / "gate.pid").read_text())
            assert not gone(pid)
            await c.cancel(call)
            await wait_gone(pid)
            while "c2" not in results(agent):
                await anyio.sleep(0.05)
    assert results(agent)["c2"]["result"]["signal"] in ("SIGTERM", "SIGKILL")


async def test_errors_name_what_is_wrong(scripted: Any, shared: Any, tmp_path: Path) -> None:
    missing = {"command": str(tmp_path / "no-such-program")}
    agent = scripted({"turns": [[
        ask(missing),
        {"await": ["p1"]},
        {"client": {"method": "terminal/create", "params": missing}, "id": "missing"},
        {"client": {"method": "terminal/create", "params": {"command": 7}}, "id": "bad"},
        {"client": {"method": "terminal/output", "params": {"terminalId": "term-999"}}, "id": "unknown"},
        {"client_await": ["missing", "bad", "unknown"]},
        {"text": "checked"},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, await approved(c, agent.id, "go"))
    assert "checked" in text_of(call)
    r = results(agent)
    assert r["missing"]["error"]["code"] == -32000 and "no-such-program" in r["missing"]["error"]["message"]
    assert r["bad"]["error"]["code"] == -32602
    assert r["unknown"]["error"]["code"] == -32002


async def test_outside_a_prompt_turn_nothing_runs(scripted: Any, shared: Any, tmp_path: Path) -> None:
    """A command asked for after the agent answered its prompt is refused, approved or not:
    lmbridge runs commands for an open turn only."""
    marker = tmp_path / "ran"
    late = command(f"open({str(marker)!r}, 'w')")
    agent = scripted({"turns": [[
        ask(late),
        {"await": ["p1"]},
        {"answer": "end_turn"},
        {"client": {"method": "terminal/create", "params": late}, "id": "late"},
        {"client_await": "late"},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            await c.chat(agent.id, await approved(c, agent.id, "go"))
            while "late" not in results(agent):
                await anyio.sleep(0.05)
    error = results(agent)["late"]["error"]
    assert error == {"code": -32000, "message": "terminal/create: no prompt turn is open in this session"} and not marker.exists()


async def test_a_command_nobody_approved_never_runs(scripted: Any, shared: Any, tmp_path: Path) -> None:
    """An agent that skips the card (or runs something else than its card showed, a second
    time, or after a Skip) is refused with -32000 saying why, and nothing is started."""
    ran = tmp_path / "ran"
    ran.mkdir()

    def touching(name: str) -> dict[str, Any]:
        return command(f"open({str(ran / name)!r}, 'w')")

    agent = scripted({"turns": [[
        {"client": {"method": "terminal/create", "params": touching("unasked")}, "id": "unasked"},
        {"client_await": "unasked"},
        ask(touching("shown")),
        ask(touching("skipped"), "p2"),
        {"await": ["p1", "p2"]},
        {"client": {"method": "terminal/create", "params": touching("not-shown")}, "id": "other"},
        {"client": {"method": "terminal/create", "params": {**touching("shown"), "cwd": "/"}}, "id": "elsewhere"},
        {"client": {"method": "terminal/create", "params": touching("skipped")}, "id": "skipped"},
        {"client": {"method": "terminal/create", "params": touching("shown")}, "id": "shown"},
        {"client_await": ["other", "elsewhere", "skipped", "shown"]},
        {"client": {"method": "terminal/wait_for_exit", "params": {"terminalId": "$shown.terminalId"}}, "id": "wait"},
        {"client_await": "wait"},
        {"client": {"method": "terminal/create", "params": touching("shown")}, "id": "again"},
        {"client_await": "again"},
        {"text": "tried"},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            first = await c.chat(agent.id, [user("go")])
            cards = tool_calls(first)
            assert len(cards) == 2, text_of(first)
            shown, skipped = sorted(cards, key=lambda card: "skipped" in card["input"]["message"])
            answers = {"role": "user", "content": [approve(shown)["content"][0], skip(skipped)["content"][0]]}
            call = await c.chat(agent.id, [user("go"), assistant(first.parts), answers])
    assert call.error is None and "tried" in text_of(call)
    r = results(agent)
    for refused in ("unasked", "other", "elsewhere", "skipped", "again"):
        assert r[refused]["error"]["code"] == -32000 and "has not approved running" in r[refused]["error"]["message"], (refused, r[refused])
    assert r["shown"]["result"]["terminalId"].startswith("term-") and r["wait"]["result"] == {"exitCode": 0, "signal": None}
    assert sorted(p.name for p in ran.iterdir()) == ["shown"]  # nothing else was ever started


async def test_hostile_terminals_stay_bounded_and_die_with_the_session(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """Three terminals a hostile agent never releases: one printing without end (a MiB a
    moment), one that never exits, one never waited on. The output kept is bounded by
    ``outputByteLimit``, the chat by the live block's bound; at the daemon's end (its
    sessions end) every one is killed."""
    flood = "import sys\nline = 'y' * 1023 + '\\n'\nwhile True: sys.stdout.write(line)\n"
    quiet = "import time\nwhile True: time.sleep(1)\n"
    pids = tmp_path / "pids"
    pids.mkdir()
    record = "import os, pathlib; pathlib.Path({!r}, str(os.getpid())).touch()\n"
    floods, quiets = command(record.format(str(pids)) + flood), command(record.format(str(pids)) + quiet)
    agent = scripted({"turns": [[
        ask(floods, "p1"),
        ask(quiets, "p2"),
        ask(quiets, "p3"),
        {"await": ["p1", "p2", "p3"]},
        {"client": {"method": "terminal/create", "params": {**floods, "outputByteLimit": 4096}}, "id": "flood"},
        {"client": {"method": "terminal/create", "params": quiets}, "id": "quiet"},
        {"client": {"method": "terminal/create", "params": quiets}, "id": "third"},
        {"client_await": ["flood", "quiet", "third"]},
        {"sleep": 1.0},
        {"client": {"method": "terminal/output", "params": {"terminalId": "$flood.terminalId"}}, "id": "out"},
        {"client_await": "out"},
        {"text": "leaving them all running"},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with daemon([agent]) as c:
            call = await c.chat(agent.id, await approved(c, agent.id, "go"))
            assert call.error is None
            answer = text_of(call)
            while len(list(pids.iterdir())) < 3:
                await anyio.sleep(0.05)
            running = [int(p.name) for p in pids.iterdir()]
            assert not any(gone(pid) for pid in running)
        # The daemon has ended (stdin closed): its sessions and every terminal with them.
        for pid in running:
            await wait_gone(pid)
    out = results(agent)["out"]["result"]
    assert len(out["output"].encode()) <= 4096 and out["truncated"] is True and "exitStatus" not in out
    assert len(answer.encode()) < HEAD + TAIL + 4096  # the flood's head only: it never ended in the turn
    assert answer.endswith("leaving them all running") or "leaving them all running" in answer



# ---------------------------------------------------------------- the VS Code mirror


async def test_vs_code_mirrors_the_terminal_and_closing_it_kills_the_command(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    """With a shim that serves ``terminal``: ``client/terminal/open`` (answered), the output
    and the exit as notifications; the user closing that terminal (``$/terminalKilled``)
    kills the command, and the agent sees it end killed."""
    script, _gate = gated(tmp_path)  # never opened: only the close ends it
    agent = scripted({"turns": [run_turn(script)]})
    opened: list[dict[str, Any]] = []

    async def serve(method: str, params: Any) -> Any:
        assert method == "client/terminal/open", method
        opened.append(params)
        return {}

    with anyio.fail_after(LIMIT):
        async with daemon([agent], initialize=False) as c:
            c.on_request = serve
            await c.initialize(workspace=[str(tmp_path)], agents=[agent.spec], capabilities={"terminal": True})
            call = await c.start("lm/provideLanguageModelChatResponse", chat_params(agent.id, await approved(c, agent.id)))

            def mirrored(method: str) -> list[dict[str, Any]]:
                return [n["params"] for n in c.notifications if n.get("method") == method]

            while not any("first" in n["data"] for n in mirrored("client/terminal/output")):
                await anyio.sleep(0.05)
            (open_params,) = opened
            assert open_params["cwd"] == str(tmp_path) and open_params["terminalId"].startswith("term-") and PY in open_params["title"]
            pid = int((tmp_path / "gate.pid").read_text())
            await c.send_frame({"jsonrpc": "2.0", "method": "$/terminalKilled", "params": {"terminalId": open_params["terminalId"]}})
            await wait_gone(pid)
            await call.done.wait()
            (exit_params,) = mirrored("client/terminal/exit")
    assert exit_params["terminalId"] == open_params["terminalId"] and exit_params["signal"] in ("SIGTERM", "SIGKILL")
    assert results(agent)["c2"]["result"]["signal"] in ("SIGTERM", "SIGKILL")
    assert "killed by SIG" in text_of(call)


async def test_without_the_shim_capability_nothing_is_mirrored(scripted: Any, shared: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [run_turn("print('hello')")]})
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            call = await c.chat(agent.id, await approved(c, agent.id))
            assert not [n for n in c.notifications if str(n.get("method")).startswith("client/")]
            assert not [r for r in c.requests if str(r.get("method")).startswith("client/terminal")]
    assert "hello" in text_of(call)


async def test_the_demo_agents_script_asks_then_runs_through_lmbridges_terminal(daemon: Any, tmp_path: Path) -> None:
    """The demo agent's "run the script NAME" row (what the Chat-view test drives in VS Code):
    a card for ``sh NAME`` and nothing run before Allow; allowed, it runs in the workspace
    through ``terminal/create``, its output in the answer as it comes, in one block (the gate
    opens only once the first line is in the chat), then its exit code and the agent's text."""
    work = Path(os.path.realpath(tmp_path)) / "work"
    work.mkdir()
    (work / "tick.sh").write_text('touch ran\necho "line 1"\nwhile [ ! -e go ]; do sleep 0.05; done\necho "line 2"\n')
    seen: list[str] = []

    def on_part(part: dict[str, Any]) -> None:
        if part["type"] == "text":
            seen.append(part["value"])
            if "line 1" in "".join(seen):
                (work / "go").touch()

    with anyio.fail_after(LIMIT):
        async with daemon(workspace=[str(work)]) as c:
            first = await c.chat("demo", [user("run the script tick.sh")])
            [card] = tool_calls(first)
            assert "Run sh tick.sh" in card["input"]["title"]
            assert not (work / "ran").exists()  # nothing before Allow
            second = await c.chat("demo", [user("run the script tick.sh"), assistant(first.parts), approve(card)], on_part=on_part)
    assert second.error is None and second.result == {"stopReason": "end_turn"}, (second.error, second.result)
    assert (work / "ran").exists()
    answer = text_of(second)
    assert answer.count(f"{FENCE}text\n") == 1, answer
    assert answer.index("line 1\n") < answer.index("line 2\n") < answer.index("exit code 0") < answer.index("`sh tick.sh` ended: exit code 0.")


async def test_a_command_the_spawn_cannot_take_gets_an_error_and_the_chat_goes_on(scripted: Any, shared: Any, tmp_path: Path) -> None:
    """Approved commands the operating system cannot start as given (an environment name
    holding '=', a cwd longer than a path may be): each ``terminal/create`` is answered with an
    error naming why, and the chat's session lives on (the next turn is served)."""
    bad_env = {**command("pass"), "env": [{"name": "A=B", "value": "1"}]}
    long_cwd = {**command("pass"), "cwd": str(tmp_path / ("x" * 5000))}
    agent = scripted({"turns": [[
        ask(bad_env),
        ask(long_cwd, "p2"),
        {"await": ["p1", "p2"]},
        {"client": {"method": "terminal/create", "params": bad_env}, "id": "env"},
        {"client": {"method": "terminal/create", "params": long_cwd}, "id": "cwd"},
        {"client": {"method": "terminal/create", "params": {"command": "ls", "args": ["a\x00b"]}}, "id": "nul"},
        {"client_await": ["env", "cwd", "nul"]},
        {"text": "still here"},
    ], [
        {"text": "and on"},
    ]]})  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with shared([agent]) as c:
            history = await approved(c, agent.id, "go")
            call = await c.chat(agent.id, history)
            assert call.error is None and "still here" in text_of(call)
            more = await c.chat(agent.id, [*history, assistant(call.parts), user("more")])
            assert more.error is None and "and on" in text_of(more)
    r = results(agent)
    assert r["env"]["error"]["code"] == -32602 and "'='" in r["env"]["error"]["message"]
    assert r["cwd"]["error"]["code"] == -32000 and "cannot be used" in r["cwd"]["error"]["message"]
    assert r["nul"]["error"]["code"] in (-32000, -32602)  # never approved: refused before any spawn
