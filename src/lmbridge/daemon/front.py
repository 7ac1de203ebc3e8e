"""What the shim link hands its requests to first (``stdio.Dispatch``): ``initialize`` is
answered here, every other request by the method table (``methods.Methods``), which is made on
first use, after that answer (docs/performance.md, "Start-up: the method table and the session
index after the answer").

``Front`` answers an ``initialize`` request whose params are an object (what the shim sends
first: ``Front.answer`` takes its settings and configures the agents) without the method
table, the router it hands chats to, or jsonrpcserver, then starts the warm-up
(``daemon.warm``), which imports them at once. Anything else goes to the table
(``Front.table``), also an ``initialize`` jsonrpcserver must check (params given as an array,
a notification), which gives the same answer (``Methods.initialize``). Each method's params
are validated once, by its wire model (``validated``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from lmbridge import __version__
from lmbridge.core.errors import INVALID_PARAMS
from lmbridge.core.link import PROTOCOL_VERSION, InitializeParams
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from lmbridge.daemon.catalog import Catalog
    from lmbridge.daemon.stdio import Dispatch, RequestId, StdoutWriter
    from lmbridge.rpc.channel import ShimChannel

log = get_logger("methods")

P = TypeVar("P", bound=BaseModel)

#: The methods that never wait (``Methods.dispatch_now``; ``stdio.Dispatch.immediate``).
IMMEDIATE = frozenset({"lm/provideTokenCount", "agents/presets", "$/cancelRequest", "$/terminalKilled"})


class InvalidParams(Exception):
    """-32602: a request's params are not what its method takes (``message`` names the
    first field at fault)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = f"invalid params: {message}"


def validated(model: type[P], params: Mapping[str, Any]) -> P:
    """``params`` as ``model`` (a wire model, ``core.link`` or ``core.messages``): the one
    place a method's params are validated. Raises ``InvalidParams`` naming the first field
    at fault."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "params"
        raise InvalidParams(f"{where}: {first['msg']}") from exc


@dataclass
class Settings:
    """What ``initialize`` set: the workspace folders (the first is agents' cwd) and
    whether Copilot's user messages are forwarded as they are (``userTurns: "verbatim"``)."""

    workspace: list[str] = field(default_factory=list)
    verbatim: bool = False
    edit_auto_approve: dict[str, bool] | None = None  # the user's chat.tools.edits.autoApprove (None: VS Code's default)


class Front:
    """The shim link's ``stdio.Dispatch``. ``table()``: the method table, made on first use
    (``make``); ``initialized``: called once the first ``initialize`` is answered
    (pre-warming); ``heard``: when the shim link last handled a line (``time.monotonic()``),
    which the warm-up gives way to (``daemon.warm``)."""

    immediate = IMMEDIATE

    def __init__(
        self,
        make: Callable[[], Dispatch],
        out: StdoutWriter,
        catalog: Catalog,
        client: ShimChannel,
        settings: Settings,
        *,
        initialized: Callable[[], None] = lambda: None,
        heard: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self._make = make
        self._table: Dispatch | None = None
        self.out = out
        self.catalog = catalog
        self.client = client
        self.settings = settings  # written by initialize (its workspace by $/workspaceFolders too)
        self._initialized = initialized
        self._heard = heard
        self._client_name: str | None = None  # initialize's clientInfo.name
        self._started = False  # the first initialize started the warm-up and pre-warming

    def table(self) -> Dispatch:
        """The method table (``methods.Methods``), made the first time it is asked for."""
        if self._table is None:
            self._table = self._make()
        return self._table

    # -- stdio.Dispatch -------------------------------------------------------

    def known(self, method: str) -> bool:
        return method == "initialize" or self.table().known(method)

    def in_flight(self, rid: RequestId) -> bool:
        # Only the table's requests are in flight (the ones answered here are answered at once).
        return self._table is not None and self._table.in_flight(rid)

    def dispatch_now(self, request: dict[str, Any]) -> None:
        self.table().dispatch_now(request)

    async def dispatch(self, request: dict[str, Any], served: Callable[[], None] = lambda: None) -> None:
        """``initialize`` with params given as an object, answered here, before the method
        table and jsonrpcserver are loaded; any other request by the table."""
        if request.get("method") != "initialize" or "id" not in request or not isinstance(request.get("params", {}), dict):
            await self.table().dispatch(request, served)
            return
        try:
            answer = self.answer(validated(InitializeParams, request.get("params", {})))
        except InvalidParams as exc:
            answer = {"error": {"code": INVALID_PARAMS, "message": exc.message}}
        self.out.send({"jsonrpc": "2.0", **answer, "id": request["id"]})
        # After the answer is written (the writer's flush is queued first): what it
        # logged, then the warm-up. Nothing is logged before it (structlog's import).
        loop = asyncio.get_running_loop()
        loop.call_soon(self.said, answer)
        if not self._started:
            # Start-up work is done once: an initialize sent again (its settings taken, as
            # the first's) starts no second warm-up nor pre-warming (docs/reliability.md,
            # "The slowest answers, found": each one made the chats behind it wait).
            self._started = True
            loop.call_soon(self._warm_up)
            self._initialized()

    def _warm_up(self) -> None:
        from lmbridge.daemon.warm import warm_up

        warm_up(self._heard)

    # -- initialize -------------------------------------------------------------

    def answer(self, p: InitializeParams) -> dict[str, Any]:
        """``initialize``: its settings taken, the agents it names configured
        (``Catalog.configure``); ``{"result": ...}`` (with ``agentProblems``: the entries left
        out) or ``{"error": ...}`` (-32602: another protocol version)."""
        if p.protocolVersion != PROTOCOL_VERSION:
            message = f"invalid params: unsupported protocolVersion {p.protocolVersion}; this daemon speaks {PROTOCOL_VERSION}"
            return {"error": {"code": INVALID_PARAMS, "message": message}}
        self.settings.workspace = list(p.workspaceFolders)
        self.client.set_capabilities(p.clientCapabilities.model_dump())
        self.settings.verbatim = p.userTurns == "verbatim"
        self.settings.edit_auto_approve = p.editAutoApprove
        problems = self.catalog.configure(p.agents)
        self._client_name = p.clientInfo.name if p.clientInfo else None
        result: dict[str, Any] = {"protocolVersion": PROTOCOL_VERSION, "serverInfo": {"name": "lmbridge", "version": __version__}}
        if problems:
            result["agentProblems"] = problems
        return {"result": result}

    def said(self, answer: Mapping[str, Any]) -> None:
        """Log what ``initialize`` answered (once it is written: ``dispatch``)."""
        if "result" not in answer:
            return
        for problem in answer["result"].get("agentProblems", ()):
            log.warning("agent left out", problem=problem)
        log.info("initialized", client=self._client_name, agents=list(self.catalog.agents))
