#!/usr/bin/env python3
"""A tiny ACP agent that needs a sign-in, for the Chat-view test's auth step (stdlib only).

`initialize` advertises two auth methods (the ACP auth-methods RFD): a terminal login
(`type: "terminal"`: this script with `--login`, its token file in `env`; also as
`_meta["terminal-auth"]`, claude-agent-acp's older form) and an API key in `AUTH_AGENT_KEY`
(`type: "env_var"`). Until one of them is done, `session/new` fails with -32000
"Authentication required" (what codex-acp and gemini-cli answer when not signed in).
Signed in means: `AUTH_AGENT_KEY` is set, or the file `$AUTH_AGENT_TOKEN` exists, which
`auth_agent.py --login` writes once the user presses Enter in its terminal. Then a prompt is answered "Signed in. You said: <text>".
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TOKEN = Path(os.environ.get("AUTH_AGENT_TOKEN", Path.home() / ".auth-agent-token"))


def signed_in() -> bool:
    return bool(os.environ.get("AUTH_AGENT_KEY")) or TOKEN.exists()


def send(message: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def login() -> None:
    """An interactive login, as real agents have: it waits for the user before signing in."""
    print("Auth agent login: press Enter to sign in.", flush=True)
    TOKEN.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{TOKEN}.prompted").write_text("waiting for Enter\n")  # for the test: the terminal is drawn on a canvas
    sys.stdin.readline()
    TOKEN.parent.mkdir(parents=True, exist_ok=True)
    TOKEN.write_text("signed in\n")
    print(f"Auth agent: signed in (token in {TOKEN}).", flush=True)


def serve() -> None:
    sessions = 0
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, ident, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method == "initialize":
            send({"id": ident, "result": {
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": False, "promptCapabilities": {"image": False, "embeddedContext": False}},
                "agentInfo": {"name": "auth-agent", "version": "1.0.0"},
                "authMethods": [
                    # A terminal login (the auth-methods RFD: the agent's own command plus `args`,
                    # with `env`), also as claude-agent-acp's older `_meta["terminal-auth"]`.
                    {"id": "login", "name": "Log in", "description": "Sign in from a terminal",
                     "type": "terminal", "args": ["--login"], "env": {"AUTH_AGENT_TOKEN": str(TOKEN)},
                     "_meta": {"terminal-auth": {"command": sys.executable, "args": [os.path.abspath(__file__), "--login"], "label": "Auth agent login"}}},
                    {"id": "api-key", "name": "AUTH_AGENT_KEY", "description": "An API key in the environment variable AUTH_AGENT_KEY",
                     "type": "env_var", "vars": [{"name": "AUTH_AGENT_KEY"}]},
                ],
            }})
        elif method == "authenticate":
            if signed_in():
                send({"id": ident, "result": {}})
            else:
                send({"id": ident, "error": {"code": -32000, "message": "Authentication required"}})
        elif method == "session/new":
            if signed_in():
                sessions += 1
                send({"id": ident, "result": {"sessionId": f"auth-{sessions}"}})
            else:
                send({"id": ident, "error": {"code": -32000, "message": "Authentication required"}})
        elif method == "session/prompt":
            text = " ".join(b.get("text", "") for b in params.get("prompt", []) if isinstance(b, dict) and b.get("type") == "text").strip()
            send({"method": "session/update", "params": {"sessionId": params.get("sessionId"), "update": {
                "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"Signed in. You said: {text}"}}}})
            send({"id": ident, "result": {"stopReason": "end_turn"}})
        elif ident is not None and method is not None:
            send({"id": ident, "error": {"code": -32601, "message": f"method not found: {method}"}})


if __name__ == "__main__":
    login() if sys.argv[1:] == ["--login"] else serve()
