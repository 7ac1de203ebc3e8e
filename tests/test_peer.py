"""``rpc.peer``: the one JSON-RPC 2.0 peer (the agent connection's and the dev client's wire)
and ``rpc.jsonrpc.encode``, the one frame encoder: what each line is routed as, answers
routed to their waiter or handler, over-long lines answered by their head, the end of a link."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import anyio
import pytest
from anyio.abc import ByteReceiveStream, ByteSendStream
from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.rpc.jsonrpc import Invalid, RequestFrame, ResponseFrame, classify, encode, parse_json, validate_request
from lmbridge.rpc.peer import BAD_ID, NOT_JSON, NOT_OBJECT, PIPE_SIZE, STRAY_RESPONSE, LinkClosed, Peer, RemoteError

pytestmark = pytest.mark.anyio


class Pipe(ByteReceiveStream):
    """What the peer reads: bytes fed by the test, in reads of the sizes fed."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[bytes](math.inf)

    def feed(self, data: bytes) -> None:
        self._send.send_nowait(data)

    def end(self) -> None:
        self._send.close()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise

    async def aclose(self) -> None:
        self._receive.close()


class Sink(ByteSendStream):
    """What the peer writes: every write kept; ``broken`` makes writes fail as a dead pipe does."""

    def __init__(self) -> None:
        self.data = b""
        self.broken = False

    async def send(self, item: bytes) -> None:
        if self.broken:
            raise anyio.BrokenResourceError
        self.data += item

    def frames(self) -> list[Any]:
        return [json.loads(line) for line in self.data.splitlines()]

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class Seen:
    """A Handler that keeps what it was handed, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def handle_request(self, rid: Any, method: str, params: Any) -> None:
        self.events.append(("request", rid, method, params))

    def handle_notification(self, method: str, params: Any) -> None:
        self.events.append(("notification", method, params))

    def handle_response(self, rid: Any, result: Any, error: Any) -> None:
        self.events.append(("response", rid, result, error))

    def handle_unusable(self, reason: str, line: bytes, value: Any) -> None:
        self.events.append(("unusable", reason, line))


def make(limit: int = 1 << 20) -> tuple[Peer, Pipe, Sink, Seen, list[tuple[str, dict[str, Any]]]]:
    pipe, sink, seen, warned = Pipe(), Sink(), Seen(), []
    peer = Peer(pipe, sink, seen, link="test link", limit=limit, warn=lambda event, **fields: warned.append((event, fields)))
    return peer, pipe, sink, seen, warned


ROUTES = [
    (b'{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":1}}', ("request", 1, "a", {"x": 1})),
    (b'{"jsonrpc":"2.0","id":"s","method":"a"}', ("request", "s", "a", None)),
    (b'{"jsonrpc":"2.0","method":"n","params":[1]}', ("notification", "n", [1])),
    (b"not json", ("unusable", NOT_JSON, b"not json")),
    (b"NaN", ("unusable", NOT_JSON, b"NaN")),
    (b"[1,2]", ("unusable", NOT_OBJECT, b"[1,2]")),
    (b'"x"', ("unusable", NOT_OBJECT, b'"x"')),
    (b'{"jsonrpc":"2.0","id":9,"result":1}', ("unusable", STRAY_RESPONSE, b'{"jsonrpc":"2.0","id":9,"result":1}')),
    (b'{"id":true,"result":1}', ("unusable", STRAY_RESPONSE, b'{"id":true,"result":1}')),
    (b'{"id":{},"result":1}', ("unusable", STRAY_RESPONSE, b'{"id":{},"result":1}')),
    (b'{"id":7,"method":123}', ("unusable", STRAY_RESPONSE, b'{"id":7,"method":123}')),
]


@pytest.mark.parametrize(("line", "event"), ROUTES)
async def test_each_line_is_routed_as_what_it_is(line: bytes, event: tuple[Any, ...]) -> None:
    peer, pipe, sink, seen, _ = make()
    pipe.feed(line + b"\n   \n")
    pipe.end()
    await peer.read()
    assert seen.events == [event]
    assert sink.data == b""  # nothing is answered here: the handler decides


@pytest.mark.parametrize("rid", [b"{}", b"[1]", b"true", b"null", b"1e400"])
async def test_a_request_whose_id_cannot_be_answered_is_said_then_handed_on_without_it(rid: bytes) -> None:
    peer, pipe, _, seen, _ = make()
    line = b'{"jsonrpc":"2.0","id":' + rid + b',"method":"session/request_permission","params":{}}'
    pipe.feed(line + b"\n")
    pipe.end()
    await peer.read()
    assert seen.events == [("unusable", BAD_ID, line), ("request", None, "session/request_permission", {})]


async def test_answers_go_to_their_waiter_or_in_order_to_the_handler() -> None:
    peer, pipe, sink, seen, _ = make()
    results: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(peer.read)

        async def ask(name: str, method: str) -> None:
            try:
                results[name] = await peer.request(method, {"q": name})
            except RemoteError as exc:
                results[name] = exc

        tg.start_soon(ask, "ok", "m/ok")
        tg.start_soon(ask, "bad", "m/bad")
        routed = peer.new_id()
        await peer.send_request(routed, "m/routed", {})
        with anyio.fail_after(5):
            while len(sink.frames()) < 3:
                await anyio.sleep(0.01)
        ids = {f["method"]: f["id"] for f in sink.frames()}
        assert sorted(ids.values()) == [1, 2, 3]
        pipe.feed(json.dumps({"jsonrpc": "2.0", "method": "before"}).encode() + b"\n")
        pipe.feed(json.dumps({"jsonrpc": "2.0", "id": ids["m/routed"], "result": "r"}).encode() + b"\n")
        pipe.feed(json.dumps({"jsonrpc": "2.0", "id": float(ids["m/ok"]), "result": "wrong type"}).encode() + b"\n")
        pipe.feed(json.dumps({"jsonrpc": "2.0", "id": ids["m/ok"], "result": {"a": 1}}).encode() + b"\n")
        pipe.feed(json.dumps({"jsonrpc": "2.0", "id": ids["m/bad"], "error": {"code": -1, "message": "no"}}).encode() + b"\n")
        pipe.feed(json.dumps({"jsonrpc": "2.0", "id": ids["m/ok"], "result": "twice"}).encode() + b"\n")
        pipe.end()
    assert results["ok"] == {"a": 1}
    assert isinstance(results["bad"], RemoteError) and results["bad"].error == {"code": -1, "message": "no"}
    assert str(results["bad"]) == "m/bad: no (code -1)"
    assert [e[:2] for e in seen.events] == [("notification", "before"), ("response", ids["m/routed"]), ("unusable", STRAY_RESPONSE), ("unusable", STRAY_RESPONSE)]
    assert seen.events[1] == ("response", ids["m/routed"], "r", None)


async def test_an_over_long_line_is_dropped_and_what_it_was_is_answered() -> None:
    """A request of the peer's gets -32600 back by its id; our request it answered fails
    saying so; a notification or unreadable start is only said."""
    peer, pipe, sink, seen, warned = make(limit=100)
    failure: list[BaseException] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(peer.read)

        async def ask() -> None:
            try:
                await peer.request("m/ask", {})
            except RemoteError as exc:
                failure.append(exc)

        tg.start_soon(ask)
        with anyio.fail_after(5):
            while not sink.data:
                await anyio.sleep(0.01)
        pad = b"x" * 200
        pipe.feed(b'{"jsonrpc":"2.0","id":"p","method":"session/request_permission","params":{"' + pad + b'":1}}\n')
        pipe.feed(b'{"jsonrpc":"2.0","id":1,"result":{"' + pad[:50])
        pipe.feed(pad + b'":1}}\n')
        pipe.feed(b'{"jsonrpc":"2.0","method":"session/update","params":{"' + pad + b'":1}}\n')
        pipe.feed(b'{"jsonrpc":"2.0","id":2,"method":"ok"}\n')
        pipe.end()
    assert seen.events == [("request", 2, "ok", None)]
    answer = sink.frames()[1]
    assert answer["id"] == "p" and answer["error"]["code"] == -32600 and "longer than lmbridge's limit of 100 bytes" in answer["error"]["message"]
    assert len(failure) == 1 and failure[0].error["code"] == -32600 and "the peer's answer was a line of" in str(failure[0])
    assert len(warned) == 3 and all("test link sent a line of" in event and "dropped, the link goes on" in event for event, _ in warned)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=20))
def test_routing_does_not_depend_on_how_reads_cut_the_stream(cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line, _ in ROUTES)

    async def main() -> list[tuple[Any, ...]]:
        peer, pipe, _, seen, _ = make()
        at, n = 0, 0
        while at < len(stream):
            size = cuts[n % len(cuts)]
            pipe.feed(stream[at:at + size])
            at, n = at + size, n + 1
        pipe.end()
        await peer.read()
        return seen.events

    assert anyio.run(main) == [event for _, event in ROUTES]


async def test_the_end_fails_every_waiter_and_every_later_send() -> None:
    peer, _, sink, _, _ = make()
    failed: list[BaseException] = []

    async def ask() -> None:
        try:
            await peer.request("m", {})
        except LookupError as exc:
            failed.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        tg.start_soon(ask)
        with anyio.fail_after(5):
            while sink.data.count(b"\n") < 2:
                await anyio.sleep(0.01)
        peer.end(lambda: LookupError("gone: exit code 3"))
    assert [str(e) for e in failed] == ["gone: exit code 3"] * 2
    with pytest.raises(LookupError, match="exit code 3"):
        await peer.notify("late", {})


async def test_a_broken_write_raises_the_links_own_reason() -> None:
    pipe, sink = Pipe(), Sink()

    async def broken(exc: BaseException) -> BaseException:
        return RuntimeError(f"it died ({type(exc).__name__})")

    peer = Peer(pipe, sink, Seen(), link="l", limit=100, warn=lambda *a, **k: None, broken=broken)
    sink.broken = True
    with pytest.raises(RuntimeError, match=r"it died \(BrokenResourceError\)"):
        await peer.notify("n", {})
    plain = Peer(pipe, sink, Seen(), link="l", limit=100, warn=lambda *a, **k: None)
    with pytest.raises(LinkClosed):
        await plain.respond(1, {"ok": True})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_the_encoder_writes_one_line_that_parses_back(value: Any) -> None:
    """Any JSON value, lone surrogates included, is one line of UTF-8 that parses back to it."""
    data = encode({"jsonrpc": "2.0", "id": 1, "result": value})
    assert data.endswith(b"\n") and b"\n" not in data[:-1]
    data.decode("utf-8")
    assert parse_json(data[:-1]) == {"jsonrpc": "2.0", "id": 1, "result": value}


@given(st.recursive(
    json_values | st.floats() | st.tuples(st.integers()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=2), inner, max_size=3),
    max_leaves=12,
))  # fmt: skip
def test_the_encoder_writes_what_the_standard_encoder_writes(value: Any) -> None:
    """``encode_value``'s C encoder, made once, writes what ``json.JSONEncoder`` with the same
    options writes, and raises what it raises (a float that is not finite: written null)."""
    from lmbridge.rpc.jsonrpc import encode_value, finite

    standard = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

    def outcome(encode: Any) -> Any:
        try:
            return encode(value)
        except (TypeError, ValueError) as exc:  # a key that is not finite either way
            return type(exc)

    def expected(value: Any) -> str:
        try:
            return standard(value)
        except ValueError:  # not finite: written as JavaScript writes it
            return standard(finite(value))

    assert outcome(encode_value) == outcome(expected)


# ------------------------------------------------------------------ classify: the server's rules (docs/protocol.md, "Transport")

KNOWN = {"lm/provideTokenCount", "initialize"}

CLASSIFY = [
    (7, Invalid(None, -32600, "invalid request: not a JSON object")),
    ("x", Invalid(None, -32600, "invalid request: not a JSON object")),
    (None, Invalid(None, -32600, "invalid request: not a JSON object")),
    ([1], Invalid(None, -32600, "invalid request: not a JSON object")),
    ({"jsonrpc": "2.0", "id": 3, "result": {}}, "answer"),
    ({"jsonrpc": "2.0", "id": "lmbridge-1", "error": {"code": 1, "message": "m"}}, "answer"),
    ({"jsonrpc": "2.0", "id": {}, "method": "initialize"}, Invalid(None, -32600, "invalid request: id must be a string, a finite number or null")),
    ({"jsonrpc": "2.0", "id": [1], "method": "initialize"}, Invalid(None, -32600, "invalid request: id must be a string, a finite number or null")),
    ({"jsonrpc": "2.0", "id": True, "method": "initialize"}, Invalid(None, -32600, "invalid request: id must be a string, a finite number or null")),
    ({"jsonrpc": "2.0", "id": float("inf"), "method": "initialize"}, Invalid(None, -32600, "invalid request: id must be a string, a finite number or null")),
    ({"jsonrpc": "2.0", "id": 7, "method": 123}, Invalid(7, -32600, "invalid request: method must be a string")),
    ({"jsonrpc": "2.0", "id": 7}, Invalid(7, -32600, "invalid request: method must be a string")),
    ({"jsonrpc": "2.0", "id": 8, "method": "nope"}, Invalid(8, -32601, "method not found: nope")),
    ({"jsonrpc": "1.0", "id": 8, "method": "nope"}, Invalid(8, -32601, "method not found: nope")),
    ({"jsonrpc": "2.0", "method": "$/nope"}, None),
    ({"jsonrpc": "1.0", "id": 9, "method": "initialize"}, Invalid(9, -32600, "invalid request: not a JSON-RPC 2.0 request object")),
    ({"jsonrpc": "2.0", "id": 9, "method": "initialize", "extra": 1}, Invalid(9, -32600, "invalid request: not a JSON-RPC 2.0 request object")),
    ({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": 5}, Invalid(9, -32600, "invalid request: not a JSON-RPC 2.0 request object")),
    ({"jsonrpc": "2.0", "method": "initialize", "params": "x"}, Invalid(None, -32600, "invalid request: not a JSON-RPC 2.0 request object")),
    ({}, Invalid(None, -32600, "invalid request: not a JSON-RPC 2.0 request object")),
    ({"jsonrpc": "2.0", "id": None, "method": "initialize"}, "call"),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "lm/provideTokenCount", "params": []}, "call"),
    ({"jsonrpc": "2.0", "method": "initialize", "params": {}}, "call"),
]


@pytest.mark.parametrize(("value", "expected"), CLASSIFY)
def test_each_frame_a_server_reads_is_what_the_protocol_table_says(value: Any, expected: Any) -> None:
    got = classify(value, KNOWN.__contains__)
    if expected == "answer":
        assert isinstance(got, ResponseFrame) and got.frame is value
    elif expected == "call":
        assert isinstance(got, RequestFrame) and got.frame is value and got.method == value["method"]
        assert got.has_id == ("id" in value) and got.id == value.get("id")
    else:
        assert got == expected


@given(json_values)
def test_classify_never_fails_and_a_call_is_what_jsonrpcserver_accepts(value: Any) -> None:
    got = classify(value, lambda method: True)
    assert got is None or isinstance(got, RequestFrame | ResponseFrame | Invalid)
    if isinstance(got, RequestFrame):
        assert validate_request(value) is value
    if isinstance(got, Invalid):
        assert got.code in (-32600, -32601) and (got.id is None or isinstance(got.id, str | int | float))


@given(
    st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"jsonrpc": st.sampled_from(["2.0", "1.0", 2]), "method": st.sampled_from([*KNOWN, "nope", 7])},
            optional={
                "id": st.one_of(st.none(), st.integers(), st.text(max_size=3), st.floats(), st.booleans(), st.lists(st.integers(), max_size=1)),
                "params": st.one_of(st.dictionaries(st.text(max_size=2), st.integers(), max_size=2), st.lists(st.integers(), max_size=2), st.integers(), st.none()),
                "extra": st.integers(),
            },
        ),
    )
)
def test_classify_at_once_agrees_with_the_rules_one_by_one(value: Any) -> None:
    """``classify``'s check of a well-formed request at once gives what the rules in their
    order (``_classify``) give, for requests well-formed or not in every member."""
    from lmbridge.rpc.jsonrpc import _classify

    assert classify(value, KNOWN.__contains__) == _classify(value, KNOWN.__contains__)


async def test_the_daemon_answers_an_over_long_request_on_stdin_by_its_head() -> None:
    """A stdin line past the limit is dropped as it streamed (``Overlong``); a request whose
    start shows a usable id gets -32600 with it, a notification nothing."""
    from lmbridge.daemon.stdio import StdioPeer, Stdout, StdoutWriter
    from lmbridge.rpc.framing import Overlong

    class Methods:
        def known(self, method: str) -> bool:
            return True

        def in_flight(self, rid: Any) -> bool:
            return False

        async def dispatch(self, request: dict[str, Any]) -> None:
            raise AssertionError("nothing of a dropped line is dispatched")

    written: list[bytes] = []
    out = StdoutWriter()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(out.run, Stdout(written.append))
            reader = StdioPeer(Pipe(), Methods(), out, tg, lambda frame: False)
            reader.line(Overlong(300_000_000, b'{"jsonrpc":"2.0","id":5,"method":"lm/provideLanguageModelChatResponse","params":{"modelId"'))
            reader.line(Overlong(300_000_000, b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{'))
            reader.line(Overlong(300_000_000, b'{"jsonrpc":"2.0","id":{"a":1},"method":"x","params":{'))
            await reader.idle(5)
            await out.drain()
            tg.cancel_scope.cancel()
    frames = [json.loads(line) for line in b"".join(written).splitlines()]
    assert len(frames) == 1 and frames[0]["id"] == 5 and frames[0]["error"]["code"] == -32600
    assert "lm/provideLanguageModelChatResponse: a line of 300,000,000 bytes, longer than lmbridge's limit" in frames[0]["error"]["message"]


def test_a_method_gets_its_params_validated_once_with_the_signature_jsonrpcserver_binds() -> None:
    """``methods.takes``: jsonrpcserver binds a request's params to the signature it sees,
    ``(call, **params)``; the method gets the wire model, or the caller -32602 naming the field."""
    import inspect

    from lmbridge.core.messages import TokenCountParams
    from lmbridge.daemon.methods import InvalidParams, Methods, validated

    for name in ("initialize", "chat_information", "token_count", "cancel_request"):
        assert [p.kind for p in inspect.signature(getattr(Methods, name)).parameters.values()][-1] is inspect.Parameter.VAR_KEYWORD, name
    assert validated(TokenCountParams, {"modelId": "m", "text": "abcd"}).text == "abcd"
    with pytest.raises(InvalidParams) as caught:
        validated(TokenCountParams, {"modelId": "m"})
    assert caught.value.message == "invalid params: text: Field required"


def _pipe_limit() -> int:
    try:
        with open("/proc/sys/fs/pipe-max-size") as f:
            return int(f.read())
    except OSError:
        return 0


@pytest.mark.skipif(_pipe_limit() < PIPE_SIZE, reason="not Linux, or pipes this wide are not allowed here")
async def test_an_agents_stdout_pipe_is_widened() -> None:
    """A streaming agent fills a 64 KiB pipe every 16 chunks of 4 KiB, then blocks until
    the daemon has read it: its stdout gets ``PIPE_SIZE`` (docs/performance.md)."""
    import fcntl
    import sys

    from lmbridge.acp.connection import AgentConnection
    from lmbridge.rpc.peer import PipeReader

    send, receive = anyio.create_memory_object_stream[Any](math.inf)
    with anyio.fail_after(30):
        conn = await AgentConnection.spawn("reader", sys.executable, ["-c", "import sys; sys.stdin.read()"], {}, None, send)
        try:
            assert isinstance(conn.stdout, PipeReader)
            assert fcntl.fcntl(conn.stdout.fileno(), fcntl.F_GETPIPE_SZ) == PIPE_SIZE
        finally:
            await conn.close()
    send.close()
    receive.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts this process's open files in /proc")
async def test_an_agent_that_cannot_start_or_has_ended_leaves_no_pipe_open(tmp_path: Any) -> None:
    """``AgentConnection.spawn`` makes the agent's stdout pipe itself: when the command
    cannot be started both its ends are closed, and an agent served to its end and closed
    leaves none of its pipes open either."""
    import sys

    from lmbridge.acp.connection import AgentConnection, AgentUnavailable

    send, receive = anyio.create_memory_object_stream[Any](math.inf)
    before = len(os.listdir("/proc/self/fd"))
    with anyio.fail_after(30):
        with pytest.raises(AgentUnavailable):
            await AgentConnection.spawn("none", str(tmp_path / "no-such-agent"), [], {}, None, send)
        assert len(os.listdir("/proc/self/fd")) == before
        async with anyio.create_task_group() as tg:
            conn = await AgentConnection.spawn("short", sys.executable, ["-c", "print('{}')"], {}, None, send)
            tg.start_soon(conn.serve)
            await conn.closed.wait()
        await conn.close()
    assert len(os.listdir("/proc/self/fd")) == before
    send.close()
    receive.close()


async def test_a_pipe_reader_gives_what_was_written_in_order_then_the_end() -> None:
    """``PipeReader``: every byte written, in order (an empty pipe waits for the writer; a
    full read gives at most ``max_bytes``), then ``EndOfStream`` once the write end is closed."""
    import os

    from lmbridge.rpc.peer import PipeReader, open_pipe

    read_end, write_end = open_pipe()
    reader = PipeReader(read_end)
    data = bytes(range(256)) * 4096  # 1 MiB: more than one read
    got = bytearray()

    async def write() -> None:
        view = memoryview(data)
        os.set_blocking(write_end, False)
        while view:
            try:
                view = view[os.write(write_end, view[:65536]):]
            except BlockingIOError:
                await anyio.wait_writable(write_end)
            await anyio.sleep(0)
        os.close(write_end)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            while True:
                try:
                    chunk = await reader.receive(100_000)
                except anyio.EndOfStream:
                    break
                assert 0 < len(chunk) <= 100_000
                got += chunk
    assert bytes(got) == data
    await reader.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await reader.receive()


async def test_a_pipe_reader_closed_while_it_waits_ends_its_wait_and_a_cancelled_read_loses_nothing() -> None:
    """A ``receive`` waiting on an empty pipe: cancelled, it read nothing (the bytes written
    after are the next ``receive``'s); closed under it, it raises ``ClosedResourceError``
    (``batches`` then ends), and closing again does nothing."""
    import os

    from lmbridge.rpc.peer import PipeReader, open_pipe

    read_end, write_end = open_pipe()
    reader = PipeReader(read_end)
    with anyio.fail_after(30):
        with anyio.move_on_after(0.05):
            await reader.receive()
        os.write(write_end, b"after\n")
        assert await reader.receive() == b"after\n"
        failed: list[BaseException] = []

        async def wait() -> None:
            try:
                await reader.receive()
            except anyio.ClosedResourceError as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.sleep(0.05)
            await reader.aclose()
        assert len(failed) == 1
        await reader.aclose()
    os.close(write_end)
