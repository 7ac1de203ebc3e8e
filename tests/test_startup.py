"""What ``lmbridge serve`` loads before it answers ``initialize`` (docs/performance.md,
"Start-up and idle": start ≤ 300 ms).

The ACP SDK, the MCP SDK, the console's libraries, jsonrpcserver (with jsonschema,
~85 ms) and structlog (nothing is logged before the answer) stay off the start-up path; they load on the first request that needs them. Of
lmbridge's own modules only those ``initialize`` needs are loaded (``LMBRIDGE``: the set is
pinned; every module is compiled at each start where ``PYTHONDONTWRITEBYTECODE`` is set).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("acp", "mcp", "mcp_types", "jsonrpcserver", "jsonschema", "prompt_toolkit", "rich", "structlog")

#: lmbridge's modules loaded when the ``initialize`` answer is written (an agent given by a
#: preset's id, as VS Code's settings name them): the CLI, the composition root and what it
#: wires, the shim link and what answers ``initialize`` on it (``daemon.front``), the set-up's
#: wire models (``core.link``), the agents' catalog and the log. Not the method table and the
#: router (``daemon.methods``, ``daemon.router``: made on the first other request), the session
#: index (``daemon.session_index``: made when first read), the chat's wire models
#: (``core.messages``), the agents' own models, profiles and sign-in rules
#: (``core.agent_models``, ``core.profiles``, ``core.auth``), the session cap, the history and
#: turn rules, the permissions, the agents' terminals, the ACP registry, the services made
#: with the history actor (``daemon.services``): each loads after the answer.
LMBRIDGE = {
    "lmbridge", "lmbridge.cli", "lmbridge.log",
    "lmbridge.core", "lmbridge.core.errors", "lmbridge.core.link", "lmbridge.core.text",
    "lmbridge.daemon", "lmbridge.daemon.catalog", "lmbridge.daemon.front", "lmbridge.daemon.root", "lmbridge.daemon.stdio",
    "lmbridge.rpc", "lmbridge.rpc.channel", "lmbridge.rpc.framing", "lmbridge.rpc.jsonrpc", "lmbridge.rpc.peer",
}  # fmt: skip

PROBE = """
import json, sys
import anyio
from lmbridge import cli
from lmbridge.daemon import root
from lmbridge.daemon.stdio import Stdout

loaded, out = [], []

async def run(config):
    def write(data):  # what is loaded when the answer is written
        out.append(data)
        loaded.append(sorted(sys.modules))

    async def lines():
        params = {"protocolVersion": 1, "agents": [{"id": "claude"}], "workspaceFolders": ["/tmp"]}
        yield json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode() + b"\\n"
        while not out:  # stdin ends after the answer (at EOF the daemon logs, and shuts down)
            await anyio.sleep(0.01)
    await root.Server(config).serve(lines(), Stdout(write))

root.run = run  # lmbridge serve as it starts, on these lines
cli.main(["serve", "--state-dir", sys.argv[1], "--log-level", "error"])
print(json.dumps({"answer": out[0].decode(), "loaded": loaded[0]}))
"""


def test_initialize_is_answered_without_the_heavy_libraries(tmp_path) -> None:
    probe = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    answer = json.loads(report["answer"].splitlines()[0])
    assert answer["id"] == 1 and answer["result"]["protocolVersion"] == 1
    loaded = set(report["loaded"])
    assert sorted({m.split(".")[0] for m in loaded} & set(HEAVY)) == []
    assert {m for m in loaded if m.split(".")[0] == "lmbridge"} == LMBRIDGE


IDLE_PROBE = """
import json, sys
import anyio
from lmbridge import cli
from lmbridge.daemon import root
from lmbridge.daemon.stdio import Stdout

report = {}

async def run(config):
    server = root.Server(config)

    async def lines():
        yield json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}).encode() + b"\\n"
        with anyio.fail_after(120):  # pre-warming: the demo agent started, its spare session opened
            while not (server.pool and any(p.spares for p in server.pool.processes.values())):
                await anyio.sleep(0.05)
        report["loaded"] = sorted(sys.modules)
    await root.Server.serve(server, lines(), Stdout(lambda data: None))

