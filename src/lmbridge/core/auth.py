"""An agent that needs a login or a key: what the user is told, and what the daemon can do
itself (docs/agents.md, "Signing in"). Pure: no I/O.

ACP (schema v1 and the auth-methods RFD the agents already follow):

- ``initialize`` answers ``authMethods``: ``{"id", "name", "description"?, "type"?, ...}``.
  ``type`` absent (or ``"agent"``): the agent handles it itself (a browser OAuth flow, a
  key in its own settings): the user has to act. ``"env_var"``: ``vars: [{"name"}]``, the
  variables that carry the credential: when they are all set in the agent's environment,
  ``authenticate {methodId}`` needs nobody. ``"terminal"``: ``args`` (and ``env``) to run
  the agent's own command with, in a terminal, for the user to log in (claude-agent-acp
  offers it when the client says ``clientCapabilities.auth.terminal``).
- Error code ``-32000`` is ``auth_required``: ``session/new`` fails with it (codex-acp
  "Authentication required", gemini-cli "Gemini API key is missing or not configured."),
  or ``session/prompt`` (claude-agent-acp when Claude Code says "Please run /login").

What the user sees is one sentence naming the agent and what to do, and the error's
``data`` (``problem``) lets the shim offer it as buttons: a terminal with the login
command, or the settings. Nothing secret goes into either: variable names, never values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: ACP ``ErrorCode`` ``auth_required``.
AUTH_REQUIRED = -32000


@dataclass(frozen=True)
class Method:
    """One entry of ``authMethods``, read defensively (agents' answers are not trusted)."""

    id: str
    name: str
    description: str = ""
    type: str = "agent"  # "agent" | "env_var" | "terminal" | anything newer (treated as "agent")
    vars: tuple[str, ...] = ()  # env_var: the variables' names
    args: tuple[str, ...] = ()  # terminal: arguments after the agent's own command
    env: Mapping[str, str] = field(default_factory=dict)  # terminal: extra environment


@dataclass(frozen=True)
class Hint:
    """What a preset knows of an agent's sign-in when its ``authMethods`` do not say
    (agents.PRESETS): variables that carry a key, and a command that logs in."""

    env: tuple[str, ...] = ()
    login: tuple[str, ...] = ()  # argv, run in a terminal
    note: str = ""  # one more sentence for the user


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def methods(auth_methods: Sequence[Any]) -> tuple[Method, ...]:
    """``initialize``'s ``authMethods`` as Methods; entries without a string ``id`` are skipped."""
    out = []
    for raw in auth_methods:
        if not isinstance(raw, dict) or not _str(raw.get("id")):
            continue
        kind = _str(raw.get("type")) or "agent"
        variables, raw_args, raw_env = raw.get("vars"), raw.get("args"), raw.get("env")
        names = tuple(n for n in (_str(v.get("name")) if isinstance(v, dict) else "" for v in variables) if n) if isinstance(variables, list) else ()
        args = tuple(a for a in raw_args if isinstance(a, str)) if isinstance(raw_args, list) else ()
        env = raw_env if isinstance(raw_env, dict) else {}
        out.append(Method(
            id=raw["id"], name=_str(raw.get("name")) or raw["id"], description=_str(raw.get("description")),
            type=kind, vars=names, args=args, env={k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)},
        ))  # fmt: skip
    return tuple(out)


def is_auth_error(code: object) -> bool:
    """Whether an agent's JSON-RPC error code means it needs a login or a key."""
    return code == AUTH_REQUIRED


def automatic(offered: Sequence[Method], env: Mapping[str, str]) -> Method | None:
    """The first ``env_var`` method whose variables are all set (non-empty) in the agent's
    environment ``env``: ``authenticate`` with it needs no user. None when there is none."""
    for method in offered:
        if method.type == "env_var" and method.vars and all(env.get(name) for name in method.vars):
            return method
    return None


def problem(
    agent_id: str,
    agent_name: str,
    reason: str,
    offered: Sequence[Method],
    command: Sequence[str],
    hint: Hint | None = None,
) -> tuple[str, dict[str, Any]]:
    """``(message, data)`` of the error a chat gets when agent ``agent_id`` needs a login.

    ``reason``: the agent's own message (e.g. "Authentication required"); ``offered``: its
    ``authMethods``; ``command``: the argv that starts it (a ``terminal`` method's login
    runs it with the method's ``args``); ``hint``: the preset's, where the methods do not
    say. ``data``: ``{"reason": "auth_required", "agentId", "agentName", "login":
    {"command", "args", "env"} | null, "env": [names], "methods": [{"id", "name",
    "description"}]}`` (docs/protocol.md, "Errors")."""
    hint = hint or Hint()
    variables: list[str] = []
    for name in [n for m in offered if m.type == "env_var" for n in m.vars] + list(hint.env):
        if name not in variables:
            variables.append(name)
    login: dict[str, Any] | None = None
    terminal = next((m for m in offered if m.type == "terminal"), None)
    if terminal is not None and command:
        login = {"command": command[0], "args": [*command[1:], *terminal.args], "env": dict(terminal.env)}
    elif hint.login:
        login = {"command": hint.login[0], "args": list(hint.login[1:]), "env": {}}
    ways = []
    if variables:
        ways.append(f"set {' or '.join(variables)} in its \"env\" in the lmbridge.agents setting")
    if login is not None:
        ways.append(f"sign in by running `{' '.join([login['command'], *login['args']])}` in a terminal")
    interactive = [m for m in offered if m.type not in ("env_var", "terminal")]
    if not ways and interactive:
        listed = "; ".join(f"{m.name}" + (f" ({m.description})" if m.description else "") for m in interactive)
        ways.append(listed if len(interactive) == 1 else f"one of: {listed}")
    todo = ", or ".join(ways) if ways else "configure its credentials"
    said = reason.strip().rstrip(".") or "authentication required"
    message = f"{agent_name} needs you to sign in ({said}): {todo}. Then send your message again."
    if hint.note:
        message += f" {hint.note}"
    data = {
        "reason": "auth_required",
        "agentId": agent_id,
        "agentName": agent_name,
        "login": login,
        "env": variables,
        "methods": [{"id": m.id, "name": m.name, "description": m.description} for m in offered],
    }
    return message, data
