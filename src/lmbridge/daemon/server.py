"""The wire server: newline-delimited JSON-RPC 2.0 on the daemon's stdio.

Implements the shim ↔ daemon contract v1 (docs/protocol.md). One reader task
splits stdin into frames and dispatches each request in its own task through
``jsonrpcserver`` (so a long chat request never blocks the next frame); one
writer task owns stdout, so frames never interleave. ``$/cancelRequest`` is
answered here: the cancelled request gets ``{"stopReason": "cancelled"}`` at
once, and nothing more is sent for it.

Start-up cost matters (the shim waits for ``initialize``): the history and
session actors, and with them the ACP SDK, are imported on the first chat
request, not before.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from lmbridge import __version__
from lmbridge.core import session_state
from lmbridge.core.agent_models import model_id, of_category, select_options, split_model_id
from lmbridge.core.messages import PROTOCOL_VERSION, AgentSpec, CancelParams, ChatInformationParams, ChatResponseParams, InitializeParams, MessageCache, SetControlParams, TokenCountParams, dump
from lmbridge.core.text import clip
from lmbridge.daemon.catalog import merge, model_info
from lmbridge.log import get_logger
from lmbridge.rpc.channel import ShimChannel
from lmbridge.rpc.framing import MAX_LINE, BadLines
from lmbridge.rpc.jsonrpc import parse_json, usable_id

if TYPE_CHECKING:
    from jsonrpcserver import Result
    from jsonrpcserver.methods import Methods

    from lmbridge.daemon.history_actor import HistoryActor
    from lmbridge.daemon.session_actor import Job

log = get_logger("server")

MAX_FRAME = MAX_LINE  # bytes in one stdin line (framing.MAX_LINE: the same on every link)
UNKNOWN_MODEL = -32602  # with data {"kind": "unknown_model"}
INVALID_PARAMS = -32602
AGENT_FAILED = -32000  # the agent could not start, crashed, or answered with an error
SHUTTING_DOWN = "the daemon is shutting down"  # AGENT_FAILED's message for a request read before EOF


def _rpc() -> Any:
    """``jsonrpcserver``, imported on first use: with ``jsonschema`` it costs
    ~85 ms, so it stays off the start-up path (``initialize`` is answered
    without it, and it is imported right after)."""
    import jsonrpcserver

    return jsonrpcserver


def _warm_up() -> None:
    """Import, in a thread, what the next requests need: jsonrpcserver, and for the
    first chat the actors and the ACP SDK (~0.7 s here), which that chat would
    otherwise wait for. Called once ``initialize`` is answered; a request that
    needs a module still loading waits for it, as it would have anyway."""

    def load() -> None:
        try:
            import jsonrpcserver  # noqa: F401

            import lmbridge.daemon.history_actor  # noqa: F401
        except Exception as exc:  # the request that needs it will report it
            log.warning("warm-up import failed", error=repr(exc))

    threading.Thread(target=load, name="lmbridge-warm-up", daemon=True).start()


def Success(*args: Any) -> Result:
    return _rpc().Success(*args)


def Error(*args: Any) -> Result:
    return _rpc().Error(*args)


def _invalid(exc: ValidationError) -> Result:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "params"
    return invalid_params(f"{where}: {first['msg']}")


def invalid_params(message: str) -> Result:
    return Error(-32602, f"invalid params: {message}")


@dataclass(eq=False)
class _Context:
    """One request being handled (passed by jsonrpcserver as every method's first
    argument). ``answered``: a ``$/cancelRequest`` answered it already, so the
    method's own answer is dropped; ``job``: a chat's, once it has one; ``withdraw``:
    set by ``$/cancelRequest`` while the chat waits for a free session (the cap)."""

    id: Any
    chat: bool = False
    answered: bool = False
    job: Job | None = None
    withdraw: anyio.Event | None = None


@dataclass
class Config:
    """What ``lmbridge serve`` was started with."""

    agents: list[AgentSpec] = field(default_factory=list)
    idle_timeout: float = 1800.0
    recorder: Any = None  # lmbridge.rpc.record.Recorder (--record): every frame on every link
    # How agents are started: AgentConnection.spawn's signature (None: that). Replay passes
    # its player's: the recorded spawn, then a stand-in process that plays the agent back.
    launcher: Any = None
    max_processes: int = 4  # live ACP sessions per agent (--max-agent-processes)
    index: Any = None  # session_index.SessionIndex (lmbridge serve: the state folder's); None: nothing persisted
    prewarm: bool = False  # start the agents used last after initialize (needs ``index``)
    spare_session: bool = False  # keep a spare ACP session per running agent process (lmbridge serve: on; --no-spare-session)
    session_wait: float = 120.0  # seconds a new chat over the session cap waits for a free session (cap.SESSION_WAIT)
    # Seconds before "Starting <agent>…" is shown (None: LMBRIDGE_START_NOTICE or 0.5 s). Replay
    # passes infinity: a wall-clock notice is not part of a recording.
    start_notice: float | None = None
    # Answer ``debug/idle`` (lmbridge serve --debug-idle; docs/protocol.md): off by default.
    debug_idle: bool = False


class Server:
    """The daemon: reads frames from ``reader``, writes frames to ``writer``."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.recorder = config.recorder
        self.agents: dict[str, AgentSpec] = merge(config.agents)
        self.workspace: list[str] = []
        self.bad_lines = BadLines("shim stdin", log.warning)  # -32700 each; logged bounded
        self.verbatim = False  # initialize's userTurns: Copilot's user messages forwarded as they are
        # Model id → VS Code's model configuration last sent with it (what changed is the user's choice).
        self.configurations: dict[str, dict[str, Any]] = {}
        self.context_sizes: dict[str, int] = {}  # model id → the context window its agent's usage_update gave
        self.history: HistoryActor | None = None
        self._cached_options: dict[str, Any] | None = None  # the state folder's agent options, read once
        self._cached_images: dict[str, bool] | None = None  # ... and which agents take images
        self.inflight: dict[Any, _Context] = {}  # requests being handled, by id (not null)
        self.stray_responses = 0  # frames on stdin that were responses to no request in flight (never answered)
        # Requests and notifications to the shim (client/*), and its answers.
        self.client = ShimChannel(self.send)
        self._dispatching = 0  # request tasks running
        self.message_cache = MessageCache()  # chat histories come again with every request
        # stdout: encoded frames (bytes) and response parts ((request id, part))
        # not written yet, in order; written by a callback soon after they are
        # queued, or, while the reader lags, by the writer task once it caught up.
        self._stdout: Stdout | None = None
        self._pending: list[Any] = []
        self._flush_handle: asyncio.Handle | None = None
        self._blocked = False  # the pipe is over its high-water mark
        self._lagging = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._history_lock = anyio.Lock()
        self.shutting_down = False
        self._reading = anyio.CancelScope()
        self.methods: Methods = {
            "initialize": self.initialize,
            "lm/provideLanguageModelChatInformation": self.chat_information,
            "lm/provideLanguageModelChatResponse": self.chat_response,
            "lm/provideTokenCount": self.token_count,
            "agents/presets": self.presets,
            "chat/setControl": self.set_control,
            "agents/registry": self.registry,
            "shutdown": self.shutdown,
            "$/cancelRequest": self.cancel_request,
        }
        if config.debug_idle:
            self.methods["debug/idle"] = self.debug_idle

    # -- frames -------------------------------------------------------------

    def send(self, frame: dict[str, Any]) -> None:
        """Queue one frame for stdout (frames go out in the order queued)."""
        self._queue((_encode(frame) + "\n").encode("utf-8", _JSON_ESCAPE))

    def send_part(self, rid: Any, part: dict[str, Any]) -> None:
        """Queue one ``lm/responsePart`` of request ``rid`` (encoded when written)."""
        self._queue((rid, part))

    def _queue(self, item: Any) -> None:
        self._pending.append(item)
        if self._flush_handle is None and not self._blocked and self._stdout is not None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Write everything queued in one write (a callback, not a task: no task
        switch per part). Everything queued in one event-loop round (a burst of
        agent updates) goes out together, consecutive text parts of one request
        merged into one part (``encode_batch``); while the reader lags (the pipe is
        over its high-water mark) parts pile up and are merged likewise."""
        self._flush_handle = None
        if self._blocked or not self._pending or self._stdout is None:
            return
        batch, self._pending = self._pending, []
        data = encode_batch(batch)
        self._stdout.write(data)
        if self.recorder is not None:
            self.recorder.shim_out(data)
        if self._stdout.paused():
            self._blocked = True
            self._lagging.set()

    async def serve(self, lines: AsyncIterator[bytes], stdout: Stdout) -> None:
        """Run until ``lines`` ends (EOF): then stop every agent and return."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._stdout = stdout
            self._flush()
            tg.start_soon(self._writer)
            with self._reading:  # cancelled by stop_reading (SIGTERM): as at EOF
                async for line in lines:
                    if self.recorder is not None:
                        self.recorder.shim_in(line)
                    tg.start_soon(self._dispatch, line)
            if self.recorder is not None:
                self.recorder.shim_eof()
            self.client.close()  # no one reads our stdout any more: client/* requests fail at once
            log.info("stdin closed: shutting down" if not self._reading.cancel_called else "stopped by a signal: shutting down")
            await self._stop()
            # Requests read before EOF are still answered (their agents are gone,
            # so chat requests end with an error at once); one still running after
            # that is answered here, before its task is cancelled: never dropped.
            with anyio.move_on_after(5):
                while self._dispatching:
                    await anyio.sleep(0.01)
            for ctx in list(self.inflight.values()):
                if not ctx.answered:
                    ctx.answered = True
                    if ctx.job is not None:
                        ctx.job.cancelled = True  # nothing more is sent for it
                    self._error(ctx.id, AGENT_FAILED, SHUTTING_DOWN)
            self.inflight.clear()
            await self._drain_out()
            tg.cancel_scope.cancel()

    def stop_reading(self) -> None:
        """Stop reading stdin and shut down as at EOF (what SIGTERM does): requests
        already read are answered, every agent is stopped."""
        self._reading.cancel()

    async def _writer(self) -> None:
        """Wait for the reader to catch up whenever a write left the pipe full,
        then write what piled up meanwhile."""
        assert self._stdout is not None
        while True:
            await self._lagging.wait()
            self._lagging = anyio.Event()
            await self._stdout.drain()
            self._blocked = False
            self._flush()

    async def _drain_out(self) -> None:
        assert self._stdout is not None
        with anyio.move_on_after(2):
            while self._pending or self._blocked or self._stdout.buffered():
                await anyio.sleep(0.01)

    async def _dispatch(self, line: bytes) -> None:
        self._dispatching += 1
        try:
            await self._dispatch_line(line)
        except Exception as exc:  # a bug here must not end the daemon (and every chat with it)
            log.exception("frame dispatch failed", error=clip(repr(exc), 500))
        finally:
            self._dispatching -= 1

    async def _dispatch_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            request = parse_json(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep to decode
            self.bad_lines.bad(line, "not JSON", time.monotonic())
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            self._error(None, -32700, f"parse error: {reason}"[:500])
            return
        if isinstance(request, list):
            # A batch: each element is handled as if it came on its own line, and
            # answered in its own frame (the daemon never writes arrays).
            if not request:
                self._error(None, -32600, "invalid request: empty batch")
            for element in request:
                self._dispatching += 1
                assert self._tg is not None
                self._tg.start_soon(self._dispatch_one_counted, element)
            return
        await self._dispatch_one(request)

    async def _dispatch_one_counted(self, request: Any) -> None:
        try:
            await self._dispatch_one(request)
        except Exception as exc:
            log.exception("frame dispatch failed", error=clip(repr(exc), 500))
        finally:
            self._dispatching -= 1

    def _error(self, rid: Any, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": rid})

    async def _dispatch_one(self, request: Any) -> None:
        """One request or notification (any JSON value): answered exactly once if it has
        a usable id, never if it is a notification."""
        if not isinstance(request, dict):
            self._error(None, -32600, "invalid request: not a JSON object")
            return
        if "method" not in request and ("result" in request or "error" in request):
            # A response: to one of the daemon's client/* requests, or to none (late, after
            # its timeout, or never asked). Never answered: answering a response would let
            # two peers ping-pong errors. One to no request is logged once, then counted.
            if self.client.deliver(request):
                return
            self.stray_responses += 1
            if self.stray_responses == 1:
                log.warning("stdin: a response to no request, not answered (further ones are counted)", id=clip(repr(request.get("id")), 100))
            elif self.stray_responses % 1000 == 0:
                log.warning("stdin: responses to no request so far", count=self.stray_responses)
            return
        rid = request.get("id")
        if not (rid is None or usable_id(rid)):
            # JSON-RPC 2.0 ids are strings, numbers or null: an object or array id cannot be answered by it.
            self._error(None, -32600, "invalid request: id must be a string, a finite number or null")
            return
        method = request.get("method")
        if "id" in request and not isinstance(method, str):
            # Not a request, but its id is readable: the error carries it, so the caller is not left waiting.
            self._error(rid, -32600, "invalid request: method must be a string")
            return
        if isinstance(method, str) and method not in self.methods and "id" in request:
            self._error(rid, -32601, f"method not found: {clip(method, 200)}")
            return
        if not _valid_one(request):
            # Not a JSON-RPC 2.0 request (a "jsonrpc" other than "2.0", params neither object
            # nor array): answered by its id when it has one (jsonrpcserver would say null).
            self._error(rid if "id" in request else None, -32600, "invalid request: not a JSON-RPC 2.0 request object")
            return
        if rid is not None and rid in self.inflight:
            # Ids identify requests in flight (JSON-RPC 2.0 §4): a second one would make its answer ambiguous.
            self._error(rid, -32600, "invalid request: a request with this id is still in flight")
            return
        if method == "initialize" and _plain_request(request):
            # The first frame the shim sends, answered before jsonrpcserver is loaded.
            self.send({"jsonrpc": "2.0", **self._initialize(request.get("params", {})), "id": rid})
            asyncio.get_running_loop().call_soon(_warm_up)  # after the answer is written
            if self.config.prewarm and self.config.index is not None and self._tg is not None:
                self._tg.start_soon(self._prewarm)
            return
        ctx = _Context(rid)
        if rid is not None and "id" in request:
            self.inflight[rid] = ctx
        try:
            response = await _rpc().async_dispatch("", self.methods, context=ctx, deserializer=lambda _: request, validator=validate_request)
        finally:
            if self.inflight.get(rid) is ctx:
                del self.inflight[rid]
        if response and not ctx.answered:  # answered: a cancelled chat, answered by $/cancelRequest
            self._queue((response + "\n").encode())

    # -- methods ------------------------------------------------------------

    async def initialize(self, ctx: _Context, **params: Any) -> Result:
        answer = self._initialize(params)
        return Success(answer["result"]) if "result" in answer else Error(answer["error"]["code"], answer["error"]["message"])

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        """``initialize``: ``{"result": ...}`` or ``{"error": ...}``."""
        try:
            p = InitializeParams.model_validate(params)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "params"
            return {"error": {"code": -32602, "message": f"invalid params: {where}: {first['msg']}"}}
        if p.protocolVersion != PROTOCOL_VERSION:
            message = f"invalid params: unsupported protocolVersion {p.protocolVersion}; this daemon speaks {PROTOCOL_VERSION}"
            return {"error": {"code": -32602, "message": message}}
        self.workspace = list(p.workspaceFolders)
        self.client.set_capabilities(p.clientCapabilities.model_dump())
        self.verbatim = p.userTurns == "verbatim"
        problems: list[str] = []
        if p.agents:
            self.agents = merge(self.config.agents, p.agents, problems=problems)
        for problem in problems:
            log.warning("agent left out", problem=problem)
        log.info("initialized", client=p.clientInfo and p.clientInfo.name, agents=list(self.agents))
        result: dict[str, Any] = {"protocolVersion": PROTOCOL_VERSION, "serverInfo": {"name": "lmbridge", "version": __version__}}
        if problems:
            result["agentProblems"] = problems
        return {"result": result}

    async def chat_information(self, ctx: _Context, **params: Any) -> Result:
        try:
            ChatInformationParams.model_validate(params)
        except ValidationError as exc:
            return _invalid(exc)
        models, options, images = [], self._options(), self._images()
        for spec in self.agents.values():
            takes_images, agent_options = images.get(spec.id, False), options.get(spec.id)
            models.append(dump(model_info(spec, images=takes_images, options=agent_options, context=self.context_sizes.get(spec.id))))
            own = of_category(select_options(agent_options), "model")
            models += [dump(model_info(spec, choice, takes_images, agent_options, self.context_sizes.get(model_id(spec.id, choice.value)))) for choice in (own.choices if own else ())]
        return Success({"models": models})

    async def presets(self, ctx: _Context, **params: Any) -> Result:
        """``agents/presets``: the known agents an ``{"id": ...}`` entry can name (agents.PRESETS)."""
        from lmbridge.daemon.catalog import PRESETS

        return Success({"presets": [p.info() for p in PRESETS.values()]})

    async def registry(self, ctx: _Context, **params: Any) -> Result:
        """``agents/registry``: the agents of an ACP registry feed the shim fetched, for its
        platform (core.registry; docs/protocol.md). Invalid params (-32602): no feed, a feed
        with no ``agents`` list, an unknown platform."""
        from lmbridge.core.registry import RegistryParams, registry_agents

        try:
            p = RegistryParams.model_validate(params)
            agents, problems = registry_agents(p.feed, p.platform)
        except ValidationError as exc:
            return _invalid(exc)
        except ValueError as exc:
            return invalid_params(str(exc))
        log.info("registry read", agents=len(agents), left_out=len(problems), platform=p.platform)
        return Success({"agents": agents, "problems": problems})

    async def token_count(self, ctx: _Context, **params: Any) -> Result:
        try:
            p = TokenCountParams.model_validate(params)
        except ValidationError as exc:
            return _invalid(exc)
        # An estimate (~4 characters a token): agents do not expose a tokenizer.
        return Success({"count": (len(p.text) + 3) // 4})

    async def debug_idle(self, ctx: _Context, **params: Any) -> Result:
        """``debug/idle`` (only with ``Config.debug_idle``): answered ``null`` once every
        other task of the daemon waits on something (input, a timer, an agent), so what
        came before it has been handled as far as it can be; replay's step signal
        (docs/protocol.md, "debug/idle")."""
        await anyio.wait_all_tasks_blocked()
        return Success(None)

    async def shutdown(self, ctx: _Context, **params: Any) -> Result:
        await self._stop()
        return Success(None)

    async def cancel_request(self, ctx: _Context, **params: Any) -> Result:
        try:
            p = CancelParams.model_validate(params)
        except ValidationError as exc:
            return _invalid(exc)
        target = self.inflight.get(p.id)
        if target is None or not target.chat or target.answered:
            return Success(None)  # done already, or not a chat: nothing to stop
        target.answered = True
        del self.inflight[p.id]
        # Answer now, before anything else queued for stdout after this point.
        self.send({"jsonrpc": "2.0", "result": {"stopReason": "cancelled"}, "id": p.id})
        job = target.job
        if job is not None:
            job.cancelled = True
            if self.history is not None:
                self.history.stopped(job.decision, job.fingerprint())  # before any request read after this cancel
            if job.actor is not None:
                job.actor.cancel(job)
        elif target.withdraw is not None:
            target.withdraw.set()  # it waits for a free session: it gives up
        log.info("request cancelled", id=p.id)
        return Success(None)

    async def chat_response(self, ctx: _Context, **params: Any) -> Result:
        try:
            messages = self.message_cache.messages(params.get("messages"))
            if messages is None:  # not valid: validate it all, for the error
                p = ChatResponseParams.model_validate(params)
            else:
                p = ChatResponseParams.model_validate({**params, "messages": []}).model_copy(update={"messages": messages})
        except ValidationError as exc:
            return _invalid(exc)
        found = split_model_id(p.modelId, self.agents)
        spec = self.agents.get(found[0]) if found is not None else None
        if found is not None and found[1] is not None and not _offers(self._options().get(found[0]), found[1]):
            spec = None  # not one of the agent's own models (as last learnt)
        if spec is None:
            known = ", ".join(self.agents) or "none"
            return Error(UNKNOWN_MODEL, f"unknown model {p.modelId!r} (known: {known})", {"kind": "unknown_model"})
        if self.shutting_down:
            return Error(AGENT_FAILED, SHUTTING_DOWN)
        from lmbridge.core.history import HistoryError
        from lmbridge.daemon.history_actor import AtCapacity, ShuttingDown
        from lmbridge.daemon.session_actor import Job

        rid = ctx.id
        ctx.chat = True  # $/cancelRequest may answer it from now on
        ctx.withdraw = anyio.Event()
        try:
            history = await self._history()
        except ShuttingDown:
            return Error(AGENT_FAILED, SHUTTING_DOWN)
        shown: list[dict[str, Any]] = []  # parts sent while it waited for a free session

        def waiting(text: str) -> None:
            if not ctx.answered:
                part = {"type": "text", "value": text}
                shown.append(part)
                self.send_part(rid, part)

        try:
            decision, actor = await history.begin(
                spec, p.messages, self.workspace[0] if self.workspace else os.getcwd(), waiting=waiting, withdraw=ctx.withdraw
            )
        except HistoryError as exc:
            return invalid_params(f"messages: {exc}")
        except ShuttingDown:  # read before EOF, it reached the history actor after the shutdown
            return Error(AGENT_FAILED, SHUTTING_DOWN)
        except AtCapacity as exc:
            if ctx.answered:
                return Success({"stopReason": "cancelled"})  # already sent; _dispatch_one drops this copy
            return Error(AGENT_FAILED, str(exc))

        async def emit(part: dict[str, Any]) -> None:
            self.send_part(rid, part)

        configuration = p.options.configuration
        picked = session_state.picked(self.configurations.get(p.modelId), configuration or {})
        if configuration is not None:
            self.configurations[p.modelId] = configuration
        job = Job(
            decision=decision, history=tuple(p.messages), emit=emit, tools=tuple(p.options.tools), verbatim=self.verbatim,
            model=found[1] if found else None, configuration=configuration, picked=picked, request_id=rid, report=self._report(p.modelId),
        )  # fmt: skip
        for part in shown:  # VS Code replays it as part of this answer
            job.count(part)
        job.actor = actor
        ctx.job = job
        job.cancelled = ctx.answered  # cancelled while we classified
        if job.cancelled:
            history.stopped(decision, job.fingerprint())
        await actor.submit(job)
        if job.cancelled:
            actor.cancel(job)
        await job.done.wait()
        if job.cancelled:
            return Success({"stopReason": "cancelled"})  # already sent; _dispatch_one drops this copy
        if job.error is not None:
            return Error(AGENT_FAILED, job.error, job.error_data) if job.error_data else Error(AGENT_FAILED, job.error)
        return Success({"stopReason": job.stop_reason})

    async def set_control(self, ctx: _Context, **params: Any) -> Result:
        """``chat/setControl``: one of a chat's controls set on its live session
        (docs/protocol.md, "Per-chat controls")."""
        try:
            p = SetControlParams.model_validate(params)
        except ValidationError as exc:
            return _invalid(exc)
        from lmbridge.daemon.session_actor import SetControl

        actor = self.history.actors.get(p.chatId) if self.history is not None else None
        if actor is None:
            return Error(INVALID_PARAMS, "that chat has no live agent session (send it a message first)")
        request = SetControl(p.controlId, p.value)
        await actor.set_control(request)
        if request.error is not None:
            return Error(AGENT_FAILED, request.error)
        return Success({"chatId": p.chatId, **(request.state or {})})

    def _report(self, model: str) -> Callable[[str, Any, dict[str, Any]], None]:
        """How a chat on ``model`` tells its state (session_state): ``client/sessionState``
        to a shim that takes it; the context window of a ``usage_update`` becomes the
        model's ``maxInputTokens`` (the model list is asked for again when it changes)."""

        def report(chat: str, request_id: Any, state: dict[str, Any]) -> None:
            size = state.get("usage", {}).get("size")
            if isinstance(size, int) and size > 0 and self.context_sizes.get(model) != size:
                self.context_sizes[model] = size
                self._models_changed()
            if self.client.offers("sessionState"):
                params = {"chatId": chat, "modelId": model, **({"requestId": request_id} if request_id is not None else {}), **state}
                self.client.notify("client/sessionState", params)

        return report

    def _models_changed(self) -> None:
        """An agent's own models changed: the shim asks for the list again (``lm/modelsChanged``)."""
        self.send({"jsonrpc": "2.0", "method": "lm/modelsChanged", "params": {}})

    def _options(self) -> dict[str, Any]:
        """Agent id → configOptions: the history actor's, or the state folder's before it runs."""
        if self.history is not None:
            return self.history.options
        if self._cached_options is None:
            self._cached_options = self.config.index.models() if self.config.index is not None else {}
        return self._cached_options

    def _images(self) -> dict[str, bool]:
        """Agent id → whether it takes images: the history actor's, or the state folder's before it runs."""
        if self.history is not None:
            return self.history.images
        if self._cached_images is None:
            self._cached_images = self.config.index.images() if self.config.index is not None else {}
        return self._cached_images

    async def _prewarm(self) -> None:
        """The agents used last (the index's), started ahead of the first chat."""
        from lmbridge.daemon.history_actor import ShuttingDown

        try:
            history = await self._history()
        except ShuttingDown:
            return
        cwd = self.workspace[0] if self.workspace else os.getcwd()
        for agent_id in history.recent:
            spec = self.agents.get(agent_id)
            if spec is not None and not self.shutting_down:
                history.prewarm(spec, cwd)

    async def _history(self) -> HistoryActor:
        """The history actor, started on first use. Raises ``ShuttingDown`` when the
        shutdown has begun before it was started (nothing is started then)."""
        async with self._history_lock:
            if self.history is None:
                from lmbridge.daemon.history_actor import HistoryActor, ShuttingDown

                if self.shutting_down:
                    raise ShuttingDown(SHUTTING_DOWN)

                # What the imports built (the ACP schema's pydantic models: ~60k
                # objects) lives as long as the daemon: out of the garbage
                # collector's way, or each full collection walks it (tens of ms).
                gc.freeze()
                self.history = HistoryActor(
                    self.config.idle_timeout,
                    launcher=self.config.launcher,
                    recorder=self.recorder,
                    max_processes=self.config.max_processes,
                    index=self.config.index,
                    spares=self.config.spare_session,
                    models_changed=self._models_changed,
                    start_notice=self.config.start_notice,
                    session_wait=self.config.session_wait,
                )
                assert self._tg is not None
                await self._tg.start(self.history.run)
            return self.history

    async def _stop(self) -> None:
        """Close every session (agents stop); requests in flight end with an error."""
        self.shutting_down = True
        if self.history is not None:
            await self.history.aclose("daemon shutting down")


def _offers(config_options: Any, value: str) -> bool:
    """Whether ``value`` is one of the agent's own models (its ``model`` config option)."""
    own = of_category(select_options(config_options), "model")
    return own is not None and any(c.value == value for c in own.choices)


_REQUEST_KEYS = frozenset({"jsonrpc", "method", "params", "id"})


def _valid_one(request: Any) -> bool:
    # jsonrpcserver's request-schema.json (draft 4), checked in O(1): its own
    # check, with jsonschema, builds the repr of every request that is not a
    # batch (the "oneOf" branch that fails), 14 ms for a 2 MB chat request.
    if type(request) is not dict or not request.keys() <= _REQUEST_KEYS:
        return False
    if request.get("jsonrpc") != "2.0" or type(request.get("method")) is not str:
        return False
    if "id" in request and (type(request["id"]) is bool or not isinstance(request["id"], (str, int, float, type(None)))):
        return False
    return "params" not in request or isinstance(request["params"], (list, dict))


def validate_request(request: Any) -> Any:
    """jsonrpcserver's ``validator``: a request, or a non-empty batch of them; raises if not."""
    if _valid_one(request) or (type(request) is list and request and all(_valid_one(r) for r in request)):
        return request
    raise ValueError("not a JSON-RPC 2.0 request")


def _plain_request(request: Any) -> bool:
    """A JSON-RPC request as jsonrpcserver would accept it, params an object."""
    return _valid_one(request) and "id" in request and isinstance(request.get("params", {}), dict)


# ---------------------------------------------------------------- frames out

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# The only characters UTF-8 cannot encode are lone surrogates (JSON allows them
# escaped, JavaScript strings hold them); in JSON text they can only sit inside a
# string, where "backslashreplace" writes exactly JSON's escape for them: \udc00.
_JSON_ESCAPE = "backslashreplace"
_MERGEABLE = ("text", "thinking")


def encode_batch(batch: list[Any]) -> bytes:
    """Frames queued for stdout → the bytes to write, in order.

    Items are encoded frames (bytes) or response parts ``(request id, part)``;
    a run of consecutive parts of the same request and type (text, or
    thinking with the same id) becomes one part holding their values joined.
    """
    out: list[bytes] = []
    run_rid: Any = None
    run_part: dict[str, Any] | None = None
    run_values: list[str] = []

    def flush() -> None:
        if run_part is None:
            return
        part = run_part if len(run_values) == 1 else {**run_part, "value": "".join(run_values)}
        out.append(f'{{"jsonrpc":"2.0","method":"lm/responsePart","params":{{"requestId":{_encode(run_rid)},"part":{_encode(part)}}}}}\n'.encode("utf-8", _JSON_ESCAPE))

    for item in batch:
        if type(item) is tuple:
            rid, part = item
            kind = part.get("type")
            if (
                run_part is not None
                and kind in _MERGEABLE
                and kind == run_part.get("type")
                and rid == run_rid
                and type(rid) is type(run_rid)
                and part.get("id") == run_part.get("id")
                and type(part.get("value")) is str
            ):
                run_values.append(part["value"])
                continue
            flush()
            if kind in _MERGEABLE and type(part.get("value")) is str:
                run_rid, run_part, run_values = rid, part, [part["value"]]
            else:
                run_part, run_values = None, []
                out.append(f'{{"jsonrpc":"2.0","method":"lm/responsePart","params":{{"requestId":{_encode(rid)},"part":{_encode(part)}}}}}\n'.encode("utf-8", _JSON_ESCAPE))
        else:
            flush()
            run_part, run_values = None, []
            out.append(item)
    flush()
    return b"".join(out)


# ---------------------------------------------------------------- stdio


PIPE_SIZE = 1 << 20  # bytes; Linux's default limit for an unprivileged process


def _widen_pipe(fd: int) -> None:
    """Give a pipe 1 MiB of buffer instead of 64 KiB (Linux): a 2 MB chat request
    crosses in 2 rounds between the processes instead of 35."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)  # Linux only (Python ≥ 3.10)
    except (OSError, ImportError, AttributeError, ValueError):
        pass  # not a pipe, not Linux, or over the limit: the default is fine


async def stdin_lines() -> AsyncIterator[bytes]:
    """The daemon's stdin as lines. Pipes and terminals are read by the event
    loop; regular files (``lmbridge serve < frames.jsonl``) from a thread."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_FRAME)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
        _widen_pipe(sys.stdin.fileno())
    except ValueError:
        while line := await anyio.to_thread.run_sync(sys.stdin.buffer.readline):
            yield line
        return
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                yield exc.partial
            return
        except asyncio.LimitOverrunError as exc:
            await reader.readexactly(exc.consumed)  # drop the oversized frame's start
            log.error("frame longer than the limit skipped", limit=MAX_FRAME)
            continue
        yield line


@dataclass
class Stdout:
    """Where frames go. ``write`` never waits (a pipe's transport buffers what
    the reader has not taken yet); ``paused()``: that buffer is over its
    high-water mark; ``drain()`` waits until it is not; ``buffered()``: bytes
    not handed to the OS yet."""

    write: Callable[[bytes], None]
    paused: Callable[[], bool] = lambda: False
    drain: Callable[[], Awaitable[None]] = field(default=lambda: asyncio.sleep(0))
    buffered: Callable[[], int] = lambda: 0


async def stdout_writer() -> Stdout:
    """The daemon's stdout (a pipe: through the event loop; a file or terminal: blocking)."""
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
    except ValueError:

        def write_blocking(data: bytes) -> None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

        return Stdout(write_blocking)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    _, high = transport.get_write_buffer_limits()
    return Stdout(
        write=transport.write,
        paused=lambda: transport.get_write_buffer_size() > high,
        drain=writer.drain,
        buffered=transport.get_write_buffer_size,
    )


# Collect young objects after 50,000 net allocations, not 700: parsing a 2 MB chat
# request makes ~20,000 objects that live until the request ends; with the default they
# went through ~40 young and ~4 middle collections a request and set off a full one
# every few requests (~20 ms). Measured at 5,000 messages: 16.0 → 12.4 ms end to end.
GC_THRESHOLDS = (50_000, 20, 10)


async def run(config: Config) -> None:
    """``lmbridge serve``: the daemon on this process's stdio until EOF."""
    gc.set_threshold(*GC_THRESHOLDS)
    server = Server(config)

    async def on_signals(scope: anyio.CancelScope) -> None:
        with scope, anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
            async for _ in signals:
                server.stop_reading()  # SIGTERM ends the daemon like EOF: agents stopped, answers sent
                return

    watcher = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(on_signals, watcher)
        await server.serve(stdin_lines(), await stdout_writer())
        watcher.cancel()
