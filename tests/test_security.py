"""Nothing in a workspace, and no other local user, can steer lmbridge (docs/vscode-shim.md,
"Security model"):

- a workspace's ``lmbridge/`` package or ``json.py`` is never imported by the processes
  lmbridge starts there (the daemon as the extension starts it, the demo agent, the MCP
  stdio relay an agent starts): each runs ``python -P``;
- the VS Code tools' socket serves only the daemon's own user, and nothing secret is
  handed to an agent (there is no secret: docs/tools.md, "Who can reach the tools");
- ``--record FILE`` never follows a symbolic link, never truncates a file that is not a
  recording, and writes 0600;
- the demo agent's scratch folder is its own (``mkdtemp``), never one another user made.

The extension's part (the settings' scopes, the bootstrap's hashed install, the sign-in
terminal, the daemon's ``-P`` launch from a workspace) is tested in vscode-shim/test/; the
locks in tests/test_lock.py; the agents' command lines with a real claude in
tests/real_agent/test_claude_bridge.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from lmbridge.core.messages import ToolInfo
from lmbridge.daemon import catalog
from lmbridge.devtools.client import approve, assistant, is_agent_action, text_of, user
from lmbridge.rpc.record import Recorder
from lmbridge.tools import mcp_bridge
from lmbridge.tools.mcp_bridge import McpHost, ToolBridge
from tests.conftest import children

pytestmark = pytest.mark.anyio
LIMIT = 180  # seconds per test body: ~3 s idle (a daemon, an agent, a relay start); docs/reliability.md

#: Modules a hostile repository could hold, each writing a marker when imported.
HOSTILE_MODULES = ("lmbridge/__init__.py", "json.py", "anyio/__init__.py", "mcp/__init__.py")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def hostile_workspace(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace whose modules shadow lmbridge's and the standard library's: (workspace,
    the folder their markers go to)."""
    workspace, markers = tmp_path / "workspace", tmp_path / "markers"
    markers.mkdir()
    for name in HOSTILE_MODULES:
        module = workspace / name
        module.parent.mkdir(parents=True, exist_ok=True)
        marker = markers / name.replace("/", "_")
        module.write_text(f"open({str(marker)!r}, 'w').close()\n")
    return workspace, markers


def cwd_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/cwd")


async def test_a_workspaces_modules_never_run_in_lmbridges_processes(tmp_path: Path, daemon: Any, scripted: Any) -> None:
    """The daemon started as the extension starts it with a Python (``<python> -P -m
    lmbridge serve``, in the workspace folder), one chat with the built-in demo agent, one
    with an agent that starts the MCP stdio relay: all of them run in the workspace, and
    nothing of it is imported."""
    workspace, markers = hostile_workspace(tmp_path)
    as_the_shim = (sys.executable, "-P", "-m", "lmbridge", "serve")  # vscode-shim/src/product/config.ts launchSpec
    scratch = {"LMBRIDGE_DEMO_SCRATCH": str(tmp_path / "scratch")}
    with anyio.fail_after(LIMIT):
        async with daemon(command=as_the_shim, cwd=str(workspace), workspace=[str(workspace)], env=scratch) as c:
            assert cwd_of(c.process.pid) == str(workspace)
            call = await c.chat("demo", [user("hi")])
            assert call.error is None and "Hello from the demo agent" in text_of(call), call.error
            (demo,) = children(c.process.pid)
            assert cwd_of(demo) == str(workspace)
        agent = scripted({"turns": [[{"mcp_connect": True}, {"mcp_list": True}, {"text": "listed"}]]})
        tools = {"tools": [{"name": "search_workspace", "description": "Search", "inputSchema": {"type": "object", "properties": {}}}]}
        async with daemon([agent], command=as_the_shim, cwd=str(workspace), workspace=[str(workspace)]) as c:
            call = await c.chat(agent.id, [user("hi")], options=tools)
            assert call.error is None and "listed" in text_of(call), call.error
            (pid,) = agent.pids()
            assert cwd_of(pid) == str(workspace)
    assert agent.events("mcp_tools")[0]["names"] == ["search_workspace"]  # the relay ran, in the workspace
    assert sorted(p.name for p in markers.iterdir()) == []


