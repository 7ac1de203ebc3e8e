"""Newline-delimited JSON framing: the policy for lines that are not frames.

Every link lmbridge speaks is one JSON object per line (the shim's stdio,
each agent's stdio: docs/agents.md, "ACP as agents speak it"). A line is at most ``MAX_LINE`` bytes
on the shim's stdin and ``AGENT_LINE`` on an agent's stdout; ``Lines`` splits
an agent's output into lines and drops a longer one while it streams (it is
never held whole: the daemon's memory stays bounded by the limit), handing on
an ``Overlong`` with its size and first bytes instead. A peer may write lines
that are not frames: an agent that prints banners or progress on stdout, or floods it
(``yes`` as the agent command writes ~20,000 lines a second). Such a line is
dropped; what is logged about it is bounded: the first ``FIRST`` lines each
with a clipped excerpt, then one summary per ``EVERY`` seconds with the count,
and a final count when the link closes. An agent's stderr is logged the same
way, bounded (``Throttle``): its first ``STDERR_FIRST`` lines, then at most
``STDERR_RATE`` a second, the others counted (lines and bytes) and summarised
every ``EVERY`` seconds and at the end. No clock is read here: callers pass
``now`` (seconds, any monotonic origin).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Bytes in one line of the shim's stdin (a 10 MB chat request is fine; a longer line is skipped).
MAX_LINE = 256 * 1024 * 1024
#: Bytes in one line of an agent's stdout: agents send lines of megabytes (docs/agents.md; the
#: hostile agent's 60,000-line diff is ~1.4 MB); a longer line is dropped as it streams, so
#: what the daemon holds of one line stays below this (docs/reliability.md, "Bounds").
AGENT_LINE = 16 * 1024 * 1024
#: Agent stderr lines logged one by one when its process starts, then at most STDERR_RATE a second.
STDERR_FIRST = 20
STDERR_RATE = 5
#: Lines logged one by one before only counts are.
FIRST = 5
#: Seconds between two summaries of dropped lines.
EVERY = 10.0
#: Characters of a dropped line quoted in the log.
EXCERPT = 200


Report = Callable[..., None]  # log.warning-like: (event, **fields)


@dataclass
class BadLines:
    """Counts the lines of one link that were not frames and says so, bounded.

    ``link`` names the link in the log (e.g. ``agent 'claude'``); ``report`` is
    called with an event name and fields: at most ``FIRST`` times with an
    excerpt, then at most once per ``EVERY`` seconds, then once at ``close``.
    """

    link: str
    report: Report
    total: int = 0
    _unreported: int = 0
    _last: float | None = None

    def bad(self, line: bytes, reason: str, now: float) -> None:
        """One line that is not a frame (``reason``: why), read at ``now``."""
        self.total += 1
        if self.total <= FIRST:
            excerpt = line[:EXCERPT].decode("utf-8", errors="replace")
            more = "" if self.total < FIRST else f" (further ones are counted, one report per {EVERY:g} s)"
            self.report(f"{self.link}: {reason}, skipped{more}", line=excerpt, bytes=len(line))
            self._last = now
            return
        self._unreported += 1
        if self._last is None or now - self._last >= EVERY:
            self._summary()
            self._last = now

    def close(self) -> None:
        """The link ended: report what is still uncounted."""
        if self._unreported:
            self._summary()

    def _summary(self) -> None:
        self.report(f"{self.link}: lines that were not JSON-RPC frames skipped", skipped=self._unreported, total=self.total)
        self._unreported = 0


@dataclass(frozen=True, slots=True)
class Overlong:
    """A line longer than its link's limit, dropped as it streamed: ``size`` in bytes (without
    the newline; up to where the stream ended, if it ended first) and ``head``, its first bytes."""

    size: int
    head: bytes


#: Bytes before a read's first newline from which ``split_lines`` splits it by ``find``.
LONG_LINE = 1024


def split_lines(data: bytes, long: int = LONG_LINE) -> list[bytes]:
    """``data.split(b"\\n")``: the same list, faster when lines are long. CPython's
    ``bytes.split`` steps through a one-byte separator byte by byte, where ``find`` uses
    ``memchr``: on 4 KiB lines ``find`` was ~5× faster here, on 200-byte lines ~1.5× slower
    (a call per line). So a read whose first line is at least ``long`` bytes is split by
    ``find`` (docs/performance.md, "Streaming: the agent's pipe read directly").

    >>> split_lines(b"ab\\ncd\\n", long=1)
    [b'ab', b'cd', b'']
    """
    find = data.find
    start = find(b"\n")
    if start < long:  # short lines, or none (-1)
        return data.split(b"\n")
    out = [data[:start]]
    append = out.append
    start += 1
    while True:
        end = find(b"\n", start)
        if end < 0:
            append(data[start:])
            return out
        append(data[start:end])
        start = end + 1


class Lines:
    """Splits a byte stream into its lines (without the newline), holding at most ``limit``
    bytes of one line: a longer line is dropped as soon as it passes the limit and the rest
    of it skipped as it comes, and an ``Overlong`` (its size, its first ``head`` bytes) is
    handed on in its place, where the line was. Pure: ``feed`` each read, ``end`` at EOF.

    >>> lines = Lines(limit=4)
    >>> lines.feed(b"ab\\ncdefgh")
    [b'ab']
    >>> lines.feed(b"ij\\nk")
    [Overlong(size=8, head=b'cdefghij')]
    >>> lines.end()
    b'k'
    """

    __slots__ = ("limit", "head", "_parts", "_size", "_skipped", "_skip_head")

    def __init__(self, limit: int, head: int = EXCERPT) -> None:
        self.limit, self.head = limit, head
        self._parts: list[bytes] = []  # the start of a line split across reads
        self._size = 0
        self._skipped: int | None = None  # bytes of the over-long line in progress, if any
        self._skip_head = b""

    @property
    def held(self) -> int:
        """Bytes held of the line in progress (at most ``limit``)."""
        return self._size

    def feed(self, data: bytes) -> list[bytes | Overlong]:
        """The lines ``data`` completes, in order (everything one read returns at once: no
        per-line call on the streaming hot path)."""
        out: list[bytes | Overlong] = []
        if self._skipped is not None:
            newline = data.find(b"\n")
            if newline < 0:
                self._skip(data)
                return out
            self._skip(data[:newline])
            out.append(self._skip_end())
            data = data[newline + 1:]
        longest = self._size + len(data)  # no line it completes is longer
        lines = split_lines(data)
        last = lines.pop()
        if lines and self._parts:
            self._parts.append(lines[0])
            lines[0] = b"".join(self._parts)
            self._parts, self._size = [], 0
        if longest <= self.limit:  # each line as it is, without a check each (the streaming case)
            out += lines
        else:
            for line in lines:
                out.append(line if len(line) <= self.limit else Overlong(len(line), line[:self.head]))
        if last:
            self._parts.append(last)
            self._size += len(last)
            if self._size > self.limit:  # never held whole: dropped now, the rest skipped
                parts, size = self._parts, self._size
                self._parts, self._size = [], 0
                self._skipped, self._skip_head = 0, b""
                for part in parts:
                    if len(self._skip_head) >= self.head:
                        break
                    self._skip(part)
                self._skipped = size
        return out

    def end(self) -> bytes | Overlong | None:
        """The stream ended: its last line if it had no newline, else None."""
        if self._skipped is not None:
            return self._skip_end()
        rest = b"".join(self._parts)
        self._parts, self._size = [], 0
        return rest or None

    def _skip(self, data: bytes) -> None:
        assert self._skipped is not None
        if len(self._skip_head) < self.head:
            self._skip_head += data[:self.head - len(self._skip_head)]
        self._skipped += len(data)

    def _skip_end(self) -> Overlong:
        assert self._skipped is not None
        dropped = Overlong(self._skipped, self._skip_head)
        self._skipped, self._skip_head = None, b""
        return dropped


@dataclass
class Throttle:
    """Logs the lines of a chatty stream (an agent's stderr) at a bounded rate.

    ``line`` is called (``event, line=text``) for the first ``first`` lines, then for at most
    ``rate`` lines in any one second (``now`` cut to whole seconds); the others are counted,
    lines and bytes, and ``summary`` is called with what was not logged (``event,
    lines=, bytes=``) on the first line ``every`` seconds or more after the last summary,
    and at ``close``. ``link`` names the stream in the summary (``agent 'claude'``).
    """

    link: str
    line: Report
    summary: Report
    first: int = STDERR_FIRST
    rate: int = STDERR_RATE
    every: float = EVERY
    lines: int = 0  # every line offered
    unlogged_lines: int = 0  # since the last summary
    unlogged_bytes: int = 0
    _second: float | None = None
    _in_second: int = 0
    _last_summary: float | None = None

    def offer(self, text: str, size: int, now: float) -> None:
        """One line (``text``, as it is to be logged; ``size``: its bytes as read), read at ``now``."""
        self.lines += 1
        second = now // 1
        if second != self._second:
            self._second, self._in_second = second, 0
        if self.lines <= self.first or self._in_second < self.rate:
            if self.lines > self.first:
                self._in_second += 1
            self.line("agent stderr", line=text)
            return
        self.unlogged_lines += 1
        self.unlogged_bytes += size
        if self._last_summary is None:
            self._last_summary = now  # the first summary comes ``every`` s into the flood
        elif now - self._last_summary >= self.every:
            self._summarise()
            self._last_summary = now

    def close(self) -> None:
        """The stream ended: say what is still uncounted."""
        if self.unlogged_lines:
            self._summarise()

    def _summarise(self) -> None:
        lines, size = self.unlogged_lines, self.unlogged_bytes
        self.summary(f"{self.link} wrote {lines:,} more stderr lines, {size / 1e6:.1f} MB, not logged", lines=lines, bytes=size)
        self.unlogged_lines = self.unlogged_bytes = 0


_OPEN = re.compile(rb'\s*\{')
_MEMBER = re.compile(rb'\s*"(jsonrpc|id|method|params|result|error)"\s*:\s*')
_SCALAR = re.compile(rb'("(?:[^"\\]|\\.){0,1000}"|-?\d{1,30}(?:\.\d+)?(?:[eE][+-]?\d+)?|null|true|false)\s*,')  # the comma: not cut short


@dataclass(frozen=True, slots=True)
class Head:
    """What the first bytes of a dropped line say it was (JSON-RPC 2.0 §4, §5): its ``id``
    (``has_id``: it had one; any JSON scalar), its ``method``, and ``body``, the member
    that came next (``params``, ``result`` or ``error``). Members after that are unknown."""

    has_id: bool = False
    id: Any = None
    method: str | None = None
    body: str | None = None


def read_head(head: bytes) -> Head:
    """The JSON-RPC members ``jsonrpc``, ``id`` and ``method`` written before the first of
    ``params``, ``result`` or ``error`` at the start of a line, in any order (agents' SDKs
    write them first); an empty ``Head`` when the start is not an object that begins so.

    >>> read_head(b'{"jsonrpc":"2.0","id":7,"result":{"stopReason"')
    Head(has_id=True, id=7, method=None, body='result')
    >>> read_head(b'{"id":"a","method":"session/request_permission","params":{')
    Head(has_id=True, id='a', method='session/request_permission', body='params')
    """
    found: dict[str, Any] = {}
    match = _OPEN.match(head)
    at = match.end() if match else len(head)
    while match:
        match = _MEMBER.match(head, at)
        if match is None:
            break
        key = match.group(1).decode()
        if key in ("params", "result", "error"):
            found["body"] = key
            break
        value = _SCALAR.match(head, match.end())
        if value is None:
            break
        try:
            found[key] = json.loads(value.group(1))
        except ValueError:
            break
        at = value.end()
    method = found.get("method")
    return Head("id" in found, found.get("id"), method if isinstance(method, str) else None, found.get("body"))
