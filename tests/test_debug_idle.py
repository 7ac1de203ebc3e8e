"""``debug/idle`` (docs/protocol.md): off unless ``lmbridge serve --debug-idle``; on, it is
answered once the daemon waits on something, which is replay's step signal
(docs/replay.md). Through ``lmbridge serve`` as a subprocess, with a scripted agent."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from lmbridge.devtools.client import RPCError, user

pytestmark = pytest.mark.anyio

LIMIT = 180  # seconds per test body: a daemon and an agent start in ~2 s idle (docs/reliability.md)


async def test_debug_idle_is_an_unknown_method_by_default(daemon: Any) -> None:
    with anyio.fail_after(LIMIT):
        async with daemon() as c:
            with pytest.raises(RPCError) as caught:
                await c.request("debug/idle")
    assert caught.value.code == -32601


async def test_debug_idle_is_answered_while_a_chat_waits_on_its_agent(scripted: Any, daemon: Any) -> None:
    """The daemon waits on the agent (it streams, then sleeps 30 s): every task of the
    daemon waits, so debug/idle is answered, long before the chat is."""
    agent = scripted({"turns": [[{"text": "Streaming..."}, {"sleep": 30}]]})
    with anyio.fail_after(LIMIT):
        async with daemon([agent], args=["--debug-idle"]) as c:
            streamed = anyio.Event()
            chat = await c.start(
                "lm/provideLanguageModelChatResponse",
                {"modelId": agent.id, "messages": [user("hello")], "options": {}},
                on_part=lambda part: streamed.set(),
            )
            await streamed.wait()
            assert await c.request("debug/idle") is None
            assert not chat.done.is_set()  # the chat still waits on its agent
            await c.cancel(chat)
            await chat.done.wait()
