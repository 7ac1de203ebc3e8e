#!/usr/bin/env python3
"""A minimal, fast synthetic ACP agent for the benchmarks (stdlib only).

Speaks ACP v1 by hand: JSON-RPC 2.0, one object a line on stdin/stdout, one
thread. What a ``session/prompt`` does is read from the prompt's last text
block, which must be a JSON object (anything else is answered with a short
echo, so a divergence prompt with a ``<conversation-so-far>`` block works):

* ``{"op": "stream", "n": N, "size": S, "interval_us": U}``: N
  ``agent_message_chunk`` updates of S characters each, U microseconds apart
  (0: as fast as the pipe takes them). Every chunk's text starts with
  ``@<time.monotonic_ns()>;`` taken just before the frame is written, so a
  reader on the same machine computes each chunk's latency.
* ``{"op": "echo", "text": T}``: one chunk ``@<ns>;`` + T, where ``ns`` is the
  time the prompt was read (for the history cost measured end to end).
* ``{"op": "permission"}``: a ``session/request_permission`` whose toolCall
  title is ``@<ns>;`` (the time it was sent); when the answer arrives, one chunk
  ``@<ns>;<outcome>`` with the time the answer was read.

Each frame is written and flushed on its own, as an agent built on an ACP SDK
does. The process exits when stdin closes.
"""

from __future__ import annotations

import json
import sys
import time

OUT = sys.stdout.buffer
INP = sys.stdin.buffer
FILL = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 80  # JSON-safe filler

_session = 0


def write(frame: dict) -> None:
    OUT.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")
    OUT.flush()


def chunk_head(session: str) -> bytes:
    return (
        '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"' + session + '",'
        '"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"'
    ).encode()


CHUNK_TAIL = b'"}}}}\n'


def send_text(session: str, text: str) -> None:
    OUT.write(chunk_head(session) + json.dumps(text)[1:-1].encode() + CHUNK_TAIL)
    OUT.flush()


def stream(session: str, n: int, size: int, interval_us: int) -> None:
    head = chunk_head(session)
    interval = interval_us / 1e6
    clock = time.monotonic_ns
    write_, flush = OUT.write, OUT.flush
    for _ in range(n):
        stamp = b"@%d;" % clock()
        body = FILL[: max(0, size - len(stamp))].encode()
        write_(head + stamp + body + CHUNK_TAIL)
        flush()
        if interval:
            time.sleep(interval)


def command_of(params: dict) -> dict:
    blocks = params.get("prompt") or []
    for block in reversed(blocks):
        if isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text", "").strip()
            try:
                cmd = json.loads(text.splitlines()[-1]) if text else {}
            except ValueError:
                cmd = {}
            return cmd if isinstance(cmd, dict) else {}
    return {}


def read_frame() -> dict | None:
    while True:
        line = INP.readline()
        if not line:
            return None
        try:
            frame = json.loads(line)
        except ValueError:
            continue
        if isinstance(frame, dict):
            return frame


def wait_answer(rid: int) -> dict | None:
    """Read frames until the response to our request ``rid`` (others are ignored)."""
    while True:
        frame = read_frame()
        if frame is None:
            return None
        if "method" not in frame and frame.get("id") == rid:
            return frame


def prompt(rid, params: dict, received_ns: int) -> None:
    session = params.get("sessionId", "")
    cmd = command_of(params)
    op = cmd.get("op", "echo")
    stop = "end_turn"
    if op == "stream":
        stream(session, int(cmd.get("n", 1)), int(cmd.get("size", 16)), int(cmd.get("interval_us", 0)))
    elif op == "permission":
        perm_id = 1_000_000 + rid if isinstance(rid, int) else 1_000_000
        asked = time.monotonic_ns()
        write(
            {
                "jsonrpc": "2.0",
                "id": perm_id,
                "method": "session/request_permission",
                "params": {
                    "sessionId": session,
                    "toolCall": {"toolCallId": "bench-tool", "title": f"@{asked};", "kind": "execute", "status": "pending", "rawInput": {"command": "true"}},
                    "options": [
                        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                    ],
                },
            }
        )
        answer = wait_answer(perm_id)
        got = time.monotonic_ns()
        if answer is None:
            return
        outcome = ((answer.get("result") or {}).get("outcome") or {})
        write({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": {"sessionUpdate": "tool_call_update", "toolCallId": "bench-tool", "status": "completed"}}})
        send_text(session, f"@{got};{outcome.get('outcome')}:{outcome.get('optionId')}")
    else:
        send_text(session, f"@{received_ns};{cmd.get('text', 'ok')}")
    write({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": stop}})


def main() -> int:
    global _session
    while True:
        frame = read_frame()
        if frame is None:
            return 0
        now = time.monotonic_ns()
        method, rid, params = frame.get("method"), frame.get("id"), frame.get("params") or {}
        if method is None or rid is None:
            continue  # responses to nothing, notifications (session/cancel: turns are not interruptible)
        if method == "initialize":
            write({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": False, "promptCapabilities": {}}, "authMethods": []}})
        elif method == "session/new":
            _session += 1
            write({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": f"bench-{_session}"}})
        elif method == "session/prompt":
            prompt(rid, params, now)
        else:
            write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}})


if __name__ == "__main__":
    sys.exit(main())
