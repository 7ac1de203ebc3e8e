"""A chat request on its way to a session actor, and the job it becomes there.

``ChatRequest``: one ``provideLanguageModelChatResponse`` as the router built it, with
``PartSink``, where its response parts go. ``Job``: the request once the history actor
granted it a session (its ``Decision``), owned by that session's actor
(``daemon.session_actor``), which counts what the response emits (the history core's
``Fingerprint``) and ends it once. ``SessionHooks``: how a session actor reports to the
history actor (docs/architecture.md "Tasks and ownership").
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from lmbridge.acp import files as acp_files
from lmbridge.core.history import PREFIXES, Decision, Fingerprint, Last, PendingCall, squeezed
from lmbridge.core.jobs import JobInfo
from lmbridge.core.messages import AgentSpec, Message, ToolInfo, ToolResultPart
from lmbridge.core.present import Part

if TYPE_CHECKING:
    from lmbridge.core.messages import ModelConfiguration
    from lmbridge.daemon.chat_controls import Report
    from lmbridge.daemon.stdio import RequestId
    from lmbridge.tools.mcp_bridge import McpHost


class PartSink(Protocol):
    """Where one chat request's response parts go (``router.Parts``: ``lm/responsePart``
    frames of that request). ``stopped()``: the request's task scope was cancelled
    (``$/cancelRequest``, the shutdown): from then on nothing more is sent for it."""

    def send(self, part: Part) -> None: ...

    def stopped(self) -> bool: ...


@dataclass(eq=False)
class ChatRequest:
    """One ``provideLanguageModelChatResponse`` on its way to a session actor.

    Built by the router; the history actor owns it until it grants it a session (it
    writes ``shown``: the line sent while it waits for a free session), then it becomes a
    ``Job`` the session actor owns."""

    spec: AgentSpec
    messages: tuple[Message, ...]
    cwd: str | None
    parts: PartSink
    tools: tuple[ToolInfo, ...] = ()  # the request's options.tools
    verbatim: bool = False  # user messages as they came (initialize's userTurns)
    model: str | None = None  # one of the agent's own models (a value of its "model" config option)
    shown: list[Part] = field(default_factory=list)  # parts sent before it had a session
    # VS Code's model configuration sent with this request (control id → value), and what of it
    # changed since the previous request on the same model (session_state.picked): the user's choice.
    configuration: ModelConfiguration | None = None
    picked: ModelConfiguration = field(default_factory=dict)
    request_id: RequestId = None  # the shim's request id (client/sessionState names it)
    model_id: str = ""  # the VS Code model id the request named (its stateful marker says it)
    # Tells the shim the chat's state: (chat id, request id or None, session_state.to_wire(...)).
    report: Report | None = None

    def notice(self, text: str) -> None:
        """Show ``text`` in the chat while the request waits (``cap.waiting_notice``)."""
        if not self.parts.stopped():
            part: Part = {"type": "text", "value": text}
            self.shown.append(part)
            self.parts.send(part)


#: Characters of text and thinking a job keeps undigested (``Job.count``) before it digests
#: them at once: 16 MiB of ASCII text, at most 64 MiB of text beyond the BMP (4 bytes a character).
UNHASHED = 16 * 1024 * 1024


@dataclass(eq=False)
class Job:
    """A ``ChatRequest`` granted a session: its ``turn`` (the history actor's
    classification), run by the session actor of ``turn.session_id``, which owns it from
    ``submit`` on: it sets ``id``, counts what the response emits (the fingerprint), and
    sets ``done`` once, with ``stop_reason`` or ``error``."""

    decision: Decision
    request: ChatRequest
    done: anyio.Event = field(default_factory=anyio.Event)
    stop_reason: str | None = None
    error: str | None = None
    error_data: dict[str, Any] | None = None  # the error's data: auth.problem's when the agent needs a login
    usage: dict[str, int] | None = None  # what the answer's ``usage`` part tells (session_state.answer_usage)
    id: int = 0  # set by the actor when it takes the job up
    # What this response emitted, for the history core's fingerprint.
    _text: hashlib.blake2b = field(default_factory=lambda: hashlib.blake2b(digest_size=16))
    # Text + thinking; None while only text was counted (it is then ``_text``): text is hashed once.
    _shown: hashlib.blake2b | None = None
    call_ids: list[str] = field(default_factory=list)
    # The text's digest at each of the last part boundaries (history.Fingerprint.prefixes).
    _prefixes: deque[bytes] = field(default_factory=lambda: deque(maxlen=PREFIXES))
    _texts: int = 0
    # Text and thinking parts sent but not yet digested, and their characters: the digest is
    # taken when the response ends (or past UNHASHED characters), not while parts stream.
    _unhashed: list[Part] = field(default_factory=list)
    _unhashed_chars: int = 0

    def __post_init__(self) -> None:
        for part in self.request.shown:  # VS Code replays it as part of this answer
            self.count(part)

    @property
    def history(self) -> tuple[Message, ...]:
        return self.request.messages

    @property
    def tools(self) -> tuple[ToolInfo, ...]:
        return self.request.tools

    @property
    def verbatim(self) -> bool:
        return self.request.verbatim

    @property
    def model(self) -> str | None:
        return self.request.model

    @property
    def cancelled(self) -> bool:
        """The request was cancelled: nothing more is emitted for it."""
        return self.request.parts.stopped()

    async def send(self, part: Part) -> None:
        if self.cancelled or self.done.is_set():
            return
        self.count(part)
        self.request.parts.send(part)

    def answer(self, stop_reason: str | None, usage: dict[str, int] | None) -> None:
        """The response ended with ``stop_reason`` (``turn.Finish``), ``usage`` its answer's
        usage part; a job already done keeps the answer it had."""
        if not self.done.is_set():
            self.stop_reason, self.usage = stop_reason, usage
            self.done.set()

    def fail(self, error: str, data: dict[str, Any] | None = None) -> None:
        """The request ends with ``error`` (``turn.Fail``; ``data``: auth.problem's when the agent
        needs a login); a job already done keeps the answer it had."""
        if not self.done.is_set():
            self.error, self.error_data = error, data
            self.done.set()

    def count(self, part: Part) -> None:
        """Take ``part`` into the fingerprint (``send`` does; so does the job's start, for
        the line sent before it existed, while the request waited for a free session).

        Text and thinking are only kept here; ``fingerprint`` digests them. The digest is
        a third of the daemon's CPU per streamed byte and nothing needs it before the
        response ends, so it runs after the last part went out (docs/performance.md,
        "Streaming: the fingerprint after the last part"). Past ``UNHASHED`` characters
        kept, they are digested at once: a bound on what an endless answer holds."""
        kind = part["type"]
        if kind == "text" or kind == "thinking":
            self._unhashed.append(part)
            self._unhashed_chars += len(part["value"])
            if self._unhashed_chars > UNHASHED:
                self._digest()
        elif kind == "tool_call":
            self.call_ids.append(part["callId"])

    def _digest(self) -> None:
        """Digest the text and thinking kept by ``count``, in the order they were sent."""
        unhashed, self._unhashed, self._unhashed_chars = self._unhashed, [], 0
        for part in unhashed:
            value = squeezed(part["value"])
            if part["type"] == "text":
                if self._texts:
                    self._prefixes.append(self._text.digest())
                self._texts += 1
                self._text.update(value)
                if self._shown is not None:
                    self._shown.update(value)
            else:
                if self._shown is None:
                    self._shown = self._text.copy()
                self._shown.update(value)

    def fingerprint(self) -> Fingerprint:
        """What this response emitted (``history.Fingerprint``), everything sent so far digested."""
        self._digest()
        # A response the user stopped may come back cut at a part boundary (Fingerprint.prefixes).
        prefixes = tuple(self._prefixes) if self.cancelled else ()
        text = self._text.digest()
        return Fingerprint(text, tuple(self.call_ids), text if self._shown is None else self._shown.digest(), prefixes)

    def info(self) -> JobInfo:
        t = self.decision
        return JobInfo(
            id=self.id,
            answers=t.answers,
            cancel_first=t.cancel_first,
            has_prompt=bool(t.prompt),
            messages=t.context + t.prompt,
            tools=frozenset(tool.name for tool in self.tools),
            cancelled=self.cancelled,
        )


class Jobs:
    """A session actor's jobs, by ``Job.id`` (numbered from 1 as it takes them up), until
    each response ends."""

    def __init__(self) -> None:
        self._jobs: dict[int, Job] = {}
        self._last = 0

    def take(self, job: Job) -> Job:
        """``job`` numbered and kept."""
        self._last += 1
        job.id = self._last
        self._jobs[job.id] = job
        return job

    def __getitem__(self, job_id: int) -> Job:
        return self._jobs[job_id]

    def get(self, job_id: int | None) -> Job | None:
        return None if job_id is None else self._jobs.get(job_id)

    def pop(self, job_id: int) -> Job | None:
        return self._jobs.pop(job_id, None)

    def result(self, job_id: int | None, call_id: str) -> ToolResultPart | None:
        """VS Code's result of tool call ``call_id`` as job ``job_id``'s request brought it (None: none)."""
        job = self.get(job_id)
        return job.decision.results.get(call_id) if job is not None else None

    def fail_all(self, error: str) -> None:
        """Every job not done ends (with its own error, else ``error``): a bug left it
        unanswered; a request is never left hanging."""
        for job in self._jobs.values():
            job.fail(job.error or error)


@dataclass
class SessionHooks:
    """How a session actor reports to the history actor."""

    # (session id, what the response emitted, how it ended, the calls it left pending, Decision.number)
    ended: Callable[[str, Fingerprint, Last, list[PendingCall], int], Awaitable[None]]
    died: Callable[[str], Awaitable[None]]
    mcp_host: Callable[[], Awaitable[McpHost]]  # the daemon's MCP endpoint, started on first use
    # The chat's ACP sessionId, whether the agent can take it up again (session/resume or
    # session/load: for recovery after eviction, a crash, a restart), and the session's
    # configOptions as the agent answered them (its models and modes, agent_models).
    opened: Callable[[str, str, bool, object], None] = lambda session_id, acp_session, resumable, config_options: None
    # The agents' fs/* requests (through VS Code, or the disk). None: from disk, the session's
    # cwd the only workspace folder.
    files: acp_files.Files | None = None
