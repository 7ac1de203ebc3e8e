"""Stateful markers: a chat's identity that VS Code carries (docs/vscode.md, "Stateful markers").

Every answer the daemon streams carries one ``LanguageModelDataPart`` of mime type
``stateful_marker`` (``MIME``). Copilot Chat stores it with that answer and puts it back
into the answer's assistant message in every later request of the chat. Its data is UTF-8
``<modelId>\\<marker>``. That is Copilot's encoding: it splits the data at the backslash, keeps the
second piece, and writes the current model's id in front of it again when it re-sends it,
so only the text after the last backslash is read here.

``<marker>`` is ``lmb1.<session>.<answer>.<mac>`` (ASCII, no backslash):

* ``session``: the session's token (``HistoryCore``: a daemon-run nonce and a counter,
  kept in the session index so that a later daemon knows it too), ``[0-9a-z]{1,40}``;
* ``answer``: the session's request number whose answer carries it, decimal, no leading zero;
* ``mac``: the first 16 bytes of HMAC-SHA256(key, ``lmb1.<session>.<answer>``), base64url
  without padding (22 characters). The key is the daemon's own secret (32 random bytes in
  the state folder, ``session_index.SessionIndex.marker_key``).

A marker names one answer of one session, and only the daemon that holds the key can
write one: a marker another provider wrote (Copilot re-sends it, re-stamped, after a model
switch), or one forged in a request by another extension, fails the MAC and is ignored
(``decode`` gives None). Pure: no I/O, no clock, no random numbers (the key is passed in).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass

from lmbridge.core.messages import DataPart, Message

#: The data part's mime type (Copilot Chat's ``CustomDataPartMimeTypes.StatefulMarker``).
MIME = "stateful_marker"
VERSION = "lmb1"
#: The longest data (base64 characters) read: a model id and a marker fit many times over.
MAX_DATA = 2048
_MAC_BYTES = 16
_MARKER = re.compile(r"lmb1\.([0-9a-z]{1,40})\.(0|[1-9][0-9]{0,8})\.([A-Za-z0-9_-]{22})")


@dataclass(frozen=True, slots=True)
class Marker:
    """One answer of one session: ``session`` the session's token, ``answer`` its request number."""

    session: str
    answer: int

    def text(self, key: bytes) -> str:
        """The marker as it travels (``lmb1.<session>.<answer>.<mac>``). Raises ``ValueError``
        for a token outside ``[0-9a-z]{1,40}`` or a negative answer, or an empty key."""
        body = f"{VERSION}.{self.session}.{self.answer}"
        if not key or self.answer < 0 or not re.fullmatch(r"[0-9a-z]{1,40}", self.session):
            raise ValueError(f"not a marker: {body!r}")
        return f"{body}.{_mac(key, body)}"

    def key(self) -> str:
        """``<session>.<answer>``: how the session index writes it (no MAC: the index is the daemon's own)."""
        return f"{self.session}.{self.answer}"

    @classmethod
    def of_key(cls, value: str) -> Marker:
        """The inverse of ``key``. Raises ``ValueError``."""
        session, _, answer = value.partition(".")
        if not re.fullmatch(r"[0-9a-z]{1,40}", session) or not re.fullmatch(r"0|[1-9][0-9]{0,8}", answer):
            raise ValueError(f"not a marker key: {value!r}")
        return cls(session, int(answer))


def _mac(key: bytes, body: str) -> str:
    digest = hmac.new(key, body.encode("ascii"), hashlib.sha256).digest()[:_MAC_BYTES]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def part(model_id: str, marker: Marker, key: bytes) -> dict[str, str]:
    """The wire part the shim reports as ``LanguageModelDataPart(data, "stateful_marker")``
    (docs/protocol.md, "Response parts"): ``{"type": "data", "mimeType", "data": base64}``."""
    data = f"{model_id}\\{marker.text(key)}".encode()
    return {"type": "data", "mimeType": MIME, "data": base64.b64encode(data).decode("ascii")}


def decode(data: str, key: bytes | None) -> Marker | None:
    """The marker in a ``stateful_marker`` part's base64 ``data``; None when it is not one
    of ours: not base64 or UTF-8, too long, not the grammar above, or the MAC is not
    ``key``'s (None: markers are off, nothing decodes)."""
    if not key or len(data) > MAX_DATA:
        return None
    try:
        text = base64.b64decode(data, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    m = _MARKER.fullmatch(text.rsplit("\\", 1)[-1])
    if m is None:
        return None
    session, answer, mac = m.groups()
    if not hmac.compare_digest(mac, _mac(key, f"{VERSION}.{session}.{answer}")):
        return None
    return Marker(session, int(answer))


def of_message(message: Message, key: bytes | None) -> Marker | None:
    """The marker of an assistant message: its first ``stateful_marker`` data part (the one
    Copilot Chat reads), decoded; None for any other message or a part that is not ours."""
    if message.role != "assistant" or not key:
        return None
    for p in message.content:
        if isinstance(p, DataPart) and p.mimeType == MIME:
            return decode(p.data, key)
    return None
