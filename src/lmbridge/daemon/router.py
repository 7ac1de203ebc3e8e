"""The router: forwards a chat request to its session actor and its parts back.

``lm/provideLanguageModelChatResponse`` (docs/protocol.md) is validated here, its model
resolved to an agent (``catalog.Catalog``), and handed to the history actor, which
classifies it, admits it under the session cap and gives it to the session actor of its
chat (docs/sessions.md). The parts that actor emits go to stdout as ``lm/responsePart``
of this request; its end is the request's answer. ``cancel`` is ``$/cancelRequest``'s
part (docs/protocol.md, "Cancellation").
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from lmbridge.core.agent_models import split_model_id
from lmbridge.core.messages import ChatResponseParams, MessageCache
from lmbridge.daemon.catalog import Catalog
from lmbridge.daemon.methods import AGENT_FAILED, SHUTTING_DOWN, UNKNOWN_MODEL, Call, Error, Settings, Success, invalid, invalid_params
from lmbridge.daemon.stdio import StdoutWriter
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from jsonrpcserver import Result

    from lmbridge.daemon.history_actor import HistoryActor
    from lmbridge.daemon.session_actor import Job

log = get_logger("router")


class Router:
    """Chat requests → session actors, their parts → stdout. ``history``: the history actor,
    started on first use (raises ``history_actor.ShuttingDown`` once the shutdown began)."""

    def __init__(self, out: StdoutWriter, catalog: Catalog, history: Callable[[], Awaitable[HistoryActor]], *, closing: Callable[[], bool]) -> None:
        self.out = out
        self.catalog = catalog
        self.settings = Settings()
        self.history = history
        self.closing = closing
        self.message_cache = MessageCache()  # chat histories come again with every request
        self.jobs: dict[int, tuple[Job, HistoryActor]] = {}  # by id(Call): the chats handed to a session actor
        self._withdraw: dict[int, anyio.Event] = {}

    @property
    def cwd(self) -> str:
        """Where agents run: the first workspace folder, else the daemon's cwd."""
        return self.settings.workspace[0] if self.settings.workspace else os.getcwd()

    async def chat(self, call: Call, params: dict[str, Any]) -> Result:
        """``lm/provideLanguageModelChatResponse``: the request's answer (its parts sent meanwhile)."""
        try:
            messages = self.message_cache.messages(params.get("messages"))
            if messages is None:  # not valid: validate it all, for the error
                p = ChatResponseParams.model_validate(params)
            else:
                p = ChatResponseParams.model_validate({**params, "messages": []}).model_copy(update={"messages": messages})
        except ValidationError as exc:
            return invalid(exc)
        agents = self.catalog.agents
        found = split_model_id(p.modelId, agents)
        spec = agents.get(found[0]) if found is not None else None
        if found is not None and found[1] is not None and not self.catalog.offers(found[0], found[1]):
            spec = None  # not one of the agent's own models (as last learnt)
        if spec is None:
            known = ", ".join(agents) or "none"
            return Error(UNKNOWN_MODEL, f"unknown model {p.modelId!r} (known: {known})", {"kind": "unknown_model"})
        if self.closing():
            return Error(AGENT_FAILED, SHUTTING_DOWN)
        from lmbridge.core.history import HistoryError
        from lmbridge.daemon.history_actor import AtCapacity, ShuttingDown
        from lmbridge.daemon.session_actor import Job

        rid = call.id
        call.chat = True  # $/cancelRequest may answer it from now on
        withdraw = self._withdraw[id(call)] = anyio.Event()
        try:
            try:
                history = await self.history()
            except ShuttingDown:
                return Error(AGENT_FAILED, SHUTTING_DOWN)
            shown: list[dict[str, Any]] = []  # parts sent while it waited for a free session

            def waiting(text: str) -> None:
                if not call.answered:
                    part = {"type": "text", "value": text}
                    shown.append(part)
                    self.out.send_part(rid, part)

            try:
                turn, actor = await history.begin(spec, p.messages, self.cwd, waiting=waiting, withdraw=withdraw)
            except HistoryError as exc:
                return invalid_params(f"messages: {exc}")
            except ShuttingDown:  # read before EOF, it reached the history actor after the shutdown
                return Error(AGENT_FAILED, SHUTTING_DOWN)
            except AtCapacity as exc:
                if call.answered:
                    return Success({"stopReason": "cancelled"})  # already sent; the dispatcher drops this copy
                return Error(AGENT_FAILED, str(exc))
        finally:
            del self._withdraw[id(call)]

        async def emit(part: dict[str, Any]) -> None:
            self.out.send_part(rid, part)

        job = Job(turn=turn, history=tuple(p.messages), emit=emit, tools=tuple(p.options.tools), verbatim=self.settings.verbatim, model=found[1] if found else None)
        for part in shown:  # VS Code replays it as part of this answer
            job.count(part)
        job.actor = actor
        self.jobs[id(call)] = (job, history)
        try:
            job.cancelled = call.answered  # cancelled while we classified
            if job.cancelled:
                history.stopped(turn, job.fingerprint())
            await actor.submit(job)
            if job.cancelled:
                actor.cancel(job)
            await job.done.wait()
        finally:
            del self.jobs[id(call)]
        if job.cancelled:
            return Success({"stopReason": "cancelled"})  # already sent; the dispatcher drops this copy
        if job.error is not None:
            return Error(AGENT_FAILED, job.error, job.error_data) if job.error_data else Error(AGENT_FAILED, job.error)
        return Success({"stopReason": job.stop_reason})

    def cancel(self, call: Call) -> None:
        """``$/cancelRequest`` named ``call`` (answered ``cancelled`` already): nothing more is
        sent for it, and its end is recorded at once, before any request read after it."""
        if id(call) in self.jobs:
            job, history = self.jobs[id(call)]
            job.cancelled = True
            history.stopped(job.turn, job.fingerprint())  # before any request read after this cancel
            if job.actor is not None:
                job.actor.cancel(job)
        elif id(call) in self._withdraw:
            self._withdraw[id(call)].set()  # it waits for a free session: it gives up

    def shut(self, call: Call) -> None:
        """The shutdown answered ``call``: nothing more is sent for it."""
        if id(call) in self.jobs:
            self.jobs[id(call)][0].cancelled = True
