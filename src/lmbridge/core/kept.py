"""The output of an open turn kept while no request streams: a small pure buffer.

A turn that asked permission outlives the response that showed the card: while the agent
waits on the answers (AWAITING) and after it ends its turn with no request streaming
(ENDED), what it sends is kept for the next request of the same turn, which shows it first
(docs/architecture.md, "The turn lifecycle"). Bounded in bytes, so output nobody reads
cannot grow without end. No I/O.
"""

from __future__ import annotations

from lmbridge.core.present import LeftOut, Part, note


class Kept:
    """Output kept while no request streams, for the next request of the same turn.

    Text (and thinking) is bounded to ``limit`` bytes (UTF-8): past it the oldest text
    gives way, counted, and ``take`` puts one ``LeftOut`` line first; tool calls and
    other parts are never dropped.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[Part] = []
        self.size = 0  # text bytes in parts
        self.left_out = 0  # text bytes that gave way

    def add(self, parts: list[Part]) -> None:
        for part in parts:
            self.parts.append(part)
            if part.get("type") in ("text", "thinking"):
                self.size += _size(part)
        while self.size > self.limit:
            i = next(i for i, p in enumerate(self.parts) if p.get("type") in ("text", "thinking"))
            size = _size(self.parts.pop(i))
            self.size -= size
            self.left_out += size

    def take(self) -> list[Part]:
        """Everything kept, in order (after the line saying what was left out), and forget it."""
        parts = ([note(LeftOut(self.left_out))] if self.left_out else []) + self.parts
        self.clear()
        return parts

    def clear(self) -> None:
        self.parts, self.size, self.left_out = [], 0, 0


def _size(part: Part) -> int:
    return len(str(part.get("value", "")).encode("utf-8", "surrogatepass"))
