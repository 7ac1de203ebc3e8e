"""A scripted fake of the OpenAI **Responses** API, for driving codex-acp offline.

codex (inside ``@zed-industries/codex-acp``) with ``wire_api = "responses"`` and
``base_url = "<url>/v1"`` streams every model turn from ``POST /v1/responses``. This
server answers it from a script::

    with FakeResponses([
        [{"text": "I'll create it."}, exec_command(f"touch {marker}")],
        [{"text": "Created."}],
    ]) as fake:
        ...
        assert "exit code 0" in fake.function_call_outputs()[0]["output"].lower()

Each *reply* answers one ``POST /v1/responses`` and is a list of blocks:

* ``{"text": "..."}``: an assistant message (streamed as a few
  ``response.output_text.delta`` events);
* ``{"function_call": {"name": ..., "arguments": {...} or "json", "call_id": optional, ...}}``:
  a function call (other keys, e.g. ``namespace``, go into the item as they are) (streamed as ``response.function_call_arguments.delta`` events; the id
  ``call_fake_<n>`` is generated unless given). codex's shell tool is
  ``exec_command {"cmd": "..."}`` (see :func:`exec_command`);
* ``{"custom_tool_call": {"name": ..., "input": "text", "call_id": optional}}``: a call of a
  freeform tool (streamed as ``response.custom_tool_call_input.delta`` events). codex's edit
  tool ``apply_patch`` is one for gpt-5.5 (see :func:`apply_patch`);
* ``{"tool_search_call": {"query": ..., "limit": optional}}``: a call of codex's client-side
  ``tool_search`` (codex 0.166 defers MCP tools, the VS Code tools among them: a request
  offers their namespace only in the ``tool_search_output`` that answers it);
* ``{"reasoning": "..."}``: a reasoning item with that summary text;
* ``{"sleep": seconds}``: pause the stream at that point (to cancel mid-stream);
* ``{"fail": {"status": 400, "message": "...", "type": ..., "code": ...}}``: answer the
  request with that HTTP error (an OpenAI error body) instead of a stream; the reply's
  other blocks are ignored.

A reply may also be a callable ``f(body) -> list[block]``. When the script is exhausted
every further request is answered ``"Done."``. A scripted function call in a ``namespace``
the request has not loaded (:func:`namespaces`) while it offers ``tool_search`` is preceded,
as a real model's is, by a ``tool_search_call`` for it: that request is answered with the
search alone and the scripted reply kept for the next (``auto_tool_search``).

SSE events, in order: ``response.created``, ``response.in_progress``, then per item
``response.output_item.added``, its deltas (``response.output_text.delta`` or
``response.function_call_arguments.delta``/``.done``), ``response.output_item.done``, and
finally ``response.completed`` with usage.

codex also makes *side requests* on ``POST /v1/responses``, told apart from the main turn
by their structured output (``text.format`` a JSON schema; the main turn has none) and
answered **without consuming the script** (seen with codex-acp 2.6.0 / codex 0.166.0,
:func:`classify_request`):

* ``"title"``: the thread's title (model gpt-5.6-luna, no tools, schema ``{"title": string}``)
  after the first turn; answered ``{"title": side_text}``.
* ``"reviewer"``: mode ``agent`` ("Auto review") sends an action the model asks to run
  outside the sandbox to a reviewer model (developer message "You are judging one planned
  coding-agent action", read-only tools, schema with ``outcome`` allow/deny); answered
  ``{"outcome": reviewer_outcome, ...}`` (default ``"allow"``, as a permissive real reviewer
  would: the fake never makes that mode look safer than it is). (Answered with anything
  unparseable, codex denies the action.)
* ``"suggestion"``: a prompt suggestion (schema ``{"suggestion": string|null}``; codex-acp
  asks only for AIR clients); answered ``{"suggestion": null}``.
* ``"side"``: any other structured-output request, answered from its schema.

Every request (any method, any path) is recorded (thread-safe) in
:attr:`FakeResponses.requests`; ``GET /v1/models`` gets an empty model list, any other
unknown path a 404 (and a note in :attr:`FakeResponses.unknown`).
"""

from __future__ import annotations

import gzip
import itertools
import json
import time
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.scripted_server import Block, JsonHandler, Reply, ScriptedServer, estimate_tokens

