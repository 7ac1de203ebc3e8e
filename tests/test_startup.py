"""What ``lmbridge serve`` loads before it answers ``initialize`` (docs/performance.md: start ≤ 300 ms).

The ACP SDK, the MCP SDK, the console's libraries and jsonrpcserver (with jsonschema,
~85 ms) stay off the start-up path; they load on the first request that needs them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("acp", "mcp", "jsonrpcserver", "jsonschema", "prompt_toolkit", "rich")

PROBE = """
import json, sys
import anyio
from lmbridge.daemon.root import Config, Server
from lmbridge.daemon.stdio import Stdout

async def main():
    server = Server(Config())
    out, loaded = [], []

    def write(data):  # what is loaded when the answer is written
        out.append(data)
        loaded.append(sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[1]))))

    async def lines():
        yield json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}).encode()
    await server.serve(lines(), Stdout(write))
    print(json.dumps({"answer": out[0].decode(), "loaded": loaded[0]}))

anyio.run(main)
"""


def test_initialize_is_answered_without_the_heavy_libraries() -> None:
    probe = subprocess.run([sys.executable, "-c", PROBE, json.dumps(HEAVY)], capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    answer = json.loads(report["answer"].splitlines()[0])
    assert answer["id"] == 1 and answer["result"]["protocolVersion"] == 1
    assert report["loaded"] == []


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
