"""A running command's output in the answer, as it comes: one code block that grows (pure).

Where it comes from (docs/agents.md): an agent that streams a command's output sends it as
``tool_call_update``s carrying ``_meta.terminal_output`` ``{terminal_id, data}`` once the
client's ``initialize`` said ``clientCapabilities._meta.terminal_output: true`` (codex-acp
while the command runs, claude-agent-acp once it has ended), and ``_meta.terminal_exit``
``{terminal_id, exit_code, signal}``; a terminal lmbridge runs itself for the agent
(``terminal/create``) feeds the same calls.

The answer is one markdown text that only grows (VS Code's Chat view appends each text
part to the response's markdown), so a command's output is *one* fenced block: the fence
is opened by its first output, every later chunk is appended as it comes, and the fence
is closed once the command has ended (its exit code after it). Only when something else
must be written in between (the agent's text, another tool call) is the fence closed
(``pause``) and opened again by the next output.

Bounded: the first ``head`` bytes of a command's output are streamed; past them the output
is held as a ring of its last ``tail`` bytes and shown once the command ends, after a line
``[… earlier output left out: N KiB]``. So a command's block is at most ``head + tail``
bytes and memory holds at most ``tail`` of it, whatever the command prints.

No I/O, no clock: ``LiveOutput`` is fed data and returns the text to append.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Bytes of a command's output streamed into the answer as it comes.
HEAD = 8 * 1024
#: Bytes of its end kept past ``HEAD`` and shown when it ends.
TAIL = 8 * 1024
FENCE = "````"  # four backticks: output holding a ``` line does not close the block
LEFT_OUT = "[… earlier output left out: {size}]"

# Terminal control sequences (colours, cursor moves, OSC titles) mean nothing in markdown.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Other control characters but tab and newline (a NUL, a bell) are dropped too.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# A line that could close the fence: up to 3 spaces, then a backtick (one is enough: a
# line's backticks may come in two chunks).
_FENCE_LIKE = re.compile(r"(?m)^( {0,3})(`)")


def clean(data: str) -> str:
    """``data`` as plain text for a code block: ``\\r\\n`` → ``\\n``, a lone ``\\r`` → ``\\n``,
    terminal escape sequences and other control characters dropped."""
    data = data.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", _ANSI.sub("", data))


def _size(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} bytes"


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _last_bytes(text: str, limit: int) -> str:
    """The end of ``text`` within ``limit`` UTF-8 bytes, starting at a line when one starts
    in the last half (a cut line reads as garbage)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    tail = data[-limit:].decode("utf-8", "ignore")
    newline = tail.find("\n")
    return tail[newline + 1 :] if 0 <= newline < len(tail) // 2 else tail


@dataclass
class Block:
    """One command's output as shown so far.

    ``shown``: bytes streamed (at most ``head``); ``held``: its last bytes past ``head``
    (at most ``tail``), shown at the end; ``left_out``: bytes neither shown nor held.
    ``at_line_start``: the text shown so far ends a line (a fence-like line is escaped only
    where a line starts). ``exit_code``/``signal``: how it ended, once known."""

    head: int = HEAD
    tail: int = TAIL
    shown: int = 0
    held: str = ""
    left_out: int = 0
    at_line_start: bool = True
    ended: bool = False
    exit_code: int | None = None
    signal: str | None = None
    any_output: bool = False

    def take(self, data: str) -> str:
        """The part of cleaned ``data`` to show now; the rest is held (bounded)."""
        if not data:
            return ""
        self.any_output = True
        room = self.head - self.shown
        if room > 0 and not self.held:
            size = _utf8_len(data)
            if size <= room:
                self.shown += size
                return data
            now = data.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
            if "\n" in now:  # whole lines: the rest goes to the end
                now = now[: now.rindex("\n") + 1]
            self.shown = self.head
            data = data[len(now) :]
        else:
            now = ""
        held = self.held + data
        kept = _last_bytes(held, self.tail)
        self.left_out += _utf8_len(held) - _utf8_len(kept)
        self.held = kept
        return now


