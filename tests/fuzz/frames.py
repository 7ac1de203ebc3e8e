"""Generated stdin frames for the daemon: what a broken or hostile extension host could send.

Choices go through ``Chooser``; ``RandomChooser`` draws them from a seeded
``random.Random`` (~10 µs a frame): hypothesis draws the seed in
``tests/test_fuzz_stdin.py``, the soak run (``tests/fuzz/soak.py``, ``make fuzz``) takes
one on its command line. Hypothesis does not draw each choice: what a frame continues
depends on the daemon's answers, so the same draws could lead to different frames.

What is expected back is not the generator's business: ``expected_ids`` reads each line
as JSON-RPC 2.0 does (RFC 8259 JSON, ids that are strings or finite numbers), so a frame
the generator damaged on purpose is judged by the same rule as one it built carefully.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
COPILOT = Path(__file__).resolve().parents[1] / "fixtures" / "copilot"


class Chooser(Protocol):
    def integer(self, lo: int, hi: int) -> int: ...
    def pick(self, options: Sequence[T]) -> T: ...


class RandomChooser:
    """Choices from a seeded ``random.Random``."""

    def __init__(self, rng: Any) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return int(self.rng.randint(lo, hi))

    def pick(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]


# ---------------------------------------------------------------- the oracle


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def answerable(rid: Any) -> bool:
    """An id JSON-RPC 2.0 can answer by: a string or a finite number (not a bool)."""
    if isinstance(rid, str):
        return True
    if isinstance(rid, bool) or not isinstance(rid, int | float):
        return False
    return not isinstance(rid, float) or math.isfinite(rid)


def expected_ids(line: bytes) -> list[Any]:
    """The ids that must each be answered exactly once for this stdin line (JSON-RPC 2.0
    §4–6: a request with a usable id is answered; a notification, a line that is not
    JSON, a request whose id cannot be read and a response (``result`` or ``error``, no
    ``method``: answering it would let two peers ping-pong errors) are not answered by id)."""
    try:
        value = json.loads(line, parse_constant=_reject)
    except (ValueError, RecursionError):
        return []
    requests = value if isinstance(value, list) else [value]
    return [
        r["id"] for r in requests
        if isinstance(r, dict) and "id" in r and answerable(r["id"]) and not ("method" not in r and ("result" in r or "error" in r))
    ]


# ---------------------------------------------------------------- the generator


@dataclass
class Chat:
    """A chat the daemon answered: its history as sent and the parts it got back."""

    messages: list[dict[str, Any]]
    parts: list[dict[str, Any]]


@dataclass
class FuzzState:
    """What the generator remembers between frames: ids in use, chats to continue.

    ``models``: the agents' ids (``initialize`` keeps them); ``answered`` is called by the
    driver for every answer, so later frames can continue the chats answered."""

    models: list[str]
    agents: list[dict[str, Any]]
    workspace: str
    max_text: int = 200_000  # characters in the largest generated string
    max_deep: int = 50_000  # levels of the deepest nesting
    chat_share: float = 1.0  # of the frames that would be chats, the share that are (spawns are slow)
    next_id: int = 1
    recent: deque[Any] = field(default_factory=lambda: deque(maxlen=64))  # ids sent lately
    chats: deque[Chat] = field(default_factory=lambda: deque(maxlen=32))
    asked: dict[Any, list[Any]] = field(default_factory=dict)  # chat request id -> its messages
    chats_answered: int = 0

    def answered(self, rid: Any, frame: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        """A request was answered (the driver calls this): a chat's answer can be continued."""
        messages = self.asked.pop(rid, None) if isinstance(rid, str | int | float) else None
        if messages is not None and "result" in frame:
            self.chats.append(Chat(messages, parts))
            self.chats_answered += 1

    def fresh_id(self, c: Chooser) -> Any:
        self.next_id += 1
        n = self.next_id
        shape = c.integer(0, 9)
        rid: Any = (
            f"s-{n}" if shape == 0 else
            f"{n}\u00e9\U0001f600" if shape == 1 else
            -n if shape == 2 else
            n + 0.5 if shape == 3 else
            n + 2**62 if shape == 4 else
            n
        )
        self.recent.append(rid)
        return rid


_copilot_cache: list[list[dict[str, Any]]] = []


