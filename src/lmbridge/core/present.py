"""ACP ``session/update``s → wire response parts, as plain data (no I/O).

One ``TurnRenderer`` lives for one agent session and turns each update into
zero or more parts (docs/protocol.md has the parts):

* ``agent_message_chunk`` → ``{"type": "text"}``; ``agent_thought_chunk`` →
  ``{"type": "thinking"}``; other content blocks become short markdown.
* ``tool_call``, ``tool_call_update`` and a permission's ``toolCall`` are one
  create-or-update stream per ``toolCallId`` (agents send them in any order,
  twice, or never: docs/agents.md, "ACP as agents speak it"). A tool call renders as markdown text at most
  twice: when it starts and when it reaches a final status, never per update.
* ``plan`` → a markdown checklist, only when the entries changed.
* A command's output (``_meta.terminal_output`` on a tool call update, or a terminal
  lmbridge runs for the agent: ``TERMINAL_UPDATE``) → one code block that grows under its
  tool call, bounded, closed when the command ends (``core.live``); then it is not shown again
  from the call's result.
* A notice (``notice``, or claude-agent-acp's informational ``agent_message_chunk``:
  ``core.notices``) → a text part of its own, a blockquote apart from the answer, which
  ``core.transcript`` never re-tells as the agent's words; once per session word for word
  (``NOTICES_KEPT``).
* A subagent's tool call (``_meta.claudeCode.parentToolUseId`` names the call that spawned
  it: ``core.subagents``) → its start and end lines quoted under that call, naming it.
* A tool call the agent makes for its own housekeeping (``QUIET_TOOLS``: claude's
  ``ToolSearch``, which loads the definitions of deferred tools) → one ``thinking`` part
  with its title, never the start and end lines of a step the user must read.
* Unknown kinds, and fields that fail validation, are reported to ``warn``
  and skipped; the rest of the update, and every other update, survives
  (the SDK would drop the whole notification). ``Skipped`` counts them, so a log says
  each kind once with a count, never once per update.

Parts are dicts in the wire shape (``wire.ResponsePart``) because this is the
streaming hot path: building pydantic models per chunk costs more than the
bridge is allowed to add.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acp import schema
from pydantic import BaseModel, ValidationError

from lmbridge.core import notices, subagents
from lmbridge.core.live import LiveOutput, exit_line
from lmbridge.core.profiles import OTHER, AgentProfile
from lmbridge.core.text import clip, code_block

Part = dict[str, Any]
Warn = Callable[[str], None]

FINAL_STATUSES = frozenset({"completed", "failed"})
PREVIEW_LINES = 12

# The update kinds lmbridge renders, each validated on its own with the ACP model.
UPDATE_MODELS: dict[str, type[BaseModel]] = {
    "agent_message_chunk": schema.AgentMessageChunk,
    "agent_thought_chunk": schema.AgentThoughtChunk,
    "tool_call": schema.ToolCallStart,
    "tool_call_update": schema.ToolCallProgress,
    "plan": schema.AgentPlanUpdate,
}
# Known kinds that have nothing to show in a chat response.
IGNORED_KINDS = frozenset(
    {
        "user_message_chunk",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "usage_update",
    }
)
#: Tools an agent calls for its own housekeeping, by the structured name it gives them
#: (claude-agent-acp's ``_meta.claudeCode.toolName``): shown as one quiet thinking line.
#: ``ToolSearch`` loads the definitions of tools claude defers (MCP tools: VS Code's),
#: which a real model calls before it calls one of them.
QUIET_TOOLS = frozenset({"ToolSearch"})
#: Notices a session remembers having shown: one said again word for word is not shown again
#: (claude-agent-acp 0.101 behind a gateway repeats its auto-mode billing warning at every
#: answer). Past this many, new ones are shown every time.
NOTICES_KEPT = 64
_ICONS = {"completed": "✓", "failed": "✗"}
#: ``sessionUpdate`` of an update lmbridge makes itself for a terminal it runs for the agent
#: (never sent by an agent: ``terminal/create``'s output and exit, ``acp.terminals``):
#: ``{"sessionUpdate": TERMINAL_UPDATE, "terminalId": str, "data"?: str,
#: "exitCode"?: int | None, "signal"?: str | None, "exited"?: bool}``.
TERMINAL_UPDATE = "lmbridge/terminal"
# fast-agent's toolCallId for a permission asked before it announced the call (its model
# answer did not stream; docs/agents.md): it names no tool call. Several permissions share
# it, and the call, once allowed, is announced under its own id.
PLACEHOLDER_TOOL_CALL_IDS = frozenset({"pending"})


def _noop(_: str) -> None:
    pass


_CHUNK_TYPES = {"agent_message_chunk": "text", "agent_thought_chunk": "thinking"}


def _plain_text(raw: dict[str, Any]) -> str | None:
    """The text of a message/thought chunk whose every field is plainly valid
    (the shape agents stream), else None: then the ACP model decides, exactly
    as for any other update. Saves a pydantic validation per streamed chunk."""
    content = raw.get("content")
    if type(content) is not dict or content.get("type") != "text":
        return None
    text = content.get("text")
    if type(text) is not str:
        return None
    for key, value in raw.items():
        if key in ("sessionUpdate", "content") or value is None:
            continue
        if not ((key == "messageId" and type(value) is str) or (key == "_meta" and type(value) is dict)):
            return None
    if len(content) > 2:
        for key, value in content.items():
            if key in ("type", "text") or value is None:
                continue
            if not (key == "_meta" and type(value) is dict):
                return None
    return text


def validate(model: type[BaseModel], raw: dict[str, Any], warn: Warn = _noop) -> BaseModel | None:
    """Validate ``raw`` as ``model``, dropping top-level fields that fail.

    Returns None (after ``warn``) only when the update is unusable without the
    failing fields (a required field is bad or missing).
    """
    data = dict(raw)
    for _ in range(len(data) + 1):
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"] and e["loc"][0] in data}
            required = {n for n, f in model.model_fields.items() if f.is_required()}
            aliases = {f.alias or n for n, f in model.model_fields.items() if n in required}
            if not bad or bad & (required | aliases):
                warn(f"{raw.get('sessionUpdate', model.__name__)}: invalid ({exc.errors()[0]['msg']}), skipped")
                return None
            warn(f"{raw.get('sessionUpdate', model.__name__)}: invalid field(s) {sorted(bad)} skipped")
            for key in bad:
                data.pop(key, None)
    return None


@dataclass
class ToolState:
    """What is known of one tool call (merged create-or-update)."""

    id: str
    title: str = ""
    kind: str | None = None
    status: str | None = None
    content: list[Any] = field(default_factory=list)
    locations: list[Any] = field(default_factory=list)
    raw_input: Any = None
    raw_output: Any = None
    meta: Any = None  # its _meta: where claude-agent-acp names the tool (permissions.bridged_tool)
    terminals: list[str] = field(default_factory=list)  # ids of the terminals whose output is its own
    quiet: bool = False  # one of QUIET_TOOLS: a thinking line, no start and end lines
    started: bool = False  # start rendered
    finished: bool = False  # final status rendered
    declined: bool = False  # its permission was declined (a Skip, or lmbridge's decline): it reads "declined"

    def view(self) -> dict[str, Any]:
        """The call as ACP names its fields (what ``permissions.read`` merges a request over)."""
        out: dict[str, Any] = {"toolCallId": self.id, "title": self.title or None, "kind": self.kind, "rawInput": self.raw_input, "_meta": self.meta}
        if self.content:
            out["content"] = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in self.content]
        if self.locations:
            out["locations"] = [loc.model_dump(mode="json", by_alias=True, exclude_none=True) for loc in self.locations]
        return {k: v for k, v in out.items() if v is not None}

    def merge(self, call: Any) -> None:  # a validated ToolCall / ToolCallUpdate
        for attr in ("title", "kind", "status"):
            value = getattr(call, attr, None)
            if value is not None:
                setattr(self, attr, getattr(value, "value", value))
        if getattr(call, "content", None) is not None:
            self.content = list(call.content)
        if getattr(call, "locations", None) is not None:
            self.locations = list(call.locations)
        if getattr(call, "raw_input", None) is not None:
            self.raw_input = call.raw_input
        if getattr(call, "raw_output", None) is not None:
            self.raw_output = call.raw_output
        if getattr(call, "field_meta", None) is not None:
            self.meta = call.field_meta


def text_part(value: str) -> Part:
    return {"type": "text", "value": value}


def content_text(block: Any) -> str:
    """Markdown for one ACP content block shown in a chat response."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind == "resource_link":
        return f"[{block.name}]({block.uri})"
    if kind == "resource":
        resource = block.resource
        return getattr(resource, "text", None) or f"[{resource.uri}]({resource.uri})"
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}]"
    return ""