@dataclass
class LiveOutput:
    """Every command's live block in one answer, by terminal id (pure).

    ``feed`` / ``end`` / ``pause`` return the text to append to the answer now ("" for
    nothing). At most one fence is open at a time (``open``: the terminal id whose fence
    is open)."""

    head: int = HEAD
    tail: int = TAIL
    blocks: dict[str, Block] = field(default_factory=dict)
    open: str | None = None

    def block(self, terminal_id: str) -> Block:
        found = self.blocks.get(terminal_id)
        if found is None:
            found = self.blocks[terminal_id] = Block(self.head, self.tail)
        return found

    def shown(self, terminal_id: str) -> bool:
        """Whether any output of ``terminal_id`` came (then it is not shown again from the
        tool call's result)."""
        block = self.blocks.get(terminal_id)
        return block is not None and block.any_output

    def feed(self, terminal_id: str, data: str) -> str:
        """Output of ``terminal_id``: the text that continues its block (the fence opened
        first, another block's closed first)."""
        block = self.block(terminal_id)
        if block.ended:
            return ""
        now = block.take(clean(data))
        if not now:
            return ""
        out = ""
        if self.open != terminal_id:
            out += self.pause()
            out += f"\n\n{FENCE}text\n"
            self.open = terminal_id
            block.at_line_start = True
        out += _escape(now, block.at_line_start)
        block.at_line_start = now.endswith("\n")
        return out

    def exited(self, terminal_id: str, exit_code: int | None, signal: str | None) -> None:
        """How ``terminal_id``'s command ended (shown by ``end``)."""
        block = self.block(terminal_id)
        block.exit_code, block.signal = exit_code, signal

    def end(self, terminal_id: str) -> str:
        """``terminal_id``'s command has ended: its held end (after the left-out line) and
        the fence's close. "" when nothing of it was shown."""
        block = self.blocks.get(terminal_id)
        if block is None or block.ended:
            return ""
        block.ended = True
        if not (block.held or block.left_out):
            # All of it was shown as it came: only its fence, if still open, to close (a
            # block paused by other text is not opened again for nothing).
            return self.pause() if self.open == terminal_id else ""
        out = ""
        if self.open != terminal_id:
            out += self.pause()
            out += f"\n\n{FENCE}text\n"
            block.at_line_start = True
        if block.held or block.left_out:
            if not block.at_line_start:
                out += "\n"
            out += LEFT_OUT.format(size=_size(block.left_out)) + "\n"
            block.at_line_start = True
            if block.held:
                out += _escape(block.held, True)
                block.at_line_start = block.held.endswith("\n")
            block.held = ""
        self.open = terminal_id
        return out + self.pause()

    def pause(self) -> str:
        """Close the open fence (something else is written next); "" when none is open."""
        if self.open is None:
            return ""
        block = self.blocks.get(self.open)
        self.open = None
        newline = "" if block is None or block.at_line_start else "\n"
        return f"{newline}{FENCE}\n\n"

    def close(self) -> str:
        """The turn ended: every block is over (held ends shown), the fence closed."""
        out = "".join(self.end(terminal_id) for terminal_id in list(self.blocks))
        return out + self.pause()


def exit_line(exit_code: int | None, signal: str | None) -> str:
    """How a command ended, for the end of its tool call's line: ``exit code 0``,
    ``killed by SIGTERM``; "" when not known."""
    if signal:
        return f"killed by {signal}"
    if exit_code is not None:
        return f"exit code {exit_code}"
    return ""


def _escape(text: str, at_line_start: bool) -> str:
    """``text`` with every line that starts with a backtick broken by a zero-width space, so no output line closes the block. ``at_line_start``: ``text``
    begins a line (else its first line continues one already shown)."""
    first = ""
    if not at_line_start:
        cut = text.find("\n") + 1
        if cut == 0:
            return text
        first, text = text[:cut], text[cut:]
    return first + _FENCE_LIKE.sub(lambda m: f"{m.group(1)}\u200b{m.group(2)}", text)
