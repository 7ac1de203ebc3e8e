"""A scripted fake of the Gemini API (``generativelanguage.googleapis.com``), for driving
the real gemini-cli offline.

gemini-cli 0.61.0 (``GOOGLE_GEMINI_BASE_URL=<fake.url>``, ``GEMINI_API_KEY=x``) calls only
``POST /v1beta/models/<model>:streamGenerateContent?alt=sse``. This server answers it from
a script::

    with FakeGemini(replies=[
        [{"text": "I'll create it."}, {"call": {"name": "run_shell_command", "args": {"command": "touch x"}}}],
        [{"text": "Created."}],
    ]) as fake:
        env = gemini_agent_env(home, fake.url)
        ...
        (response,) = fake.function_responses()
        assert "touch x" in json.dumps(fake.main_requests()[-1])

Each *reply* answers one ``streamGenerateContent`` request and is a list of blocks:

* ``{"text": "..."}``: text, streamed as a few chunks (``chunk_size`` characters each);
* ``{"call": {"name": ..., "args": {...}}}``: a ``functionCall`` part (gemini-cli's shell
  tool is ``run_shell_command {"command": ...}``; an MCP tool ``t`` of server ``s`` is
  ``mcp_s_t``);
* ``{"thought": "..."}``: a thought summary part (``{"text": ..., "thought": true}``; gemini-cli
  shows ``**Subject**`` at its start as the subject);
* ``{"sleep": seconds}``: pause the stream there (to cancel mid-stream).

A reply may also be a callable ``f(body) -> list[block]``. When the script is exhausted,
every further request is answered ``done_text`` ("Done.").

``strict`` (default on) makes the fake refuse what the real API refuses: a model turn
with function calls that is not followed by a user turn holding exactly as many function
responses. The real API answers HTTP 400 INVALID_ARGUMENT; so does the fake (and does not
consume the script). That is what gemini-cli sends after a cancel at a permission
(docs/agents.md).

Every request, answered or refused, is recorded (thread-safe) in
:attr:`FakeGemini.requests`; unknown paths are logged there too (kind ``"other"``) and
answered 404, ``:countTokens`` with an estimate and ``:generateContent`` with the next
reply as one JSON response.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.scripted_server import Block, JsonHandler, Reply, ScriptedServer

__all__ = ["FakeGemini", "RecordedRequest", "check_function_pairing", "function_declarations", "texts", "DONE_TEXT", "PAIRING_ERROR"]

DONE_TEXT = "Done."
PAIRING_ERROR = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)



@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON (dict) or raw text, or None
    kind: str  # "stream" | "generate" | "count_tokens" | "refused" | "other"
    model: str = ""
    time: float = field(default_factory=time.monotonic)
    reply: list[Block] | None = None


def check_function_pairing(body: Any) -> str | None:
    """What the real API would refuse in ``contents`` (``None``: nothing)."""
    contents = body.get("contents") if isinstance(body, dict) else None
    if not isinstance(contents, list):
        return None
    for index, content in enumerate(contents):
        parts = content.get("parts") if isinstance(content, dict) else None
        calls = [p for p in parts or [] if isinstance(p, dict) and "functionCall" in p]
        if not calls or content.get("role") != "model":
            continue
        after = contents[index + 1] if index + 1 < len(contents) else None
        after_parts = after.get("parts") if isinstance(after, dict) else None
        responses = [p for p in after_parts or [] if isinstance(p, dict) and "functionResponse" in p]
        if after is None:
            continue  # the last turn: nothing was asked of it yet
        if len(responses) != len(calls):
            return PAIRING_ERROR
    return None


class FakeGemini(ScriptedServer):
    """Fake Gemini API on ``127.0.0.1`` (random port) in a background thread, a thread per request."""

    thread_name = "fake-gemini"

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        done_text: str = DONE_TEXT,
        chunk_size: int = 12,
        strict: bool = True,
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(replies, done_text=done_text, chunk_size=chunk_size, host=host)
        self.strict = strict

    @property
    def url(self) -> str:
        """Base URL for ``GOOGLE_GEMINI_BASE_URL`` (no trailing slash, no ``/v1beta``)."""
        return f"http://{self._host}:{self.port}"

    # ------------------------------------------------------------------ queries
    def main_requests(self) -> list[dict[str, Any]]:
        """Bodies of the answered ``streamGenerateContent``/``generateContent`` requests, in order."""
        return [r.body for r in self.snapshot() if r.kind in ("stream", "generate")]

    def refused(self) -> list[RecordedRequest]:
        """The requests answered 400 (see ``strict``)."""
        return [r for r in self.snapshot() if r.kind == "refused"]

    def other(self) -> list[RecordedRequest]:
        return [r for r in self.snapshot() if r.kind == "other"]

    def function_responses(self) -> list[dict[str, Any]]:
        """Every distinct ``functionResponse`` the model was sent (first sighting per
        (id, name)), as sent: ``{"id"?, "name", "response": {...}}``."""
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for body in self.main_requests():
            for content in body.get("contents") or []:
                for part in content.get("parts") or []:
                    response = part.get("functionResponse") if isinstance(part, dict) else None
                    if isinstance(response, dict):
                        seen.setdefault((str(response.get("id")), str(response.get("name"))), response)
        return list(seen.values())
def texts(body: dict[str, Any], role: str | None = None) -> list[str]:
    """The text parts of a request's ``contents`` (of one ``role``: ``user``/``model``)."""
    out = []
    for content in body.get("contents") or []:
        if role is not None and content.get("role") != role:
            continue
        for part in content.get("parts") or []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
    return out


