"""A scripted fake of the Anthropic Messages API, for driving real agents offline.

Claude Code (inside ``@zed-industries/claude-agent-acp``) talks to
``$ANTHROPIC_BASE_URL/v1/messages``.  This server answers it from a script::

    with FakeAnthropic(replies=[
        [{"text": "I'll create it."},
         {"tool_use": {"name": "Bash", "input": {"command": "touch x", "description": "Create x"}}}],
        [{"text": "Created."}],
    ]) as fake:
        env = claude_agent_env(home, fake.url)
        ...
        assert fake.tool_results()[0]["is_error"] is False

Each *reply* answers one request of the **main conversation** and is a list of blocks:

* ``{"text": "..."}`` -- a text block (streamed as a few ``text_delta`` chunks);
* ``{"tool_use": {"name": ..., "input": {...}, "id": optional}}`` -- a tool call
  (streamed as ``input_json_delta`` chunks; the id ``toolu_fake_<n>`` is generated
  unless given);
* ``{"thinking": "..."}`` -- a thinking block (``thinking_delta`` + ``signature_delta``);
* ``{"sleep": seconds}`` -- pause the stream at that point (to cancel mid-stream);
* ``{"stop_reason": "max_tokens"}`` -- override the stop reason (default ``tool_use``
  when the reply has a tool_use block, else ``end_turn``).

A reply may also be a callable ``f(body) -> list[block]`` to compute the answer from the
request.  When the script is exhausted every further main request is answered
``"Done."`` with ``end_turn``.

Claude Code also makes *side requests* (session title / topic generation, quota checks,
summaries...).  They are recognised by :func:`classify_request` and answered with a
short text **without consuming the script**.  (Seen with claude-agent-acp 0.23.1 /
Claude Code 2.1.83 in SDK mode: no side request at all, only a ``HEAD /`` connectivity
probe at start-up; every ``/v1/messages?beta=true`` request is the main loop, model
``claude-sonnet-4-6``, ``max_tokens`` 32000, 21 tools, ``stream: true``.)

Every request is recorded (thread-safe) in :attr:`FakeAnthropic.requests`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.scripted_server import Block, JsonHandler, Reply, ScriptedServer, estimate_tokens

__all__ = [
    "FakeAnthropic",
    "RecordedRequest",
    "classify_request",
    "system_text",
    "tool_names",
    "DONE_TEXT",
    "SIDE_TEXT",
]

DONE_TEXT = "Done."
SIDE_TEXT = "Fake title"


# Phrases of Claude Code's own main-conversation system prompt (preset "claude_code").
_MAIN_SYSTEM_MARKERS = (
    "interactive CLI tool",
    "interactive agent that helps users",
    "software engineering tasks",
)
# Phrases of known side-request system prompts (title, topic, summary, quota...).
_SIDE_SYSTEM_MARKERS = (
    "title",
    "topic",
    "summar",
    "Summar",
    "isNewTopic",
    "commit message",
    "sentence-case",
)


def system_text(body: dict[str, Any]) -> str:
    """The request's system prompt as one string (``system`` may be a str or blocks)."""
    system = body.get("system")
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(
            b.get("text", "") for b in system if isinstance(b, dict) and isinstance(b.get("text"), str)
        )
    return ""


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]


def classify_request(body: dict[str, Any]) -> str:
    """``"main"`` for a turn of the scripted conversation, ``"side"`` for anything else.

    Heuristics (any side signal wins unless the request clearly is the main loop):

    * the main loop always sends ``tools`` when the agent has any tool; it streams;
      its ``max_tokens`` is large (32k/64k); its model is the session model;
    * side requests (title/topic generation, quota probes, summaries) come without
      tools or with a tiny ``max_tokens``, often on a haiku model, with a short
      special-purpose system prompt.
    """
    model = str(body.get("model", "")).lower()
    max_tokens = body.get("max_tokens") or 0
    tools = body.get("tools") or []
    system = system_text(body)
    if isinstance(max_tokens, int) and 0 < max_tokens < 1024:
        return "side"  # quota checks use max_tokens=1, titles a few hundred tokens
    if tools:
        # Claude Code's main loop. (Sub-agents also carry tools; they are scripted too.)
        return "main"
    if "haiku" in model:
        return "side"
    if any(m in system for m in _SIDE_SYSTEM_MARKERS) and not any(m in system for m in _MAIN_SYSTEM_MARKERS):
        return "side"
    if body.get("output_format") or body.get("response_format"):
        return "side"  # structured output: titles/classifiers
    if any(m in system for m in _MAIN_SYSTEM_MARKERS):
        return "main"  # a session with every built-in tool disabled and no MCP
    return "side"


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON (dict) or raw text, or None
    kind: str  # "main" | "side" | "count_tokens" | "other"
    time: float = field(default_factory=time.monotonic)
    reply: list[Block] | None = None  # the blocks it was answered with (messages only)


