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

A scripted ``tool_use`` of a *deferred* tool (claude-agent-acp 0.101 defers MCP tools, the
VS Code tools among them, and some of its own: the main request lists their names under
"The following deferred tools are now available via ToolSearch" and sends no schema) is
preceded, as a real model does, by a ``ToolSearch {"query": "select:<names>"}`` call: the
fake answers that request with the ToolSearch call alone and keeps the scripted reply for
the next main request, when the tool's schema is in ``tools`` (``auto_tool_search``).

Claude Code also makes *side requests*; :func:`classify_request` tells them from the main
conversation and they are answered **without consuming the script** (seen with
claude-agent-acp 0.101.0 / Claude Code 2.1.318, all on ``/v1/messages?beta=true``):

* ``"title"``: system prompt "You are naming a coding session", no tools,
  ``output_config.format`` a JSON schema ``{"title": string}``; after each turn. Answered
  ``{"title": side_text}`` (the structured output the real API returns).
* ``"classifier"``: auto mode's security monitor (system prompt "You are a security monitor
  for autonomous AI coding agents", no tools, ``max_tokens`` 64 then 8192, stop sequence
  ``</severity>``), for an action auto mode does not allow by itself. Answered
  ``<severity>N`` (``classifier_severity``, default 5: **allow**), so auto mode lets through
  what a permissive real classifier would: the fake never makes that mode look safer than
  it is. (Answered with anything unparseable, auto mode blocks the action "for safety".)
