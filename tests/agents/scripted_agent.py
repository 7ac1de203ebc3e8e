#!/usr/bin/env python3
"""A scriptable ACP agent for tests, able to misbehave on purpose.

Usage: ``python tests/agents/scripted_agent.py SCENARIO.json [--log LOG.jsonl]``

It speaks ACP v1 by hand (JSON-RPC 2.0, one JSON object per line on stdin/stdout),
stdlib only, so a scenario can make it do what a well-behaved SDK agent never would:
updates that fail validation, non-JSON lines on stdout, crashes mid-turn, updates after
a cancel, a wrong stopReason after a cancel.

Threads: the main thread reads stdin and answers initialize/session/new at once; each
``session/prompt`` runs its turn in its own thread, so ``session/cancel`` and permission
answers are seen while a turn streams or waits.

Log (``--log``): every frame received is appended as one JSON line, the frame's own
keys plus ``"t"`` (``time.monotonic()``); a line that is not JSON is logged as
``{"t", "raw"}``. Notable things are logged as ``{"t", "event": ...}``:
``session_new`` (sessionId, cwd, mcpServers), ``prompt`` (sessionId, turn index, ``open``:
how many earlier prompts of that session were still unanswered),
``permission_outcome`` (id, rpc_id, outcome, kind), ``cancel`` (sessionId, active),
``prompt_answered`` (sessionId, stopReason or error), ``exit`` (reason, code).
Each line is flushed immediately. A ``{pid}`` in the log path is replaced by the
process id, so every process started from one command line keeps its own log.

Scenario JSON (all keys optional)::

    {
      "initialize": {...},       deep-merged into the initialize result
      "turns": [[step, ...], ...],   turns[i] runs for the i-th session/prompt received
      "turns_per_session": false,    true: i counts the prompts of the prompt's session
                                     (one process serves every chat of an agent)
      "default_turn": [step, ...],   when turns run out (default [{"text": "ok"}])
      "on_cancel": "cancelled" | "end_turn" | "error" | "never",
      "after_cancel": [step, ...]    run after a cancel, before answering the prompt
      "ignore_cancel": false,        true: session/cancel is logged and otherwise ignored (the
                                     turn streams on to its end, an agent that never stops)
      "close_keeps_turns": false,    true: session/close leaves the session's turns running
                                     (with ignore_cancel: a turn that never ends early)
      "on_close_client": [{"method", "params"}, ...]
                                     requests to the client sent for a session being closed,
                                     before session/close is answered (ids close-0, close-1, ...;
                                     answers logged as client_result)
      "config_options": [...]        configOptions in the session/new, resume and load answers;
                                     session/set_config_option sets one (logged set_config_option)
      "refuse_values": [v, ...]      session/set_config_option to one of these values is answered
                                     -32602 (logged set_config_option_refused) and not set
      "after_new": [update, ...]     session/update objects sent right after answering session/new,
                                     before any prompt (claude-agent-acp tells its commands so)
      "modes": {...}                 ACP modes ({currentModeId, availableModes}) in the same answers;
                                     session/set_mode sets the session's (logged set_mode)
      "auth_required": {"message": s, "at": "new" | "prompt", "login_file": path}
                                     until signed in, session/new ("new", the default) or every
                                     session/prompt ("prompt") fails -32000 with message s
                                     (logged auth_refused). Signed in: an authenticate call
                                     (logged authenticate, methodId), or login_file existing
                                     when the process started (a login made in a terminal)
      "freeze_at_new": n             the process's n-th session/new freezes it: nothing more is
                                     answered or sent (turns streaming stop mid-write), stdin
                                     is no longer read (logged frozen); only a signal ends it
      "slow_take_up": {"seconds": s, "every": e}
                                     session/resume and session/load answer after s seconds,
                                     sending an agent_message_chunk every e seconds meanwhile
                                     (a long session replayed: slow, never silent)
      "pid_session_ids": false       true: sessionIds are s<n>-<pid>, so two processes never
                                     open the same one (real agents use UUIDs)
      "new_gate": {"after": k, "path": p}
                                     every session/new after the k-th is answered (from a
                                     thread: the agent goes on reading) once the file at p
                                     exists (logged session_new_gated as it starts waiting)
    }

Steps (the first key decides):
  {"text": s}                 agent_message_chunk with a text block
  {"thought": s}              agent_thought_chunk
  {"update": {...}}           session/update with exactly this raw update object
  {"tool_call": {...}}        session/update, sessionUpdate "tool_call" + these fields
  {"tool_call_update": {...}} same with "tool_call_update"
  {"plan": [entries]}         plan update
  {"permission": {"toolCall": {...}, "options": [...]}, "id": "p1"}
                              send session/request_permission, do not wait. Missing
                              toolCall/options get defaults (options: allow_once
                              "allow", allow_always "allow-always", reject_once
                              "reject", reject_always "reject-always"); other keys
                              of the object are copied into params.
  {"await": ["p1", ...]}      wait until those requests are answered
  {"ask": {...}, "id": "p1"}  permission + await
  {"branch": "p1", "allow": [...], "reject": [...], "cancelled": [...], "other": [...]}
                              wait for p1's answer, then run the steps for its class:
                              allow_* -> allow, reject_* -> reject, cancelled ->
                              cancelled, anything else (unknown option id, JSON-RPC
                              error answer) -> other, or reject if "other" is absent
  {"sleep": seconds}
  {"gate": path}              wait until the file at path exists (the test opens the gate: an
                              order that holds however slow the machine, where a sleep races)
  {"recall": prefix}          agent_message_chunk "<prefix><what this session was told>": the text
                              blocks of every earlier prompt of the turn's session, joined by
                              " / " (an agent that remembers each chat, and nothing else)
  {"stdout_raw": s}           write s plus a newline to stdout, as is (not JSON)
  {"big_text": n}             one agent_message_chunk of n "x" characters
  {"stderr": s}               a line on stderr
  {"crash": code}             exit at once with that code; the prompt is not answered
  {"stop": reason}            answer the prompt now with this stopReason, end the turn;
                              {"stop": reason, "result": {...}}: more of the result (usage, _meta)
  {"answer": reason}          answer the prompt now with this stopReason, and go on with
                              the steps: output for a turn that has ended (hostile)
  {"chatter": {"mb", "chunk"?}}
                              mb MiB of agent_message_chunk, chunk bytes of text each
                              (default 64 KiB); then logs event chatter_done (hostile)
  {"error": {"code", "message", "data"}}
                              answer the prompt now with this JSON-RPC error
  {"send": {...}}             write this object as a frame, as is (e.g. a request to
                              the client with an unknown method)
  {"fs": {"method", ...params}, "id": "f1"}
                              send the client this request (fs/read_text_file,
                              fs/write_text_file, …; sessionId added unless given) and wait
                              for its answer; logs event fs_answer (id, result or error)
  {"write_file": {"path", "content"}}
                              write a file (relative paths: against the session cwd)
  {"client": {"method", "params"}, "id": "c1"}
                              send a request to the client (terminal/*, fs/*), do not wait;
                              sessionId is added to params; a string param "$c0.key" is
                              replaced by the result's key of earlier request c0 (a
                              terminalId). Each answer is logged as event client_result
                              (id, method, result or error)
  {"client_await": ["c1", ...]}
                              wait for those answers (a cancel does not interrupt it: an
                              agent waiting on a command waits for it)
  {"mcp_connect": {...}}      start the session's first mcpServers entry (stdio only)
                              and do the MCP handshake; {"session": s} replaces the
                              --session it is given (to test a refusal: logs event
                              mcp_refused instead)
  {"mcp_list": true}          tools/list; logs event mcp_tools (names)
  {"mcp_call": {"name", "arguments"}, "id": "m1"}
                              tools/call, do not wait
  {"mcp_await": ["m1", ...]}  wait for those calls' results. Each tools/call result is
                              logged as event mcp_result (id, result) when it arrives;
                              MCP notifications as event mcp_notification (method).

A turn with no stop/error step ends with stopReason end_turn. A ``session/cancel`` for
the turn's session aborts the remaining steps (including a pending await or sleep),
runs ``after_cancel``, then answers the prompt per ``on_cancel``: a cancelled
stopReason, an end_turn stopReason, a JSON-RPC error (-32603), or ("never") no answer
at all. Permissions answered ``cancelled`` count as answered.

Also: initialize (protocolVersion 1, loadSession false, promptCapabilities all false
unless overridden), session/new (sessionId "s1", "s2", ...), session/resume and
session/load of any sessionId (logged ``session_resume``/``session_load``; "refuse":
[methods] makes them fail -32002; session/load replays "replay", a list of updates,
first), session/close (logged ``session_close``; its turns are cancelled), authenticate
(result null), anything else -> -32601 (notifications other than session/cancel are ignored).
Requests to the client use ids 0, 1, 2, ... The process exits 0 when stdin closes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

DEFAULT_OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject-always", "name": "Never allow", "kind": "reject_always"},
]


class McpStdio:
    """A minimal MCP client over a stdio server process (JSON lines)."""

    def __init__(self, agent: ScriptedAgent, command: str, args: list[str], env: dict[str, str]) -> None:
        import subprocess

        self.agent = agent
        self.proc = subprocess.Popen([command, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, **env})
        self.next_id = 0
        self.results: dict[int, Any] = {}
        self.handles: dict[int, str] = {}  # tools/call request id → the scenario's handle
        self.cond = threading.Condition()
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            frame = json.loads(line)
            if "id" in frame and "method" not in frame:
                result = frame.get("result", frame.get("error"))
                handle = self.handles.get(frame["id"])
                if handle is not None:  # a tools/call: logged as it arrives, cancel or not
                    self.agent.log_event("mcp_result", id=handle, result=result)
                with self.cond:
                    self.results[frame["id"]] = result
                    self.cond.notify_all()
            elif "method" in frame:
                self.agent.log_event("mcp_notification", method=frame["method"])
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def send(self, frame: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(frame) + "\n").encode())
        self.proc.stdin.flush()

    def send_request(self, method: str, params: Any) -> int:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    def wait(self, rid: int, stop: Any = lambda: False) -> Any:
        with self.cond:
            while rid not in self.results:
                if self.closed or stop():
                    return None
                self.cond.wait(0.05)
            return self.results[rid]

    def request(self, method: str, params: Any) -> Any:
        return self.wait(self.send_request(method, params))


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Return base updated by extra, merging nested objects instead of replacing them."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def text_update(kind: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


class TurnCancelled(Exception):
    """Raised inside a turn thread when its session was cancelled."""


class TurnEnded(Exception):
    """Raised by a stop/error step: the prompt has been answered."""


class Turn:
    """One running session/prompt."""

    def __init__(self, agent: ScriptedAgent, request_id: Any, session_id: str, steps: list[dict[str, Any]]):
        self.agent = agent
        self.request_id = request_id
        self.session_id = session_id
        self.steps = steps
        self.cancelled = False
        self.answered = False

    # -- running -----------------------------------------------------------------

    def run(self) -> None:
        try:
            try:
                self.run_steps(self.steps, cancellable=True)
            except TurnCancelled:
                self.finish_cancelled()
                return
            if self.cancelled:  # the cancel arrived after the last step
                self.finish_cancelled()
            else:
                self.answer({"stopReason": "end_turn"})
        except TurnEnded:
            pass
        except Exception as exc:  # a broken scenario: say so instead of hanging the client
            sys.stderr.write(f"scripted_agent: scenario error: {exc!r}\n")
            self.answer_error({"code": -32603, "message": "Internal error", "data": f"scenario error: {exc!r}"})
        finally:
            self.agent.turn_done(self)

    def finish_cancelled(self) -> None:
        try:
            self.run_steps(self.agent.scenario.get("after_cancel", []), cancellable=False)
        except TurnEnded:
            return
        mode = self.agent.scenario.get("on_cancel", "cancelled")
        if mode == "never":
            self.agent.log_event("prompt_answered", sessionId=self.session_id, never=True)
        elif mode == "error":
            self.answer_error({"code": -32603, "message": "Internal error", "data": "turn cancelled"})
        elif mode == "end_turn":
            self.answer({"stopReason": "end_turn"})
        else:
            self.answer({"stopReason": "cancelled"})

    def check(self, cancellable: bool) -> None:
        if cancellable and self.cancelled:
            raise TurnCancelled

    def run_steps(self, steps: list[dict[str, Any]], cancellable: bool) -> None:
        for step in steps:
            self.check(cancellable)
            self.run_step(step, cancellable)
        self.check(cancellable)

    def run_step(self, step: dict[str, Any], cancellable: bool) -> None:
        if not isinstance(step, dict) or not step:
            raise ValueError(f"bad step: {step!r}")
        kind = next(iter(step))
        value = step[kind]
        a = self.agent
        sid = self.session_id
        if kind == "text":
            a.update(sid, text_update("agent_message_chunk", value))
        elif kind == "thought":
            a.update(sid, text_update("agent_thought_chunk", value))
        elif kind == "big_text":
            a.update(sid, text_update("agent_message_chunk", "x" * int(value)))
        elif kind == "update":
            a.update(sid, value)
        elif kind in ("tool_call", "tool_call_update"):
            a.update(sid, {"sessionUpdate": kind, **value})
        elif kind == "plan":
            a.update(sid, {"sessionUpdate": "plan", "entries": value})
        elif kind == "permission":
            a.request_permission(sid, step.get("id"), value)
        elif kind == "await":
            ids = [value] if isinstance(value, str) else list(value)
            self.wait_for(lambda: all(a.permission_answered(sid, i) for i in ids), cancellable)
        elif kind == "ask":
            handle = a.request_permission(sid, step.get("id"), value)
            self.wait_for(lambda: a.permission_answered(sid, handle), cancellable)
        elif kind == "branch":
            self.wait_for(lambda: a.permission_answered(sid, value), cancellable)
            cls = a.permission_class(sid, value)
            chosen = step.get(cls)
            if chosen is None and cls == "other":
                chosen = step.get("reject")
            self.run_steps(chosen or [], cancellable)
        elif kind == "sleep":
            self.wait_for(lambda: False, cancellable, timeout=float(value))
        elif kind == "gate":
            gate = Path(str(value))
            while not gate.exists():
                self.wait_for(gate.exists, cancellable, timeout=0.02)
        elif kind == "recall":
            with a.cond:
                told = list(a.session_memory.get(sid, []))[:-1]  # the prompts before this one
            a.update(sid, text_update("agent_message_chunk", f"{value}{' / '.join(told)}"))
        elif kind == "stdout_raw":
            a.write_raw(str(value))
        elif kind == "stderr":
            sys.stderr.write(f"{value}\n")
            sys.stderr.flush()
        elif kind == "crash":
            a.exit(int(value), "crash")
        elif kind == "stop":
            self.answer({"stopReason": value, **step.get("result", {})})
            raise TurnEnded
        elif kind == "answer":  # hostile: the prompt is answered, the steps go on
            self.answer({"stopReason": value})
        elif kind == "chatter":  # hostile: MBs of message chunks, one line per chunk
            chunk = int(value.get("chunk", 65536))
            total = int(value["mb"] * 2**20)
            for _ in range(total // chunk):
                a.update(sid, text_update("agent_message_chunk", "C" * chunk))
            a.log_event("chatter_done", bytes=total // chunk * chunk)
        elif kind == "error":
            self.answer_error(value)
            raise TurnEnded
        elif kind == "send":
            a.send(value)
        elif kind == "mcp_connect":
            a.mcp_connect(sid, value if isinstance(value, dict) else {})
        elif kind == "mcp_list":
            names = [t["name"] for t in a.mcp.request("tools/list", {})["tools"]]
            a.log_event("mcp_tools", names=names)
        elif kind == "mcp_call":
            handle = step.get("id", value["name"])
            a.mcp.handles[a.mcp.next_id + 1] = handle
            a.mcp_calls[handle] = a.mcp.send_request("tools/call", value)
        elif kind == "mcp_await":
            for handle in [value] if isinstance(value, str) else list(value):
                if a.mcp.wait(a.mcp_calls[handle], lambda: cancellable and self.cancelled) is None:
                    raise TurnCancelled
        elif kind == "client":
            a.client_request(sid, str(step.get("id") or f"c{a.next_request_id}"), value)
        elif kind == "client_await":
            handles = [value] if isinstance(value, str) else list(value)
            self.wait_for(lambda: all(a.client_answered(h) for h in handles), cancellable=False)
        elif kind == "fs":
            params = {k: v for k, v in value.items() if k != "method"}
            params.setdefault("sessionId", sid)
            with a.cond:
                rpc_id = a.next_request_id
                a.next_request_id += 1
                handle = step.get("id", f"f{rpc_id}")
                a.client_requests[rpc_id] = handle
            a.send({"jsonrpc": "2.0", "id": rpc_id, "method": value["method"], "params": params})
            self.wait_for(lambda: handle in a.client_answers, cancellable)
        elif kind == "write_file":
            path = Path(value["path"])
            if not path.is_absolute():
                path = Path(a.session_cwd.get(sid, ".")) / path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value.get("content", ""), encoding="utf-8")
        else:
            raise ValueError(f"unknown step kind: {kind!r}")

    def wait_for(self, predicate: Any, cancellable: bool, timeout: float | None = None) -> None:
        """Block until predicate() holds (or timeout); a cancel interrupts when cancellable."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.agent.cond:
            while not predicate():
                if cancellable and self.cancelled:
                    raise TurnCancelled
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                self.agent.cond.wait(remaining)

    # -- answering ---------------------------------------------------------------

    def answer(self, result: dict[str, Any]) -> None:
        if self.answered:
            return
        self.answered = True
        self.agent.closed_prompt(self)
        # Logged before it is sent: a fast client may act on the answer (and the
        # main thread log its next prompt) before this thread runs again.
        self.agent.log_event("prompt_answered", sessionId=self.session_id, **result)
        self.agent.send({"jsonrpc": "2.0", "id": self.request_id, "result": result})

    def answer_error(self, error: dict[str, Any]) -> None:
        if self.answered:
            return
        self.answered = True
        self.agent.closed_prompt(self)
        self.agent.log_event("prompt_answered", sessionId=self.session_id, error=error)
        self.agent.send({"jsonrpc": "2.0", "id": self.request_id, "error": error})