class FakeAnthropic(ScriptedServer):
    """Fake Anthropic Messages API on ``127.0.0.1`` (random port) in a background thread."""

    thread_name = "fake-anthropic"

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        done_text: str = DONE_TEXT,
        side_text: str = SIDE_TEXT,
        chunk_size: int = 12,
        classify: Callable[[dict[str, Any]], str] = classify_request,
        host: str = "127.0.0.1",
        cache_usage_fields: bool = True,
    ) -> None:
        super().__init__(replies, done_text=done_text, chunk_size=chunk_size, host=host)
        self.side_text = side_text
        self.classify = classify
        # The real API always reports cache_creation/cache_read_input_tokens in usage.
        # Without them claude-agent-acp 0.23.1 sends usage_update with "used": null
        # (NaN), which the acp SDK's pydantic models reject; False reproduces that.
        self.cache_usage_fields = cache_usage_fields

    @property
    def url(self) -> str:
        """Base URL for ``ANTHROPIC_BASE_URL`` (no trailing slash, no ``/v1``)."""
        return f"http://{self._host}:{self.port}"

    # ------------------------------------------------------------------ script
    def _new_tool_id(self) -> str:
        return f"toolu_fake_{next(self._ids):04d}"

    # ------------------------------------------------------------------ queries
    def main_requests(self) -> list[dict[str, Any]]:
        """Bodies of the main-conversation ``/v1/messages`` requests, in order."""
        return [r.body for r in self.snapshot() if r.kind == "main"]

    def side_requests(self) -> list[dict[str, Any]]:
        return [r.body for r in self.snapshot() if r.kind == "side"]

    def tool_results(self) -> list[dict[str, Any]]:
        """Every distinct ``tool_result`` block the model was sent (first sighting per id).

        Each is returned as sent plus ``"text"``: its content flattened to a string.
        """
        seen: dict[str, dict[str, Any]] = {}
        for body in self.main_requests():
            for msg in body.get("messages") or []:
                content = msg.get("content")
                if msg.get("role") != "user" or not isinstance(content, list):
                    continue
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        tid = str(block.get("tool_use_id"))
                        if tid not in seen:
                            seen[tid] = {**block, "text": _flatten(block.get("content"))}
        return list(seen.values())

    def tool_result(self, tool_use_id: str) -> dict[str, Any] | None:
        for tr in self.tool_results():
            if tr.get("tool_use_id") == tool_use_id:
                return tr
        return None

    def tool_use_ids(self) -> list[str]:
        """Ids of the tool_use blocks this fake has sent so far."""
        ids = []
        for r in self.snapshot():
            for b in r.reply or []:
                if "tool_use" in b:
                    ids.append(b["tool_use"]["id"])
        return ids

    # ------------------------------------------------------------------ rendering
    def _blocks_to_content(self, blocks: list[Block]) -> tuple[list[dict[str, Any]], str]:
        """Resolve script blocks into API content blocks (+ stop reason); fills tool ids."""
        content: list[dict[str, Any]] = []
        stop_reason = None
        for b in blocks:
            if "text" in b:
                content.append({"type": "text", "text": str(b["text"])})
            elif "thinking" in b:
                content.append({"type": "thinking", "thinking": str(b["thinking"]), "signature": "fake-signature"})
            elif "tool_use" in b:
                tu = dict(b["tool_use"])
                tu.setdefault("id", self._new_tool_id())
                tu.setdefault("input", {})
                b["tool_use"] = tu
                content.append({"type": "tool_use", "id": tu["id"], "name": tu["name"], "input": tu["input"]})
            elif "stop_reason" in b:
                stop_reason = b["stop_reason"]
            elif "sleep" in b:
                content.append({"type": "_sleep", "seconds": float(b["sleep"])})
            else:
                raise ValueError(f"unknown fake reply block: {b!r}")
        if stop_reason is None:
            stop_reason = "tool_use" if any(c["type"] == "tool_use" for c in content) else "end_turn"
        return content, stop_reason


def _flatten(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_flatten(c.get("text") if isinstance(c, dict) else c) for c in content)
    return str(content)