root.run = run
cli.main(["serve", "--state-dir", sys.argv[1], "--log-level", "error"])
print(json.dumps(report))
"""


def test_a_pre_warmed_spare_session_offering_no_tools_leaves_the_mcp_sdk_unloaded(tmp_path) -> None:
    """Idle, with the agent used last pre-warmed and its spare session opened: no chat has
    offered VS Code tools, so the spare has no tools endpoint and the MCP SDK is not loaded
    (docs/performance.md, "Start-up and idle": it was ~29 MiB of the idle daemon)."""
    (tmp_path / "agents.json").write_text(json.dumps({"program": "lmbridge", "version": 1, "recent": ["demo"]}))
    probe = subprocess.run([sys.executable, "-c", IDLE_PROBE, str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert probe.returncode == 0, probe.stderr
    loaded = set(json.loads(probe.stdout.strip().splitlines()[-1])["loaded"])
    assert "lmbridge.acp.process" in loaded  # the agent was pre-warmed
    assert not {m for m in loaded if m.split(".")[0] in ("mcp", "mcp_types") or m == "lmbridge.tools.mcp_bridge"}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # jsonrpcserver's importlib.resources.read_text
def test_request_validation_agrees_with_jsonrpcserver_schema() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from jsonrpcserver.main import default_validator

    from lmbridge.rpc.jsonrpc import validate_request

    values = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3),
        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    )
    request = st.dictionaries(st.sampled_from(["jsonrpc", "method", "params", "id", "extra"]), st.one_of(values, st.just("2.0")), max_size=5)
    requests = st.one_of(request, st.lists(request, max_size=3), values)

    def accepts(check: object, r: object) -> bool:
        try:
            check(r)  # type: ignore[operator]
        except Exception:
            return False
        return True

    @settings(deadline=None, max_examples=500)
    @given(requests)
    def agree(r: object) -> None:
        assert accepts(validate_request, r) == accepts(default_validator, r)

    agree()


GC_PROBE = """
import gc, json, os, runpy, sys

write = os.write

def first(fd, data):  # the initialize answer: the garbage collector's state then
    if fd == 1:
        os.write = write
        sys.stderr.write(json.dumps({"enabled": gc.isenabled(), "young": gc.get_stats()[0]["collections"]}) + "\\n")
    return write(fd, data)

