"""Text helpers shared by the pure core and the logs."""

from __future__ import annotations


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out (for what a user
    or a log reads of a peer's text: it may be megabytes)."""
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters]"