class _Handler(JsonHandler):
    owner: FakeAnthropic
    server_version = "fake-anthropic/1"

    # -------------------------------------------------------------- plumbing
    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        super()._send_json(status, obj, {"request-id": f"req_fake_{uuid.uuid4().hex[:16]}", **(headers or {})})

    def _not_found(self) -> None:
        self._send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "Not Found"}})

    def _route(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        body = self._read_body() if self.command in ("POST", "PUT", "PATCH") else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake = self.owner
        if self.command == "POST" and path == "/v1/messages/count_tokens":
            fake._record(RecordedRequest(self.command, self.path, headers, body, "count_tokens"))
            self._send_json(200, {"input_tokens": estimate_tokens(body)})
            return
        if self.command == "POST" and path == "/v1/messages" and isinstance(body, dict):
            kind = fake.classify(body)
            blocks = fake._next_reply(body) if kind == "main" else [{"text": fake.side_text}]
            rec = RecordedRequest(self.command, self.path, headers, body, kind)
            content, stop_reason = fake._blocks_to_content(blocks)
            rec.reply = blocks
            fake._record(rec)
            model = str(body.get("model") or "claude-fake")
            if body.get("stream"):
                self._stream(model, content, stop_reason, estimate_tokens(body))
            else:
                time.sleep(sum(c["seconds"] for c in content if c["type"] == "_sleep"))
                self._send_json(
                    200, _message_json(model, content, stop_reason, estimate_tokens(body), fake.cache_usage_fields)
                )
            return
        fake._record(RecordedRequest(self.command, self.path, headers, body, "other"))
        if path == "/v1/messages":
            self._send_json(
                400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad request body"}}
            )
        elif self.command in ("GET", "HEAD") and path in ("", "/"):
            self._send_json(200, {"ok": True})
        elif self.command == "GET" and path == "/v1/models":
            self._send_json(200, {"data": [], "has_more": False, "first_id": None, "last_id": None})
        else:
            self._not_found()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _route

    # -------------------------------------------------------------- SSE
    def _event(self, name: str, data: dict[str, Any]) -> None:
        chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()

    def _stream(self, model: str, content: list[dict[str, Any]], stop_reason: str, in_tokens: int) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", f"req_fake_{uuid.uuid4().hex[:16]}")
        self.end_headers()
        n = self.owner.chunk_size
        out_tokens = 0
        try:
            start = _message_json(model, [], None, in_tokens, self.owner.cache_usage_fields)
            start["usage"]["output_tokens"] = 1
            self._event("message_start", {"type": "message_start", "message": start})
            self._event("ping", {"type": "ping"})
            index = 0
            for block in content:
                if block["type"] == "_sleep":
                    time.sleep(block["seconds"])
                    continue
                if block["type"] == "text":
                    text = block["text"]
                    self._event(
                        "content_block_start",
                        {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                    )
                    for i in range(0, len(text), n) or [0]:
                        self._event(
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": index,
                                "delta": {"type": "text_delta", "text": text[i : i + n]},
                            },
                        )
                    out_tokens += max(1, len(text) // 4)
                elif block["type"] == "thinking":
                    self._event(
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                        },
                    )
                    self._event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "thinking_delta", "thinking": block["thinking"]},
                        },
                    )
                    self._event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "signature_delta", "signature": block["signature"]},
                        },
                    )
                    out_tokens += max(1, len(block["thinking"]) // 4)
                elif block["type"] == "tool_use":
                    self._event(
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}},
                        },
                    )
                    js = json.dumps(block["input"])
                    for i in range(0, len(js), 3 * n):
                        self._event(
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": index,
                                "delta": {"type": "input_json_delta", "partial_json": js[i : i + 3 * n]},
                            },
                        )
                    out_tokens += max(1, len(js) // 4)
                self._event("content_block_stop", {"type": "content_block_stop", "index": index})
                index += 1
            self._event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": max(1, out_tokens)},
                },
            )
            self._event("message_stop", {"type": "message_stop"})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client aborted the stream (e.g. the agent was interrupted)
        self.close_connection = True


def _message_json(
    model: str, content: list[dict[str, Any]], stop_reason: str | None, in_tokens: int, cache_fields: bool = True
) -> dict[str, Any]:
    real = [c for c in content if c["type"] != "_sleep"]
    usage: dict[str, Any] = {
        "input_tokens": in_tokens,
        "output_tokens": sum(max(1, len(json.dumps(c)) // 4) for c in real) or 1,
    }
    if cache_fields:
        usage.update({"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
    return {
        "id": f"msg_fake_{uuid.uuid4().hex[:20]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": real,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


FakeAnthropic.handler = _Handler
