"""The warm-up after ``initialize``: what the next requests need, imported in a thread that
gives way to the shim link (docs/performance.md, "The warm-up gives way to requests").

``warm_up(heard)`` starts the thread once ``initialize`` is answered. It imports ``FIRST``
(jsonrpcserver, which the next request needs) at once, then ``MODULES`` (the actors and with
them the ACP SDK, ~0.6 s of CPU here), which the first chat would otherwise wait for. Before
each module of those, it waits while the shim link handled a line less than ``QUIET``
seconds ago (``heard()``: ``StdioPeer.last_line``): the requests that arrive meanwhile (the
model list, token counts) are not slowed by it, and it goes on when they stop. The wait is in the finder (``GiveWay``), where Python holds its
import lock: an import in another thread meanwhile waits for it. In the daemon that thread
is the event loop's, which handles no line while it waits, so the wait ends within
``QUIET``; a request that needs a module the warm-up is loading waits for it, as it would
have anyway. Each wait is bounded all the same (``LONGEST``).
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec

from lmbridge.log import get_logger

log = get_logger("methods")

#: What the warm-up imports at once: jsonrpcserver, the dispatcher of every request after
#: ``initialize`` (``methods._steps``, ``methods._rpc``), the method table with the router
#: (``front.Front.table``), and the session index, which the model list reads: the event loop
#: would wait for them anyway.
FIRST = ("jsonrpcserver", "lmbridge.daemon.router", "lmbridge.daemon.session_index")
#: What it imports then, in order, giving way to requests.
MODULES = ("lmbridge.daemon.history_actor",)
#: Seconds the shim link must have handled no line before the warm-up imports its next module.
QUIET = 0.03
#: The longest the warm-up waits before one module, in seconds (the ACP SDK's schema alone is
#: one module of ~0.3 s of CPU: started while requests flow, it takes half the CPU from them).
LONGEST = 2.0
#: How often a waiting warm-up looks again, in seconds.
STEP = 0.005


class GiveWay:
    """A meta path finder that finds nothing (``sys.meta_path``): in the thread it was made
    in, before each module is looked for (so imported), it waits while ``busy()``, at most
    ``longest`` seconds. ``waits``: how many modules it waited before."""

    def __init__(self, busy: Callable[[], bool], longest: float = LONGEST) -> None:
        self.busy, self.longest = busy, longest
        self.thread = threading.get_ident()
        self.waits = 0

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: object = None) -> ModuleSpec | None:
        if threading.get_ident() == self.thread and self.busy():
            self.waits += 1
            until = time.monotonic() + self.longest
            while self.busy() and time.monotonic() < until:
                time.sleep(STEP)
        return None


def load(modules: Sequence[str], busy: Callable[[], bool], longest: float = LONGEST, first: Sequence[str] = ()) -> GiveWay:
    """Import ``first`` in this thread, then ``modules``, giving way before each of their
    modules while ``busy()`` (``GiveWay``, first on ``sys.meta_path`` meanwhile). An import
    that fails is logged: the request that needs the module reports it."""
    finder = GiveWay(busy, longest)
    try:
        for name in first:
            importlib.import_module(name)
        # A new list each time: an import running in another thread goes on with the one it has.
        sys.meta_path = [finder, *sys.meta_path]
        for name in modules:
            importlib.import_module(name)
    except Exception as exc:
        log.warning("warm-up import failed", error=repr(exc))
    finally:
        sys.meta_path = [f for f in sys.meta_path if f is not finder]
    return finder


def warm_up(heard: Callable[[], float], modules: Sequence[str] = MODULES) -> threading.Thread:
    """Start the warm-up thread: ``FIRST`` imported, then ``modules``, each module once the
    shim link has handled no line for ``QUIET`` seconds (``heard()``: the ``time.monotonic()``
    of its last one)."""

    def busy() -> bool:
        return time.monotonic() - heard() < QUIET

    thread = threading.Thread(target=load, args=(modules, busy, LONGEST, FIRST), name="lmbridge-warm-up", daemon=True)
    thread.start()
    return thread
