"""The daemon as a subprocess, fed raw lines, with every frame it writes checked.

``FuzzDaemon`` is plain threads and blocking pipes (no event loop), so a hypothesis
test can keep one daemon across examples and the soak run can write as fast as the
pipe takes it. A reader thread checks each frame as it arrives (``Ledger``):

* stdout holds JSON objects only;
* every id in ``expected_ids`` of a line sent is answered exactly once, and nothing is
  answered that was not asked (``violations``);
* no ``lm/responsePart`` comes for a request that is not in flight.

Answers are timed from the write of their line: ``latency_max`` (seconds), over the answers
whose ask is known (an id asked again while still owed is not timed until all its answers came);
``slowest_single`` and ``slowest_in_batch`` the same for a request on a line of its own and for
an element of a batch (JSON-RPC lets a batch's answer wait for its slowest element; the daemon
answers each element on its own, as soon as it is done: docs/reliability.md).
Counted for the soak's figures: the answers owed (``requests``), the most owed at once
(``owed_max``), answers nobody was owed (``answered_twice``), and how long the writes to the
daemon's stdin waited on the pipe (``FuzzDaemon.write_seconds``: the daemon's push-back).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.conftest import is_watchdog
from tests.fuzz.frames import expected_ids


def _key(rid: Any) -> tuple[str, Any]:
    return ("s", rid) if isinstance(rid, str) else ("n", rid)


def _method(line: bytes) -> str:
    """The first method a request line names ("?": none)."""
    method = re.search(rb'"method"\s*:\s*"([^"]{1,80})"', line)
    return method.group(1).decode("utf-8", "replace") if method else "?"


def _element_method(line: bytes, rid: Any) -> str | None:
    """The method of the element with id ``rid`` of a batch line (None: not found, or the
    line was kept only in part)."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    for element in value if isinstance(value, list) else ():
        if isinstance(element, dict) and _key(element.get("id")) == _key(rid):
            return str(element.get("method", "(none)"))[:80]
    return None


