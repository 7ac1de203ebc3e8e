"""Newline-delimited JSON framing: the policy for lines that are not frames.

Every link lmbridge speaks is one JSON object per line (the shim's stdio,
each agent's stdio: ACP v1, facts.md §3), with one limit, ``MAX_LINE``. A
peer may write lines that are not
frames: an agent that prints banners or progress on stdout, or floods it
(``yes`` as the agent command writes ~20,000 lines a second). Such a line is
dropped; what is logged about it is bounded: the first ``FIRST`` lines each
with a clipped excerpt, then one summary per ``EVERY`` seconds with the count,
and a final count when the link closes. No clock is read here: callers pass
``now`` (seconds, any monotonic origin).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: Bytes in one line, on every link (a 10 MB chat request is fine; a longer line is skipped).
MAX_LINE = 256 * 1024 * 1024
#: Lines logged one by one before only counts are.
FIRST = 5
#: Seconds between two summaries of dropped lines.
EVERY = 10.0
#: Characters of a dropped line quoted in the log.
EXCERPT = 200

def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out (for what a user
    or a log reads of a peer's text: it may be megabytes)."""
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters]"


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
