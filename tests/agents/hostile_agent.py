#!/usr/bin/env python3
"""A hostile ACP agent: one mode per way an agent has broken the daemon (docs/reliability.md), and a
seeded random mix of them all.

Usage: ``python tests/agents/hostile_agent.py MODE [--seed N] [--frames N] [--log LOG.jsonl]
[--after N] [--lines N] [--long-mb N] [--long-count N] [--init HOW] [--new HOW]``

Stdlib only, ACP v1 by hand. Answers ``initialize`` and ``session/new`` (unless the mode
says otherwise), then misbehaves in ``session/prompt``. Its own requests to the client
(``session/request_permission``, unknown methods) are logged with what came back, so a
test can check each was answered exactly once and what the user's answer was:

* ``{"t", "sent": id, "method"}`` for each request it sent;
* ``{"t", "answer": id, "result"|"error"}`` for each response it received;
* ``{"t", "event": "prompt" | "exit" | "mix_done", ...}``.

Modes (see ``MODES``):
  init-not-object   initialize's result is a JSON array
  init-bad-caps     initialize's result has capabilities of the wrong types
  new-not-object    session/new's result is a string
  new-bad-session   session/new's result has a numeric sessionId and junk configOptions
  silent-init       never answers initialize
  deaf              stops reading stdin once the session exists (a 2 MB prompt blocks)
  frozen            never answers session/prompt, sends nothing
  update-list       a session/update whose sessionUpdate is a list (and other junk), then text
  deep              a line nested 100,000 deep, then text
  shared-option-id  a permission whose allow_once and reject_once share one optionId
  unknown-kinds     a permission whose options are all of unknown kinds
  permission-at-end a permission sent just as the prompt is answered end_turn
  error-data        the prompt fails with -32603 and the reason in error.data.message
  long-stderr       30 stderr lines of 1 MB each, then exits 3 mid-turn
  huge-title        a permission whose title (its command, kind execute) is 100 KB
  malformed-permission  permissions whose options are 5, missing, empty or [5], whose toolCall
                    is missing or a list: each must be answered at once, then text
  huge-diff         a tool_call carrying a 60,000-line diff
  bad-ids           requests to the client with ids of every JSON type, unknown methods,
                    responses to requests never sent
  ignore-signals    ignores SIGTERM and EOF on stdin (is killed)
  terminals         a command's output without end as _meta.terminal_output (--long-mb MB in
                    64 KiB chunks, never ended), then terminal/create (each asked for on a
                    card first) for three commands it never releases: one printing without
                    end, two that never exit (their pids in the log, event "terminal"), then
                    "survived"; the prompt is answered
  mix               --frames N frames per prompt drawn (--seed) from all of the above
                    that keep the session alive, then the prompt is answered
  freeze            answers --after N prompts (default 1) "ok", then, in the next one, streams
                    "thinking…" and stops answering anything (prompt, session/new, cancel)
                    while it keeps reading its stdin and stays alive
  malformed-start   answers initialize and session/new with what --seed draws from
                    ``INIT_ANSWERS`` and ``NEW_ANSWERS`` (valid, garbage, errors, twice, never,
                    wrong ids, a 20 MB line, exit), or --init HOW / --new HOW; each answer is
                    logged as event "start"
  flood-stderr      each prompt: --lines N stderr lines (default 120,000), then "survived"
  flood-stdout      each prompt: --lines N stdout lines that are not JSON, then "survived"
  long-lines        each prompt: --long-count N session/update lines (default 4) of
                    --long-mb MB each (default 64) and one permission request that long
                    (logged, its answer waited for), then "survived"
  flood             each prompt: all three floods above, then "survived"
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from typing import Any

LOCK = threading.Lock()
OUT = sys.stdout.buffer
LOG: Any = None
ANSWERS: dict[str, threading.Event] = {}
RESULTS: dict[str, Any] = {}
NEXT = [0]


def log(**entry: Any) -> None:
    if LOG is not None:
        with LOCK:
            LOG.write(json.dumps({"t": time.monotonic(), **entry}) + "\n")
            LOG.flush()


def raw(line: bytes) -> None:
    with LOCK:
        OUT.write(line + b"\n")
        OUT.flush()


def send(frame: Any) -> None:
    raw(json.dumps(frame, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def reply(rid: Any, result: Any) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def update(sid: str, upd: Any) -> None:
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": upd}})


def text(sid: str, value: str) -> None:
    update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": value}})


AUTO = object()


def ask(method: str, params: Any, rid: Any = AUTO, **note: Any) -> str:
    """Send a request to the client (``rid``: a fresh string unless given, even null);
    returns the key its answer is logged under."""
    if rid is AUTO:
        NEXT[0] += 1
        rid = f"h{NEXT[0]}"
    key = json.dumps(rid)
    ANSWERS[key] = threading.Event()
    log(sent=rid, method=method, **note)
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    return key


def wait(key: str, timeout: float = 60.0) -> Any:
    ANSWERS[key].wait(timeout)
    return RESULTS.get(key)


def permission(sid: str, options: list[dict[str, Any]], title: str = "touch x", tool_id: str = "t1") -> str:
    return ask("session/request_permission", {"sessionId": sid, "toolCall": {"toolCallId": tool_id, "title": title, "kind": "execute"}, "options": options})


STANDARD = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


# ------------------------------------------------------------------ prompt behaviours


FLOOD = {"lines": 120_000, "long_mb": 64, "long_count": 4, "after": 1}
FROZEN = threading.Event()  # freeze: nothing more is answered


def flood_stderr(n: int) -> None:
    line = "warn: the agent is chatty on stderr, line %d of a flood meant to be bounded in the log\n"
    for i in range(n):
        sys.stderr.write(line % i)
    sys.stderr.flush()


def flood_stdout(n: int) -> None:
    with LOCK:
        for i in range(n):
            OUT.write(b"progress: %d of a flood of lines that are not JSON-RPC frames\n" % i)
        OUT.flush()


def long_line(start: bytes, mb: int, end: bytes) -> None:
    """One line of ``start``, ``mb`` MB of "L", ``end``: written as it is made (the agent
    holds 1 MB of it, so a line of any length costs it nothing)."""
    chunk = b"L" * 1_000_000
    with LOCK:
        OUT.write(start)
        for _ in range(mb):
            OUT.write(chunk)
        OUT.write(end + b"\n")
        OUT.flush()


def long_lines(sid: str, mb: int, count: int) -> None:
    head = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""}}}})
    start, end = head.split('""')
    for _ in range(count):
        long_line(start.encode() + b'"', mb, b'"' + end.encode())
    NEXT[0] += 1
    rid = f"h{NEXT[0]}"
    key = json.dumps(rid)
    ANSWERS[key] = threading.Event()
    log(sent=rid, method="session/request_permission", long=True)
    head = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission", "params": {"sessionId": sid, "options": STANDARD,
                       "toolCall": {"toolCallId": "long", "kind": "execute", "title": ""}}})
    start, end = head.split('"title": ""')
    long_line(start.encode() + b'"title": "', mb, b'"' + end.encode())
    log(event="long_lines", count=count + 1, bytes=mb * 1_000_000)
    wait(key, 120)


def prompt_turn(mode: str, rid: Any, sid: str, rng: random.Random, frames: int) -> None:
    end = "end_turn"
    if mode == "frozen":
        return
    if mode == "freeze":
        if FROZEN.is_set():
            return
        if PROMPTS[0] > FLOOD["after"]:
            text(sid, "thinking…")
            log(event="frozen")
            FROZEN.set()
            return
        text(sid, "ok")
    elif mode in ("flood-stderr", "flood-stdout", "long-lines", "flood"):
        if mode in ("flood-stderr", "flood"):
            flood_stderr(FLOOD["lines"])
        if mode in ("flood-stdout", "flood"):
            flood_stdout(FLOOD["lines"])
        if mode in ("long-lines", "flood"):
            long_lines(sid, FLOOD["long_mb"], FLOOD["long_count"])
        log(event="flood_done", lines=FLOOD["lines"])
        text(sid, "survived")
    elif mode == "update-list":
        update(sid, {"sessionUpdate": ["agent_message_chunk"], "content": {"type": "text", "text": "no"}})
        update(sid, "a string")
        send({"jsonrpc": "2.0", "method": "session/update", "params": None})
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {"sessionUpdate": "tool_call", "toolCallId": {"x": 1}}}})
        text(sid, "survived")
    elif mode == "deep":
        raw(b'{"jsonrpc":"2.0","method":"session/update","params":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
        text(sid, "survived")
    elif mode in ("shared-option-id", "unknown-kinds", "huge-title"):
        options = {
            "shared-option-id": [{"optionId": "x", "name": "Allow", "kind": "allow_once"}, {"optionId": "x", "name": "Reject", "kind": "reject_once"}],
            "unknown-kinds": [{"optionId": "go", "name": "Go", "kind": "yolo"}, {"optionId": "no", "name": "No", "kind": "nope"}],
        }.get(mode, STANDARD)
        key = permission(sid, options, title="T" * 100_000 if mode == "huge-title" else "touch x")
        answer = wait(key)
        text(sid, f"outcome {json.dumps(answer)}")
    elif mode == "malformed-permission":
        call = {"toolCallId": "m", "title": "touch x", "kind": "execute"}
        keys = [
            ask("session/request_permission", params)
            for params in (
                {"sessionId": sid, "toolCall": call, "options": 5},
                {"sessionId": sid, "toolCall": call},
                {"sessionId": sid, "toolCall": call, "options": []},
                {"sessionId": sid, "toolCall": call, "options": [5]},
                {"sessionId": sid, "options": STANDARD},
                {"sessionId": sid, "toolCall": [call], "options": STANDARD},
            )
        ]
        answers = [wait(key, timeout=30.0) for key in keys]  # the turn waits on them, as an agent does
        text(sid, f"survived {sum(a is not None for a in answers)} answers")
    elif mode == "permission-at-end":
        permission(sid, STANDARD)
    elif mode == "error-data":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "Internal error", "data": {"message": "model API: quota exceeded (429)"}}})
        return
    elif mode == "long-stderr":
        for _ in range(30):
            sys.stderr.write("E" * 1_000_000 + "\n")
        sys.stderr.flush()
        log(event="exit", code=3)
        os._exit(3)  # from this thread: the whole process
    elif mode == "huge-diff":
        old = "".join(f"line {i}\n" for i in range(60_000))
        new = old.replace("line 1", "LINE 1")
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "d1", "title": "edit big.txt", "kind": "edit", "status": "completed",
                     "content": [{"type": "diff", "path": "/tmp/big.txt", "oldText": old, "newText": new}]})
        text(sid, "survived")
    elif mode == "terminals":
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "run1", "title": "yes", "kind": "execute", "status": "in_progress"})
        chunk = "y\n" * 32768
        for _ in range(int(FLOOD["long_mb"] * 16)):
            update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "run1", "_meta": {"terminal_output": {"terminal_id": "run1", "data": chunk}}})
        marker = f"hostile-terminal-{os.getpid()}"  # in each command line: a test finds them by it
        scripts = [f"import sys  # {marker}\nline = 'z' * 1023 + '\\n'\nwhile True: sys.stdout.write(line)", f"import time  # {marker}\ntime.sleep(3600)", f"import time  # {marker}\ntime.sleep(3600)"]
        # Asked first, each on a card (lmbridge runs only commands the user approved), then run.
        cards = [ask("session/request_permission", {"sessionId": sid, "options": STANDARD, "toolCall": {
            "toolCallId": f"run{i + 2}", "title": "acp_terminal/execute", "kind": "execute", "rawInput": {"command": sys.executable, "args": ["-c", s]}}})
            for i, s in enumerate(scripts)]  # fmt: skip
        for card in cards:
            wait(card)
        keys = [ask("terminal/create", {"sessionId": sid, "command": sys.executable, "args": ["-c", s], "outputByteLimit": 2048}) for s in scripts]
        for key in keys:
            answer = wait(key)
            log(event="terminal", terminalId=answer.get("terminalId") if isinstance(answer, dict) else None, marker=marker)
        time.sleep(0.5)
        text(sid, "survived")
    elif mode == "bad-ids":
        for bad in ({}, [1], True, None, 1e400):  # ids JSON-RPC cannot answer by
            ask("session/request_permission", {"sessionId": sid, "toolCall": {"toolCallId": "b", "title": "x"}, "options": STANDARD}, rid=bad)
        for good in ("s", -7, 1.5):  # usable ids, unknown methods
            ask("fs/delete_everything", {"path": "/"}, rid=good)
        send({"jsonrpc": "2.0", "id": 999_999, "result": {}})
        send({"jsonrpc": "2.0", "id": "never-sent", "error": {"code": 1, "message": "x"}})
        time.sleep(0.5)
        text(sid, "survived")
    elif mode == "mix":
        end = mix(sid, rng, frames)
    else:
        text(sid, "ok")
    reply(rid, {"stopReason": end})


def mix(sid: str, rng: random.Random, frames: int) -> str:
    """``frames`` frames of hostile traffic drawn from ``rng``; returns the stop reason."""
    pending: list[str] = []
    for n in range(frames):
        k = rng.randrange(20)
        if k < 6:
            text(sid, rng.choice(["hello ", "Σ ", "\ud800", "", "x" * rng.randrange(1, 5000)]))
        elif k == 6:
            update(sid, {"sessionUpdate": rng.choice(["agent_thought_chunk", "plan", "usage_update", "unknown_kind", 5, None])})
        elif k == 7:
            update(sid, rng.choice(["s", 5, [], None, {"sessionUpdate": []}]))
        elif k == 8:
            raw(rng.choice([b"banner: starting", b"\x00\xff", b"{" * 50, b"[]", b"7", b"Content-Length: 10"]))
        elif k == 9:
            raw(b"[" * 20_000 + b"]" * 20_000)
        elif k == 10:
            update(sid, {"sessionUpdate": "tool_call", "toolCallId": rng.choice(["c1", "c2", "pending"]), "title": "t" * rng.randrange(1, 300),
                         "kind": rng.choice(["execute", "edit", "read", "weird", None]), "status": rng.choice(["pending", "in_progress", "completed", "failed", 7])})
        elif k == 11:
            update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": rng.choice(["c1", "c2", "nope"]), "status": "completed",
                         "content": [{"type": "content", "content": {"type": "text", "text": "out"}}]})
        elif k == 12 and rng.random() < 0.5:
            options = rng.choice([STANDARD, [], [{"optionId": "x", "kind": "allow_once", "name": "a"}] * 2, [{"optionId": "y", "kind": "weird", "name": "w"}]])
            pending.append(permission(sid, options, tool_id=f"p{n}"))
        elif k == 12:  # a malformed permission: answered at once, never left to a timeout
            call = {"toolCallId": f"m{n}", "title": "touch x", "kind": "execute"}
            params = rng.choice([{"sessionId": sid, "toolCall": call, "options": 5}, {"sessionId": sid, "toolCall": call},
                                 {"sessionId": sid, "toolCall": call, "options": [5]}, {"sessionId": sid, "options": STANDARD},
                                 {"sessionId": sid, "toolCall": "x", "options": STANDARD}])
            pending.append(ask("session/request_permission", params, malformed=True))
        elif k == 13:
            pending.append(ask(rng.choice(["fs/read_text_file", "terminal/create", "x/unknown"]), {"sessionId": sid, "path": "/etc/passwd"}))
        elif k == 14:
            send({"jsonrpc": "2.0", "id": rng.choice([10**6, "zz", None]), "result": {"stopReason": "end_turn"}})
        elif k == 15:
            send({"jsonrpc": "2.0", "method": rng.choice(["session/update", "x/notify", ""]), "params": rng.choice([None, [], {"sessionId": "other"}])})
        elif k == 16:
            update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": rng.choice(["image", "resource_link", "audio", "nope"]), "data": "%%"}})
        elif k == 17:
            update(sid, {"sessionUpdate": "tool_call", "toolCallId": "d", "kind": "edit",
                         "content": [{"type": "diff", "path": "f", "oldText": "a\n" * rng.randrange(1, 3000), "newText": "b\n" * rng.randrange(1, 3000)}]})
        elif k == 18:
            sys.stderr.write("warn " + "w" * rng.randrange(1, 100_000) + "\n")
        else:  # a request with an id of any type (answered exactly once if it is usable)
            ask("session/request_permission", {}, rid=rng.choice([{}, [], True, 1.25 + n]))
    for key in pending:
        wait(key, 120)
    log(event="mix_done", frames=frames)
    return rng.choice(["end_turn", "end_turn", "max_tokens", "refusal", "bogus_reason"])


# ------------------------------------------------------------------ malformed-start

PROMPTS = [0]
#: How malformed-start answers initialize: each a name and what it sends for request ``rid``.
INIT_ANSWERS = ["valid", "null", "array", "bad-version", "error", "garbage-then-valid", "wrong-id", "twice", "huge", "exit"]
NEW_ANSWERS = ["valid", "null", "no-session", "numeric-session", "empty-session", "junk-options", "error", "never", "twice", "string-id", "huge", "exit"]
VALID_INIT = {"protocolVersion": 1, "agentCapabilities": {"loadSession": False}, "authMethods": []}


def malformed(step: str, how: str, rid: Any, valid: Any) -> None:
    """Answer ``step`` (request ``rid``) the way ``how`` names; ``valid`` is a good result."""
    log(event="start", step=step, how=how)
    if how == "valid":
        reply(rid, valid)
    elif how == "null":
        reply(rid, None)
    elif how == "array":
        reply(rid, [1, 2])
    elif how == "bad-version":
        reply(rid, {**valid, "protocolVersion": "one", "agentCapabilities": [], "authMethods": {"x": 1}})
    elif how == "no-session":
        reply(rid, {"configOptions": []})
    elif how == "numeric-session":
        reply(rid, {"sessionId": 7})
    elif how == "empty-session":
        reply(rid, {"sessionId": ""})
    elif how == "junk-options":
        reply(rid, {**valid, "configOptions": [{"id": 5}, "x", None], "modes": {"availableModes": "all", "currentModeId": 3}, "models": [1]})
    elif how == "error":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": f"{step} failed", "data": {"message": "the agent's own reason"}}})
    elif how == "garbage-then-valid":
        raw(b"\x00\xffnot json")
        raw(b"[1, 2, 3]")
        raw(b'{"jsonrpc": "2.0", "id": 424242, "result": {}}')
        raw(b"{" * 3000)
        reply(rid, valid)
    elif how == "wrong-id":
        reply(f"{rid}-not-it", valid)
        reply(rid + 1000 if isinstance(rid, int) else 0, valid)
    elif how == "twice":
        reply(rid, valid)
        reply(rid, {"again": True})
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": 1, "message": "and an error"}})
    elif how == "string-id":
        reply(str(rid), valid)
    elif how == "huge":
        reply(rid, {**(valid if isinstance(valid, dict) else {}), "padding": "P" * 20_000_000})
    elif how == "never":
        pass
    elif how == "exit":
        sys.stderr.write(f"fatal: cannot {step}\n")
        sys.stderr.flush()
        log(event="exit", code=2)
        os._exit(2)


# ------------------------------------------------------------------ the loop


def main() -> None:
    global LOG
    args = sys.argv[1:]
    mode = args[0]
    seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 0
    frames = int(args[args.index("--frames") + 1]) if "--frames" in args else 200
    for flag in ("lines", "long-mb", "long-count", "after"):
        if f"--{flag}" in args:
            FLOOD[flag.replace("-", "_")] = int(args[args.index(f"--{flag}") + 1])
    if "--log" in args:
        LOG = open(args[args.index("--log") + 1].replace("{pid}", str(os.getpid())), "a", encoding="utf-8")  # noqa: SIM115
    rng = random.Random(seed)
    start = (rng.choice(INIT_ANSWERS), rng.choice(NEW_ANSWERS)) if mode == "malformed-start" else ("valid", "valid")
    if "--init" in args:  # malformed-start: these answers rather than drawn ones
        start = (args[args.index("--init") + 1], start[1])
    if "--new" in args:
        start = (start[0], args[args.index("--new") + 1])
    if mode == "ignore-signals":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sessions = 0
    for line in sys.stdin.buffer:
        try:
            frame = json.loads(line)
        except ValueError:
            continue
        if not isinstance(frame, dict):
            continue
        method, rid, params = frame.get("method"), frame.get("id"), frame.get("params") or {}
        if FROZEN.is_set() and method is not None:
            log(event="ignored", method=method)
            continue
        if method is None:  # a response to one of our requests
            key = json.dumps(rid)
            log(answer=rid, **({"error": frame["error"]} if "error" in frame else {"result": frame.get("result")}))
            RESULTS[key] = frame.get("result", frame.get("error"))
            if key in ANSWERS:
                ANSWERS[key].set()
            continue
        if method == "initialize":
            if mode == "silent-init":
                continue
            if mode == "malformed-start":
                malformed("initialize", start[0], rid, VALID_INIT)
                continue
            result: Any = dict(VALID_INIT)
            if mode == "init-not-object":
                result = [1, 2]
            elif mode == "init-bad-caps":
                result = {"protocolVersion": 1, "agentCapabilities": "yes", "authMethods": 5, "promptCapabilities": []}
            reply(rid, result)
        elif method == "session/new":
            sessions += 1
            result = {"sessionId": f"h{sessions}"}
            if mode == "malformed-start":
                malformed("session/new", start[1], rid, result)
                continue
            if mode == "new-not-object":
                result = "s"
            elif mode == "new-bad-session":
                result = {"sessionId": 5, "configOptions": "x", "modes": [1]}
            reply(rid, result)
            if mode == "deaf":
                log(event="deaf")
                time.sleep(3600)
        elif method == "session/prompt":
            sid = params.get("sessionId", "")
            PROMPTS[0] += 1
            log(event="prompt", sessionId=sid)
            threading.Thread(target=prompt_turn, args=(mode, rid, sid, random.Random(rng.random()), frames), daemon=True).start()
        elif method == "session/cancel":
            log(event="cancel")
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})
    if mode == "ignore-signals":
        time.sleep(3600)  # EOF ignored too
    log(event="exit", code=0)


if __name__ == "__main__":
    main()