class TurnRenderer:
    """Create-or-update state of one session's tool calls and plan → parts.

    ``profile``: the agent's (``acp.profiles``): whether a permission's content is its
    approval prompt rather than the call's, and where it puts a call's output."""

    def __init__(self, warn: Warn = _noop, profile: AgentProfile = OTHER) -> None:
        self.warn = warn
        self.profile = profile
        self.tools: dict[str, ToolState] = {}
        self._plan: tuple[tuple[str, str], ...] | None = None
        self.live = LiveOutput()  # commands' output blocks (live)
        self.noticed: set[notices.Notice] = set()  # the notices shown in this session (NOTICES_KEPT at most)

    # -- entry points -------------------------------------------------------

    def update(self, raw: Any) -> list[Part]:
        """Parts for one ``session/update`` ``update`` object (a dict as received)."""
        if not isinstance(raw, dict):
            self.warn(f"session/update: update is {type(raw).__name__}, not an object: skipped")
            return []
        kind = raw.get("sessionUpdate")
        if kind == TERMINAL_UPDATE:
            return self.terminal(raw)
        if kind == "notice" or (kind == "agent_message_chunk" and raw.get("_meta") is not None):
            notice = notices.of_update(raw)
            if notice is not None:
                if notice in self.noticed:  # the same again in this session: said already
                    return []
                if len(self.noticed) < NOTICES_KEPT:
                    self.noticed.add(notice)
                return [*self._pause(), text_part(notices.render(notice))]
            if kind == "notice":
                self.warn("notice: no title or description, skipped")
                return []
        model = UPDATE_MODELS.get(kind) if isinstance(kind, str) else None
        if model is None:
            if not isinstance(kind, str) or kind not in IGNORED_KINDS:  # a list would not even hash
                self.warn(f"session/update: unknown kind {clip(repr(kind), 200)} skipped")
            return []
        if kind in _CHUNK_TYPES:
            text = _plain_text(raw)
            if text is not None:  # the hot path: no pydantic per chunk
                if not text:
                    return []
                return [{"type": _CHUNK_TYPES[kind], "value": text}] if self.live.open is None else [*self._pause(), {"type": _CHUNK_TYPES[kind], "value": text}]
        update: Any = validate(model, raw, self.warn)
        if update is None:
            return []
        if kind == "agent_message_chunk":
            text = content_text(update.content)
            return [*self._pause(), text_part(text)] if text else []
        if kind == "agent_thought_chunk":
            text = content_text(update.content)
            return [*self._pause(), {"type": "thinking", "value": text}] if text else []
        if kind == "plan":
            parts = self._plan_parts(update.entries)
            return [*self._pause(), *parts] if parts else []
        return self.tool(update)

    def known(self, tool_call_id: object) -> dict[str, Any] | None:
        """What the agent said of a tool call before (merged ``tool_call``/``tool_call_update``s),
        in ACP's field names (``toolCallId``, ``title``, ``kind``, ``rawInput``, ``content``,
        ``locations``); None for a call it has not announced, or a placeholder id."""
        if not isinstance(tool_call_id, str) or tool_call_id in PLACEHOLDER_TOOL_CALL_IDS:
            return None
        state = self.tools.get(tool_call_id)
        return None if state is None else state.view()

    def permission_tool(self, raw: Any) -> list[Part]:
        """Merge a ``session/request_permission``'s ``toolCall`` (a ToolCallUpdate): the parts
        that show the call's start, as for any tool call."""
        if not isinstance(raw, dict):
            return []
        if self.profile.permission_content_is_prompt:
            # The agent's approval prompt (codex-acp: "Proposed Amendment … Available
            # Decisions …") is the card's business, never the call's output.
            raw = {k: v for k, v in raw.items() if k != "content"}
        update: Any = validate(schema.ToolCallUpdate, raw, self.warn)
        if update is None or update.tool_call_id in PLACEHOLDER_TOOL_CALL_IDS:
            # A placeholder is not merged into another permission's call, not rendered (the
            # card shows it), never closed as "ended without a result".
            return self._pause()
        return [*self._pause(), *self.tool(update)]

    def tool(self, update: Any) -> list[Part]:  # a validated ToolCall / ToolCallUpdate
        """Parts for a tool call create-or-update: its start, its output as it comes
        (``_meta.terminal_output``), then its end, once each."""
        state = self.tools.get(update.tool_call_id)
        if state is None:
            state = self.tools[update.tool_call_id] = ToolState(update.tool_call_id)
        state.merge(update)
        meta = getattr(update, "field_meta", None)
        output, exited = _terminal_meta(meta, state, getattr(update, "content", None))
        parts: list[Part] = []
        if not state.quiet and _tool_name(state.meta) in QUIET_TOOLS:
            state.quiet = True
            return [*self._pause(), {"type": "thinking", "value": f"{clip(state.title or _tool_name(state.meta), TITLE_LIMIT)}\n"}]
        if state.quiet:
            return []
        if not state.started and state.title:
            state.started = True
            if state.status not in FINAL_STATUSES:
                parts += [*self._pause(), text_part(self._under_parent(state, render_start(state)))]
        if exited is not None:
            self.live.exited(*exited)
        if output is not None:
            parts += self._live(*output)
        if state.started and not state.finished and state.status in FINAL_STATUSES:
            state.finished = True
            parts += self._end(state)
        return parts

    def terminal(self, raw: dict[str, Any]) -> list[Part]:
        """Parts for a terminal lmbridge runs for the agent (``TERMINAL_UPDATE``): its
        output as it comes; once it has exited, its block closed and how it ended."""
        terminal_id = raw.get("terminalId")
        if not isinstance(terminal_id, str):
            return []
        data = raw.get("data")
        parts = self._live(terminal_id, data) if isinstance(data, str) and data else []
        if raw.get("exited") is True:
            code, signal = raw.get("exitCode"), raw.get("signal")
            self.live.exited(terminal_id, code if isinstance(code, int) and not isinstance(code, bool) else None, signal if isinstance(signal, str) else None)
            block = self.live.blocks.get(terminal_id)
            shown = self.live.end(terminal_id)
            if shown:
                parts.append(text_part(shown))
            how = exit_line(block.exit_code, block.signal) if block is not None else ""
            # A tool call showing this terminal says how it ended on its own end line.
            owned = any(terminal_id in s.terminals for s in self.tools.values() if s.started)
            if how and shown and not owned:
                parts.append(text_part(f"_{how}_\n\n"))
        return parts

    def _live(self, terminal_id: str, data: str) -> list[Part]:
        text = self.live.feed(terminal_id, data)
        return [text_part(text)] if text else []

    def _pause(self) -> list[Part]:
        """The open output block closed, before something else is written."""
        text = self.live.pause()
        return [text_part(text)] if text else []

    def _end(self, state: ToolState) -> list[Part]:
        """A tool call's end: its output block closed (held end shown), then its line; the
        output is not shown again from the result when it was shown as it came."""
        live = [t for t in state.terminals if self.live.shown(t)]
        closing = "".join(self.live.end(t) for t in live) + self.live.pause()
        code, signal = _exit_of(state, self.live)
        how = exit_line(code, signal) if live else ""
        line = self._under_parent(state, render_end(state, live=bool(live), how=how))
        return [text_part(closing + line)] if closing else [text_part(line)]

    def _under_parent(self, state: ToolState, text: str) -> str:
        """``text`` of a subagent's tool call (``subagents.parent_tool_call``: it names the
        call that spawned it) shown under that call: quoted, its first line naming the
        parent (docs/agents.md, "Subagents"). Any other call's text as it is."""
        parent_id = subagents.parent_tool_call({"_meta": state.meta})
        if parent_id is None or parent_id == state.id:
            return text
        parent = self.tools.get(parent_id)
        # One line: a line break in the agent's title would end the quote.
        title = " ".join(parent.title.split()) if parent is not None and parent.title else ""
        name = clip(title, PARENT_TITLE_LIMIT) if title else "a subagent"
        lines = text.strip("\n").split("\n")
        lines[0] += f" · _in {name}_"
        return "\n\n" + "\n".join(f"> {line}" if line else ">" for line in lines) + "\n\n"

    def declined(self, tool_call_id: object) -> None:
        """The permission for this tool call was declined (the user's Skip, or a decline
        without a card): it reads as declined, whatever status the agent ends it with
        (``render_end``), and left open at the turn's end, not as ended without a result."""
        state = self.tools.get(tool_call_id) if isinstance(tool_call_id, str) else None
        if state is not None:
            state.declined = True

    def pause(self) -> list[Part]:
        """The open output block closed: the response ends here, and its text must not end
        inside a code block (the next response starts a new one)."""
        return self._pause()

    def left_running(self) -> bool:
        """Whether a command the agent runs itself may outlive its cancelled turn: a started,
        unfinished ``execute`` call of an agent whose profile says a cancel does not end its
        commands (``AgentProfile.cancel_leaves_commands``)."""
        return self.profile.cancel_leaves_commands and any(s.started and not s.finished and s.kind == "execute" for s in self.tools.values())

    def close(self) -> list[Part]:
        """End of turn: tool calls left open are closed (docs/agents.md: agents leave
        them ``in_progress`` forever) and forgotten: a declined one as declined. Output
        blocks still open are closed first (held ends shown)."""
        ended = self.live.close()
        self.live = LiveOutput()
        parts = [text_part(ended)] if ended else []
        parts += [
            text_part(f"\n\n✗ {_title(s)} declined\n\n" if s.declined else f"\n\n_{clip(s.title or s.id, TITLE_LIMIT)}: ended without a result._\n\n")
            for s in self.tools.values()
            if s.started and not s.finished
        ]
        self.tools.clear()
        return parts

    # -- rendering ----------------------------------------------------------

    def _plan_parts(self, entries: list[Any]) -> list[Part]:
        """A plan in full when it is new or its entries change; when only statuses change,
        one line with the entries just completed (the whole plan again, every update, read
        as the plan printed twice in the Chat view)."""
        key = tuple((e.content, getattr(e.status, "value", e.status)) for e in entries)
        previous, self._plan = self._plan, key
        if key == previous:
            return []
        if previous is not None and [c for c, _ in key] == [c for c, _ in previous]:
            done = [c for (c, status), (_, before) in zip(key, previous) if status == "completed" and before != "completed"]
            return [text_part("\n\n_" + " · ".join(f"✓ {c}" for c in done) + "_\n\n")] if done else []
        lines = [f"- [{'x' if status == 'completed' else ' '}] {content}" for content, status in key]
        return [text_part("\n\n**Plan**\n" + "\n".join(lines) + "\n\n")]


