"""The agent pool: one agent process per configured agent, shared by its chats (docs/sessions.md, "One process per agent").

A chat's session actor no longer starts an agent of its own: it asks the pool
for the agent's ``AgentProcess`` and opens its ACP session on it. One process
per distinct (agent id, command, arguments, environment, cwd), started on first
use, ``initialize``d once; its sessions are multiplexed by ``sessionId``.

The process is the ``events`` sink of its ``AgentConnection``: each frame the
agent sends is routed, in arrival order and without a task switch, to the
mailbox of the session actor that owns it: ``session/update`` and the agent's
requests by ``params.sessionId``, the answer to a ``session/prompt`` by its
request id. A frame of a child session the agent announced in an open one (a
subagent's, ``core.subagents``) goes to that session's actor, re-addressed to its
session, so it is shown and answered like the chat's own. A frame for no open session
nor a child of one is answered here (a permission ``cancelled``, anything else
method-not-found) or dropped, so two chats never see each other's traffic and nothing
is approved for a session nobody shows.

When the process exits, every actor using it gets ``AgentGone``; the next start
spawns a new one. A process nobody has used for ``idle`` seconds exits.

Health: a process that misses a bound is stuck, and it is replaced (``stuck``): a new
process must answer ``initialize`` within ``START_TIMEOUT`` (a first start through ``npx``
downloads the agent first), a running one each session request (``session/new``,
``session/resume``, ``session/load``, ``authenticate``, ``session/set_config_option``)
within ``SESSION_TIMEOUT``. A stuck process is stopped: its chats get ``AgentGone`` once,
with the agent's name and the request it missed; the next chat starts a new process
(docs/sessions.md, "A stuck agent process").

With ``spares`` on, each running process keeps spare ACP sessions ready (its agent's
``AgentProfile.spares``, or ``SPARE_COUNT`` for every agent), so new chats, back to back too,
do not wait for ``session/new``. Each is
opened with its own VS Code tools endpoint, which serves from the start the tools the last
new chat offered (agents list them once, at session start) and runs none until a chat
adopts it; with none offered it has no endpoint, as a session opened for a chat offering
none (so the MCP SDK is not loaded for it: docs/performance.md, "Start-up and idle"); a
chat offering the same tools (``mcp_bridge.same_tools``) adopts one, one offering others
gets a fresh session and the spares are closed; so is a spare given other workspace
folders (``additionalDirectories``) than a session opened now would get (the folders
changed since). When they are opened is ``core.spares.to_open``'s rule: one taken while
others are left (ready or being opened) is replaced once the process is quiet (no prompt in
flight and no spare taken for ``core.spares.QUIET`` s: a burst of chats back to back takes
the ones left, and no Claude Code child starts beside their answers); the last one taken,
or a chat that finds none and has opened its own, has the next ones opened at once
(docs/sessions.md, "Pre-warming and the spare session").
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVarTuple, Unpack

import anyio
from anyio.abc import TaskGroup

from lmbridge import __version__
from lmbridge.acp import files, terminals
from lmbridge.acp.connection import BAD_ID_ERROR, AgentConnection, AgentUnavailable, EventSink, Incoming, Response
from lmbridge.acp.interfaces import AgentFeatures, AgentGone, Mailbox, Spare
from lmbridge.acp.session import new_session, start_in_mode
from lmbridge.acp.terminals import TerminalHost
from lmbridge.core import auth, elicitation, errors, paths, permissions, spares, subagents
from lmbridge.core.json_values import json_object
from lmbridge.core.messages import AgentSpec
from lmbridge.core.session_state import state_kind
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from lmbridge.core.messages import ToolInfo
    from lmbridge.rpc.record import Recorder
    from lmbridge.tools.mcp_bridge import McpHost, McpServer, ToolBridge, ToolCall

__all__ = ["AgentFeatures", "AgentGone", "AgentPool", "AgentProcess", "AgentStuck", "Launcher", "Mailbox", "Spare"]


class Launcher(Protocol):
    """How an agent process is started: ``AgentConnection.spawn``'s signature (replay
    passes its player's, which plays a recorded agent back)."""

    async def __call__(
        self, name: str, command: str, args: Sequence[str], env: Mapping[str, str], cwd: str | None, events: EventSink,
        session: str | None = None, recorder: Recorder | None = None,
    ) -> AgentConnection: ...

