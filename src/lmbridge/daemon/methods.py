"""The daemon's JSON-RPC methods (docs/protocol.md, "Methods"), dispatched by ``jsonrpcserver``.

``Methods`` validates each method's params with the wire models (``core.messages``),
answers what needs no agent itself (the model list, presets, token counts; ``initialize``
as ``front.Front`` answers it), and hands chat requests to the ``router.Router``. It is made
once ``initialize`` is answered (``front.Front.table``: docs/performance.md, "Start-up: the
method table and the session index after the answer"). It keeps the requests in flight
by id (``InFlight``), so that ``$/cancelRequest`` finds the one it names: the cancelled request
is answered ``{"stopReason": "cancelled"}`` at once, its task scope is cancelled, and
nothing more is sent for it.

The methods that never wait (``IMMEDIATE``: token counts, presets, cancels, a terminal
closed) are plain functions dispatched by jsonrpcserver's synchronous dispatcher as they are
read (``dispatch_now``): no task, no event-loop round. Every method's params are validated
once, by its wire model (``takes``); jsonrpcserver's own check of the arguments against the
method's signature sees a fixed one (``(call, **params)``, ``SIGNATURE``), not one it must
work out per call (docs/performance.md, "Cheap requests and push-back").
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio
from pydantic import BaseModel

from lmbridge.core.errors import AGENT_FAILED, INVALID_PARAMS
from lmbridge.core.link import CancelParams, ChatInformationParams, InitializeParams, TokenCountParams, dump
from lmbridge.daemon.catalog import model_info
from lmbridge.daemon.front import IMMEDIATE as IMMEDIATE  # the table's, kept in front: read before it is made
from lmbridge.daemon.front import Front
from lmbridge.daemon.front import InvalidParams as InvalidParams
from lmbridge.daemon.front import Settings as Settings
from lmbridge.daemon.front import validated as validated
from lmbridge.daemon.stdio import RequestId
from lmbridge.log import get_logger
from lmbridge.rpc.jsonrpc import validate_request

if TYPE_CHECKING:
    from jsonrpcserver import Result

    from lmbridge.core.link import ModelConfiguration
    from lmbridge.daemon.chat_controls import SetControl

log = get_logger("methods")


class Controlled(Protocol):
    """A live chat's controls as ``chat/setControl`` reaches them (``SessionActor.set_control``)."""

    async def set_control(self, request: SetControl) -> None: ...


class Chats(Protocol):
    """Where the method table hands chat requests (``router.Router``, which imports this
    module: the table knows it by this protocol only)."""

    @property
    def configurations(self) -> Mapping[str, ModelConfiguration]: ...  # model id → VS Code's model configuration last sent

    async def chat(self, call: InFlight, params: dict[str, Any]) -> Result: ...  # lm/provideLanguageModelChatResponse

    def cancel(self, call: InFlight) -> None: ...  # $/cancelRequest named ``call``

    def actor(self, chat: str) -> Controlled | None: ...  # chat ``chat``'s live session, if any


UNKNOWN_MODEL = INVALID_PARAMS  # with data {"kind": "unknown_model"}
SHUTTING_DOWN = "the daemon is shutting down"  # AGENT_FAILED's message for a request read before EOF

#: A jsonrpcserver method: the call's context first, then the request's params by name.
Method = Callable[..., Awaitable["Result"]]
P = TypeVar("P", bound=BaseModel)

#: What every method of the table takes, as jsonrpcserver checks the arguments against it:
#: the call, then the params by name (params given as an array: -32602).
SIGNATURE = inspect.Signature([inspect.Parameter("call", inspect.Parameter.POSITIONAL_OR_KEYWORD), inspect.Parameter("params", inspect.Parameter.VAR_KEYWORD)])


def _rpc() -> Any:
    """``jsonrpcserver``, imported on first use: with ``jsonschema`` it costs
    ~85 ms, so it stays off the start-up path (``initialize`` is answered
    without it, and it is imported right after)."""
    import jsonrpcserver

    return jsonrpcserver


class _Steps:
    """jsonrpcserver's pieces, imported on first use (``_steps``): its synchronous
    dispatcher's steps, its response writer, its results."""

    def __init__(self) -> None:
        import jsonrpcserver
        import jsonrpcserver.dispatcher
        import jsonrpcserver.response

        self.dispatcher, self.response = jsonrpcserver.dispatcher, jsonrpcserver.response
        self.Success, self.Error = jsonrpcserver.Success, jsonrpcserver.Error


_loaded: _Steps | None = None