* ``"suggestion"``: the prompt suggestion, a fork of the main request (same system prompt
  and tools) whose last user message starts ``[SUGGESTION MODE:``; from the second turn of
  a session, once the prompt cache is warm. Answered ``suggestion_text``.
* ``"side"``: anything else not the main loop (no tools and not Claude Code's main prompt,
  a small ``max_tokens``, a haiku model), answered ``side_text``.

Usage reports prompt caching as the real API does: the part of a request sent before (the
same system prompt, tools and first messages) is ``cache_read_input_tokens``, the rest up
to the request's last ``cache_control`` breakpoint ``cache_creation_input_tokens``, and
only what follows it ``input_tokens``. (Claude Code starts its prompt suggestion only when
the last answer's uncached ``input_tokens`` are few, as they are against the real API.)

Every request is recorded (thread-safe) in :attr:`FakeAnthropic.requests`.
"""

from __future__ import annotations

import hashlib
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
    "deferred_tools",
    "system_text",
    "tool_names",
    "DONE_TEXT",
    "SIDE_TEXT",
    "SUGGESTION_TEXT",
]

DONE_TEXT = "Done."
SIDE_TEXT = "Fake title"
SUGGESTION_TEXT = "run the tests"

# Phrases of Claude Code's own main-conversation system prompt (claude-agent-acp 0.101:
# "You are an agent working with the user toward their goals"; 0.23: "interactive CLI tool").
_MAIN_SYSTEM_MARKERS = (
    "working with the user toward their goals",
    "interactive CLI tool",
    "interactive agent that helps users",
    "software engineering tasks",
)
# Phrases of other side-request system prompts (topic, summary, commit message...).
_SIDE_SYSTEM_MARKERS = (
    "title",
    "topic",
    "summar",
    "Summar",
    "isNewTopic",
    "commit message",
    "sentence-case",
)
_TITLE_MARKER = "You are naming a coding session"
_CLASSIFIER_MARKER = "You are a security monitor for autonomous AI coding agents"
_SUGGESTION_MARKER = "[SUGGESTION MODE:"
_DEFERRED_MARKER = "The following deferred tools are now available via ToolSearch"
SEARCH_TOOL = "ToolSearch"


def system_text(body: dict[str, Any]) -> str:
    """The request's system prompt as one string (``system`` may be a str or blocks)."""
    system = body.get("system")
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(b.get("text", "") for b in system if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]


def _message_texts(message: Any) -> list[str]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return []


def _last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    return "\n".join(_message_texts(users[-1])) if users else ""


def deferred_tools(body: dict[str, Any]) -> list[str]:
    """The tools a main request names as deferred (callable once ``ToolSearch`` loaded them):
    the lines after "The following deferred tools are now available via ToolSearch" in its
    system prompt or messages, up to a blank line."""
    texts = [system_text(body)] + [t for m in body.get("messages") or [] for t in _message_texts(m)]
    names: list[str] = []
    for text in texts:
        at = text.find(_DEFERRED_MARKER)
        while at >= 0:
            lines = text[at:].split("\n")[1:]
            for line in lines:
                if not line.strip():
                    break
                names.append(line.strip())
            at = text.find(_DEFERRED_MARKER, at + 1)
    return names


def classify_request(body: dict[str, Any]) -> str:
    """What a ``/v1/messages`` request is: ``"main"`` for a turn of the scripted conversation;
    ``"title"``, ``"classifier"``, ``"suggestion"`` or ``"side"`` for a side request (module
    docstring).

    The main loop always sends ``tools`` (Claude Code's own) and Claude Code's main system
    prompt; side requests come without tools, with a structured-output schema, a small
    ``max_tokens``, a haiku model or a special-purpose system prompt; the prompt suggestion
    is the main request's fork, told apart by its last user message.
    """
    model = str(body.get("model", "")).lower()
    max_tokens = body.get("max_tokens") or 0
    tools = body.get("tools") or []
    system = system_text(body)
    if _CLASSIFIER_MARKER in system:
        return "classifier"
    if _TITLE_MARKER in system:
        return "title"
    if _last_user_text(body).lstrip().startswith(_SUGGESTION_MARKER):
        return "suggestion"
    output_config = body.get("output_config")
    if body.get("output_format") or body.get("response_format") or (isinstance(output_config, dict) and output_config.get("format")):
        return "side"  # structured output: titles/classifiers
    if isinstance(max_tokens, int) and 0 < max_tokens < 1024:
        return "side"  # quota checks use max_tokens=1, titles a few hundred tokens
    if tools:
        # Claude Code's main loop. (Sub-agents also carry tools; they are scripted too.)
        return "main"
    if "haiku" in model:
        return "side"
    if any(m in system for m in _SIDE_SYSTEM_MARKERS) and not any(m in system for m in _MAIN_SYSTEM_MARKERS):
        return "side"
    if any(m in system for m in _MAIN_SYSTEM_MARKERS):
        return "main"  # a session with every built-in tool disabled and no MCP
    return "side"


def _schema_answer(schema: Any, text: str) -> Any:
    """A value of JSON schema ``schema``: every string ``text``, the first enum value, null
    where allowed, false, 0, and the required properties of an object."""
    if not isinstance(schema, dict):
        return text
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "object" in kinds or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _schema_answer(v, text) for k, v in props.items()}
    if "string" in kinds:
        return text
    if "null" in kinds:
        return None
    if "array" in kinds:
        return []
    if "boolean" in kinds:
        return False
    if "number" in kinds or "integer" in kinds:
        return 0
    return text


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
        suggestion_text: str = SUGGESTION_TEXT,
        classifier_severity: int = 5,
        auto_tool_search: bool = True,
        chunk_size: int = 12,
        classify: Callable[[dict[str, Any]], str] = classify_request,
        host: str = "127.0.0.1",
        cache_usage_fields: bool = True,
    ) -> None:
        super().__init__(replies, done_text=done_text, chunk_size=chunk_size, host=host)
        self.side_text = side_text
        self.suggestion_text = suggestion_text
        #: auto mode's classifier verdict, 0-100: below 50 allows (module docstring).
        self.classifier_severity = classifier_severity
        self.auto_tool_search = auto_tool_search
        self.classify = classify
        # The real API always reports cache_creation/cache_read_input_tokens in usage;
        # False leaves them out (claude-agent-acp 0.23.1 then sent usage_update with
        # "used": null, which the acp SDK's pydantic models reject; 0.101 counts 0).
        self.cache_usage_fields = cache_usage_fields
        # A scripted reply held back while the model loads its deferred tools (ToolSearch).
        self._held: list[Block] | None = None
        # Prefixes (system + tools + first messages) of requests sent so far: the prompt cache.
        self._cache: set[str] = set()

    @property
    def url(self) -> str:
        """Base URL for ``ANTHROPIC_BASE_URL`` (no trailing slash, no ``/v1``)."""
        return f"http://{self._host}:{self.port}"

    # ------------------------------------------------------------------ script
    def _new_tool_id(self) -> str:
        return f"toolu_fake_{next(self._ids):04d}"

    def _main_reply(self, body: dict[str, Any]) -> list[Block]:
        """The next scripted reply, or first a ``ToolSearch`` for the deferred tools it calls
        (module docstring); a reply is held back once at most."""
        with self._lock:
            held, self._held = self._held, None
        blocks = held if held is not None else self._next_reply(body)
        if self.auto_tool_search and held is None:
            deferred, loaded = set(deferred_tools(body)), set(tool_names(body))
            needed = [b["tool_use"]["name"] for b in blocks if "tool_use" in b and b["tool_use"]["name"] in deferred - loaded]
            if needed:
                with self._lock:
                    self._held = blocks
                names = list(dict.fromkeys(needed))
                return [{"tool_use": {"name": SEARCH_TOOL, "input": {"query": "select:" + ",".join(names), "max_results": len(names)}}}]
        return blocks

    def _side_reply(self, kind: str, body: dict[str, Any]) -> list[Block]:
        """The answer to a side request of ``kind`` (module docstring)."""
        if kind == "classifier":
            return [{"text": f"<severity>{self.classifier_severity}"}, {"stop_reason": "stop_sequence"}]
        if kind == "suggestion":
            return [{"text": self.suggestion_text}]
        output_config = body.get("output_config")
        fmt = output_config.get("format") if isinstance(output_config, dict) else None
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            return [{"text": json.dumps(_schema_answer(fmt.get("schema"), self.side_text))}]
        return [{"text": self.side_text}]

    def _usage(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """``(input_tokens, cache_creation_input_tokens, cache_read_input_tokens)`` of a request,
        as the real API counts them with prompt caching (module docstring); remembers its
        prefixes."""
        segments = [json.dumps([body.get("system"), body.get("tools")], sort_keys=True)]
        segments += [json.dumps(m, sort_keys=True) for m in body.get("messages") or []]
        total = estimate_tokens(body)
        marked = [i for i, seg in enumerate(segments) if "cache_control" in seg]
        if not marked or not self.cache_usage_fields:
            return total, 0, 0
        sizes = [max(1, len(seg) // 4) for seg in segments]
        keys, key = [], hashlib.sha256()
        for seg in segments:
            key.update(seg.encode())
            keys.append(key.hexdigest())
        with self._lock:
            hit = max((i for i, k in enumerate(keys) if k in self._cache), default=-1)
            self._cache.update(keys[: marked[-1] + 1])
        cached = min(total, sum(sizes[: marked[-1] + 1]))
        read = min(cached, sum(sizes[: hit + 1]))
        return max(1, total - cached), cached - read, read

    # ------------------------------------------------------------------ queries
    def main_requests(self) -> list[dict[str, Any]]:
        """Bodies of the main-conversation ``/v1/messages`` requests, in order."""
        return [r.body for r in self.snapshot() if r.kind == "main"]

    def side_requests(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Bodies of the side requests (of ``kind``: ``"title"``, ``"classifier"``,
        ``"suggestion"``, ``"side"``), in order."""
        side = ("title", "classifier", "suggestion", "side")
        return [r.body for r in self.snapshot() if r.kind in side and (kind is None or r.kind == kind)]

    def tool_searches(self) -> list[str]:
        """The queries of the ``ToolSearch`` calls this fake has sent so far."""
        return [b["tool_use"]["input"]["query"] for r in self.snapshot() for b in r.reply or [] if "tool_use" in b and b["tool_use"]["name"] == SEARCH_TOOL]

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
            blocks = fake._main_reply(body) if kind == "main" else fake._side_reply(kind, body)
            rec = RecordedRequest(self.command, self.path, headers, body, kind)
            content, stop_reason = fake._blocks_to_content(blocks)
            rec.reply = blocks
            fake._record(rec)
            model = str(body.get("model") or "claude-fake")
            usage = fake._usage(body)
            stop_sequence = (body.get("stop_sequences") or [None])[0] if stop_reason == "stop_sequence" else None
            if body.get("stream"):
                self._stream(model, content, stop_reason, usage, stop_sequence)
            else:
                time.sleep(sum(c["seconds"] for c in content if c["type"] == "_sleep"))
                self._send_json(200, _message_json(model, content, stop_reason, usage, fake.cache_usage_fields, stop_sequence))
            return
        fake._record(RecordedRequest(self.command, self.path, headers, body, "other"))
        if path == "/v1/messages":
            self._send_json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad request body"}})
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

    def _stream(self, model: str, content: list[dict[str, Any]], stop_reason: str, usage: tuple[int, int, int], stop_sequence: str | None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", f"req_fake_{uuid.uuid4().hex[:16]}")
        self.end_headers()
        n = self.owner.chunk_size
        out_tokens = 0
        try:
            start = _message_json(model, [], None, usage, self.owner.cache_usage_fields)
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
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
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
    model: str,
    content: list[dict[str, Any]],
    stop_reason: str | None,
    usage_in: tuple[int, int, int],
    cache_fields: bool = True,
    stop_sequence: str | None = None,
) -> dict[str, Any]:
    real = [c for c in content if c["type"] != "_sleep"]
    in_tokens, creation, read = usage_in
    usage: dict[str, Any] = {
        "input_tokens": in_tokens,
        "output_tokens": sum(max(1, len(json.dumps(c)) // 4) for c in real) or 1,
    }
    if cache_fields:
        usage.update({"cache_creation_input_tokens": creation, "cache_read_input_tokens": read})
    return {
        "id": f"msg_fake_{uuid.uuid4().hex[:20]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": real,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage,
    }


FakeAnthropic.handler = _Handler
