"""Imports go one way (docs/architecture.md): the pure core never loads the I/O layers
(the acp/ package's connection, session and process, the actors, the server), nor anyio.
Each module is imported alone, in a fresh interpreter."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PURE = ["lmbridge.core.turn", "lmbridge.core.history", "lmbridge.core.permissions", "lmbridge.core.transcript", "lmbridge.core.messages", "lmbridge.core.profiles",
        "lmbridge.core.present", "lmbridge.core.user_message", "lmbridge.core.agent_models", "lmbridge.core.auth", "lmbridge.core.cap", "lmbridge.core.text", "lmbridge.core.jobs",
        "lmbridge.core.notices", "lmbridge.core.errors", "lmbridge.core.outbound"]  # fmt: skip
IO = ["lmbridge.acp.connection", "lmbridge.acp.session", "lmbridge.acp.process", "lmbridge.daemon.session_actor", "lmbridge.daemon.history_actor", "lmbridge.daemon.root",
      "lmbridge.daemon.stdio", "anyio"]
PROBE = "import importlib, json, sys; importlib.import_module(sys.argv[1]); print(json.dumps(sorted(set(json.loads(sys.argv[2])) & set(sys.modules))))"


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_loads_no_io_layer(module: str) -> None:
    probe = subprocess.run([sys.executable, "-c", PROBE, module, json.dumps(IO)], capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == [], f"{module} loads {probe.stdout.strip()}"


def test_the_acp_layers_load_in_order() -> None:
    """connection ← interfaces ← session ← process: none loads a module to its left's
    right; the session knows the process by ``acp/interfaces.py``'s protocol only."""
    for module, above in (
        ("lmbridge.acp.connection", ["lmbridge.acp.interfaces", "lmbridge.acp.session", "lmbridge.acp.process"]),
        ("lmbridge.acp.interfaces", ["lmbridge.acp.session", "lmbridge.acp.process"]),
        ("lmbridge.acp.session", ["lmbridge.acp.process"]),
    ):
        probe = subprocess.run([sys.executable, "-c", PROBE, module, json.dumps(above)], capture_output=True, text=True, timeout=120)
        assert probe.returncode == 0 and json.loads(probe.stdout) == [], (module, probe.stdout, probe.stderr)


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("core/text.py", "import lmbridge.log", "The pure core imports nothing outside core"),
        ("rpc/framing.py", "import lmbridge.acp.connection", "The runtime's layers import downwards only"),
        ("daemon/catalog.py", "import lmbridge.devtools.client", "Nothing in the runtime imports the developer tools"),
        ("acp/session.py", "import lmbridge.acp.process", "Inside acp/, no circle"),
        ("acp/interfaces.py", "import lmbridge.acp.session", "Inside acp/, no circle"),
        ("daemon/methods.py", "import lmbridge.daemon.router", "Inside daemon/, no circle"),
    ],
)
def test_the_import_contract_catches_a_wrong_import(tmp_path: Path, module: str, line: str, contract: str) -> None:
    """``make lint``'s import contract (pyproject.toml, [tool.importlinter]) holds on the tree,
    and fails, naming the contract, when one module imports across it."""
    lint = Path(sys.executable).with_name("lint-imports")
    shutil.copytree(ROOT / "src", tmp_path / "src")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    env = {"PYTHONPATH": str(tmp_path / "src"), "PATH": "/usr/bin:/bin"}
    kept = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert kept.returncode == 0, kept.stdout
    target = tmp_path / "src/lmbridge" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    broken = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert broken.returncode != 0
    assert f"{contract}" in broken.stdout and "BROKEN" in broken.stdout, broken.stdout