def test_no_lmbridge_process_honours_python_variables_from_an_agents_environment(tmp_path: Path) -> None:
    """The MCP relay gets the agent's environment, and agents put workspace values there
    (gemini-cli the workspace's ``.env``, Claude Code ``.claude/settings.json``'s ``env``): a
    ``PYTHONPATH`` to the workspace's ``sitecustomize.py``, a ``PYTHONSTARTUP``, a
    ``PYTHONUSERBASE``. The relay and the demo agent, as lmbridge starts them, honour none."""
    hostile, marker = tmp_path / "hostile", tmp_path / "ran"
    hostile.mkdir()
    plant = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (hostile / "sitecustomize.py").write_text(plant)
    (hostile / "usercustomize.py").write_text(plant)
    (hostile / "startup.py").write_text(plant)
    env = {**os.environ, "PYTHONPATH": str(hostile), "PYTHONSTARTUP": str(hostile / "startup.py"), "PYTHONINSPECT": "1", "PYTHONUSERBASE": str(hostile)}
    host = McpHost()
    host.socket_path = str(tmp_path / "no-daemon.sock")
    relay = host.server_config(ToolBridge("s1", lambda call: anyio.sleep(0)))
    done = subprocess.run([relay["command"], *relay["args"]], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert done.returncode == 2 and b"cannot reach the daemon" in done.stderr  # it ran, as far as it could
    demo = catalog.demo_agent()
    subprocess.run([demo.command, *demo.args], env=env, input=b"", capture_output=True, timeout=60)  # stdin closed: it ends
    assert not marker.exists(), marker.read_text()


# ---------------------------------------------------------------- the VS Code tools' socket

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}

#: What a relay does (mcp_stdio.py), standard library only so that any user's Python runs
#: it: connect, name the session, send initialize, print what comes back until the daemon
#: closes; "EACCES" when the socket cannot even be reached.
CLIENT = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("EACCES"); sys.exit(0)
out = b""
try:
    s.sendall(sys.argv[2].encode() + b"\\n" + sys.argv[3].encode() + b"\\n")
    s.settimeout(20)
    while chunk := s.recv(65536):
        out += chunk
        if b"\\n" in out:
            break
except OSError:  # refused: closed under it (reset, broken pipe), or never answered
    pass
