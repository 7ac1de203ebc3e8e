"""The router: forwards a chat request to its session actor and its parts back.

``lm/provideLanguageModelChatResponse`` (docs/protocol.md) is validated here, its model
resolved to an agent (``catalog.Catalog``), and handed to the history actor, which
classifies it, admits it under the session cap and gives it to the session actor of its
chat (docs/sessions.md). The parts that actor emits go to stdout as ``lm/responsePart``
of this request; its end is the request's answer. ``cancel`` is ``$/cancelRequest``'s
part (docs/protocol.md, "Cancellation").
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from lmbridge.core.errors import AGENT_FAILED
from lmbridge.core.link import ModelConfiguration
from lmbridge.daemon.catalog import Catalog
from lmbridge.daemon.front import InvalidParams, Settings, validated
from lmbridge.daemon.methods import SHUTTING_DOWN, UNKNOWN_MODEL, Error, InFlight, Success, invalid_params
from lmbridge.daemon.stdio import RequestId, StdoutWriter
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from jsonrpcserver import Result

    from lmbridge.core.messages import MessageCache
    from lmbridge.core.present import Part
    from lmbridge.daemon.chat_controls import Report
    from lmbridge.daemon.history_actor import HistoryActor
    from lmbridge.daemon.job import ChatRequest
    from lmbridge.daemon.session_actor import SessionActor
    from lmbridge.rpc.channel import ClientChannel

log = get_logger("router")


class Router:
    """Chat requests → session actors, their parts → stdout. ``history``: the history actor,
    started on first use (raises ``history_actor.ShuttingDown`` once the shutdown began)."""

    def __init__(
        self,
        out: StdoutWriter,
        catalog: Catalog,
        settings: Settings,
        history: Callable[[], Awaitable[HistoryActor]],
        *,
        closing: Callable[[], bool],
        client: ClientChannel | None = None,
    ) -> None:
        self.out = out
        self.catalog = catalog
        self.client = client  # where a chat's state goes (client/sessionState), when the shim takes it
        self.started: HistoryActor | None = None  # the history actor, once a chat started it
        # Model id → VS Code's model configuration last sent with it (what changed is the user's choice).
        self.configurations: dict[str, ModelConfiguration] = {}
        self.settings = settings  # initialize's (front.Front writes it; read here)
        self.history = history
        self.closing = closing
        # Chat histories come again with every request (made with the first: the chat's wire
        # models load after ``initialize`` is answered, docs/performance.md).
        self.message_cache: MessageCache | None = None
        # The chats handed to the history actor, until answered (``cancel``).
        self.begun: dict[InFlight, tuple[HistoryActor, ChatRequest]] = {}

    @property
    def cwd(self) -> str:
        """Where agents run: the first workspace folder, else the daemon's cwd."""
        return self.settings.workspace[0] if self.settings.workspace else os.getcwd()

    async def chat(self, call: InFlight, params: dict[str, Any]) -> Result:
        """``lm/provideLanguageModelChatResponse``: the request's answer (its parts sent meanwhile)."""
        from lmbridge.core.agent_models import split_model_id
        from lmbridge.core.messages import ChatResponseParams, MessageCache

        if self.message_cache is None:
            self.message_cache = MessageCache()
        try:
            messages = self.message_cache.messages(params.get("messages"))
            if messages is None:  # not valid: validate it all, for the error
                p = validated(ChatResponseParams, params)
            else:  # the history comes again with every request: its messages are validated once (MessageCache)
                p = validated(ChatResponseParams, {**params, "messages": []}).model_copy(update={"messages": messages})
        except InvalidParams as exc:
            return invalid_params(exc)
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
        from lmbridge.core import session_state
        from lmbridge.core.history import HistoryError
        from lmbridge.daemon.history_actor import AtCapacity, ShuttingDown
        from lmbridge.daemon.job import ChatRequest

        call.chat = True  # $/cancelRequest may answer it from now on
        try:
            # Not in the call's scope: a request cancelled while the history actor starts
            # keeps its place in the order requests reach it.
            history = self.started = await self.history()
        except ShuttingDown:
            return Error(AGENT_FAILED, SHUTTING_DOWN)
        configuration = p.options.configuration
        previous = self.configurations.get(p.modelId)
        picked = session_state.picked(previous, configuration or {})
        if configuration is not None:
            self.configurations[p.modelId] = configuration
            if configuration != previous:  # the model's tooltip names the mode its new chats start in
                self.catalog.changed()
        request = ChatRequest(
            spec, tuple(p.messages), self.cwd, Parts(self.out, call), tools=tuple(p.options.tools), verbatim=self.settings.verbatim,
            model=found[1] if found else None, configuration=configuration, picked=picked, request_id=call.id, report=self._report(p.modelId), model_id=p.modelId,
        )  # fmt: skip
        ticket = history.begin(request)
        self.begun[call] = (history, request)
        if call.answered:  # cancelled before it reached the history actor: its end is recorded all the same
            history.stop(request)
        try:
            with call.scope:
                job = await history.granted(ticket)
                call.served()  # its session took it: it no longer waits (stdio.MAX_WAITING)
                await job.done.wait()
        except HistoryError as exc:
            return invalid_params(f"messages: {exc}")
        except ShuttingDown:  # read before EOF, it reached the history actor after the shutdown
            return Error(AGENT_FAILED, SHUTTING_DOWN)
        except AtCapacity as exc:
            if call.answered:
                return Success({"stopReason": "cancelled"})  # already sent; the dispatcher drops this copy
            return Error(AGENT_FAILED, str(exc))
        finally:
            del self.begun[call]
        if call.scope.cancel_called:
            return Success({"stopReason": "cancelled"})  # already sent; the dispatcher drops this copy
        if job.error is not None:
            return Error(AGENT_FAILED, job.error, job.error_data) if job.error_data else Error(AGENT_FAILED, job.error)
        if job.usage is not None:  # the answer's last part: VS Code's context ring shows it
            data = base64.b64encode(json.dumps(job.usage).encode()).decode("ascii")
            request.parts.send({"type": "data", "mimeType": session_state.USAGE_MIME, "data": data})
        return Success({"stopReason": job.stop_reason})

    def actor(self, chat: str) -> SessionActor | None:
        """The session actor of chat ``chat`` (the id ``client/sessionState`` gave), while it is live."""
        return self.started.actors.get(chat) if self.started is not None else None

    def _report(self, model: str) -> Report:
        """How a chat on ``model`` tells its state (core/session_state.py): ``client/sessionState``
        to a shim that takes it; the context window of a ``usage_update`` becomes the model's
        ``maxInputTokens`` (``Catalog.saw_context``)."""

        def report(chat: str, request_id: RequestId, state: Mapping[str, object]) -> None:
            usage = state.get("usage")
            size = usage.get("size") if isinstance(usage, dict) else None
            if isinstance(size, int) and size > 0:
                self.catalog.saw_context(model, size)
            if self.client is not None and self.client.offers("sessionState"):
                params = {"chatId": chat, "modelId": model, **({"requestId": request_id} if request_id is not None else {}), **state}
                self.client.notify("client/sessionState", params)

        return report

    def cancel(self, call: InFlight) -> None:
        """``$/cancelRequest`` named ``call`` (answered ``cancelled`` already): its scope is
        cancelled (nothing more is sent for it) and, once it reached the history actor, it is
        stopped there at once, before any request read after it is classified."""
        call.scope.cancel()
        if call in self.begun:
            history, request = self.begun[call]
            history.stop(request)


class Parts:
    """``session_actor.PartSink`` of one request: its parts as ``lm/responsePart`` frames,
    none once the request's scope is cancelled."""

    def __init__(self, out: StdoutWriter, call: InFlight) -> None:
        self.out = out
        self.call = call

    def send(self, part: Part) -> None:
        if not self.call.scope.cancel_called:
            self.out.send_part(self.call.id, part)

    def stopped(self) -> bool:
        return self.call.scope.cancel_called
