"""A scripted fake of an OpenAI-compatible **Chat Completions** API, for driving real
agents offline (fast-agent's ``generic.<model>`` provider, any OpenAI-compatible client).

    with FakeOpenAIChat(replies=[
        [{"text": "I'll run it."}, {"tool_call": {"name": "shell__run", "arguments": {"command": "touch x"}}}],
        [{"text": "Done running it."}],
    ]) as fake:
        base_url = fake.url + "/v1"
        ...
        assert fake.tool_messages()[0]["content"] == "..."

Each *reply* answers one ``POST /v1/chat/completions`` and is a list of blocks:

* ``{"text": "..."}``: assistant text (streamed as a few ``content`` deltas);
* ``{"tool_call": {"name": ..., "arguments": {...} or "json", "id": optional}}``: a
  function call (streamed as ``tool_calls`` deltas: the first with id and name, then the
  arguments in pieces; the id ``call_fake_<n>`` is generated unless given);
* ``{"sleep": seconds}``: pause the stream at that point (to cancel mid-stream);
* ``{"finish_reason": "length"}``: override the finish reason (default ``tool_calls``
  when the reply has a tool call, else ``stop``);
* ``{"empty_stream": True}``: a streamed answer with no chunk at all (only ``[DONE]``):
  fast-agent then asks again without streaming, which the next reply answers.

A reply may also be a callable ``f(body) -> list[block]``. When the script is exhausted
every further request is answered ``"Done."``.

``strict`` (default on) makes the fake refuse what real model APIs refuse: an assistant
message with neither content nor tool calls anywhere but last (Anthropic's Messages API:
"all messages must have non-empty content except for the optional final assistant
message"; several OpenAI-compatible servers likewise). It answers HTTP 400 ``invalid_request_error``
naming the message, and does not consume the script. fast-agent sends such a message
after a Stop mid-stream (docs/agents.md). ``stream: false`` gets one
``chat.completion`` object. ``GET /v1/models`` lists the models seen so far (or
``fake-model``).

Every request is recorded (thread-safe) in :attr:`FakeOpenAIChat.requests`; a refused
one has ``refused`` set (``FakeOpenAIChat.refused()``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.scripted_server import Block, JsonHandler, Reply, ScriptedServer, estimate_tokens

__all__ = ["FakeOpenAIChat", "RecordedRequest", "DONE_TEXT", "empty_assistant_message", "message_text"]

DONE_TEXT = "Done."



def message_text(message: dict[str, Any]) -> str:
    """A chat message's content as one string (``content`` may be a str or parts)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def empty_assistant_message(body: dict[str, Any]) -> str | None:
    """Why a real API refuses ``body``: an assistant message, not the last, with neither
    content nor tool calls (None: nothing refused)."""
    messages = body.get("messages") or []
    for i, msg in enumerate(messages[:-1]):
        if isinstance(msg, dict) and msg.get("role") == "assistant" and not msg.get("tool_calls") and not message_text(msg).strip():
            return f"messages.{i}: all messages must have non-empty content except for the optional final assistant message"
    return None


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON (dict) or raw text, or None
    time: float = field(default_factory=time.monotonic)
    reply: list[Block] | None = None  # the blocks it was answered with (completions only)
    finished: bool = False  # the whole answer was written (not cut off by the client)
    refused: str | None = None  # why it was answered 400 (``strict``)


class FakeOpenAIChat(ScriptedServer):
    """Fake OpenAI Chat Completions API on ``127.0.0.1`` (random port) in a background thread."""

    thread_name = "fake-openai-chat"

    def __init__(
        self, replies: Iterable[Reply] = (), *, done_text: str = DONE_TEXT, chunk_size: int = 12, host: str = "127.0.0.1", strict: bool = True
    ) -> None:
        super().__init__(replies, done_text=done_text, chunk_size=chunk_size, host=host)
        self.strict = strict

    @property
    def url(self) -> str:
        """The server's root URL (no trailing slash); the API is under ``/v1``."""
        return f"http://{self._host}:{self.port}"

    # ------------------------------------------------------------------ queries
    def completions(self) -> list[dict[str, Any]]:
        """Bodies of the ``/v1/chat/completions`` requests, in order."""
        return [r.body for r in self.snapshot() if r.reply is not None]

    def user_texts(self, index: int = -1) -> list[str]:
        """The user messages' texts of completion request ``index``."""
        return [message_text(m) for m in self.completions()[index].get("messages") or [] if m.get("role") == "user"]

    def refused(self) -> list[RecordedRequest]:
        """The completion requests answered 400 (see ``strict``)."""
        return [r for r in self.snapshot() if r.refused is not None]

    def tool_messages(self) -> list[dict[str, Any]]:
        """Every distinct ``role: tool`` message the model was sent (first sighting per
        ``tool_call_id``), each with ``"text"``: its content as a string."""
        seen: dict[str, dict[str, Any]] = {}
        for body in self.completions():
            for msg in body.get("messages") or []:
                if msg.get("role") == "tool":
                    seen.setdefault(str(msg.get("tool_call_id")), {**msg, "text": message_text(msg)})
        return list(seen.values())

    def tool_message(self, tool_call_id: str) -> dict[str, Any] | None:
        return next((m for m in self.tool_messages() if m.get("tool_call_id") == tool_call_id), None)

    def tool_call_ids(self) -> list[str]:
        """Ids of the tool calls this fake has sent so far, in order."""
        return [b["tool_call"]["id"] for r in self.snapshot() for b in r.reply or [] if "tool_call" in b]

    # ------------------------------------------------------------------ rendering
    def _resolve(self, blocks: list[Block]) -> str:
        """Fill in tool call ids and JSON arguments; returns the finish reason."""
        finish = None
        for b in blocks:
            if "tool_call" in b:
                tc = dict(b["tool_call"])
                tc.setdefault("id", f"call_fake_{next(self._ids):04d}")
                args = tc.get("arguments", {})
                tc["arguments"] = args if isinstance(args, str) else json.dumps(args)
                b["tool_call"] = tc
            elif "finish_reason" in b:
                finish = b["finish_reason"]
            elif not ("text" in b or "sleep" in b or "empty_stream" in b):
                raise ValueError(f"unknown fake reply block: {b!r}")
        if finish is None:
            finish = "tool_calls" if any("tool_call" in b for b in blocks) else "stop"
        return finish


