"""The permission rule: what an agent's ``session/request_permission`` becomes, and what it is answered.

Rules of this file (after h11's ``_state.py``):

* Everything that decides whether an agent gets ``allow`` lives here: how a request is
  read, which VS Code tool asks the user, what the card shows, which requests are granted
  without a card, declined without a card or refused as malformed, and which option an
  answer selects. The history core and the turn machine call it; nothing else decides.
* No I/O, no clock, no randomness: the call id and the approval token are drawn by the
  caller and passed in. Nothing here trusts the agent: every field may be missing, of the
  wrong type, huge, or written by the model to look like something else.
* When in doubt it denies: a request it cannot read is refused, an answer it cannot
  read is ``cancelled``, and only the exact token of that call is ever approval.

Theory of operation
-------------------
An ACP agent asks before it acts with ``session/request_permission`` (``toolCall``: a
``ToolCallUpdate``; ``options``: ``PermissionOption``s). lmbridge shows the request to the
user as a VS Code tool call (docs/protocol.md, "Permission bridging"): VS Code puts a
confirmation card in the chat, and the next chat request carries the tool's result. The
tool's result is the call's approval token only when the user pressed Allow (the shim's
tool returns it; Skip returns VS Code's skip text, Stop drops the call), so ``answer``
approves on that exact token and nothing else.

VS Code's card offers **Allow in this Session** as its default button, and that approves
*the tool* (by its id) for the rest of the chat. So a harmless request must never go out
on the tool that carries a dangerous one: there is one tool per risk class
(``TOOL_BY_KIND``), and a request that carries a command goes out on the command tool
(``ACTION_TOOL``) whatever its ``kind`` says, because the kind is the agent's word and the
command is what runs.

The card shows what will run in full: a command is never cut. A request whose command (or
whole card) is too large for a card is declined without one, with a line in the answer
saying why.

A request about one of VS Code's own tools that lmbridge offers the agent through its MCP
server (docs/tools.md) is granted without a card: VS Code confirms its own tools when the
agent calls them. The tool is recognised only from a structured name the agent's ACP
adapter writes (its ``acp.profiles.AgentProfile``), never from a title (the model writes titles: a shell
command can be named like a VS Code tool), and never for a request that could act by
itself (a command, or the execute, edit, delete or move kinds).

The agent's client actions
--------------------------
An agent offered the client's terminals and files may act *through lmbridge*:
``terminal/create`` runs a command, ``fs/write_text_file`` writes a file. Nothing stops an
agent (or a model steering it) from sending those without asking first, so lmbridge serves
them only as the user's answered cards allow (docs/agents.md, "What protects what"). The
``Grants`` of a session are what its approved cards allow in the prompt turn at hand: an
approved card that showed a command allows **one** ``terminal/create`` of that command (how
the command is matched: ``runs``), an approved edit, delete or move allows **one** write of
each file it named. Only a card the user approved grants anything (never a bridged tool's
grant, a decline, a Skip or a Stop), and the grants die with the prompt turn: a new prompt
or a Stop starts from none. ``permit`` decides each action: ``Permit`` (the grant is used
up) or ``Deny`` with the reason the agent is answered.
"""

from __future__ import annotations

import difflib
import enum
import fnmatch
import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lmbridge.core import paths
from lmbridge.core.json_values import json_object

if TYPE_CHECKING:
    from lmbridge.core.messages import ToolInfo
from lmbridge.core.errors import INVALID_PARAMS, INVALID_REQUEST, REFUSED
from lmbridge.core.messages import ToolResultPart
from lmbridge.core.profiles import OTHER, AgentProfile, ToolNaming
from lmbridge.core.text import code_block as text_code_block
from lmbridge.core.text import inline_code

# ---------------------------------------------------------------- the tools


#: The VS Code tools that carry an agent's permission request, one per risk class:
#: "Allow in this Session" on one never covers another (docs/vscode-shim.md).
ACTION_TOOL = "symposium-agent-action"  # execute, other, missing or unknown kind; any command
READ_TOOL = "symposium-agent-action-read"  # read, search, think
EDIT_TOOL = "symposium-agent-action-edit"  # edit, delete, move
FETCH_TOOL = "symposium-agent-action-fetch"  # fetch
MODE_TOOL = "symposium-agent-action-mode"  # switch_mode
#: An edit, delete or move of a protected file (``paths.protected``), or of files it does not
#: name: never covered by a session approval of ``EDIT_TOOL`` (docs/vscode-shim.md).
PROTECTED_TOOL = "symposium-agent-action-protected"
ACTION_TOOLS = frozenset({ACTION_TOOL, READ_TOOL, EDIT_TOOL, FETCH_TOOL, MODE_TOOL, PROTECTED_TOOL})


def select_tools(tools: Sequence[ToolInfo], allow: Sequence[str] = (), deny: Sequence[str] = ()) -> list[ToolInfo]:
    """The tools offered to an agent (docs/tools.md): ``options.tools`` minus lmbridge's own
    (``ACTION_TOOLS``), kept when they match an ``allow`` glob (all when empty) and no ``deny``
    glob. Here, not beside the MCP endpoint, so that a chat offering none of its own (only
    lmbridge's) does not load the MCP SDK to learn it."""
    out = []
    for tool in tools:
        if tool.name in ACTION_TOOLS:
            continue
        if allow and not any(fnmatch.fnmatchcase(tool.name, p) for p in allow):
            continue
        if any(fnmatch.fnmatchcase(tool.name, p) for p in deny):
            continue
        out.append(tool)
    return out

#: ACP ``ToolKind`` → the tool its request goes out on. Any other kind (execute, other,
#: missing, unknown) goes out on ``ACTION_TOOL``.
TOOL_BY_KIND: Mapping[str, str] = {
    "read": READ_TOOL,
    "search": READ_TOOL,
    "think": READ_TOOL,
    "edit": EDIT_TOOL,
    "delete": EDIT_TOOL,
    "move": EDIT_TOOL,
    "fetch": FETCH_TOOL,
    "switch_mode": MODE_TOOL,
}

#: What "Allow in this Session" on each tool's card goes on to approve in that chat.
SESSION_SCOPE: Mapping[str, str] = {
    ACTION_TOOL: "commands and other actions",
    READ_TOOL: "reads and searches",
    EDIT_TOOL: "edits, deletions and moves of files",
    FETCH_TOOL: "fetches from the network",
    MODE_TOOL: "mode switches",
    PROTECTED_TOOL: "changes to protected files (each of which can run code)",
}

