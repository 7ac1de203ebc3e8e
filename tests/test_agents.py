"""The two test agents, driven as real subprocesses by a tiny hand-written ACP client.

* ``lmbridge.devtools.demo_agent`` (ships with the product, built on the ACP SDK);
* ``tests/agents/scripted_agent.py`` (raw JSON-RPC, scriptable, can misbehave).

The client here is deliberately dumb: it records every frame and leaves all decisions
(answering permissions, cancelling) to the test, so the tests see exactly what went
over the wire.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
SCRIPTED_AGENT = ROOT / "tests" / "agents" / "scripted_agent.py"
TIMEOUT = 120  # seconds per test body: ~1 s idle (an agent starts, a turn or two); docs/reliability.md


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Peer:
    """The client side of an ACP connection to an agent subprocess."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.frames: list[dict[str, Any]] = []  # every JSON frame received
        self.raw_lines: list[str] = []  # stdout lines that were not JSON
        self.requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()  # agent -> client requests
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_id = 0
        self._reader = asyncio.create_task(self._read_loop())

    @classmethod
    async def start(cls, argv: list[str], *, stderr: Path, env: dict[str, str] | None = None) -> Peer:
        with stderr.open("ab") as err:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=env,
                limit=64 * 1024 * 1024,
            )
        return cls(proc)

    async def _read_loop(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            text = line.decode().strip()
            try:
                frame = json.loads(text)
            except ValueError:
                self.raw_lines.append(text)
                continue
            self.frames.append(frame)
            if "method" in frame and "id" in frame:
                self.requests.put_nowait(frame)
            elif "method" not in frame and frame.get("id") in self._pending:
                self._pending.pop(frame["id"]).set_result(frame)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(EOFError("agent closed stdout"))

    async def _write(self, frame: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(frame) + "\n").encode())
        await self.proc.stdin.drain()

    async def send(self, method: str, params: Any) -> asyncio.Future[dict[str, Any]]:
        """Send a request; return a future for its response frame (result or error)."""
        rid = self._next_id
        self._next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        await self._write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return future

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        return await (await self.send(method, params))

    async def notify(self, method: str, params: Any) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def respond(self, rid: Any, result: Any) -> None:
        await self._write({"jsonrpc": "2.0", "id": rid, "result": result})

    async def setup(self) -> tuple[dict[str, Any], str]:
        """initialize + session/new; returns the initialize result and the session id."""
        init = await self.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        new = await self.call("session/new", {"cwd": str(ROOT), "mcpServers": []})
        return init["result"], new["result"]["sessionId"]

    def updates(self, kind: str | None = None) -> list[dict[str, Any]]:
        found = [f["params"]["update"] for f in self.frames if f.get("method") == "session/update"]
        return [u for u in found if kind is None or u.get("sessionUpdate") == kind]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u["content"]["text"] for u in self.updates(kind))

    async def wait_until(self, predicate: Callable[[], Any]) -> None:
        while not predicate():
            await asyncio.sleep(0.01)

    async def close(self) -> int:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            with anyio.fail_after(30):  # ~0.1 s idle
                code = await self.proc.wait()
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            self._reader.cancel()
        return code


def choose(request: dict[str, Any], kind: str) -> dict[str, Any]:
    """A permission answer selecting the option of this kind (never chosen by id)."""
    option = next(o for o in request["params"]["options"] if o["kind"] == kind)
    return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}


CANCELLED = {"outcome": {"outcome": "cancelled"}}


# -- the demo agent ---------------------------------------------------------------


async def start_demo(tmp_path: Path) -> tuple[Peer, Path]:
    scratch = tmp_path / "scratch"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    env["LMBRIDGE_DEMO_SCRATCH"] = str(scratch)
    argv = [sys.executable, "-c", "from lmbridge.devtools.demo_agent import main; raise SystemExit(main())"]
    return await Peer.start(argv, stderr=tmp_path / "demo.stderr", env=env), scratch


def prompt(session_id: str, text: str, *extra: dict[str, Any]) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}, *extra]}


