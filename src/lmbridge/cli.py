"""The ``lmbridge`` command line: ``serve``, ``demo-agent``, ``console``, ``replay``, ``mcp-stdio``.

Heavy modules are imported inside each command, so ``lmbridge serve`` starts
fast (the shim waits for its ``initialize`` answer).
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lmbridge import __version__

if TYPE_CHECKING:
    from lmbridge.daemon.session_index import SessionIndex

LOG_LEVELS = ["debug", "info", "warning", "error"]


def _log_level(flag: str | None) -> str:
    """The --log-level flag, else $LMBRIDGE_LOG_LEVEL if it names a level, else info."""
    if flag:
        return flag
    env = os.environ.get("LMBRIDGE_LOG_LEVEL", "").strip().lower()
    if env and env not in LOG_LEVELS:
        print(f"lmbridge: ignoring LMBRIDGE_LOG_LEVEL={env!r} (one of {', '.join(LOG_LEVELS)}); using info", file=sys.stderr)
    return env if env in LOG_LEVELS else "info"


#: The commands, in the order ``lmbridge --help`` lists them: what each does.
COMMANDS = {
    "serve": "run the daemon on stdio (what VS Code spawns)",
    "sessions": "list (or clear) the session index: which agent session each chat continues",
    "demo-agent": "run the built-in demo ACP agent on stdio",
    "mcp-stdio": "(spawned by agents) stdio relay to the daemon's MCP server for VS Code tools",
    "console": "an interactive developer console on the wire protocol (docs/console.md)",
    "replay": "re-run recorded sessions through the daemon, agents played back (docs/replay.md)",
}


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: with ``command`` (one of ``COMMANDS``) only that command's
    own parser is built under it, else every command's. argparse looks up a translation for
    each parser's messages (``gettext``: ~1 ms a parser here), so ``lmbridge serve`` builds
    one (docs/performance.md, "Start-up: the parser, the wire models and the catalog")."""
    parser = argparse.ArgumentParser(prog="lmbridge", description="ACP agents as VS Code language models.")
    parser.add_argument("--version", action="version", version=f"lmbridge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in COMMANDS.items():
        if command is None or command == name:
            _ARGUMENTS[name](sub.add_parser(name, help=text))
    return parser


def _serve_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--agent", action="append", default=[], metavar="ID=COMMAND", help=(
        "offer an ACP agent as model ID (repeatable; COMMAND split shell-style); "
        "a preset's ID alone (claude, codex, gemini, fast-agent) starts its pinned command"
    ))
    serve.add_argument("--config", type=Path, help="JSON config file with agents and idleTimeout")
    serve.add_argument("--idle-timeout", type=float, help="seconds before an unused session is evicted (default 1800)")
    serve.add_argument(
        "--max-agent-processes",
        type=int,
        metavar="N",
        help="live ACP sessions per agent (they share one agent process; claude-agent-acp runs a child process for each); "
        "the least recently used idle one is closed for a new chat "
        "(default: $LMBRIDGE_MAX_AGENT_PROCESSES, else 4)",
    )
    serve.add_argument(
        "--session-wait", type=float, metavar="SECONDS",
        help="how long a new chat waits for a free session when all --max-agent-processes of its agent are busy "
        "(answering, or showing a permission card) before it is refused (default: $LMBRIDGE_SESSION_WAIT, else 120; 0: at once)",
    )  # fmt: skip
    serve.add_argument(
        "--state-dir", type=Path, metavar="DIR",
        help="where the session index lives (default $XDG_STATE_HOME/lmbridge, else ~/.local/state/lmbridge)",
    )  # fmt: skip
    serve.add_argument("--no-state", action="store_true", help="persist nothing: chats continue in a fresh agent session after a restart")
    serve.add_argument(
        "--no-prewarm", action="store_true",
        help="do not start the agents used last right after initialize (default: $LMBRIDGE_PREWARM, else on)",
    )  # fmt: skip
    serve.add_argument(
        "--spare-session", action=argparse.BooleanOptionalAction, default=None,
        help="keep one ACP session ready per running agent, so a new chat does not wait for session/new "
        "(default: $LMBRIDGE_SPARE_SESSION, else on; --no-spare-session turns it off)",
    )  # fmt: skip
    serve.add_argument("--log-level", default=None, choices=LOG_LEVELS, help="default: $LMBRIDGE_LOG_LEVEL, else info")
    serve.add_argument("--log-json", action="store_true", help="log JSON lines on stderr")
    serve.add_argument("--debug-idle", action="store_true", help="answer debug/idle once every task waits (replay's step signal; docs/protocol.md)")
    launcher_help = "ask COMMAND (split shell-style; one JSON argument more: the agent process) what to start in each agent's place (replay's stand-ins; docs/replay.md)"
    serve.add_argument("--agent-launcher", metavar="COMMAND", help=launcher_help)
    serve.add_argument(
        "--record", type=Path, metavar="FILE",
        help="write every frame on every link to FILE, secrets redacted (docs/recording.md); implies --no-state",
    )  # fmt: skip


