"""The composition root: builds the daemon's services, wires them, owns their task group.

``lmbridge serve`` runs ``run(config)``: the daemon on this process's stdio until EOF or
SIGTERM (docs/architecture.md, "Tasks and ownership"; docs/reliability.md, "Shutdown").

Start-up cost matters (the shim waits for ``initialize``): what ``initialize`` does not
need is imported after it is answered (docs/performance.md, "Start-up and idle"): the
method table and the router (``front.Front`` answers ``initialize``), the session index, the
history and session actors, and with them the ACP SDK, the session cap's rules, the agents'
terminals; ``tests/test_startup.py`` pins what is loaded when the answer is written.
"""

from __future__ import annotations

import gc
import signal
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from lmbridge.core.link import AgentSpec
from lmbridge.daemon.catalog import Catalog, node_problem
from lmbridge.daemon.front import Front, Settings
from lmbridge.daemon.stdio import Chunks, RequestId, StdioPeer, Stdout, StdoutWriter, stdin_stream, stdout_writer
from lmbridge.log import get_logger
from lmbridge.rpc.channel import ShimChannel

if TYPE_CHECKING:
    from lmbridge.acp.process import AgentFeatures, AgentPool, Launcher
    from lmbridge.acp.terminals import TerminalHost
    from lmbridge.daemon.history_actor import HistoryActor
    from lmbridge.daemon.methods import InFlight, Methods
    from lmbridge.daemon.router import Router
    from lmbridge.daemon.services import Prewarmer, RecentAgents, Saver
    from lmbridge.daemon.session_index import SessionIndex
    from lmbridge.rpc.record import Recorder

log = get_logger("daemon")


@dataclass
class Config:
    """What ``lmbridge serve`` was started with."""

    agents: list[AgentSpec] = field(default_factory=list)
    idle_timeout: float = 1800.0
    recorder: Recorder | None = None  # --record: every frame on every link
    # How agents are started (None: AgentConnection.spawn). Replay passes its player's:
    # the recorded spawn, then a stand-in process that plays the agent back.
    launcher: Launcher | None = None
    max_processes: int = 4  # live ACP sessions per agent (--max-agent-processes)
    index: SessionIndex | None = None  # the state folder's session index; None (and no ``open_index``): nothing persisted
    # lmbridge serve: makes ``index`` when first needed, after ``initialize`` is answered
    # (``Server.index``: daemon/session_index.py is not loaded before the answer).
    open_index: Callable[[], SessionIndex] | None = None
    prewarm: bool = False  # start the agents used last after initialize (needs ``index``)
    spare_session: bool = False  # keep a spare ACP session per running agent process (lmbridge serve: on; --no-spare-session)
    # Seconds a new chat over the session cap waits for a free session (None: cap.SESSION_WAIT).
    session_wait: float | None = None
    # Seconds before "Starting <agent>…" is shown (None: LMBRIDGE_START_NOTICE or 0.5 s). Replay
    # passes infinity: a wall-clock notice is not part of a recording.
    start_notice: float | None = None
    # Answer ``debug/idle`` (lmbridge serve --debug-idle; docs/protocol.md): off by default.
    debug_idle: bool = False


