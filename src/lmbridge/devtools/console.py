"""``lmbridge console``: an interactive developer console on the wire protocol.

It plays VS Code's part against the daemon (``lmbridge serve``, or any command given
with ``--cmd``) through :class:`lmbridge.devtools.client.DaemonClient`: it initializes with the
current directory as the workspace, lists the models and chats with one of them,
showing text, thinking and tool calls as they stream. Each ``symposium-agent-action``
call (an agent's permission request) is asked **[a]llow / [s]kip / s[t]op** and
answered exactly as VS Code answers it:

- Allow: a tool result whose text is the call's ``approvalToken`` (what the shim's tool
  returns);
- Skip: a tool result with VS Code's Skip text (:data:`lmbridge.core.messages.VSCODE_SKIP_TEXT`);
- Stop: nothing is sent at once (the request that asked has ended); the round with the
  call is dropped from the history, so the next request does not hold it, and the daemon
  cancels the agent's turn when that request arrives.

Several calls in one response are asked one by one and answered together in the next
request. Ctrl-C while a request runs sends ``$/cancelRequest`` (the history keeps the
user message without an answer, as VS Code does); a second Ctrl-C, or one at an empty
prompt, quits. ``--script FILE`` runs the same session from a file (format in
docs/console.md). The daemon's command line is assembled in :func:`daemon_command`
only, so daemon options (e.g. a future ``--record FILE``) are added in one place.

prompt_toolkit (the `console` extra, not a daemon dependency) is imported only on the interactive path.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

import anyio

from lmbridge import self_command
from lmbridge.devtools.client import DaemonClient, RPCError, SentRequest, approve, assistant, chat_options, is_agent_action, skip, tool_calls, tool_result, user, without_last_round

CardChoice = Literal["allow", "skip", "stop"]
QUESTION = "[a]llow / [s]kip / s[t]op? "
ANSWERS: dict[str, CardChoice] = {"a": "allow", "allow": "allow", "s": "skip", "skip": "skip", "t": "stop", "stop": "stop"}
COMMANDS = ("/model", "/models", "/new", "/history", "/send", "/raw", "/help", "/quit", "/exit")
DEFAULT_SCRIPT_TIMEOUT = 120.0
CHAT_METHOD = "lm/provideLanguageModelChatResponse"

HELP = """\
Type a message to send it to the current model (start it with // to send a text that starts with /).
  /model [ID]        show the models, or chat with ID from the next message on (the history is kept)
  /models            list the models again (asks the daemon)
  /new               start a new chat (empty history)
  /history [json]    show the history the next request will carry
  /send {json}       send a raw JSON-RPC frame (a request's answer and parts are shown)
  /raw on|off        show every frame, both ways (instead of the rendered text and thinking)
  /help              this help
  /quit              quit (also Ctrl-D, or Ctrl-C at an empty prompt)
At a permission prompt: a = allow, s = skip, t = stop. Ctrl-C while a request runs cancels it."""


class ConsoleError(Exception):
    """A problem of the console itself (a bad script, a bad command line)."""


def daemon_command(cmd: str | None = None, serve_args: Sequence[str] = ()) -> list[str]:
    """The daemon's command line, assembled here and only here.

    Default: this Python's ``lmbridge serve``; ``cmd`` (``--cmd``), split shell-style,
    replaces it. ``serve_args`` are daemon options the console passes through (the place
    for a future ``--record FILE``); they are appended to either.
    """
    if cmd is not None:
        base = shlex.split(cmd)
        if not base:
            raise ConsoleError("--cmd is empty")
    else:
        base = self_command("serve")
    return [*base, *serve_args]


def daemon_env() -> dict[str, str]:
    """The daemon's environment: ours, with its logs at warning level unless asked otherwise
    (its stderr shares the terminal with the transcript)."""
    env = dict(os.environ)
    env.setdefault("LMBRIDGE_LOG_LEVEL", "warning")
    return env


# ------------------------------------------------------------------ output


DIM, BOLD, RED, CYAN, YELLOW = "2", "1", "31", "36", "33"


class Printer:
    """Writes the transcript: streamed text and thinking, and whole lines around them."""

    def __init__(self, stream: TextIO, color: bool) -> None:
        self.stream = stream
        self.color = color
        self.at_line_start = True
        self.mode: str | None = None  # "text" | "thinking" while a response streams

    def style(self, text: str, code: str | None) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color and code and text else text

    def _write(self, text: str, code: str | None = None) -> None:
        if not text:
            return
        self.stream.write(self.style(text, code))
        self.stream.flush()
        self.at_line_start = text.endswith("\n")

    def newline(self) -> None:
        if not self.at_line_start:
            self._write("\n")
        self.mode = None

    def line(self, text: str = "", code: str | None = None) -> None:
        """A whole line (after ending the current one)."""
        self.newline()
        self._write(text + "\n", code)

    def text(self, value: str) -> None:
        if self.mode != "text":
            self.newline()
            self.mode = "text"
        self._write(value)

    def thinking(self, value: str) -> None:
        if self.mode != "thinking":
            self.newline()
            self._write("💭 ", DIM)
            self.mode = "thinking"
        self._write(value, DIM)

    def inline(self, text: str) -> None:
        """Text on the current line (a prompt and its answer in script mode)."""
        self._write(text)


def _compact(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ------------------------------------------------------------------ input


@dataclass
class Line:
    """One input: a message to send or a /command line."""

    kind: Literal["message", "command"]
    text: str


class Input(Protocol):
    async def read(self) -> Line | None:
        """The next message or command; None to quit."""

    async def ask(self, question: str) -> CardChoice:
        """The answer to a permission prompt."""


def parse_line(text: str) -> Line | None:
    """An interactive line: ``/cmd`` is a command, ``//text`` the message ``/text``."""
    stripped = text.strip()
    if not stripped:
        return None
    if stripped.startswith("//"):
        return Line("message", text.lstrip()[1:])
    if stripped.startswith("/"):
        return Line("command", stripped)
    return Line("message", text)


@dataclass
class Step:
    lineno: int
    kind: Literal["message", "command", "answer"]
    text: str


def parse_script(source: Iterable[str], name: str = "script") -> list[Step]:
    """Parse a console script (docs/console.md): ``> message``, ``/command ...``, an answer
    (``allow``/``a``, ``skip``/``s``, ``stop``/``t``), blank lines and ``# comments``."""
    steps: list[Step] = []
    for lineno, raw in enumerate(source, 1):
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith(">"):
            message = stripped[1:]
            message = message[1:] if message.startswith(" ") else message
            if not message.strip():
                raise ConsoleError(f"{name}:{lineno}: empty message")
            steps.append(Step(lineno, "message", message))
        elif stripped.startswith("/"):
            word = stripped.split(maxsplit=1)[0]
            if word not in COMMANDS:
                raise ConsoleError(f"{name}:{lineno}: unknown command {word} (known: {', '.join(COMMANDS)})")
            steps.append(Step(lineno, "command", stripped))
        elif stripped.lower() in ANSWERS:
            steps.append(Step(lineno, "answer", ANSWERS[stripped.lower()]))
        else:
            raise ConsoleError(
                f"{name}:{lineno}: expected '> message', a /command, or an answer (allow, skip, stop): {stripped!r}"
            )
    return steps


class ScriptInput:
    """Feeds a parsed script; prints each step as if it had been typed."""

    def __init__(self, steps: list[Step], printer: Printer, name: str) -> None:
        self.steps = list(steps)
        self.printer = printer
        self.name = name
        self.index = 0

    def _next(self) -> Step | None:
        if self.index >= len(self.steps):
            return None
        step = self.steps[self.index]
        self.index += 1
        return step

    async def read(self) -> Line | None:
        step = self._next()
        if step is None:
            return None
        if step.kind == "answer":
            raise ConsoleError(f"{self.name}:{step.lineno}: '{step.text}' answers no permission prompt")
        self.printer.line(f"you> {step.text}", BOLD)
        return Line(step.kind, step.text)

    async def ask(self, question: str) -> CardChoice:
        self.printer.newline()
        self.printer.inline(question)
        step = self._next()
        if step is None or step.kind != "answer":
            where = f"line {step.lineno}" if step else "the end of the script"
            self.printer.line()
            raise ConsoleError(f"{self.name}: a permission prompt needs an answer (allow, skip or stop), found {where}")
        self.printer.inline(step.text + "\n")
        return step.text  # type: ignore[return-value]


class TerminalInput:
    """prompt_toolkit prompts: line editing and history; Ctrl-C clears the line, or at an
    empty prompt quits; Ctrl-C or Ctrl-D at a permission prompt is Stop."""

    def __init__(self, history_file: Path | None) -> None:
        try:
            import prompt_toolkit  # noqa: F401
        except ImportError as exc:
            raise ConsoleError("the interactive console needs prompt_toolkit: pip install 'lmbridge[console]' (or use --script FILE)") from exc
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings

        bindings = KeyBindings()

        @bindings.add("c-c")
        def _(event: Any) -> None:
            buffer = event.app.current_buffer
            if buffer.text:
                buffer.reset()
            else:
                event.app.exit(exception=KeyboardInterrupt())

        history = FileHistory(str(history_file)) if history_file else InMemoryHistory()
        self.session: Any = PromptSession(history=history, key_bindings=bindings)
        self.answers: Any = PromptSession(key_bindings=bindings)

    async def read(self) -> Line | None:
        while True:
            try:
                text = await self.session.prompt_async("you> ", handle_sigint=False)
            except (KeyboardInterrupt, EOFError):
                return None
            line = parse_line(text)
            if line is not None:
                return line

    async def ask(self, question: str) -> CardChoice:
        while True:
            try:
                text = await self.answers.prompt_async(question, handle_sigint=False)
            except (KeyboardInterrupt, EOFError):
                return "stop"
            answer = ANSWERS.get(text.strip().lower())
            if answer:
                return answer


# ------------------------------------------------------------------ the console


@dataclass
class ConsoleOptions:
    cmd: str | None = None
    script: str | None = None  # a path, or "-" for stdin
    model: str | None = None
    raw: bool = False
    timeout: float | None = None  # per request; None: no limit (interactive default)
    history_file: Path | None = None
    serve_args: list[str] = field(default_factory=list)  # passed through to the daemon (daemon_command)


class Console:
    """One session with the daemon: the chat history VS Code would keep, the current
    model, and the permission loop."""

    def __init__(self, client: DaemonClient, printer: Printer, input: Input, options: ConsoleOptions) -> None:
        self.client = client
        self.out = printer
        self.input = input
        self.options = options
        self.scripted = isinstance(input, ScriptInput)
        self.history: list[dict[str, Any]] = []
        self.models: list[dict[str, Any]] = []
        self.model: str | None = options.model
        self.raw = options.raw
        self.exit_code = 0
        self.current: SentRequest | None = None  # the request Ctrl-C cancels
        self.cancel_sent = False
        self.closing = False
        self.quit_scope = anyio.CancelScope()
        client.on_frame = self._on_frame
        client.on_unmatched = self._on_unmatched

    # -- frames ----------------------------------------------------------------

    def _on_frame(self, direction: str, frame: dict[str, Any]) -> None:
        if self.raw:
            arrow = "→" if direction == "out" else "←"
            self.out.line(f"{arrow} {json.dumps(frame, ensure_ascii=False)}", DIM)

    def _on_unmatched(self, frame: dict[str, Any]) -> None:
        if "error" in frame:
            self.fail()
        if self.raw and "nonJsonLine" not in frame:
            return  # already shown
        self.out.line(f"← (no request of ours) {json.dumps(frame, ensure_ascii=False)}", YELLOW)

    def show_part(self, part: dict[str, Any]) -> None:
        kind = part.get("type")
        if self.raw and kind in ("text", "thinking"):
            return  # its frame is shown; rendering it too would cut the text at every frame
        if kind == "text":
            self.out.text(part.get("value", ""))
        elif kind == "thinking":
            self.out.thinking(part.get("value", ""))
        elif kind == "tool_call":
            self._show_tool_call(part)
        else:
            self.out.line(f"(part) {_compact(part)}", DIM)

    def _show_tool_call(self, part: dict[str, Any]) -> None:
        data = part.get("input") or {}
        if not is_agent_action(part):
            self.out.line(f"⚙ tool call {part.get('name')} [{part.get('callId')}] {_compact(data)}", CYAN)
            return
        # The card as VS Code shows it: its heading, then its markdown as it is.
        self.out.line(f"⚙ permission requested: {data.get('title')}  [{part.get('name')} {part.get('callId')}]", CYAN)
        for line in str(data.get("message") or "").splitlines():
            self.out.line(f"    {line}" if line else "")

    def error(self, message: str) -> None:
        self.out.line(f"error: {message}", RED)
        self.fail()

    def fail(self) -> None:
        self.exit_code = 1

    # -- lifecycle -------------------------------------------------------------

    async def run(self) -> int:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_daemon)
            tg.start_soon(self._watch_sigint)
            with self.quit_scope:
                try:
                    await self._session()
                except ConsoleError as exc:
                    self.error(str(exc))
            self.closing = True
            tg.cancel_scope.cancel()
        self.out.newline()
        return self.exit_code

    def quit(self, code: int | None = None) -> None:
        if code is not None:
            self.exit_code = code
        self.closing = True
        self.quit_scope.cancel()

    async def _watch_daemon(self) -> None:
        code = await self.client.process.wait()
        if not self.closing:
            self.error(f"the daemon exited (code {code})")
            self.quit(1)

    async def _watch_sigint(self) -> None:
        """SIGINT arrives while no prompt is shown (a prompt reads Ctrl-C as a key): the
        first cancels the running request, a second (or one with none running) quits."""
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                if self.current is not None and not self.cancel_sent:
                    self.cancel_sent = True
                    self.out.line("^C cancelling the request (Ctrl-C again to quit)", YELLOW)
                    await self.client.cancel(self.current)
                else:
                    self.out.line("^C quitting", YELLOW)
                    self.quit(130 if self.scripted else None)

    async def _session(self) -> None:
        cwd = os.getcwd()
        info = await self._request("initialize", lambda: self.client.initialize(workspace=[cwd], client_name="lmbridge-console"))
        if info is None:
            return
        server = info.get("serverInfo", {})
        self.out.line(
            f"lmbridge console: daemon {server.get('name')} {server.get('version')} (pid {self.client.process.pid}), "
            f"protocol {info.get('protocolVersion')}, workspace {cwd}",
            BOLD,
        )
        if not await self._list_models():
            return
        if self.model is None and self.models:
            self.model = self.models[0]["id"]
        self.out.line(f"model: {self.model}")
        if not self.scripted:
            self.out.line("Type a message, /help for commands. Ctrl-C cancels a request; at an empty prompt it quits.", DIM)
        while True:
            if self.scripted and self.exit_code:
                self.out.line("script stopped at the first error", RED)
                return
            line = await self.input.read()
            if line is None:
                return
            if line.kind == "message":
                await self.send_message(line.text)
            elif not await self.command(line.text):
                return

    async def _request(self, what: str, send: Any) -> Any:
        try:
            with anyio.fail_after(self.options.timeout or 60.0):
                return await send()
        except RPCError as exc:
            self.error(f"{what}: {exc}")
        except TimeoutError:
            self.error(f"{what}: no answer from the daemon")
        return None

    async def _list_models(self) -> bool:
        result = await self._request(
            "lm/provideLanguageModelChatInformation", lambda: self.client.request("lm/provideLanguageModelChatInformation", {})
        )
        if result is None:
            return False
        self.models = list(result.get("models", []))
        listing = ", ".join(f"{m['id']} ({m.get('name', m['id'])})" for m in self.models) or "none"
        self.out.line(f"models: {listing}")
        return True

    # -- chat ------------------------------------------------------------------

    async def send_message(self, text: str) -> None:
        """One user message: the request, then a request per round of permission answers."""
        if self.model is None:
            self.error("no model: the daemon listed none; choose one with /model ID")
            return
        self.history.append(user(text))
        while True:
            call = await self._chat()
            if call is None:
                return
            if call.error is not None:
                self.error(f"{call.error.message} (code {call.error.code})")
                return
            reason = (call.result or {}).get("stopReason")
            self.out.line(f"[{reason}]", DIM)
            if reason == "cancelled":
                return  # VS Code keeps the user message without an answer
            self.history.append(assistant(call.parts))
            calls = tool_calls(call)
            if reason != "tool_calls" or not calls:
                return
            results = await self._answer(calls)
            if results is None:
                self.history = without_last_round(self.history)
                self.out.line("stopped: this round leaves the history; the daemon cancels the agent's turn at the next request", YELLOW)
                return
            self.history.extend(results)

    async def _chat(self) -> SentRequest | None:
        # The console asks about agent actions as Agent mode does: it offers the action tools.
        params = {"modelId": self.model, "messages": list(self.history), "options": chat_options()}
        call = await self.client.start(CHAT_METHOD, params, on_part=self.show_part)
        if not await self._wait(call):
            return None
        return call

    async def _wait(self, call: SentRequest) -> bool:
        """Wait for a request's end; Ctrl-C cancels it. False on timeout."""
        self.current, self.cancel_sent = call, False
        try:
            with anyio.move_on_after(self.options.timeout) as scope:
                await call.done.wait()
        finally:
            self.current = None
        if scope.cancelled_caught:
            await self.client.cancel(call)
            self.error(f"request {call.id}: no answer within {self.options.timeout:g} s (sent $/cancelRequest)")
            return False
        return True

    async def _answer(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Ask each permission in turn; the tool results to send, or None for Stop."""
        results = []
        actions = [c for c in calls if is_agent_action(c)]
        for part in calls:
            if not is_agent_action(part):
                # The console offers VS Code no tools of its own.
                results.append(tool_result(part["callId"], f"The lmbridge console has no tool named {part.get('name')!r}."))
                continue
            title = (part.get("input") or {}).get("title") or part["callId"]
            counter = f" {actions.index(part) + 1}/{len(actions)}" if len(actions) > 1 else ""
            answer = await self.input.ask(f"permission{counter} {title!r}: {QUESTION}")
            if answer == "stop":
                return None
            results.append(approve(part) if answer == "allow" else skip(part))
            self.out.line(f"→ {'allowed (approval token)' if answer == 'allow' else 'skipped (VS Code Skip text)'}", DIM)
        return results

    # -- commands --------------------------------------------------------------

    async def command(self, text: str) -> bool:
        """Run a /command; False to quit."""
        word, _, arg = text.partition(" ")
        arg = arg.strip()
        if word in ("/quit", "/exit"):
            return False
        if word == "/help":
            self.out.line(HELP)
        elif word == "/new":
            self.history = []
            self.out.line("new chat: the history is empty", DIM)
        elif word == "/models":
            await self._list_models()
        elif word == "/model":
            if not arg:
                listing = ", ".join(m["id"] for m in self.models) or "none"
                self.out.line(f"model: {self.model} (listed: {listing})")
            else:
                if arg not in {m["id"] for m in self.models}:
                    await self._list_models()  # an agent's own models are listed once the daemon has learnt them
                if arg not in {m["id"] for m in self.models}:
                    self.out.line(f"warning: {arg!r} is not among the listed models; the daemon will say so", YELLOW)
                self.model = arg
                self.out.line(f"model: {arg}")
        elif word == "/history":
            self._show_history(as_json=arg == "json")
        elif word == "/raw":
            if arg not in ("on", "off"):
                self.error("usage: /raw on|off")
            else:
                self.raw = arg == "on"
                self.out.line(f"raw frames {arg}", DIM)
        elif word == "/send":
            await self._send(arg)
        else:
            self.error(f"unknown command {word}; /help lists them")
        return True

    def _show_history(self, as_json: bool) -> None:
        if as_json:
            self.out.line(json.dumps(self.history, ensure_ascii=False, indent=2))
            return
        self.out.line(f"history: {len(self.history)} message(s), model {self.model}")
        for index, message in enumerate(self.history, 1):
            pieces = []
            for part in message.get("content", []):
                kind = part.get("type")
                if kind == "text":
                    pieces.append(_compact(part.get("value", "").strip(), 100))
                elif kind == "tool_call":
                    pieces.append(f"tool_call {part.get('name')} {part.get('callId')}")
                elif kind == "tool_result":
                    text = "".join(c.get("value", "") for c in part.get("content", []) if c.get("type") == "text")
                    pieces.append(f"tool_result {part.get('callId')}: {_compact(text, 60)}")
                else:
                    pieces.append(kind or "?")
            self.out.line(f"  {index:>2} {message.get('role'):<9} " + " | ".join(pieces))

    async def _send(self, arg: str) -> None:
        try:
            frame = json.loads(arg)
        except ValueError as exc:
            self.error(f"/send: not JSON: {exc}")
            return
        if not isinstance(frame, dict):
            self.error("/send: a frame is a JSON object")
            return
        if "method" not in frame or "id" not in frame:
            await self.client.send_frame(frame)
            self.out.line("sent (a notification or a response: no answer is awaited)", DIM)
            return
        call = await self.client.start_frame(frame, on_part=self.show_part)
        if not await self._wait(call):
            return
        if call.error is not None:
            self.error(f"{call.error.message} (code {call.error.code})")
        else:
            self.out.line(f"← result {json.dumps(call.result, ensure_ascii=False)}")


# ------------------------------------------------------------------ entry points


async def run(options: ConsoleOptions, input: Input, printer: Printer, stderr: Any = None) -> int:
    command = daemon_command(options.cmd, options.serve_args)
    spawned = False
    try:
        async with DaemonClient.spawn(command, env=daemon_env(), stderr=stderr, start_new_session=True) as client:
            spawned = True
            console = Console(client, printer, input, options)
            code = await console.run()
            console.closing = True
    except OSError as exc:
        if spawned:
            raise
        printer.line(f"error: cannot start the daemon {shlex.join(command)}: {exc}", RED)
        return 1
    printer.line(f"daemon exited (code {client.process.returncode})", DIM)
    return code


def main(options: ConsoleOptions) -> int:
    """``lmbridge console``: 0 on success, 1 on an error (an error response in a script),
    2 on a usage problem, 130 when a script is interrupted."""
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    printer = Printer(sys.stdout, color)
    try:
        daemon_command(options.cmd, options.serve_args)
        if options.script is not None:
            name = "<stdin>" if options.script == "-" else options.script
            if options.script == "-":
                steps = parse_script(sys.stdin, name)
            else:
                with open(options.script, encoding="utf-8") as source:
                    steps = parse_script(source, name)
            if options.timeout is None:
                options.timeout = DEFAULT_SCRIPT_TIMEOUT
            input: Input = ScriptInput(steps, printer, name)
        else:
            if not sys.stdin.isatty():
                raise ConsoleError("stdin is not a terminal: use --script FILE (or --script - to read a script from stdin)")
            input = TerminalInput(options.history_file)
    except (ConsoleError, OSError) as exc:
        print(f"lmbridge console: {exc}", file=sys.stderr)
        return 2
    try:
        return anyio.run(run, options, input, printer, backend="asyncio")
    except KeyboardInterrupt:
        return 130
