"""One wire, written once (docs/vscode-shim.md, "The wire"): what the daemon builds is what its
wire models (core/outbound.py) say, and the shim's wire.ts is what those models generate."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError
from test_auth import CLAUDE_101, CODEX
from test_daemon import LIMIT, write_turn
from test_presets import FEED
from test_session_state import MODE

from lmbridge.core import auth, outbound, session_state
from lmbridge.core.messages import METHODS, ResponsePart, dump
from lmbridge.core.registry import registry_agents
from lmbridge.daemon.catalog import PRESETS, auth_hint
from lmbridge.devtools import wire_schema
from lmbridge.devtools.client import tool_calls, user

ROOT = Path(__file__).resolve().parent.parent
SHIM = ROOT / "vscode-shim"


def _state() -> dict[str, Any]:
    state = session_state.opened({"configOptions": [MODE]})
    state = session_state.update(state, {"sessionUpdate": "usage_update", "used": 10, "size": 100, "cost": {"amount": 0.5, "currency": "EUR"}}) or state
    state = session_state.update(state, {"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "init", "description": "Init", "input": {"hint": "what"}}]}) or state
    state = session_state.update(state, {"sessionUpdate": "session_info_update", "title": "A chat"}) or state
    return {"chatId": "c1", "modelId": "claude", "requestId": 3, **session_state.to_wire(state, {"default": "user", "plan": "agent"})}


# What the daemon builds, by the model it must validate as (extra fields are refused).
BUILT: list[tuple[str, type[BaseModel], Any]] = [
    ("client/sessionState", outbound.SessionStateParams, _state),
    ("client/sessionState, empty", outbound.SessionStateParams, lambda: {"chatId": "c", "modelId": "m", **session_state.to_wire(session_state.SessionState())}),
    ("auth_required data, codex", outbound.AuthRequiredData,
     lambda: auth.problem("codex", "Codex", "Authentication required", auth.methods(CODEX), ["codex-acp"], auth_hint(PRESETS["codex"].spec))[1]),
    ("auth_required data, claude's two logins", outbound.AuthRequiredData,
     lambda: auth.problem("claude", "Claude Code", "", auth.methods(CLAUDE_101), ["npx", "claude-agent-acp"])[1]),
    ("auth_required data, no login", outbound.AuthRequiredData, lambda: auth.problem("x", "X", "", [], [])[1]),
    ("agents/presets", outbound.AgentPresetsResult, lambda: {"presets": [p.info() for p in PRESETS.values()]}),
    ("agents/registry", outbound.AgentRegistryResult, lambda: dict(zip(("agents", "problems"), registry_agents(FEED, "linux-x86_64"), strict=True))),
]  # fmt: skip


@pytest.mark.parametrize(("row", "model", "build"), BUILT, ids=[r[0] for r in BUILT])
def test_what_the_daemon_builds_is_its_wire_model(row: str, model: type[BaseModel], build: Any) -> None:
    built = build()
    parsed = model.model_validate(built)
    # Nothing the model would leave out or write differently: null stays null, absent stays absent.
    assert parsed.model_dump(mode="json", exclude_unset=True) == built


def test_a_field_the_model_lacks_is_refused() -> None:
    """The check above fails when the daemon adds a field the wire models do not have."""
    with pytest.raises(ValidationError):
        outbound.SessionStateParams.model_validate({**_state(), "colour": "red"})


def test_the_schema_follows_dump() -> None:
    """What the daemon sends: a field is left out only when None (never null); what the shim
    sends: only fields with no default are required."""
    defs = wire_schema.document()["$defs"]
    assert defs["WireThinkingPart"]["required"] == ["type", "value"] and defs["WireThinkingPart"]["properties"]["id"] == {"type": "string"}
    assert defs["ModelInfo"]["properties"]["capabilities"] == {"$ref": "#/$defs/ModelCapabilities"}
    assert defs["ChatInformationParams"]["required"] == []
    assert defs["AuthRequiredData"]["properties"]["login"]["anyOf"][1] == {"type": "null"}
    assert defs["WireMessage"]["properties"]["content"]["items"] == {"$ref": "#/$defs/WireInputPart"}
    assert set(wire_schema.document()["constants"]["Method"]) == set(METHODS)


@pytest.mark.skipif(shutil.which("node") is None or not (SHIM / "node_modules" / "json-schema-to-typescript").is_dir(), reason="make -C vscode-shim deps")
def test_the_check_fails_when_wire_ts_differs(tmp_path: Path) -> None:
    schema = subprocess.run([sys.executable, "-m", "lmbridge.devtools.wire_schema"], capture_output=True, text=True, check=True).stdout
    check = lambda path: subprocess.run(["node", "scripts/wire.mjs", "--check", str(path)], input=schema, cwd=SHIM, capture_output=True, text=True)  # noqa: E731
    assert check(SHIM / "src" / "chat" / "wire.ts").returncode == 0, "src/chat/wire.ts is not what the models generate: make wire"
    edited = tmp_path / "wire.ts"
    edited.write_text((SHIM / "src" / "chat" / "wire.ts").read_text().replace("\tchatId: string;", "\tchatId?: string;", 1))
    failed = check(edited)
    assert failed.returncode == 1 and "make wire" in failed.stderr
    # A model changed and wire.ts not regenerated: the same failure.
    changed = json.loads(schema)
    changed["$defs"]["SessionStateParams"]["required"].remove("chatId")
    stale = subprocess.run(["node", "scripts/wire.mjs", "--check", "src/chat/wire.ts"], input=json.dumps(changed), cwd=SHIM, capture_output=True, text=True)
    assert stale.returncode == 1


@pytest.mark.anyio
async def test_what_the_real_daemon_sends_is_its_wire_model(scripted: Any, daemon: Any) -> None:
    """``lmbridge serve`` with a scripted agent: its results, each part it streams and a
    permission card's input validate as the wire models, and give back what was sent."""
    agent = scripted({"turns": [write_turn()]})
    part = TypeAdapter(ResponsePart)
    with anyio.fail_after(LIMIT):
        async with daemon([agent], initialize=False) as c:
            outbound.InitializeResult.model_validate(await c.initialize(agents=[agent.spec]))
            outbound.ChatInformationResult.model_validate(await c.request("lm/provideLanguageModelChatInformation", {"silent": True}))
            outbound.AgentPresetsResult.model_validate(await c.request("agents/presets"))
            first = await c.chat(agent.id, [user("please write my notes")])
            assert outbound.ChatResponseResult.model_validate(first.result).stopReason == "tool_calls"
            assert first.parts and all(dump(part.validate_python(p)) == p for p in first.parts)
            (card,) = tool_calls(first)
            outbound.AgentActionInput.model_validate(card["input"])


@pytest.mark.anyio
async def test_every_method_the_daemon_serves_is_in_the_wire_table() -> None:
    """The daemon's method table names no method wire.ts's ``Method`` lacks (``debug/idle``, off by default, aside)."""
    from lmbridge.daemon.root import Config, Server

    served = set(Server(Config()).methods.table)
    named = {method for method, _ in METHODS.values()}
    assert served and served <= named, served - named