@pytest.mark.anyio
async def test_demo_plain_reply_streams_thought_plan_and_text(tmp_path: Path) -> None:
    peer, scratch = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        init, sid = await peer.setup()
        assert init["protocolVersion"] == 1
        assert init["agentInfo"]["name"] == "lmbridge-demo"
        caps = init["agentCapabilities"]
        assert caps["promptCapabilities"]["image"] is True and caps["loadSession"] is False

        response = await peer.call("session/prompt", prompt(sid, "hello there, demo"))
        assert response["result"] == {"stopReason": "end_turn"}

        assert len(peer.updates("agent_thought_chunk")) >= 2
        assert peer.text("agent_thought_chunk").startswith("Thinking about: hello there, demo")
        assert len(peer.updates("agent_message_chunk")) >= 2
        assert peer.text() == "Hello from the demo agent. You said: hello there, demo"
        plans = peer.updates("plan")
        assert len(plans) == 2
        assert {e["status"] for e in plans[0]["entries"]} == {"completed", "in_progress"}
        assert {e["status"] for e in plans[-1]["entries"]} == {"completed"}
        # Thought first, final plan last.
        kinds = [u["sessionUpdate"] for u in peer.updates()]
        assert kinds[0] == "agent_thought_chunk" and kinds[-1] == "plan"

        # An image is accepted and described; session/load is not offered.
        peer.frames.clear()
        image = {"type": "image", "mimeType": "image/png", "data": base64.b64encode(b"\x89PNG" + bytes(96)).decode()}
        response = await peer.call("session/prompt", prompt(sid, "look", image))
        assert response["result"]["stopReason"] == "end_turn"
        assert "I received an image of 100 bytes." in peer.text()
        load = await peer.call("session/load", {"sessionId": sid, "cwd": str(ROOT), "mcpServers": []})
        assert load["error"]["code"] == -32601
    assert await peer.close() == 0
    assert not peer.raw_lines, "the demo agent must keep stdout for the protocol"
    assert "session/new" in (tmp_path / "demo.stderr").read_text()
    assert not scratch.exists()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["allow_once", "allow_always"])
async def test_demo_write_allowed(tmp_path: Path, kind: str) -> None:
    peer, scratch = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()
        pending = await peer.send("session/prompt", prompt(sid, "Please write a file"))
        request = await peer.requests.get()
        assert request["method"] == "session/request_permission"
        params = request["params"]
        notes = scratch / "notes.txt"
        assert params["toolCall"]["locations"] == [{"path": str(notes)}]
        assert {o["kind"]: o["optionId"] for o in params["options"]} == {
            "allow_once": "allow",
            "allow_always": "allow-always",
            "reject_once": "reject",
            "reject_always": "reject-always",
        }
        # The tool call was announced before the question.
        (start,) = peer.updates("tool_call")
        call_id = start["toolCallId"]
        assert params["toolCall"]["toolCallId"] == call_id
        assert start["kind"] == "edit" and start["status"] == "pending" and start["title"] == "Write notes.txt"
        assert start["rawInput"]["path"] == str(notes)
        assert not notes.exists()

        await peer.respond(request["id"], choose(request, kind))
        response = await pending
        assert response["result"] == {"stopReason": "end_turn"}

    assert notes.read_text() == "Notes from the lmbridge demo agent.\nPlease write a file"
    statuses = [u.get("status") for u in peer.updates("tool_call_update") if u["toolCallId"] == call_id]
    assert statuses == ["in_progress", "completed"]
    completed = peer.updates("tool_call_update")[-1]
    (diff,) = completed["content"]
    assert diff["type"] == "diff" and diff["path"] == str(notes)
    assert diff["newText"] == notes.read_text() and diff.get("oldText") is None
    assert f"I wrote `{notes}`." in peer.text()
    assert {e["status"] for e in peer.updates("plan")[-1]["entries"]} == {"completed"}
    await peer.close()


@pytest.mark.anyio
async def test_demo_write_rejected(tmp_path: Path) -> None:
    peer, scratch = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()
        pending = await peer.send("session/prompt", prompt(sid, "save this to a FILE"))
        request = await peer.requests.get()
        await peer.respond(request["id"], choose(request, "reject_once"))
        assert (await pending)["result"] == {"stopReason": "end_turn"}
    assert not (scratch / "notes.txt").exists()
    assert [u.get("status") for u in peer.updates("tool_call_update")] == ["failed"]
    assert "I did not write the file: permission was declined." in peer.text()
    await peer.close()