class _Handler(JsonHandler):
    owner: FakeOpenAIChat
    server_version = "fake-openai-chat/1"

    def _route(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        body = self._read_body() if self.command in ("POST", "PUT", "PATCH") else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake = self.owner
        if self.command == "POST" and path.endswith("/chat/completions") and isinstance(body, dict):
            problem = empty_assistant_message(body) if fake.strict else None
            if problem is not None:
                fake._record(RecordedRequest(self.command, self.path, headers, body, refused=problem))
                self._send_json(400, {"error": {"message": problem, "type": "invalid_request_error", "param": "messages", "code": None}})
                return
            blocks = fake._next_reply(body)
            finish = fake._resolve(blocks)
            rec = RecordedRequest(self.command, self.path, headers, body, reply=blocks)
            fake._record(rec)
            model = str(body.get("model") or "fake-model")
            if body.get("stream"):
                rec.finished = self._stream(model, blocks, finish, estimate_tokens(body))
            else:
                time.sleep(sum(float(b["sleep"]) for b in blocks if "sleep" in b))
                self._send_json(200, _completion(model, blocks, finish, estimate_tokens(body)))
                rec.finished = True
            fake._touch()
            return
        fake._record(RecordedRequest(self.command, self.path, headers, body))
        if self.command == "GET" and path.endswith("/models"):
            seen = {str(r.body.get("model")) for r in fake.snapshot() if isinstance(r.body, dict) and r.body.get("model")}
            models = sorted(seen) or ["fake-model"]
            self._send_json(200, {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in models]})
        elif self.command in ("GET", "HEAD") and path in ("", "/"):
            self._send_json(200, {"ok": True})
        else:
            self._send_json(404, {"error": {"message": f"not found: {self.command} {path}", "type": "invalid_request_error"}})

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _route

    # -------------------------------------------------------------- SSE
    def _data(self, obj: Any) -> None:
        chunk = f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()

    def _stream(self, model: str, blocks: list[Block], finish: str, in_tokens: int) -> bool:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        cid = f"chatcmpl-fake-{uuid.uuid4().hex[:16]}"
        n = self.owner.chunk_size

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

        out_tokens = 0
        try:
            if any("empty_stream" in b for b in blocks):
                self._data("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                self.close_connection = True
                return True
            self._data(chunk({"role": "assistant", "content": ""}))
            tool_index = 0
            for b in blocks:
                if "sleep" in b:
                    time.sleep(float(b["sleep"]))
                elif "text" in b:
                    text = str(b["text"])
                    for i in range(0, len(text), n):
                        self._data(chunk({"content": text[i : i + n]}))
                    out_tokens += max(1, len(text) // 4)
                elif "tool_call" in b:
                    tc = b["tool_call"]
                    self._data(chunk({"tool_calls": [{"index": tool_index, "id": tc["id"], "type": "function", "function": {"name": tc["name"], "arguments": ""}}]}))
                    args = tc["arguments"]
                    for i in range(0, len(args), 3 * n):
                        self._data(chunk({"tool_calls": [{"index": tool_index, "function": {"arguments": args[i : i + 3 * n]}}]}))
                    tool_index += 1
                    out_tokens += max(1, len(args) // 4)
            self._data(chunk({}, finish))
            usage = {"prompt_tokens": in_tokens, "completion_tokens": max(1, out_tokens), "total_tokens": in_tokens + max(1, out_tokens)}
            self._data({"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model, "choices": [], "usage": usage})
            self._data("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            finished = True
        except (BrokenPipeError, ConnectionResetError):
            finished = False  # the client aborted the stream (the agent was cancelled)
        self.close_connection = True
        return finished


def _completion(model: str, blocks: list[Block], finish: str, in_tokens: int) -> dict[str, Any]:
    text = "".join(str(b["text"]) for b in blocks if "text" in b)
    calls = [{"id": b["tool_call"]["id"], "type": "function", "function": {"name": b["tool_call"]["name"], "arguments": b["tool_call"]["arguments"]}}
             for b in blocks if "tool_call" in b]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    out = max(1, len(text) // 4)
    return {"id": f"chatcmpl-fake-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": in_tokens, "completion_tokens": out, "total_tokens": in_tokens + out}}


FakeOpenAIChat.handler = _Handler
