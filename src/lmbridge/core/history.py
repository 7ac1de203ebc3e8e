"""The history core: which session a request belongs to, and what it means.

Rules of this file (after h11's ``_state.py``):

* Everything that decides how a chat request relates to what an agent has seen
  lives here: session matching, request classification, the answer each pending
  permission gets. It does no I/O, reads no clock (``now`` is passed in) and
  draws no random numbers; the actors around it do that.
* It does not know about ACP or processes. A "session" here is the record of
  one agent conversation as VS Code shows it.

Theory of operation
-------------------
VS Code sends no session id: every ``provideLanguageModelChatResponse`` carries
the whole conversation again. Copilot re-renders its system
prompt and every user message on each request, so user text is not byte-stable.
What *is* stable is what the daemon itself emitted (the text of each response
and the callIds of its tool calls) and, inside each user message, the user's own
words (``user_message.words``: the request element's content, which Copilot renders
the same in the current turn and in the same turn replayed). So a session is a
list of ``Item``s, one per non-system VS Code message the agent has seen:
assistant items carry a ``Fingerprint`` of the response, user items the callIds
of the tool results in them and a digest of the user's words. A request is
aligned against a session position by position, and every one of these must be
equal; nothing is compared loosely.

VS Code does carry one thing for the provider: a stateful marker (``core/marker.py``,
docs/vscode.md "Stateful markers"), which each answer of the daemon's carries and
Copilot re-sends inside that answer. An assistant item keeps the marker that names it
(its own, or the one the message carried when the session was told it); a message and
an item that both have a valid marker are the same answer exactly when the markers are
equal, whatever text VS Code kept. Markers are MAC'd under the daemon's key (passed in):
one that does not verify is no marker.

Which sessions are tried: those that have seen the request's last assistant
message the daemon knows (by its marker; without a valid one, by callId, else by
text digest), or, when the request
holds no assistant message at all (every turn was stopped), those whose first
words are the request's. A session is continued only when it aligns, accounts
for the message that named it, and accounts for more of the request than any
other: two chats whose answers are identical but whose words differ never
align with each other's requests; two chats identical in everything the daemon
can compare (same words, same answers) cannot be told apart, and the request
goes to a fresh session told the conversation, never to either.

A session's last response may be *acknowledged* (it appears in the request) or
*absent* (VS Code dropped it: the user pressed Stop while our tool call waited
for confirmation, or edited/regenerated the turn). That, whether the response
ended waiting on permissions, and whether new user content follows, decide the
``Kind`` (see ``CLASSIFICATION`` below, walked row by row by the tests). A stopped turn
may also come back as one unmarked assistant message standing for all its rounds, text
joined and file names linkified: it is taken as that turn, acknowledged, only where the
request aligns up to the words that began it (``HistoryCore._kept_stop``).

A request whose only user words are in its last message is always a new chat (Copilot
sends its global context before a chat's first words as a user message of its own, its
markup and nothing else: ``user_message.is_scaffolding``). A request that
matches no session (another model answered, the history was edited) is a
divergence: a fresh agent session gets the conversation so far as context, so
its view equals VS Code's.

A session whose agent session ended but can be taken up again (evicted, its
agent restarted, or restored from the index a previous daemon persisted) is
*dormant*: matched like any other, and the turn that wakes it carries
``resume``, the opaque token (the agent's ACP sessionId) the actors use to
continue the agent's own session, with its own memory of the chat. A response
that was waiting on permissions when its agent session ended is
``INTERRUPTED``: its cards can no longer be answered, so a late Allow or Skip
(or a new message) wakes the session all the same, answers those cards
``CANCELLED`` and tells the agent what the user chose (``late_note``); it is
never a divergence, which would move the chat to a fresh session for good.

``plan`` decides where a request goes and changes nothing; ``begin`` carries a
plan out. The history actor checks the session cap between the two, so a
request refused for the cap leaves every session, dormant ones and their
resume tokens included, as it was.

What a pending permission is answered is the permission rule's (``permissions.answer``):
approval needs the exact per-call token in the tool result (Skip produces a tool result
too). Anything else, or any doubt, denies.
"""

from __future__ import annotations

import enum
import hashlib
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from lmbridge.core import marker as markers
from lmbridge.core import permissions
from lmbridge.core.marker import Marker
from lmbridge.core.messages import VSCODE_SKIP_TEXT, DataPart, Message, TextPart, ToolCallPart, ToolResultPart
from lmbridge.core.permissions import Answer
from lmbridge.core.user_message import is_scaffolding, words

_T = TypeVar("_T")
_K = TypeVar("_K")


class HistoryError(Exception):
    """A call that does not fit the core's state (names the session and what was wrong)."""


# ---------------------------------------------------------------- fingerprints


_ASCII_SPACE = bytes(c for c in range(128) if chr(c).isspace())


def squeezed(text: str) -> bytes:
    """``text`` without its whitespace (as ``str.split`` sees it), UTF-8 encoded:
    what a fingerprint digests. Streamed parts may be squeezed one by one."""
    if text.isascii():  # the common case, ~5x faster than split/join
        return text.encode().translate(None, _ASCII_SPACE)
    # surrogatepass: a lone surrogate (legal escaped in JSON) must hash, not raise.
    return "".join(text.split()).encode("utf-8", "surrogatepass")