#: Characters of the spawning call's title on a subagent's tool call line.
PARENT_TITLE_LIMIT = 80
#: Characters of a tool call's title in the answer (an agent sent 100 KB; what the user
#: approves is shown whole on its card, not here).
TITLE_LIMIT = 500


def _title(state: ToolState) -> str:
    kind = f" ({state.kind})" if state.kind and state.kind != "other" else ""
    return f"**{clip(state.title or state.id, TITLE_LIMIT)}**{kind}"


def render_start(state: ToolState) -> str:
    """Markdown shown when a tool call starts: its title, kind and locations."""
    where = ", ".join(f"`{loc.path}`" for loc in state.locations[:3])
    return f"\n\n🔧 {_title(state)}{' — ' + where if where else ''}\n\n"


def render_end(state: ToolState, *, live: bool = False, how: str = "") -> str:
    """Markdown shown when a tool call ends: status and a short preview of its output or diff.
    ``live``: its output was
    shown as it came (its result's text content is not shown again). ``how``: how its
    command ended (``live.exit_line``), after the status. A call whose permission the user
    declined (``TurnRenderer.declined``) reads ``✗ … declined`` whatever status the agent ends
    it with (codex-acp 2.6.0 ends a declined command ``failed``)."""
    if state.declined:
        head = f"\n\n✗ {_title(state)} declined"
    else:
        head = f"\n\n{_ICONS.get(state.status or '', '•')} {_title(state)} {state.status}" + (f" · {how}" if how else "")
    previews = [p for p in (_preview(c) for c in state.content if not (live and getattr(c, "type", None) == "content")) if p]
    return head + ("\n\n" + "\n\n".join(previews) if previews else "") + "\n\n"


