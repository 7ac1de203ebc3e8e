"""A session actor's timers: the turn machine's ``StartTimer``/``StopTimer`` carried out.

Each timer is a child task in its own cancel scope that sends ``turn.TimerFired`` to the
actor's mailbox when it runs out; it is stopped by ``StopTimer`` or replaced by the next
``StartTimer`` of its kind (docs/architecture.md "Tasks and ownership"). Used from the
actor's tasks only.
"""

from __future__ import annotations

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from lmbridge.core import turn


class Timers:
    """One running timer per ``turn.Timer`` kind at most; ``mailbox``: where each fires."""

    def __init__(self, mailbox: MemoryObjectSendStream[turn.TimerFired]) -> None:
        self._mailbox = mailbox
        self._scopes: dict[turn.Timer, anyio.CancelScope] = {}

    def start(self, fx: turn.StartTimer, tg: TaskGroup) -> None:
        """Start ``fx.timer`` in ``tg`` (the actor's), stopping the one of its kind running."""
        self.stop(fx.timer)
        scope = self._scopes[fx.timer] = anyio.CancelScope()

        async def fire() -> None:
            with scope:
                await anyio.sleep(fx.seconds)
                self._mailbox.send_nowait(turn.TimerFired(fx.timer, fx.tag))

        tg.start_soon(fire)

    def stop(self, timer: turn.Timer) -> None:
        """Stop ``timer`` if it runs (``turn.StopTimer``)."""
        scope = self._scopes.pop(timer, None)
        if scope is not None:
            scope.cancel()

    def stop_all(self) -> None:
        """Stop every timer (the actor is ending)."""
        for scope in self._scopes.values():
            scope.cancel()
