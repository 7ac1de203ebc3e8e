"""A chat's ACP session started, recovered and closed (``SessionLife``), for the session
actor, which carries out the turn machine's effects (``turn.StartAgent``,
``turn.NewSession``, ``turn.CloseSession``) through it; docs/sessions.md.

* ``start``: the agent's process connected (started if none runs: spawn + ``initialize``)
  and the chat's session opened on it: its earlier one taken up again
  (``AcpSession.open(Resume)``) when it had one, else the process's spare or a fresh
  session (``TakeSpare``) offering the request's VS Code tools (``tools.chat_tools.ChatTools``).
* ``recover``: the session cannot simply continue (``turn.NewSession``): closed where
  offered, then taken up again or replaced by a fresh one told the conversation.
* ``close_then``: ``session/close``, then the answer to the prompt it ended awaited
  (``Prompts.answered``: an event, set when that answer is read), bounded.
* ``end``: the chat has ended: its session closed where offered and the process let go of.

A start runs in a child task of the caller's task group, begun with ``TaskGroup.start()``:
it returns once the task is under way and can be stopped (``cancel``), so the caller's
loop never waits on the agent. The start's outcome reaches the caller's mailbox as one
``Started`` message, in order with the session's frames (the updates a ``session/load``
replays come before it, and are not shown). Each step is
bounded where it waits (``AgentProcess.connect``: initialize; ``AcpSession``: each session
request); the whole by the pool's start bound plus three session bounds, a backstop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from lmbridge.acp.connection import AgentError, AgentUnavailable, error_reason
from lmbridge.acp.session import AcpSession, New, Opened, Resume, TakeSpare
from lmbridge.core import auth
from lmbridge.core.messages import AgentSpec, ToolInfo
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from lmbridge.acp.interfaces import AgentProcessInterface
    from lmbridge.tools.chat_tools import ChatTools
    from lmbridge.tools.mcp_bridge import McpServer

log = get_logger("session")

CLOSE_TIMEOUT = 2.0  # seconds an agent may take to answer session/close before it is stopped
#: Seconds a closed session's cancelled prompt may take to be answered after session/close:
#: an agent may answer the close first and end the prompt it cancels just after.
CLOSE_GRACE = 5.0

#: The answer to an agent's request its session ended before reading: (its id, the result, or the error).
LateAnswer = tuple[int | str | None, object, Mapping[str, object] | None]


@dataclass(frozen=True)
class Started:
    """Mailbox message: a start (``SessionLife.start``) has ended. ``opened``: the session it
    opened (None if it opened none), the chat's from this message on; ``error``: why it
    failed (None: it did not), ``named``: the message names the agent and says why (no
    prefix needed). Becomes ``turn.Ready``."""

    opened: Opened | None
    error: str | None = None
    named: bool = False


class Prompts:
    """The chat's ``session/prompt``s awaiting their answer: request id → the turn
    machine's prompt number (``turn.Prompt.seq``), and for each prompt an event set when
    its answer is read (``pop``), which ``SessionLife.close_then`` waits on."""

    def __init__(self) -> None:
        self._seqs: dict[int, int] = {}
        self._answered: dict[int, anyio.Event] = {}

    def add(self, rid: int, seq: int) -> None:
        """Prompt ``seq`` was sent as request ``rid``."""
        self._seqs[rid] = seq

    def pop(self, rid: int, default: int | None = None) -> int | None:
        """The answer to request ``rid`` is read: its prompt number (``default`` if ``rid``
        is no prompt awaiting its answer); that prompt's event is set."""
        seq = self._seqs.pop(rid, None)
        if seq is None:
            return default
        if seq not in self._seqs.values():
            event = self._answered.pop(seq, None)
            if event is not None:
                event.set()
        return seq

    def answered(self, seq: int) -> anyio.Event:
        """An event set once prompt ``seq``'s answer is read (set already if none is awaited)."""
        event = self._answered.get(seq)
        if event is None:
            event = anyio.Event()
            if seq in self._seqs.values():
                self._answered[seq] = event
            else:
                event.set()
        return event