class ScriptedAgent:
    def __init__(self, scenario: dict[str, Any], log_path: str | None):
        self.scenario = scenario
        self.cond = threading.Condition()  # guards everything below and wakes waiting turns
        self.out_lock = threading.RLock()  # re-entered when a failed write exits
        self.log_lock = threading.Lock()
        self.log_file = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115
        self.next_request_id = 0
        self.session_count = 0
        self.news = 0  # session/new requests received
        self.session_cwd: dict[str, str] = {}
        self.session_mcp: dict[str, list[dict[str, Any]]] = {}
        self.mcp: McpStdio | None = None  # type: ignore[assignment]
        self.mcp_calls: dict[str, int] = {}
        self.prompt_count = 0
        self.session_prompts: dict[str, int] = {}
        self.session_memory: dict[str, list[str]] = {}  # sessionId → the text of each prompt it got
        self.config_values: dict[str, dict[str, Any]] = {}  # sessionId → configId → value set
        self.modes: dict[str, Any] = {}  # sessionId → the mode set with session/set_mode
        self.turns: dict[str, list[Turn]] = {}
        self.open_prompts: dict[str, int] = {}  # sessionId → its prompts not answered yet
        # (sessionId, permission handle) -> {"rpc_id", "options", "answered", "outcome", "kind"}
        self.permissions: dict[tuple[str, str], dict[str, Any]] = {}
        self.permission_by_rpc_id: dict[int, tuple[str, str]] = {}
        self.client_by_rpc_id: dict[int, str] = {}  # requests to the client (terminal/*, fs/*) → handle
        self.client_results: dict[str, dict[str, Any]] = {}  # handle → {"result"} or {"error"}
        self.client_requests: dict[int, str] = {}  # rpc id → the "fs" step's handle
        self.client_answers: dict[str, dict[str, Any]] = {}  # handle → the answer frame
        login_file = (scenario.get("auth_required") or {}).get("login_file")
        self.signed_in = bool(login_file) and os.path.exists(login_file)  # a login made before it started

    # -- output ------------------------------------------------------------------

    def write_raw(self, line: str) -> None:
        data = (line + "\n").encode("utf-8")
        with self.out_lock:
            try:
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
            except (BrokenPipeError, ValueError):
                self.exit(0, "stdout closed")

    def send(self, frame: Any) -> None:
        self.write_raw(json.dumps(frame, separators=(",", ":")))

    def update(self, session_id: str, update: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}})

    def log(self, entry: dict[str, Any]) -> None:
        if self.log_file is None:
            return
        with self.log_lock:
            self.log_file.write(json.dumps(entry) + "\n")
            self.log_file.flush()

    def mcp_connect(self, sid: str, opts: dict[str, Any]) -> None:
        server = self.session_mcp[sid][0]
        env = {e["name"]: e["value"] for e in server.get("env", [])}
        args = list(server.get("args", []))
        if "session" in opts:
            args[args.index("--session") + 1] = opts["session"]
        self.mcp = McpStdio(self, server["command"], args, env)
        init = self.mcp.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "scripted", "version": "0"}})
        if init is None:
            self.log_event("mcp_refused")
            return
        self.mcp.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.log_event("mcp_connected", server=init.get("serverInfo", {}).get("name"))

    def log_event(self, event: str, **fields: Any) -> None:
        self.log({"t": time.monotonic(), "event": event, **fields})

    def exit(self, code: int, reason: str) -> None:
        self.log_event("exit", reason=reason, code=code)
        with self.out_lock:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
        os._exit(code)

    # -- permissions -------------------------------------------------------------

    def request_permission(self, session_id: str, handle: str | None, spec: dict[str, Any]) -> str:
        params = {"sessionId": session_id, **spec}
        with self.cond:
            rpc_id = self.next_request_id
            self.next_request_id += 1
            handle = handle or f"p{rpc_id}"
            default_call = {"toolCallId": f"call-{handle}", "title": "Scripted action", "status": "pending"}
            params.setdefault("toolCall", default_call)
            params.setdefault("options", DEFAULT_OPTIONS)
            self.permissions[(session_id, handle)] = {"rpc_id": rpc_id, "options": params["options"], "answered": False}
            self.permission_by_rpc_id[rpc_id] = (session_id, handle)
        self.send({"jsonrpc": "2.0", "id": rpc_id, "method": "session/request_permission", "params": params})
        return handle

    def client_request(self, session_id: str, handle: str, spec: dict[str, Any]) -> None:
        params = {"sessionId": session_id}
        for key, value in (spec.get("params") or {}).items():
            if isinstance(value, str) and value.startswith("$") and "." in value:
                ref, field = value[1:].split(".", 1)
                with self.cond:
                    value = (self.client_results.get(ref) or {}).get("result", {}).get(field)
            params[key] = value
        with self.cond:
            rpc_id = self.next_request_id
            self.next_request_id += 1
            self.client_by_rpc_id[rpc_id] = handle
        self.send({"jsonrpc": "2.0", "id": rpc_id, "method": spec["method"], "params": params})

    def client_answered(self, handle: str) -> bool:
        return handle in self.client_results

    def permission_answered(self, session_id: str, handle: str) -> bool:
        entry = self.permissions.get((session_id, handle))
        return bool(entry and entry["answered"])

    def permission_class(self, session_id: str, handle: str) -> str:
        kind = self.permissions[(session_id, handle)].get("kind", "")
        if kind.startswith("allow"):
            return "allow"
        if kind.startswith("reject"):
            return "reject"
        if kind == "cancelled":
            return "cancelled"
        return "other"

    def on_response(self, frame: dict[str, Any]) -> None:
        with self.cond:
            client = self.client_by_rpc_id.pop(frame.get("id"), None)  # type: ignore[arg-type]
            if client is not None:
                answer = {k: frame[k] for k in ("result", "error") if k in frame}
                self.client_results[client] = answer
                self.cond.notify_all()
            fs_handle = self.client_requests.pop(frame.get("id"), None)  # type: ignore[arg-type]
            if fs_handle is not None:
                self.client_answers[fs_handle] = frame
                self.cond.notify_all()
        if client is not None:
            self.log_event("client_result", id=client, **answer)
            return
        if fs_handle is not None:
            self.log_event("fs_answer", id=fs_handle, result=frame.get("result"), error=frame.get("error"))
            return
        with self.cond:
            key = self.permission_by_rpc_id.get(frame.get("id"))  # type: ignore[arg-type]
            if key is None:
                return
            handle = key[1]
            entry = self.permissions[key]
            outcome = (frame.get("result") or {}).get("outcome") if isinstance(frame.get("result"), dict) else None
            if "error" in frame:
                kind = "error"
            elif isinstance(outcome, dict) and outcome.get("outcome") == "cancelled":
                kind = "cancelled"
            elif isinstance(outcome, dict) and outcome.get("outcome") == "selected":
                kinds = {o.get("optionId"): o.get("kind") for o in entry["options"]}
                kind = kinds.get(outcome.get("optionId"), "unknown")
            else:
                kind = "invalid"
            entry.update(answered=True, outcome=outcome, kind=kind)
            self.cond.notify_all()
        self.log_event("permission_outcome", id=handle, rpc_id=frame.get("id"), outcome=outcome, kind=kind)

    # -- requests from the client ------------------------------------------------

    def on_request(self, frame: dict[str, Any]) -> None:
        method = frame.get("method")
        params = frame.get("params") or {}
        rid = frame.get("id")
        if method == "initialize":
            result = {
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": False,
                    "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
                },
                "authMethods": [],
                "agentInfo": {"name": "scripted-agent", "version": "0"},
            }
            self.reply(rid, deep_merge(result, self.scenario.get("initialize", {})))
        elif method == "session/new" and self.freezes():
            pass
        elif method == "session/new" and self.needs_login("new"):
            self.reply_error(rid, -32000, self.scenario["auth_required"].get("message", "Authentication required"), None)
        elif method == "session/new" and self.gated_new():
            gate = Path(self.scenario["new_gate"]["path"])
            threading.Thread(target=self.open_session_at_gate, args=(rid, params, gate), daemon=True).start()
        elif method == "session/new":
            self.open_session(rid, params)
        elif method in ("session/resume", "session/load"):
            self.take_up(rid, method, params)
        elif method == "session/close":
            sid = params.get("sessionId")
            with self.cond:
                known = self.session_cwd.pop(sid, None) is not None
                for turn in self.turns.get(sid, []) if not self.scenario.get("close_keeps_turns") else []:
                    turn.cancelled = True
                self.cond.notify_all()
            self.log_event("session_close", sessionId=sid, known=known)
            for i, spec in enumerate(self.scenario.get("on_close_client", [])):
                self.client_request(sid, f"close-{i}", spec)  # the client is closing the session: sent before the answer
            self.reply(rid, {})
        elif method == "session/set_config_option" and params.get("value") in self.scenario.get("refuse_values", []):
            self.log_event("set_config_option_refused", sessionId=params.get("sessionId"), configId=params.get("configId"), value=params.get("value"))
            self.reply_error(rid, -32602, f"Invalid value: {params.get('value')}", None)
        elif method == "session/set_config_option" and "config_options" in self.scenario:
            sid, config_id, value = params.get("sessionId"), params.get("configId"), params.get("value")
            self.config_values.setdefault(sid, {})[config_id] = value
            self.log_event("set_config_option", sessionId=sid, configId=config_id, value=value)
            self.reply(rid, self.config_answer(sid))
        elif method == "session/set_mode" and "modes" in self.scenario:
            sid, mode = params.get("sessionId"), params.get("modeId")
            self.modes[sid] = mode
            self.log_event("set_mode", sessionId=sid, modeId=mode)
            self.reply(rid, {})
        elif method == "authenticate":
            self.signed_in = True
            self.log_event("authenticate", methodId=params.get("methodId"))
            self.reply(rid, None)
        elif method == "session/prompt" and self.needs_login("prompt"):
            self.reply_error(rid, -32000, self.scenario["auth_required"].get("message", "Authentication required"), None)
        elif method == "session/prompt":
            self.start_turn(rid, params)
        else:
            self.reply_error(rid, -32601, "Method not found", {"method": method})

    def open_session(self, rid: Any, params: dict[str, Any]) -> None:
        """Answer a session/new: a fresh sessionId (logged ``session_new`` as it is answered)."""
        with self.cond:
            self.session_count += 1
            while f"s{self.session_count}" in self.session_cwd:  # a resumed session holds it
                self.session_count += 1
            sid = f"s{self.session_count}" + (f"-{os.getpid()}" if self.scenario.get("pid_session_ids") else "")
            self.session_cwd[sid] = params.get("cwd", ".")
            self.session_mcp[sid] = params.get("mcpServers") or []
        self.log_event("session_new", sessionId=sid, cwd=params.get("cwd"), mcpServers=params.get("mcpServers"))
        self.reply(rid, {"sessionId": sid, **self.config_answer(sid)})
        for update in self.scenario.get("after_new", []):
            self.update(sid, update)

    def gated_new(self) -> bool:
        """Whether this session/new (counted by ``freezes``) waits for the scenario's ``new_gate``."""
        gate = self.scenario.get("new_gate")
        return bool(gate) and self.news > gate["after"] and not Path(gate["path"]).exists()

    def open_session_at_gate(self, rid: Any, params: dict[str, Any], gate: Path) -> None:
        self.log_event("session_new_gated", n=self.news)
        while not gate.exists():
            time.sleep(0.01)
        self.open_session(rid, params)

    def freezes(self) -> bool:
        """Count a session/new; at the scenario's ``freeze_at_new``-th, freeze (never returns)."""
        self.news += 1
        if self.scenario.get("freeze_at_new") != self.news:
            return False
        self.log_event("frozen", at="session/new", n=self.news)
        self.out_lock.acquire()  # every write, of every turn, waits forever
        threading.Event().wait()
        return True

    def needs_login(self, at: str) -> bool:
        """Whether ``at`` ("new", "prompt") fails for want of a login (scenario ``auth_required``)."""
        auth = self.scenario.get("auth_required")
        if not auth or self.signed_in or auth.get("at", "new") != at:
            return False
        self.log_event("auth_refused", at=at)
        return True

    def take_up(self, rid: Any, method: str, params: dict[str, Any]) -> None:
        """session/resume, session/load: any sessionId is taken (a session of an earlier
        process, as an agent that keeps sessions on disk does), unless the scenario's
        ``refuse`` lists the method. session/load first replays ``replay`` (default: one
        user and one agent message chunk) as updates."""
        sid = params.get("sessionId")
        if method in self.scenario.get("refuse", []) or not isinstance(sid, str):
            self.log_event("session_refused", method=method, sessionId=sid)
            self.reply_error(rid, -32002, "Resource not found", {"sessionId": sid})
            return
        with self.cond:
            self.session_cwd[sid] = params.get("cwd", ".")
            self.session_mcp[sid] = params.get("mcpServers") or []
        slow = self.scenario.get("slow_take_up")
        if slow:
            end = time.monotonic() + slow["seconds"]
            while time.monotonic() < end:
                self.update(sid, text_update("agent_message_chunk", "…"))
                time.sleep(slow["every"])
        if method == "session/load":
            for update in self.scenario.get("replay", [text_update("user_message_chunk", "REPLAYED-USER"), text_update("agent_message_chunk", "REPLAYED-AGENT")]):
                self.update(sid, update)
        self.log_event(method.replace("/", "_"), sessionId=sid, cwd=params.get("cwd"), mcpServers=params.get("mcpServers"))
        self.reply(rid, self.config_answer(sid))

    def config_answer(self, sid: str) -> dict[str, Any]:
        """``{"configOptions": [...]}`` with this session's current values (scenario "config_options")."""
        out: dict[str, Any] = {}
        if "modes" in self.scenario:
            out["modes"] = {**self.scenario["modes"], **({"currentModeId": self.modes[sid]} if sid in self.modes else {})}
        if "config_options" not in self.scenario:
            return out
        values = self.config_values.get(sid, {})
        return {**out, "configOptions": [{**o, "currentValue": values.get(o["id"], o.get("currentValue"))} for o in self.scenario["config_options"]]}

    def reply(self, rid: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": rid, "result": result})

    def reply_error(self, rid: Any, code: int, message: str, data: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message, "data": data}})

    def start_turn(self, rid: Any, params: dict[str, Any]) -> None:
        sid = params.get("sessionId")
        if sid not in self.session_cwd:
            self.reply_error(rid, -32602, "Invalid params", {"details": f"unknown session {sid!r}"})
            return
        with self.cond:
            if self.scenario.get("turns_per_session"):
                index = self.session_prompts.get(sid, 0)
                self.session_prompts[sid] = index + 1
            else:
                index = self.prompt_count
            self.prompt_count += 1
            blocks = params.get("prompt") if isinstance(params.get("prompt"), list) else []
            text = "\n".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
            self.session_memory.setdefault(sid, []).append(text)
            turns = self.scenario.get("turns", [])
            steps = turns[index] if index < len(turns) else self.scenario.get("default_turn", [{"text": "ok"}])
            turn = Turn(self, rid, sid, steps)
            self.turns.setdefault(sid, []).append(turn)
            already = self.open_prompts.get(sid, 0)
            self.open_prompts[sid] = already + 1
        self.log_event("prompt", sessionId=sid, turn=index, open=already)
        threading.Thread(target=turn.run, name=f"turn-{index}", daemon=True).start()

    def closed_prompt(self, turn: Turn) -> None:
        """``turn``'s prompt is being answered."""
        with self.cond:
            self.open_prompts[turn.session_id] = self.open_prompts.get(turn.session_id, 1) - 1

    def turn_done(self, turn: Turn) -> None:
        with self.cond:
            running = self.turns.get(turn.session_id, [])
            if turn in running:
                running.remove(turn)

    def on_cancel(self, params: dict[str, Any]) -> None:
        sid = params.get("sessionId")
        with self.cond:
            running = list(self.turns.get(sid, []))
            for turn in running if not self.scenario.get("ignore_cancel") else []:
                turn.cancelled = True
            self.cond.notify_all()
        self.log_event("cancel", sessionId=sid, active=bool(running))

    # -- main loop ---------------------------------------------------------------

    def serve(self) -> int:
        stdin = sys.stdin.buffer
        while True:
            line = stdin.readline()  # no length limit: clients may send huge frames
            if not line:
                break
            text = line.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                frame = json.loads(text)
            except ValueError:
                self.log({"t": time.monotonic(), "raw": text})
                continue
            now = time.monotonic()
            self.log({**frame, "t": now} if isinstance(frame, dict) else {"t": now, "frame": frame})
            if not isinstance(frame, dict):
                continue
            if "method" in frame and "id" in frame:
                self.on_request(frame)
            elif frame.get("method") == "session/cancel":
                self.on_cancel(frame.get("params") or {})
            elif "method" not in frame and "id" in frame:
                self.on_response(frame)
        self.exit(0, "stdin closed")
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", help="scenario JSON file")
    parser.add_argument("--log", help="append every received frame and notable events here (JSON lines)")
    args = parser.parse_args(argv)
    scenario = json.loads(Path(args.scenario).read_text(encoding="utf-8"))
    log = args.log.replace("{pid}", str(os.getpid())) if args.log else None
    return ScriptedAgent(scenario, log).serve()


if __name__ == "__main__":
    raise SystemExit(main())