def function_declarations(body: dict[str, Any]) -> list[str]:
    """The names of the functions a request offers the model."""
    names = []
    for tool in body.get("tools") or []:
        for decl in tool.get("functionDeclarations") or [] if isinstance(tool, dict) else []:
            if isinstance(decl, dict):
                names.append(str(decl.get("name")))
    return names


def _usage(body: Any, out_tokens: int) -> dict[str, int]:
    try:
        prompt = max(1, len(json.dumps(body)) // 4)
    except (TypeError, ValueError):
        prompt = 1
    return {"promptTokenCount": prompt, "candidatesTokenCount": out_tokens, "totalTokenCount": prompt + out_tokens}


class _Handler(JsonHandler):
    owner: FakeGemini
    json_content_type = "application/json; charset=UTF-8"
    server_version = "fake-gemini/1"

    def _error(self, status: int, message: str, code: str) -> None:
        self._send_json(status, {"error": {"code": status, "message": message, "status": code}})

    def _route(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        body = self._read_body() if self.command in ("POST", "PUT", "PATCH") else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake = self.owner
        model, _, action = path.rpartition("/")[2].partition(":")
        is_model_call = self.command == "POST" and "/models/" in path and isinstance(body, dict)
        if is_model_call and action in ("streamGenerateContent", "generateContent"):
            problem = check_function_pairing(body) if fake.strict else None
            if problem is not None:
                fake._record(RecordedRequest(self.command, self.path, headers, body, "refused", model))
                self._error(400, problem, "INVALID_ARGUMENT")
                return
            blocks = fake._next_reply(body)
            kind = "stream" if action == "streamGenerateContent" else "generate"
            fake._record(RecordedRequest(self.command, self.path, headers, body, kind, model, reply=blocks))
            if kind == "stream":
                self._stream(model, blocks, body)
            else:
                time.sleep(sum(float(b["sleep"]) for b in blocks if "sleep" in b))
                parts = [p for p in (_part(b) for b in blocks) if p is not None]
                self._send_json(200, _chunk(model, parts, "STOP", _usage(body, 1)))
            return
        if is_model_call and action == "countTokens":
            fake._record(RecordedRequest(self.command, self.path, headers, body, "count_tokens", model))
            self._send_json(200, {"totalTokens": _usage(body, 0)["promptTokenCount"]})
            return
        fake._record(RecordedRequest(self.command, self.path, headers, body, "other", model))
        self._error(404, f"fake-gemini: no route for {self.command} {path}", "NOT_FOUND")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _route

    # -------------------------------------------------------------- SSE
    def _data(self, obj: dict[str, Any]) -> None:
        chunk = f"data: {json.dumps(obj)}\r\n\r\n".encode()
        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()

    def _stream(self, model: str, blocks: list[Block], body: Any) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        n = self.owner.chunk_size
        out_tokens = 0
        pending: list[dict[str, Any]] = []  # function calls go out in the last chunk, as the API does
        try:
            for block in blocks:
                if "sleep" in block:
                    time.sleep(float(block["sleep"]))
                elif "thought" in block:
                    self._data(_chunk(model, [{"text": str(block["thought"]), "thought": True}], None, None))
                elif "text" in block:
                    text = str(block["text"])
                    for i in range(0, len(text), n) or [0]:
                        self._data(_chunk(model, [{"text": text[i : i + n]}], None, None))
                    out_tokens += max(1, len(text) // 4)
                else:
                    part = _part(block)
                    if part is None:
                        raise ValueError(f"unknown fake reply block: {block!r}")
                    pending.append(part)
                    out_tokens += max(1, len(json.dumps(part)) // 4)
            self._data(_chunk(model, pending, "STOP", _usage(body, max(1, out_tokens))))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client aborted the stream (the agent was cancelled)
        self.close_connection = True


def _part(block: Block) -> dict[str, Any] | None:
    if "text" in block:
        return {"text": str(block["text"])}
    if "call" in block:
        call = block["call"]
        return {"functionCall": {"name": call["name"], "args": dict(call.get("args") or {})}}
    return None


def _chunk(model: str, parts: list[dict[str, Any]], finish: str | None, usage: dict[str, int] | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": uuid.uuid4().hex[:22]}
    if usage is not None:
        out["usageMetadata"] = usage
    return out


FakeGemini.handler = _Handler
