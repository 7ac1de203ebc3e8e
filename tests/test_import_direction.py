"""Imports go one way (docs/architecture.md): the pure core never loads the I/O layers
(the acp/ package's connection, session and process, the actors, the server), nor anyio.
Each module is imported alone, in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PURE = ["lmbridge.turn", "lmbridge.history", "lmbridge.permissions", "lmbridge.transcript", "lmbridge.wire", "lmbridge.acp.profiles",
        "lmbridge.render", "lmbridge.user_turn", "lmbridge.agent_models", "lmbridge.auth", "lmbridge.cap"]  # fmt: skip
IO = ["lmbridge.acp.connection", "lmbridge.acp.session", "lmbridge.acp.process", "lmbridge.session_actor", "lmbridge.history_actor", "lmbridge.server", "anyio"]
PROBE = "import importlib, json, sys; importlib.import_module(sys.argv[1]); print(json.dumps(sorted(set(json.loads(sys.argv[2])) & set(sys.modules))))"


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_loads_no_io_layer(module: str) -> None:
    probe = subprocess.run([sys.executable, "-c", PROBE, module, json.dumps(IO)], capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == [], f"{module} loads {probe.stdout.strip()}"


def test_the_acp_layers_load_in_order() -> None:
    """connection ← session ← process: the connection loads neither of the others, the
    session not the process (it names its types for the type checker only)."""
    for module, above in (("lmbridge.acp.connection", ["lmbridge.acp.session", "lmbridge.acp.process"]), ("lmbridge.acp.session", ["lmbridge.acp.process"])):
        probe = subprocess.run([sys.executable, "-c", PROBE, module, json.dumps(above)], capture_output=True, text=True, timeout=120)
        assert probe.returncode == 0 and json.loads(probe.stdout) == [], (module, probe.stdout, probe.stderr)
