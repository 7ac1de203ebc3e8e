"""The built-in demo agent: a real ACP agent that needs no model and no network.

``lmbridge demo-agent`` runs it (through :func:`main`). It speaks ACP (Agent Client
Protocol v1: JSON-RPC 2.0, one JSON object per line) on stdin/stdout via the official
Python SDK (``acp.run_agent``); its logs go to stderr only, because stdout is the
protocol. It exists so lmbridge can be tried and tested end to end, including tool
permissions and cancellation, without installing a real agent.

Behaviour is deterministic and driven by the prompt text (the text blocks of the
prompt, concatenated). Every turn starts with an ``agent_thought_chunk`` streamed in
two or three pieces ("Thinking about: <first 60 chars>…") and a ``plan``, and, unless
the turn was cancelled, ends with the same plan with every entry completed.

==============================  ==========================================================
Prompt                          What the agent does
==============================  ==========================================================
contains "show me NAME"         ``fs/read_text_file`` of ``<cwd>/NAME`` through the client;
                                says "`NAME` says:" and the text in a code block (the
                                client's error, if it refused).
contains "append a line to      reads ``<cwd>/NAME`` through the client, ``tool_call``
NAME"                           "Append to NAME" (kind edit, pending, a ``diff``), then
                                ``session/request_permission`` (locations: the file) with
                                the four options below. allow_* -> ``fs/write_text_file``
                                of the text plus "Appended by the demo agent.", says "I
                                appended a line to `NAME`."; reject_* -> says "I did not
                                change `NAME`: permission was declined."
contains "run the script      ``tool_call`` "Run sh NAME" (kind execute, pending, rawInput
NAME"                           ``{"command": "sh NAME"}``), then
                                ``session/request_permission`` with the four options below.
                                allow_* -> ``terminal/create`` of ``sh`` with args
                                ``[NAME]`` (no cwd: the session's) through the client (which
                                streams its output), the tool call in_progress with the
                                terminal as its content, ``terminal/wait_for_exit``,
                                ``terminal/release``; the call completed (exit code 0) or
                                failed, says "`sh NAME` ended: exit code N." (or "killed by
                                SIG..."); reject_* -> call failed, says "I did not run it:
                                permission was declined."; a client that offers no
                                terminals (``clientCapabilities.terminal``) or refuses one:
                                the call failed and the agent says why.
contains "ask me"                asks a question (``elicitation/create``, form mode, as
                                claude-agent-acp's AskUserQuestion does): "Which colour
                                should the button be?", a single select (Red, Green, Blue)
                                and an optional free-text "Note". accept -> says "You chose
                                COLOUR." (and "Note: ..."); decline -> "You declined the
                                question."; cancel -> "The question was cancelled."; a
                                client without ``clientCapabilities.elicitation.form`` ->
                                "I cannot ask: the client shows no questions."
contains "write" or "file"      ``tool_call`` "Write notes.txt" (kind edit, pending), then
(case-insensitive)              ``session/request_permission`` with options Allow
                                (allow_once, id ``allow``), Always allow (allow_always,
                                ``allow-always``), Reject (reject_once, ``reject``), Never
                                allow (reject_always, ``reject-always``).
                                allow_* -> writes ``<scratch>/notes.txt``, tool call goes
                                in_progress then completed with a ``diff``, says
                                "I wrote `<path>`."; reject_* -> tool call failed, says
                                "I did not write the file: permission was declined.";
                                outcome cancelled -> stopReason cancelled, nothing written.
... and also "two files"        the same for notes.txt and notes2.txt concurrently: both
                                permission requests are outstanding together (sent a few
                                ms apart) and each answer is handled on its own.
contains "slow"                 40 message chunks "chunk N " 50 ms apart.
contains "plan mode"            ``tool_call`` "Leave plan mode" (kind switch_mode, pending,
                                rawInput ``{"plan": ...}``, as Claude Code's ExitPlanMode),
                                then ``session/request_permission`` with the same four
                                options. allow_* -> tool call completed, says "Plan mode
                                left."; reject_* -> tool call failed, says "I stayed in
                                plan mode: permission was declined."; cancelled -> as above.
contains "run" and "command"    ``tool_call`` "Run date" (kind execute, pending, rawInput
                                ``{"command": "date", "description": "Print the date"}``),
                                then ``session/request_permission`` with the same four
                                options. allow_* -> tool call completed, says "I ran
                                `date`." (it only pretends: nothing is run); reject_* ->
                                tool call failed, says "I did not run it: permission was
                                declined."; cancelled -> as above.
anything else                   "Hello from the demo agent. You said: <prompt>" in
                                several ``agent_message_chunk`` pieces; in capitals
                                when the session's ``model`` option is ``loud``.
image blocks                    "I received an image of N bytes." before the above.
==============================  ==========================================================

The first row that matches wins, in the table's order. NAME is the word after the phrase
(a relative path, under the session's cwd). The scratch folder for writes is
``$LMBRIDGE_DEMO_SCRATCH`` if set, otherwise a new private folder
``<tempdir>/lmbridge-demo-<sessionId>-<random>/`` (``tempfile.mkdtemp``, 0700, made at the
session's first write: never one another user made first). The session's cwd is written
to only through the client (``fs/write_text_file``), never by the agent itself.

ACP methods implemented: ``initialize`` (protocol version 1, agentInfo
``lmbridge-demo``, image prompts accepted, no ``session/load``), ``authenticate``
(accepts anything: no auth methods are advertised), ``session/new`` (with one config
option of category ``model``: ``plain`` or ``loud``, so VS Code's picker shows the
agent's own models), ``session/set_config_option``, ``session/prompt`` and the
``session/cancel`` notification. Sent to the client:
``session/update`` (agent_thought_chunk, plan, agent_message_chunk, tool_call,
tool_call_update), ``session/request_permission``, ``elicitation/create``, ``fs/read_text_file``,
``fs/write_text_file``, ``terminal/create``, ``terminal/wait_for_exit`` and
``terminal/release``. Anything else is answered with
JSON-RPC -32601 by the SDK.

``session/cancel`` stops the running turn at once: the turn's work is cancelled where it
stands (including a pending permission request, which the client answers ``cancelled``
on its own), nothing is written afterwards, and the prompt returns stopReason
``cancelled``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
import re
import shlex
import stat
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import acp
import anyio
from acp.schema import (
    AcceptElicitationResponse,
    AgentCapabilities,
    AllowedOutcome,
    ClientCapabilities,
    DeclineElicitationResponse,
    ElicitationFormSessionMode,
    ElicitationSchema,
    ElicitationStringPropertySchema,
    EnumOption,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PermissionOptionKind,
    PlanEntry,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SetSessionConfigOptionResponse,
    TextContentBlock,
    ToolCallLocation,
    ToolCallUpdate,
)

from lmbridge import __version__

__all__ = ["AGENT_NAME", "DemoAgent", "main"]

log = logging.getLogger("lmbridge.devtools.demo_agent")

AGENT_NAME = "lmbridge-demo"
NOTES_HEADER = "Notes from the lmbridge demo agent.\n"
SCRATCH_ENV = "LMBRIDGE_DEMO_SCRATCH"

# Small pauses make the stream look (and behave, for the client) like a real agent's
# without slowing tests down noticeably.
CHUNK_DELAY = 0.015
SLOW_CHUNKS = 40
SLOW_DELAY = 0.05
# Gap between the two permission requests of a "two files" turn: long enough that they
# arrive as separate frames, short enough that no human answers the first one in between.
PERMISSION_STAGGER = 0.005
THOUGHT_SNIPPET = 60
# What the "plan mode" row asks to leave plan mode with (rawInput {"plan": ...}).
DEMO_PLAN = "1. Read the request.\n2. Answer it."
APPENDED = "Appended by the demo agent.\n"
_SHOW = re.compile(r"show me ([\w./-]+)", re.IGNORECASE)
_APPEND = re.compile(r"append a line to ([\w./-]+)", re.IGNORECASE)
_SCRIPT = re.compile(r"run the script ([\w./-]+)", re.IGNORECASE)
#: Bytes of a script's output the client keeps for the agent (``terminal/create``'s ``outputByteLimit``).
SCRIPT_OUTPUT_LIMIT = 64 * 1024
#: Seconds a ``terminal/release`` may take once the turn was cancelled (it still frees the terminal).
RELEASE_TIMEOUT = 5.0


@dataclass(frozen=True)
class _Pretend:
    """A permission the agent asks for an action it only pretends to take."""

    title: str
    kind: Literal["switch_mode", "execute"]
    raw_input: dict[str, Any]
    allowed: str
    declined: str


# As Claude Code's ExitPlanMode asks (kind switch_mode), and a command (kind execute).
LEAVE_PLAN_MODE = _Pretend("Leave plan mode", "switch_mode", {"plan": DEMO_PLAN}, "Plan mode left.\n", "I stayed in plan mode: permission was declined.\n")
RUN_DATE = _Pretend("Run date", "execute", {"command": "date", "description": "Print the date"}, "I ran `date`.\n", "I did not run it: permission was declined.\n")

# Option ids deliberately differ from the kinds: clients must choose by kind.
PERMISSION_OPTIONS: tuple[PermissionOption, ...] = (
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="allow-always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
    PermissionOption(option_id="reject-always", name="Never allow", kind="reject_always"),
)
_KIND_BY_OPTION_ID: dict[str, PermissionOptionKind] = {o.option_id: o.kind for o in PERMISSION_OPTIONS}


@dataclass
class _Session:
    session_id: str
    cwd: str
    scratch: Path | None  # $LMBRIDGE_DEMO_SCRATCH, else made by scratch_dir() when first needed
    # The running turn's cancel scope; session/cancel cancels it. None between turns.
    turn: anyio.CancelScope | None = None
    model: str = "plain"  # its config option of category model: "plain" or "loud"

    def scratch_dir(self) -> Path:
        """The folder writes go to; without $LMBRIDGE_DEMO_SCRATCH, a fresh ``mkdtemp``
        folder (a fixed name under the shared temp dir could be made by another user first)."""
        if self.scratch is None:
            self.scratch = Path(tempfile.mkdtemp(prefix=f"lmbridge-demo-{self.session_id}-"))
        return self.scratch


class DemoAgent:
    """The demo agent's ACP handlers (structurally an :class:`acp.Agent`).

    It deliberately does not subclass ``acp.Agent``: that class is a Protocol whose
    stub methods return None, and the SDK routes every method it finds, so inheriting
    them would answer e.g. ``session/load`` with an empty success instead of -32601.
    """

    def __init__(self) -> None:
        self._client: acp.Client | None = None
        self._sessions: dict[str, _Session] = {}
        self._terminals = False  # the client's initialize offered terminal/* (clientCapabilities.terminal)
        self._asks = False  # ... and form questions (clientCapabilities.elicitation.form)

    # -- SDK hooks ---------------------------------------------------------------

    def on_connect(self, conn: acp.Client) -> None:
        """Keep the connection: it is how the agent talks back to the client."""
        self._client = conn

    async def initialize(self, protocol_version: int, client_capabilities: ClientCapabilities | None = None, **_: Any) -> InitializeResponse:
        """Answer ``initialize``: protocol 1, image prompts, no session loading. Remembers
        whether the client serves ``terminal/*`` (the "run the script" row needs it)."""
        self._terminals = bool(client_capabilities and client_capabilities.terminal)
        self._asks = bool(client_capabilities and client_capabilities.elicitation and client_capabilities.elicitation.form is not None)
        log.info("initialize: client protocol version %s, terminals %s", protocol_version, self._terminals)
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=False,
                prompt_capabilities=PromptCapabilities(image=True, audio=False, embedded_context=False),
            ),
            agent_info=Implementation(name=AGENT_NAME, title="lmbridge demo agent", version=__version__),
            auth_methods=[],
        )

    async def authenticate(self, method_id: str, **_: Any) -> None:
        """Accept any ``authenticate`` call: the demo agent has nothing to log in to."""
        log.info("authenticate: %s (nothing to do)", method_id)

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        """Create a session, remember its cwd and choose its scratch folder."""
        session_id = f"demo-{uuid.uuid4().hex[:12]}"
        env_scratch = os.environ.get(SCRATCH_ENV)
        scratch = Path(env_scratch) if env_scratch else None
        self._sessions[session_id] = _Session(session_id=session_id, cwd=cwd, scratch=scratch)
        log.info("session/new: %s cwd=%s scratch=%s", session_id, cwd, scratch or "(a new private folder at the first write)")
        return NewSessionResponse(session_id=session_id, config_options=_config_options("plain"))

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool, **_: Any) -> SetSessionConfigOptionResponse:
        """``session/set_config_option``: the ``model`` option, ``plain`` or ``loud``."""
        session = self._sessions.get(session_id)
        if session is None or config_id != "model" or value not in MODELS:
            raise acp.RequestError.invalid_params({"sessionId": session_id, "configId": config_id, "value": value})
        session.model = str(value)
        log.info("session/set_config_option %s: model=%s", session_id, value)
        return SetSessionConfigOptionResponse(config_options=_config_options(session.model))

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        """Run one turn; its stopReason is ``cancelled`` if the client cancelled it."""
        session = self._sessions.get(session_id)
        if session is None:
            raise acp.RequestError.invalid_params({"sessionId": session_id, "details": "unknown session"})
        if session.turn is not None:
            raise acp.RequestError.invalid_request({"details": "a prompt is already running in this session"})

        # The SDK runs each request in its own task and sends no response at all if
        # that task is cancelled, so cancellation must stay inside this handler: the
        # turn runs in a cancel scope that session/cancel cancels, and we still return.
        scope = anyio.CancelScope()
        session.turn = scope
        try:
            with scope:
                await self._run_turn(session, prompt, scope)
        finally:
            session.turn = None
        if scope.cancel_called:
            log.info("session/prompt %s: cancelled", session_id)
            return PromptResponse(stop_reason="cancelled")
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **_: Any) -> None:
        """Handle ``session/cancel``: stop the session's running turn, if any."""
        session = self._sessions.get(session_id)
        if session is None or session.turn is None:
            log.info("session/cancel %s: no running turn", session_id)
            return
        log.info("session/cancel %s: cancelling the running turn", session_id)
        session.turn.cancel()

    # -- one turn ----------------------------------------------------------------

    async def _run_turn(self, session: _Session, blocks: list[Any], scope: anyio.CancelScope) -> None:
        sid = session.session_id
        text = "".join(b.text for b in blocks if isinstance(b, TextContentBlock))
        # A fresh session is told the conversation first (docs/sessions.md): what it asks for
        # is the request after it, not the words of earlier turns.
        request = text.rsplit("</conversation-so-far>", 1)[-1]
        lowered = request.lower()
        shown, appended, script = _SHOW.search(request), _APPEND.search(request), _SCRIPT.search(request)
        if shown or appended or script:
            await self._think(sid, text)
            if shown:
                await self._show(session, shown.group(1).rstrip("."))
            elif appended:
                await self._append(session, appended.group(1).rstrip("."), scope)
            else:
                assert script is not None
                await self._run_script(session, script.group(1).rstrip("."), scope)
            return
        if "ask me" in lowered:
            await self._think(sid, text)
            await self._ask(sid)
            return
        writes = "write" in lowered or "file" in lowered
        slow = not writes and "slow" in lowered
        leaves_plan_mode = not writes and not slow and "plan mode" in lowered
        runs = not (writes or slow or leaves_plan_mode) and "run" in lowered and "command" in lowered

        await self._think(sid, text)
        if writes:
            steps = ["Read the request", "Ask permission and write the file", "Answer"]
        elif leaves_plan_mode:
            steps = ["Read the request", "Ask to leave plan mode", "Answer"]
        elif runs:
            steps = ["Read the request", "Ask permission and run the command", "Answer"]
        else:
            steps = ["Read the request", "Answer"]
        await self._update(sid, acp.update_plan(_plan(steps, done=1)))

        for block in blocks:
            if isinstance(block, ImageContentBlock):
                await self._say(sid, f"I received an image of {_decoded_size(block.data)} bytes.\n")
            elif isinstance(block, ResourceContentBlock):
                await self._say(sid, f"I received a link to {block.uri}.\n")

        if writes:
            names = ["notes.txt", "notes2.txt"] if "two files" in lowered else ["notes.txt"]
            async with anyio.create_task_group() as tg:
                for index, name in enumerate(names):
                    tg.start_soon(self._write_with_permission, session, text, name, scope, index * PERMISSION_STAGGER)
        elif slow:
            for n in range(1, SLOW_CHUNKS + 1):
                await self._update(sid, acp.update_agent_message_text(f"chunk {n} "))
                await anyio.sleep(SLOW_DELAY)
        elif leaves_plan_mode:
            await self._pretend(session, scope, LEAVE_PLAN_MODE)
        elif runs:
            await self._pretend(session, scope, RUN_DATE)
        else:
            reply = f"Hello from the demo agent. You said: {text}"
            await self._say(sid, reply.upper() if session.model == "loud" else reply)

        await self._update(sid, acp.update_plan(_plan(steps, done=len(steps))))

    async def _write_with_permission(
        self, session: _Session, prompt_text: str, name: str, scope: anyio.CancelScope, delay: float
    ) -> None:
        """Announce a write, ask permission, and act on the answer (one tool call)."""
        if delay:
            await anyio.sleep(delay)
        sid = session.session_id
        path = session.scratch_dir() / name
        content = NOTES_HEADER + prompt_text
        call_id = f"write-{uuid.uuid4().hex[:12]}"
        start = acp.start_edit_tool_call(call_id, f"Write {name}", str(path), content)
        if path.exists():  # the card then shows a diff against what is there, not a new file
            before = path.read_text(encoding="utf-8", errors="replace")
            start = start.model_copy(update={"content": [acp.tool_diff_content(str(path), content, before)]})
        await self._update(sid, start)

        if not await self._permitted(sid, call_id, start, scope, "I did not write the file", locations=[ToolCallLocation(path=str(path))]):
            return

        await self._update(sid, acp.update_tool_call(call_id, status="in_progress"))
        # A session/cancel may have landed while that update was queued; the scope
        # would raise at the next await, but the write below has none before it.
        if scope.cancel_called:
            return
        old_text = path.read_text(encoding="utf-8") if path.exists() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        log.info("wrote %s", path)
        await self._update(
            sid,
            acp.update_tool_call(
                call_id,
                status="completed",
                content=[acp.tool_diff_content(str(path), content, old_text)],
            ),
        )
        await self._say(sid, f"I wrote `{path}`.\n")

    async def _ask(self, sid: str) -> None:
        """Ask the user a question (``elicitation/create``, form mode) and say the answer."""
        if not self._asks:
            await self._say(sid, "I cannot ask: the client shows no questions.\n")
            return
        colours = [EnumOption(const=c.lower(), title=c) for c in ("Red", "Green", "Blue")]
        schema = ElicitationSchema(properties={
            "colour": ElicitationStringPropertySchema(type="string", title="Colour", one_of=colours),
            "note": ElicitationStringPropertySchema(type="string", title="Note", description="Anything to add? (optional)"),
        }, required=["colour"])  # fmt: skip
        mode = ElicitationFormSessionMode(session_id=sid, requested_schema=schema)
        try:
            answer = await self._conn.create_elicitation(message="Which colour should the button be?", mode=mode)
        except acp.RequestError as exc:
            await self._say(sid, f"I could not ask: {exc}\n")
            return
        if isinstance(answer, AcceptElicitationResponse):
            content = answer.content or {}
            note = f" Note: {content['note']}" if content.get("note") else ""
            await self._say(sid, f"You chose {content.get('colour')}.{note}\n")
        elif isinstance(answer, DeclineElicitationResponse):
            await self._say(sid, "You declined the question.\n")
        else:
            await self._say(sid, "The question was cancelled.\n")

    async def _show(self, session: _Session, name: str) -> None:
        """Read ``<cwd>/name`` through the client and say what it holds."""
        sid = session.session_id
        try:
            read = await self._conn.read_text_file(session_id=sid, path=os.path.join(session.cwd, name))
        except acp.RequestError as exc:
            await self._say(sid, f"I could not read `{name}`: {exc}\n")
            return
        await self._say(sid, f"`{name}` says:\n\n```\n{read.content}\n```\n")

    async def _append(self, session: _Session, name: str, scope: anyio.CancelScope) -> None:
        """Read ``<cwd>/name`` through the client, ask to add a line, and write it through the client."""
        sid = session.session_id
        path = os.path.join(session.cwd, name)
        try:
            before = (await self._conn.read_text_file(session_id=sid, path=path)).content
        except acp.RequestError as exc:
            await self._say(sid, f"I could not read `{name}`: {exc}\n")
            return
        after = before + ("" if before.endswith("\n") or not before else "\n") + APPENDED
        call_id = f"append-{uuid.uuid4().hex[:12]}"
        start = acp.start_edit_tool_call(call_id, f"Append to {name}", path, after)
        start = start.model_copy(update={"content": [acp.tool_diff_content(path, after, before)]})
        await self._update(sid, start)
        if not await self._permitted(sid, call_id, start, scope, f"I did not change `{name}`", locations=[ToolCallLocation(path=path)]):
            return
        try:
            await self._conn.write_text_file(session_id=sid, path=path, content=after)
        except acp.RequestError as exc:
            await self._update(sid, acp.update_tool_call(call_id, status="failed"))
            await self._say(sid, f"I could not write `{name}`: {exc}\n")
            return
        await self._update(sid, acp.update_tool_call(call_id, status="completed"))
        await self._say(sid, f"I appended a line to `{name}`.\n")

    async def _run_script(self, session: _Session, name: str, scope: anyio.CancelScope) -> None:
        """Ask to run ``sh name`` and, allowed, run it through the client's terminal
        (``terminal/create``: the client shows its output as it comes), then say how it ended."""
        sid = session.session_id
        argv = ["sh", name]
        command = shlex.join(argv)
        call_id = f"execute-{uuid.uuid4().hex[:12]}"
        start = acp.start_tool_call(call_id, f"Run {command}", kind="execute", status="pending", raw_input={"command": command})
        await self._update(sid, start)
        if not self._terminals:
            await self._update(sid, acp.update_tool_call(call_id, status="failed"))
            await self._say(sid, f"I cannot run `{command}`: the client offers no terminals.\n")
            return
        if not await self._permitted(sid, call_id, start, scope, "I did not run it"):
            return
        try:
            # No cwd: the client's default is the session's (and the card named none).
            created = await self._conn.create_terminal(session_id=sid, command=argv[0], args=argv[1:], output_byte_limit=SCRIPT_OUTPUT_LIMIT)
        except acp.RequestError as exc:
            await self._update(sid, acp.update_tool_call(call_id, status="failed"))
            await self._say(sid, f"I could not run `{command}`: {exc}\n")
            return
        terminal_id = created.terminal_id
        try:
            await self._update(sid, acp.update_tool_call(call_id, status="in_progress", content=[acp.tool_terminal_ref(terminal_id)]))
            ended = await self._conn.wait_for_terminal_exit(session_id=sid, terminal_id=terminal_id)
        finally:
            # Released whatever happened (a cancelled turn too): the client frees it and ends
            # a command still running.
            with anyio.move_on_after(RELEASE_TIMEOUT, shield=True):
                try:
                    await self._conn.release_terminal(session_id=sid, terminal_id=terminal_id)
                except acp.RequestError as exc:
                    log.info("terminal/release %s: %s", terminal_id, exc)
        how = f"killed by {ended.signal}" if ended.signal else f"exit code {ended.exit_code}"
        await self._update(sid, acp.update_tool_call(call_id, status="completed" if ended.exit_code == 0 else "failed"))
        await self._say(sid, f"`{command}` ended: {how}.\n")

    async def _pretend(self, session: _Session, scope: anyio.CancelScope, action: _Pretend) -> None:
        """Ask permission for ``action`` and say how it went; allowed, it only pretends: nothing runs."""
        sid = session.session_id
        call_id = f"{action.kind}-{uuid.uuid4().hex[:12]}"
        start = acp.start_tool_call(call_id, action.title, kind=action.kind, status="pending", raw_input=action.raw_input)
        await self._update(sid, start)
        kind = await self._ask_permission(sid, start, scope)
        if kind is None:
            return
        allowed = not kind.startswith("reject")
        await self._update(sid, acp.update_tool_call(call_id, status="completed" if allowed else "failed"))
        await self._say(sid, action.allowed if allowed else action.declined)

    async def _permitted(
        self, sid: str, call_id: str, start: Any, scope: anyio.CancelScope, declined: str, *, locations: list[ToolCallLocation] | None = None
    ) -> bool:
        """Whether the user allowed the tool call ``start`` announced (``_ask_permission``).
        Declined, the call fails and the agent says ``declined``: permission was declined."""
        kind = await self._ask_permission(sid, start, scope, locations=locations)
        if kind is None:
            return False
        if kind.startswith("reject"):
            await self._update(sid, acp.update_tool_call(call_id, status="failed"))
            await self._say(sid, f"{declined}: permission was declined.\n")
            return False
        return True

    async def _ask_permission(
        self,
        session_id: str,
        start: Any,
        scope: anyio.CancelScope,
        *,
        locations: list[ToolCallLocation] | None = None,
    ) -> PermissionOptionKind | None:
        """``session/request_permission`` for the tool call ``start`` announced.

        Returns the kind of the option chosen (an unknown option id counts as
        ``reject_once``: never act without a clear yes), or None when the answer was
        ``cancelled``, after cancelling the whole turn.
        """
        call_id = start.tool_call_id
        response = await self._conn.request_permission(
            session_id=session_id,
            tool_call=ToolCallUpdate(
                tool_call_id=call_id,
                title=start.title,
                kind=start.kind,
                status=start.status,
                locations=locations,
                raw_input=start.raw_input,
                # The change itself: lmbridge lets a write carry only the content its card showed.
                content=start.content,
            ),
            options=list(PERMISSION_OPTIONS),
        )
        outcome = response.outcome
        if not isinstance(outcome, AllowedOutcome):
            # "cancelled" without a session/cancel still means the user stopped the
            # turn: cancel the whole turn so a sibling tool call cannot act either.
            log.info("permission for %s: cancelled", call_id)
            scope.cancel()
            return None
        kind = _KIND_BY_OPTION_ID.get(outcome.option_id, "reject_once")
        log.info("permission for %s: %s (%s)", call_id, outcome.option_id, kind)
        return kind

    # -- sending -----------------------------------------------------------------

    @property
    def _conn(self) -> acp.Client:
        if self._client is None:  # on_connect runs before any request is routed
            raise RuntimeError("DemoAgent used before the SDK connected it")
        return self._client

    async def _update(self, session_id: str, update: Any) -> None:
        await self._conn.session_update(session_id=session_id, update=update)

    async def _think(self, session_id: str, prompt_text: str) -> None:
        snippet = " ".join(prompt_text.split())[:THOUGHT_SNIPPET]
        half = len(snippet) // 2
        pieces = ["Thinking about: ", snippet[:half], snippet[half:] + "…"]
        for piece in pieces:
            if piece:
                await self._update(session_id, acp.update_agent_thought_text(piece))
                await anyio.sleep(CHUNK_DELAY)

    async def _say(self, session_id: str, text: str) -> None:
        """Stream ``text`` as a few agent_message_chunks (three words each)."""
        words = [w for w in re.split(r"(?<=\s)(?=\S)", text) if w]
        for i in range(0, len(words), 3):
            await self._update(session_id, acp.update_agent_message_text("".join(words[i : i + 3])))
            await anyio.sleep(CHUNK_DELAY)


MODELS = {"plain": "Plain", "loud": "Loud"}  # the demo's "models": how it answers


def _config_options(current: str) -> list[SessionConfigOptionSelect | SessionConfigOptionBoolean]:
    return [
        SessionConfigOptionSelect(
            id="model", name="Model", category="model", type="select", current_value=current,
            options=[SessionConfigSelectOption(value=v, name=n) for v, n in MODELS.items()],
        )  # fmt: skip
    ]


def _plan(steps: list[str], *, done: int) -> list[PlanEntry]:
    """Plan entries: the first ``done`` completed, the next in progress, the rest pending."""
    entries = []
    for index, step in enumerate(steps):
        status: Literal["pending", "in_progress", "completed"] = "completed" if index < done else "in_progress" if index == done else "pending"
        entries.append(acp.plan_entry(step, priority="medium", status=status))
    return entries


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data) * 3 // 4


async def _serve(agent: DemoAgent) -> None:
    if _is_stream(sys.stdin) and _is_stream(sys.stdout):
        await acp.run_agent(agent)  # type: ignore[arg-type]  # the SDK's Agent protocol, structurally
        return
    # asyncio's pipe transports (what run_agent uses on POSIX) refuse regular files,
    # e.g. `lmbridge demo-agent < requests.jsonl > out.jsonl`. The SDK's thread-backed
    # streams (written for Windows) work with anything. Note run_agent's argument
    # order: the writer (towards the client) comes first, then the reader.
    from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
    from acp.stdio import _windows_stdio_streams

    reader, writer = await _windows_stdio_streams(asyncio.get_running_loop(), limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    await acp.run_agent(agent, writer, reader)  # type: ignore[arg-type]


def _is_stream(f: Any) -> bool:
    try:
        mode = os.fstat(f.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


def main() -> int:
    """Run the demo agent on stdin/stdout until the client closes stdin."""
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("LMBRIDGE_DEMO_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        asyncio.run(_serve(DemoAgent()))
    except KeyboardInterrupt:
        return 130
    log.info("stdin closed, exiting")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