#: Kinds a bridged VS Code tool is never granted for without a card: they act by themselves.
ACTING_KINDS = frozenset({"execute", "edit", "delete", "move"})

_KIND_LABELS: Mapping[str, str] = {
    "read": "read files",
    "edit": "edit files",
    "delete": "delete files",
    "move": "move files",
    "search": "search",
    "execute": "run a command",
    "think": "think",
    "fetch": "fetch from the network",
    "switch_mode": "switch mode",
    "other": "act",
}

#: Characters of a command shown on a card; a longer one is declined, never cut.
COMMAND_LIMIT = 10_000
#: Characters of a card's whole message; a larger request is declined, never cut.
CARD_LIMIT = 100_000
#: Characters of a card's heading; a longer title is shown whole in the message.
HEADING_LIMIT = 120
#: Lines (old + new) a diff is computed for (difflib is quadratic at worst).
DIFF_LINES = 4000
#: Files listed on a card (they name what the diffs and the details show in full).
MAX_LOCATIONS = 50

#: Characters a card cannot show as what they are: C0 controls but tab and newline (a bare CR
#: renders as a line break on the card and is an ordinary character to ``sh``; ESC, NUL), DEL
#: and C1 (U+0085 among them), bidi controls, zero-width and other invisible format characters,
#: U+2028/2029, tag characters. On a card each is shown as ``⟨U+XXXX⟩`` (and ``⟨`` itself so, so
#: what a card shows stands for one text only: ``visible``); a command holding one is declined.
UNSHOWABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2028\u2029"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)
_SHOWN_ESCAPED = re.compile(UNSHOWABLE.pattern[:-1] + "\u27e8]")


def visible(text: str) -> str:
    """``text`` with each ``UNSHOWABLE`` character (and ``⟨``) written ``⟨U+XXXX⟩``: what a card
    shows of the agent's text, one text for one rendering."""
    return _SHOWN_ESCAPED.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", text)


def unshowable(text: str) -> list[str]:
    """The ``UNSHOWABLE`` characters in ``text``, each once, as ``U+XXXX``."""
    return sorted({f"U+{ord(c):04X}" for c in UNSHOWABLE.findall(text)})




# ---------------------------------------------------------------- answers


class Answer(enum.Enum):
    """What a pending call is answered with: a ``session/request_permission``
    (ALLOW, REJECT, CANCELLED) or an MCP ``tools/call`` for a VS Code tool
    (RESULT, DECLINED, CANCELLED)."""

    ALLOW = "allow"  # the option of kind allow_once
    REJECT = "reject"  # the option of kind reject_once (several: the profile's skip_option; none: cancelled)
    CANCELLED = "cancelled"  # {"outcome": "cancelled"}; for a tool: an error result, the chat was stopped
    RESULT = "result"  # a VS Code tool's result, passed to the agent as the MCP result
    DECLINED = "declined"  # a VS Code tool the user skipped: an error result saying so


CANCELLED: Mapping[str, Any] = {"outcome": "cancelled"}


def answer(token: str, result: ToolResultPart | None, new_content: bool = False) -> Answer:
    """The answer a permission shown with approval ``token`` gets from the next request.

    ``result``: the tool result VS Code sent for the card's callId (None: absent, the user
    pressed Stop or edited the chat); ``new_content``: the request also brings new user
    content (the user typed instead of answering). Exact token, no new content → ALLOW;
    a result with anything else (Skip's text, an error, another call's token) → REJECT;
    no result, or new content beside it → CANCELLED.
    """
    if result is None or new_content:
        return Answer.CANCELLED
    if token and result.text() == token:
        return Answer.ALLOW
    return Answer.REJECT


def outcome(options: Sequence[Option], chosen: Answer, profile: AgentProfile = OTHER) -> Mapping[str, Any]:
    """The ``RequestPermissionOutcome`` for ``chosen`` (ACP ``session/request_permission``;
    docs/protocol.md, "Which option an answer selects").

    Options are chosen by ``kind`` (ids differ per agent): ALLOW → the one ``allow_once``
    option; REJECT (a Skip, or a decline without a card) → the one ``reject_once`` option or,
    when the agent offers several, the one its ``profile`` names (``AgentProfile.skip_option``:
    codex-acp's ``decline``, with which its turn goes on). CANCELLED (a Stop) → ``cancelled``:
    ACP's answer after ``session/cancel``. Anything doubtful answers ``cancelled``, the most
    restrictive answer (ACP's: the agent ends its turn, nothing runs): no option of that kind,
    several and none the profile names, or an id shared with another option (the agent could
    read it either way). Never an allow option but for ALLOW.
    """
    wanted = {Answer.ALLOW: "allow_once", Answer.REJECT: "reject_once"}.get(chosen)
    if wanted is None:
        return CANCELLED
    ids = [o.option_id for o in options]
    matching = [o for o in options if o.kind == wanted]
    if any(ids.count(o.option_id) > 1 for o in matching):
        return CANCELLED
    if len(matching) > 1 and chosen is Answer.REJECT:
        matching = [o for o in matching if o.option_id == profile.skip_option]
    if len(matching) == 1:
        return {"outcome": "selected", "optionId": matching[0].option_id}
    return CANCELLED


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a permission shown on a card is answered (``decide``): ``outcome``, the ACP
    ``RequestPermissionOutcome``; ``approved``, the request when the user approved it and an
    allow option went out: what it lets the agent's client actions do (``grant``); None for
    any other answer."""

    outcome: Mapping[str, Any]
    approved: Permission | None = None


def decide(permission: Permission, chosen: Answer) -> Verdict:
    """The one step from an answer to what the agent is told and allowed: what a permission
    shown on a card gets once the next request brought ``chosen`` (``answer``: the history
    core reads it from that request). The turn machine answers every card through it; the
    tests walk ``decide(p, answer(p.token, result, new_content))``, the path a card's answer
    takes in production.

    ``outcome(permission.options, chosen, permission.profile)``; ``approved`` only for ALLOW
    whose outcome selects the allow option (never for a ``cancelled`` doubt)."""
    out = outcome(permission.options, chosen, permission.profile)
    return Verdict(out, permission if chosen is Answer.ALLOW and out != CANCELLED else None)


# ---------------------------------------------------------------- the request


@dataclass(frozen=True, slots=True)
class Option:
    """A ``PermissionOption``: ``optionId``, ``name``, ``kind`` (allow_once, allow_always,
    reject_once, reject_always, or a kind this version does not know)."""

    option_id: str
    name: str
    kind: str


@dataclass(frozen=True, slots=True)
class Command:
    """The command a request would run: its text as the user reads it (an argv joined
    with shell quoting; ``sh -c SCRIPT`` shown as the script; a ``command`` string with an
    ``args`` list as that argv), ``cwd``, the variables it adds to the environment
    (``env``: name, value pairs, sorted) and the agent's ``description`` where it gave them."""

    text: str
    cwd: str | None = None
    description: str | None = None
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Diff:
    path: str
    old: str | None  # None: a new file
    new: str
    whole: bool = True  # the file's whole text (ACP's diff), not a fragment of it (Claude Code's old_string/new_string)