os.write = first
sys.argv = ["lmbridge", "serve", "--state-dir", sys.argv[1], "--no-prewarm", "--log-level", "error"]
runpy.run_module("lmbridge", run_name="__main__")
"""


def test_no_garbage_is_collected_while_lmbridge_serve_imports(tmp_path) -> None:
    """``lmbridge serve`` imports what ``initialize`` needs with the garbage collector off
    (docs/performance.md, "Start-up: what is left, measured": ~80 young collections were ~6%
    of the start-up); it is on again when the answer is written."""
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}) + "\n"
    probe = subprocess.run([sys.executable, "-c", GC_PROBE, str(tmp_path)], input=line, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout.splitlines()[0])["id"] == 1
    state = json.loads(next(x for x in probe.stderr.splitlines() if x.startswith("{")))
    assert state["enabled"]
    assert state["young"] < 50  # ~80 with the collector on throughout (~20 now: before and after the imports)


def _package(root, name: str) -> None:
    """A package ``name`` of two modules (``name.a`` imports ``name.b``) in folder ``root``."""
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    (root / name / "a.py").write_text(f"import {name}.b\n")
    (root / name / "b.py").write_text("")


def test_the_warm_up_gives_way_while_the_shim_link_is_busy(tmp_path, monkeypatch) -> None:
    """The warm-up after ``initialize`` imports nothing while lines are being handled
    (``daemon.warm``: docs/performance.md, "The warm-up gives way to requests"); it goes on
    once they stop, and leaves ``sys.meta_path`` as it was. An import by the thread handling
    the lines, while the warm-up waits, waits for it (Python's import lock) and so ends the
    wait: no deadlock."""
    import threading
    import time

    from lmbridge.daemon import warm

    _package(tmp_path, "warmpkg")
    _package(tmp_path, "mainpkg")
    _package(tmp_path, "firstpkg")
    monkeypatch.syspath_prepend(str(tmp_path))
    meta_path = list(sys.meta_path)
    last = [time.monotonic()]  # when this thread last "handled a line"
    done: list[warm.GiveWay] = []
    busy = lambda: time.monotonic() - last[0] < 1.0  # noqa: E731
    thread = threading.Thread(target=lambda: done.append(warm.load(["warmpkg.a"], busy, longest=600, first=["firstpkg.a"])))
    thread.start()
    began = time.monotonic()
    while time.monotonic() - began < 0.5:  # lines handled every 5 ms: the warm-up waits
        last[0] = time.monotonic()
        time.sleep(0.005)
    assert thread.is_alive() and "warmpkg" not in sys.modules
    assert "firstpkg.b" in sys.modules  # ``first``: at once, however busy
    import mainpkg.a  # noqa: F401  (waits for the import lock: no line handled meanwhile, so the warm-up goes on)

    thread.join(60)
    assert not thread.is_alive() and {"warmpkg", "warmpkg.a", "warmpkg.b", "mainpkg.b"} <= set(sys.modules)
    assert done[0].waits == 1  # once, before the first module: not again once quiet
    assert sys.meta_path == meta_path


def test_the_warm_up_waits_a_bounded_time(tmp_path, monkeypatch) -> None:
    """A link busy for good holds each module up ``longest`` seconds at most: the warm-up ends."""
    from lmbridge.daemon import warm

    _package(tmp_path, "boundpkg")
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = warm.load(["boundpkg.a"], lambda: True, longest=0.01)
    assert {"boundpkg", "boundpkg.a", "boundpkg.b"} <= set(sys.modules)
    assert finder.waits == 3 and finder not in sys.meta_path


def test_the_warm_up_is_timed_by_the_lines_the_daemon_handles(tmp_path) -> None:
    """The daemon's warm-up is given the time its stdin's last line was handled."""
    import anyio

    from lmbridge.daemon.root import Config, Server
    from lmbridge.daemon.stdio import Stdout

    seen: list[float] = []

    async def main() -> None:
        server = Server(Config())

        async def lines():
            yield json.dumps({"jsonrpc": "2.0", "id": 1, "method": "lm/provideTokenCount", "params": {"modelId": "demo", "text": "hi"}}).encode() + b"\n"
            await anyio.sleep(0.05)
            assert server.stdin is not None
            seen.extend([server.front._heard(), server.stdin.last_line])

        await server.serve(lines(), Stdout(lambda data: None))

    anyio.run(main)
    assert seen[0] == seen[1] > 0


def test_lmbridge_serve_builds_only_its_own_parser(monkeypatch, capsys) -> None:
    """``lmbridge serve`` builds its own argparse parser, not every command's: argparse looks
    up a translation (``gettext``) for each parser's messages (docs/performance.md, "Start-up:
    the parser, the wire models and the catalog"). ``lmbridge --help`` still lists them all."""
    import argparse

    from lmbridge import cli

    made: list[str] = []
    add_parser = argparse._SubParsersAction.add_parser

    def counted(self: argparse._SubParsersAction, name: str, **kw: object) -> argparse.ArgumentParser:  # type: ignore[type-arg]
        made.append(name)
        return add_parser(self, name, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(argparse._SubParsersAction, "add_parser", counted)
    served: list[argparse.Namespace] = []
    monkeypatch.setattr(cli, "_serve", lambda args: served.append(args) or 0)
    assert cli.main(["serve", "--no-prewarm", "--idle-timeout", "5"]) == 0
    assert made == ["serve"] and served[0].no_prewarm and served[0].idle_timeout == 5
    made.clear()
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert made == list(cli.COMMANDS)
    shown = capsys.readouterr().out
    assert all(name in shown for name in cli.COMMANDS)


def test_initialize_is_answered_before_the_method_table_is_made(tmp_path) -> None:
    """``front.Front`` answers ``initialize`` with no method table, router or session index made
    (docs/performance.md, "Start-up: the method table and the session index after the answer");
    the next request makes the table, which answers an ``initialize`` it is handed (a
    notification: settings taken; params as an array: -32602) as the front does."""
    import anyio

    from lmbridge.daemon.root import Config, Server
    from lmbridge.daemon.session_index import SessionIndex
    from lmbridge.daemon.stdio import Stdout

    opened: list[Path] = []
    written: list[bytes] = []
    seen: dict[str, object] = {}

    def open_index() -> SessionIndex:
        opened.append(tmp_path)
        return SessionIndex(tmp_path)

    def frame(rid: object, method: str, params: object) -> bytes:
        body = {"jsonrpc": "2.0", "method": method, "params": params} | ({} if rid is None else {"id": rid})
        return json.dumps(body).encode() + b"\n"

    async def main() -> None:
        server = Server(Config(open_index=open_index))

        async def lines():
            yield frame(1, "initialize", {"protocolVersion": 1, "workspaceFolders": ["/a"], "agents": [{"id": "claude"}]})
            with anyio.fail_after(60):
                while not written:
                    await anyio.sleep(0.01)
            seen["before"] = (server._methods, server._router, list(opened))
            yield frame(None, "initialize", {"protocolVersion": 1, "workspaceFolders": ["/b"]})
            yield frame(2, "initialize", [1])
            yield frame(3, "lm/provideLanguageModelChatInformation", {})
            with anyio.fail_after(60):
                while b"".join(written).count(b"\n") < 3:
                    await anyio.sleep(0.01)
            seen["after"] = (server._methods is not None, server.router.settings.workspace, list(opened))

        await server.serve(lines(), Stdout(written.append))

    anyio.run(main)
    answers = {a["id"]: a for a in (json.loads(line) for data in written for line in data.splitlines())}
    assert answers[1]["result"]["protocolVersion"] == 1 and "agentProblems" not in answers[1]["result"]
    assert seen["before"] == (None, None, [])
    assert answers[2]["error"]["code"] == -32602
    assert {m["id"] for m in answers[3]["result"]["models"]} >= {"claude"}
    assert seen["after"] == (True, ["/b"], [tmp_path])  # the model list read the index (its cached models)
