"""Cancellation by scope, in-process and in a fixed order (docs/architecture.md,
"Cancellation by scope").

``$/cancelRequest`` cancels the request's task scope and, once the request has reached the
history actor, stops it there at once. A request cancelled before it reached the history
actor (the first chat of a daemon waits for it to read the session index) is handed over
all the same and stopped right behind it: answered once, nothing sent for it, its
permission answers approve nothing, and its end is known to the chat's next request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.processors import format_exc_info
from structlog.testing import capture_logs
from test_shutdown_race import LIMIT, Daemon, HeldIndex, failures, initialize, until

from lmbridge.core.messages import AgentSpec
from lmbridge.daemon.root import Config
from lmbridge.devtools.client import user

pytestmark = pytest.mark.anyio

CHAT = "lm/provideLanguageModelChatResponse"


def parts(daemon: Daemon, rid: Any) -> list[dict[str, Any]]:
    return [f["params"]["part"] for f in daemon.frames if f.get("method") == "lm/responsePart" and f["params"]["requestId"] == rid]


async def test_a_request_cancelled_before_it_reached_the_history_actor_is_stopped_behind_it(scripted: Any, tmp_path: Path) -> None:
    agent = scripted({"turns": [[{"text": "Hi."}], [{"text": "Again."}]]})
    index = HeldIndex(tmp_path / "state")
    daemon = Daemon(Config(agents=[AgentSpec.model_validate(agent.spec)], index=index))
    with capture_logs([format_exc_info]) as logs, anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.server.serve, daemon.lines(), daemon.stdout)
            initialize(daemon, agent, tmp_path)
            daemon.send({"jsonrpc": "2.0", "id": 1, "method": CHAT, "params": {"modelId": agent.id, "messages": [user("hello")], "options": {}}})
            # The first chat started the history actor, which reads the index (held): the
            # request waits for it, not yet handed over, when the cancel comes.
            await until(index.loading.is_set, "the history actor reading the index")
            daemon.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}})
            await until(lambda: bool(daemon.answers(1)), "the cancel's answer")
            # The chat's next request, read right after the cancel: the stopped request left
            # no answer, so it continues the session its first words name, the stop known.
            daemon.send({"jsonrpc": "2.0", "id": 2, "method": CHAT,
                         "params": {"modelId": agent.id, "messages": [user("hello"), user("again")], "options": {}}})  # fmt: skip
            index.release.set()
            await until(lambda: bool(daemon.answers(2)), "the next request's answer")
            history = daemon.server.history
            assert history is not None
            sessions = list(history.core.sessions)
            daemon.eof()
    assert daemon.answers(1) == [{"jsonrpc": "2.0", "result": {"stopReason": "cancelled"}, "id": 1}]
    assert parts(daemon, 1) == [], "a part was sent for the cancelled request"
    assert [a.get("result") for a in daemon.answers(2)] == [{"stopReason": "end_turn"}]
    assert len(sessions) == 1, f"the next request did not continue the stopped request's session: {sessions}"
    assert len(agent.events("session_new")) == 1
    assert not failures(logs), failures(logs)
    # The history core's decisions: the stopped request began the chat, the next continued it.
    decided = [(e["kind"], e["session"]) for e in logs if e.get("event") == "request" and "kind" in e]
    assert decided == [("new_chat", "s1"), ("continuation", "s1")], decided