@dataclass(frozen=True, slots=True)
class Bridge:
    """The VS Code tools lmbridge's MCP server offers this session: the server's name in
    ``session/new`` and the tools' names; ``profile``: the agent's (how it names them)."""

    server: str
    tools: frozenset[str]
    profile: AgentProfile


def qualified(tool: str, server: str) -> str:
    """How claude-agent-acp names an MCP tool: ``mcp__<server>__<tool>``."""
    return f"mcp__{server}__{tool}"


def gemini_qualified(tool: str, server: str) -> str:
    """How gemini-cli names an MCP tool: the function ``mcp_<server>_<tool>``, other
    characters than ``[A-Za-z0-9_.:-]`` made ``_``, cut to 63 characters as it cuts them
    (gemini-cli 0.61.0 ``generateValidName``)."""
    name = re.sub(r"[^A-Za-z0-9_\-.:]", "_", f"mcp_{server}_{tool}")
    return name if len(name) <= 63 else f"{name[:30]}...{name[-30:]}"


def bridged_tool(tool_call: Mapping[str, Any], bridge: Bridge | None) -> str | None:
    """The bridged VS Code tool a request names in its profile's structured place, if any.

    claude-agent-acp: ``_meta.claudeCode.toolName``; gemini-cli: the ``toolCallId``, always
    ``<function>__<id>``; fast-agent: its title ``<server>/<tool>`` (the only place it names
    one). Other agents (codex-acp included, core.profiles): none.
    """
    if bridge is None or not bridge.tools:
        return None
    server, naming = bridge.server, bridge.profile.tool_naming
    names: dict[str, str]
    found: object = None
    if naming is ToolNaming.CLAUDE_META:
        claude = json_object(json_object(tool_call.get("_meta")).get("claudeCode"))
        found = claude.get("toolName")
        names = {qualified(t, server): t for t in bridge.tools}
    elif naming is ToolNaming.FUNCTION_CALL_ID:
        call_id = tool_call.get("toolCallId")
        found = call_id.split("__", 1)[0] if isinstance(call_id, str) and "__" in call_id else None
        names = {gemini_qualified(t, server): t for t in bridge.tools}
    elif naming is ToolNaming.TITLE:
        found = tool_call.get("title")
        names = {f"{server}/{t}": t for t in bridge.tools}
    else:
        return None
    return names.get(found) if isinstance(found, str) else None


def _unresolved(path: str) -> str | None:
    return None


@dataclass(frozen=True)
class Workspace:
    """Where a request's files are judged: ``folders`` (resolved), ``rules`` (the user's
    ``chat.tools.edits.autoApprove``, ``paths.edit_rules``) and ``resolve``: a path as a write
    would resolve it (``acp.files.Files.allowed``; None when no write there is allowed at all).
    The default knows no workspace: every file is protected and nothing is writable."""

    folders: tuple[str, ...] = ()
    rules: paths.EditRules = paths.edit_rules(None)
    resolve: Callable[[str], str | None] = _unresolved


NO_WORKSPACE = Workspace()


@dataclass(frozen=True, slots=True)
class Write:
    """One write an approval of the card allows: the file as the card names it (``path``), the
    file it resolves to (``real``, named on the card when it differs) and the ``content`` the card
    showed for it, byte for byte."""

    path: str
    real: str
    content: str


@dataclass(frozen=True)
class Permission:
    """One ``session/request_permission``, read once (``read``).

    ``call_id``/``token``: lmbridge's callId for the card and its approval token (drawn by
    the caller). ``options``: the agent's options, as offered. ``kind``: the ACP kind the
    agent gave ("other" when it gave none). ``title``: in full. ``command``: what would run,
    if the request carries a command. ``bridged``: the bridged VS Code tool it asks about,
    if any. ``diffs``, ``texts``, ``locations``, ``details``: the rest of what the card shows.
    """

    call_id: str
    token: str
    options: tuple[Option, ...]
    kind: str
    title: str
    command: Command | None = None
    bridged: str | None = None
    tool_call_id: str | None = None
    diffs: tuple[Diff, ...] = ()
    texts: tuple[str, ...] = ()
    terminals: tuple[str, ...] = ()
    locations: tuple[tuple[str, int | None], ...] = ()
    details: str | None = None
    writes: tuple[Write, ...] = ()  # what an approval of it lets be written (``writes_of``)
    links: tuple[tuple[str, str], ...] = ()  # (file named, the file it resolves to) where they differ
    protected: tuple[str, ...] = ()  # the files named that ``paths.protected`` protects (or the reason)
    # In a multi-root workspace, the folders its files and its command's cwd lie in (``folders_of``).
    folders: tuple[str, ...] = ()
    profile: AgentProfile = OTHER  # its agent's: which option a Skip selects (``outcome``)

    @property
    def tool(self) -> str:
        """The tool the card goes out on: ``ACTION_TOOL`` for anything with a command,
        else by kind (``TOOL_BY_KIND``)."""
        if self.command is not None:
            return ACTION_TOOL
        tool = TOOL_BY_KIND.get(self.kind, ACTION_TOOL)
        return PROTECTED_TOOL if tool == EDIT_TOOL and self.protected else tool


@dataclass(frozen=True)
class Malformed:
    """A request that cannot be read: ``field`` names what was unusable, ``problem`` says how.
    ``answerable``: its JSON-RPC id can be written back (else the error goes out with id null)."""

    field: str
    problem: str
    answerable: bool = True

    @property
    def error(self) -> Mapping[str, Any]:
        """The JSON-RPC error it is answered with."""
        if not self.answerable:
            return {"code": INVALID_REQUEST, "message": f"invalid request: {self.field} {self.problem}"}
        return {"code": INVALID_PARAMS, "message": f"invalid params: {self.field} {self.problem}"}


