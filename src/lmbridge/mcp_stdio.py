"""``lmbridge mcp-stdio``: the stdio face of the synthetic MCP server.

For agents without ``mcpCapabilities.http`` (issue #4). The agent spawns this
process as a stdio MCP server; it connects to the daemon's Unix socket, proves
itself with the session's secret (from ``$LMBRIDGE_MCP_SECRET``, never on the
command line), and then copies bytes both ways. The MCP protocol itself is
served by the daemon (``mcp_bridge.McpHost``). Standard library only, so it
starts fast.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading


def main(socket_path: str, session: str) -> int:
    """Relay stdin/stdout ↔ the daemon's socket. Exit 2 when it cannot connect
    or has no secret; 0 when either side closes."""
    secret = os.environ.get("LMBRIDGE_MCP_SECRET")
    if not secret:
        print("lmbridge mcp-stdio: LMBRIDGE_MCP_SECRET is not set", file=sys.stderr)
        return 2
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(socket_path)
    except OSError as exc:
        print(f"lmbridge mcp-stdio: cannot reach the daemon at {socket_path}: {exc}", file=sys.stderr)
        return 2
    sock.sendall((json.dumps({"session": session, "secret": secret}) + "\n").encode())

    def upstream() -> None:
        stdin = sys.stdin.buffer
        while chunk := stdin.read1(65536) if hasattr(stdin, "read1") else stdin.read(65536):
            sock.sendall(chunk)
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=upstream, daemon=True).start()
    out = sys.stdout.buffer
    while chunk := sock.recv(65536):
        out.write(chunk)
        out.flush()
    return 0