def copilot_histories() -> list[list[dict[str, Any]]]:
    """The message lists VS Code's Copilot Chat really sent (tests/fixtures/copilot)."""
    if not _copilot_cache:
        for path in sorted(COPILOT.glob("*.json")):
            _copilot_cache.append(json.loads(path.read_text(encoding="utf-8"))["params"]["messages"])
    return _copilot_cache


def text(c: Chooser, state: FuzzState) -> str:
    kind = c.integer(0, 7)
    if kind == 0:
        return ""
    if kind == 1:
        return "x" * c.integer(1, state.max_text)
    if kind == 2:
        return "\ud800 lone \udfff surrogates"
    if kind == 3:
        return "\u0000\u001f\u2028\u2029 control and separators \n\r\t"
    if kind == 4:
        return "<userRequest>" + "héllo " * c.integer(1, 20) + "</userRequest>"
    return c.pick(["hi", "Please run the tests", "what now?", "Σ ∫ 漢字 🙂", "allow", "skip", "yes"])


def value(c: Chooser, state: FuzzState, depth: int = 0) -> Any:
    """Any JSON value, small."""
    kind = c.integer(0, 9 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return c.pick([True, False])
    if kind == 2:
        return c.pick([0, -1, 2**53 + 1, 10**30, 1.5, -0.0, 1e308])
    if kind in (3, 4, 5):
        return text(c, state) if c.integer(0, 4) == 0 else c.pick(["a", "type", "text", "user"])
    if kind in (6, 7):
        return [value(c, state, depth + 1) for _ in range(c.integer(0, 3))]
    return {c.pick(["type", "value", "role", "id", "callId", "content", "k"]): value(c, state, depth + 1) for _ in range(c.integer(0, 3))}


def part(c: Chooser, state: FuzzState) -> Any:
    kind = c.integer(0, 8)
    call_id = c.pick(["call_1", "toolu_01", "", "x" * 300, "\ud800"])
    if kind <= 2:
        return {"type": "text", "value": text(c, state)}
    if kind == 3:
        return {"type": "thinking", "value": text(c, state), "id": c.pick([None, "t1"])}
    if kind == 4:  # Copilot's cache_control and stateful markers, or an image
        return c.pick([
            {"type": "data", "mimeType": "cache_control", "data": "ZXBoZW1lcmFs"},
            {"type": "data", "mimeType": "stateful_marker", "data": "eyJtb2RlbElkIjoieCJ9"},
            {"type": "data", "mimeType": "image/png", "data": "iVBORw0KGgo="},
            {"type": "data", "mimeType": "image/png", "data": "not base64 %%%"},
        ])
    if kind == 5:
        name = c.pick(["symposium-agent-action", "symposium-agent-action-read", "run_in_terminal", ""])
        return {"type": "tool_call", "callId": call_id, "name": name, "input": c.pick([{}, {"token": "x"}, {"kind": "execute"}])}
    if kind == 6:
        result = c.pick(["allow", "skip", "The user chose to skip the tool call, they want to proceed without running it", ""])
        return {"type": "tool_result", "callId": call_id, "content": [{"type": "text", "value": result}]}
    if kind == 7:
        return {"type": c.pick(["unknown", "image", None, 5])}
    return value(c, state)


def random_history(c: Chooser, state: FuzzState) -> list[Any]:
    if c.integer(0, 2) == 0:  # what Copilot really sends, cut and extended at random
        base = list(c.pick(copilot_histories()))
        base = base[: c.integer(1, len(base))]
    else:
        base = []
    for _ in range(c.integer(0 if base else 1, 4)):
        base.append({"role": c.pick(["user", "user", "assistant", "system", "tool", 1]), "content": [part(c, state) for _ in range(c.integer(0, 3))]})
    return base


def continued_history(c: Chooser, state: FuzzState) -> list[Any]:
    chat = c.pick(list(state.chats))
    history = [*chat.messages, {"role": "assistant", "content": chat.parts}]
    calls = [p for p in chat.parts if p.get("type") == "tool_call"]
    if calls and c.integer(0, 1):  # answer the calls as VS Code would: Allow, Skip, or a result
        answers = [{"type": "tool_result", "callId": p["callId"], "content": [{"type": "text", "value": c.pick([
            str(p.get("input", {}).get("token", "")),
            "The user chose to skip the tool call, they want to proceed without running it",
            "some output",
        ])}]} for p in calls]
        history.append({"role": "user", "content": answers})
    else:
        history.append({"role": "user", "content": [{"type": "text", "value": text(c, state)}]})
    return history


def chat_params(c: Chooser, state: FuzzState) -> dict[str, Any]:
    messages = continued_history(c, state) if state.chats and c.integer(0, 1) else random_history(c, state)
    options: dict[str, Any] = {}
    if c.integer(0, 1):
        options["tools"] = [{"name": "symposium-agent-action", "description": "x", "inputSchema": {"type": "object"}}]
    return {"modelId": c.pick(state.models), "messages": messages, "options": options}


def chat(c: Chooser, state: FuzzState) -> bytes:
    if state.chat_share < 1.0 and c.integer(0, 999) >= state.chat_share * 1000:
        return encode(request("lm/provideTokenCount", {"modelId": state.models[0], "text": "instead of a chat"}, state.fresh_id(c)))
    rid = state.fresh_id(c)
    params = chat_params(c, state)
    if answerable(rid):
        state.asked[rid] = params["messages"]
    return encode(request("lm/provideLanguageModelChatResponse", params, rid))


def request(method: str, params: Any, rid: Any = None, *, notify: bool = False) -> dict[str, Any]:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not _ABSENT:
        frame["params"] = params
    if not notify:
        frame["id"] = rid
    return frame


_ABSENT = object()
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=True)


