"""``lmbridge mcp-stdio``: the stdio face of the synthetic MCP server.

The agent spawns this process as a stdio MCP server (docs/tools.md); it connects to the
daemon's Unix socket, names the session whose VS Code tools it wants, and then copies
bytes both ways. The MCP protocol itself is served by the daemon
(``mcp_bridge.McpHost``), which serves this connection only when it comes from the
daemon's own user (peer credentials): there is no secret, so nothing on this
process's command line or in its environment is worth reading. Standard library only,
so it starts fast.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading


def main(socket_path: str, session: str) -> int:
    """Relay stdin/stdout ↔ the daemon's socket. Exit 2 when it cannot connect, or when
    the daemon closes the connection before sending anything (it closes at once a
    connection it refuses); 0 when either side closes after that, or the agent stops
    reading (its end of our stdout closed: it exited)."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(socket_path)
    except OSError as exc:
        print(f"lmbridge mcp-stdio: cannot reach the daemon at {socket_path}: {exc}", file=sys.stderr)
        return 2
    sock.sendall((json.dumps({"session": session}) + "\n").encode())

    def upstream() -> None:
        # The raw descriptor, never sys.stdin's buffer: this thread is still blocked reading
        # when the daemon closes first (the agent keeps our stdin open), and a buffered read
        # holds the buffer's lock, on which the interpreter's shutdown aborts (SIGABRT).
        fd = sys.stdin.fileno()
        try:
            while chunk := os.read(fd, 65536):
                sock.sendall(chunk)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the daemon closed the connection: the main thread ends the relay
            pass

    threading.Thread(target=upstream, daemon=True).start()
    out = sys.stdout.buffer
    answered = False
    try:
        while chunk := sock.recv(65536):
            answered = True
            out.write(chunk)
            out.flush()
    except ConnectionResetError:  # closed with our bytes unread: the same as a close
        pass
    except BrokenPipeError:  # the agent is gone (it closed our stdout): nobody to relay to
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())  # what is left unflushed goes nowhere, quietly
    if not answered:
        print(f"lmbridge mcp-stdio: the daemon closed the connection without serving session {session!r} "
              "(it is not open, or this process does not run as the daemon's user)", file=sys.stderr)
        return 2
    return 0
