"""The daemon → shim channel (docs/protocol.md, "Daemon → shim"): ``ShimChannel`` alone,
then inside the server, fed frames as the shim writes them.

Rules checked: ids are ``lmbridge-`` strings, never repeated; every request ends exactly
once (result, the shim's error, timeout, or the shim gone); a response to no request in
flight is not delivered, not answered, and counted; the shim gone fails requests in flight
and every later one at once; ``client/*`` only for what ``clientCapabilities`` offers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmbridge.daemon.root import Config, Server
from lmbridge.daemon.stdio import Stdout
from lmbridge.rpc.channel import (
    CLIENT_GONE,
    CLIENT_TIMEOUT,
    ID_PREFIX,
    ClientError,
    ClientGone,
    ClientTimeout,
    NoClient,
    ShimChannel,
)

pytestmark = pytest.mark.anyio

BOUND = 60  # seconds: every test here takes well under 0.1 s idle


class Shim:
    """The frames a ShimChannel sends, and answers to them."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.channel = ShimChannel(self.sent.append)

    async def next_request(self) -> dict[str, Any]:
        with anyio.fail_after(BOUND):
            while not any("id" in f for f in self.sent):
                await anyio.sleep(0.001)
        frame = next(f for f in self.sent if "id" in f)
        self.sent.remove(frame)
        return frame


async def test_a_request_gets_the_shims_result() -> None:
    shim = Shim()
    results: list[Any] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _collect(shim.channel.request("client/readTextFile", {"path": "/w/a.txt"}), results))
        frame = await shim.next_request()
        assert frame["method"] == "client/readTextFile" and frame["params"] == {"path": "/w/a.txt"} and frame["jsonrpc"] == "2.0"
        assert isinstance(frame["id"], str) and frame["id"].startswith(ID_PREFIX)
        assert shim.channel.in_flight == 1
        assert shim.channel.deliver({"jsonrpc": "2.0", "id": frame["id"], "result": {"content": "hi"}})
    assert results == [{"content": "hi"}]
    assert shim.channel.in_flight == 0
    # The same answer again answers nothing: it is late.
    assert not shim.channel.deliver({"jsonrpc": "2.0", "id": frame["id"], "result": {"content": "again"}})
    assert shim.channel.late == 1


async def test_the_shims_error_is_raised_with_its_code_message_and_data() -> None:
    shim = Shim()
    failures: list[BaseException] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _collect(shim.channel.request("client/writeTextFile", {"path": "/w/a", "content": ""}), failures))
        frame = await shim.next_request()
        shim.channel.deliver({"jsonrpc": "2.0", "id": frame["id"], "error": {"code": -32003, "message": "no", "data": {"why": 1}}})
    [error] = failures
    assert isinstance(error, ClientError) and error.code == -32003 and error.message == "no" and error.data == {"why": 1}
    assert error.error() == {"code": -32003, "message": "no", "data": {"why": 1}}


@pytest.mark.parametrize("bad", [None, "boom", 7, [], {"code": "x"}, {"message": 5}])
async def test_a_malformed_error_still_ends_the_request(bad: Any) -> None:
    shim = Shim()
    failures: list[BaseException] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _collect(shim.channel.request("client/readTextFile", {"path": "/w/a"}), failures))
        frame = await shim.next_request()
        assert shim.channel.deliver({"jsonrpc": "2.0", "id": frame["id"], "error": bad})
    [error] = failures
    assert isinstance(error, ClientError) and isinstance(error.code, int) and isinstance(error.message, str)


async def test_no_answer_in_time_is_a_timeout_and_the_late_answer_is_ignored() -> None:
    shim = Shim()
    with pytest.raises(ClientTimeout) as caught:
        await shim.channel.request("client/readTextFile", {"path": "/w/a"}, timeout=0.01)
    assert caught.value.code == CLIENT_TIMEOUT and "did not answer" in caught.value.message
    assert shim.channel.in_flight == 0
    [frame] = shim.sent
    assert not shim.channel.deliver({"jsonrpc": "2.0", "id": frame["id"], "result": {}})


async def test_a_cancelled_caller_leaves_nothing_in_flight() -> None:
    shim = Shim()
    with anyio.move_on_after(0.01):
        await shim.channel.request("client/readTextFile", {"path": "/w/a"})
    assert shim.channel.in_flight == 0
    assert not shim.channel.deliver({"jsonrpc": "2.0", "id": shim.sent[0]["id"], "result": {}})


async def test_the_shim_gone_fails_requests_in_flight_and_later_ones_at_once() -> None:
    shim = Shim()
    shim.channel.set_capabilities({"fs": True})
    failures: list[BaseException] = []
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(lambda: _collect(shim.channel.request("client/readTextFile", {"path": "/w/a"}), failures))
        with anyio.fail_after(BOUND):
            while shim.channel.in_flight < 3:
                await anyio.sleep(0.001)
        shim.channel.close()
    assert len(failures) == 3 and all(isinstance(f, ClientGone) and f.code == CLIENT_GONE for f in failures)
    assert not shim.channel.offers("fs")
    sent = len(shim.sent)
    with anyio.fail_after(1), pytest.raises(ClientGone):  # at once: nothing is sent, nothing awaited
        await shim.channel.request("client/readTextFile", {"path": "/w/a"})
    shim.channel.notify("client/sessionState", {})
    assert len(shim.sent) == sent


