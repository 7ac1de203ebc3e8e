"""An agent that needs a login or a key: what the user is told, and what the daemon can do
itself (docs/agents.md, "Signing in"). Pure: no I/O.

ACP (schema v1 and the auth-methods RFD the agents already follow):

- ``initialize`` answers ``authMethods``: ``{"id", "name", "description"?, "type"?, ...}``.
  ``type`` absent (or ``"agent"``): the agent handles it itself (a browser OAuth flow, a
  key in its own settings): the user has to act. ``"env_var"``: ``vars: [{"name"}]``, the
  variables that carry the credential: when they are all set in the agent's environment,
  ``authenticate {methodId}`` needs nobody. ``"terminal"``: ``args`` (and ``env``) to run
  the agent's own command with, in a terminal, for the user to log in (claude-agent-acp
  offers it when the client says ``clientCapabilities.auth.terminal``; ACP schema 1.21: the
  client never passes it to ``authenticate``, a zero exit is success). An agent may list
  several (claude-agent-acp 0.101: ``claude-ai-login`` and ``console-login``): each is
  offered (``problem``'s ``logins``).
- An **API key method** (an ``agent`` method with ``_meta["api-key"]: {"provider"}``,
  codex-acp 2.6's ``api-key``) names no variable: the agent reads its own. The rule
  (``key_vars``), conservative: such a method counts as "its key is present" only for a
  provider in ``API_KEY_VARS``, whose variables were read in the agent's release, and only
  when one of them is set and not blank in the agent's environment. Any other provider,
  or an ``agent`` method without that ``_meta``, needs the user.
- ``_auth/status_update`` (claude-agent-acp 0.101, a notification for the whole process, no
  ``sessionId``): ``{"authStatus": {"kind", "label", ...}}``, the identity the agent uses,
  pushed when it changes; ``kind: "none"`` ("Not logged in") says it is signed out
  (``status``). Reporting only: the sign-in the user is asked for still comes from the
  agent's ``auth_required`` error, as for any agent.
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

from lmbridge.core.errors import AUTH_REQUIRED

#: The notification claude-agent-acp pushes its sign-in status with (``status``).
STATUS_UPDATE = "_auth/status_update"


#: ``_meta["api-key"].provider`` of an API key method → the variables its agent reads the
#: key from, in its order (codex-acp 2.6 ``readApiKeyFromEnv``: ``CODEX_API_KEY``, then
#: ``OPENAI_API_KEY``, each trimmed). A provider not here is never used without the user.
API_KEY_VARS: Mapping[str, tuple[str, ...]] = {"openai": ("CODEX_API_KEY", "OPENAI_API_KEY")}


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
    api_key: str = ""  # agent: its _meta["api-key"].provider (an API key method), else ""


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
        meta = raw.get("_meta")
        key = meta.get("api-key") if isinstance(meta, dict) else None
        provider = _str(key.get("provider")) if isinstance(key, dict) else ""
        out.append(Method(
            id=raw["id"], name=_str(raw.get("name")) or raw["id"], description=_str(raw.get("description")),
            type=kind, vars=names, args=args, env={k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)},
            api_key=provider if kind == "agent" else "",
        ))  # fmt: skip
    return tuple(out)


@dataclass(frozen=True)
class Status:
    """An ``_auth/status_update``'s ``authStatus``: ``kind`` (``none``, ``api_key``,
    ``gateway``, ``external``, ...) and ``label`` ("Not logged in", "Anthropic API key"),
    each clipped to 200 characters."""

    kind: str
    label: str

    @property
    def signed_out(self) -> bool:
        return self.kind == "none"


def status(params: Any) -> Status | None:
    """The ``Status`` an ``_auth/status_update``'s params carry, None when malformed."""
    raw = params.get("authStatus") if isinstance(params, dict) else None
    if not isinstance(raw, dict) or not _str(raw.get("kind")):
        return None
    return Status(_str(raw.get("kind"))[:200], _str(raw.get("label"))[:200])


def is_auth_error(code: object) -> bool:
    """Whether an agent's JSON-RPC error code means it needs a login or a key."""
    return code == AUTH_REQUIRED


def key_vars(method: Method) -> tuple[tuple[str, ...], bool]:
    """The variables that carry ``method``'s credential and whether it needs them all
    (``env_var``: its ``vars``, all) or any one (an API key method of a provider in
    ``API_KEY_VARS``); ``((), True)`` for a method no variable satisfies."""
    if method.type == "env_var":
        return method.vars, True
    if method.type == "agent" and method.api_key in API_KEY_VARS:
        return tuple(API_KEY_VARS[method.api_key]), False
    return (), True


def automatic(offered: Sequence[Method], env: Mapping[str, str]) -> Method | None:
    """The first method whose key is in the agent's environment ``env`` (``key_vars``: every
    variable of an ``env_var`` method, or one of an API key method's, set and not blank):
    ``authenticate`` with it needs no user. None when there is none."""
    for method in offered:
        names, every = key_vars(method)
        present = [bool(env.get(name, "").strip()) for name in names]
        if present and (all(present) if every else any(present)):
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
    {"command", "args", "env"} | null, "logins": [{"id", "name", "description", "command",
    "args", "env"}], "env": [names], "methods": [{"id", "name", "description"}]}``
    (docs/protocol.md, "Errors"): ``logins`` holds every ``terminal`` method (else the
    preset's login, with the id ``login``), ``login`` the first of them."""
    hint = hint or Hint()
    variables: list[str] = []
    for name in [n for m in offered for n in key_vars(m)[0]] + list(hint.env):
        if name not in variables:
            variables.append(name)
    logins: list[dict[str, Any]] = []
    if command:
        logins = [
            {"id": m.id, "name": m.name, "description": m.description, "command": command[0], "args": [*command[1:], *m.args], "env": dict(m.env)}
            for m in offered
            if m.type == "terminal"
        ]
    if not logins and hint.login:
        logins = [{"id": "login", "name": "Sign in", "description": "", "command": hint.login[0], "args": list(hint.login[1:]), "env": {}}]
    login = {k: logins[0][k] for k in ("command", "args", "env")} if logins else None
    ways = []
    if variables:
        ways.append(f"set {' or '.join(variables)} in its \"env\" in the lmbridge.agents setting")
    if len(logins) == 1:
        ways.append(f"sign in by running `{' '.join([logins[0]['command'], *logins[0]['args']])}` in a terminal")
    elif logins:
        each = " or ".join(f"`{' '.join([x['command'], *x['args']])}` ({x['name']})" for x in logins)
        ways.append(f"sign in by running {each} in a terminal")
    interactive = [m for m in offered if m.type not in ("env_var", "terminal") and not key_vars(m)[0]]
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
        "logins": logins,
        "env": variables,
        "methods": [{"id": m.id, "name": m.name, "description": m.description} for m in offered],
    }
    return message, data