class SessionLife:
    """Starts, recovers and closes the ACP session ``session`` of chat ``chat`` on
    ``process`` (the agent's shared process, as the session's; module docstring).

    ``spec``: the agent; ``hint``: its sign-in hint (``auth.Hint``, for ``auth.problem``).
    ``tools``: the chat's MCP endpoint. ``after``: events set once the sessions closed to
    make room for this one (the session cap) are closed: the first start waits for them, so
    the cap holds at the agent too. ``resume``: the ACP sessionId the chat had (a dormant
    session), taken up again by the next start. ``opened(opened)``: told each session a
    start opens (the history actor keeps its id). ``deliver``: the caller's mailbox, for
    ``Started``. ``auth``: ``auth.problem``'s data once the agent said it needs a login.
    """

    def __init__(
        self,
        chat: str,
        session: AcpSession,
        process: AgentProcessInterface,
        spec: AgentSpec,
        tools: ChatTools,
        *,
        deliver: Callable[[Started], None],
        opened: Callable[[Opened], None],
        hint: auth.Hint | None = None,
        after: Sequence[anyio.Event] = (),
        resume: str | None = None,
    ) -> None:
        self.chat = chat
        self.acp = session
        self.process = process
        self.spec = spec
        self.tools = tools
        self.hint = hint
        self.after = tuple(after)
        self.resume = resume
        self.auth: dict[str, Any] | None = None
        self._deliver = deliver
        self._opened = opened
        self._starting: anyio.CancelScope | None = None

    # -- starting -----------------------------------------------------------------

    async def start(self, tg: TaskGroup, tools: Sequence[ToolInfo]) -> None:
        """``turn.StartAgent``: connect and open the chat's session (module docstring) in a
        child task of ``tg``, for a request carrying VS Code ``tools``; ``Started`` follows."""
        await self._spawn(tg, lambda: self._start(tools))

    async def recover(self, tg: TaskGroup, close: bool = True, take_up: bool = True) -> None:
        """``turn.NewSession``: the session cannot simply continue (the stale turn after a
        cancel, docs/agents.md "Quirks"; a cancelled turn that outlived its drain deadline):
        closed where the agent offers it (``close``), then taken up again (``take_up``:
        ``AcpSession.open(Resume)``), or, the old one left for good (its prompt still open),
        replaced by a fresh session told the conversation. For an agent whose profile says a
        cancel breaks the session's history (``AgentProfile.cancel_breaks_history``), never
        taken up again: a fresh session told the conversation. In a child task of ``tg``;
        ``Started`` follows."""
        await self._spawn(tg, lambda: self._recover(close, take_up))

    def starting(self) -> bool:
        """Whether a start is under way."""
        return self._starting is not None

    def cancel(self) -> None:
        """Stop the start under way, if any (no ``Started`` follows)."""
        if self._starting is not None:
            self._starting.cancel()

    async def _spawn(self, tg: TaskGroup, opening: Callable[[], Awaitable[Opened]]) -> None:
        # Returns once the start's task is under way, its scope in place: a ``cancel`` from
        # then on reaches it.
        await tg.start(self._run, opening)

    async def _run(self, opening: Callable[[], Awaitable[Opened]], *, task_status: TaskStatus[None]) -> None:
        pool = self.process.pool
        backstop = pool.start_timeout + 3 * pool.session_timeout
        with anyio.CancelScope() as scope:
            self._starting = scope
            task_status.started()
            opened: Opened | None = None
            error, named = None, False
            try:
                with anyio.fail_after(backstop):
                    opened = await opening()
            except TimeoutError:
                error = f"no answer to {self.acp.step} within {backstop:g} s"
            except AgentUnavailable as exc:  # its message names the agent and says why (exit code, stderr, a missed bound)
                error, named = str(exc) or "the agent exited", bool(str(exc))
            except AgentError as exc:
                problem = self.auth_problem(exc)
                error, named = problem or str(exc), problem is not None
            except ValueError as exc:
                error = str(exc) or type(exc).__name__
            finally:
                if self._starting is scope:
                    self._starting = None
            self._deliver(Started(opened, error, named))

    async def _start(self, tools: Sequence[ToolInfo]) -> Opened:
        self.acp.step = "the sessions closed to make room for it"
        for finished in self.after:
            await finished.wait()
        process = self.process

        async def servers() -> list[McpServer]:
            return await self.tools.start(tools, per_session=process.caps.profile.shared_mcp_registry)

        how = TakeSpare(tuple(self.tools.offered(tools))) if self.resume is None else Resume(self.resume)
        await self.acp.connect()
        try:
            opened = await self.acp.open(how, servers)
        except AgentUnavailable:
            if not self.acp.replaced():
                raise
            # The shared process was found stuck (by this request or another) and stopped:
            # once more on a new process, which this chat need not share with a frozen one.
            log.warning("agent process replaced: opening the session on a new one", session=self.chat, agent=self.spec.id)
            await self.acp.connect()
            opened = await self.acp.open(how, servers)
        spare = opened.spare
        if spare is not None:
            # Opened ahead (acp.process.Spare): this chat's from now on, its tools endpoint too.
            self.tools.adopt(spare.bridge, spare.mcp_servers)
        self._opened(opened)
        if spare is not None:
            await self.tools.offer(tools)  # the spare's endpoint offers what this request carries
        return opened

    async def _recover(self, close: bool, take_up: bool) -> Opened:
        old = self.acp.id
        if close:
            await self.acp.close(CLOSE_TIMEOUT)
        if old is not None and not take_up:
            self.acp.leave()

        async def servers() -> list[McpServer]:
            return self.tools.servers

        # fast-agent: the session's history holds what a cancel left (an empty assistant
        # message the model API refuses): taken up again it would fail again.
        resume = take_up and not self.process.caps.profile.cancel_breaks_history
        opened = await self.acp.open(Resume(old) if old is not None and resume else New(lost=True), servers)
        self._opened(opened)
        return opened

    def auth_problem(self, exc: AgentError) -> str | None:
        """The message for an agent's error that says it needs a login (``auth.problem``),
        its data kept in ``auth`` for the chat's error; None for any other error. The
        process is restarted once its chats let go of it, so a login made meanwhile is seen."""
        if not auth.is_auth_error(exc.code):
            return None
        process = self.process
        reason = error_reason(exc.data) or exc.message
        message, self.auth = auth.problem(
            self.spec.id, self.spec.name or self.spec.id, reason, process.caps.auth_methods, [self.spec.command, *self.spec.args], self.hint,
        )  # fmt: skip
        process.retire()
        log.warning("agent needs a login", session=self.chat, agent=self.spec.id, reason=reason)
        return message

    # -- closing -----------------------------------------------------------------------

    async def close_then(self, answered: anyio.Event, then: Callable[[], None]) -> None:
        """``turn.CloseSession``: close the session, then ``then()`` (the caller tells the
        machine ``SessionClosed``). The close's answer may come before the answer to the
        prompt it ended (the agent ends that turn once it has answered): ``answered``
        (``Prompts.answered``) is awaited first, at most ``CLOSE_GRACE`` seconds, or the
        session would be left for a fresh one although the prompt ended."""
        await self.acp.close(CLOSE_TIMEOUT)
        with anyio.move_on_after(CLOSE_GRACE):
            await answered.wait()
        then()

    async def end(self, late: Callable[[], Iterable[LateAnswer]], write_timeout: float) -> None:
        """Leave the agent, after the chat's last frames went out: the session closed where
        offered (bounded; the process lives on for the agent's other chats), the process
        let go of (``AcpSession.detach``), then the agent's requests that reached the
        caller while the session closed (``late()``) answered, within ``write_timeout``.
        From then on the pool answers them."""
        await self.acp.close(CLOSE_TIMEOUT)
        conn = self.acp.conn
        self.acp.detach()
        answers = list(late())
        if answers and conn is not None and not conn.closed.is_set():
            with anyio.move_on_after(write_timeout):
                for rid, result, error in answers:
                    await conn.respond(rid, result, error=error)