log = get_logger("pool")

#: Sessions nobody routes yet whose state updates are kept (``AgentProcess.unrouted``).
UNROUTED_SESSIONS = 16

#: Seconds an answer to a frame for no session may take to reach the agent.
ORPHAN_WRITE_TIMEOUT = 10.0
#: Seconds the agent may take to answer ``session/close`` for a spare no chat took.
SPARE_CLOSE_TIMEOUT = 10.0


def _seconds(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


#: Spare sessions kept ready per running process of any agent where spares are on
#: (``$LMBRIDGE_SPARE_SESSIONS``, at least 1); None (unset): each agent's own
#: (``AgentProfile.spares``, chosen by ``make bench-sessions``: docs/sessions.md, "Measured").
SPARE_COUNT: int | None = max(1, int(os.environ["LMBRIDGE_SPARE_SESSIONS"])) if os.environ.get("LMBRIDGE_SPARE_SESSIONS") else None


#: Seconds with no prompt in flight and no spare taken after which a process is quiet and its
#: spares taken are replaced (``core.spares.QUIET``; ``$LMBRIDGE_SPARE_QUIET``, for tests).
SPARE_QUIET = _seconds("LMBRIDGE_SPARE_QUIET", spares.QUIET)

#: Seconds a new process may take to answer ``initialize`` (its spawn included): the first
#: start of an ``npx`` agent downloads it first. The chat shows progress meanwhile.
START_TIMEOUT = _seconds("LMBRIDGE_START_TIMEOUT", 180.0)
#: Seconds a running process may take to answer one session request; past it the process
#: is stuck and replaced.
SESSION_TIMEOUT = _seconds("LMBRIDGE_SESSION_TIMEOUT", 20.0)


class AgentStuck(AgentUnavailable):
    """A running agent process missed a bound and was stopped (``AgentProcess.stuck``):
    the message names the agent and what it did not answer."""


def client_capabilities(*, terminal: bool) -> dict[str, Any]:
    """``initialize``'s ``clientCapabilities``: what lmbridge serves an agent (docs/agents.md).
    ``terminal``: ``terminal/*`` is served (``acp.terminals``). ``_meta.terminal_output``:
    a command's output may come as ``_meta.terminal_output`` on its tool call's updates
    (codex-acp streams it; claude-agent-acp sends it once the command has ended): the
    answer shows it as it comes (``core.live``). ``fs``: ``fs/read_text_file`` and
    ``fs/write_text_file`` are served (``acp.files``). ``auth.terminal``: agents list the login
    they run in a terminal (``core.auth``). ``session.notices``: what the agent tells the user
    that is not its answer comes as ``notice`` updates, shown apart (``core.notices``).
    ``elicitation.form``: the agent may ask the user questions (``elicitation/create``, form
    mode; ``core.elicitation``); url mode is not offered (docs/agents.md, "Questions")."""
    return {
        "fs": {"readTextFile": True, "writeTextFile": True},  # served by the session actor (acp/files.py: through VS Code, else disk)
        "terminal": terminal,
        "auth": {"terminal": True},
        "session": {"notices": {}},
        "elicitation": {"form": {}},
        "_meta": {"terminal_output": True},
    }


def same_tools(a: Sequence[ToolInfo], b: Sequence[ToolInfo]) -> bool:
    """``mcp_bridge.same_tools``, without loading the MCP SDK when neither offers a tool."""
    if not a and not b:
        return True
    from lmbridge.tools.mcp_bridge import same_tools

    return same_tools(a, b)


#: (agent id, command, arguments, environment, cwd): chats with equal keys share a process.
ProcessKey = tuple[str, str, tuple[str, ...], tuple[tuple[str, str], ...], str | None]


def process_key(spec: AgentSpec, cwd: str | None) -> ProcessKey:
    """What makes two chats share a process: the same agent started the same way."""
    return (spec.id, spec.command, tuple(spec.args), tuple(sorted(spec.env.items())), cwd)


class AgentProcess:
    """One running (or startable) agent process and the ACP sessions open on it."""

    def __init__(self, pool: AgentPool, spec: AgentSpec, cwd: str | None) -> None:
        self.pool = pool
        self.spec = spec
        self.cwd = cwd
        self.conn: AgentConnection | None = None  # set once initialized
        self._starting: AgentConnection | None = None  # spawned, initialize not answered yet
        self.caps = AgentFeatures()
        self.init: dict[str, Any] = {}  # the initialize answer
        self.users: set[Mailbox] = set()  # the mailboxes of the session actors using it (told AgentGone)
        self.sessions: dict[str, Mailbox] = {}  # ACP sessionId → the mailbox of the actor that owns it
        # ACP sessionId → the latest session-state update of each kind (session_state.STATE_KINDS)
        # of a session nobody routes yet: an agent tells its commands just after answering
        # session/new (claude-agent-acp), before the session is routed, or to the spare.
        self.unrouted: dict[str, dict[str, Incoming]] = {}
        # The child sessions its sessions announced (subagents): their frames go to the parent's chat.
        self.children = subagents.Children()
        self.responses: dict[int, Mailbox] = {}  # session/prompt request id → the mailbox of the actor that sent it
        self._lock = anyio.Lock()
        self._idle: anyio.CancelScope | None = None
        self.spares: list[Spare] = []  # ready, the oldest first
        # Each spare being opened: the tools it offers and the additionalDirectories it is given.
        self._preparing: list[tuple[list[ToolInfo], tuple[str, ...]]] = []
        self._spare_done = anyio.Event()  # set (and replaced) each time a spare being opened is ready (or failed)
        self._replace_later = False  # a spare was taken while others were left: replaced once the process is quiet
        self._busy = 0  # counts prompts sent and spares taken: the quiet wait (core.spares.QUIET) restarts at each
        self.spare_tools: list[ToolInfo] = []  # the tools the last new chat offered: the next spare's
        self.stale = False  # said it needs a login: restarted once nobody uses it (retire)
        self.auth_status: auth.Status | None = None  # what its last _auth/status_update said
        self.spawned_by: Mailbox | None = None  # the user whose connect started the running process
        self.stopped_stuck: weakref.WeakSet[AgentConnection] = weakref.WeakSet()  # connections stopped by ``stuck``

    @property
    def running(self) -> bool:
        return self.conn is not None and self.conn.alive

    # -- used by session actors -------------------------------------------------

    async def connect(self, mailbox: Mailbox, step: Callable[[str], None] = lambda _: None) -> AgentConnection:
        """The running connection, after starting the process (spawn + ``initialize``) if
        none runs. ``mailbox`` (a session actor's: who uses the process) is attached (it gets
        ``AgentGone``) until ``detach``.

        ``step`` is told what is being waited on (for a start timeout's message).
        Raises ``AgentUnavailable`` (could not start, or exited while starting),
        ``AgentError`` (``initialize`` refused), ``ValueError`` (not an ACP answer).
        """
        self.attach(mailbox)
        async with self._lock:
            if self.running:
                assert self.conn is not None
                return self.conn
            pool = self.pool
            if not pool.open:
                raise AgentUnavailable(f"agent {self.label!r} not started: the daemon is shutting down")
            step("the start of its process")
            if pool.preflight is not None:
                problem = await pool.preflight(self.spec)
                if problem:
                    raise AgentUnavailable(problem)
            pool.started += 1
            conn = await pool.launcher(
                self.spec.id, self.spec.command, self.spec.args, self.spec.env, self.cwd, self,
                session=f"p{pool.started}", recorder=pool.recorder,
            )  # fmt: skip
            if not pool.start_soon(self._serve, conn):  # the pool closed while it was spawned
                with anyio.CancelScope(shield=True):
                    await conn.close()
                raise AgentUnavailable(f"agent {self.label!r} stopped: the daemon is shutting down")
            self._starting = conn
            step("initialize")
            try:
                try:
                    with anyio.fail_after(pool.start_timeout):
                        init = await conn.request(
                            "initialize",
                            {
                                "protocolVersion": 1,
                                "clientCapabilities": client_capabilities(terminal=pool.terminals is not None),
                                "clientInfo": {"name": "lmbridge", "version": __version__},
                            },
                        )
                except TimeoutError:
                    conn.exit_reason = f"agent {self.label!r} did not answer initialize within {pool.start_timeout:g} s (LMBRIDGE_START_TIMEOUT)"
                    raise AgentUnavailable(conn.exit_reason) from None
                if not isinstance(init, dict):
                    raise ValueError(f"initialize was answered with a JSON {type(init).__name__}, not an object: not an ACP agent?")
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await conn.close()
                raise
            finally:
                self._starting = None
            self.init, self.caps, self.conn, self.stale, self.spawned_by = init, AgentFeatures.of(init), conn, False, mailbox
            pool.on_ready(self.spec.id, self.caps)
            return conn

    @property
    def label(self) -> str:
        """The agent's name for messages: its display name, else its id."""
        return self.spec.name or self.spec.id

    def stuck(self, conn: AgentConnection | None, waited_on: str, seconds: float) -> AgentStuck:
        """``conn`` did not answer ``waited_on`` within ``seconds``: the process is stopped
        (once: a later call for the same connection only words the error), every chat on it
        gets ``AgentGone`` with this reason, and the next ``connect`` starts a new one.
        Returns the error to raise."""
        reason = f"agent {self.label!r} did not answer {waited_on} within {seconds:g} s: its process was stopped"
        if conn is None or conn in self.stopped_stuck:
            return AgentStuck(reason)
        self.stopped_stuck.add(conn)
        log.warning("agent process stuck: stopping it", agent=self.spec.id, waited_on=waited_on, seconds=seconds, users=len(self.users))
        conn.exit_reason = conn.exit_reason or reason
        if self.conn is conn:
            # New chats start a new process from now on, not this one.
            self.conn = None
            self.sessions.clear()
            self.responses.clear()
            self._drop_spare()
        self.pool.start_soon(conn.close)  # _serve then tells every user (AgentGone); closed with the pool if it is closing
        return AgentStuck(reason)

    def attach(self, mailbox: Mailbox) -> None:
        self.users.add(mailbox)
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def open(self, session_id: str, mailbox: Mailbox) -> None:
        """Route the frames of ACP session ``session_id`` to ``mailbox`` from now on (first
        the state updates it got while nobody routed it)."""
        self.sessions[session_id] = mailbox
        for item in self.unrouted.pop(session_id, {}).values():
            mailbox.send_nowait(item)

    def expect(self, rid: int, mailbox: Mailbox) -> None:
        """Route the answer to request ``rid`` (sent with ``send_request``) to ``mailbox``."""
        self.responses[rid] = mailbox
        self._busy += 1

    def detach(self, mailbox: Mailbox, session_ids: tuple[str, ...] = ()) -> None:
        """``mailbox`` no longer uses the process; its sessions' frames go nowhere from now
        on. With no user left the process exits after the pool's ``idle`` seconds."""
        self.users.discard(mailbox)
        for sid in session_ids:
            if self.sessions.get(sid) is mailbox:
                del self.sessions[sid]
                self.children.forget(sid)
        self.responses = {rid: box for rid, box in self.responses.items() if box is not mailbox}
        if not self.users and self.running:
            self._reap_later()

    def retire(self) -> None:
        """The agent said it needs a login: once no chat uses it, the process exits (not
        after the idle timeout), so the next request starts one that sees the login."""
        self.stale = True

    # -- the spare session ------------------------------------------------------------

    def additional(self) -> tuple[str, ...]:
        """The ``additionalDirectories`` a session opened now is given: every workspace folder
        but the process's cwd (``paths.additional_directories``), where the agent offered
        ``sessionCapabilities.additionalDirectories``; else none (docs/agents.md, "Every
        workspace folder")."""
        if not self.caps.additional_directories:
            return ()
        return paths.additional_directories(self.pool.folders(), self.cwd)

    async def take_spare(self, tools: Sequence[ToolInfo] = ()) -> Spare | None:
        """A spare session for a new chat offering ``tools`` (``wire.ToolInfo``s, as the
        chat's tools endpoint would serve them): a ready one, else one being opened (waited
        for: it is further along than a session/new started now), when it was opened with
        the same tools (``mcp_bridge.same_tools``: agents list an MCP server's tools once, at
        session start) and the workspace folders a session opened now gets (``additional``:
        a spare opened before the folders changed has others). Ready spares that differ are
        closed and None returned (the chat opens a fresh session). ``tools`` are kept for the
        next spares; the one taken is replaced (``want_spare``) once the process is quiet while
        others are left for the next chats, else at once (``core.spares.to_open``)."""
        self.spare_tools = list(tools)
        additional = self.additional()
        while True:
            for spare in list(self.spares):
                other = "other tools" if not same_tools(spare.tools, self.spare_tools) else "other workspace folders" if spare.additional != additional else None
                if other is not None:
                    log.info(f"spare session not taken: {other}", agent=self.spec.id, acp_session=spare.session_id)
                    self.spares.remove(spare)
                    self._close_spare(spare)
            if self.spares:
                spare = self.spares.pop(0)
                self._busy += 1  # a chat is here: not quiet
                self.want_spare()  # at once if it was the last; the others once the process is quiet
                return spare
            if not any(same_tools(t, self.spare_tools) and a == additional for t, a in self._preparing):
                return None  # the chat opens its own session, then asks for the spares (acp.session)
            await self._spare_done.wait()

    @property
    def spare_count(self) -> int:
        """The spare sessions this process keeps: ``pool.spare_count`` where set, else its agent's."""
        return self.pool.spare_count or self.caps.profile.spares

    def want_spare(self, quiet: bool = False) -> None:
        """Open spare sessions in the background as ``core.spares.to_open`` says (``quiet``: the
        process is, or no chat is there yet), if spares are on and the agent's profile allows them
        (``AgentProfile.keeps_spare``); they offer the tools the last new chat offered
        (``spare_tools``) and get the workspace folders of the moment (``additional``). Fewer
        than ``spare_count`` left afterwards: the rest once the process is quiet."""
        if not (self.pool.spares and self.running and self.caps.profile.keeps_spare and self.pool.open):
            return
        for _ in range(spares.to_open(self.spare_count, len(self.spares), len(self._preparing), quiet)):
            opening = (list(self.spare_tools), self.additional())
            self._preparing.append(opening)
            self.pool.start_soon(self._prepare_spare, opening)
        self._replace_later = len(self.spares) + len(self._preparing) < self.spare_count
        if self._replace_later and not self.responses:  # nothing will answer: wait for quiet from now
            self._when_quiet()

    def _when_quiet(self) -> None:
        """Open the spares still wanted once ``SPARE_QUIET`` s pass with no prompt sent or
        answered and no spare taken (a later answer starts the wait again)."""
        busy = self._busy

        async def wait() -> None:
            await anyio.sleep(SPARE_QUIET)
            if self._replace_later and busy == self._busy and not self.responses:
                self.want_spare(quiet=True)

        self.pool.start_soon(wait)

    async def _prepare_spare(self, opening: tuple[list[ToolInfo], tuple[str, ...]]) -> None:
        tools, additional = opening
        conn, ready = self.conn, None
        host: McpHost | None = None
        bridge: ToolBridge | None = None
        servers: list[McpServer] = []
        try:
            assert conn is not None and self.pool.mcp_host is not None
            if tools:  # no tools, no endpoint: as a session opened for a chat offering none
                from lmbridge.tools.mcp_bridge import ToolBridge, error_result, server_name

                async def unclaimed(call: ToolCall) -> None:  # no chat has it yet: nothing may run
                    call.resolve(error_result("no chat is using this session yet"))

                host = await self.pool.mcp_host()
                self.pool.spares_made += 1
                bridge_id = f"spare{self.pool.spares_made}"
                bridge = ToolBridge(bridge_id, unclaimed, self.pool.recorder, server_name(bridge_id, self.caps.profile.shared_mcp_registry))
                await bridge.set_tools(tools)  # served from the start: the agent lists them once
                await host.add(bridge)
                servers = [host.server_config(bridge)]
            sid, answer = await new_session(self, conn, self.cwd, servers, additional)  # bounded: a stuck process is stopped
            answer = await start_in_mode(self, conn, sid, answer)  # the chat taking it need not set its mode first
            if conn is not self.conn or not self.running:
                raise ValueError("the agent process ended")
            ready, bridge = Spare(sid, bridge, servers, host, answer, tools, additional), None
            log.info("spare session ready", agent=self.spec.id, acp_session=sid, tools=len(tools))
        except Exception as exc:
            log.info("no spare session", agent=self.spec.id, error=str(exc) or type(exc).__name__)
        finally:  # cancelled too (the pool closing): whoever waits on it is told
            self._preparing.remove(opening)
            if bridge is not None and host is not None:
                host.remove(bridge.session_id)
            if ready is not None and (not same_tools(ready.tools, self.spare_tools) or ready.additional != self.additional()):
                # A new chat offered other tools meanwhile, or the folders changed: this one would never be taken.
                self._close_spare(ready)
                self.want_spare()
            elif ready is not None:
                self.spares.append(ready)
            done, self._spare_done = self._spare_done, anyio.Event()
            done.set()

    def _close_spare(self, spare: Spare) -> None:
        """Let go of ``spare``: its tools endpoint removed (nothing can reach it), and
        ``session/close`` sent in the background where the agent offers it (bounded by
        ``SPARE_CLOSE_TIMEOUT``; else the agent keeps it until the process ends)."""
        if spare.bridge is not None and spare.host is not None:
            spare.host.remove(spare.bridge.session_id)
        conn = self.conn
        if not self.caps.close or conn is None:
            return

        async def close() -> None:
            with anyio.move_on_after(SPARE_CLOSE_TIMEOUT):
                try:
                    await conn.request("session/close", {"sessionId": spare.session_id})
                except Exception as exc:  # refused, or the process ended: nothing else holds it
                    log.info("spare session/close failed", agent=self.spec.id, error=str(exc) or type(exc).__name__)

        self.pool.start_soon(close)  # nothing when the pool is closing: the process ends anyway

    def _drop_spare(self) -> None:
        """Forget the ready spares (the process is gone or going): their endpoints removed."""
        spares, self.spares = self.spares, []
        for spare in spares:
            if spare.bridge is not None and spare.host is not None:
                spare.host.remove(spare.bridge.session_id)

    # -- the connection's events sink ---------------------------------------------

    def send_nowait(self, item: Incoming | Response) -> None:
        """Route one frame from the agent (called by its connection's reader)."""
        if isinstance(item, Response):
            box = self.responses.pop(item.id, None)
            if box is not None:
                box.send_nowait(item)
                if self._replace_later and not self.responses:  # no answer runs now: replaced if it stays so
                    self._busy += 1
                    self._when_quiet()
            return
        params = json_object(item.params)
        sid = params.get("sessionId")
        own = self.sessions.get(sid) if isinstance(sid, str) else None
        if own is not None and isinstance(sid, str):
            # An open session's frame goes to it (``subagents.Children.route``'s first row,
            # ``Route.OWN``), taken here without a ``Routed`` made: this is every chunk an agent
            # streams (docs/performance.md, "Streaming: the agent's pipe read directly").
            if item.method == "session/update" and item.id is None:
                self.children.learn(sid, params.get("update"))
            own.send_nowait(item)
            return
        routed = self.children.route(sid, item.method, params, self.sessions)
        if routed.session is not None and isinstance(sid, str):
            if item.method == "session/update" and item.id is None:
                self.children.learn(sid, params.get("update"))
            if routed.route is subagents.Route.CHILD:  # a subagent's: its parent chat's, as that session's
                item = Incoming(item.method, {**params, "sessionId": routed.session}, item.id, item.bad_id)
            self.sessions[routed.session].send_nowait(item)
            return
        if routed.route is subagents.Route.DROP:
            log.debug("a subagent's own session state dropped", agent=self.spec.id, sessionId=sid)
            return
        if item.bad_id:
            self._answer(None, error=BAD_ID_ERROR)
            return
        if item.id is None and item.method == auth.STATUS_UPDATE:
            said = auth.status(params)
            if said is not None and said != self.auth_status:
                self.auth_status = said
                (log.warning if said.signed_out else log.info)("agent sign-in status", agent=self.spec.id, kind=said.kind, label=said.label)
            return
        if item.id is None:
            kind = state_kind(params.get("update"))
            if item.method == "session/update" and isinstance(sid, str) and kind is not None:
                kept = self.unrouted.pop(sid, {})
                kept[kind] = item
                self.unrouted[sid] = kept  # the most recent last
                while len(self.unrouted) > UNROUTED_SESSIONS:
                    del self.unrouted[next(iter(self.unrouted))]
                return
            log.debug("agent notification for no open session dropped", agent=self.spec.id, method=item.method, sessionId=sid)
            return
        # A request nobody can show: answered here, and never approved.
        if item.method == "session/request_permission":
            self._answer(item.id, {"outcome": dict(permissions.CANCELLED)})
        elif item.method == elicitation.METHOD:  # a question nobody can show: cancelled, as ACP says
            self._answer(item.id, dict(elicitation.CANCEL))
        elif item.method in files.METHODS or item.method in terminals.METHODS:  # served, but only for a session of this process
            self._answer(item.id, error=errors.error(errors.INVALID_PARAMS, f"sessionId {str(sid)[:100]!r} is no open session"))
        else:
            self._answer(item.id, error=errors.error(errors.METHOD_NOT_FOUND, item.method))

    def _answer(self, rid: int | str | None, result: Any = None, error: Mapping[str, Any] | None = None) -> None:
        conn = self.conn or self._starting
        if conn is None:
            return

        async def write() -> None:
            with anyio.move_on_after(ORPHAN_WRITE_TIMEOUT):
                await conn.respond(rid, result, error=error)

        self.pool.start_soon(write)  # the pool closing: the agent is being stopped, nobody to answer

    # -- lifetime -------------------------------------------------------------------

    async def _serve(self, conn: AgentConnection) -> None:
        try:
            await conn.serve()
        finally:
            with anyio.CancelScope(shield=True):
                await conn.close()  # whatever it left running in its process group goes too
            if self.conn is conn:
                self.sessions.clear()
                self.responses.clear()
                self._drop_spare()
            gone = AgentGone(conn)
            for box in list(self.users):
                try:
                    box.send_nowait(gone)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass

    def _reap_later(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        scope = self._idle = anyio.CancelScope()
        conn = self.conn
        idle = 0.0 if self.pool.closing or self.stale else self.pool.idle

        async def reap() -> None:
            with scope:
                await anyio.sleep(idle)
                if not self.users and self.conn is conn and conn is not None:
                    log.info("agent process idle: stopping it", agent=self.spec.id, idle_seconds=idle)
                    # A chat arriving while it stops starts a new process, not this one.
                    self.conn = None
                    self.sessions.clear()
                    self.responses.clear()
                    self._drop_spare()
                    await conn.close()

        self.pool.start_soon(reap)  # the pool closing: it stops every process itself


PosArgsT = TypeVarTuple("PosArgsT")


class AgentPool:
    """Every agent process of the daemon. ``run()`` it in a task group; ``idle``: seconds a
    process with no session left lives on; ``launcher``: ``AgentConnection.spawn``'s
    signature (replay passes its player's)."""

    def __init__(
        self, idle: float = 1800.0, launcher: Launcher | None = None, recorder: Recorder | None = None, *, spares: bool = False,
        mcp_host: Callable[[], Awaitable[McpHost]] | None = None,
        on_ready: Callable[[str, AgentFeatures], None] = lambda agent_id, caps: None, terminals: TerminalHost | None = None,
        preflight: Callable[[AgentSpec], Awaitable[str | None]] | None = None, folders: Callable[[], Sequence[str]] = lambda: (),
    ) -> None:
        # The workspace folders now (initialize's, in VS Code's order; the first is the agents'
        # cwd): each process gives its sessions the others as additionalDirectories.
        self.folders = folders
        self.terminals = terminals  # terminal/* served to the agents (acp.terminals); None: not offered
        # Before each start: why the agent cannot start (its start fails with it), or None
        # (daemon.catalog.node_problem: a preset's release needing a newer Node.js).
        self.preflight = preflight
        self.idle = idle
        self.on_ready = on_ready  # told each process's capabilities once it is initialized
        self.launcher = launcher or AgentConnection.spawn
        self.recorder = recorder
        self.spares = spares  # keep spare ACP sessions per running process
        self.spare_count = SPARE_COUNT  # how many for every agent; None: each agent's (AgentProcess.spare_count)
        self.mcp_host = mcp_host  # async () -> mcp_bridge.McpHost (the spare sessions' tools endpoints)
        self.spares_made = 0
        self.start_timeout = START_TIMEOUT  # seconds a new process may take to answer initialize
        self.session_timeout = SESSION_TIMEOUT  # seconds a running one may take to answer a session request
        self.processes: dict[ProcessKey, AgentProcess] = {}
        self.started = 0  # processes started (names them in a recording: agent:p1, ...)
        self.closing = False
        self.tg: TaskGroup | None = None

    def process(self, spec: AgentSpec, cwd: str | None) -> AgentProcess:
        """The process chats of ``spec`` in ``cwd`` share (not started until ``connect``)."""
        key = process_key(spec, cwd)
        proc = self.processes.get(key)
        if proc is None:
            proc = self.processes[key] = AgentProcess(self, spec, cwd)
        return proc

    @property
    def open(self) -> bool:
        """Whether tasks may be started in the pool's task group: it runs and ``aclose``
        has not begun (from then on nothing is started: the group is cancelled, then gone)."""
        return self.tg is not None and not self.closing

    def start_soon(self, func: Callable[[Unpack[PosArgsT]], Coroutine[Any, Any, object]], *args: *PosArgsT) -> bool:
        """Run ``func(*args)`` in the pool's task group, if ``open``; False (nothing started) if not."""
        if not self.open:
            return False
        assert self.tg is not None
        self.tg.start_soon(func, *args)
        return True

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self.tg = tg
            task_status.started()
            if not self.closing:  # closed before it ran: nothing to wait for
                await anyio.sleep(math.inf)

    async def aclose(self, timeout: float = 5.0) -> None:
        """Stop every process (their users are gone or going): bounded by ``timeout`` seconds.
        From its first line on, nothing more is started in the pool's task group (``open``)."""
        self.closing = True
        for proc in self.processes.values():
            proc._drop_spare()
        with anyio.move_on_after(timeout, shield=True):
            async with anyio.create_task_group() as tg:
                for proc in self.processes.values():
                    if proc.conn is not None:
                        tg.start_soon(proc.conn.close)
        if self.tg is not None:
            self.tg.cancel_scope.cancel()
