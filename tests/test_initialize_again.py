"""An ``initialize`` sent again (docs/reliability.md, "The slowest answers, found"):
answered, its settings taken as the first's, but the start-up work runs once. The soak's
generator sends one in about twenty frames; each used to start one more warm-up thread and
one more pre-warming of the agents used last, which asked the agents the chats were waiting
for for spare sessions (the slowest chat at 40,000 frames: 16.6 s, against 2.0 s with
``--no-prewarm``). In-process; no clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from lmbridge.core.messages import PROTOCOL_VERSION
from lmbridge.daemon import root, warm
from lmbridge.daemon.root import Config, Server
from lmbridge.daemon.session_index import SessionIndex
from lmbridge.daemon.stdio import Stdout

pytestmark = pytest.mark.anyio

LIMIT = 120  # seconds for the whole test (~1 s idle: the history actor's imports)


async def test_a_repeated_initialize_starts_no_second_warm_up_nor_pre_warming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warm_ups: list[float] = []
    prewarms: list[int] = []
    real_warm_up, real_prewarm = warm.warm_up, root.Server._prewarm

    def counted_warm_up(heard: Any, *args: Any) -> Any:
        warm_ups.append(heard())
        return real_warm_up(heard, *args)

    async def counted_prewarm(self: Server) -> None:
        prewarms.append(1)
        await real_prewarm(self)

    monkeypatch.setattr(warm, "warm_up", counted_warm_up)
    monkeypatch.setattr(root.Server, "_prewarm", counted_prewarm)
    server = Server(Config(index=SessionIndex(tmp_path / "state"), prewarm=True))
    frames: list[dict[str, Any]] = []
    stdout = Stdout(lambda data: frames.extend(json.loads(line) for line in data.splitlines() if line.strip()))
    folders = [tmp_path / name for name in ("first", "second", "third")]

    async def lines() -> Any:
        for n, folder in enumerate(folders):
            params = {"protocolVersion": PROTOCOL_VERSION, "workspaceFolders": [str(folder)]}
            yield json.dumps({"jsonrpc": "2.0", "id": n, "method": "initialize", "params": params}).encode() + b"\n"
            while not any(f.get("id") == n for f in frames):  # each answered before the next is sent
                await anyio.sleep(0.01)
        while not prewarms:
            await anyio.sleep(0.01)
        await anyio.wait_all_tasks_blocked()
        # Still served: the settings are the last initialize's.
        assert server.settings.workspace == [str(folders[-1])]

    with anyio.fail_after(LIMIT):
        await server.serve(lines(), stdout)
    answers = [f for f in frames if "id" in f]
    assert [a["id"] for a in answers] == [0, 1, 2]
    assert all(a["result"]["protocolVersion"] == PROTOCOL_VERSION for a in answers)
    assert len(warm_ups) == 1
    assert len(prewarms) == 1
