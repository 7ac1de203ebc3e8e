"""A recorded agent's stand-in: the process ``lmbridge replay`` has the daemon start in
place of an agent (docs/replay.md, "How it works").

Standard library only, so it starts fast. Run as the daemon's agent launcher
(``lmbridge serve --agent-launcher "python standin.py --launch SOCKET"``), it is asked how
to start one agent (``acp.launcher``: the agent process as its last argument, JSON): it
tells the player's Unix socket ``SOCKET`` ``{"spawn": DESCRIPTION}``, and the player
answers ``{"error": TEXT}`` (the recorded start failed so) or ``{"start": true}``; it
prints that error, or the command of a stand-in for the agent, ``python standin.py SOCKET
LINK``, as the launcher's answer.

Run as ``python standin.py SOCKET LINK``, it stands in for the agent on link ``LINK``. It
connects to the player's socket and speaks one JSON object a line:

- to the player: ``{"hello": LINK}`` first; ``{"in": LINE}`` for each line the daemon
  wrote to its stdin; ``{"eof": true}`` when the daemon closed its stdin; ``{"ack": N}``
  once the N-th line it was told to print is written and flushed;
- from the player: ``{"out": LINE}``, a line to print on stdout (what the agent sent);
  ``{"exit": CODE, "stderr": [LINE, ...]}``: print those lines on stderr and exit with
  CODE (a negative CODE: killed by that signal, as the recorded agent was).

When the player goes away it exits with 1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading


def launch(path: str, description: str) -> int:
    """The launcher's answer for the agent ``description`` (JSON), as the player decides it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    spawn = json.loads(description)
    sock.sendall((json.dumps({"spawn": spawn}) + "\n").encode())
    answer = json.loads(sock.makefile("rb").readline() or b"{}")
    if "error" in answer:
        print(json.dumps({"error": str(answer["error"])}))
    else:
        print(json.dumps({"command": [sys.executable, os.path.abspath(__file__), path, str(spawn["link"])]}))
    return 0


def main(argv: list[str]) -> int:
    if argv[1] == "--launch":
        return launch(argv[2], argv[3])
    path, link = argv[1], argv[2]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    lock = threading.Lock()

    def tell(obj: object) -> None:
        data = (json.dumps(obj) + "\n").encode()
        with lock:
            sock.sendall(data)

    def pump_stdin() -> None:
        try:
            for raw in sys.stdin.buffer:
                if raw.strip():
                    tell({"in": raw.rstrip(b"\n").decode("utf-8", "replace")})
            tell({"eof": True})
        except OSError:
            pass

    tell({"hello": link})
    threading.Thread(target=pump_stdin, daemon=True).start()
    printed = 0
    for raw in sock.makefile("rb"):
        message = json.loads(raw)
        if "out" in message:
            sys.stdout.buffer.write(message["out"].encode("utf-8", "backslashreplace") + b"\n")
            sys.stdout.buffer.flush()
            printed += 1
            tell({"ack": printed})
        elif "exit" in message:
            for line in message.get("stderr") or ():
                sys.stderr.buffer.write(str(line).encode("utf-8", "backslashreplace") + b"\n")
            sys.stderr.buffer.flush()
            code = int(message["exit"] or 0)
            if code < 0:
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            os._exit(code)
    os._exit(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
