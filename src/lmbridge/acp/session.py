"""One ACP session on a shared agent process (``AcpSession``): the only code that sends
``session/new``, ``session/resume``, ``session/load``, ``authenticate``,
``session/set_config_option``, ``session/set_mode``, ``session/prompt``, ``session/cancel``
and ``session/close`` (ACP: "Session Setup", "Prompt Turn", "Session Config Options",
"Session Modes"; docs/sessions.md).

A session is opened one of three ways (``AcpSession.open``):

* ``New()``: ``session/new``; where the agent says it needs a login and one of its
  ``authMethods`` needs nobody (auth.automatic), ``authenticate`` and once more.
* ``Resume(id)``: the chat's earlier session taken up with the agent's own memory of it:
  ``session/resume`` where offered, else ``session/load`` (the history it replays is routed
  to the caller, who does not show it), else, or when both are refused, ``session/new``
  (``Opened.lost``: the agent no longer holds the chat's earlier turns).
* ``TakeSpare(tools)``: the process's spare session (opened ahead, ``acp.interfaces.Spare``) when
  it offers the same VS Code tools as the chat and was given the same workspace folders,
  else ``session/new``.

Each is given the workspace folders beyond ``cwd`` as ``additionalDirectories`` where the
agent offers them (``AgentProcess.additional``; docs/agents.md, "Every workspace folder").

The session decides nothing about turns: the turn machine (``turn``) does, and the session
actor carries out its effects through this class. Frames that must go out in order with the
answers to the agent's requests (``session/prompt``, ``session/cancel``) are returned as
``Write``s for the caller's one writer; the rest are awaited here, each bounded: a
request the process does not answer within its ``session_timeout`` makes it stuck
(``AgentProcess.stuck``: stopped, its chats told) and raises ``AgentStuck``.

Its frames (``session/update``, the agent's requests, the prompt's ``Response``) go to the
``mailbox`` it was made with, routed by the process (``AgentProcess.open``/``expect``).

What it uses of the process is ``acp.interfaces.AgentProcessInterface`` (the seam's one
protocol): this module imports nothing of ``acp.process``, which imports it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from lmbridge.acp.connection import AgentConnection, AgentError, AgentUnavailable
from lmbridge.acp.interfaces import AgentProcessInterface, Mailbox
from lmbridge.acp.interfaces import Spare as ReadySpare
from lmbridge.core import auth
from lmbridge.core.json_values import json_object
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from lmbridge.core.messages import ToolInfo
    from lmbridge.tools.mcp_bridge import McpServer

log = get_logger("session")

#: One frame for the caller's writer, sent on the connection current when it goes out.
Write = Callable[[AgentConnection], Awaitable[None]]


@dataclass(frozen=True)
class New:
    """Open a fresh session. ``lost``: it replaces one that held the chat's earlier turns."""

    lost: bool = False


@dataclass(frozen=True)
class Resume:
    """Take ACP session ``session_id`` up again (resume, else load, else a fresh one)."""

    session_id: str


@dataclass(frozen=True)
class TakeSpare:
    """Take the process's spare session (opened ahead) if it offers the same VS Code
    ``tools`` (``wire.ToolInfo``s, the chat's offer: ``AgentProcess.take_spare``), else
    open a fresh one."""

    tools: tuple[ToolInfo, ...] = ()


How = New | Resume | TakeSpare


@dataclass(frozen=True)
class Opened:
    """What ``open`` got. ``how``: "new", "spare", "session/resume" or "session/load".
    ``lost``: the agent does not hold the chat's earlier turns (the next prompt must tell
    them). ``resumable``: the agent can take this session up again later. ``config_options``:
    the answer's ``configOptions`` as sent (untrusted). ``spare``: the spare taken, whose
    VS Code tools endpoint comes with it. ``modes``: the answer's ``modes`` as sent
    (untrusted; a spare's are those of its session/new answer, kept whole)."""

    session_id: str
    how: str
    lost: bool
    resumable: bool
    config_options: Any
    spare: ReadySpare | None = None
    modes: Any = None



def _session_id(result: Any) -> str:
    sid = json_object(result).get("sessionId")
    if not isinstance(sid, str) or not sid:
        raise ValueError("session/new was answered without a sessionId")
    return sid