@pytest.mark.anyio
async def test_demo_cancel_while_permission_pending(tmp_path: Path) -> None:
    peer, scratch = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()
        pending = await peer.send("session/prompt", prompt(sid, "write notes"))
        request = await peer.requests.get()
        await peer.notify("session/cancel", {"sessionId": sid})
        assert (await pending)["result"] == {"stopReason": "cancelled"}
        # What the spec requires of the client after a cancel: answer pending
        # permissions "cancelled". Even a late "allow" must not write anything.
        await peer.respond(request["id"], choose(request, "allow_once"))
        await anyio.sleep(0.2)
    assert not (scratch / "notes.txt").exists()
    assert not peer.updates("tool_call_update")
    assert {e["status"] for e in peer.updates("plan")[-1]["entries"]} != {"completed"}

    # The session still works afterwards; a "cancelled" answer ends that turn as cancelled.
    with anyio.fail_after(TIMEOUT):
        pending = await peer.send("session/prompt", prompt(sid, "write it now"))
        request = await peer.requests.get()
        await peer.respond(request["id"], CANCELLED)
        assert (await pending)["result"] == {"stopReason": "cancelled"}
    assert not (scratch / "notes.txt").exists()
    await peer.close()


@pytest.mark.anyio
async def test_demo_two_files_ask_concurrently(tmp_path: Path) -> None:
    peer, scratch = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()
        pending = await peer.send("session/prompt", prompt(sid, "write two files please"))
        first = await peer.requests.get()
        second = await peer.requests.get()  # both outstanding before we answer either
        paths = {r["params"]["toolCall"]["locations"][0]["path"]: r for r in (first, second)}
        assert set(paths) == {str(scratch / "notes.txt"), str(scratch / "notes2.txt")}
        await peer.respond(second["id"], choose(second, "reject_always"))
        await peer.respond(first["id"], choose(first, "allow_once"))
        assert (await pending)["result"] == {"stopReason": "end_turn"}
    written = {p.name for p in scratch.iterdir()}
    assert written == {Path(first["params"]["toolCall"]["locations"][0]["path"]).name}
    assert "I wrote" in peer.text() and "permission was declined" in peer.text()
    await peer.close()


# The two rows whose permissions VS Code asks through other tools than the edit one:
# leaving plan mode (kind switch_mode, as Claude Code's ExitPlanMode) and a command.
ASKS = [
    ("please leave plan mode", "Leave plan mode", "switch_mode", {"plan": "1. Read the request.\n2. Answer it."},
     "Plan mode left.", "I stayed in plan mode: permission was declined."),
    ("now run the command", "Run date", "execute", {"command": "date", "description": "Print the date"},
     "I ran `date`.", "I did not run it: permission was declined."),
]  # fmt: skip


@pytest.mark.anyio
@pytest.mark.parametrize(("text", "title", "kind", "raw_input", "allowed", "declined"), ASKS)
@pytest.mark.parametrize("answer", ["allow_once", "reject_once", "cancelled"])
async def test_demo_plan_mode_and_command(
    tmp_path: Path, text: str, title: str, kind: str, raw_input: dict[str, Any], allowed: str, declined: str, answer: str
) -> None:
    peer, scratch = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()
        pending = await peer.send("session/prompt", prompt(sid, text))
        request = await peer.requests.get()
        assert request["method"] == "session/request_permission"
        tool_call = request["params"]["toolCall"]
        assert (tool_call["title"], tool_call["kind"], tool_call["rawInput"]) == (title, kind, raw_input)
        assert {o["kind"] for o in request["params"]["options"]} == {"allow_once", "allow_always", "reject_once", "reject_always"}
        (start,) = peer.updates("tool_call")  # announced before the question, with the same id
        assert (start["toolCallId"], start["kind"], start["status"]) == (tool_call["toolCallId"], kind, "pending")
        await peer.respond(request["id"], CANCELLED if answer == "cancelled" else choose(request, answer))
        response = await pending
    statuses = [u.get("status") for u in peer.updates("tool_call_update")]
    if answer == "allow_once":
        assert response["result"] == {"stopReason": "end_turn"}
        assert statuses == ["completed"] and allowed in peer.text() and declined not in peer.text()
    elif answer == "reject_once":
        assert response["result"] == {"stopReason": "end_turn"}
        assert statuses == ["failed"] and declined in peer.text() and allowed not in peer.text()
    else:
        assert response["result"] == {"stopReason": "cancelled"}
        assert statuses == [] and peer.text() == ""
    assert not scratch.exists(), "nothing written, nothing run"
    await peer.close()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write a file in plan mode", "Write notes.txt"),  # the first matching row wins
        ("run the command to write a file", "Write notes.txt"),
        ("run the command in plan mode", "Leave plan mode"),
    ],
)
async def test_demo_rows_in_table_order(tmp_path: Path, text: str, expected: str) -> None:
    peer, _ = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()
        pending = await peer.send("session/prompt", prompt(sid, text))
        request = await peer.requests.get()
        assert request["params"]["toolCall"]["title"] == expected
        await peer.respond(request["id"], CANCELLED)
        assert (await pending)["result"] == {"stopReason": "cancelled"}
    await peer.close()