def encode(frame: Any) -> bytes:
    return _JSON.encode(frame).encode("utf-8", "surrogatepass")


def deep(levels: int, core: str = "1") -> str:
    return "[" * levels + core + "]" * levels


def good_params(method: str, c: Chooser, state: FuzzState) -> Any:
    if method == "lm/provideTokenCount":
        return {"modelId": c.pick(state.models), "text": text(c, state)}
    if method == "lm/provideLanguageModelChatInformation":
        return {"silent": c.pick([True, False])}
    if method == "initialize":
        return {"protocolVersion": 1, "clientInfo": {"name": "fuzz"}, "workspaceFolders": [state.workspace], "agents": state.agents}
    return {"id": c.pick(list(state.recent) or [0])}  # $/cancelRequest


METHODS = ["lm/provideTokenCount", "lm/provideLanguageModelChatInformation", "lm/provideLanguageModelChatResponse", "initialize", "$/cancelRequest"]


def bad_params(c: Chooser, state: FuzzState) -> Any:
    return c.pick([
        [1, 2], "text", 5, None, {}, {"modelId": 5, "text": ["x"]}, {"messages": "no"}, {"modelId": "nope", "messages": []},
        {"protocolVersion": 2}, {"protocolVersion": "1"}, {"id": {"a": 1}}, {"id": 1.5}, {"agents": [{"id": ""}]},
        {"modelId": c.pick(state.models), "messages": [{"role": "user", "content": "not a list"}]},
    ])


def _id_of_any_type(c: Chooser, state: FuzzState) -> Any:
    return c.pick([{}, [], [1], {"id": 1}, True, False, None, 1e400, -1e400, state.fresh_id(c)])


