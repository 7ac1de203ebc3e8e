"""Logging: structlog to stderr only (stdout carries protocol frames).

``configure`` is called once by the CLI; ``get_logger`` is safe before that.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

#: Characters of one logged value: a peer's text may be megabytes (a 100 KB permission title).
VALUE_LIMIT = 2000

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(level: str = "info", json_logs: bool = False) -> None:
    """Send every log line to stderr, as ``key=value`` text or JSON lines.

    Raises ``ValueError`` for an unknown level name.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (one of {', '.join(LEVELS)})")
    renderer = structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S.%f", utc=False),
            clip_values,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def clip_values(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: every value past ``VALUE_LIMIT`` characters (as text) clipped."""
    from lmbridge.core.text import clip

    for key, value in event.items():
        if isinstance(value, str):
            if len(value) > VALUE_LIMIT:
                event[key] = clip(value, VALUE_LIMIT)
        elif not isinstance(value, int | float | bool | type(None)):
            text = repr(value)
            if len(text) > VALUE_LIMIT:
                event[key] = clip(text, VALUE_LIMIT)
    return event


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(component=name)
    return logger


# structlog's default prints to stdout, which carries protocol frames: never let it.
configure("info")