def read(
    params: object, call_id: str, token: str, merged: Mapping[str, Any] | None = None, bridge: Bridge | None = None,
    workspace: Workspace = NO_WORKSPACE, profile: AgentProfile | None = None,
) -> Permission | Malformed:
    """Read a request's ``params`` (as received) into a ``Permission``, or say why it cannot be.
    ``profile``: the agent's (None: the ``bridge``'s, else ``OTHER``).

    ``merged``: the request's tool call merged with the ``tool_call``/``tool_call_update``s the
    agent sent for the same ``toolCallId`` before (ACP treats them as create-or-update; its
    ``toolCallId``, ``title``, ``kind``, ``rawInput``, ``content``, ``locations`` as in ACP).
    The request's own fields win; a command found in either is the request's command.
    ``workspace``: where its files are judged (protected files, links, writes).
    """
    if not isinstance(params, Mapping):
        return Malformed("params", "is not an object")
    raw = params.get("toolCall")
    if not isinstance(raw, Mapping):
        return Malformed("toolCall", "is missing" if raw is None else "is not an object")
    raw_options = params.get("options")
    if not isinstance(raw_options, list):
        return Malformed("options", "is missing" if raw_options is None else "is not a list")
    options = []
    for i, o in enumerate(raw_options):
        o = json_object(o)
        option_id, kind, name = o.get("optionId"), o.get("kind"), o.get("name", "")
        if not (isinstance(option_id, str) and isinstance(kind, str) and isinstance(name, str)):
            return Malformed(f"options[{i}]", "is not a permission option (optionId, name, kind)")
        options.append(Option(option_id, name, kind))
    if not options:
        return Malformed("options", "is empty")
    view: dict[str, Any] = dict(merged or {})
    view.update({k: v for k, v in raw.items() if v is not None})
    kind = _string(view.get("kind")) or "other"
    title = _string(view.get("title"))
    content: list[Any] = view["content"] if isinstance(view.get("content"), list) else []
    terminals = tuple(str(c["terminalId"]) for c in content if json_object(c).get("type") == "terminal" and "terminalId" in c)
    command = command_of(raw.get("rawInput")) or command_of((merged or {}).get("rawInput"))
    if command is None and (kind == "execute" or terminals):
        # gemini-cli and codex-acp name a shell command by its text, as the title.
        command = Command(title or NO_COMMAND)
    raw_input = view.get("rawInput")
    diffs = _diffs(content, raw_input)
    tool_call_id = view.get("toolCallId") if isinstance(view.get("toolCallId"), str) else None
    bridged = bridged_tool(view, bridge)
    # Every file the request or the calls merged under it name, shown on the card or not.
    files = tuple(dict.fromkeys([*paths.named_files(view), *paths.named_files(raw), *(d.path for d in diffs if d.path.startswith("/"))]))
    return Permission(
        call_id=call_id,
        token=token,
        options=tuple(options),
        kind=kind,
        title=title,
        command=command,
        bridged=bridged,
        tool_call_id=tool_call_id,
        diffs=diffs,
        texts=tuple(_texts(content)),
        terminals=terminals,
        locations=tuple(_locations(view.get("locations"))),
        details=None if command is not None or diffs else _json(raw_input),
        writes=writes_of(raw, diffs, workspace),
        links=tuple((f, r) for f in files if (r := workspace.resolve(f)) is not None and r != f),
        protected=_protected(kind, files, workspace),
        folders=folders_of(files, command, workspace),
        profile=profile if profile is not None else bridge.profile if bridge is not None else OTHER,
    )


def writes_of(raw: Mapping[str, Any], diffs: Sequence[Diff], workspace: Workspace) -> tuple[Write, ...]:
    """What an approval of a request lets lmbridge write (``fs/write_text_file``): as the request
    itself asks (its own kind and content, never the calls merged under it), for kind edit or
    move, each ACP ``diff`` of its own ``content`` that the card shows (``diffs``), its path
    absolute and resolving inside the workspace: that file, with that ``newText``, once. A move
    only its destination (``rawInput.destination``, else its last location); a delete nothing.
    Paths in ``rawInput`` fields and locations grant nothing (the card shows no content for them)."""
    kind = raw.get("kind")
    if kind not in ("edit", "move"):
        return ()
    own = [c for c in raw.get("content") or [] if isinstance(c, Mapping) and c.get("type") == "diff"] if isinstance(raw.get("content"), list) else []
    shown = {(d.path, d.new) for d in diffs}
    pairs = [(c.get("path"), c.get("newText")) for c in own]
    if kind == "move":
        destination = json_object(raw.get("rawInput")).get("destination")
        if not isinstance(destination, str):
            names = paths.named_files({"locations": raw.get("locations")})
            destination = names[-1] if names else None
        pairs = [(p, t) for p, t in pairs if p == destination]
    out: list[Write] = []
    for path, content in pairs:
        if isinstance(path, str) and isinstance(content, str) and path.startswith("/") and (path, content) in shown:
            real = workspace.resolve(path)
            if real is not None and not any(w.path == path for w in out):
                out.append(Write(path, real, content))
    return tuple(out[: paths.MAX_PATHS])


#: ``folders_of``'s entry for a file or cwd in no workspace folder.
OUTSIDE = "outside every workspace folder"


def folders_of(files: Sequence[str], command: Command | None, workspace: Workspace) -> tuple[str, ...]:
    """Which workspace folders a request acts in, for its card (docs/agents.md, "Every
    workspace folder"): in a workspace of more than one folder, the folder (``paths.holder``,
    resolved) of each file it names and of its command's ``cwd`` (a relative one from the
    first folder, the agents' cwd), each once, in order; ``OUTSIDE`` for one in none. A command
    naming no cwd runs where the agent's own tool is (its session's cwd, or where an earlier
    ``cd`` left it): not said. One folder or none: nothing (every card is in it)."""
    if len(workspace.folders) < 2:
        return ()
    targets = list(files)
    if command is not None and command.cwd:
        targets.append(command.cwd if command.cwd.startswith("/") else f"{workspace.folders[0].rstrip('/')}/{command.cwd}")
    out: list[str] = []
    for target in targets:
        real = workspace.resolve(target)
        folder = (paths.holder(real, workspace.folders) if real is not None else None) or OUTSIDE
        if folder not in out:
            out.append(folder)
    return tuple(out)


