"""Push-back on stdin (docs/reliability.md, "Bounds"): the daemon reads no faster than it can
hold what waits. A flood of chat requests for an agent that does not start fills
``stdio.MAX_WAITING`` places; then stdin is not read (the pipe would push back on the
shim) until some are answered; every request is still answered exactly once. In-process,
each line its own chunk of the stream, so what was read is counted exactly; no clock.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from lmbridge.core.messages import PROTOCOL_VERSION, AgentSpec
from lmbridge.daemon.root import Config, Server
from lmbridge.daemon.stdio import MAX_WAITING, Stdout
from lmbridge.devtools.client import user

pytestmark = pytest.mark.anyio

LIMIT = 300  # seconds for the whole test (~10 s at load 8; a bound that bites only when something hangs)

#: An agent that does not start until ``gate`` exists (it never answers initialize), then
#: exits: each chat waiting on its start is answered with the error.
STALLED = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\nsys.exit(3)"


class Lines(anyio.abc.ByteReceiveStream):
    """stdin as one chunk a line, counting the chunks taken (what the daemon read)."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[bytes](math.inf)
        self.taken = 0

    def put(self, frame: dict[str, Any]) -> None:
        self._send.send_nowait((json.dumps(frame) + "\n").encode())

    def eof(self) -> None:
        self._send.close()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        chunk = await self._receive.receive()  # EndOfStream after eof()
        self.taken += 1
        return chunk

    async def aclose(self) -> None:
        pass


async def test_a_flood_for_a_stalled_agent_is_held_to_the_bound_and_all_answered_once(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    agent = AgentSpec(id="stalled", command=sys.executable, args=["-c", STALLED, str(gate)])
    # The session cap (4 a agent) grants a session to 4 chats, which wait on the start; the
    # others wait for a free session: those hold the places.
    server = Server(Config(agents=[agent]))
    frames: list[dict[str, Any]] = []
    stdout = Stdout(lambda data: frames.extend(json.loads(line) for line in data.splitlines() if line.strip()))
    stdin = Lines()
    chats = 3 * MAX_WAITING
    stdin.put({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {"protocolVersion": PROTOCOL_VERSION, "workspaceFolders": [str(tmp_path)]}})
    for i in range(chats):
        params = {"modelId": "stalled", "messages": [user(f"chat {i}")], "options": {}}
        stdin.put({"jsonrpc": "2.0", "id": i, "method": "lm/provideLanguageModelChatResponse", "params": params})
        stdin.put({"jsonrpc": "2.0", "id": f"count {i}", "method": "lm/provideTokenCount", "params": {"modelId": "stalled", "text": "four"}})
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, stdin, stdout)
            # Every task waits (the chats on the agent's start, the reader on room): the
            # daemon holds MAX_WAITING chats and has read no further than the one after them.
            while server.stdin is None or not server.stdin.waiting.full:
                await anyio.sleep(0.01)
            await anyio.wait_all_tasks_blocked()
            assert server.stdin.waiting.count == MAX_WAITING
            read = stdin.taken
            # initialize, the chats so far (the cap's granted ones, then the ones that wait),
            # a count after each, the line that waits for room
            cap = server.config.max_processes
            assert 2 * MAX_WAITING < read <= 1 + 2 * (cap + MAX_WAITING) + 1
            await anyio.wait_all_tasks_blocked()
            assert stdin.taken == read  # reading paused
            answered = {f["id"] for f in frames if "id" in f}
            assert not answered & set(range(chats))  # no chat answered yet
            gate.touch()  # the agent exits: each waiting chat is answered, and reading goes on
            stdin.eof()
    assert stdin.taken == 1 + 2 * chats
    answers = Counter(f["id"] for f in frames if "id" in f and ("result" in f or "error" in f))
    assert answers == Counter({"init": 1, **{i: 1 for i in range(chats)}, **{f"count {i}": 1 for i in range(chats)}})
    assert all(f["error"]["code"] == -32000 for f in frames if f.get("id") in range(chats))
    assert all(f["result"] == {"count": 1} for f in frames if isinstance(f.get("id"), str) and f["id"].startswith("count"))


class _Holding:
    """A ``stdio.Dispatch`` whose ``hold`` requests keep their place until the test calls
    their ``served`` (as a chat's session takes it). ``started``: the ids in the order they
    were dispatched."""

    immediate: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.started: list[Any] = []
        self.served: dict[Any, Any] = {}

    def known(self, method: str) -> bool:
        return method == "hold"

    def in_flight(self, rid: Any) -> bool:
        return False

    async def dispatch(self, request: dict[str, Any], served: Any) -> None:
        self.started.append(request["id"])
        self.served[request["id"]] = served
        await anyio.sleep_forever()

    def dispatch_now(self, request: dict[str, Any]) -> None:
        raise AssertionError("no immediate methods here")


async def test_a_batchs_elements_take_their_places_before_the_lines_read_after_it() -> None:
    """A batch read while every place is taken: its elements get the places freed next, in
    order, before any line read after it. Before, the reader (woken by the pipe's data in
    the same loop round a place was freed) took that place first and from then on every
    place freed while it had lines to read: under a full pipe, the batch's elements waited
    until the writer stopped (the soak's slowest answer, 609 s: docs/reliability.md, "The
    slowest answers, found")."""
    from lmbridge.daemon.stdio import StdioPeer, StdoutWriter

    def hold(n: int) -> bytes:
        return (json.dumps({"jsonrpc": "2.0", "id": f"h{n}", "method": "hold"}) + "\n").encode()

    batch = json.dumps([{"jsonrpc": "2.0", "id": f"q{n}", "method": "hold"} for n in (1, 2, 3)])
    send, receive = anyio.create_memory_object_stream[bytes](math.inf)

    class Pipe(anyio.abc.ByteReceiveStream):
        async def receive(self, max_bytes: int = 65536) -> bytes:
            try:
                return await receive.receive()
            except anyio.EndOfStream:
                raise anyio.EndOfStream from None

        async def aclose(self) -> None:
            pass

    methods = _Holding()
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            peer = StdioPeer(Pipe(), methods, StdoutWriter(), tg, lambda frame: False)
            # Every place taken, then the batch, in one read.
            send.send_nowait(b"".join(hold(n) for n in range(MAX_WAITING)) + batch.encode() + b"\n")
            tg.start_soon(peer.read)
            await anyio.wait_all_tasks_blocked()
            assert methods.started == [f"h{n}" for n in range(MAX_WAITING)]
            methods.served["h0"]()  # one place: the batch is read; its first element takes it
            await anyio.wait_all_tasks_blocked()
            assert methods.started[MAX_WAITING:] == ["q1"]
            # More lines come (the pipe is full), and in the same round one place is freed.
            send.send_nowait(b"".join(hold(n) for n in range(MAX_WAITING, 2 * MAX_WAITING)))
            methods.served["h1"]()
            await anyio.wait_all_tasks_blocked()
            for n in range(2, 8):  # more places, one at a time
                methods.served[f"h{n}"]()
                await anyio.wait_all_tasks_blocked()
            # The batch's elements first, then the lines read after it.
            assert methods.started[MAX_WAITING:] == ["q1", "q2", "q3", *(f"h{n}" for n in range(MAX_WAITING, MAX_WAITING + 5))]
            tg.cancel_scope.cancel()