class Slowest:
    """The slowest answer of a kind: ``seconds``, its request's first ``method``, its
    request's and its answer's start (``lines``); ``over_10s``: answers that took longer."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.method = ""
        self.lines: tuple[bytes, bytes] = (b"", b"")
        self.answers = 0
        self.over_10s = 0

    def saw(self, seconds: float, asked: bytes, answer: bytes, rid: Any = None) -> None:
        self.answers += 1
        self.over_10s += seconds > 10
        if seconds > self.seconds:
            method = _element_method(asked, rid) if asked.lstrip()[:1] == b"[" else None
            self.seconds, self.method, self.lines = seconds, method or _method(asked), (asked[:1000], answer[:1000])

    def figures(self) -> dict[str, Any]:
        return {"answers_timed": self.answers, "latency_max_s": round(self.seconds, 2), "method": self.method, "over_10s": self.over_10s,
                "request": self.lines[0].decode("utf-8", "replace"), "answer": self.lines[1].decode("utf-8", "replace")}


class Ledger:
    """What was asked and what was answered, by id. Thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.expected: Counter[tuple[str, Any]] = Counter()  # answers still owed, by id
        # When the ask of each id still owed was written; None once the id is asked again while
        # owed (the fuzzer reuses ids: which ask an answer is for cannot be told, and it is not
        # timed). ``latency_max`` times only answers whose ask is known.
        self.sent_at: dict[tuple[str, Any], float | None] = {}
        self.lines: dict[tuple[str, Any], bytes] = {}  # the start of each line still owed an answer
        self.parts: dict[tuple[str, Any], list[dict[str, Any]]] = {}
        self.violations: list[str] = []
        self.frames_in = 0
        self.answers = 0
        self.null_answers = 0  # errors with "id": null (unreadable requests)
        self.requests = 0  # answers owed by id, over the run (a line may owe several: a batch)
        self.owing = 0  # answers owed now
        self.owed_max = 0  # the most owed at once (read and waiting, or still in the pipe)
        self.answered_twice = 0  # answers nobody was owed (twice, or never asked)
        self.latency_max = 0.0
        self.slowest = ""  # the method of the slowest answer's request
        self.slowest_lines: tuple[bytes, bytes] = (b"", b"")  # its request's and its answer's start
        self.in_batch: set[tuple[str, Any]] = set()  # ids still owed whose (last) ask was a batch's element
        self.slowest_single = Slowest()  # of the requests on a line of their own
        self.slowest_in_batch = Slowest()  # of the elements of batches
        self.on_answer: Callable[[Any, dict[str, Any], list[dict[str, Any]]], None] | None = None

    def asked(self, ids: Sequence[Any], line: bytes = b"") -> None:
        now = time.monotonic()
        with self.lock:
            for rid in ids:
                key = _key(rid)
                self.expected[key] += 1
                self.requests += 1
                self.owing += 1
                self.owed_max = max(self.owed_max, self.owing)
                self.sent_at[key] = now if key not in self.sent_at else None
                self.lines[key] = line[:3000]
                if line.lstrip()[:1] == b"[":
                    self.in_batch.add(key)
                else:
                    self.in_batch.discard(key)

    def unanswered(self) -> list[bytes]:
        """The start of the lines still owed an answer."""
        with self.lock:
            return [self.lines.get(key, b"?") for key in self.expected]

    def owed(self) -> int:
        with self.lock:
            return sum(self.expected.values())

    def wait_settled(self, timeout: float) -> bool:
        """Wait until every request asked so far has its answer."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while sum(self.expected.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(min(left, 0.5))
            return True

    def violation(self, text: str) -> None:
        with self.lock:
            if len(self.violations) < 100:
                self.violations.append(text)

    def frame(self, line: bytes) -> None:
        try:
            frame = json.loads(line)
        except ValueError:
            self.violation(f"stdout line that is not JSON: {line[:200]!r}")
            return
        if not isinstance(frame, dict):
            self.violation(f"stdout frame that is not an object: {line[:200]!r}")
            return
        with self.lock:
            self.frames_in += 1
            if frame.get("method") == "lm/responsePart":
                params = frame.get("params") or {}
                key = _key(params.get("requestId"))
                if not self.expected.get(key):
                    self.violations.append(f"a part for no request in flight: {line[:200]!r}")
                else:
                    self.parts.setdefault(key, []).append(params.get("part"))
                return
            if "method" in frame:
                return  # a notification (none are defined today)
            if "id" not in frame or ("result" in frame) == ("error" in frame):
                self.violations.append(f"not a JSON-RPC response: {line[:200]!r}")
                return
            rid = frame["id"]
            if rid is None:
                self.null_answers += 1
                return
            key = _key(rid)
            if not self.expected.get(key):
                self.answered_twice += 1
                if len(self.violations) < 100:
                    self.violations.append(f"an answer nobody was owed (twice, or never asked): {line[:300]!r}")
                return
            self.expected[key] -= 1
            self.owing -= 1
            self.answers += 1
            parts = self.parts.pop(key, []) if not self.expected[key] else list(self.parts.get(key, []))
            sent = self.sent_at.get(key)
            asked = self.lines.get(key, b"")
            batched = key in self.in_batch
            if not self.expected[key]:
                del self.expected[key]
                self.lines.pop(key, None)
                self.sent_at.pop(key, None)
                self.in_batch.discard(key)
            if sent is not None:
                took = time.monotonic() - sent
                (self.slowest_in_batch if batched else self.slowest_single).saw(took, asked, line, rid)
                if took > self.latency_max:
                    self.latency_max = took
                    self.slowest = _method(asked)
                    self.slowest_lines = (asked[:1000], line[:1000])
            self.lock.notify_all()
        if self.on_answer is not None:
            self.on_answer(rid, frame, parts)


class FuzzDaemon:
    """``lmbridge serve`` with raw stdin, checked stdout (``ledger``), stderr to a file."""

    def __init__(self, args: Sequence[str], stderr: Path, env: dict[str, str] | None = None) -> None:
        self.stderr_path = stderr
        self._stderr = stderr.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lmbridge", "serve", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env={**os.environ, **(env or {})}, bufsize=0,
        )
        self.ledger = Ledger()
        self.frames_out = 0
        self.write_seconds = 0.0  # time the writes to stdin waited (the pipe full: push-back)
        self._reader = threading.Thread(target=self._read, name="fuzz-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        stream = self.proc.stdout
        buffered = b""
        while chunk := stream.read(1 << 20):
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                self.ledger.frame(line)
        if buffered:
            self.ledger.violation(f"stdout ended inside a line: {buffered[:200]!r}")

    def send(self, line: bytes) -> None:
        """Write one line (a newline is added), owing an answer for each id it carries."""
        assert self.proc.stdin is not None
        self.ledger.asked(expected_ids(line), line)
        began = time.monotonic()
        self.proc.stdin.write(line + b"\n")
        self.write_seconds += time.monotonic() - began
        self.frames_out += 1

    def request(self, method: str, params: Any, rid: Any, timeout: float = 30.0) -> None:
        """Send a request and wait until it is answered (raises ``TimeoutError``)."""
        self.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode())
        if not self.ledger.wait_settled(timeout):
            raise TimeoutError(f"{method} ({rid!r}) not answered within {timeout} s")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss(self) -> int:
        """The daemon's resident set size in bytes (0 once it has exited)."""
        return rss(self.proc.pid)

    def cpu_seconds(self) -> float:
        """The daemon's CPU time so far, user and system (0 once it has exited)."""
        return cpu_seconds(self.proc.pid)

    def agents(self) -> list[int]:
        """The daemon's agent processes and theirs (``agents_of``)."""
        return agents_of(self.proc.pid)

    def close(self, timeout: float = 15.0) -> int:
        """Close stdin; the exit code (the daemon is killed after ``timeout`` s)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = -9
        self._reader.join(5)
        self._stderr.close()
        return code


def rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (read from /proc; zombies left out)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def agents_of(daemon: int) -> list[int]:
    """The live processes below the daemon ``daemon`` but its watchdog (``is_watchdog``):
    its agents, the commands it runs for them, and what those started."""
    return [pid for pid in descendants(daemon) if not is_watchdog(pid)]