async def request(process: AgentProcessInterface, conn: AgentConnection, method: str, params: Any) -> Any:
    """``method`` on ``conn`` (``process``'s), bounded. The process is stuck when it has
    not answered within its pool's ``session_timeout`` and has sent nothing at all for that
    long (an agent replaying a long session with ``session/load``, or streaming other chats'
    answers, is slow, not stuck), or when the answer has taken the pool's ``start_timeout``
    whatever it sent. Raises ``AgentError``, ``AgentUnavailable``, ``AgentStuck`` (then
    ``process.stuck`` has stopped the process)."""
    pool = process.pool
    seconds, cap = pool.session_timeout, max(pool.start_timeout, pool.session_timeout)
    began = time.monotonic()
    result: list[Any] = []
    failed: list[Exception] = []

    async def watch(scope: anyio.CancelScope) -> None:
        wake = began + seconds
        while True:
            await anyio.sleep(max(0.0, wake - time.monotonic()))
            now = time.monotonic()
            if now - conn.heard >= seconds or now - began >= cap:
                scope.cancel()
                return
            wake = min(conn.heard + seconds, began + cap)  # it talks: wait until it has been quiet a whole bound

    with anyio.CancelScope() as stuck:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, stuck)
            try:
                result.append(await conn.request(method, params))
            except Exception as exc:  # raised below, outside the task group (not wrapped)
                failed.append(exc)
            tg.cancel_scope.cancel()
    if stuck.cancelled_caught:
        raise process.stuck(conn, method, seconds if time.monotonic() - began < cap else cap) from None
    if failed:
        raise failed[0]
    return result[0]


async def new_session(
    process: AgentProcessInterface, conn: AgentConnection, cwd: str | None, mcp_servers: list[McpServer], additional: tuple[str, ...] = (),
) -> tuple[str, dict[str, Any]]:
    """``session/new`` on ``conn`` (``process``'s), bounded as ``request``: (sessionId, the
    whole answer, a JSON object: its ``configOptions``, ``modes``, ``models``, ... as sent).
    ``additional``: its ``additionalDirectories`` (``AgentProcess.additional``). For a session
    nobody routes yet (the process's spare). Raises ``AgentError``, ``AgentUnavailable``,
    ``AgentStuck``, ``ValueError`` (no sessionId)."""
    params = opening_params(process, {"cwd": cwd or "/", "mcpServers": mcp_servers}, additional)
    result = await request(process, conn, "session/new", params)
    return _session_id(result), json_object(result)


async def start_in_mode(process: AgentProcessInterface, conn: AgentConnection, session_id: str, answer: dict[str, Any]) -> dict[str, Any]:
    """A session just opened ahead (the process's spare), set to the mode a chat's new
    session is set to before its first prompt (``core.modes.start_mode``: the agent's
    ``mode`` setting, else its asking mode), so the chat that takes it need not wait for
    that request: the ``session/new`` ``answer`` as it then stands
    (``session_state.answer_after_set``), or ``answer`` itself when it has no mode control,
    is in that mode already, or the agent refused (logged: the chat then sets it itself,
    or does not send its prompt). docs/sessions.md, "Pre-warming and the spare session".
    Raises ``AgentUnavailable``, ``AgentStuck``."""
    from lmbridge.core import modes, session_state

    state = session_state.opened(answer)
    mode = next((c for c in state.controls if c.category == "mode"), None)
    if mode is None:
        return answer
    start = modes.start_mode(process.caps.profile, [c.value for c in mode.choices], process.spec.mode)
    if start is None or mode.current == start:
        return answer
    method, params = session_state.set_request(state, session_id, mode.id, start)
    try:
        result = await request(process, conn, method, params)
    except AgentError as exc:
        log.info("spare session's mode not set", agent=process.spec.id, acp_session=session_id, mode=start, error=str(exc) or type(exc).__name__)
        return answer
    return session_state.answer_after_set(answer, mode, start, result)