def _protected(kind: str, files: Sequence[str], workspace: Workspace) -> tuple[str, ...]:
    """The files of an edit, delete or move an ``EDIT_TOOL`` session approval must not cover:
    each named file, or the file a link of it resolves to, that ``paths.protected`` protects (or
    that cannot be resolved inside the workspace); a request naming no file at all is one too."""
    if kind not in paths.EDIT_KINDS:
        return ()
    if not files:
        return ("(the request names no file)",)
    out = []
    for f in files:
        real = workspace.resolve(f)
        if real is None or paths.protected(f, workspace.folders, workspace.rules) or paths.protected(real, workspace.folders, workspace.rules):
            out.append(f if real is None or real == f else f"{f} → {real}")
    return tuple(out)


def command_of(raw_input: object) -> Command | None:
    """The command in an agent's ``rawInput`` (``command``, ``cmd`` or ``commandLine``: a
    string or an argv list), with its ``cwd``/``workdir`` and ``description``; None when it
    holds none."""
    if not isinstance(raw_input, Mapping):
        return None
    text: str | None = None
    for key in ("command", "cmd", "commandLine"):
        value = raw_input.get(key)
        if isinstance(value, str) and value.strip():
            text = value
        elif isinstance(value, list) and value and all(isinstance(a, str) for a in value):
            text = _argv_text(value)
        elif value is not None and value != "" and value != []:
            # Something is there that is not a readable command: show it as JSON, whole.
            text = _json(value) or repr(value)
        if text is not None:
            break
    if text is None:
        return None
    args = raw_input.get("args")
    if isinstance(raw_input.get("command"), str) and args is not None:
        # fast-agent's execute: ``command`` the program, ``args`` its arguments (what runs).
        text = _argv_text([raw_input["command"], *args]) if isinstance(args, list) and all(isinstance(a, str) for a in args) else f"{text} {_json(args) or repr(args)}"
    cwd = raw_input.get("cwd", raw_input.get("workdir"))
    description = raw_input.get("description")
    return Command(text, cwd if isinstance(cwd, str) else None, description if isinstance(description, str) else None, _env(raw_input.get("env")))


#: The command shown for an ``execute`` request that names none (no rawInput command, no title).
NO_COMMAND = "(the agent did not say which command)"


def _env(raw: object) -> tuple[tuple[str, str], ...]:
    """Environment variables as ``{name: value}`` or ACP's ``[{name, value}]``; sorted pairs.
    Unreadable entries are shown as they are (``(unreadable)``), so they never match a run."""
    pairs: list[tuple[str, str]] = []
    if isinstance(raw, Mapping):
        for name, value in raw.items():
            pairs.append((name, value) if isinstance(name, str) and isinstance(value, str) else ("(unreadable)", _json({str(name): value}) or repr(value)))
    elif isinstance(raw, list):
        for item in raw:
            item = json_object(item)
            name, value = item.get("name"), item.get("value")
            if isinstance(name, str) and isinstance(value, str):
                pairs.append((name, value))
            else:
                pairs.append(("(unreadable)", _json(item) or repr(item)))
    elif raw is not None:
        pairs.append(("(unreadable)", _json(raw) or repr(raw)))
    return tuple(sorted(pairs))


_SAFE_ARG = re.compile(r"[\w@%+=:,./-]+")  # fullmatch: ``$`` would match before a trailing newline
# A system shell: a bare name (the daemon's PATH) or one in the system's bin folders. Any
# other program named like a shell (./sh, /tmp/x/bash) may be anything: shown as it is.
_SHELL = re.compile(r"(/bin/|/usr/bin/|/usr/local/bin/|/opt/homebrew/bin/)?(ba|z|da)?sh")  # fullmatch: "sh\n" is not a shell


def _command_unshowable(command: Command) -> list[str]:
    """The ``UNSHOWABLE`` characters in what a command would run: its text, cwd and environment."""
    parts = [command.text, command.cwd or "", *(f"{n}={v}" for n, v in command.env)]
    return unshowable("\n".join(parts))


def _argv_text(argv: list[str]) -> str:
    # codex: ["/bin/bash", "-lc", "<script>"] is shown as the script itself.
    if len(argv) == 3 and _SHELL.fullmatch(argv[0]) and argv[1] in ("-c", "-lc"):
        return argv[2]
    return " ".join(a if _SAFE_ARG.fullmatch(a) else "'" + a.replace("'", "'\\''") + "'" for a in argv)


def _diffs(content: list[Any], raw_input: object) -> tuple[Diff, ...]:
    out = []
    for c in content:
        c = json_object(c)
        if c.get("type") == "diff" and isinstance(c.get("path"), str) and isinstance(c.get("newText"), str):
            old = c.get("oldText")
            out.append(Diff(c["path"], old if isinstance(old, str) else None, c["newText"]))
    raw = json_object(raw_input)
    path = raw.get("file_path", raw.get("path"))
    if not out and isinstance(path, str):
        # Agents that put the edit only in rawInput (Claude Code's Edit and Write tools).
        if isinstance(raw.get("new_string"), str):
            old = raw.get("old_string")
            out.append(Diff(path, old if isinstance(old, str) else "", raw["new_string"], whole=False))
        elif isinstance(raw.get("content"), str):
            out.append(Diff(path, None, raw["content"]))
    return tuple(out)


def _texts(content: list[Any]) -> list[str]:
    out = []
    for c in content:
        c = json_object(c)
        inner = json_object(c.get("content"))
        if c.get("type") == "content" and inner.get("type") == "text" and isinstance(inner.get("text"), str) and inner["text"].strip():
            out.append(inner["text"])
    return out


def _locations(raw: object) -> list[tuple[str, int | None]]:
    out: list[tuple[str, int | None]] = []
    for loc in raw if isinstance(raw, list) else []:
        loc = json_object(loc)
        line = loc.get("line")
        if isinstance(loc.get("path"), str):
            out.append((loc["path"], line if isinstance(line, int) and not isinstance(line, bool) else None))
    return out


def _json(value: object) -> str | None:
    if value is None or value == {} or value == []:
        return None
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return None


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""



# ---------------------------------------------------------------- the decision


@dataclass(frozen=True)
class Card:
    """What the shim's tool shows (``input`` of the tool call: ``{title, message, approvalToken}``)."""

    tool: str
    title: str
    message: str  # markdown