#: Lines (old + new) a diff preview is computed for; past it a summary line.
DIFF_LINES = 4000


def _clip(lines: list[str]) -> str:
    if len(lines) > PREVIEW_LINES:
        lines = lines[:PREVIEW_LINES] + [f"… ({len(lines) - PREVIEW_LINES} more lines)"]
    return "\n".join(lines)


def _preview(item: Any) -> str:
    kind = getattr(item, "type", None)
    if kind == "diff":
        old = (item.old_text or "").splitlines()
        new = (item.new_text or "").splitlines()
        if len(old) + len(new) > DIFF_LINES:
            # difflib is quadratic at worst and runs on the event loop: 60,000 lines held
            # every chat for 11 s (docs/reliability.md, "Bounds"). Past the bound, say what changed instead.
            return f"_{item.path}: {len(old)} → {len(new)} lines (too long to show as a diff)_"
        diff = list(difflib.unified_diff(old, new, item.path, item.path, lineterm="", n=1))
        return code_block(_clip(diff), "diff")
    if kind == "content":
        text = content_text(item.content)
        return code_block(_clip(text.splitlines())) if text.strip() else ""
    # A terminal's output is shown as it comes (``TurnRenderer.tool``), not here.
    return ""


def _tool_name(meta: Any) -> str:
    """The tool's own name where the agent gives it structured (claude-agent-acp's
    ``_meta.claudeCode.toolName``), else ""."""
    claude = meta.get("claudeCode") if isinstance(meta, dict) else None
    name = claude.get("toolName") if isinstance(claude, dict) else None
    return name if isinstance(name, str) else ""


