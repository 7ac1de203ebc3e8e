"""What every fake model API here shares (fake_anthropic, fake_gemini, fake_openai_chat,
fake_openai_responses): a ``ThreadingHTTPServer`` on 127.0.0.1 (random port) in a
background thread, a script of replies (each a list of blocks, or a callable of the
request body; ``done_text`` once it runs out), and every request recorded under one lock
(``snapshot``, ``wait_for``).

A fake subclasses ``ScriptedServer`` with its ``handler`` (a ``JsonHandler`` whose
``owner`` is set to the fake) and its ``url``; the handler does the API's own routing
and streaming.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

Block = dict[str, Any]
Reply = list[Block] | Callable[[dict[str, Any]], list[Block]]


def estimate_tokens(body: Any) -> int:
    """A request's size in tokens, roughly (4 characters a token; at least 1)."""
    try:
        return max(1, len(json.dumps(body)) // 4)
    except (TypeError, ValueError):
        return 1


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler reading and writing JSON; ``owner`` is the fake serving it."""

    owner: Any
    protocol_version = "HTTP/1.1"
    json_content_type = "application/json"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _raw_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _read_body(self) -> Any:
        """The request's JSON body; its text when it is not JSON; None when empty."""
        return self._parse(self._raw_body())

    @staticmethod
    def _parse(raw: bytes) -> Any:
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", self.json_content_type)
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


class ScriptedServer:
    """The server, the script and the record of requests (see the module docstring)."""

    handler: ClassVar[type[JsonHandler]]
    thread_name: ClassVar[str] = "fake-model-api"

    def __init__(self, replies: Iterable[Reply] = (), *, done_text: str, chunk_size: int = 12, host: str = "127.0.0.1") -> None:
        self._script: list[Reply] = list(replies)
        self.done_text = done_text
        self.chunk_size = max(1, chunk_size)
        self._host = host
        self._lock = threading.Condition()
        self._ids = itertools.count(1)
        self.requests: list[Any] = []
        self.unknown: list[str] = []  # "METHOD path" of requests nothing here answers
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        if self._server is not None:
            return self
        handler = type("Handler", (self.handler,), {"owner": self})
        self._server = ThreadingHTTPServer((self._host, 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, f"{type(self).__name__} not started"
        return self._server.server_address[1]

    # ------------------------------------------------------------------ script
    def add_replies(self, *replies: Reply) -> None:
        """Append replies to the script (may be called mid-test)."""
        with self._lock:
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def _next_reply(self, body: dict[str, Any]) -> list[Block]:
        """The next reply's blocks (a callable reply is called with the request body);
        one text block of ``done_text`` once the script has run out."""
        with self._lock:
            reply = self._script.pop(0) if self._script else None
        if reply is None:
            return [{"text": self.done_text}]
        if callable(reply):
            reply = reply(body)
        return [dict(b) for b in reply]

    # ------------------------------------------------------------------ the record
    def _record(self, rec: Any) -> None:
        with self._lock:
            self.requests.append(rec)
            self._lock.notify_all()

    def _touch(self) -> None:
        """Wake ``wait_for`` (a recorded request changed)."""
        with self._lock:
            self._lock.notify_all()

    def snapshot(self) -> list[Any]:
        with self._lock:
            return list(self.requests)

    def wait_for(self, predicate: Callable[[list[Any]], bool], timeout: float = 10.0) -> bool:
        """Block (thread) until ``predicate(requests)`` holds; returns False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(list(self.requests)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True
