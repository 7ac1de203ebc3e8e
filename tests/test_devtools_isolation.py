"""Replay drives the daemon from outside (docs/replay.md, "How it works"): it runs
``lmbridge serve`` as a subprocess and imports nothing of the daemon or the agent side,
subclasses nothing of the runtime, and reads no event-loop internals; the stand-in agent is
standard library only. Checked on the source, so a change that reaches inside fails here
with the line."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "lmbridge" / "devtools"

#: What replay may import of lmbridge: the recording format and pure helpers (the daemon
#: is a subprocess, ``lmbridge serve``).
ALLOWED = {"lmbridge", "lmbridge.rpc.record", "lmbridge.core.present", "lmbridge.core.cap"}
#: Attributes that are the event loop's or a task's internals.
INTERNALS = {"_ready", "_fut_waiter", "_scheduled", "_selector"}


def imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def test_replay_imports_no_daemon_internals() -> None:
    tree = ast.parse((SRC / "replay.py").read_text(encoding="utf-8"))
    inside = [(line, name) for line, name in imports(tree) if name.split(".")[0] == "lmbridge" and name not in ALLOWED]
    assert inside == []


def test_replay_reads_no_event_loop_internals_and_subclasses_nothing_of_the_runtime() -> None:
    tree = ast.parse((SRC / "replay.py").read_text(encoding="utf-8"))
    internals = [(node.lineno, node.attr) for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in INTERNALS]
    strings = [(node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in INTERNALS]
    runtime = {"AgentConnection", "Server", "AgentProcess", "AcpSession", "SessionActor", "HistoryActor", "ToolBridge"}
    subclasses = [
        (node.lineno, node.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(isinstance(b, (ast.Name, ast.Attribute)) and (getattr(b, "id", None) or getattr(b, "attr", None)) in runtime for b in node.bases)
    ]
    # Another object's private attributes (a tools handler, a process's internals).
    private = [
        (node.lineno, ast.unparse(node))
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    ]
    assert (internals, strings, subclasses, private) == ([], [], [], [])
    assert "asyncio" not in {name.split(".")[0] for _, name in imports(tree)}


def test_the_stand_in_agent_is_standard_library_only() -> None:
    tree = ast.parse((SRC / "standin.py").read_text(encoding="utf-8"))
    outside = [(line, name) for line, name in imports(tree) if name.split(".")[0] not in sys.stdlib_module_names and name != "__future__"]
    assert outside == []
