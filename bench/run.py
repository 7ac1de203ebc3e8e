"""``make bench``: what the bridge costs, measured against a direct ACP client.

Usage: ``python -m bench [--quick] [--out PATH] [--runs N]``

Everything runs on this machine, against ``python -m lmbridge serve`` (the daemon
as the shim starts it) and ``bench/synth_agent.py`` (a stdlib ACP agent that stamps
each chunk with ``time.monotonic_ns()``; the readers here use the same clock). The
clients are plain blocking readers of newline-delimited JSON (``subprocess`` +
``readline`` + ``json.loads`` per frame), the same code for the daemon and for the
bare ACP client, so the ratio compares the bridge with no bridge.

Figures (medians over several runs, spread = min–max), each with its target:

1. start: process start → ``initialize`` answered.
2. throughput: 20,000 text chunks, and 2,000 chunks of 4 KiB, through the daemon and
   directly; window = first chunk sent (agent's stamp) → last chunk read.
3. added latency per part, p50/p99: chunks paced 1 ms apart so nothing queues;
   (through the daemon) − (direct), quantile by quantile.
4. history cost at 10/100/1,000/5,000 messages: in-process (wire parsing +
   ``HistoryCore.begin``) and end to end (request written → prompt read by the agent).
5. permission round trip, daemon time only: (agent asks → tool_call part read, less
   the gather window the part waits for on purpose, ``core.turn.GATHER``) + (approval
   request written → agent reads its answer); the wall time, window included, apart.
6. memory: the daemon's own RSS (its agent processes are not counted) idle, after a
   1,000-turn conversation, and before/after 100 sessions opened and evicted.

Results go to ``.bench/results.json``; the table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
AGENT = Path(__file__).resolve().parent / "synth_agent.py"
OUT_DIR = ROOT / ".bench"
STAMP = re.compile(r"@(\d+);")
ANSWERED = re.compile(r"@(\d+);(selected|cancelled)")
clock = time.monotonic_ns

AGENT_SPEC = {"id": "synth", "name": "bench synthetic agent", "command": sys.executable, "args": [str(AGENT)], "env": {}}
#: The goals each figure is printed with (docs/performance.md, "Goals"): throughput ratios, daemon over direct.
GOALS = {"throughput_text": 0.95, "throughput_4k": 0.8}


@contextlib.contextmanager
def private_state() -> Iterator[Path]:
    """A fresh state folder for every daemon this process starts (``$XDG_STATE_HOME``, which
    ``lmbridge serve`` reads: docs/sessions.md), removed afterwards: the machine's own
    (``~/.local/state/lmbridge``: the agents used last, their models, the session index)
    would pre-warm agents and change the figures from one run to the next."""
    before = os.environ.get("XDG_STATE_HOME")
    with tempfile.TemporaryDirectory(prefix="lmbridge-bench-state-") as state:
        os.environ["XDG_STATE_HOME"] = state
        try:
            yield Path(state)
        finally:
            if before is None:
                os.environ.pop("XDG_STATE_HOME", None)
            else:
                os.environ["XDG_STATE_HOME"] = before


# ---------------------------------------------------------------- statistics


def stats(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    vals = sorted(values)
    return {
        "median": round(statistics.median(vals), digits),
        "min": round(vals[0], digits),
        "max": round(vals[-1], digits),
        "n": len(vals),
    }


def quantile(sorted_vals: Sequence[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[i]


# ---------------------------------------------------------------- processes


class Peer:
    """A process spoken to in newline-delimited JSON-RPC on its stdio (blocking)."""

    def __init__(self, argv: Sequence[str], log_name: str, env: dict[str, str] | None = None) -> None:
        OUT_DIR.mkdir(exist_ok=True)
        self.stderr = open(OUT_DIR / f"{log_name}.stderr", "ab")
        self.t_spawn = clock()
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env, cwd=ROOT)
        self.stdin = self.proc.stdin
        self.stdout = self.proc.stdout
        self.readline = self.stdout.readline  # type: ignore[union-attr]
        self.next_id = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.stdin.fileno(), view)  # type: ignore[union-attr]
            view = view[n:]

    def frame(self, frame: dict[str, Any]) -> None:
        self.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")

    def request_bytes(self, method: str, params_json: str) -> tuple[int, bytes]:
        self.next_id += 1
        return self.next_id, b'{"jsonrpc":"2.0","id":%d,"method":"%s","params":' % (self.next_id, method.encode()) + params_json.encode() + b"}\n"

    def call(self, method: str, params: Any) -> Any:
        rid, data = self.request_bytes(method, json.dumps(params))
        self.write(data)
        while True:
            frame = self.read()
            if frame.get("id") == rid and "method" not in frame:
                if "error" in frame:
                    raise RuntimeError(f"{method}: {frame['error']}")
                return frame.get("result")

    def read(self) -> dict[str, Any]:
        line = self.readline()
        if not line:
            raise RuntimeError(f"{self.proc.args[:3]} closed its stdout (see .bench/*.stderr)")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def daemon(*extra: str) -> Peer:
    return Peer([sys.executable, "-m", "lmbridge", "serve", *extra], "daemon")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


# ---------------------------------------------------------------- wire helpers


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "value": text}]}


def assistant_of(parts: list[dict[str, Any]]) -> dict[str, Any]:
    from lmbridge.devtools.client import assistant

    return assistant(parts)


class Chat:
    """One ``lm/provideLanguageModelChatResponse`` read to its end on a daemon."""

    def __init__(self, d: Peer, messages_json: str, on_text: list[tuple[int, str]] | None = None) -> None:
        from lmbridge.devtools.client import chat_options  # Agent mode's tools: without them permissions are declined

        options = json.dumps(chat_options())
        self.rid, data = d.request_bytes("lm/provideLanguageModelChatResponse", '{"modelId":"synth","options":' + options + ',"messages":' + messages_json + "}")
        self.t_sent = clock()
        d.write(data)
        self.parts: list[dict[str, Any]] = []
        self.texts: list[tuple[int, str]] = on_text if on_text is not None else []
        self.frames = 0
        self.tool_times: list[int] = []
        readline, loads, rid = d.readline, json.loads, self.rid
        while True:
            line = readline()
            t = clock()
            if not line:
                raise RuntimeError("daemon closed its stdout (see .bench/daemon.stderr)")
            frame = loads(line)
            if frame.get("method") == "lm/responsePart":
                params = frame["params"]
                part = params["part"]
                if params["requestId"] != rid:
                    continue
                self.frames += 1
                self.parts.append(part)
                if part["type"] == "tool_call":
                    self.tool_times.append(t)
                if part["type"] == "text":
                    self.texts.append((t, part["value"]))
            elif frame.get("id") == rid:
                self.t_done = t
                if "error" in frame:
                    raise RuntimeError(f"chat: {frame['error']}")
                self.stop = frame["result"]["stopReason"]
                return


def init_daemon(d: Peer) -> None:
    d.call("initialize", {"protocolVersion": 1, "clientInfo": {"name": "lmbridge-bench", "version": "1"}, "workspaceFolders": [str(ROOT)], "agents": [AGENT_SPEC]})


# ---------------------------------------------------------------- 1. start


def bench_start(runs: int) -> dict[str, Any]:
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientInfo": {"name": "bench", "version": "1"}}}).encode() + b"\n"
    times = []
    for _ in range(runs):
        t0 = clock()
        d = daemon()
        d.write(init)
        frame = d.read()
        t1 = clock()
        assert frame.get("result", {}).get("protocolVersion") == 1, frame
        times.append((t1 - t0) / 1e6)
        d.close()
    s = stats(times, 1)
    return {"ms": s, "runs_ms": [round(t, 1) for t in times], "target": "<= 300 ms", "met": s["median"] <= 300}


# ---------------------------------------------------------------- 2/3. streaming


def stream_cmd(n: int, size: int, interval_us: int = 0) -> str:
    return json.dumps({"op": "stream", "n": n, "size": size, "interval_us": interval_us})


def direct_stream(n: int, size: int, interval_us: int) -> tuple[list[tuple[int, str]], int]:
    """The bare ACP client: the same agent read directly. Returns (texts, frames)."""
    with Peer([sys.executable, str(AGENT)], "agent-direct") as a:
        a.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
        sid = a.call("session/new", {"cwd": str(ROOT), "mcpServers": []})["sessionId"]
        rid, data = a.request_bytes("session/prompt", json.dumps({"sessionId": sid, "prompt": [{"type": "text", "text": stream_cmd(n, size, interval_us)}]}))
        a.write(data)
        texts: list[tuple[int, str]] = []
        frames = 0
        readline, loads = a.readline, json.loads
        while True:
            line = readline()
            t = clock()
            frame = loads(line)
            if frame.get("method") == "session/update":
                update = frame["params"]["update"]
                frames += 1
                if update["sessionUpdate"] == "agent_message_chunk":
                    texts.append((t, update["content"]["text"]))
            elif frame.get("id") == rid:
                return texts, frames


_chat_counter = 0


def daemon_stream(d: Peer, n: int, size: int, interval_us: int) -> tuple[list[tuple[int, str]], int]:
    global _chat_counter
    _chat_counter += 1
    # A new chat each time: the daemon starts the agent before the window opens.
    chat = Chat(d, json.dumps([user(f"bench run {_chat_counter}\n" + stream_cmd(n, size, interval_us))]))
    return chat.texts, chat.frames


def analyse(texts: list[tuple[int, str]], n: int) -> dict[str, Any]:
    sent: list[int] = []
    lat: list[int] = []
    nbytes = 0
    last = 0
    for t, text in texts:
        nbytes += len(text)
        for m in STAMP.finditer(text):
            s = int(m.group(1))
            sent.append(s)
            lat.append(t - s)
            last = max(last, t)
    if len(sent) != n:
        raise RuntimeError(f"expected {n} chunks, read {len(sent)}")
    window = (last - min(sent)) / 1e9
    lat.sort()
    return {
        "seconds": window,
        "chunks_per_s": n / window,
        "mib_per_s": nbytes / window / 2**20,
        "p50_us": quantile(lat, 0.5) / 1e3,
        "p99_us": quantile(lat, 0.99) / 1e3,
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bench_throughput(d: Peer, n: int, size: int, runs: int) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {"daemon": [], "direct": []}
    frames: list[int] = []
    daemon_cpu: list[float] = []  # µs of the daemon's CPU per chunk (less load-sensitive than rates)
    client_cpu: list[float] = []  # µs of the bare client's CPU per chunk
    for _ in range(runs):
        c0 = own_cpu_seconds()
        texts, f = direct_stream(n, size, 0)
        client_cpu.append((own_cpu_seconds() - c0) / n * 1e6)
        rows["direct"].append(analyse(texts, n))
        c0 = cpu_seconds(d.pid)
        texts, f = daemon_stream(d, n, size, 0)
        daemon_cpu.append((cpu_seconds(d.pid) - c0) / n * 1e6)
        rows["daemon"].append(analyse(texts, n))
        frames.append(f)
    ratios = [a["chunks_per_s"] / b["chunks_per_s"] for a, b in zip(rows["daemon"], rows["direct"])]
    out: dict[str, Any] = {"chunks": n, "chunk_chars": size}
    for who in ("daemon", "direct"):
        out[who] = {
            "chunks_per_s": stats([r["chunks_per_s"] for r in rows[who]], 0),
            "mib_per_s": stats([r["mib_per_s"] for r in rows[who]], 2),
            "seconds": stats([r["seconds"] for r in rows[who]], 4),
        }
    out["ratio"] = stats(ratios, 3)
    out["daemon_frames_out"] = stats(frames, 0)  # < chunks when the daemon coalesced text
    out["daemon_cpu_us_per_chunk"] = stats(daemon_cpu, 1)
    out["direct_client_cpu_us_per_chunk"] = stats(client_cpu, 1)  # this process: spawn, handshake, reading
    goal = GOALS["throughput_text" if size <= 64 else "throughput_4k"]
    out["target"] = f">= {goal}x direct"
    out["met"] = out["ratio"]["median"] >= goal
    return out


def bench_latency(d: Peer, n: int, interval_us: int, runs: int) -> dict[str, Any]:
    per: dict[str, list[float]] = {k: [] for k in ("daemon_p50", "daemon_p99", "direct_p50", "direct_p99", "added_p50", "added_p99")}
    for _ in range(runs):
        direct = analyse(direct_stream(n, 32, interval_us)[0], n)
        through = analyse(daemon_stream(d, n, 32, interval_us)[0], n)
        for q in ("p50", "p99"):
            per[f"daemon_{q}"].append(through[f"{q}_us"])
            per[f"direct_{q}"].append(direct[f"{q}_us"])
            per[f"added_{q}"].append(through[f"{q}_us"] - direct[f"{q}_us"])
    out: dict[str, Any] = {"chunks": n, "interval_us": interval_us}
    out.update({f"{k}_us": stats(v, 1) for k, v in per.items()})
    out["target"] = "added p99 <= 1 ms"
    out["met"] = out["added_p99_us"]["median"] <= 1000
    return out


# ---------------------------------------------------------------- 4. history


FILLER = "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. " * 5


def history_messages(count: int) -> list[dict[str, Any]]:
    """``count`` messages alternating user/assistant (~400 bytes each), ending with a user turn."""
    msgs = []
    for i in range(count):
        role = "user" if (count - 1 - i) % 2 == 0 else "assistant"
        text = f"{role} message {i}: " + FILLER[: 360]
        msgs.append({"role": role, "content": [{"type": "text", "value": text}]})
    return msgs


def echo(i: int) -> dict[str, Any]:
    return user(json.dumps({"op": "echo", "text": f"reply {i}"}))


def bench_history_inproc(sizes: Sequence[int], reps: int) -> dict[int, dict[str, Any]]:
    """The daemon's own time for one chat request, in this process: the
    server's path (``json.loads`` of the frame, the messages through the
    server's ``MessageCache`` and ``ChatResponseParams``, ``HistoryCore.begin``),
    plus, for reference, validating every message afresh (no cache)."""
    from lmbridge.core.history import Fingerprint, HistoryCore, Kind, Last
    from lmbridge.core.messages import ChatResponseParams

    try:
        from lmbridge.rpc.jsonrpc import parse_json  # the server's parser
    except ImportError:
        parse_json = json.loads

    try:
        from lmbridge.core.messages import MessageCache
    except ImportError:  # a daemon from before the cache (for before/after figures)

        class MessageCache:  # type: ignore[no-redef]
            def messages(self, raw: Any) -> None:
                return None

    def server_parse(raw: dict[str, Any], cache: MessageCache) -> ChatResponseParams:
        messages = cache.messages(raw["messages"])
        if messages is None:
            return ChatResponseParams.model_validate(raw)
        return ChatResponseParams.model_validate({**raw, "messages": []}).model_copy(update={"messages": messages})

    out: dict[int, dict[str, Any]] = {}
    for n in sizes:
        core, cache = HistoryCore(), MessageCache()
        base = history_messages(n - 1)
        base[-1] = echo(0)
        p = server_parse({"modelId": "synth", "messages": base}, cache)
        turn = core.begin("synth", p.messages, 0.0)
        reply = "reply 0 " * 8
        core.end(turn.session_id, Fingerprint.of_text(reply), Last.DONE, [], 0.0)
        msgs = base + [{"role": "assistant", "content": [{"type": "text", "value": reply}]}]
        t_loads, t_cached, t_validate, t_validate_json, t_begin, size = [], [], [], [], [], 0
        for r in range(reps):
            msgs = msgs + [echo(r + 1)]
            payload = json.dumps({"modelId": "synth", "messages": msgs})
            size = len(payload)
            # for reference: every message validated afresh
            t0 = clock()
            ChatResponseParams.model_validate(json.loads(payload))
            t1 = clock()
            ChatResponseParams.model_validate_json(payload)
            t2 = clock()
            # the server's path
            raw = parse_json(payload.encode())
            t3 = clock()
            p = server_parse(raw, cache)
            t4 = clock()
            turn = core.begin("synth", p.messages, 1.0 + r)
            t5 = clock()
            assert turn.kind is Kind.CONTINUATION, turn.kind
            reply = f"reply {r + 1} " * 8
            core.end(turn.session_id, Fingerprint.of_text(reply), Last.DONE, [], 1.0 + r)
            msgs = msgs + [{"role": "assistant", "content": [{"type": "text", "value": reply}]}]
            t_validate.append((t1 - t0) / 1e6)
            t_validate_json.append((t2 - t1) / 1e6)
            t_loads.append((t3 - t2) / 1e6)
            t_cached.append((t4 - t3) / 1e6)
            t_begin.append((t5 - t4) / 1e6)
        total = [a + b + c for a, b, c in zip(t_loads, t_cached, t_begin)]
        out[n] = {
            "payload_bytes": size,
            "json_loads_ms": stats(t_loads),  # the server's parser (wire.parse_json when there is one)
            "messages_ms": stats(t_cached),  # MessageCache + ChatResponseParams, as the server does
            "begin_ms": stats(t_begin),
            "total_ms": stats(total),  # the server's path: json.loads + messages + begin
            "uncached_validate_ms": stats(t_validate),  # reference: json.loads + model_validate of everything
            "uncached_validate_json_ms": stats(t_validate_json),  # reference: model_validate_json of everything
        }
    return out


def bench_history_e2e(d: Peer, sizes: Sequence[int], reps: int) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for n in sizes:
        base = history_messages(n - 1)
        base[-1] = echo(0)
        chat = Chat(d, json.dumps(base))  # divergence: a fresh session given the history (not timed)
        encoded = [json.dumps(m) for m in base] + [json.dumps(assistant_of(chat.parts))]
        inbound, roundtrip = [], []
        size = 0
        for r in range(reps):
            encoded.append(json.dumps(echo(r + 1)))
            body = "[" + ",".join(encoded) + "]"
            size = len(body)
            chat = Chat(d, body)
            (t_part, text), = chat.texts
            t_agent = int(STAMP.match(text).group(1))  # type: ignore[union-attr]
            inbound.append((t_agent - chat.t_sent) / 1e6)
            roundtrip.append((chat.t_done - chat.t_sent) / 1e6)
            encoded.append(json.dumps(assistant_of(chat.parts)))
        out[n] = {"payload_bytes": size, "request_to_agent_ms": stats(inbound), "round_trip_ms": stats(roundtrip)}
    return out


def bench_history(d: Peer, sizes: Sequence[int], reps: int) -> dict[str, Any]:
    inproc = bench_history_inproc(sizes, reps)
    e2e = bench_history_e2e(d, sizes, reps)
    rows = {str(n): {"messages": n, "in_process": inproc[n], "end_to_end": e2e[n]} for n in sizes}
    top = max(sizes)
    per_msg = {str(n): round(inproc[n]["total_ms"]["median"] / n * 1000, 2) for n in sizes}
    worst = max(inproc[top]["total_ms"]["median"], e2e[top]["request_to_agent_ms"]["median"])
    return {
        "sizes": rows,
        "in_process_us_per_message": per_msg,
        "target": "linear in size, <= 20 ms at 5,000 messages",
        "met": worst <= 20,
    }


# ---------------------------------------------------------------- 5. permission


def bench_permission(d: Peer, runs: int) -> dict[str, Any]:
    """The permission round trip (docs/performance.md, "Goals"). The tool call part goes out
    only when the gather window (``core.turn.GATHER``, started when the session actor takes
    the ask) closes: the window's length is taken off the ask → part leg, so the daemon time
    is its own work (a timer that fires late, on a busy machine, counts as the daemon's)."""
    from lmbridge.core.turn import GATHER

    window_ms = GATHER * 1000
    out_leg, out_wall, in_leg, total, wall = [], [], [], [], []
    for i in range(runs):
        first = [user(f"permission run {i}\n" + json.dumps({"op": "permission"}))]
        chat = Chat(d, json.dumps(first))
        assert chat.stop == "tool_calls", chat.stop
        (tool,) = [p for p in chat.parts if p["type"] == "tool_call"]
        asked = int(STAMP.search(tool["input"]["title"]).group(1))  # type: ignore[union-attr]
        (t_part,) = chat.tool_times
        second = first + [assistant_of(chat.parts), approve(tool)]
        reply = Chat(d, json.dumps(second))
        assert reply.stop == "end_turn", reply.stop
        # (the answer may share a part with the tool call's rendered end: coalesced)
        (answered,) = [m for _, v in reply.texts for m in ANSWERED.finditer(v)]
        got = int(answered.group(1))
        assert answered.group(0).endswith("selected") and "selected:allow" in "".join(v for _, v in reply.texts)
        out_wall.append((t_part - asked) / 1e6)
        assert out_wall[-1] >= window_ms, f"the tool call part came {out_wall[-1]:.1f} ms after the ask, before the {window_ms:.0f} ms gather window closed"
        out_leg.append(out_wall[-1] - window_ms)
        in_leg.append((got - reply.t_sent) / 1e6)
        total.append(out_leg[-1] + in_leg[-1])
        wall.append((got - asked) / 1e6)
    s = stats(total)
    return {
        "daemon_ms": s,
        "ask_to_part_ms": stats(out_leg),
        "approval_to_agent_ms": stats(in_leg),
        "gather_window_ms": window_ms,
        "ask_to_part_incl_gather_ms": stats(out_wall),
        "wall_ms_incl_client_and_gather": stats(wall),
        "target": "daemon time only, the gather window left out (no target set; reported)",
        "met": True,
    }


def approve(part: dict[str, Any]) -> dict[str, Any]:
    from lmbridge.devtools.client import approve as _approve

    return _approve(part)


# ---------------------------------------------------------------- 6. memory


def settle(pid: int, seconds: float = 0.3) -> int:
    time.sleep(seconds)
    return rss_kib(pid)


def bench_memory(turns: int, sessions: int) -> dict[str, Any]:
    out: dict[str, Any] = {"note": "VmRSS of the daemon process itself; its agent processes (one per session) are not counted"}
    with daemon() as d:
        init_daemon(d)
        # idle: once the imports that follow initialize (a thread, ~1 s) are done
        out["idle_mib"] = settle(d.pid, 2.0) / 1024
        encoded: list[str] = []
        for i in range(turns):
            encoded.append(json.dumps(echo(i)))
            chat = Chat(d, "[" + ",".join(encoded) + "]")
            encoded.append(json.dumps(assistant_of(chat.parts)))
            if i == 0:
                out["after_first_chat_mib"] = settle(d.pid, 0.1) / 1024
        out["conversation_turns"] = turns
        out["after_conversation_mib"] = settle(d.pid) / 1024
    with daemon("--idle-timeout", "0.3") as d:
        init_daemon(d)

        def open_and_evict(count: int, tag: str) -> None:
            for i in range(count):
                Chat(d, json.dumps([user(f"{tag} session {i}\n" + json.dumps({"op": "echo"}))]))
            deadline = time.monotonic() + 15
            while children(d.pid) and time.monotonic() < deadline:
                time.sleep(0.05)

        warm = max(5, sessions // 10)
        open_and_evict(warm, "warm-up")
        before = settle(d.pid)
        open_and_evict(sessions, "bench")
        after = settle(d.pid)
        # A second round: growth that goes on round after round is a leak; the first
        # round may raise the allocator's high-water mark once.
        open_and_evict(sessions, "again")
        again = settle(d.pid)
        out["sessions"] = sessions
        out["before_sessions_mib"] = before / 1024
        out["after_sessions_mib"] = after / 1024
        out["after_sessions_again_mib"] = again / 1024
        out["sessions_growth_mib"] = (after - before) / 1024
        out["sessions_growth_again_mib"] = (again - after) / 1024
        out["agents_left"] = len(children(d.pid))
    for k in list(out):
        if k.endswith("_mib"):
            out[k] = round(out[k], 1)
    out["target"] = "<= 80 MB idle; no growth beyond noise"
    out["met"] = out["idle_mib"] * 1.048576 <= 80 and out["sessions_growth_again_mib"] <= 1.0
    return out


# ---------------------------------------------------------------- table


def table(res: dict[str, Any]) -> str:
    f = res["figures"]
    rows: list[tuple[str, str, str, str, str]] = []

    def spread(s: dict[str, Any], unit: str = "", fmt: str = "{:.1f}") -> tuple[str, str]:
        return fmt.format(s["median"]) + unit, f"{fmt.format(s['min'])}–{fmt.format(s['max'])}"

    def ok(met: bool | None) -> str:
        return "" if met is None else ("yes" if met else "NO")

    rows.append(("start: spawn → initialize answered", *spread(f["start"]["ms"], " ms"), "≤ 300 ms at load 3", ok(f["start"]["met"])))
    for key, label in (("throughput_text", "text chunks"), ("throughput_4k", "4 KiB chunks")):
        t = f[key]
        name = f"throughput {t['chunks']:,} {label}"
        rows.append((f"{name}: daemon", *spread(t["daemon"]["chunks_per_s"], " chunks/s", "{:,.0f}"), "", ""))
        rows.append((f"{name}: direct", *spread(t["direct"]["chunks_per_s"], " chunks/s", "{:,.0f}"), "", ""))
        rows.append((f"{name}: daemon MiB/s (direct)", f"{t['daemon']['mib_per_s']['median']:.1f} ({t['direct']['mib_per_s']['median']:.1f})", "", "", ""))
        rows.append((f"{name}: ratio daemon/direct", *spread(t["ratio"], "×", "{:.2f}"), f"≥ {GOALS[key]}×", ok(t["met"])))
        rows.append((f"{name}: frames out of the daemon", *spread(t["daemon_frames_out"], "", "{:,.0f}"), "", ""))
        rows.append((f"{name}: CPU per chunk, daemon (bare client)", f"{t['daemon_cpu_us_per_chunk']['median']:.1f} ({t['direct_client_cpu_us_per_chunk']['median']:.1f}) µs", "", "", ""))
    lat = f["latency"]
    rows.append(("latency through daemon p50 / p99", f"{lat['daemon_p50_us']['median']:.0f} / {lat['daemon_p99_us']['median']:.0f} µs", "", "", ""))
    rows.append(("latency direct p50 / p99", f"{lat['direct_p50_us']['median']:.0f} / {lat['direct_p99_us']['median']:.0f} µs", "", "", ""))
    rows.append(("added latency per part p50", *spread(lat["added_p50_us"], " µs", "{:.0f}"), "", ""))
    rows.append(("added latency per part p99", *spread(lat["added_p99_us"], " µs", "{:.0f}"), "≤ 1000 µs", ok(lat["met"])))
    h = f["history"]
    top = max(int(k) for k in h["sizes"])
    for k, row in h["sizes"].items():
        ip, ee = row["in_process"], row["end_to_end"]
        target = "≤ 20 ms, linear" if int(k) == top else ""
        rows.append((f"history {int(k):,} msgs ({ip['payload_bytes'] / 1e6:.2f} MB): in-process parse+begin", *spread(ip["total_ms"], " ms", "{:.2f}"), target, ok(h["met"]) if target else ""))
        rows.append(("    json.loads / messages (cached) / begin", f"{ip['json_loads_ms']['median']:.2f} / {ip['messages_ms']['median']:.2f} / {ip['begin_ms']['median']:.2f} ms", "", "", ""))
        rows.append(("    (no cache: loads+validate / validate_json)", f"{ip['uncached_validate_ms']['median']:.2f} / {ip['uncached_validate_json_ms']['median']:.2f} ms", "", "", ""))
        rows.append(("    end to end: request written → agent has prompt", *spread(ee["request_to_agent_ms"], " ms", "{:.2f}"), "", ""))
    p = f["permission"]
    rows.append(("permission round trip, daemon time (no gather window)", *spread(p["daemon_ms"], " ms", "{:.2f}"), "(reported)", ""))
    legs = f"{p['ask_to_part_ms']['median']:.2f} / {p['approval_to_agent_ms']['median']:.2f} ms"
    rows.append((f"    ask → tool_call part less the {p['gather_window_ms']:.0f} ms window / approval → agent answered", legs, "", "", ""))
    rows.append(("    ask → tool_call part, the window included", *spread(p["ask_to_part_incl_gather_ms"], " ms", "{:.1f}"), "", ""))
    rows.append(("    wall, incl. the client and the gather window", *spread(p["wall_ms_incl_client_and_gather"], " ms", "{:.1f}"), "", ""))
    m = f["memory"]
    rows.append(("memory idle (daemon RSS, 2 s after initialize)", f"{m['idle_mib']:.1f} MiB", "", "≤ 80 MB", ok(m["idle_mib"] * 1.048576 <= 80)))
    rows.append(("memory after the first chat", f"{m['after_first_chat_mib']:.1f} MiB", "", "", ""))
    rows.append((f"memory after {m['conversation_turns']:,}-turn conversation", f"{m['after_conversation_mib']:.1f} MiB", "", "", ""))
    mib = f"{m['before_sessions_mib']:.1f} → {m['after_sessions_mib']:.1f} → {m['after_sessions_again_mib']:.1f} MiB"
    growth = f"{m['sessions_growth_mib']:+.1f} / {m['sessions_growth_again_mib']:+.1f}"
    rows.append((f"memory {m['sessions']} sessions opened+evicted, twice", mib, growth, "no growth", ok(m["sessions_growth_again_mib"] <= 1.0)))

    widths = [max(len(r[i]) for r in rows + [("figure", "median", "spread", "target", "met")]) for i in range(5)]
    lines = []
    header = ("figure", "median", "spread (min–max)", "target", "met")
    widths = [max(widths[i], len(header[i])) for i in range(5)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """``make bench``: every daemon started with a private state folder (``private_state``)."""
    with private_state():
        return _bench(argv)


def _bench(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: small sizes, one run each (figures not meaningful)")
    ap.add_argument("--runs", type=int, help="runs per figure (default 5; --quick: 1)")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "results.json")
    ap.add_argument("--only", help="comma-separated figures to run (start,text,4k,latency,history,permission,memory)")
    args = ap.parse_args(argv)
    q = args.quick
    runs = args.runs or (1 if q else 5)
    only = set(args.only.split(",")) if args.only else None

    def want(name: str) -> bool:
        return only is None or name in only

    cfg = {
        "start_runs": 3 if q else 10,
        "text": (2_000, 32) if q else (20_000, 32),
        "big": (200, 4096) if q else (2_000, 4096),
        "latency": (200, 1000) if q else (2_000, 1000),
        "history_sizes": [10, 100, 1_000, 5_000],
        "history_reps": 2 if q else 7,
        "permission_runs": 2 if q else 10,
        "turns": 20 if q else 1_000,
        "sessions": 10 if q else 100,
    }
    t_start = time.monotonic()
    load_before = os.getloadavg()
    figures: dict[str, Any] = {}

    def step(name: str, fn: Callable[[], Any]) -> None:
        t0 = time.monotonic()
        print(f"bench: {name} …", file=sys.stderr, flush=True)
        figures[name] = fn()
        figures[name]["bench_seconds"] = round(time.monotonic() - t0, 1)

    if want("start"):
        step("start", lambda: bench_start(cfg["start_runs"]))
    with daemon() as d:
        init_daemon(d)
        if want("text"):
            step("throughput_text", lambda: bench_throughput(d, *cfg["text"], runs))
        if want("4k"):
            step("throughput_4k", lambda: bench_throughput(d, *cfg["big"], runs))
        if want("latency"):
            step("latency", lambda: bench_latency(d, *cfg["latency"], runs))
    with daemon() as d:
        init_daemon(d)
        if want("history"):
            step("history", lambda: bench_history(d, cfg["history_sizes"], cfg["history_reps"]))
        if want("permission"):
            step("permission", lambda: bench_permission(d, cfg["permission_runs"]))
    if want("memory"):
        step("memory", lambda: bench_memory(cfg["turns"], cfg["sessions"]))

    result = {
        "quick": q,
        "runs": runs,
        "config": cfg,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            # other work on the machine moves every figure: the 1-minute load before and after
            "loadavg_1min": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "git": _git_rev(),
        "seconds": round(time.monotonic() - t_start, 1),
        "figures": figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    if only is None:
        print(table(result))
    else:
        print(json.dumps(figures, indent=2))
    load = result["machine"]["loadavg_1min"]
    print(f"\n{'quick ' if q else ''}bench: {result['seconds']} s on {os.cpu_count()} CPUs (load average {load[0]} before, {load[1]} after); results in {args.out}")
    return 0


def _git_rev() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5).stdout.strip() or None
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
