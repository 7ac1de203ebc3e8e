"""Logging: structlog to stderr only (stdout carries protocol frames).

``configure`` is called once by the CLI; ``get_logger`` is safe before that. structlog
itself (~25 ms of imports here) is imported at the first line logged, not with this
module: ``lmbridge serve`` logs nothing before ``initialize`` is answered, so it stays off
the start-up path (docs/performance.md, "Start-up and idle").
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

#: Characters of one logged value: a peer's text may be megabytes (a 100 KB permission title).
VALUE_LIMIT = 2000

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

#: What ``configure`` was last asked for: (level, JSON lines); applied to structlog at once
#: if it is imported already, else when the first line is logged (``_structlog``).
_settings: tuple[str, bool] = ("info", False)
_explicit = False  # configure was called
_configured = False  # _settings were applied to structlog


def configure(level: str = "info", json_logs: bool = False) -> None:
    """Send every log line to stderr, as ``key=value`` text or JSON lines.

    Raises ``ValueError`` for an unknown level name.
    """
    global _settings, _explicit
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (one of {', '.join(LEVELS)})")
    _settings, _explicit = (level, json_logs), True
    if _configured or "structlog" in sys.modules:
        _apply()


def _apply() -> None:
    global _configured
    import structlog

    _configured = True

    level, json_logs = _settings
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


def _structlog(component: str) -> FilteringBoundLogger:
    """structlog's logger for ``component``; structlog imported, and configured as
    ``configure`` said (its default prints to stdout, which carries protocol frames:
    never let it), on first use: unless it was configured elsewhere since (a test's
    ``structlog.testing.capture_logs``) and ``configure`` was never called."""
    import structlog

    if not _configured and (_explicit or not structlog.is_configured()):
        _apply()

    logger: FilteringBoundLogger = structlog.get_logger(component=component)
    return logger


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


class _Logger:
    """A component's logger: structlog's (``_structlog``), made at its first line. Its
    methods may be taken before that (``warn=log.error``) without importing structlog."""

    __slots__ = ("_component", "_real")

    def __init__(self, component: str) -> None:
        self._component = component
        self._real: FilteringBoundLogger | None = None

    def _logger(self) -> FilteringBoundLogger:
        if self._real is None:
            self._real = _structlog(self._component)
        return self._real

    def debug(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().debug(event, *args, **kw)

    def info(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().info(event, *args, **kw)

    def warning(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().warning(event, *args, **kw)

    def error(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().error(event, *args, **kw)

    def exception(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().exception(event, *args, **kw)

    def __getattr__(self, name: str) -> Any:  # bind, critical, ...: structlog's own
        return getattr(self._logger(), name)


def get_logger(name: str) -> FilteringBoundLogger:
    """The logger of component ``name`` (structlog's ``FilteringBoundLogger``; structlog is
    imported at its first line)."""
    logger: FilteringBoundLogger = _Logger(name)
    return logger


# structlog's default prints to stdout, which carries protocol frames: never let it. Where
# structlog is loaded already (a test run), configured now, as before any line is logged.
if "structlog" in sys.modules:
    _apply()
