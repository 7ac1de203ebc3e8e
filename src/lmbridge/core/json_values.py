"""JSON values a peer sent, read without trusting their shape (an agent's answers and
notifications, the shim's params): one helper, used wherever such a value is read."""

from __future__ import annotations

from typing import Any


def json_object(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object (a ``dict``), else an empty one."""
    return value if isinstance(value, dict) else {}