def _sessions_arguments(sessions: argparse.ArgumentParser) -> None:
    sessions.add_argument("--state-dir", type=Path, metavar="DIR", help="as lmbridge serve's")
    sessions.add_argument("--clear", action="store_true", help="forget every session (chats then continue in a fresh agent session)")
    sessions.add_argument("--json", action="store_true", help="print the entries as JSON")


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--scratch", metavar="DIR", help="the folder its writes go to (default: $LMBRIDGE_DEMO_SCRATCH, else a new private one)")


def _relay_arguments(relay: argparse.ArgumentParser) -> None:
    relay.add_argument("--socket", required=True, help="the daemon's MCP Unix socket")
    relay.add_argument("--session", required=True, help="the session whose tools to serve")


def _console_arguments(console: argparse.ArgumentParser) -> None:
    console.add_argument("--cmd", metavar="COMMAND", help="run this daemon command instead of 'lmbridge serve' (split shell-style)")
    console.add_argument("--script", metavar="FILE", help="run a script non-interactively ('-': stdin); exits 1 on an error response")
    console.add_argument("--model", help="the model to chat with (default: the first one listed)")
    console.add_argument("--raw", action="store_true", help="show every frame both ways from the start (as /raw on)")
    console.add_argument("--timeout", type=float, metavar="SECONDS", help="limit for each request (default: none; 120 with --script)")
    console.add_argument("--history-file", type=Path, metavar="FILE", help="keep the prompt's line history in FILE")
    console.add_argument("--record", type=Path, metavar="FILE", help="the daemon records the session to FILE (lmbridge serve --record)")


def _replay_arguments(replay: argparse.ArgumentParser) -> None:
    replay.add_argument("files", nargs="+", metavar="FILE", help="recordings (a directory: its *.jsonl files)")
    replay.add_argument("--realtime", action="store_true", help="keep the recorded pacing (default: as fast as the daemon answers)")
    replay.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="how long an expected output may be late, beyond the recorded gap (default 10)")
    replay.add_argument("--log-level", default="error", choices=LOG_LEVELS, help="the daemon's log level on stderr (default error)")