def _digest(text: str) -> bytes:
    # Whitespace is dropped: VS Code may join or trim our text parts when it
    # replays them; it does not change the words.
    return hashlib.blake2b(squeezed(text), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What identifies one assistant message the daemon emitted.

    ``call_ids``: the tool calls' callIds, in order; ``text``: a digest of the
    text parts with whitespace removed. Two fingerprints match on callIds when
    either has any (callIds are unique and ours; one side's may be a part of the
    other's, see ``matches``), otherwise on text.
    """

    text: bytes
    call_ids: tuple[str, ...] = ()
    # Digest of text *and* thinking in emission order: what VS Code replays when
    # the shim shows thinking as text (its `lmbridge.thinking: "text"` setting).
    shown: bytes | None = None
    # Of a response the user stopped: digests of its text at its last part boundaries before
    # the end (at most ``PREFIXES``). VS Code drops the parts still in flight when Stop is
    # pressed, so it may re-send a prefix of what the daemon sent (docs/sessions.md, "Stop").
    prefixes: tuple[bytes, ...] = ()

    def digests(self) -> tuple[bytes, ...]:
        own = (self.text,) if self.shown is None or self.shown == self.text else (self.text, self.shown)
        return own + self.prefixes

    @classmethod
    def of_text(cls, text: str, call_ids: Iterable[str] = ()) -> Fingerprint:
        return cls(_digest(text), tuple(call_ids))

    @classmethod
    def of_message(cls, message: Message) -> Fingerprint:
        return _memoized(_FINGERPRINTS, message, cls._of_message)  # every assistant message of every request

    @classmethod
    def _of_message(cls, message: Message) -> Fingerprint:
        text = "".join(p.value for p in message.content if isinstance(p, TextPart))
        calls = tuple(p.callId for p in message.content if isinstance(p, ToolCallPart))
        return cls.of_text(text, calls)

    @property
    def empty(self) -> bool:
        return not self.call_ids and self.text == _EMPTY

    def matches(self, other: Fingerprint) -> bool:
        if self.call_ids or other.call_ids:
            # callIds are unique and ours, so any one identifies the message. VS Code
            # replays only the tool calls that got a result (docs/vscode.md, "Kept rounds"): Stop at the
            # second of two confirmations replays the first alone. So one side's
            # callIds may be a part of the other's.
            mine, theirs = set(self.call_ids), set(other.call_ids)
            return bool(mine and theirs) and (mine <= theirs or theirs <= mine)
        return self.text == other.text or self.shown == other.text or other.shown == self.text or other.text in self.prefixes or self.text in other.prefixes


_EMPTY = _digest("")
#: Part boundaries of a stopped response kept in its fingerprint (``Fingerprint.prefixes``,
#: 16 bytes each): the parts a Stop catches in flight between the daemon and VS Code are a
#: few on an idle machine, 24 of 29 seen in the real Chat view at load 10 (docs/sessions.md).
PREFIXES = 64
#: Dormant sessions kept (each is a few hundred bytes a turn); the oldest go first.
MAX_DORMANT = 256
# id(message) → (a weak reference to it, what was computed of it); entries die with their message.
_FINGERPRINTS: dict[int, tuple[weakref.ref[Message], Fingerprint]] = {}
_USER_KEYS: dict[int, tuple[weakref.ref[Message], UserKey]] = {}
_MARKERS: dict[int, tuple[weakref.ref[Message], tuple[bytes, Marker | None]]] = {}


def marker_of(message: Message, key: bytes | None) -> Marker | None:
    """``marker.of_message``, computed once per message and key (the same objects come
    back with every request, as for fingerprints)."""
    if not key or message.role != "assistant":
        return None
    memo = _memoized(_MARKERS, message, lambda m: (key, markers.of_message(m, key)))
    if memo[0] != key:
        return markers.of_message(message, key)
    return memo[1]


def _memoized(table: dict[int, tuple[weakref.ref[Message], _T]], message: Message, compute: Callable[[Message], _T]) -> _T:
    """What ``compute`` gives for ``message`` (a frozen object), computed once: the server
    hands the same objects back for the messages VS Code replays, so each is digested once.
    ``table``'s entry dies with its message."""
    key = id(message)
    memo = table.get(key)
    if memo is not None and memo[0]() is message:
        return memo[1]
    value = compute(message)

    def forget(_: weakref.ref[Message], key: int = key) -> None:
        table.pop(key, None)

    table[key] = (weakref.ref(message, forget), value)
    return value


@dataclass(frozen=True, slots=True)
class UserKey:
    """What identifies one user message: the callIds of its tool results, in order, and
    a digest of the user's words (``user_message.words``, whitespace dropped)."""

    result_ids: tuple[str, ...]
    words: bytes

    @classmethod
    def of_message(cls, message: Message) -> UserKey:
        return _memoized(_USER_KEYS, message, cls._of_message)

    @classmethod
    def _of_message(cls, message: Message) -> UserKey:
        text = "\n".join(p.value for p in message.content if isinstance(p, TextPart))
        return cls(_result_ids(message), _digest(words(text)) if text else _EMPTY)


@dataclass(frozen=True, slots=True)
class Item:
    """One non-system VS Code message as the agent has seen it.

    ``role`` "assistant": ``fingerprint`` set, and ``marker`` the stateful marker that
    names it (``core/marker.py``: of the daemon's own answer, or the one it carried when
    it came in a request), None when it had none. ``role`` "user": ``result_ids``
    holds the callIds of the tool results in it (empty for plain user text) and
    ``words`` the digest of the user's words in it (``UserKey``); ``None`` (an
    entry of an older session index, which kept no words) matches nothing.
    """

    role: str
    fingerprint: Fingerprint | None = None
    result_ids: tuple[str, ...] = ()
    words: bytes | None = None
    marker: Marker | None = None

    def matches(self, message: Message, key: bytes | None = None) -> bool:
        """Whether ``message`` is this item. An assistant message and item that both have a
        marker (the message's valid under ``key``) are the same answer exactly when the
        markers are equal, whatever the text (VS Code may keep a part of a stopped answer);
        otherwise the fingerprints decide."""
        if message.role != self.role:
            return False
        if self.role == "assistant":
            if self.marker is not None:
                theirs = marker_of(message, key)
                if theirs is not None:
                    return theirs == self.marker
            return self.fingerprint is not None and self.fingerprint.matches(Fingerprint.of_message(message))
        user = UserKey.of_message(message)
        return user.result_ids == self.result_ids and user.words == self.words


def _result_ids(message: Message) -> tuple[str, ...]:
    return tuple(p.callId for p in message.content if isinstance(p, ToolResultPart))


def conversation(messages: Sequence[Message]) -> list[Message]:
    """The messages that take part in matching: system messages and empty
    assistant messages (nothing the daemon can fingerprint) left out."""
    out = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "assistant" and Fingerprint.of_message(m).empty:
            continue
        out.append(m)
    return out


def has_user_content(messages: Iterable[Message]) -> bool:
    """True when the messages hold something a user wrote: text or images in user
    messages. Tool results are not, nor are other data parts: Copilot adds
    ``cache_control`` and ``stateful_marker`` parts of its own (docs/vscode.md, "Copilot's data parts")."""
    return any(
        m.role == "user"
        and (
            bool(p.value.strip()) and not is_scaffolding(p.value)
            if isinstance(p, TextPart)
            else isinstance(p, DataPart) and p.mimeType.startswith("image/")
        )
        for m in messages
        for p in m.content
    )


# ---------------------------------------------------------------- classification


class Kind(enum.Enum):
    """How a request relates to the session it was matched to."""

    NEW_CHAT = "new_chat"  # the chat's only words are in the last message: a fresh agent session
    CONTINUATION = "continuation"  # last response acknowledged, new user content follows
    TOOL_RESULTS = "tool_results"  # results for every pending permission, nothing else new
    STOPPED = "stopped"  # the response that asked permission is absent: Stop was pressed
    SOFT_CANCEL = "soft_cancel"  # tool results *and* new user content: never approve
    LATE_ANSWERS = "late_answers"  # answers to cards whose agent session ended: wake it, tell the agent
    DIVERGENCE = "divergence"  # history does not extend what the agent saw: fresh session + context


class Last(enum.Enum):
    """How the session's last response ended."""

    DONE = "done"  # end_turn, max_tokens, refusal, ... (or nothing sent yet)
    PENDING = "pending"  # stopReason "tool_calls": permissions wait for VS Code's answer
    CANCELLED = "cancelled"  # $/cancelRequest stopped it mid-stream
    # It waited on permissions when its agent session ended (eviction, a crash, a daemon
    # restart): the cards can no longer be answered. Only a dormant session is INTERRUPTED.
    INTERRUPTED = "interrupted"


#: (last response acknowledged?, how it ended, new user content?) → Kind.
#: "Acknowledged": the request replays it. Absent rows apply only when the
#: history before it still aligns.
CLASSIFICATION: dict[tuple[bool, Last, bool], Kind] = {
    (True, Last.PENDING, False): Kind.TOOL_RESULTS,
    (True, Last.PENDING, True): Kind.SOFT_CANCEL,  # token + new content: never approve
    (True, Last.DONE, True): Kind.CONTINUATION,
    (True, Last.DONE, False): Kind.DIVERGENCE,  # nothing new to answer: re-run from the transcript
    (True, Last.CANCELLED, True): Kind.CONTINUATION,  # VS Code kept the partial answer
    (True, Last.CANCELLED, False): Kind.DIVERGENCE,
    (False, Last.PENDING, True): Kind.STOPPED,
    (False, Last.PENDING, False): Kind.DIVERGENCE,  # Stop, then retry: the agent saw a turn VS Code dropped
    (False, Last.CANCELLED, True): Kind.CONTINUATION,  # the stopped answer is gone, as the agent was told
    (False, Last.CANCELLED, False): Kind.DIVERGENCE,  # retry of a stopped turn
    (False, Last.DONE, True): Kind.DIVERGENCE,  # a finished answer VS Code dropped: edit/regenerate
    (False, Last.DONE, False): Kind.DIVERGENCE,
    # The session slept with cards shown: every card is answered CANCELLED (nothing waits
    # on it any more), the session is woken, and its agent is told what the user chose.
    (True, Last.INTERRUPTED, False): Kind.LATE_ANSWERS,  # a late Allow or Skip
    (True, Last.INTERRUPTED, True): Kind.CONTINUATION,  # a late answer and new words
    (False, Last.INTERRUPTED, True): Kind.CONTINUATION,  # Stop at the card, then new words
    (False, Last.INTERRUPTED, False): Kind.DIVERGENCE,  # a retry of the stopped turn
}


#: What the agent of a woken session is told when the cards of its interrupted turn were
#: answered late (``late_note``): their answers never reached it, so nothing ran.
LATE_NOTE = (
    "[Your previous turn ended before the user answered its {what} (the session was "
    "interrupted), so nothing waiting on {them} ran. The user has since {answered}. "
    "Carry on from there; ask again for anything still needed.]"
)


def late_note(pending: Sequence[PendingCall], results: dict[str, ToolResultPart]) -> Message | None:
    """What the agent of a woken session is told about the cards its interrupted turn left
    (``Last.INTERRUPTED``), from the results the request holds for them: None when it holds
    none. Information only: nothing is approved by it (the agent has to ask again, and a
    card shown again needs its own answer)."""
    approved = declined = other = 0
    for p in pending:
        result = results.get(p.call_id)
        if result is None:
            continue
        if result.text() == VSCODE_SKIP_TEXT:
            declined += 1
        elif not p.tool and permissions.answer(p.token, result) is Answer.ALLOW:
            approved += 1
        else:
            other += 1  # a VS Code tool's result, or an answer no longer checkable (a restored card)
    total = approved + declined + other
    if not total:
        return None
    said = [f"approved {approved}" if approved else "", f"declined {declined}" if declined else "", f"answered {other}" if other else ""]
    answered = " and ".join(x for x in said if x)
    if total == 1:
        answered = answered.rsplit(" ", 1)[0] + " it"
    else:
        answered += " of them"
    what = "permission request" if total == 1 else "permission requests"
    text = LATE_NOTE.format(what=what, them="it" if total == 1 else "them", answered=answered)
    return Message.model_validate({"role": "user", "content": [{"type": "text", "value": text}]})


def answer_for_tool(call_id: str, results: dict[str, ToolResultPart]) -> Answer:
    """The answer a VS Code tool call gets (docs/tools.md): its result, DECLINED when
    VS Code's Skip text is all it holds, CANCELLED when it is absent (Stop).

    New user content beside a result does not withhold it: the tool already ran."""
    result = results.get(call_id)
    if result is None:
        return Answer.CANCELLED
    if result.text() == VSCODE_SKIP_TEXT:
        return Answer.DECLINED
    return Answer.RESULT


# ---------------------------------------------------------------- sessions


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call surfaced as a tool call part, awaiting its answer: a permission
    (``symposium-agent-action``, with its approval ``token``) or, with ``tool``
    set, an agent's call of a VS Code tool (no token)."""

    call_id: str
    token: str
    tool: bool = False


@dataclass
class Session:
    """The core's record of one agent conversation (owned by ``HistoryCore``)."""

    id: str
    model_id: str
    items: list[Item] = field(default_factory=list)
    # How the last response ended; PENDING lists the permissions it waits on.
    last: Last = Last.DONE
    pending: tuple[PendingCall, ...] = ()
    # Whether items[-1] is a response VS Code has not replayed yet (it may drop it).
    unacked: bool = False
    busy: bool = False
    # The number of the request begun last (``Decision.number``): only its end is recorded. A
    # response whose request was overtaken by a later one (a new message VS Code sent
    # before the Stop of the answer in progress) ends superseded: never recorded.
    requests: int = 0
    last_active: float = 0.0
    # The agent's own session for this chat (its ACP sessionId), opaque here: set when it
    # can be taken up again (session/resume, session/load). ``dormant``: no agent session
    # runs for it now; the next turn takes ``resume`` up again.
    resume: str | None = None
    dormant: bool = False
    # The digest of the first words of the chat (its first user item with words): how a
    # request holding no answer of ours (every turn stopped) finds it.
    opening: bytes | None = None
    # The request messages items[:len(matched)] stand for (the same objects, which
    # the server hands back when VS Code replays them): aligning a replayed prefix
    # is then an identity check, so matching costs what is new, not the history.
    matched: list[Message] = field(default_factory=list, repr=False)
    # The session's token in its stateful markers (``core/marker.py``): unique across daemon
    # runs (a nonce of the run and a counter), kept in the session index.
    token: str = ""


@dataclass(frozen=True)
class Decision:
    """What the session actor must do for one request (the core's decision).

    ``session_id``: the session that runs it; ``fresh``: start a new agent
    session for it; ``resume``: take the agent's own session up again (a
    dormant session woke up; ``context`` and ``prompt`` are what it has not seen). ``cancel_first``: send ``session/cancel`` (then answer
    the pending permissions) before anything else. ``answers``: callId →
    Answer for every permission the previous response left pending.
    ``results``: the VS Code tool results for the calls answered RESULT.
    ``context``: messages the agent has not seen that come before the prompt
    (the whole earlier conversation for a fresh session). ``prompt``: the
    trailing user messages to send as ``session/prompt``; empty for
    TOOL_RESULTS, where the agent continues its open turn. ``number``: the
    session's request number, handed back to ``HistoryCore.end``.
    """

    kind: Kind
    session_id: str
    fresh: bool = False
    resume: str | None = None
    cancel_first: bool = False
    answers: dict[str, Answer] = field(default_factory=dict)
    results: dict[str, ToolResultPart] = field(default_factory=dict)
    context: tuple[Message, ...] = ()
    prompt: tuple[Message, ...] = ()
    number: int = 0  # the session's request number (``end`` records only the latest request's)


@dataclass(frozen=True)
class Plan:
    """Where a request goes (``HistoryCore.plan``; nothing changed yet): ``session_id``
    the session it continues, as ``kind``, from ``start`` (the index in ``conv`` of the
    first message that session has not seen); ``session_id`` None: a fresh session."""

    conv: Sequence[Message]
    session_id: str | None
    kind: Kind
    start: int = 0
    # How the candidates were found (for the log): "marker" (the last answer's stateful marker),
    # "text" (its callIds or text), "words" (no answer: the first words), "" (a new chat).
    by: str = ""
    # conv[start] is the session's stopped turn as VS Code kept it (``HistoryCore._kept_stop``):
    # recorded as seen, never told to the agent (it streamed that turn itself).
    kept: bool = False


def _without_results(messages: Sequence[Message], call_ids: set[str]) -> list[Message]:
    out = []
    for m in messages:
        content = [p for p in m.content if not (isinstance(p, ToolResultPart) and p.callId in call_ids)]
        if content:
            out.append(m if len(content) == len(m.content) else m.model_copy(update={"content": content}))
    return out


def split_prompt(messages: Sequence[Message]) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """(context, prompt): the prompt is the last user message, from the last user
    message with user content on (tool results after it stay with it). Earlier
    user messages with no answer after them were stopped by the user: they are
    context (``transcript`` marks them so), never the request: after a Stop, a fresh session must not get the stopped request as the new one.
    A tail of tool results alone is the prompt as it is."""
    cut = len(messages)
    while cut > 0 and messages[cut - 1].role == "user":
        cut -= 1
    tail = messages[cut:]
    last = next((i for i in range(len(tail) - 1, -1, -1) if has_user_content(tail[i : i + 1])), 0)
    return tuple(messages[: cut + last]), tuple(tail[last:])


class HistoryCore:
    """All sessions of the daemon, and the request → session → ``Decision``s.

    Use: ``begin(model_id, messages, now)`` → ``Decision``; when its response ends,
    ``end(session_id, fingerprint, last, pending, now)``; ``forget(session_id)``
    when the agent died or the session is evicted; ``idle(now, max_idle)``
    lists sessions to evict. ``now`` is in seconds (any monotonic origin).
    """

    def __init__(self, key: bytes | None = None, nonce: str = "") -> None:
        """``key``: the secret of the stateful markers (``core/marker.py``); None: the answers
        carry none and markers in requests are ignored. ``nonce``: ``[0-9a-z]`` characters
        unique to this daemon run (the actor draws them), the start of every session's token."""
        self.key = key
        self.nonce = nonce
        self.sessions: dict[str, Session] = {}
        # Indexes of what the daemon emitted: callId → session id, text digest → {session id: count}.
        self._by_call: dict[str, str] = {}
        self._by_text: dict[bytes, dict[str, int]] = {}
        # Stateful marker → {session id: count}: the sessions that have seen that answer.
        self._by_marker: dict[Marker, dict[str, int]] = {}
        # The digest of each session's first words → session ids (chats with no answer of ours).
        self._by_opening: dict[bytes, set[str]] = {}
        self._counter = 0

    # -- matching ---------------------------------------------------------

    def _candidates(self, model_id: str, conv: Sequence[Message]) -> tuple[int, list[Session], str]:
        """(named, sessions, by): the sessions that have seen the last assistant message of
        ``conv`` the daemon knows, at index ``named``; with no assistant message at all,
        the sessions whose first words are the request's (``named`` -1).

        An assistant message is known by its stateful marker first: a valid marker names
        the sessions that have seen that very answer, and only them (none: a session
        forgotten since, or a marker of one chat in another's history; the request then
        goes to a fresh session). A message without a valid marker (an answer from before
        markers, a summarised conversation, a marker not ours) is known as before: by its
        callIds, else by its text."""
        any_assistant = False
        for i in range(len(conv) - 1, -1, -1):
            m = conv[i]
            if m.role != "assistant":
                continue
            any_assistant = True
            mk = marker_of(m, self.key)
            fp = Fingerprint.of_message(m)
            if mk is not None:
                ids: set[str] = set(self._by_marker.get(mk, ()))
                found = [self.sessions[x] for x in sorted(ids) if self.sessions[x].model_id == model_id]
                return i, found, "marker"
            ids = {self._by_call[c] for c in fp.call_ids if c in self._by_call} or {
                sid for d in fp.digests() for sid in self._by_text.get(d, ())
            }
            found = [self.sessions[x] for x in sorted(ids) if self.sessions[x].model_id == model_id]
            if found:
                return i, found, "text"
        if any_assistant:
            return -1, [], "text"
        # Every earlier turn was stopped: nothing of ours to match on, only the words.
        opening = next((k.words for k in map(UserKey.of_message, conv) if k.words != _EMPTY), None)
        ids = self._by_opening.get(opening, set()) if opening is not None else set()
        return -1, [self.sessions[x] for x in sorted(ids) if self.sessions[x].model_id == model_id], "words"

    def _aligned(self, s: Session, conv: Sequence[Message], upto: int) -> bool:
        if upto > len(conv):
            return False
        known, same = s.matched, 0
        limit = min(upto, len(known))
        while same < limit and conv[same] is known[same]:
            same += 1
        return all(item.matches(msg, self.key) for item, msg in zip(s.items[same:upto], conv[same:upto]))

    def classify(self, s: Session, conv: Sequence[Message]) -> tuple[Kind, int, bool]:
        """The Kind of ``conv`` against session ``s``, the index in ``conv`` of the first
        message the agent has not seen, and whether that message is the session's stopped
        turn as VS Code kept it (``_kept_stop``: recorded, never told). Pure: changes nothing."""
        n = len(s.items)
        if self._aligned(s, conv, n):
            return CLASSIFICATION[(True, s.last, has_user_content(conv[n:]))], n, False
        if s.unacked and self._aligned(s, conv, n - 1):
            tail = conv[n - 1 :]
            if not tail or tail[0].role == "user":
                return CLASSIFICATION[(False, s.last, has_user_content(tail))], n - 1, False
        if s.last in (Last.CANCELLED, Last.PENDING, Last.INTERRUPTED):
            # A turn the user stopped, every round of it absent: VS Code may drop a stopped
            # turn whole, the rounds before the one stopped (a card answered, a command run)
            # with it. Those rounds are all the daemon's own (answers, and tool results
            # only); the request must align up to the user's words that began the turn,
            # and bring new words. As the row of a last response absent.
            k = HistoryCore._turn_start(s)
            if k < n - 1 and self._aligned(s, conv, k):
                tail = conv[k:]
                if tail and tail[0].role == "user" and has_user_content(tail):
                    return CLASSIFICATION[(False, s.last, True)], k, False
        if self._kept_stop(s, conv):
            return CLASSIFICATION[(True, s.last, True)], HistoryCore._turn_start(s), True
        return Kind.DIVERGENCE, 0, False

    def _kept_stop(self, s: Session, conv: Sequence[Message]) -> bool:
        """Whether ``conv`` holds the session's stopped turn as VS Code keeps a turn it
        re-renders from the chat view (docs/vscode.md, "A stopped turn kept as one message"):
        the rounds' markers, tool calls and results gone, their text joined into ONE
        assistant message, file names linkified. The request must align with the session up
        to the user's words that began the stopped turn (everything before it, those words
        included, as the agent saw it), the kept message must carry no tool call and no
        stateful marker at all (not ours, whose valid marker would name its answer, nor
        another provider's), and new user words must follow. Its text is not compared:
        VS Code rewrites it (a link ``[`X`](X )`` for the daemon's ``X``) and joins rounds
        the daemon digested apart."""
        if s.last is not Last.CANCELLED:
            return False
        k = HistoryCore._turn_start(s)
        if not 0 < k < len(s.items) or len(conv) < k + 2 or not self._aligned(s, conv, k):
            return False
        kept, rest = conv[k], conv[k + 1 :]
        if kept.role != "assistant" or rest[0].role != "user" or not has_user_content(rest):
            return False
        return not any(isinstance(p, ToolCallPart) or (isinstance(p, DataPart) and p.mimeType == markers.MIME) for p in kept.content)

    @staticmethod
    def _turn_start(s: Session) -> int:
        """The index of the first item of the last turn's response: after the last user item
        with words (the items after it are answers and tool results)."""
        k = len(s.items)
        while k > 0:
            item = s.items[k - 1]
            if item.role == "user" and (not item.result_ids or item.words != _EMPTY):
                break
            k -= 1
        return k

    def plan(self, model_id: str, messages: Sequence[Message]) -> Plan:
        """Where a chat request goes, deciding nothing else and changing nothing.

        A session is continued when it aligns with the request (``classify``), has seen
        the message that named it (``_candidates``), and accounts for more of the request
        than every other candidate. Two that account for the same are two chats nothing
        byte-stable tells apart: the request goes to a fresh session (DIVERGENCE), never
        to either. Raises ``HistoryError`` when the conversation does not end with a user
        message (there is nothing to answer).
        """
        conv = conversation(messages)
        if not conv or conv[-1].role != "user":
            raise HistoryError("the request's messages must end with a user message")
        if all(m.role == "user" for m in conv) and not has_user_content(conv[:-1]):
            # The last message holds the chat's only words (Copilot's global context may come
            # before it as a user message of its own): no session can go on with it.
            return Plan(conv, None, Kind.NEW_CHAT)
        named, candidates, by = self._candidates(model_id, conv)
        best: Plan | None = None
        tied = False
        for s in candidates:
            kind, start, kept = self.classify(s, conv)
            if kind is Kind.DIVERGENCE or start <= named:
                continue
            if best is None or start > best.start:
                best, tied = Plan(conv, s.id, kind, start, by, kept), False
            elif start == best.start:
                tied = True
        if best is None or tied:
            return Plan(conv, None, Kind.DIVERGENCE, by=by)
        return best

    # -- transitions ------------------------------------------------------

    def begin(self, model_id: str, messages: Sequence[Message], now: float, plan: Plan | None = None) -> Decision:
        """Match a chat request to a session and decide what to do with it: carries out ``plan``
        (``plan(model_id, messages)`` when not given).

        Records the request's new messages as seen and marks the session busy
        until ``end``. Raises ``HistoryError`` when the conversation does not
        end with a user message (there is nothing to answer).
        """
        p = plan if plan is not None else self.plan(model_id, messages)
        s = self.sessions.get(p.session_id) if p.session_id is not None else None
        if s is not None:
            return self._continue(s, p.kind, p.conv, p.start, now, p.kept)
        conv = p.conv
        self._counter += 1
        s = Session(id=f"s{self._counter}", model_id=model_id, busy=True, requests=1, last_active=now, token=f"{self.nonce}{self._counter}")
        self.sessions[s.id] = s
        self._see(s, conv)
        s.matched = list(conv)
        context, prompt = split_prompt(conv)
        kind = Kind.NEW_CHAT if p.kind is Kind.NEW_CHAT else Kind.DIVERGENCE
        return Decision(kind=kind, session_id=s.id, fresh=True, context=context, prompt=prompt, number=s.requests)

    def _continue(self, s: Session, kind: Kind, conv: Sequence[Message], start: int, now: float, kept: bool = False) -> Decision:
        tail = conv[start:]
        results = {p.callId: p for m in tail for p in m.content if isinstance(p, ToolResultPart)}
        note = None
        if s.last is Last.INTERRUPTED:
            # Nothing waits on these cards any more (their agent session ended): each is
            # CANCELLED, and the woken agent is told what the user answered.
            answers = {p.call_id: Answer.CANCELLED for p in s.pending}
            note = late_note(s.pending, results)
        else:
            answers = {
                p.call_id: (
                    Answer.CANCELLED
                    if kind is Kind.STOPPED
                    else answer_for_tool(p.call_id, results)
                    if p.tool
                    else permissions.answer(p.token, results.get(p.call_id), kind is not Kind.TOOL_RESULTS)
                )
                for p in s.pending
            }
        context: tuple[Message, ...] = ()
        prompt: tuple[Message, ...] = ()
        if kind is not Kind.TOOL_RESULTS:
            # Results of the calls just answered reach the agent through their
            # answers; as prompt text they would mean nothing (or leak a token).
            context, prompt = split_prompt(_without_results(tail[1:] if kept else tail, set(answers)))
            if note is not None:
                prompt = (note, *prompt)
        if start < len(s.items):  # VS Code dropped the last response
            self._unindex(s, s.items[start:])
            del s.items[start:]
        self._see(s, tail)
        s.matched = list(conv)  # items and conv now correspond one to one
        s.last, s.pending, s.unacked = Last.DONE, (), False
        s.busy, s.last_active = True, now
        s.requests += 1
        resume = s.resume if s.dormant else None
        s.dormant = False
        return Decision(
            kind=kind,
            session_id=s.id,
            resume=resume,
            cancel_first=kind in (Kind.STOPPED, Kind.SOFT_CANCEL),
            answers=answers,
            results={c: results[c] for c, a in answers.items() if a is Answer.RESULT},
            context=context,
            prompt=prompt,
            number=s.requests,
        )

    def _see(self, s: Session, messages: Sequence[Message]) -> None:
        for m in messages:
            if m.role == "assistant":
                item = Item("assistant", fingerprint=Fingerprint.of_message(m), marker=marker_of(m, self.key))
                s.items.append(item)
                self._index(s, item)
            else:
                key = UserKey.of_message(m)
                s.items.append(Item("user", result_ids=key.result_ids, words=key.words))
                self._open(s, key.words)

    def _open(self, s: Session, words: bytes | None) -> None:
        """Index the session by its first words (``_candidates``' last resort)."""
        if s.opening is None and words is not None and words != _EMPTY:
            s.opening = words
            self._by_opening.setdefault(words, set()).add(s.id)

    def end(self, session_id: str, fingerprint: Fingerprint, last: Last, pending: Sequence[PendingCall], now: float, request: int | None = None) -> bool:
        """Record the response the daemon streamed for the session's request number ``request``
        (``Decision.number``; None: the request begun last). Returns whether it was recorded.

        ``fingerprint``: of the text and tool calls it emitted; ``last``: how it
        ended; ``pending``: the permissions it waits on (``last`` PENDING).
        An empty response is not recorded: VS Code keeps nothing to match.

        Only the end of the request begun last counts, and only once. A response whose
        request a later one has overtaken (a new message VS Code sent before the
        Stop of the answer in progress, or while it streamed) is **superseded**: that
        request was matched without it, so VS Code will not replay it in its place;
        recording it after the later request's messages would misplace it, and would
        mark the session idle while the later request streams. Its end is dropped, and
        so is a second end of the same request (a Stop reported by the server, then by
        the session actor). Raises ``HistoryError`` for an unknown session.
        """
        s = self._get(session_id)
        if (request is not None and request != s.requests) or not s.busy:
            return False
        s.busy, s.last_active = False, now
        s.last, s.pending = last, tuple(pending)
        s.unacked = not fingerprint.empty
        if s.unacked:
            item = Item("assistant", fingerprint=fingerprint, marker=self.marker(session_id, s.requests))
            s.items.append(item)
            self._index(s, item)
        return True

    def marker(self, session_id: str, number: int) -> Marker | None:
        """The stateful marker of the session's answer to its request ``number``
        (``Decision.number``), which that answer carries (``marker.part``); None when
        markers are off (no key). Raises ``HistoryError`` for an unknown session."""
        s = self._get(session_id)
        return Marker(s.token, number) if self.key and s.token else None

    def forget(self, session_id: str) -> Session | None:
        """Drop a session (agent died, evicted). Returns it, so the caller can
        answer its pending permissions ``cancelled``."""
        s = self.sessions.pop(session_id, None)
        if s is not None:
            self._unindex(s, s.items)
            same = self._by_opening.get(s.opening, set()) if s.opening is not None else set()
            same.discard(s.id)
            if not same and s.opening is not None:
                self._by_opening.pop(s.opening, None)
        return s

    def idle(self, now: float, max_idle: float) -> list[str]:
        """Ids of live sessions not busy and inactive for more than ``max_idle`` seconds."""
        return [s.id for s in self.sessions.values() if not s.busy and not s.dormant and now - s.last_active > max_idle]

    def sleep(self, session_id: str) -> bool:
        """The session's agent session ended (evicted, agent gone): keep the session
        dormant when its agent session can be taken up again (``resume`` set), else
        forget it. Returns True when it sleeps.

        A turn still waiting on permissions ended with the agent session: it is
        ``INTERRUPTED`` now (its permissions can no longer be answered; a late answer
        wakes the session and is told to the agent, ``late_note``; their tool results
        stay out of the next prompt). At most ``MAX_DORMANT`` sessions
        sleep; the least recently active beyond that are forgotten."""
        s = self.sessions.get(session_id)
        if s is None:
            return False
        if s.resume is None:
            self.forget(session_id)
            return False
        s.dormant, s.busy = True, False
        if s.last is Last.PENDING:
            s.last = Last.INTERRUPTED
        dormant = sorted((d for d in self.sessions.values() if d.dormant), key=lambda d: d.last_active)
        for old in dormant[: max(0, len(dormant) - MAX_DORMANT)]:
            self.forget(old.id)
        return session_id in self.sessions

    def export(self, session_id: str) -> dict[str, object] | None:
        """What a later daemon needs to wake the session (``restore``), as JSON data:
        digests (of answers and of the user's words) and callIds only: no text, no
        approval tokens. None when the session cannot be taken up again."""
        s = self.sessions.get(session_id)
        if s is None or s.resume is None:
            return None
        items: list[list[object]] = []
        for item in s.items:
            fp = item.fingerprint
            if fp is not None:
                items.append(["a", fp.text.hex(), fp.shown.hex() if fp.shown else "", list(fp.call_ids), *([item.marker.key()] if item.marker else [])])
            else:
                items.append(["u", list(item.result_ids), *([item.words.hex()] if item.words is not None else [])])
        last = Last.INTERRUPTED if s.last is Last.PENDING else s.last
        return {"model": s.model_id, "resume": s.resume, "items": items, "last": last.value,
                "pending": [[p.call_id, p.tool] for p in s.pending], "unacked": s.unacked,
                "marker_session": s.token, "requests": s.requests}  # fmt: skip

    def restore(self, data: dict[str, object], now: float) -> str:
        """A dormant session from ``export``'s data (a previous daemon's). Returns its id.
        Raises ``HistoryError`` (``ValueError``s inside) when the data is not ``export``'s."""
        try:
            model, resume = data["model"], data["resume"]
            if not isinstance(model, str) or not isinstance(resume, str):
                raise ValueError("model and resume must be strings")
            items: list[Item] = []
            for raw in data["items"]:  # type: ignore[attr-defined]
                if raw[0] == "a":
                    fp = Fingerprint(bytes.fromhex(raw[1]), tuple(str(c) for c in raw[3]), bytes.fromhex(raw[2]) if raw[2] else None)
                    # No marker: an answer from before markers (or an older index).
                    items.append(Item("assistant", fingerprint=fp, marker=Marker.of_key(raw[4]) if len(raw) > 4 else None))
                elif raw[0] == "u":
                    # No words (an index written before they were kept): matches nothing.
                    user_words = bytes.fromhex(raw[2]) if len(raw) > 2 else None
                    items.append(Item("user", result_ids=tuple(str(c) for c in raw[1]), words=user_words))
                else:
                    raise ValueError(f"unknown item {raw[0]!r}")
            pending = tuple(PendingCall(str(c), "", bool(tool)) for c, tool in data.get("pending") or [])  # type: ignore[attr-defined]
            last = Last(data.get("last", "done"))
            token, requests = data.get("marker_session", ""), data.get("requests", 0)
            if not isinstance(token, str) or not isinstance(requests, int):
                raise ValueError("marker_session must be a string and requests a number")
            if last is Last.CANCELLED and pending:
                last = Last.INTERRUPTED  # how an older index wrote a response that waited on cards
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise HistoryError(f"not a session index entry: {exc}") from None
        self._counter += 1
        s = Session(id=f"s{self._counter}", model_id=model, items=items, last=last, pending=pending,
                    unacked=bool(data.get("unacked")), last_active=now, resume=resume, dormant=True,
                    token=token or f"{self.nonce}{self._counter}", requests=requests)  # fmt: skip
        self.sessions[s.id] = s
        for item in items:
            if item.fingerprint is not None:
                self._index(s, item)
            else:
                self._open(s, item.words)
        return s.id

    def _get(self, session_id: str) -> Session:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise HistoryError(f"no session {session_id!r}") from None

    def _index(self, s: Session, item: Item) -> None:
        if item.marker is not None:
            counts = self._by_marker.setdefault(item.marker, {})
            counts[s.id] = counts.get(s.id, 0) + 1
        fp = item.fingerprint
        if fp is None:
            return
        for c in fp.call_ids:
            self._by_call[c] = s.id
        if not fp.call_ids:
            for digest in fp.digests():
                counts = self._by_text.setdefault(digest, {})
                counts[s.id] = counts.get(s.id, 0) + 1

    def _unindex(self, s: Session, items: Iterable[Item]) -> None:
        for item in items:
            if item.marker is not None:
                _uncount(self._by_marker, item.marker, s.id)
            fp = item.fingerprint
            if fp is None:
                continue
            for c in fp.call_ids:
                if self._by_call.get(c) == s.id:
                    del self._by_call[c]
            if fp.call_ids:
                continue
            for digest in fp.digests():
                counts = self._by_text.get(digest)
                if counts and s.id in counts:
                    counts[s.id] -= 1
                    if counts[s.id] <= 0:
                        del counts[s.id]
                    if not counts:
                        del self._by_text[digest]


def _uncount(index: dict[_K, dict[str, int]], key: _K, session_id: str) -> None:
    counts = index.get(key)
    if counts and session_id in counts:
        counts[session_id] -= 1
        if counts[session_id] <= 0:
            del counts[session_id]
        if not counts:
            del index[key]
