"""One chat's controls, commands and usage: kept from its agent, told to the shim, set on its session.

The state itself and every rule about it are pure (``core.session_state``: modes and config
options, the agent's slash commands, context used and cost). This is the part of a session
actor that carries them out: the agent's updates folded in, the shim told
(``client/sessionState``, docs/protocol.md) whenever the state changes, a control the user
sets (``SetControl``, from ``chat/setControl``) and the chat's choices before a prompt sent as
``session/set_mode`` or ``session/set_config_option`` (bounded by ``acp.session``).

Owned by one session actor and used from its tasks only; a request to the agent runs in a
child task and comes back through the actor's mailbox (``ControlSet``), so the state has one
writer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from lmbridge.acp.connection import AgentError, AgentUnavailable, Response
from lmbridge.core import errors, modes, permissions, present, session_state
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from lmbridge.acp.session import AcpSession, Opened, Write

log = get_logger("session")

#: Updates of a session being opened kept for its Ready (claude tells its commands just after session/new).
EARLY_UPDATES = 16

Report = Callable[[str, Any, dict[str, Any]], None]  # (session id, the shim's request id or None, the state on the wire)


@dataclass(eq=False)
class SetControl:
    """Set one of the chat's controls (``session_state``) on its live session, now
    (``by_user``: the user's ``chat/setControl``, kept for the chat). ``done`` is set once, with ``error`` (a sentence for the user) or ``state`` (the
    chat's state after it, as ``session_state.to_wire`` gives it)."""

    control_id: str
    value: str
    by_user: bool = True  # chat/setControl; False: a value set before a prompt (chosen)
    done: anyio.Event = field(default_factory=anyio.Event)
    error: str | None = None
    state: dict[str, Any] | None = None

    def fail(self, error: str) -> None:
        """Answered with ``error``, unless it was answered already."""
        if not self.done.is_set():
            self.error = error
            self.done.set()


@dataclass(frozen=True)
class ControlSet:
    """A ``SetControl``'s request came back (``answer``, or ``error``): to the actor's mailbox."""

    request: SetControl
    answer: Any = None
    error: str | None = None


class ChatControls:
    """The controls of the chat of session ``session_id`` on ``acp``, its ACP session.

    ``send``: the actor's mailbox (answers of the agent come back on it as ``ControlSet``);
    ``is_open``: whether the chat's session is open (its state is told only then); ``mode``:
    the agent's ``mode`` setting, set on a session opened new (else the agent's asking mode:
    ``core.modes.start_mode``); ``options_changed``: the agent answered new ``configOptions``
    (the history actor keeps them: ``agent_models``)."""

    def __init__(
        self,
        session_id: str,
        acp: AcpSession,
        send: MemoryObjectSendStream[ControlSet | Response],
        is_open: Callable[[], bool],
        mode: str | None,
        options_changed: Callable[[Any], None],
    ) -> None:
        self.session_id = session_id
        self.acp = acp
        self._send = send
        self._is_open = is_open
        self._mode = mode
        self._options_changed = options_changed
        self.state = session_state.SessionState()
        self._fresh = False  # the session was opened new: the chat's choices are all set before its first prompt
        self._taken_up = False  # the session was taken up again: its mode is set before its first prompt
        self._chosen: dict[str, str] = {}  # the user's chat/setControl choices, set again on a session opened new
        self._required: str | None = None  # the mode control, when a prompt must not go unless its mode is set
        self._report: Report | None = None
        self._request_id: Any = None  # the shim's id of the latest request this chat got
        self._early: list[Any] = []  # state updates of the session being opened, before its Ready
        self._tg: TaskGroup | None = None

    def start(self, tg: TaskGroup) -> None:
        """Requests to the agent run in ``tg`` from now on."""
        self._tg = tg

    # -- what the agent and the shim say --------------------------------------------

    def requested(self, report: Report, request_id: Any) -> None:
        """A chat request came with its way to tell the shim (``ChatRequest.report``): the
        shim learns which chat this request is (once a session is open)."""
        self._report, self._request_id = report, request_id
        self.tell(request_id)

    def early(self, change: Any) -> None:
        """A state update of the session being opened, before it is the chat's: kept for its Ready."""
        if session_state.state_kind(change) is not None and len(self._early) < EARLY_UPDATES:
            self._early.append(change)

    def ready(self, opened: Opened | None) -> None:
        """A start ended (``turn.Ready``): ``opened``, the session it opened (None: none),
        is the chat's from here on; updates kept before it are folded in."""
        early, self._early = self._early, []
        if opened is None:
            return
        fresh = session_state.opened({"configOptions": opened.config_options, "modes": opened.modes})
        # A session taken up again (or replaced) keeps the chat's commands, usage and title until the agent tells new ones.
        self.state = replace(fresh, commands=fresh.commands or self.state.commands, usage=self.state.usage, title=self.state.title)
        for change in early:
            self.state = session_state.update(self.state, change) or self.state
        self._fresh = opened.how in ("new", "spare")
        self._taken_up = not self._fresh  # session/resume, session/load: an agent may take it up in its own starting mode
        self.tell(self._request_id)

    def update(self, change: Any) -> None:
        """A ``session/update`` of the chat's session: folded in when it is state (``session_state.state_kind``)."""
        if session_state.state_kind(change) is not None:
            new = session_state.update(self.state, change)
            if new is not None:
                if new.title != self.state.title:
                    log.info("session title", session=self.session_id, title=new.title)
                self.state = new
                self.tell(None)

    def prompt_ended(self, result: Any) -> None:
        """A ``session/prompt`` of the chat's session answered ``result``: its token counts
        kept with the usage (``session_state.turn_usage``) and told."""
        new = session_state.turn_usage(self.state, result)
        if new is not None:
            self.state = new
            self.tell(None)

    def tell(self, request_id: Any) -> None:
        """Tell the shim the chat's state (``client/sessionState``), naming ``request_id``
        when it answers the request the shim is serving now."""
        if self._report is not None and self._is_open():
            self._report(self.session_id, request_id, self.wire())

    def wire(self) -> dict[str, Any]:
        """The chat's state as the shim gets it: ``session_state.to_wire``, each mode marked
        with who approves in it where known (``core.modes.approvers``)."""
        mode = self._mode_control()
        approvers = modes.approvers(self.acp.process.caps.profile, [c.value for c in mode.choices]) if mode is not None else {}
        return session_state.to_wire(self.state, approvers)

    def _mode_control(self) -> session_state.Control | None:
        return next((c for c in self.state.controls if c.category == "mode"), None)

    # -- before a prompt ------------------------------------------------------------

    def chosen(self, configuration: dict[str, Any] | None, picked: dict[str, Any]) -> dict[str, str]:
        """The controls to set before a prompt: on a session opened new, its start mode (the
        agent's ``mode`` setting, else its asking mode: ``core.modes.start_mode``), then
        everything VS Code's model configuration says (``configuration``: the user's choice
        wins); on one that ran before, only what the user changed since the previous request
        (``picked``). What the user set on this chat with ``chat/setControl`` since is set
        again on a session opened new (one replacing a session lost). A session taken up
        again (``session/resume``, ``session/load``) gets its mode so too (codex-acp 2.6
        takes a session up in its own starting mode), and ``picked``.

        Of the model configuration (``configuration`` and ``picked``), a mode that widens what
        runs is never set: it is the last choice of any chat of the model
        (``permissions.from_configuration``); only ``chat/setControl``, which names the chat, sets it."""
        mode = self._mode_control()
        self._required = None
        fresh = self._fresh or self._taken_up
        configuration = self._from_configuration(configuration or {})
        picked = self._from_configuration(picked)
        if fresh:
            values: dict[str, Any] = {}
            if mode is not None:
                start = modes.start_mode(self.acp.process.caps.profile, [c.value for c in mode.choices], self._mode)
                if start is not None:
                    values[mode.id] = start
            if self._fresh:
                values.update(configuration)
                values.update(self._chosen)
            else:  # taken up again: its mode as a new session's, the rest as it was
                if mode is not None:
                    for source in (configuration, self._chosen):
                        if isinstance(source.get(mode.id), str):
                            values[mode.id] = source[mode.id]
                values.update(picked)
            self._fresh = self._taken_up = False
        else:
            values = dict(picked)
            for key in picked:  # the user's newer choice, beside the model picker
                self._chosen.pop(key, None)
        changes = session_state.wanted(self.state, values)
        if fresh and mode is not None and mode.id in changes:
            self._required = mode.id  # a new session's mode: its first prompt waits on it (configure_then)
        return changes

    def _from_configuration(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` from VS Code's model configuration less the modes it may not set (``permissions.from_configuration``)."""
        kept: dict[str, Any] = {}
        profile = self.acp.process.caps.profile
        for control_id, value in values.items():
            control = self.state.control(control_id) if isinstance(control_id, str) else None
            if control is not None and not permissions.from_configuration(control.id, control.category, control.legacy, value, profile):
                log.warning("a mode from the model configuration not set: only the chat's own mode control sets it", session=self.session_id, configId=control_id, value=value)
                continue
            kept[control_id] = value
        return kept

    async def configure_then(self, changes: dict[str, str], write: Write, out: MemoryObjectSendStream[Write], prompt_id: int | None = None) -> None:
        """Each change set (bounded: ``session/set_config_option``, or ``session/set_mode``
        for the older modes), then the prompt ``write`` is queued on ``out``. When the agent
        refuses a new session's mode (``chosen``'s: its start mode, or the chat's choice), the prompt
        is not sent: its turn ends with an error (a ``Response`` to ``prompt_id`` on the
        actor's mailbox) rather than run in a mode nobody chose."""
        required, refused = self._required, None
        try:
            for config_id, value in changes.items():
                control = self.state.control(config_id)
                try:
                    if control is not None and control.legacy:
                        answer = await self.acp.set_mode(value)  # bounded: acp.session
                    else:
                        answer = {"configOptions": await self.acp.set_config_option(config_id, value)}
                        if answer["configOptions"] is not None:
                            self._options_changed(answer["configOptions"])
                    log.info("config option set", session=self.session_id, configId=config_id, value=value)
                    self._send.send_nowait(ControlSet(SetControl(config_id, value, by_user=False), answer))
                except (AgentError, AgentUnavailable) as exc:  # AgentStuck: the process is stopped, the turn told
                    log.warning("config option not set", session=self.session_id, configId=config_id, value=value, error=str(exc) or type(exc).__name__)
                    if config_id == required and prompt_id is not None:
                        control = self.state.control(config_id)
                        label = control.label(value) if control is not None else value
                        refused = f"the agent did not take the mode {label} ({exc or type(exc).__name__}); your message was not sent"
                        break
        finally:
            try:
                if refused is not None and prompt_id is not None:  # the turn ends in error: the chat's session with it
                    self._send.send_nowait(Response(prompt_id, error=AgentError("session/prompt", {"code": errors.AGENT_FAILED, "message": refused})))
                else:
                    out.send_nowait(write)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass

    # -- the user sets one ----------------------------------------------------------

    def set(self, request: SetControl) -> None:
        """``SetControl``: the request goes out in a child task; its answer comes back as ``ControlSet``."""
        session = self.acp.id
        if session is None or not self._is_open():
            request.fail("this chat's agent session is not open; send a message first")
            return
        try:
            method, _ = session_state.set_request(self.state, session, request.control_id, request.value)
        except session_state.UnknownControl as exc:
            request.fail(str(exc))
            return

        async def run() -> None:
            try:
                if method == "session/set_mode":
                    answer = await self.acp.set_mode(request.value)
                else:
                    answer = {"configOptions": await self.acp.set_config_option(request.control_id, request.value)}
            except (AgentError, AgentUnavailable) as exc:
                self._send.send_nowait(ControlSet(request, error=f"the agent refused: {exc}" if str(exc) else "the agent refused"))
            except BaseException:  # the actor stops (its task group cancelled): never leave the caller waiting
                request.fail(present.CONTROL_SESSION_GONE)
                raise
            else:
                self._send.send_nowait(ControlSet(request, answer))

        assert self._tg is not None
        self._tg.start_soon(run)

    def answered(self, msg: ControlSet) -> None:
        """A control's request came back: the state follows the agent's answer."""
        request = msg.request
        if msg.error is None:
            self.state = session_state.after_set(self.state, request.control_id, request.value, msg.answer)
            if request.by_user:  # chat/setControl: kept for a session opened new
                self._chosen[request.control_id] = request.value
            log.info("control set", session=self.session_id, control=request.control_id, value=request.value)
            self.tell(None)
            request.state = self.wire()
        else:
            request.error = msg.error
        request.done.set()