@pytest.mark.anyio
async def test_demo_slow_stream_stops_at_cancel(tmp_path: Path) -> None:
    peer, _ = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()
        pending = await peer.send("session/prompt", prompt(sid, "be slow"))
        await peer.wait_until(lambda: "chunk 3 " in peer.text())
        await peer.notify("session/cancel", {"sessionId": sid})
        with anyio.fail_after(30):  # the next chunk, 50 ms; that it stopped: no chunk 40
            assert (await pending)["result"] == {"stopReason": "cancelled"}
    assert "chunk 40" not in peer.text()
    await peer.close()


@pytest.mark.anyio
@pytest.mark.parametrize(("answer", "exit_status"), [("allow_once", {"exitCode": 0, "signal": None}), ("allow_once", {"exitCode": None, "signal": "SIGTERM"}), ("reject_once", None)])
async def test_demo_runs_a_script_through_the_clients_terminal(tmp_path: Path, answer: str, exit_status: dict[str, Any] | None) -> None:
    """"run the script NAME" (what the Chat-view test drives): a card for ``sh NAME`` first;
    allowed, ``terminal/create`` of ``sh`` ``[NAME]`` (no cwd: the session's), the call in
    progress with the terminal as its content, ``wait_for_exit``, ``release``, and how it
    ended; declined, no terminal at all."""
    peer, scratch = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        await peer.call("initialize", {"protocolVersion": 1, "clientCapabilities": {"terminal": True}})
        sid = (await peer.call("session/new", {"cwd": str(ROOT), "mcpServers": []}))["result"]["sessionId"]
        pending = await peer.send("session/prompt", prompt(sid, "please run the script tick.sh"))
        request = await peer.requests.get()
        assert request["method"] == "session/request_permission"
        tool_call = request["params"]["toolCall"]
        assert (tool_call["title"], tool_call["kind"], tool_call["rawInput"]) == ("Run sh tick.sh", "execute", {"command": "sh tick.sh"})
        await peer.respond(request["id"], choose(request, answer))
        asked = []
        if exit_status is not None:
            create = await peer.requests.get()
            assert create["method"] == "terminal/create"
            assert create["params"] == {"sessionId": sid, "command": "sh", "args": ["tick.sh"], "outputByteLimit": 65536}
            await peer.respond(create["id"], {"terminalId": "term-1"})
            for _ in range(2):
                asked.append(await peer.requests.get())
                await peer.respond(asked[-1]["id"], exit_status if asked[-1]["method"] == "terminal/wait_for_exit" else {})
        response = await pending
    assert response["result"] == {"stopReason": "end_turn"}
    assert [(r["method"], r["params"]) for r in asked] == [(m, {"sessionId": sid, "terminalId": "term-1"}) for m in ("terminal/wait_for_exit", "terminal/release")][: len(asked)]
    updates = peer.updates("tool_call_update")
    if exit_status is None:
        assert [u["status"] for u in updates] == ["failed"] and "permission was declined" in peer.text()
    elif exit_status["signal"] is None:
        assert [u["status"] for u in updates] == ["in_progress", "completed"]
        assert updates[0]["content"] == [{"type": "terminal", "terminalId": "term-1"}]
        assert "`sh tick.sh` ended: exit code 0." in peer.text()
    else:
        assert [u["status"] for u in updates] == ["in_progress", "failed"] and "`sh tick.sh` ended: killed by SIGTERM." in peer.text()
    assert not scratch.exists()
    await peer.close()


