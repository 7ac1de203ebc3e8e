"""The persisted session index: which agent session each chat had (docs/sessions.md, "The session index").

So that a new daemon (VS Code reloaded) continues the agent's own session
rather than telling a fresh one the conversation. One JSON file,
``$XDG_STATE_HOME/lmbridge/sessions.json`` (default
``~/.local/state/lmbridge``)::

    {"program": "lmbridge", "version": 1,
     "sessions": [{"agent": "claude", "cwd": "/work", "saved": 1764000000.0,
                   "model": "claude", "resume": "<ACP sessionId>",
                   "items": [["u", [], "<words digest>"], ["a", "<text digest>", "<shown digest>", ["<callId>"]], ...],
                   "last": "done", "pending": [], "unacked": true}, ...]}

An entry is ``HistoryCore.export``'s data plus where the session ran: what the
daemon emitted and of the user's words (digests and callIds, as the history core
matches on), never text or approval tokens. At most ``MAX_ENTRIES`` (the most recent),
written atomically (a temporary file renamed over it) with mode 0600. A file
that is corrupt, foreign or of another version is ignored with a warning and
replaced at the next save.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from lmbridge.log import get_logger

log = get_logger("index")

PROGRAM = "lmbridge"
VERSION = 1
#: models.json's own version: 2 holds the agents' profiles, whose asking mode is each mode
#: button's default (a cache of 1 held the mode an agent started in, which may approve its own
#: actions, as the default VS Code then sends: dropped and learnt again).
MODELS_VERSION = 2
MAX_ENTRIES = 200  # sessions kept (the most recently saved)
FILE = "sessions.json"
RECENT_FILE = "agents.json"  # {"program", "version", "recent": [agent ids, most recent first]}
MAX_RECENT = 3  # agents pre-warmed at start-up
MARKER_KEY_FILE = "marker.key"  # the stateful markers' secret (SessionIndex.marker_key)
MARKER_KEY_BYTES = 32
MODELS_FILE = "models.json"  # {"program", "version", "agents": {agent id: configOptions}, "images": {agent id: bool}, "profiles": {agent id: profile name}}


def state_dir() -> Path:
    """``$XDG_STATE_HOME/lmbridge``, default ``~/.local/state/lmbridge`` (XDG Base Directory)."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "lmbridge"