_ARGUMENTS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "serve": _serve_arguments, "sessions": _sessions_arguments, "demo-agent": _demo_arguments,
    "mcp-stdio": _relay_arguments, "console": _console_arguments, "replay": _replay_arguments,
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The command named first builds only its own parser (a flag first: every command's).
    args = _parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "mcp-stdio":
        from lmbridge.tools.mcp_relay import main as relay_main

        return relay_main(args.socket, args.session)
    if args.command == "sessions":
        return _sessions(args)
    if args.command == "demo-agent":
        from lmbridge.devtools.demo_agent import SCRATCH_ENV
        from lmbridge.devtools.demo_agent import main as demo_agent_main

        if args.scratch:  # an argument, not the environment: a recording keeps it (it redacts env values)
            os.environ[SCRATCH_ENV] = args.scratch
        return demo_agent_main()
    if args.command == "console":
        from lmbridge.devtools.console import ConsoleOptions
        from lmbridge.devtools.console import main as console_main

        return console_main(
            ConsoleOptions(
                cmd=args.cmd,
                script=args.script,
                model=args.model,
                raw=args.raw,
                timeout=args.timeout,
                history_file=args.history_file,
                serve_args=["--record", str(args.record.resolve())] if args.record else [],
            )
        )
    if args.command == "replay":
        from lmbridge.devtools.replay import iter_files
        from lmbridge.devtools.replay import main as replay_main
        from lmbridge.log import configure

        configure(args.log_level)
        return replay_main(list(iter_files(args.files)), realtime=args.realtime, timeout=args.timeout, log_level=args.log_level)
    return 2


def _flag(name: str, default: bool) -> bool:
    """An on/off environment variable: "1"/"true"/"yes"/"on" or "0"/"false"/"no"/"off"."""
    value = os.environ.get(name, "").strip().lower()
    return True if value in ("1", "true", "yes", "on") else False if value in ("0", "false", "no", "off") else default


def _number(given: float | None, flag: str, parse: Callable[[str], float], valid: Callable[[float], bool], what: str) -> float | None:
    """A number from its ``flag``, else from its variable ($LMBRIDGE_ and the flag's name
    in capitals), else None. Raises ``ValueError`` naming the flag or variable and ``what``
    it must be."""
    variable = "LMBRIDGE_" + flag.removeprefix("--").replace("-", "_").upper()
    source = flag
    if given is None and os.environ.get(variable):
        source = "$" + variable
        try:
            given = parse(os.environ[variable])
        except ValueError:
            raise ValueError(f"{source} must be {what}") from None
    if given is not None and not valid(given):
        raise ValueError(f"{source} must be {what}")
    return given


def _serve(args: argparse.Namespace) -> int:
    # No garbage collection while the start-up imports (tens of thousands of objects, nearly
    # all kept): ``root.run`` turns it back on (docs/performance.md, "Start-up: what is left,
    # measured"). A ``serve`` that ends before it (a bad option) ends the process.
    gc.disable()
    import anyio

    from lmbridge.daemon.catalog import load_config, parse_agent_option
    from lmbridge.daemon.root import Config, run
    from lmbridge.log import configure

    configure(_log_level(args.log_level), args.log_json)
    config = Config()
    try:
        if args.config:
            config.agents, idle = load_config(args.config)
            if idle is not None:
                config.idle_timeout = idle
        config.agents += [parse_agent_option(a) for a in args.agent]
    except ValueError as exc:
        print(f"lmbridge serve: {exc}", file=sys.stderr)
        return 2
    if args.idle_timeout is not None:
        config.idle_timeout = args.idle_timeout
    config.debug_idle = args.debug_idle
    if args.agent_launcher is not None:
        import shlex

        from lmbridge.acp.launcher import through

        try:
            config.launcher = through(shlex.split(args.agent_launcher))
        except ValueError as exc:
            print(f"lmbridge serve: --agent-launcher: {exc}", file=sys.stderr)
            return 2
    try:
        processes = _number(args.max_agent_processes, "--max-agent-processes", int, lambda n: n >= 1, "a whole number, at least 1")
        wait = _number(args.session_wait, "--session-wait", float, lambda n: math.isfinite(n) and n >= 0, "a number of seconds, at least 0")
    except ValueError as exc:
        print(f"lmbridge serve: {exc}", file=sys.stderr)
        return 2
    if processes is not None:
        config.max_processes = int(processes)
    if wait is not None:
        config.session_wait = wait
    if not args.no_state and args.record is None:  # a recording replays without an index
        # Made when first needed, after the answer to initialize (docs/performance.md,
        # "Start-up: the method table and the session index after the answer").
        config.open_index = functools.partial(_index, args.state_dir)
    # A recording replays without pre-warming or spare sessions (they start on their own).
    config.prewarm = not args.no_prewarm and _flag("LMBRIDGE_PREWARM", True) and args.record is None
    spare = args.spare_session if args.spare_session is not None else _flag("LMBRIDGE_SPARE_SESSION", True)
    config.spare_session = spare and args.record is None
    if args.record is not None:
        from lmbridge.rpc.record import Recorder

        try:
            config.recorder = Recorder.open(args.record, config.agents, config.idle_timeout)
        except OSError as exc:
            print(f"lmbridge serve: --record {args.record}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    try:
        anyio.run(run, config)
    except KeyboardInterrupt:
        return 130
    finally:
        if config.recorder is not None:
            config.recorder.close()
    return 0


def _index(folder: Path | None) -> SessionIndex:
    """The session index in ``folder`` (None: ``session_index.state_dir()``)."""
    from lmbridge.daemon.session_index import SessionIndex

    return SessionIndex(folder)


def _sessions(args: argparse.Namespace) -> int:
    """``lmbridge sessions``: the session index, one line a chat (or ``--json``)."""
    import json
    import time

    from lmbridge.daemon.session_index import SessionIndex

    index = SessionIndex(args.state_dir)
    if args.clear:
        n = index.clear()
        print(f"{n} session{'s' if n != 1 else ''} forgotten ({index.path})")
        return 0
    entries = index.load()
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    if not entries:
        print(f"no sessions ({index.path})")
        return 0
    print(f"{len(entries)} session{'s' if len(entries) != 1 else ''} ({index.path}):")
    for e in reversed(entries):
        saved = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(e.get("saved") or 0)))
        turns = sum(1 for item in e.get("items") or [] if isinstance(item, list) and item[:1] == ["a"])
        print(f"  {saved}  {e.get('agent')!s:<12} {turns:>3} answers  {e.get('resume')}  {e.get('cwd') or ''}")
    return 0