__all__ = ["DONE_TEXT", "SIDE_TEXT", "FakeResponses", "RecordedRequest", "add_file", "apply_patch", "classify_request", "escalated_command", "exec_command", "input_texts", "namespaces"]

DONE_TEXT = "Done."
SIDE_TEXT = "Fake title"
_REVIEWER_MARKER = "You are judging one planned coding-agent action"



def exec_command(cmd: str, **extra: Any) -> Block:
    """A function call of codex's shell tool."""
    return {"function_call": {"name": "exec_command", "arguments": {"cmd": cmd, **extra}}}


def escalated_command(cmd: str, justification: str = "Do you allow this command to run outside the sandbox?", **extra: Any) -> Block:
    """A call of codex's shell tool asking to leave its sandbox (``sandbox_permissions:
    "require_escalated"`` with a ``justification``, as codex 0.166's ``exec_command`` schema
    offers): what a model sends for a command that must write or reach the network. In
    codex-acp's ``read-only`` mode it is the one kind of command codex asks about (a card);
    a plain :func:`exec_command` runs unasked in the read-only sandbox."""
    return exec_command(cmd, sandbox_permissions="require_escalated", justification=justification, **extra)


def apply_patch(patch: str) -> Block:
    """A call of codex's freeform edit tool: ``patch`` in its grammar
    (``*** Begin Patch`` … ``*** End Patch``)."""
    return {"custom_tool_call": {"name": "apply_patch", "input": patch}}


