"""Stateful markers (core/marker.py; docs/protocol.md, "Shapes"): the encoding, row by row,
and what decodes to nothing, plus a hypothesis round trip."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core import marker
from lmbridge.core.marker import Marker
from lmbridge.core.messages import Message

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def test_the_part_is_a_data_part_of_utf8_model_backslash_marker() -> None:
    p = marker.part("claude/opus", Marker("a1b2c3", 7), KEY)
    assert (p["type"], p["mimeType"]) == ("data", "stateful_marker")
    model, text = base64.b64decode(p["data"]).decode().split("\\")
    assert model == "claude/opus"
    session, answer, mac = text.removeprefix("lmb1.").split(".")
    assert (session, answer, len(mac)) == ("a1b2c3", "7", 22)
    assert "\\" not in text and text.isascii()  # Copilot Chat splits the data at the backslash


GOOD = Marker("a1b2c3", 7).text(KEY)
_, _, _, MAC = GOOD.split(".")


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("ours", b64(f"claude\\{GOOD}"), Marker("a1b2c3", 7)),
        ("re-stamped with another model's id (a model switch)", b64(f"codex\\{GOOD}"), Marker("a1b2c3", 7)),
        ("a model id with a backslash: the last piece is read", b64(f"we\\ird\\{GOOD}"), Marker("a1b2c3", 7)),
        ("no model id", b64(GOOD), Marker("a1b2c3", 7)),
        ("another key's MAC (another daemon, a forgery)", b64("claude\\" + Marker("a1b2c3", 7).text(OTHER_KEY)), None),
        ("the answer changed, MAC kept", b64(f"claude\\lmb1.a1b2c3.8.{MAC}"), None),
        ("the session changed, MAC kept", b64(f"claude\\lmb1.a1b2c4.7.{MAC}"), None),
        ("a leading zero (one answer, one spelling)", b64(f"claude\\lmb1.a1b2c3.07.{MAC}"), None),
        ("another provider's marker (an OpenAI response id)", b64("claude\\resp_0123456789abcdef"), None),
        ("another version", b64(f"claude\\lmb2.a1b2c3.7.{MAC}"), None),
        ("uppercase session", b64(f"claude\\lmb1.A1B2C3.7.{MAC}"), None),
        ("trailing text", b64(f"claude\\{GOOD} "), None),
        ("not base64", "%%%", None),
        ("not UTF-8", b64(b"\xff\xfe"), None),
        ("empty", "", None),
        ("too long", b64("x" * 4096 + f"\\{GOOD}"), None),
    ],
)
def test_decode(name: str, data: str, expected: Marker | None) -> None:
    assert marker.decode(data, KEY) == expected


def test_no_key_no_markers() -> None:
    assert marker.decode(b64(f"claude\\{GOOD}"), None) is None and marker.decode(b64(f"claude\\{GOOD}"), b"") is None
    with pytest.raises(ValueError):
        Marker("a1", 1).text(b"")


@pytest.mark.parametrize(("session", "answer"), [("", 1), ("A", 1), ("a.b", 1), ("a\\b", 1), ("a" * 41, 1), ("a", -1)])
def test_a_marker_that_could_not_be_read_back_is_never_written(session: str, answer: int) -> None:
    with pytest.raises(ValueError):
        Marker(session, answer).text(KEY)


def msg(role: str, *parts: dict[str, str]) -> Message:
    return Message.model_validate({"role": role, "content": [{"type": "text", "value": "x"}, *parts]})


def test_of_message_reads_the_first_marker_part_of_an_assistant_message_only() -> None:
    ours = marker.part("m", Marker("s1", 1), KEY)
    other = marker.part("m", Marker("s2", 2), KEY)
    foreign = {"type": "data", "mimeType": "stateful_marker", "data": b64("m\\resp_1")}
    assert marker.of_message(msg("assistant", ours, other), KEY) == Marker("s1", 1)
    assert marker.of_message(msg("assistant", foreign, ours), KEY) is None  # as Copilot reads it: the first
    assert marker.of_message(msg("user", ours), KEY) is None  # a user message names no answer
    assert marker.of_message(msg("assistant", {**ours, "mimeType": "application/json"}), KEY) is None


def test_key_round_trip_for_the_index() -> None:
    assert Marker.of_key(Marker("ab12", 30).key()) == Marker("ab12", 30)
    for bad in ("", "ab12", "ab12.", "AB.1", "ab.01", "ab.-1"):
        with pytest.raises(ValueError):
            Marker.of_key(bad)


@given(st.from_regex(r"[0-9a-z]{1,40}", fullmatch=True), st.integers(0, 999_999_999), st.text(max_size=40), st.binary(min_size=1, max_size=64))
def test_round_trip(session: str, answer: int, model_id: str, key: bytes) -> None:
    mk = Marker(session, answer)
    assert marker.decode(marker.part(model_id, mk, key)["data"], key) == mk
    assert marker.decode(marker.part(model_id, mk, key)["data"], key + b"x") is None