def _steps() -> _Steps:
    global _loaded
    if _loaded is None:
        _loaded = _Steps()
    return _loaded


def Success(*args: Any) -> Result:
    result: Result = (_loaded or _steps()).Success(*args)
    return result


def Error(*args: Any) -> Result:
    result: Result = (_loaded or _steps()).Error(*args)
    return result


def invalid_params(problem: str | InvalidParams) -> Result:
    """-32602: ``problem`` (what is wrong), or an ``InvalidParams`` as it says it."""
    return Error(INVALID_PARAMS, problem.message if isinstance(problem, InvalidParams) else f"invalid params: {problem}")


def takes_now(model: type[P]) -> Callable[[Callable[[Methods, InFlight | None, P], Result]], Callable[..., Result]]:
    """``takes`` for a method that never waits (``IMMEDIATE``): a plain function."""

    def wrap(method: Callable[[Methods, InFlight | None, P], Result]) -> Callable[..., Result]:
        def run(self: Methods, call: InFlight | None, **params: Any) -> Result:
            try:
                p = validated(model, params)
            except InvalidParams as exc:
                return invalid_params(exc)
            return method(self, call, p)

        run.__name__, run.__doc__ = method.__name__, method.__doc__
        return run

    return wrap


def _fixed(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (bound) as the table holds it: with the signature jsonrpcserver checks
    spelled out (``SIGNATURE``), so it is not worked out from the method at each call."""

    def run(call: InFlight | None, **params: Any) -> Any:
        return method(call, **params)

    run.__signature__ = SIGNATURE  # type: ignore[attr-defined]
    return run


def takes(model: type[P]) -> Callable[[Callable[[Methods, InFlight, P], Awaitable[Result]]], Callable[..., Awaitable[Result]]]:
    """A method of the table whose params jsonrpcserver hands over validated as ``model``
    (``validated``): the method gets the model, or the caller -32602."""

    def wrap(method: Callable[[Methods, InFlight, P], Awaitable[Result]]) -> Callable[..., Awaitable[Result]]:
        async def run(self: Methods, call: InFlight, **params: Any) -> Result:
            try:
                p = validated(model, params)
            except InvalidParams as exc:
                return invalid_params(exc)
            return await method(self, call, p)

        # Not functools.wraps: jsonrpcserver binds the params to the signature it sees, which
        # must stay (call, **params), not the method's (call, model).
        run.__name__, run.__doc__ = method.__name__, method.__doc__
        return run

    return wrap


@dataclass(eq=False)
class InFlight:
    """One request being handled (jsonrpcserver passes it as every method's first
    argument). Answered once: ``answer`` says whether this caller is the one that answers
    it (the method's own result, or ``$/cancelRequest``'s ``cancelled``, or the shutdown's
    error, whichever comes first). ``scope``: the cancel scope the method runs in, which
    ``$/cancelRequest`` cancels (a chat request's only)."""

    id: RequestId
    chat: bool = False  # a chat request: $/cancelRequest may answer it from now on
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    # It no longer waits: a chat its session took (stdio.MAX_WAITING; stdin is read on).
    served: Callable[[], None] = lambda: None
    _answered: bool = False

    @property
    def answered(self) -> bool:
        return self._answered

    def answer(self) -> bool:
        """Claim the answer: True the first time only."""
        first, self._answered = not self._answered, True
        return first


class Methods:
    """The method table and the requests in flight. ``front``: what answered ``initialize``
    first (``front.Front``), whose answer an ``initialize`` dispatched here gets too, and
    whose stdout, catalog, shim channel and settings the table shares; ``stop``: the
    daemon's shutdown (``shutdown``)."""

    def __init__(
        self,
        front: Front,
        router: Chats,
        *,
        stop: Callable[[], Awaitable[None]],
        debug_idle: bool = False,
        terminal_killed: Callable[[str], None] = lambda terminal_id: None,
    ) -> None:
        self._terminal_killed = terminal_killed  # acp.terminals.TerminalHost.killed
        self.out, self.catalog, self.client = front.out, front.catalog, front.client
        self.settings = front.settings  # written by initialize (its workspace by $/workspaceFolders too)
        self.router = router
        self.front = front
        self._stop = stop
        self.inflight: dict[RequestId, InFlight] = {}  # requests being handled, by id (not null)
        self.immediate = IMMEDIATE
        self.table: dict[str, Callable[..., Any]] = {
            "initialize": self.initialize,
            "lm/provideLanguageModelChatInformation": self.chat_information,
            "lm/provideLanguageModelChatResponse": self.chat_response,
            "lm/provideTokenCount": self.token_count,
            "agents/presets": self.presets,
            "agents/registry": self.registry,
            "chat/setControl": self.set_control,
            "shutdown": self.shutdown,
            "$/cancelRequest": self.cancel_request,
            "$/terminalKilled": self.terminal_killed,
            "$/workspaceFolders": self.workspace_folders,
        }
        if debug_idle:
            self.table["debug/idle"] = self.debug_idle
        # The methods that never wait, for jsonrpcserver's synchronous dispatcher: as they
        # are (called with params given as an object), and as the table holds them.
        self.direct: dict[str, Callable[..., Result]] = {name: self.table[name] for name in IMMEDIATE}
        self.table = {name: _fixed(method) for name, method in self.table.items()}
        self.now: dict[str, Callable[..., Result]] = {name: self.table[name] for name in IMMEDIATE}

    # -- stdio.Dispatch -------------------------------------------------------

    def known(self, method: str) -> bool:
        return method in self.table

    def in_flight(self, rid: RequestId) -> bool:
        return rid in self.inflight

    def dispatch_now(self, frame: dict[str, Any]) -> None:
        """Run one request of an ``IMMEDIATE`` method (a valid request: ``jsonrpc.classify``)
        through jsonrpcserver's synchronous dispatcher and queue its answer, before returning.
        Params given as an object are not checked against the method's signature: every
        method of the table takes ``(call, **params)`` (``SIGNATURE``) and validates them
        with its wire model; an array, or a ``call`` member, gets jsonrpcserver's check."""
        steps = _loaded or _steps()
        rpc = steps.dispatcher
        request = rpc.create_request(frame)
        if type(request.params) is dict and "call" not in request.params:
            result = rpc.call(request, None, self.direct[request.method])
        else:
            result = rpc.dispatch_request(self.now, None, request)[1]
        if rpc.not_notification((request, result)):
            self.out.send(steps.response.to_serializable_one(rpc.to_response(request, result)))

    async def dispatch(self, request: dict[str, Any], served: Callable[[], None] = lambda: None) -> None:
        """Run one request's method (in this task) and queue its answer, unless a
        ``$/cancelRequest`` or the shutdown answered it already. ``served()``: called once
        the request no longer waits (``InFlight.served``)."""
        rid = request.get("id")
        if request.get("method") in IMMEDIATE:
            self.dispatch_now(request)
            return
        call = InFlight(rid, served=served)
        if rid is not None and "id" in request:
            self.inflight[rid] = call
        try:
            response = await _rpc().async_dispatch("", self.table, context=call, deserializer=lambda _: request, validator=validate_request)
        finally:
            if self.inflight.get(rid) is call:
                del self.inflight[rid]
        if response and call.answer():  # answered already: a cancelled chat, or the shutdown's error
            self.out.send_raw(response)

    def fail_inflight(self) -> None:
        """The shutdown: every request still in flight is answered with the reason (a
        cancelled chat's scope is cancelled, so nothing more is sent for it)."""
        for call in list(self.inflight.values()):
            if call.answer():
                call.scope.cancel()  # nothing more is sent for it
                self.out.error(call.id, AGENT_FAILED, SHUTTING_DOWN)
        self.inflight.clear()

    # -- methods ------------------------------------------------------------

    @takes(InitializeParams)
    async def initialize(self, call: InFlight, p: InitializeParams) -> Result:
        """``initialize`` as jsonrpcserver dispatches it (params given as an array, a
        notification): ``front.Front.answer``'s answer."""
        answer = self.front.answer(p)
        self.front.said(answer)
        return Success(answer["result"]) if "result" in answer else Error(answer["error"]["code"], answer["error"]["message"])

    @takes(ChatInformationParams)
    async def chat_information(self, call: InFlight, p: ChatInformationParams) -> Result:
        from lmbridge.core.agent_models import model_id, of_category, select_options

        models, options, images = [], self.catalog.options(), self.catalog.images()
        configurations = self.router.configurations
        for spec in self.catalog.agents.values():
            takes_images, agent_options, context = images.get(spec.id, False), options.get(spec.id), self.catalog.context_sizes
            profile = self.catalog.profile(spec.id)
            models.append(dump(model_info(spec, None, takes_images, agent_options, context.get(spec.id), profile, configurations.get(spec.id))))
            own = of_category(select_options(agent_options), "model")
            for choice in own.choices if own else ():
                mid = model_id(spec.id, choice.value)
                models.append(dump(model_info(spec, choice, takes_images, agent_options, context.get(mid), profile, configurations.get(mid))))
        return Success({"models": models})

    def presets(self, call: InFlight | None, **params: Any) -> Result:
        """``agents/presets``: the known agents an ``{"id": ...}`` entry can name (catalog.PRESETS)."""
        from lmbridge.daemon.catalog import PRESETS

        return Success({"presets": [p.info() for p in PRESETS.values()]})

    async def registry(self, call: InFlight, **params: Any) -> Result:
        """``agents/registry``: the agents of an ACP registry feed the shim fetched, for its
        platform (core.registry; docs/protocol.md). Invalid params (-32602): no feed, a feed
        with no ``agents`` list, an unknown platform."""
        from lmbridge.core.registry import RegistryParams, registry_agents

        try:
            p = validated(RegistryParams, params)
            agents, problems = registry_agents(p.feed, p.platform)
        except InvalidParams as exc:
            return invalid_params(exc)
        except ValueError as exc:
            return invalid_params(str(exc))
        log.info("registry read", agents=len(agents), left_out=len(problems), platform=p.platform)
        return Success({"agents": agents, "problems": problems})

    @takes_now(TokenCountParams)
    def token_count(self, call: InFlight | None, p: TokenCountParams) -> Result:
        # An estimate (~4 characters a token): agents do not expose a tokenizer.
        return Success({"count": (len(p.text) + 3) // 4})

    async def debug_idle(self, call: InFlight, **params: Any) -> Result:
        """``debug/idle`` (only with ``Config.debug_idle``): answered ``null`` once every
        other task of the daemon waits on something (input, a timer, an agent), so what
        came before it has been handled as far as it can be; replay's step signal
        (docs/protocol.md, "debug/idle")."""
        await anyio.wait_all_tasks_blocked()
        return Success(None)

    async def shutdown(self, call: InFlight, **params: Any) -> Result:
        await self._stop()
        return Success(None)

    @takes_now(CancelParams)
    def cancel_request(self, call: InFlight | None, p: CancelParams) -> Result:
        target = self.inflight.get(p.id)
        if target is None or not target.chat or not target.answer():
            return Success(None)  # done already, or not a chat: nothing to stop
        del self.inflight[p.id]
        # Answer now, before anything else queued for stdout after this point.
        self.out.send({"jsonrpc": "2.0", "result": {"stopReason": "cancelled"}, "id": p.id})
        self.router.cancel(target)
        log.info("request cancelled", id=p.id)
        return Success(None)

    def terminal_killed(self, call: InFlight | None, **params: Any) -> Result:
        """``$/terminalKilled {terminalId}``: the user closed a command's VS Code terminal:
        the command is killed (its agent sees it end as any killed command)."""
        terminal_id = params.get("terminalId")
        if not isinstance(terminal_id, str) or set(params) - {"terminalId"}:
            return invalid_params("$/terminalKilled: params must be {terminalId: string}")
        self._terminal_killed(terminal_id)
        return Success(None)

    async def workspace_folders(self, call: InFlight, **params: Any) -> Result:
        """``$/workspaceFolders {workspaceFolders}``: VS Code's workspace folders changed (a
        folder added to or removed from a multi-root workspace). The file and terminal rule
        (``core.paths``) reads them at each request from now on, and sessions opened from now on
        are given them (a spare given others is not taken: ``acp.process``); sessions already
        open keep the ``additionalDirectories`` they were opened with (docs/protocol.md)."""
        folders = params.get("workspaceFolders")
        if set(params) != {"workspaceFolders"} or not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
            return invalid_params("$/workspaceFolders: params must be {workspaceFolders: string[]}")
        self.settings.workspace = list(folders)
        log.info("workspace folders changed", folders=len(folders))
        return Success(None)

    async def set_control(self, call: InFlight, **params: Any) -> Result:
        """``chat/setControl``: one of a chat's controls set on its live session
        (docs/protocol.md, "Per-chat controls")."""
        from lmbridge.core.messages import SetControlParams

        try:
            p = validated(SetControlParams, params)
        except InvalidParams as exc:
            return invalid_params(exc)
        from lmbridge.daemon.chat_controls import SetControl

        actor = self.router.actor(p.chatId)
        if actor is None:
            return Error(INVALID_PARAMS, "that chat has no live agent session (send it a message first)")
        request = SetControl(p.controlId, p.value)
        await actor.set_control(request)
        if request.error is not None:
            return Error(AGENT_FAILED, request.error)
        return Success({"chatId": p.chatId, **(request.state or {})})

    async def chat_response(self, call: InFlight, **params: Any) -> Result:
        return await self.router.chat(call, params)