def frame(c: Chooser, state: FuzzState) -> bytes:
    """One stdin line (without its newline), of any kind."""
    kind = c.integer(0, 99)
    if kind < 22:  # a well-formed request of a known method
        method = c.pick(METHODS)
        if method == "lm/provideLanguageModelChatResponse":
            return chat(c, state)
        if method == "$/cancelRequest" and c.integer(0, 1):
            return encode(request(method, good_params(method, c, state), notify=True))
        return encode(request(method, good_params(method, c, state), state.fresh_id(c)))
    if kind < 27:  # a chat: new, or continuing one the daemon answered
        return chat(c, state)
    if kind < 37:  # wrong parameter types
        return encode(request(c.pick(METHODS), bad_params(c, state), state.fresh_id(c)))
    if kind < 45:  # ids of every JSON type
        return encode(request(c.pick(METHODS[:2]), {"modelId": state.models[0], "text": "x"}, _id_of_any_type(c, state)))
    if kind < 50:  # unknown methods, as requests and notifications
        method = c.pick(["foo", "", "lm/", "$/progress", "shutdownx", "x" * 5000, "rpc.discover"])
        return encode(request(method, value(c, state), state.fresh_id(c), notify=bool(c.integer(0, 1))))
    if kind < 54:  # a request id reused while (maybe) still in flight
        rid = c.pick(list(state.recent)) if state.recent else state.fresh_id(c)
        return encode(request("lm/provideTokenCount", {"modelId": state.models[0], "text": "dup"}, rid))
    if kind < 58:  # malformed envelopes
        rid = state.fresh_id(c)
        return encode(c.pick([
            {"jsonrpc": "1.0", "id": rid, "method": "lm/provideTokenCount", "params": {}},
            {"id": rid, "method": "lm/provideTokenCount", "params": {"modelId": "m", "text": "x"}},
            {"jsonrpc": "2.0", "id": rid},
            {"jsonrpc": "2.0", "id": rid, "method": 5},
            {"jsonrpc": "2.0", "id": rid, "method": None, "params": {}},
            {"jsonrpc": "2.0", "id": rid, "result": {}},
            {"jsonrpc": "2.0", "id": rid, "error": {"code": 1, "message": "x"}},
            {"jsonrpc": "2.0", "id": rid, "method": "lm/provideTokenCount", "params": {"modelId": "m", "text": "x"}, "extra": 1},
            {"jsonrpc": "2.0", "method": "lm/provideTokenCount"},
            {},
        ]))
    if kind < 63:  # batches
        n = c.integer(0, 4)
        return b"[" + b",".join(frame(c, state) if c.integer(0, 3) else b"7" for _ in range(n)) + b"]"
    if kind < 67:  # nested too deep to decode, in a request whose id is readable only by a deeper parser
        rid = state.fresh_id(c)
        return f'{{"jsonrpc":"2.0","id":{json.dumps(rid)},"method":"lm/provideTokenCount","params":{{"text":{deep(c.integer(5_000, max(5_000, state.max_deep)))}}}}}'.encode()
    if kind < 70:  # deep but decodable
        return encode(request("lm/provideTokenCount", {"modelId": state.models[0], "text": json.loads(deep(c.integer(1, 60)))}, state.fresh_id(c)))
    if kind < 74:  # not UTF-8, or not JSON's idea of a number
        rid = state.fresh_id(c)
        return c.pick([
            b'{"jsonrpc":"2.0","id":' + json.dumps(rid).encode() + b',"method":"lm/provideTokenCount","params":{"modelId":"m","text":"\xff\xfe"}}',
            b'{"jsonrpc":"2.0","id":NaN,"method":"lm/provideTokenCount","params":{}}',
            b'{"jsonrpc":"2.0","id":' + json.dumps(rid).encode() + b',"method":"lm/provideTokenCount","params":{"modelId":"m","text":Infinity}}',
            b"\xef\xbb\xbf" + encode(request("lm/provideTokenCount", {"modelId": "m", "text": "bom"}, rid)),
        ])
    if kind < 80:  # truncated or damaged
        line = encode(request(c.pick(METHODS[:2]), {"modelId": state.models[0], "text": text(c, state)}, state.fresh_id(c)))
        cut = c.integer(0, max(0, len(line) - 1))
        return c.pick([line[:cut], line[:cut] + b"\x00" + line[cut:], line.replace(b'"', b"'", 1)])
    if kind < 85:  # not objects
        return c.pick([b"7", b'"a string"', b"null", b"true", b"[]", b"[[]]", b"{}", b"   ", b"\t"])
    if kind < 90:  # not JSON at all
        return c.pick([b"hello", b"Content-Length: 52", b"\x00\x01\x02", bytes(range(128, 256)), b"{" * 100, b"}" * 10])
    if kind < 95:  # a huge string
        return encode(request("lm/provideTokenCount", {"modelId": state.models[0], "text": "y" * c.integer(state.max_text, 5 * state.max_text)}, state.fresh_id(c)))
    # cancels of ids that were never sent, or long done
    return encode(request("$/cancelRequest", {"id": c.pick([10**9, "never", -5, state.next_id + 10])}, notify=bool(c.integer(0, 1))))


def frames(c: Chooser, state: FuzzState, n: int) -> list[bytes]:
    return [frame(c, state) for _ in range(n)]