class Server:
    """The daemon: reads frames from ``lines``, writes frames to ``stdout`` (``serve``).

    Services, each the one owner of its state: ``out`` (stdout), ``catalog`` (the agents
    and what was learnt of them), ``front`` (what the shim link hands requests to:
    ``initialize`` answered there), ``methods`` (the method table and the requests in
    flight) and ``router`` (chat requests to session actors), both made after the answer,
    and the history actor, started on the first chat (it owns the sessions and, through
    them, every agent process)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.recorder = config.recorder
        self.out = StdoutWriter(config.recorder)
        # Requests and notifications to the shim (client/*), and its answers.
        self.client = ShimChannel(self.out.send)
        # terminal/* served to agents (acp.terminals): commands they run through lmbridge,
        # mirrored in VS Code terminals where the shim serves them; all killed at the end.
        # Made with the history actor: no agent runs a command before it.
        self.terminals: TerminalHost | None = None
        # What persists: the session index, made when first needed (``index``).
        self.persists = config.index is not None or config.open_index is not None
        self.catalog = Catalog(config.agents, lambda: self.index, changed=self._models_changed)
        self.settings = Settings()
        self.front = Front(
            lambda: self.methods, self.out, self.catalog, self.client, self.settings, initialized=self._initialized,
            heard=lambda: self.stdin.last_line if self.stdin is not None else 0.0,
        )  # fmt: skip
        self._methods: Methods | None = None  # made with the router on first use (``methods``)
        self._router: Router | None = None
        self.recent: RecentAgents | None = None  # made with the history actor (daemon.services: after initialize)
        # Started with the first chat (so the ACP SDK is imported then, not at start-up):
        self.history: HistoryActor | None = None
        self.pool: AgentPool | None = None
        self.prewarmer: Prewarmer | None = None
        self.saver: Saver | None = None
        self.shutting_down = False
        self.stdin: StdioPeer | None = None  # the shim link, while ``serve`` runs
        self._tg: anyio.abc.TaskGroup | None = None
        self._history_lock = anyio.Lock()
        self._reading = anyio.CancelScope()

    @property
    def index(self) -> SessionIndex | None:
        """The session index (``Config.index``, made by ``Config.open_index`` the first time
        it is asked for); None: nothing persisted."""
        if self.config.index is None and self.config.open_index is not None:
            self.config.index = self.config.open_index()
        return self.config.index

    @property
    def methods(self) -> Methods:
        """The method table (``methods.Methods``), made with the router the first time it
        is asked for: after ``initialize`` is answered (``front.Front``)."""
        if self._methods is None:
            from lmbridge.daemon.methods import Methods
            from lmbridge.daemon.router import Router

            self._router = Router(self.out, self.catalog, self.settings, self._history, closing=lambda: self.shutting_down, client=self.client)
            self._methods = Methods(
                self.front, self._router, stop=self._stop, debug_idle=self.config.debug_idle,
                terminal_killed=self._terminal_killed,
            )  # fmt: skip
        return self._methods

    @property
    def router(self) -> Router:
        """The router (``router.Router``), made with the method table."""
        if self._router is None:
            self.methods  # noqa: B018  (makes both)
        assert self._router is not None
        return self._router

    @property
    def inflight(self) -> dict[RequestId, InFlight]:
        """Requests being handled, by id (``methods.Methods.inflight``)."""
        return self.methods.inflight

    @property
    def stray_responses(self) -> int:
        """Frames on stdin that were responses to no request in flight (``StdioPeer``)."""
        return self.stdin.stray_responses if self.stdin is not None else 0

    async def serve(self, stdin: anyio.abc.ByteReceiveStream | AsyncIterable[bytes], stdout: Stdout) -> None:
        """Serve the shim link: frames read from ``stdin`` (a byte stream, or byte chunks:
        lines, as tests feed them), frames written to ``stdout``. Runs until ``stdin`` ends
        (EOF): then stops every agent and returns."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            stream = stdin if isinstance(stdin, anyio.abc.ByteReceiveStream) else Chunks(stdin)
            peer = self.stdin = StdioPeer(stream, self.front, self.out, tg, self.client.deliver, self.recorder)
            await tg.start(self.out.run, stdout)
            with self._reading:  # cancelled by stop_reading (SIGTERM): as at EOF
                await peer.read()
            if self.recorder is not None:
                self.recorder.shim_eof()
            self.client.close()  # no one reads our stdout any more: client/* requests fail at once
            log.info("stdin closed: shutting down" if not self._reading.cancel_called else "stopped by a signal: shutting down")
            await self._stop()
            # Requests read before EOF are still answered (their agents are gone,
            # so chat requests end with an error at once); one still running after
            # that is answered here, before its task is cancelled: never dropped.
            await peer.idle(5)
            if self._methods is not None:  # no table: no request in flight
                self._methods.fail_inflight()
            await self.out.drain()
            tg.cancel_scope.cancel()

    def stop_reading(self) -> None:
        """Stop reading stdin and shut down as at EOF (what SIGTERM does): requests
        already read are answered, every agent is stopped."""
        self._reading.cancel()

    def _models_changed(self) -> None:
        """An agent's own models changed: the shim asks for the list again (``lm/modelsChanged``)."""
        self.out.send({"jsonrpc": "2.0", "method": "lm/modelsChanged", "params": {}})

    def _agent_ready(self, agent_id: str, caps: AgentFeatures) -> None:
        """An agent process is initialized: what its answer says of the agent (its images, its profile) is kept."""
        self.catalog.saw_images(agent_id, caps.images)
        self.catalog.saw_profile(agent_id, caps.profile)

    def _terminal_killed(self, terminal_id: str) -> None:
        if self.terminals is not None:
            self.terminals.killed(terminal_id)

    def _initialized(self) -> None:
        if self.config.prewarm and self.persists and self._tg is not None:
            self._tg.start_soon(self._prewarm)

    async def _prewarm(self) -> None:
        """The agents used last (the index's), started ahead of the first chat."""
        from lmbridge.daemon.history_actor import ShuttingDown

        try:
            await self._history()
        except ShuttingDown:
            return
        assert self.prewarmer is not None and self.recent is not None
        agents = [self.catalog.agents[a] for a in self.recent.agents if a in self.catalog.agents]
        self.prewarmer.start(agents, self.router.cwd)

    async def _history(self) -> HistoryActor:
        """The history actor, started on first use. Raises ``ShuttingDown`` when the
        shutdown has begun before it was started (nothing is started then)."""
        async with self._history_lock:
            if self.history is None:
                from lmbridge.daemon.history_actor import HistoryActor, ShuttingDown

                if self.shutting_down:
                    from lmbridge.daemon.methods import SHUTTING_DOWN

                    raise ShuttingDown(SHUTTING_DOWN)

                from lmbridge.acp.files import Files
                from lmbridge.acp.process import AgentPool
                from lmbridge.acp.terminals import ClientMirror, TerminalHost
                from lmbridge.core import cap
                from lmbridge.daemon.services import Prewarmer, RecentAgents, Saver, ToolsHost

                # What the imports built (the ACP schema's pydantic models: ~60k
                # objects) lives as long as the daemon: out of the garbage
                # collector's way, or each full collection walks it (tens of ms).
                gc.freeze()
                config, tg, index = self.config, self._tg, self.index
                assert tg is not None
                tools = ToolsHost(tg)
                self.recent = RecentAgents(index)
                self.terminals = terminals = TerminalHost(ClientMirror(self.client))
                # One process per agent, shared by its chats (docs/sessions.md); it exits once idle.
                self.pool = pool = AgentPool(
                    config.idle_timeout, launcher=config.launcher, recorder=self.recorder, spares=config.spare_session, mcp_host=tools,
                    on_ready=self._agent_ready, terminals=terminals, preflight=node_problem,
                    folders=lambda: self.router.settings.workspace,
                )  # fmt: skip
                settings = self.router.settings
                # The agents' fs/* requests: through the shim when it offers fs, else the disk;
                # inside the workspace folders (the daemon's cwd without any: where agents run).
                files = Files(self.client, lambda: settings.workspace or [self.router.cwd], edit_rules=lambda: settings.edit_auto_approve)
                self.history = history = HistoryActor(
                    pool, self.catalog, tools, self.recent,
                    idle_timeout=config.idle_timeout, recorder=self.recorder, max_processes=config.max_processes, index=index,
                    start_notice=config.start_notice, session_wait=cap.SESSION_WAIT if config.session_wait is None else config.session_wait, files=files,
                )  # fmt: skip
                self.prewarmer = Prewarmer(pool, self.catalog, tg, closing=lambda: self.shutting_down)
                await tg.start(pool.run)
                if index is not None:
                    # Read off the event loop, before the first request needs them.
                    await self.recent.load()
                    await anyio.to_thread.run_sync(self.catalog.options)
                    await anyio.to_thread.run_sync(self.catalog.images)
                    self.saver = Saver([history, self.recent, self.catalog], str(index.path))
                await tg.start(history.run)
                if self.saver is not None:
                    tg.start_soon(self.saver.run)
            return self.history

    async def _stop(self) -> None:
        """Close every session (agents stop), then the agent pool; write what changed to the
        session index. Requests in flight end with an error."""
        self.shutting_down = True
        if self.history is not None:
            await self.history.aclose("daemon shutting down")
        if self.pool is not None:
            await self.pool.aclose()
        if self.terminals is not None:
            await self.terminals.aclose()  # any a session left (each session kills its own)
        if self.saver is not None:
            with anyio.CancelScope(shield=True):
                await self.saver.save()


# Collect young objects after 50,000 net allocations, not 700: parsing a 2 MB chat
# request makes ~20,000 objects that live until the request ends; with the default they
# went through ~40 young and ~4 middle collections a request and set off a full one
# every few requests (~20 ms). Measured at 5,000 messages: 16.0 → 12.4 ms end to end.
GC_THRESHOLDS = (50_000, 20, 10)


async def run(config: Config) -> None:
    """``lmbridge serve``: the daemon on this process's stdio until EOF. The garbage
    collector, off while ``lmbridge serve`` imported what it needs (``cli``), is on from
    here: one young collection then goes through what the imports left, where ~80 did."""
    gc.set_threshold(*GC_THRESHOLDS)
    gc.enable()
    server = Server(config)

    async def on_signals(scope: anyio.CancelScope) -> None:
        with scope, anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
            async for _ in signals:
                server.stop_reading()  # SIGTERM ends the daemon like EOF: agents stopped, answers sent
                return

    watcher = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(on_signals, watcher)
        await server.serve(await stdin_stream(), await stdout_writer())
        watcher.cancel()