def opening_params(process: AgentProcessInterface, params: dict[str, Any], additional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``params`` of a ``session/new``, ``session/resume`` or ``session/load``, with
    ``additionalDirectories`` (ACP "Session Setup": the workspace folders beyond ``cwd``) when
    ``additional`` names any, and the agent's ``_meta`` (``AgentProfile.session_meta``) where
    its profile has one."""
    if additional:
        params = {**params, "additionalDirectories": list(additional)}
    meta = process.caps.profile.session_meta
    return params if meta is None else {**params, "_meta": meta}


async def probe(process: AgentProcessInterface, conn: AgentConnection, cwd: str | None) -> Any:
    """A session opened and closed at once (where the agent offers ``session/close``), for
    what its answer says: its ``configOptions`` (the agent's models). Raises as
    ``new_session``."""
    sid, answer = await new_session(process, conn, cwd, [])
    if process.caps.close:
        await conn.request("session/close", {"sessionId": sid})
    return answer.get("configOptions")


class AcpSession:
    """One chat's ACP session on ``process``, its frames routed to ``mailbox``.

    ``id``: the sessionId open at the agent (None before ``open`` and after ``forget``).
    ``step``: what it is waiting on now ("initialize", "session/new"...), for a bound's message.
    ``config_values``/``model_option``/``mode_option``: the session's config options as last
    answered (agent_models).
    """

    def __init__(self, process: AgentProcessInterface, mailbox: Mailbox, *, log_fields: dict[str, Any] | None = None) -> None:
        self.process = process
        self.mailbox = mailbox  # also who uses the process: it is told AgentGone there
        self.conn: AgentConnection | None = None
        self.id: str | None = None
        self.step = "the start"
        self.config_values: dict[str, str] = {}
        self.model_option: str | None = None
        self.mode_option: str | None = None
        self.left: list[str] = []  # sessions left with a prompt still open (``leave``)
        self._log = log.bind(agent=process.spec.id, **(log_fields or {}))

    def _set_step(self, step: str) -> None:
        self.step = step

    async def _request(self, method: str, params: Any) -> Any:
        """One request to the process, bounded (``request``)."""
        if self.conn is None:
            raise AgentUnavailable("no agent process is connected")
        self.step = method
        return await request(self.process, self.conn, method, params)

    def replaced(self) -> bool:
        """Whether the connection this session used was stopped as stuck by another request
        than one this session made on the process it started (a retry on a new process may
        then succeed: the agent answered before)."""
        conn = self.conn
        return conn is not None and conn in self.process.stopped_stuck and self.process.spawned_by is not self.mailbox

    # -- opening -----------------------------------------------------------------

    async def connect(self) -> AgentConnection:
        """The process's running connection, started (spawn + ``initialize``) if none runs;
        raises as ``AgentProcess.connect``."""
        self.conn = await self.process.connect(self.mailbox, self._set_step)
        return self.conn

    async def open(self, how: How, mcp_servers: Callable[[], Awaitable[list[McpServer]]]) -> Opened:
        """Open the session ``how`` says (module docstring). ``mcp_servers``: the
        ``mcpServers`` to open a fresh session with, asked for only when one is opened.
        Raises ``AgentError`` (refused), ``AgentUnavailable``, ``ValueError`` (no sessionId)."""
        assert self.conn is not None, "connect first"
        if isinstance(how, TakeSpare):
            spare = await self.process.take_spare(how.tools)
            if spare is not None:
                self.process.open(spare.session_id, self.mailbox)
                caps = self.process.caps
                self.id = spare.session_id
                options = spare.answer.get("configOptions")
                self._learn(options or [])
                self._log.info("acp session", acp_session=spare.session_id, how="spare")
                return Opened(spare.session_id, "spare", False, caps.resume or caps.load, options or [], spare, modes=spare.answer.get("modes"))
            return await self._new(await mcp_servers(), lost=False)
        if isinstance(how, Resume):
            return await self._take_up(how.session_id, await mcp_servers())
        return await self._new(await mcp_servers(), lost=how.lost)

    async def _new(self, servers: list[McpServer], lost: bool) -> Opened:
        params = opening_params(self.process, {"cwd": self.process.cwd or "/", "mcpServers": servers}, self.process.additional())
        try:
            result = await self._request("session/new", params)
        except AgentError as exc:
            # Needs a login: where a method needs nobody (its key is in the agent's
            # environment), authenticate with it and try once more.
            method = auth.automatic(self.process.caps.auth_methods, {**os.environ, **self.process.spec.env})
            if not auth.is_auth_error(exc.code) or method is None:
                raise
            self._log.info("authenticating", method=method.id)
            await self._request("authenticate", {"methodId": method.id})
            result = await self._request("session/new", params)
        sid = _session_id(result)
        self.process.open(sid, self.mailbox)
        self.id = sid
        options = json_object(result).get("configOptions")
        self._learn(options or [])  # none in a session/new answer: none at all
        self._log.info("acp session", acp_session=sid, how="new")
        self.process.want_spare()  # the next new chat need not wait for session/new
        caps = self.process.caps
        return Opened(sid, "new", lost, caps.resume or caps.load, options or [], modes=json_object(result).get("modes"))

    async def _take_up(self, previous: str, servers: list[McpServer]) -> Opened:
        caps = self.process.caps
        params = opening_params(self.process, {"sessionId": previous, "cwd": self.process.cwd or "/", "mcpServers": servers}, self.process.additional())
        for method, offered in (("session/resume", caps.resume), ("session/load", caps.load)):
            if not offered:
                continue
            self.process.open(previous, self.mailbox)
            try:
                result = await self._request(method, params)
            except AgentError as exc:
                self.process.sessions.pop(previous, None)
                self._log.warning("agent refused to take up its session", method=method, error=str(exc))
                continue
            self.id = previous
            options = json_object(result).get("configOptions")
            self._learn(options)
            self._log.info("acp session", acp_session=previous, how=method)
            return Opened(previous, method, False, True, options, modes=json_object(result).get("modes"))
        return await self._new(servers, lost=True)

    # -- config options ---------------------------------------------------------------

    def _learn(self, config_options: Any) -> None:
        from lmbridge.core.agent_models import of_category, select_options

        options = select_options(config_options)
        raw = config_options if isinstance(config_options, list) else []
        self.config_values = {o["id"]: o["currentValue"] for o in raw if isinstance(o, dict) and isinstance(o.get("id"), str) and isinstance(o.get("currentValue"), str)}
        model, mode = of_category(options, "model"), of_category(options, "mode")
        self.model_option, self.mode_option = (model.id if model else None), (mode.id if mode else None)

    def wanted(self, model: str | None, mode: str | None) -> dict[str, str]:
        """The config options to set before a prompt (config id → value): ``model`` (one of
        the agent's own, as VS Code chose it) and ``mode`` (the agent's setting), where the
        session has such an option and it is not already so."""
        wanted = {}
        if model is not None and self.model_option is not None:
            wanted[self.model_option] = model
        if mode and self.mode_option is not None:
            wanted[self.mode_option] = mode
        return {k: v for k, v in wanted.items() if self.config_values.get(k) != v}

    async def set_config_option(self, config_id: str, value: str) -> Any:
        """``session/set_config_option``: the answer's ``configOptions`` if it is a list (then
        learnt), else None. Raises ``AgentError``, ``AgentUnavailable`` (also when no session is
        open), ``AgentStuck``."""
        if self.id is None:
            raise AgentUnavailable("no session is open")
        result = await self._request("session/set_config_option", {"sessionId": self.id, "configId": config_id, "value": value})
        self.config_values[config_id] = value
        options = json_object(result).get("configOptions")
        if isinstance(options, list):
            self._learn(options)
            return options
        return None

    async def set_mode(self, mode_id: str) -> Any:
        """``session/set_mode`` (ACP "Session Modes"): the answer. Raises as
        ``set_config_option``."""
        if self.id is None:
            raise AgentUnavailable("no session is open")
        return await self._request("session/set_mode", {"sessionId": self.id, "modeId": mode_id})

    # -- the turn's frames (sent by the caller's writer, in order) ----------------------

    def prompt(self, blocks: list[dict[str, Any]]) -> tuple[int, Write]:
        """``session/prompt`` with ``blocks`` (ACP ``ContentBlock``s): its request id, whose
        ``Response`` comes on the mailbox in order with the agent's updates, and its write."""
        conn, sid = self.conn, self.id
        assert conn is not None and sid is not None
        rid = conn.new_id()
        self.process.expect(rid, self.mailbox)

        async def write(c: AgentConnection) -> None:
            await c.send_request(rid, "session/prompt", {"sessionId": sid, "prompt": blocks})

        return rid, write

    def cancel(self) -> Write:
        """``session/cancel`` (a notification) for the session open now."""
        sid = self.id

        async def write(c: AgentConnection) -> None:
            await c.notify("session/cancel", {"sessionId": sid})

        return write

    # -- closing ------------------------------------------------------------------------

    async def close(self, timeout: float) -> None:
        """``session/close`` where the agent offers it, bounded by ``timeout`` seconds (a
        refusal is logged); ``id`` is kept (``open(Resume(id))`` may take it up again)."""
        conn, sid = self.conn, self.id
        if conn is None or sid is None or not self.process.caps.close or conn.closed.is_set():
            return
        self.step = "session/close"
        with anyio.move_on_after(timeout):
            try:
                await conn.request("session/close", {"sessionId": sid})
            except (AgentError, AgentUnavailable) as exc:
                self._log.info("session/close refused", error=str(exc))

    def forget(self) -> str | None:
        """Let go of the session and the connection (the process went away): its id, for a
        later ``open(Resume(id))``."""
        sid, self.id, self.conn = self.id, None, None
        return sid

    def leave(self) -> None:
        """The session is left for good, a prompt of it still open at the agent (it never
        ended a cancelled turn): never prompted again. A fresh one is opened next; this one's
        late frames still reach the mailbox (to be dropped there) until ``detach``."""
        if self.id is not None:
            self.left.append(self.id)

    def detach(self) -> None:
        """Stop using the process: its frames for this session (and those it left) go
        nowhere from now on."""
        sid, self.id, self.conn = self.id, None, None
        self.process.detach(self.mailbox, (*self.left, *((sid,) if sid is not None else ())))