sys.stdout.write(out.decode())
"""

OTHER_UID = 65534  # nobody: any user but the daemon's


def other_users_python() -> str | None:
    """A Python another user can run (the tests' own may sit in root's private home), or
    None: then the other user is a mocked peer credential."""
    if os.geteuid() != 0:
        return None
    for python in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            ok = subprocess.run([python, "-I", "-c", "pass"], user=OTHER_UID, group=OTHER_UID, extra_groups=[], capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if ok.returncode == 0:
            return python
    return None


async def _client(socket_path: str, python: str = sys.executable, **as_user: Any) -> str:
    hello = json.dumps({"session": "s1"})
    done = await anyio.run_process([python, "-I", "-c", CLIENT, socket_path, hello, json.dumps(INITIALIZE)], check=True, **as_user)
    return done.stdout.decode()


async def test_the_tools_socket_serves_only_the_daemons_own_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """The socket sits in a 0700 folder, is 0600, and even where another user can reach it
    (a folder opened up by mistake or an ACL), the daemon reads the peer's user id from the
    kernel and closes the connection unserved. Run as root (CI), the other user is real
    (uid 65534); otherwise the peer credential is mocked."""

    async def on_call(call: Any) -> None:
        pass

    host = McpHost()
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        bridge = ToolBridge("s1", on_call)
        await host.add(bridge)
        await bridge.set_tools([ToolInfo(name="search_workspace", description="Search", inputSchema={"type": "object", "properties": {}})])
        assert host.socket_path is not None
        sock = Path(host.socket_path)
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700 and stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert sock.stat().st_uid == os.getuid()
        with anyio.fail_after(LIMIT):
            served = json.loads(await _client(str(sock)))
            assert served["result"]["serverInfo"]["name"] == "lmbridge-vscode-tools"  # the daemon's own user

            python = other_users_python()
            if python is not None:
                as_other = {"user": OTHER_UID, "group": OTHER_UID, "extra_groups": []}
                assert (await _client(str(sock), python, **as_other)).strip() == "EACCES"  # the folder stops it first
                os.chmod(sock.parent, 0o711)
                os.chmod(sock, 0o666)
                assert await _client(str(sock), python, **as_other) == ""  # the peer check: closed, unserved
            else:
                monkeypatch.setattr(mcp_bridge, "peer_uid", lambda s: os.getuid() + 1)
                assert await _client(str(sock)) == ""
                monkeypatch.setattr(mcp_bridge, "peer_uid", lambda s: None)  # a platform that does not say: refused too
                assert await _client(str(sock)) == ""
        host.remove("s1")
        tg.cancel_scope.cancel()


def test_a_relay_is_given_nothing_secret() -> None:
    """What ``session/new`` gives the agent for its tools (and what claude-agent-acp puts
    on its Claude Code's command line): a command, the socket's path and the session id."""
    host = McpHost()
    host.socket_path = "/tmp/lmbridge-mcp-x/mcp.sock"
    config = host.server_config(ToolBridge("s1", lambda call: anyio.sleep(0)))
    assert config == {
        "name": "vscode", "command": sys.executable,
        "args": ["-E", "-P", "-m", "lmbridge", "mcp-stdio", "--socket", "/tmp/lmbridge-mcp-x/mcp.sock", "--session", "s1"], "env": [],
    }  # fmt: skip


# ---------------------------------------------------------------- files lmbridge writes


def test_record_never_follows_a_symbolic_link(tmp_path: Path) -> None:
    target = tmp_path / "bashrc"
    target.write_text("export PATH=...\n")
    link = tmp_path / "session.jsonl"
    link.symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        Recorder.open(link)
    assert target.read_text() == "export PATH=...\n"
    done = subprocess.run([sys.executable, "-m", "lmbridge", "serve", "--record", str(link)], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "is a symbolic link: not followed" in done.stderr
    assert target.read_text() == "export PATH=...\n"


def test_record_writes_0600_and_overwrites_only_a_recording(tmp_path: Path) -> None:
    new = tmp_path / "new.jsonl"
    Recorder.open(new).close()
    assert stat.S_IMODE(new.stat().st_mode) == 0o600
    assert new.read_text().startswith('{"lmbridge-recording":1,')
    # An older recording (say 0644): replaced, and made private.
    new.chmod(0o644)
    Recorder.open(new).close()
    assert stat.S_IMODE(new.stat().st_mode) == 0o600
    # Anything else is left alone.
    dotfile = tmp_path / ".bashrc"
    dotfile.write_text("alias ll='ls -l'\n")
    with pytest.raises(OSError, match="not an lmbridge recording"):
        Recorder.open(dotfile)
    assert dotfile.read_text() == "alias ll='ls -l'\n"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        Recorder.open(fifo)


async def test_the_demo_agents_scratch_folder_is_its_own(tmp_path: Path, daemon: Any) -> None:
    """Without $LMBRIDGE_DEMO_SCRATCH the demo agent writes under the temp folder: into a
    folder it made itself (``mkdtemp``, 0700), never into one another user made first under
    the name it would pick (here a link to that user's folder)."""
    tmp, theirs = tmp_path / "tmp", tmp_path / "their-folder"
    tmp.mkdir()
    theirs.mkdir()
    (tmp / "lmbridge-demo").symlink_to(theirs)
    with anyio.fail_after(LIMIT):
        async with daemon(env={"TMPDIR": str(tmp), "LMBRIDGE_DEMO_SCRATCH": ""}) as c:
            history = [user("write a file please")]
            asked = await c.chat("demo", history)
            (part,) = [p for p in asked.parts if is_agent_action(p)]
            done = await c.chat("demo", [*history, assistant(asked.parts), approve(part)])
            assert done.error is None and "I wrote" in text_of(done), done.error
    assert list(theirs.iterdir()) == []
    (written,) = [Path(w) for w in text_of(done).split("`") if w.endswith("notes.txt")]
    folder = written.parent
    assert folder.parent == tmp and folder.name.startswith("lmbridge-demo-") and not folder.is_symlink()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.getuid()
    assert written.read_text().endswith("write a file please")