class SessionIndex:
    """The index file in ``directory`` (``state_dir()`` by default)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.path = (directory or state_dir()) / FILE

    def load(self) -> list[dict[str, Any]]:
        """The entries, newest last; ``[]`` for a missing, corrupt or foreign file (logged)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("session index unreadable: ignored", path=str(self.path), error=str(exc))
            return []
        try:
            data = json.loads(raw)
        except ValueError as exc:
            log.warning("session index corrupt: ignored", path=str(self.path), error=str(exc)[:200])
            return []
        if not isinstance(data, dict) or data.get("program") != PROGRAM or data.get("version") != VERSION:
            log.warning("session index of another program or version: ignored", path=str(self.path))
            return []
        sessions = data.get("sessions")
        if not isinstance(sessions, list):
            log.warning("session index without a session list: ignored", path=str(self.path))
            return []
        return [e for e in sessions if isinstance(e, dict)]

    def save(self, entries: list[dict[str, Any]]) -> None:
        """Replace the file with ``entries`` (the newest ``MAX_ENTRIES``), atomically, mode 0600.
        Raises ``OSError`` when the directory cannot be written."""
        entries = sorted(entries, key=lambda e: e.get("saved", 0))[-MAX_ENTRIES:]
        self._write(self.path, {"program": PROGRAM, "version": VERSION, "sessions": entries})

    @staticmethod
    def _write(path: Path, value: Any) -> None:
        SessionIndex._replace(path, json.dumps(value, separators=(",", ":")).encode())

    @staticmethod
    def _replace(path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically (a temporary file beside it, mode 0600, then
        renamed over it), making the folder (mode 0700) if missing. Raises ``OSError``."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".lmbridge-", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def marker_key(self) -> bytes:
        """The secret of the stateful markers (``core/marker.py``): 32 random bytes in
        ``MARKER_KEY_FILE`` beside the index (mode 0600), made on first use, so that markers
        of answers a previous daemon streamed still verify. A file of another size is
        replaced. Raises ``OSError`` when the folder cannot be written."""
        path = self.path.parent / MARKER_KEY_FILE
        try:
            key = path.read_bytes()
            if len(key) == MARKER_KEY_BYTES:
                return key
            log.warning("marker key of the wrong size: replaced", path=str(path))
        except FileNotFoundError:
            pass
        key = os.urandom(MARKER_KEY_BYTES)
        self._replace(path, key)
        return key

    def recent(self) -> list[str]:
        """The agents used last, most recent first (``[]`` when unknown or unreadable)."""
        try:
            data = json.loads((self.path.parent / RECENT_FILE).read_bytes())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.warning("recent agents unreadable: ignored", error=str(exc)[:200])
            return []
        if not isinstance(data, dict) or data.get("program") != PROGRAM or data.get("version") != VERSION:
            return []
        recent = data.get("recent")
        return [a for a in recent if isinstance(a, str)][:MAX_RECENT] if isinstance(recent, list) else []

    def save_recent(self, agents: list[str]) -> None:
        """Remember the agents used last (at most ``MAX_RECENT``), as ``save`` writes. Raises ``OSError``."""
        self._write(self.path.parent / RECENT_FILE, {"program": PROGRAM, "version": VERSION, "recent": agents[:MAX_RECENT]})

    def models(self) -> dict[str, Any]:
        """Agent id → its ``configOptions`` as last learnt (``agent_models.to_json``); ``{}`` if unknown."""
        try:
            data = json.loads((self.path.parent / MODELS_FILE).read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("agent models cache unreadable: ignored", error=str(exc)[:200])
            return {}
        if not isinstance(data, dict) or data.get("program") != PROGRAM or data.get("version") != MODELS_VERSION:
            return {}
        agents = data.get("agents")
        return {k: v for k, v in agents.items() if isinstance(v, list)} if isinstance(agents, dict) else {}

    def _models_field(self, name: str) -> Any:
        """Field ``name`` of the models cache written by this program and version; None if
        there is none (unreadable: ``models()`` says why)."""
        try:
            data = json.loads((self.path.parent / MODELS_FILE).read_bytes())
        except (OSError, ValueError):
            return None
        return data.get(name) if isinstance(data, dict) and data.get("program") == PROGRAM and data.get("version") == MODELS_VERSION else None

    def images(self) -> dict[str, bool]:
        """Agent id → whether it takes images (its ``promptCapabilities.image``) as last seen; ``{}`` if unknown."""
        images = self._models_field("images")
        return {k: v for k, v in images.items() if isinstance(v, bool)} if isinstance(images, dict) else {}

    def profiles(self) -> dict[str, str]:
        """Agent id → the name of its profile (``core.profiles``) as last seen; ``{}`` if unknown."""
        names = self._models_field("profiles")
        return {k: v for k, v in names.items() if isinstance(v, str)} if isinstance(names, dict) else {}

    def save_models(self, agents: dict[str, Any], images: dict[str, bool] | None = None, profiles: dict[str, str] | None = None) -> None:
        """Cache the agents' ``configOptions`` (``models``'s shape), image capability
        (``images``'s) and profile names (``profiles``'s), as ``save`` writes. Raises ``OSError``."""
        data = {"program": PROGRAM, "version": MODELS_VERSION, "agents": agents, "images": images or {}, "profiles": profiles or {}}
        self._write(self.path.parent / MODELS_FILE, data)

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        n = len(self.load())
        self.path.unlink(missing_ok=True)
        return n


def entry(exported: dict[str, Any], agent: str, cwd: str | None, saved: float | None = None) -> dict[str, Any]:
    """An index entry: ``HistoryCore.export``'s data, the agent and cwd it ran with, and
    ``saved``: when the chat was last used (seconds since the epoch; default now). The
    most recently used ``MAX_ENTRIES`` are kept."""
    return {**exported, "agent": agent, "cwd": cwd, "saved": time.time() if saved is None else saved}