def _terminal_meta(meta: Any, state: ToolState, content: Any) -> tuple[tuple[str, str] | None, tuple[str, int | None, str | None] | None]:
    """What a tool call update's ``_meta`` says of its command (codex-acp, claude-agent-acp:
    docs/agents.md): ``terminal_info``/``terminal_output``/``terminal_exit`` and ``terminal``
    content tie terminal ids to the call (``state.terminals``); returns (terminal id, output
    data) and (terminal id, exit code, signal), each None when absent or malformed."""
    ids = [getattr(c, "terminal_id", None) for c in content or () if getattr(c, "type", None) == "terminal"]
    output = exited = None
    if isinstance(meta, dict):
        for key in ("terminal_info", "terminal_output", "terminal_exit"):
            value = meta.get(key)
            if isinstance(value, dict) and isinstance(value.get("terminal_id"), str):
                ids.append(value["terminal_id"])
        out = meta.get("terminal_output")
        if isinstance(out, dict) and isinstance(out.get("terminal_id"), str) and isinstance(out.get("data"), str):
            output = (out["terminal_id"], out["data"])
        end = meta.get("terminal_exit")
        if isinstance(end, dict) and isinstance(end.get("terminal_id"), str):
            code, signal = end.get("exit_code"), end.get("signal")
            exited = (end["terminal_id"], code if isinstance(code, int) and not isinstance(code, bool) else None, signal if isinstance(signal, str) else None)
    for terminal_id in ids:
        if isinstance(terminal_id, str) and terminal_id not in state.terminals:
            state.terminals.append(terminal_id)
    return output, exited


