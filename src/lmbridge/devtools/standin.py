"""A recorded agent's stand-in: the process ``lmbridge replay`` has the daemon start in
place of an agent (docs/replay.md, "How it works").

Run as ``python standin.py SOCKET LINK`` (standard library only, so it starts fast). It
connects to the player's Unix socket ``SOCKET`` and speaks one JSON object a line:

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


def main(argv: list[str]) -> int:
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