def add_file(path: str, text: str) -> Block:
    """``apply_patch`` adding the file ``path`` (absolute) with ``text``'s lines."""
    lines = "".join(f"+{line}\n" for line in text.splitlines())
    return apply_patch(f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n")


def namespaces(body: dict[str, Any]) -> dict[str, list[str]]:
    """The tool namespaces a request offers the model, each with its tools' names: in
    ``tools``, and those ``tool_search`` loaded (``tool_search_output`` items of ``input``)."""
    found: dict[str, list[str]] = {}
    outputs = [i for i in body.get("input") or [] if isinstance(i, dict) and i.get("type") == "tool_search_output"]
    for tool in [*(body.get("tools") or []), *(t for o in outputs for t in o.get("tools") or [])]:
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            found.setdefault(str(tool.get("name")), []).extend(str(t.get("name")) for t in tool.get("tools") or [] if isinstance(t, dict))
    return found


def input_texts(body: dict[str, Any], role: str | None = None) -> list[str]:
    """The text of every message item of a request's ``input`` (of ``role`` if given), in order."""
    out = []
    for item in body.get("input") or []:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            continue
        if role is not None and item.get("role") != role:
            continue
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.append("".join(str(c.get("text", "")) for c in content if isinstance(c, dict)))
    return out


def _schema(body: dict[str, Any]) -> dict[str, Any] | None:
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        return fmt["schema"]
    return None


def classify_request(body: dict[str, Any]) -> str:
    """What a ``POST /v1/responses`` is: ``"responses"`` for a turn of the scripted
    conversation, ``"title"``, ``"reviewer"``, ``"suggestion"`` or ``"side"`` for a side
    request (module docstring)."""
    schema = _schema(body)
    if schema is None:
        return "responses"
    props = schema.get("properties") or {}
    if "outcome" in props and any(_REVIEWER_MARKER in t for t in input_texts(body)):
        return "reviewer"
    if "title" in props:
        return "title"
    if "suggestion" in props:
        return "suggestion"
    return "side"


def _schema_answer(schema: Any, text: str) -> Any:
    """A value of JSON schema ``schema``: strings ``text``, the first enum value, null where
    allowed, false, 0, and every property of an object."""
    if not isinstance(schema, dict):
        return text
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if schema.get("enum"):
        return schema["enum"][0]
    if "object" in kinds or "properties" in schema:
        return {k: _schema_answer(v, text) for k, v in (schema.get("properties") or {}).items()}
    if "null" in kinds:
        return None
    if "string" in kinds:
        return text
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
    kind: str  # "responses" (the main turn) | "title" | "reviewer" | "suggestion" | "side" | "other"
    time: float = field(default_factory=time.monotonic)
    reply: list[Block] | None = None  # the blocks it was answered with (responses only)


class FakeResponses(ScriptedServer):
    """Fake OpenAI Responses API on ``127.0.0.1`` (random port) in a background thread."""

    thread_name = "fake-responses"

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        done_text: str = DONE_TEXT,
        side_text: str = SIDE_TEXT,
        reviewer_outcome: str = "allow",
        auto_tool_search: bool = True,
        chunk_size: int = 12,
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(replies, done_text=done_text, chunk_size=chunk_size, host=host)
        self.side_text = side_text
        self.auto_tool_search = auto_tool_search
        self._held: list[Block] | None = None  # a scripted reply held back while tool_search runs
        #: The auto reviewer's verdict, "allow" or "deny" (module docstring).
        self.reviewer_outcome = reviewer_outcome

    @property
    def url(self) -> str:
        """The provider's ``base_url``: ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self._host}:{self.port}/v1"

    # ------------------------------------------------------------------ queries
    def responses_requests(self) -> list[dict[str, Any]]:
        """Bodies of the main-turn ``POST /v1/responses`` requests (no side requests), in order."""
        return [r.body for r in self.snapshot() if r.kind == "responses"]

    def side_requests(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Bodies of the side requests (of ``kind``: ``"title"``, ``"reviewer"``,
        ``"suggestion"``, ``"side"``), in order."""
        side = ("title", "reviewer", "suggestion", "side")
        return [r.body for r in self.snapshot() if r.kind in side and (kind is None or r.kind == kind)]

    def _main_reply(self, body: dict[str, Any]) -> list[Block]:
        """The next scripted reply, or first a ``tool_search_call`` for the namespaces it calls
        and the request has not loaded (module docstring); a reply is held back once at most."""
        with self._lock:
            held, self._held = self._held, None
        blocks = held if held is not None else self._next_reply(body)
        offers_search = any(isinstance(t, dict) and t.get("type") == "tool_search" for t in body.get("tools") or [])
        if self.auto_tool_search and held is None and offers_search:
            loaded = namespaces(body)
            wanted = [b["function_call"] for b in blocks if "function_call" in b and b["function_call"].get("namespace")]
            missing = [fc["name"] for fc in wanted if fc["name"] not in loaded.get(fc["namespace"], [])]
            if missing:
                with self._lock:
                    self._held = blocks
                return [{"tool_search_call": {"query": " ".join(dict.fromkeys(missing)), "limit": 8}}]
        return blocks

    def _side_reply(self, kind: str, body: dict[str, Any]) -> list[Block]:
        """The answer to a side request of ``kind`` (module docstring): one JSON message."""
        if kind == "reviewer":
            verdict: Any = {"risk_level": "low", "user_authorization": "high", "outcome": self.reviewer_outcome, "rationale": "The fake reviewer's verdict."}
        elif kind == "suggestion":
            verdict = {"suggestion": None}
        else:
            verdict = _schema_answer(_schema(body), self.side_text)
        return [{"text": json.dumps(verdict)}]

    def function_call_outputs(self) -> list[dict[str, Any]]:
        """Every distinct ``function_call_output`` (or ``custom_tool_call_output``) item the
        model was sent (first sighting per call_id), with ``"text"``: its output flattened to
        a string."""
        seen: dict[str, dict[str, Any]] = {}
        for body in self.responses_requests():
            for item in body.get("input") or []:
                if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
                    call_id = str(item.get("call_id"))
                    if call_id not in seen:
                        seen[call_id] = {**item, "text": _flatten(item.get("output"))}
        return list(seen.values())

    def function_call_output(self, call_id: str) -> dict[str, Any] | None:
        return next((o for o in self.function_call_outputs() if o.get("call_id") == call_id), None)

    def call_ids(self) -> list[str]:
        """Ids of the function (and custom tool) calls this fake has sent so far."""
        calls = ("function_call", "custom_tool_call")
        return [b[k]["call_id"] for r in self.snapshot() for b in r.reply or [] for k in calls if k in b]

    def _resolve(self, blocks: list[Block]) -> list[Block]:
        """Fill generated ids into function calls (in place, so :meth:`call_ids` sees them)."""
        for b in blocks:
            if "function_call" in b:
                fc = dict(b["function_call"])
                fc.setdefault("call_id", f"call_fake_{next(self._ids):04d}")
                args = fc.get("arguments", {})
                fc["arguments"] = args if isinstance(args, str) else json.dumps(args)
                b["function_call"] = fc
            elif "tool_search_call" in b:
                ts = dict(b["tool_search_call"])
                ts.setdefault("call_id", f"call_fake_{next(self._ids):04d}")
                b["tool_search_call"] = ts
            elif "custom_tool_call" in b:
                ct = dict(b["custom_tool_call"])
                ct.setdefault("call_id", f"call_fake_{next(self._ids):04d}")
                b["custom_tool_call"] = ct
            elif not any(k in b for k in ("text", "reasoning", "sleep", "fail")):
                raise ValueError(f"unknown fake reply block: {b!r}")
        return blocks


def _flatten(output: Any) -> str:
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(_flatten(c.get("text") if isinstance(c, dict) else c) for c in output)
    if isinstance(output, dict):
        return _flatten(output.get("content") if "content" in output else json.dumps(output))
    return str(output)


class _Handler(JsonHandler):
    owner: FakeResponses
    server_version = "fake-openai-responses/1"

    def _read_body(self) -> Any:
        raw = self._raw_body()
        encoding = (self.headers.get("content-encoding") or "").lower()
        if raw and encoding == "gzip":
            raw = gzip.decompress(raw)
        elif raw and encoding == "deflate":
            raw = zlib.decompress(raw)
        elif raw and encoding == "zstd":
            return {"_undecoded": "zstd", "_bytes": len(raw)}
        return self._parse(raw)

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        super()._send_json(status, obj, {"x-request-id": f"req_fake_{uuid.uuid4().hex[:16]}", **(headers or {})})

    def _route(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        body = self._read_body() if self.command in ("POST", "PUT", "PATCH") else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake = self.owner
        if self.command == "POST" and path == "/v1/responses" and isinstance(body, dict):
            kind = classify_request(body)
            blocks = fake._resolve(fake._main_reply(body) if kind == "responses" else fake._side_reply(kind, body))
            rec = RecordedRequest(self.command, self.path, headers, body, kind, reply=blocks)
            fake._record(rec)
            failure = next((b["fail"] for b in blocks if "fail" in b), None)
            if failure is not None:
                error = {
                    "message": failure.get("message", "fake failure"),
                    "type": failure.get("type", "invalid_request_error"),
                    "param": None,
                    "code": failure.get("code"),
                }
                self._send_json(int(failure.get("status", 400)), {"error": error})
                return
            self._stream(str(body.get("model") or "gpt-fake"), blocks, estimate_tokens(body))
            return
        fake._record(RecordedRequest(self.command, self.path, headers, body, "other"))
        if self.command == "GET" and path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [], "models": []})
            return
        with fake._lock:
            fake.unknown.append(f"{self.command} {self.path}")
        self._send_json(404, {"error": {"message": f"fake: no route {self.command} {path}", "type": "not_found", "param": None, "code": None}})

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _route

    # -------------------------------------------------------------- SSE
    def _event(self, data: dict[str, Any]) -> None:
        chunk = f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()
        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()

    def _stream(self, model: str, blocks: list[Block], in_tokens: int) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-request-id", f"req_fake_{uuid.uuid4().hex[:16]}")
        self.end_headers()
        n = self.owner.chunk_size
        response_id = f"resp_fake_{uuid.uuid4().hex[:20]}"
        response: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": model,
            "output": [],
            "usage": None,
        }
        seq = itertools.count()
        output: list[dict[str, Any]] = []
        out_tokens = 0
        try:
            self._event({"type": "response.created", "response": dict(response), "sequence_number": next(seq)})
            self._event({"type": "response.in_progress", "response": dict(response), "sequence_number": next(seq)})
            for block in blocks:
                if "sleep" in block:
                    time.sleep(float(block["sleep"]))
                    continue
                index = len(output)
                item_id = f"item_fake_{uuid.uuid4().hex[:16]}"
                if "text" in block:
                    text = str(block["text"])
                    item: dict[str, Any] = {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}
                    self._event({"type": "response.output_item.added", "output_index": index, "item": item, "sequence_number": next(seq)})
                    part = {"type": "output_text", "text": "", "annotations": []}
                    self._event({"type": "response.content_part.added", "item_id": item_id, "output_index": index, "content_index": 0, "part": part, "sequence_number": next(seq)})
                    for i in range(0, len(text), n) or [0]:
                        self._event({"type": "response.output_text.delta", "item_id": item_id, "output_index": index, "content_index": 0, "delta": text[i : i + n], "sequence_number": next(seq)})
                    self._event({"type": "response.output_text.done", "item_id": item_id, "output_index": index, "content_index": 0, "text": text, "sequence_number": next(seq)})
                    part = {"type": "output_text", "text": text, "annotations": []}
                    self._event({"type": "response.content_part.done", "item_id": item_id, "output_index": index, "content_index": 0, "part": part, "sequence_number": next(seq)})
                    item = {**item, "status": "completed", "content": [part]}
                    out_tokens += max(1, len(text) // 4)
                elif "reasoning" in block:
                    summary = str(block["reasoning"])
                    item = {"type": "reasoning", "id": item_id, "summary": []}
                    self._event({"type": "response.output_item.added", "output_index": index, "item": item, "sequence_number": next(seq)})
                    empty = {"type": "summary_text", "text": ""}
                    self._event({"type": "response.reasoning_summary_part.added", "item_id": item_id, "output_index": index, "summary_index": 0, "part": empty, "sequence_number": next(seq)})
                    self._event({"type": "response.reasoning_summary_text.delta", "item_id": item_id, "output_index": index, "summary_index": 0, "delta": summary, "sequence_number": next(seq)})
                    self._event({"type": "response.reasoning_summary_text.done", "item_id": item_id, "output_index": index, "summary_index": 0, "text": summary, "sequence_number": next(seq)})
                    item = {**item, "summary": [{"type": "summary_text", "text": summary}]}
                    out_tokens += max(1, len(summary) // 4)
                elif "function_call" in block:
                    fc = block["function_call"]
                    args = fc["arguments"]
                    extra = {k: v for k, v in fc.items() if k not in ("name", "arguments", "call_id")}  # e.g. namespace
                    item = {"type": "function_call", "id": item_id, "call_id": fc["call_id"], "name": fc["name"], **extra, "arguments": "", "status": "in_progress"}
                    self._event({"type": "response.output_item.added", "output_index": index, "item": item, "sequence_number": next(seq)})
                    for i in range(0, len(args), 3 * n):
                        self._event({"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": index, "delta": args[i : i + 3 * n], "sequence_number": next(seq)})
                    self._event({"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": index, "arguments": args, "sequence_number": next(seq)})
                    item = {**item, "arguments": args, "status": "completed"}
                    out_tokens += max(1, len(args) // 4)
                elif "tool_search_call" in block:
                    ts = block["tool_search_call"]
                    args = {"query": ts["query"], "limit": ts.get("limit", 8)}
                    item = {"type": "tool_search_call", "id": item_id, "call_id": ts["call_id"], "execution": "client", "arguments": args, "status": "in_progress"}
                    self._event({"type": "response.output_item.added", "output_index": index, "item": item, "sequence_number": next(seq)})
                    item = {**item, "status": "completed"}
                elif "custom_tool_call" in block:
                    ct = block["custom_tool_call"]
                    text = str(ct["input"])
                    item = {"type": "custom_tool_call", "id": item_id, "call_id": ct["call_id"], "name": ct["name"], "input": "", "status": "in_progress"}
                    self._event({"type": "response.output_item.added", "output_index": index, "item": item, "sequence_number": next(seq)})
                    for i in range(0, len(text), 3 * n):
                        self._event({"type": "response.custom_tool_call_input.delta", "item_id": item_id, "output_index": index, "delta": text[i : i + 3 * n], "sequence_number": next(seq)})
                    self._event({"type": "response.custom_tool_call_input.done", "item_id": item_id, "output_index": index, "input": text, "sequence_number": next(seq)})
                    item = {**item, "input": text, "status": "completed"}
                    out_tokens += max(1, len(text) // 4)
                else:
                    continue
                self._event({"type": "response.output_item.done", "output_index": index, "item": item, "sequence_number": next(seq)})
                output.append(item)
            usage = {
                "input_tokens": in_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": max(1, out_tokens),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": in_tokens + max(1, out_tokens),
            }
            done = {**response, "status": "completed", "output": output, "usage": usage}
            self._event({"type": "response.completed", "response": done, "sequence_number": next(seq)})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client aborted the stream (the agent was interrupted)
        self.close_connection = True


FakeResponses.handler = _Handler