def _exit_of(state: ToolState, live: LiveOutput) -> tuple[int | None, str | None]:
    """How a tool call's command ended: its terminal's exit (``terminal_exit``, or a terminal
    lmbridge ran), else ``rawOutput.exit_code`` (codex-acp); (None, None) when not known."""
    for terminal_id in state.terminals:
        block = live.blocks.get(terminal_id)
        if block is not None and (block.exit_code is not None or block.signal):
            return block.exit_code, block.signal
    raw = state.raw_output
    code = raw.get("exit_code") if isinstance(raw, dict) else None
    if state.terminals and isinstance(code, int) and not isinstance(code, bool):
        return code, None
    return None, None


class Skipped:
    """What the daemon could not use of an agent's traffic, counted by what was wrong (the
    warning's text: ``session/update: unknown kind 'x' skipped``), so a log says each once
    and then how many more, never one line per update: an agent that streams an unknown
    kind per token wrote a warning per token (2.4 MB of log per 20,000).

    ``first(message)``: True for a message not seen before (log it now); False after,
    counted. At most ``KINDS`` messages are told apart; past them every other one is counted
    under ``OTHERS``. ``take()``: ``(message, count)`` of what came again since the last
    ``take`` (log it at the turn's end), then forgotten."""

    KINDS = 64
    OTHERS = "other skipped updates"

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.again: dict[str, int] = {}

    def first(self, message: str) -> bool:
        if message in self.seen:
            self.again[message] = self.again.get(message, 0) + 1
            return False
        if len(self.seen) >= self.KINDS:
            self.again[self.OTHERS] = self.again.get(self.OTHERS, 0) + 1
            return False
        self.seen.add(message)
        return True

    def take(self) -> list[tuple[str, int]]:
        again, self.again = self.again, {}
        return list(again.items())


