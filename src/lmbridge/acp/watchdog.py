"""Process groups that die with the daemon, whatever ends it (docs/reliability.md, "Nothing
outlives the daemon").

Agents and the commands lmbridge runs for them (``terminal/create``) each start in a
process group of their own (``start_new_session``), so one signal ends what they started
too. The daemon ends those groups itself when it stops (EOF, SIGTERM); a SIGKILL or a crash
gives it no chance, and its children would be left running. So the daemon starts, on its
first spawn, one watchdog process and tells it, through a pipe only the daemon holds the
writing end of, each group it starts (``+<pgid>``) and each it has ended (``-<pgid>``).
When that pipe reads end-of-file, the daemon is gone, however it ended (the kernel closes
a dead process's descriptors): the watchdog sends each group still listed SIGTERM, SIGKILL
after ``GRACE`` seconds to what is left, and exits.

Why a watchdog and not ``PR_SET_PDEATHSIG``: that signal reaches only the process it is
set in (the group's leader), not the helpers the command started in its group; it is set
in a child before ``exec`` (``preexec_fn``, unsafe in a process with threads); and it
follows the *thread* that started the child, not the process. The watchdog ends the whole
group, and is Linux- and macOS-alike (a pipe and ``killpg``).

The watchdog is this file run as a script (standard library only, ``python -I -S``): it
forks at once, and the parent exits, so the watchdog is no child of the daemon (it is
reaped by init, and never counted among the daemon's agents); it runs in a session of its
own, so a signal to the daemon's process group does not reach it before it has done its
work. A group listed but already gone costs nothing (``ProcessLookupError``); a group is
delisted only once the daemon has sent it SIGKILL, so its id cannot have been reused by an
unrelated group meanwhile (an id stays taken while any member of the group lives).

Daemon side: ``open_group`` (spawn + ``+``), ``ended`` (``-``). Left open: a SIGKILL in the
few milliseconds between a spawn and its ``+`` line (the event loop connecting the child's
pipes) leaves that one group running; a command that leaves its group (``setsid``) is not
followed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

#: Seconds between the watchdog's SIGTERM and its SIGKILL to what is left of a group.
GRACE = 2.0
#: Seconds between the watchdog's checks for groups that have ended, within ``GRACE``.
POLL = 0.02


# ------------------------------------------------------------------ the watchdog (a script)


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # taken by another user's group: not ours to end
        return True
    return False


def end_groups(groups: set[int], grace: float = GRACE) -> None:
    """SIGTERM to each of ``groups``, then SIGKILL to those left after ``grace`` seconds."""
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace
    left = {g for g in groups if not _gone(g)}
    while left and time.monotonic() < deadline:
        time.sleep(POLL)
        left = {g for g in left if not _gone(g)}
    for pgid in left:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def watch(fd: int = 0) -> None:
    """Read ``+<pgid>``/``-<pgid>`` lines from ``fd`` until end-of-file, then ``end_groups``."""
    groups: set[int] = set()
    pending = b""
    while True:
        try:
            data = os.read(fd, 4096)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            break
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                pgid = int(line[1:])
            except ValueError:
                continue
            if pgid <= 1:  # never a broadcast (-1) or init's group
                continue
            if line.startswith(b"+"):
                groups.add(pgid)
            elif line.startswith(b"-"):
                groups.discard(pgid)
    if groups:
        end_groups(groups)


def _main() -> None:
    if os.fork() > 0:  # the daemon reaps this parent at once; the watchdog lives on as init's
        os._exit(0)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    os.chdir("/")
    watch(0)
    os._exit(0)


# ------------------------------------------------------------------ the daemon's side


class Watchdog:
    """The daemon's link to its watchdog: started on the first ``guard``; one per process.
    If it cannot be started or has died, groups are not guarded (logged once) and the rest
    works as before."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid: int | None = None  # the process that started it (a fork must start its own)
        self._failed = False

    def _start(self) -> int | None:
        if self._pid == os.getpid() and self._fd is not None:
            return self._fd
        if self._failed:
            return None
        read, write = os.pipe()  # neither end is inherited by what the daemon starts later
        try:
            starter = subprocess.Popen(
                [sys.executable, "-I", "-S", __file__], stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
            )  # fmt: skip
        except OSError as exc:
            os.close(write)
            self._failed = True
            _log().warning("watchdog not started: a SIGKILL of the daemon would leave its agents and commands running", error=str(exc))
            return None
        finally:
            os.close(read)
        # It forks the watchdog and exits once Python has started (~15 ms idle, ~0.2-0.4 s on
        # a loaded 2-core machine): reaped off the event loop. The pipe holds what the
        # daemon writes meanwhile.
        threading.Thread(target=starter.wait, name="lmbridge-watchdog-starter", daemon=True).start()
        self._fd, self._pid = write, os.getpid()
        return write

    def _tell(self, line: str) -> None:
        fd = self._fd if self._pid == os.getpid() else None
        if fd is None:
            return
        try:
            os.write(fd, line.encode())
        except OSError as exc:
            os.close(fd)
            self._fd, self._failed = None, True
            _log().warning("watchdog gone: groups no longer guarded", error=str(exc))

    def guard(self, pgid: int) -> None:
        """Have the watchdog end group ``pgid`` if the daemon dies before ``release``."""
        if self._start() is not None:
            self._tell(f"+{pgid}\n")

    def release(self, pgid: int) -> None:
        """Group ``pgid`` has been ended by the daemon (SIGKILL sent, or gone): not the watchdog's any more."""
        self._tell(f"-{pgid}\n")

    def start(self) -> None:
        """Start the watchdog now (before the first spawn, so that spawn is guarded at once)."""
        self._start()


_watchdog = Watchdog()


def _log() -> Any:
    from lmbridge.log import get_logger

    return get_logger("watchdog")


async def open_group(command: list[str], **kwargs: Any) -> Any:
    """``anyio.open_process(command, start_new_session=True, **kwargs)``, its group guarded
    by the watchdog: call ``ended(process)`` once the daemon has ended the group itself
    (killpg SIGKILL, or the group is gone). Raises what ``open_process`` raises (``OSError``)."""
    import anyio

    _watchdog.start()
    process = await anyio.open_process(command, start_new_session=True, **kwargs)
    _watchdog.guard(process.pid)
    return process


def ended(process: Any) -> None:
    """``process``'s group (from ``open_group``) was ended by the daemon: delisted."""
    _watchdog.release(process.pid)


if __name__ == "__main__":
    _main()
