"""A minimal stdio MCP server with one tool, ``run_command {"command": str}``, that runs a
shell command and returns its output. Standard library only (any Python 3.11+ runs it).

Agents that ask permission only for MCP tools (fast-agent: its own shell runs without
asking unless the client offers ACP terminals) get something to ask about:
``python tests/fakes/shell_mcp.py`` as an MCP server in the agent's own configuration.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

TOOL = {
    "name": "run_command",
    "description": "Run a shell command in the working directory and return its output.",
    "inputSchema": {"type": "object", "properties": {"command": {"type": "string", "description": "The command line"}}, "required": ["command"]},
}


def handle(request: dict[str, Any]) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        result: Any = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "shell", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        command = str((params.get("arguments") or {}).get("command", ""))
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30)  # noqa: S602 - the tool's purpose
        text = done.stdout + done.stderr
        result = {"content": [{"type": "text", "text": text or f"(exit code {done.returncode}, no output)"}], "isError": done.returncode != 0}
    elif method == "ping":
        result = {}
    elif "id" in request:
        return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": f"method not found: {method}"}}
    else:
        return None  # a notification
    return {"jsonrpc": "2.0", "id": request.get("id"), "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:
            continue
        answer = handle(request) if isinstance(request, dict) else None
        if answer is not None and "id" in request:
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