async def test_ids_are_unique_strings_and_answers_reach_their_own_request() -> None:
    shim = Shim()
    results: list[Any] = []
    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(lambda n=n: _collect(shim.channel.request("client/readTextFile", {"path": f"/w/{n}"}), results))
        with anyio.fail_after(BOUND):
            while shim.channel.in_flight < 20:
                await anyio.sleep(0.001)
        frames = list(shim.sent)
        assert len({f["id"] for f in frames}) == 20
        for frame in reversed(frames):  # answered in the other order
            shim.channel.deliver({"jsonrpc": "2.0", "id": frame["id"], "result": frame["params"]["path"]})
    assert sorted(results) == sorted(f"/w/{n}" for n in range(20))


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=st.dictionaries(st.sampled_from(["jsonrpc", "id", "result", "error"]), st.one_of(st.none(), st.integers(), st.text(max_size=12), st.just(f"{ID_PREFIX}1"))))
def test_a_response_to_no_request_is_never_delivered(frame: dict[str, Any]) -> None:
    channel = ShimChannel(lambda f: None)
    assert channel.deliver(frame) is False
    assert channel.late == 1


def test_capabilities_count_only_when_true() -> None:
    channel = ShimChannel(lambda f: None)
    assert not channel.offers("fs")
    channel.set_capabilities({"fs": True, "terminal": False, "sessionState": "yes"})
    assert channel.offers("fs") and not channel.offers("terminal") and not channel.offers("sessionState")
    assert not NoClient().offers("fs")


async def test_no_client_fails_at_once() -> None:
    with pytest.raises(ClientGone):
        await NoClient().request("client/readTextFile", {"path": "/w"})


async def _collect(request: Any, into: list[Any]) -> None:
    try:
        into.append(await request)
    except Exception as exc:
        into.append(exc)


# ---------------------------------------------------------------- in the server


class Pipe:
    """The shim's side of a server run in this process: lines in, frames out."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[bytes](100)
        self.out: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        self.out += [json.loads(line) for line in data.splitlines() if line.strip()]

    async def lines(self) -> AsyncIterator[bytes]:
        async with self.receive:
            async for line in self.receive:
                yield line

    async def frame(self, frame: Any) -> None:
        await self.send.send((json.dumps(frame) + "\n").encode())

    async def wait_for(self, predicate: Any) -> dict[str, Any]:
        with anyio.fail_after(BOUND):
            while True:
                found = [f for f in self.out if predicate(f)]
                if found:
                    return found[0]
                await anyio.sleep(0.001)


async def test_the_server_routes_the_shims_answers_to_the_channel() -> None:
    pipe, server = Pipe(), Server(Config())
    results: list[Any] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, pipe.lines(), Stdout(pipe.write))
        params = {"protocolVersion": 1, "clientCapabilities": {"fs": True, "terminal": True}}
        await pipe.frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        await pipe.wait_for(lambda f: f.get("id") == 1)
        assert server.client.offers("fs") and server.client.offers("terminal") and not server.client.offers("sessionState")
        tg.start_soon(lambda: _collect(server.client.request("client/readTextFile", {"path": "/w/a"}), results))
        request = await pipe.wait_for(lambda f: f.get("method") == "client/readTextFile")
        assert request["id"].startswith(ID_PREFIX)
        # A response to no request first (unknown id, a number id): counted, never answered.
        await pipe.frame({"jsonrpc": "2.0", "id": "lmbridge-999", "result": {}})
        await pipe.frame({"jsonrpc": "2.0", "id": 5, "error": {"code": 1, "message": "x"}})
        await pipe.frame({"jsonrpc": "2.0", "id": request["id"], "result": {"content": "text"}})
        with anyio.fail_after(BOUND):
            while not results:
                await anyio.sleep(0.001)
        assert results == [{"content": "text"}]
        assert server.stray_responses == 2
        # The shim's stdin closes (EOF): a request then fails at once.
        await pipe.send.aclose()
    with pytest.raises(ClientGone):
        await server.client.request("client/readTextFile", {"path": "/w/a"})
    answers_to_responses = [f for f in pipe.out if "method" not in f and f.get("id") in ("lmbridge-999", 5, request["id"])]
    assert answers_to_responses == []


async def test_eof_fails_a_request_in_flight() -> None:
    pipe, server = Pipe(), Server(Config())
    results: list[Any] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, pipe.lines(), Stdout(pipe.write))
        params = {"protocolVersion": 1, "clientCapabilities": {"fs": True}}
        await pipe.frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        await pipe.wait_for(lambda f: f.get("id") == 1)
        tg.start_soon(lambda: _collect(server.client.request("client/readTextFile", {"path": "/w/a"}), results))
        await pipe.wait_for(lambda f: f.get("method") == "client/readTextFile")
        await pipe.send.aclose()
    [failure] = results
    assert isinstance(failure, ClientGone)


async def test_without_client_capabilities_nothing_is_offered() -> None:
    pipe, server = Pipe(), Server(Config())
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, pipe.lines(), Stdout(pipe.write))
        await pipe.frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
        answer = await pipe.wait_for(lambda f: f.get("id") == 1)
        assert "result" in answer
        assert not any(server.client.offers(c) for c in ("fs", "terminal", "sessionState"))
        await pipe.send.aclose()