@dataclass(frozen=True)
class Ask:
    """Show the card; the next request's answer decides (``decide``)."""

    card: Card


@dataclass(frozen=True)
class Grant:
    """Answer ``allow`` now (``outcome``: the ``allow_once`` option selected): a bridged VS
    Code tool, which VS Code confirms itself when it runs."""

    tool: str
    outcome: Mapping[str, Any]


@dataclass(frozen=True)
class Decline:
    """Answer now with ``outcome``, no card; ``line`` tells the user why (markdown)."""

    outcome: Mapping[str, Any]
    line: str
    reason: str


@dataclass(frozen=True)
class Refuse:
    """Answer now with a JSON-RPC ``error``: the request could not be read; ``line`` tells the user."""

    error: Mapping[str, Any]
    line: str


Decision = Ask | Grant | Decline | Refuse


def route(request: Permission | Malformed, offered: frozenset[str], agent: str) -> Decision:
    """What becomes of a request, given the tools the chat request ``offered`` (``options.tools``).

    Malformed → ``Refuse``. A bridged VS Code tool, asked without a command and not of an
    acting kind → ``Grant``. Options with no unambiguous ``allow_once`` (nothing the user could
    approve) → ``Decline`` cancelled. A command or card too large to show whole → ``Decline``.
    The card's tool not offered (Ask mode) → ``Decline``. Else → ``Ask``.
    """
    if isinstance(request, Malformed):
        return Refuse(request.error, f"_{agent} sent a permission request lmbridge cannot read ({request.field} {request.problem}): nothing was approved._")
    p = request
    allow = outcome(p.options, Answer.ALLOW, p.profile)
    if p.bridged is not None and p.command is None and p.kind not in ACTING_KINDS and allow != CANCELLED:
        return Grant(p.bridged, allow)
    label = _KIND_LABELS.get(p.kind, "act")
    if allow == CANCELLED:
        return Decline(CANCELLED, f"_{agent} asked to {label}, but its options cannot be read unambiguously: declined._", "ambiguous options")
    refused = outcome(p.options, Answer.REJECT, p.profile)
    if p.command is not None and len(p.command.text) > COMMAND_LIMIT:
        size = len(p.command.text)
        return Decline(refused, f"_{agent} asked to run a command of {size:,} characters, too long to show whole on a card: declined._", "command too long")
    if p.command is not None and (hidden := _command_unshowable(p.command)):
        return Decline(
            refused,
            f"_{agent} asked to run a command holding characters a card cannot show as they would run ({', '.join(hidden[:8])}): declined._",
            "command not showable",
        )
    card = render(p)
    if len(card.message) > CARD_LIMIT:
        return Decline(refused, f"_{agent} asked to {label}, with more than a card can show whole ({len(card.message):,} characters): declined._", "card too large")
    if card.tool not in offered:
        return Decline(refused, f"_{agent} wanted to {label}: {_inline(_one_line(p.title) or 'no title')}. Declined: approving agent actions needs Agent mode._", "no action tool offered")
    return Ask(card)


# ---------------------------------------------------------------- modes: whose choice

#: Values of an agent's ``mode`` control (config option category ``mode``, or the older modes)
#: that ask before acting, or do less: claude-agent-acp's ``default`` ("Manual") and ``plan``,
#: codex-acp's ``read-only``, gemini-cli's ``default`` and ``plan``. VS Code's model
#: configuration sends one value per *model*, the last any chat chose, with every chat's next
#: request; so a mode from it is set only when it is one of these. Any other mode (``auto``,
#: ``acceptEdits``, ``bypassPermissions``, ``dontAsk``, ``agent``, ``agent-full-access``,
#: ``workspace-write``, ``autoEdit``, ``yolo``, or one this table does not know) widens what runs
#: without a card, and is set only for the chat whose user chose it: ``chat/setControl``, which
#: names the chat (docs/protocol.md, "Per-chat controls").
ASKING_MODES = frozenset({"default", "plan", "read-only", "ask", "manual"})


def from_configuration(control_id: str, category: str | None, legacy: bool, value: object, profile: AgentProfile = OTHER) -> bool:
    """Whether VS Code's model configuration may set ``control_id`` to ``value`` on a chat's
    session: any control but a mode (``category`` ``mode``, or the older modes: ``legacy``),
    and a mode only to the agent's asking mode (``profile.asking_mode``) or one of
    ``ASKING_MODES`` that its profile does not know to approve on its own
    (``profile.self_approving``: claude-agent-acp's ``plan`` lets its classifier decide)."""
    if category != "mode" and not legacy:
        return True
    if not isinstance(value, str):
        return False
    return value == profile.asking_mode or (value in ASKING_MODES and value not in profile.self_approving)


# ---------------------------------------------------------------- the agent's client actions

#: Approved commands one turn's grants hold unused at once (the latest kept).
MAX_GRANTED_COMMANDS = 16
# A refused ``terminal/create`` is answered ``errors.REFUSED`` (as ``acp.terminals``' other
# refusals); a refused write ``INVALID_PARAMS``, as the file requests' other refusals.


@dataclass(frozen=True, slots=True)
class Grants:
    """What the cards the user approved in the prompt turn at hand still allow: ``commands``,
    each one ``terminal/create`` (``runs``); ``writes``, each one ``fs/write_text_file`` of
    that resolved file with that content. ``NO_GRANTS`` at each prompt and at a Stop."""

    commands: tuple[Command, ...] = ()
    writes: tuple[Write, ...] = ()


NO_GRANTS = Grants()


def grant(grants: Grants, approved: Permission, resolve: Callable[[str], str | None]) -> Grants:
    """``grants`` after the user approved ``approved`` on its card (the exact token: never a
    bridged tool's grant, a decline, a Skip or a Stop; the turn machine's ``Respond.approved``).

    Its command (unless it named none) allows one run; each of its ``writes`` (the files the
    card listed with the content it showed, ``writes_of``) one write of that content, if the
    file still resolves to the file the card named. ``resolve``: the path as a write would
    resolve it (``acp.files.Files.allowed``), None when no write there is allowed at all."""
    commands = grants.commands
    if approved.command is not None and approved.command.text != NO_COMMAND and not _command_unshowable(approved.command):
        commands = (*commands, approved.command)[-MAX_GRANTED_COMMANDS:]
    writes = list(grants.writes)
    for w in approved.writes:
        if resolve(w.path) == w.real:
            writes.append(w)
    return Grants(commands, tuple(writes[-paths.MAX_PATHS :]))