@pytest.mark.anyio
async def test_demo_asks_to_run_no_script_of_a_client_without_terminals(tmp_path: Path) -> None:
    peer, _ = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()  # clientCapabilities: {} (no terminal)
        response = await peer.call("session/prompt", prompt(sid, "run the script tick.sh"))
    assert response["result"] == {"stopReason": "end_turn"}
    assert peer.requests.empty(), "nothing asked, nothing run"
    assert [u["status"] for u in peer.updates("tool_call_update")] == ["failed"]
    assert "I cannot run `sh tick.sh`: the client offers no terminals." in peer.text()
    await peer.close()


# -- the scripted agent -----------------------------------------------------------


async def start_scripted(tmp_path: Path, scenario: dict[str, Any]) -> tuple[Peer, Path]:
    scenario_path = tmp_path / "scenario.json"
    scenario_path.write_text(json.dumps(scenario))
    log = tmp_path / "agent.jsonl"
    argv = [sys.executable, str(SCRIPTED_AGENT), str(scenario_path), "--log", str(log)]
    return await Peer.start(argv, stderr=tmp_path / "scripted.stderr"), log


def read_log(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.anyio
async def test_scripted_permission_branch_raw_line_and_crash(tmp_path: Path) -> None:
    approved = tmp_path / "approved.txt"
    scenario = {
        "initialize": {"agentCapabilities": {"promptCapabilities": {"image": True}, "mcpCapabilities": {"http": True}}},
        "turns": [
            [
                {"thought": "considering"},
                {"text": "Let me "},
                {"tool_call": {"toolCallId": "t1", "title": "Run it", "kind": "execute", "status": "pending"}},
                {"ask": {"toolCall": {"toolCallId": "t1"}}, "id": "p1"},
                {
                    "branch": "p1",
                    "allow": [{"write_file": {"path": str(approved), "content": "ran"}}, {"text": "approved."}],
                    "reject": [{"text": "declined."}],
                },
                {"stdout_raw": "this line is not JSON"},
                {"tool_call_update": {"toolCallId": "t1", "status": "completed"}},
                {"stderr": "scripted agent says hi on stderr"},
            ],
            [{"text": "about to crash"}, {"crash": 3}],
        ],
    }
    peer, log = await start_scripted(tmp_path, scenario)
    with anyio.fail_after(TIMEOUT):
        init, sid = await peer.setup()
        assert sid == "s1"
        caps = init["agentCapabilities"]
        assert caps["promptCapabilities"] == {"image": True, "audio": False, "embeddedContext": False}
        assert caps["mcpCapabilities"] == {"http": True} and caps["loadSession"] is False
        unknown = await peer.call("session/fork", {"sessionId": sid})
        assert unknown["error"]["code"] == -32601

        pending = await peer.send("session/prompt", prompt(sid, "go"))
        request = await peer.requests.get()
        assert request["id"] == 0 and request["method"] == "session/request_permission"
        assert request["params"]["toolCall"] == {"toolCallId": "t1"}
        assert not approved.exists()
        await peer.respond(request["id"], choose(request, "allow_once"))
        assert (await pending)["result"] == {"stopReason": "end_turn"}
        assert approved.read_text() == "ran"
        assert peer.text() == "Let me approved."
        assert peer.text("agent_thought_chunk") == "considering"
        assert peer.raw_lines == ["this line is not JSON"]

        # Turn 2 crashes without answering the prompt.
        pending = await peer.send("session/prompt", prompt(sid, "again"))
        with pytest.raises(EOFError):
            await pending
        assert await peer.proc.wait() == 3
    assert "about to crash" in peer.text()
    assert "scripted agent says hi on stderr" in (tmp_path / "scripted.stderr").read_text()

    entries = read_log(log)
    assert all("t" in e for e in entries)
    assert [e["method"] for e in entries if "method" in e] == [
        "initialize",
        "session/new",
        "session/fork",
        "session/prompt",
        "session/prompt",
    ]
    (outcome,) = [e for e in entries if e.get("event") == "permission_outcome"]
    assert outcome["id"] == "p1" and outcome["kind"] == "allow_once"
    assert outcome["outcome"] == {"outcome": "selected", "optionId": "allow"}
    (session_new,) = [e for e in entries if e.get("event") == "session_new"]
    assert session_new["cwd"] == str(ROOT) and session_new["mcpServers"] == []
    assert entries[-1]["event"] == "exit" and entries[-1]["code"] == 3


@pytest.mark.anyio
async def test_scripted_cancel_mid_stream_answered_end_turn(tmp_path: Path) -> None:
    scenario = {
        "turns": [[{"text": "first "}, {"sleep": 10}, {"text": "never"}]],
        "on_cancel": "end_turn",
        "after_cancel": [{"text": "late"}],
    }
    peer, log = await start_scripted(tmp_path, scenario)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()
        pending = await peer.send("session/prompt", prompt(sid, "go"))
        await peer.wait_until(lambda: peer.text() == "first ")
        await peer.notify("session/cancel", {"sessionId": sid})
        with anyio.fail_after(30):  # ms idle
            # A buggy agent: end_turn, not cancelled, and an update after the cancel.
            assert (await pending)["result"] == {"stopReason": "end_turn"}
        assert peer.text() == "first late"

        # The next prompt falls back to the default turn.
        assert (await peer.call("session/prompt", prompt(sid, "more")))["result"] == {"stopReason": "end_turn"}
        assert peer.text().endswith("ok")
    assert await peer.close() == 0
    events = [e for e in read_log(log) if "event" in e]
    (cancel,) = [e for e in events if e["event"] == "cancel"]
    assert cancel == {"t": cancel["t"], "event": "cancel", "sessionId": sid, "active": True}
    assert events[-1]["event"] == "exit" and events[-1]["reason"] == "stdin closed"


@pytest.mark.anyio
async def test_scripted_cancel_aborts_pending_await(tmp_path: Path) -> None:
    never = tmp_path / "never.txt"
    scenario = {
        "turns": [
            [
                {"permission": {}, "id": "p1"},
                {"await": ["p1"]},
                {"write_file": {"path": str(never), "content": "should not happen"}},
            ]
        ]
    }
    peer, log = await start_scripted(tmp_path, scenario)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()
        pending = await peer.send("session/prompt", prompt(sid, "go"))
        request = await peer.requests.get()
        assert request["params"]["toolCall"]["toolCallId"] == "call-p1"
        await peer.notify("session/cancel", {"sessionId": sid})
        await peer.respond(request["id"], CANCELLED)
        assert (await pending)["result"] == {"stopReason": "cancelled"}
    await peer.close()
    assert not never.exists()
    outcomes = [e for e in read_log(log) if e.get("event") == "permission_outcome"]
    assert [o["kind"] for o in outcomes] == ["cancelled"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"action": "accept", "content": {"colour": "green", "note": "matte"}}, "You chose green. Note: matte"),
        ({"action": "decline"}, "You declined the question."),
        ({"action": "cancel"}, "The question was cancelled."),
    ],
)
async def test_demo_asks_a_question_and_says_the_answer(tmp_path: Path, answer: dict[str, Any], said: str) -> None:
    peer, _ = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        await peer.call("initialize", {"protocolVersion": 1, "clientCapabilities": {"elicitation": {"form": {}}}})
        sid = (await peer.call("session/new", {"cwd": str(ROOT), "mcpServers": []}))["result"]["sessionId"]
        pending = await peer.send("session/prompt", prompt(sid, "ask me something"))
        request = await peer.requests.get()
        assert request["method"] == "elicitation/create"
        params = request["params"]
        assert params["mode"] == "form" and params["sessionId"] == sid and params["message"] == "Which colour should the button be?"
        assert [o["const"] for o in params["requestedSchema"]["properties"]["colour"]["oneOf"]] == ["red", "green", "blue"]
        await peer.respond(request["id"], answer)
        assert (await pending)["result"] == {"stopReason": "end_turn"}
    assert said in peer.text()
    await peer.close()


@pytest.mark.anyio
async def test_demo_asks_nothing_of_a_client_that_shows_no_questions(tmp_path: Path) -> None:
    peer, _ = await start_demo(tmp_path)
    with anyio.fail_after(TIMEOUT):
        _, sid = await peer.setup()  # clientCapabilities: {}
        assert (await peer.call("session/prompt", prompt(sid, "ask me something")))["result"] == {"stopReason": "end_turn"}
    assert "I cannot ask: the client shows no questions." in peer.text()
    assert not [f for f in peer.frames if f.get("method") == "elicitation/create"]
    await peer.close()