# ---------------------------------------------------------------- what the user reads about the turn
#
# The turn machine (``turn``) decides *that* the user is told something; these say *what*.
# Each note is plain data the machine hands over; ``note`` makes it the part the user reads.


@dataclass(frozen=True)
class StartNotice:
    """The agent takes long to start: ``waited`` None for the first line, else the seconds
    waited so far (each later line while it still starts)."""

    agent: str
    waited: float | None = None


@dataclass(frozen=True)
class EmptyAnswer:
    """A response would end with neither text nor a tool call (Copilot Chat shows "Sorry,
    no response was returned." for it): ``declined``, the request declined an action."""

    agent: str
    declined: bool


@dataclass(frozen=True)
class LeftOut:
    """``size`` bytes of output kept for the next request were left out (over the bound)."""

    size: int


Note = StartNotice | EmptyAnswer | LeftOut


def start_notice(agent: str, waited: float | None = None) -> str:
    """The text shown when ``agent`` takes longer than the start notice's seconds to start;
    with ``waited`` (seconds), each later line while it still starts."""
    if waited is None:
        return f"_Starting {agent}…_\n\n"
    return f"_Starting {agent}: still waiting after {waited:.0f} s (a first start may be downloading it)…_\n\n"


def is_start_notice(text: object) -> bool:
    """Whether ``text`` is a ``start_notice`` (a wall-clock artefact: replay skips it)."""
    return isinstance(text, str) and text.startswith("_Starting ") and text.endswith("…_\n\n") and "\n" not in text[:-2]


def note(n: Note) -> Part:
    """The text part the user reads for ``n``."""
    if isinstance(n, StartNotice):
        return text_part(start_notice(n.agent, n.waited))
    if isinstance(n, EmptyAnswer):
        return text_part(f"_{n.agent} ended its turn{': the action was declined' if n.declined else ' without a reply'}._")
    return text_part(f"\n\n_[{n.size} bytes of output left out]_\n\n")


def session_gone(agent: str) -> str:
    """A request that came after its session ended (the error the user reads)."""
    return f"agent {agent!r}: {SESSION_GONE}; please retry"


#: The one wording of "this chat's agent session ended under it": a request's error
#: (``session_gone``) and a control set's (``CONTROL_SESSION_GONE``).
SESSION_GONE = "its session has just ended"
#: A ``chat/setControl`` for a chat whose agent session ended (the error the user reads).
CONTROL_SESSION_GONE = f"this chat's agent: {SESSION_GONE}; send a message first"


def start_failed(agent: str, error: str, *, named: bool, renewing: bool) -> str:
    """The agent (``renewing`` False) or a new ACP session for it failed to start;
    ``named``: ``error`` names the agent already."""
    if named:
        return error
    return f"agent {agent!r} {'could not open a new session' if renewing else 'failed to start'}: {error}"


def turn_failed(agent: str, error: str, *, named: bool) -> str:
    """The agent answered ``session/prompt`` with an error."""
    return error if named else f"agent {agent!r}: {error}"


def session_closed(reason: str) -> str:
    """Requests still open when the session is closed (daemon shutdown, eviction...)."""
    return f"session closed: {reason}"