@dataclass(frozen=True, slots=True)
class RunCommand:
    """A ``terminal/create`` (ACP "Terminals"): ``command`` run with ``args`` (no shell), in
    ``cwd`` (None: the session's), with ``env`` (name, value pairs, sorted) added."""

    command: str
    args: tuple[str, ...] = ()
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class WriteFile:
    """An ``fs/write_text_file`` of ``content`` to ``path`` (as the agent sent it), resolved to
    ``real`` (``paths.check``: inside the workspace)."""

    path: str
    real: str
    content: str


ClientAction = RunCommand | WriteFile


@dataclass(frozen=True, slots=True)
class Permit:
    """The action may happen (its grant is used up)."""


@dataclass(frozen=True, slots=True)
class Deny:
    """The action is refused and nothing happens: the agent gets ``error`` (``code``, ``message``)."""

    code: int
    message: str

    @property
    def error(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


def run_command(params: object) -> RunCommand | Deny:
    """A ``terminal/create``'s params (``command``, ``args?``, ``cwd?``, ``env?`` as
    ``[{name, value}]``) read, or the ``Deny`` (-32602) naming what is wrong: also what no
    process can be started with (NUL anywhere, an environment name empty or holding ``=``)."""
    p = json_object(params)
    command, args, cwd, env = p.get("command"), p.get("args") or [], p.get("cwd"), p.get("env") or []
    if not isinstance(command, str) or not command or not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return Deny(INVALID_PARAMS, "terminal/create: command must be a string and args a list of strings")
    if cwd is not None and not isinstance(cwd, str):
        return Deny(INVALID_PARAMS, "terminal/create: cwd must be a string")
    if not isinstance(env, list) or not all(isinstance(json_object(e).get("name"), str) and isinstance(json_object(e).get("value"), str) for e in env):
        return Deny(INVALID_PARAMS, "terminal/create: env must be a list of {name, value} strings")
    # What no process can be started with: refused here, named, never left to the spawn.
    if any("\0" in text for text in (command, *args, cwd or "", *(e["name"] + e["value"] for e in env))):
        return Deny(INVALID_PARAMS, "terminal/create: a command, argument, cwd or environment variable cannot hold NUL")
    if any(not e["name"] or "=" in e["name"] for e in env):
        return Deny(INVALID_PARAMS, "terminal/create: an environment variable's name must be non-empty and hold no '='")
    return RunCommand(command, tuple(args), cwd, tuple(sorted((e["name"], e["value"]) for e in env)))


def runs(approved: Command, action: RunCommand) -> bool:
    """Whether ``action`` runs what the card of ``approved`` showed. The program and its
    arguments are one of:

    * a shell running the shown text: ``[sh|bash|zsh|dash, -c|-lc, TEXT]`` (a bare name, or
      in /bin, /usr/bin, /usr/local/bin or /opt/homebrew/bin), TEXT exactly the card's command;
    * the shown text's words: the card's command holds nothing a shell would expand or
      treat as an operator outside quotes (``| & ; < > ( ) $ ` * ? [ ] { }``, a newline, a
      ``~`` or ``#`` starting a word, ``$`` or a backtick in double quotes), and
      ``shlex.split`` of it is exactly ``[command, *args]``;

    and ``cwd`` is the card's (both absent, or the same string), ``env`` the card's (the same
    variables and values; both none). Anything else does not match."""
    argv = [action.command, *action.args]
    if action.cwd != approved.cwd or action.env != approved.env:
        return False
    if len(argv) == 3 and _SHELL.fullmatch(argv[0]) and argv[1] in ("-c", "-lc") and argv[2] == approved.text:
        return True
    return _plain(approved.text) and _words(approved.text) == argv


_SHELL_CHARS = frozenset("|&;<>()\n$`*?[]{}")


def _plain(text: str) -> bool:
    """``text`` means the same run as words as in a shell: nothing it would expand or
    treat as an operator (``runs``)."""
    quote: str | None = None
    escaped, word_start = False, True
    for char in text:
        if escaped:
            escaped, word_start = False, False
        elif quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            escaped = True
        elif quote == '"':
            if char in "$`":
                return False
            quote = None if char == '"' else quote
        elif char in "'\"":
            quote, word_start = char, False
        elif char in " \t":
            word_start = True
        elif char in _SHELL_CHARS or (word_start and char in "~#"):
            return False
        else:
            word_start = False
    return quote is None and not escaped


def _words(text: str) -> list[str] | None:
    try:
        return shlex.split(text)
    except ValueError:
        return None


def permit(grants: Grants, action: ClientAction, turn_open: bool) -> tuple[Grants, Permit | Deny]:
    """The one rule for the agent's client actions: ``(grants after, Permit | Deny)``.

    Only while a prompt turn of the session is open (``turn_open``). ``RunCommand``: the first
    approved command it ``runs`` is used up; none → ``Deny`` -32000. ``WriteFile``: one
    approved write of ``real`` with exactly that ``content`` (the card's, byte for byte) is used
    up; none → ``Deny`` -32602. A denial changes nothing."""
    if isinstance(action, RunCommand):
        if not turn_open:
            return grants, Deny(REFUSED, "terminal/create: no prompt turn is open in this session")
        for i, approved in enumerate(grants.commands):
            if runs(approved, action):
                return replace(grants, commands=grants.commands[:i] + grants.commands[i + 1 :]), Permit()
        shown = _argv_text([action.command, *action.args])
        return grants, Deny(
            REFUSED,
            f"terminal/create refused: the user has not approved running {shown[:500]!r}"
            f"{f' in {action.cwd[:200]!r}' if action.cwd else ''}{' with that environment' if action.env else ''} in this turn "
            "(ask first with session/request_permission, the command in rawInput.command; one approval runs it once)",
        )
    found = next((i for i, w in enumerate(grants.writes) if w.real == action.real and w.content == action.content), None) if turn_open else None
    if found is None:
        other = turn_open and any(w.real == action.real for w in grants.writes)
        return grants, Deny(
            INVALID_PARAMS,
            f"refused: lmbridge writes {action.path[:500]} only after the user approved an edit of it in this turn"
            f"{', with the content the card showed (this content differs)' if other else ''} "
            "(ask with session/request_permission, kind edit, the file and its whole new text as a diff content)",
        )
    return replace(grants, writes=grants.writes[:found] + grants.writes[found + 1 :]), Permit()


# ---------------------------------------------------------------- the card


def render(p: Permission) -> Card:
    """The card for a permission: its tool, heading and markdown message. Everything the
    agent wrote is escaped or fenced; a command, a title and details are shown whole."""
    heading = _one_line(p.title)
    clipped = len(heading) > HEADING_LIMIT or heading != p.title.strip()
    if len(heading) > HEADING_LIMIT:
        heading = heading[: HEADING_LIMIT - 1] + "…"
    heading = visible(heading) or "The agent asks for permission"
    sections = [f"The agent asks to **{escape(_KIND_LABELS.get(p.kind, p.kind))}** (kind: {_inline(p.kind)})."]
    if clipped:
        sections.append(f"**Title**\n\n{code_block(p.title, 'text')}")
    if p.command is not None:
        lines = ["**Command**"]
        if p.command.description:
            lines.append(f"*{escape(p.command.description)}*")
        lines.append(code_block(p.command.text, "sh"))
        if p.command.cwd:
            lines.append(f"in {_inline(p.command.cwd)}")
        if p.command.env:
            lines.append("with the environment\n\n" + code_block("\n".join(f"{name}={value}" for name, value in p.command.env), "sh"))
        sections.append("\n\n".join(lines))
    for d in p.diffs:
        sections.append(f"**Changes to {_inline(d.path)}**\n\n{code_block(unified_diff(d), 'diff')}")
    for name, target in p.links:
        sections.append(f"{_inline(name)} is a link to {_inline(target)}: a change of it is made there.")
    if p.writes:
        items = [f"- {_inline(w.real)}{f' (named {_inline(w.path)})' if w.path != w.real else ''}" for w in p.writes]
        sections.append("**Allow lets lmbridge write exactly the text shown above, once, to**\n\n" + "\n".join(items))
    if p.tool == PROTECTED_TOOL:
        items = [f"- {_inline(f)}" for f in p.protected[:MAX_LOCATIONS]]
        sections.append(
            "**Asked again, even if you allowed edits in this session**: VS Code protects these files "
            "(`chat.tools.edits.autoApprove`), as a change to them can run code:\n\n" + "\n".join(items)
        )
    if p.folders:
        named = [_inline(f) if f != OUTSIDE else f"**{OUTSIDE}**" for f in p.folders]
        sections.append(f"**Workspace folder{'s' if len(named) > 1 else ''}**: {', '.join(named)}")
    for terminal in p.terminals:
        sections.append(f"Output in terminal {_inline(terminal)}.")
    if p.locations:
        items = [f"- {_inline(path)}{f' (line {line})' if line is not None else ''}" for path, line in p.locations[:MAX_LOCATIONS]]
        if len(p.locations) > MAX_LOCATIONS:
            items.append(f"- … and {len(p.locations) - MAX_LOCATIONS} more")
        sections.append("**Files**\n\n" + "\n".join(items))
    for text in p.texts:
        sections.append(code_block(text, "text"))
    if p.details:
        sections.append(f"**Details**\n\n{code_block(p.details, 'json')}")
    offered = [escape(o.name) for o in p.options if o.name]
    if offered:
        sections.append(f"The agent offered: {' · '.join(offered)}.")
    sections.append(
        f"**Allow** lets the agent do this once; **Allow in this Session** also allows this chat's later "
        f"{SESSION_SCOPE[p.tool]}, nothing else. **Skip** declines; the agent carries on without it."
    )
    return Card(p.tool, heading, "\n\n".join(sections))


def unified_diff(d: Diff) -> str:
    """A unified diff of one change (three lines of context); past ``DIFF_LINES`` lines, the
    new text whole instead (difflib is quadratic at worst). Byte for byte: lines split at
    "\n" only, a text whose every line ends CRLF said so in a line of its own (any other CR
    stays, and ``visible`` shows it), a last line without a newline marked as diff marks it."""
    old = [] if d.old is None else _lines(d.old, d.whole)
    new = _lines(d.new, d.whole)
    notes = [f"({which} text: CRLF line ends)" for which, text in (("old", d.old), ("new", d.new)) if text is not None and _crlf(text)]
    if len(old) + len(new) > DIFF_LINES:
        return "\n".join([*notes, "--- " + ("/dev/null" if d.old is None else d.path), "+++ " + d.path] + ["+" + line for line in new])
    out = list(difflib.unified_diff(old, new, "/dev/null" if d.old is None else d.path, d.path, lineterm=""))
    return "\n".join([*notes, *out]) if out else f"(no change to {d.path})"


NO_NEWLINE = "\\ No newline at end of file"


def _crlf(text: str) -> bool:
    """Every line of ``text`` that ends, ends with CRLF (and one does)."""
    ended = text.split("\n")[:-1]
    return bool(ended) and all(line.endswith("\r") for line in ended)


def _lines(text: str, whole: bool = True) -> list[str]:
    """Lines as a file has them: split at "\n" only (``str.splitlines`` also splits at a bare CR,
    U+2028 and others, which would hide them); CRs of CRLF line ends dropped when every line
    has one (``_crlf``: said on the card); a last line with no newline followed by ``NO_NEWLINE``."""
    lines = text.split("\n")
    last = lines.pop()
    if _crlf(text):
        lines = [line[:-1] for line in lines]
    if last:
        lines.append(f"{last}\n{NO_NEWLINE}" if whole else last)
    return lines


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~&])")


def escape(text: str) -> str:
    """Inline markdown text with its syntax escaped and lines joined."""
    return _MARKDOWN.sub(r"\\\1", visible(_one_line(text)))


def _inline(text: str) -> str:
    """Inline code that survives backticks in the value: the value whole, a line break or a tab
    in it shown ``⟨U+000A⟩``/``⟨U+0009⟩`` as ``visible`` shows the rest."""
    return inline_code(visible(text).replace("\n", "⟨U+000A⟩").replace("\t", "⟨U+0009⟩"))


def code_block(text: str, lang: str = "") -> str:
    """A fenced code block whose fence is longer than any backtick run inside (``text.code_block``):
    the text inside is shown whole, its ``UNSHOWABLE`` characters as ``visible`` shows them."""
    return text_code_block(visible(text), lang)


def _one_line(text: str) -> str:
    return " ".join(text.split())
