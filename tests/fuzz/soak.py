"""``make fuzz``: the soak run (docs/reliability.md has the figures).

Three parts, each against a fresh ``lmbridge serve`` (``--max-agent-processes 4``):

1. **stdin**: ``--frames`` (default 1,000,000) generated frames (tests/fuzz/frames.py,
   seeded; about one in a hundred would-be chats is sent, each spawning or reusing a
   scripted agent), written as fast as the daemon reads them.
2. **agent link**: chats with the hostile agent's ``mix`` mode (tests/agents/hostile_agent.py)
   until ``--agent-frames`` (default 100,000) hostile frames were sent, every permission
   card answered Skip.
3. **cap**: ``--chats`` (default 1,000) new chats one after another; the most agent
   processes alive at once is sampled after each.
4. **modes**: ``--rounds`` (default 1) rounds of the hostile agent's start, freeze and flood
   modes: a new chat with ``malformed-start`` for every pair of its answers to initialize and
   session/new (``INIT_ANSWERS`` × ``NEW_ANSWERS``, each pair its own agent; start bound
   10 s); a chat with ``freeze`` continued until it freezes, stopped after 2 s, then a new
   chat, stopped if it shows nothing for 30 s; a chat with ``flood``
   (120,000 stderr lines, 120,000 non-JSON stdout lines, three 64 MB lines). Counted: how
   each chat was answered, the daemon's RSS before the floods and its peak during them.

Invariants counted as violations: the daemon exiting, a request with a usable id not
answered exactly once (or not within 60 s of the end), a frame on stdout that is not a
JSON-RPC object, an agent request not answered exactly once, an approval without the
user's token, more agent processes than the cap, an agent process outliving the daemon,
an error that does not name the agent or is longer than 8 KB; in the modes part, a flood
chat not answered "survived" and the daemon's RSS during the floods over twice what it was
before them.

Prints, and writes to ``.fuzz/results.json``: frames/s, the daemon's RSS at start, peak and
end, its CPU seconds (frames/s depends on the machine's load; frames per CPU second much
less) and the load average at each part's start and end, the most agent processes seen, and
the violations; for the stdin part also what shows stdin's push-back (at most
``stdio.MAX_WAITING`` requests read wait, then stdin is not read): the answers owed and how
each was answered (once, twice, never), the slowest answer, and apart the slowest to a request
on a line of its own (``single``) and to an element of a batch (``in_batch``), each with the
answers over 10 s, the most answers owed at once and how long the writes waited on the full
pipe. Exit status 1 if any violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.conftest import QUIET_START, SCRIPTED_AGENT, alive
from tests.fuzz.frames import FuzzState, RandomChooser, answerable, frame
from tests.fuzz.peer import FuzzDaemon, agents_of

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "tests" / "agents" / "hostile_agent.py"
CAP = 4
MiB = 2**20


class Sampler:
    """The daemon's RSS and its live agent processes, sampled every ``every`` seconds."""

    def __init__(self, daemon: FuzzDaemon, every: float = 0.25) -> None:
        self.daemon, self.every = daemon, every
        self.rss_start = daemon.rss()
        self.load_start = os.getloadavg()[0]
        self.rss_peak = self.rss_start
        self.agents_peak = 0
        self.pids: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        self.rss_peak = max(self.rss_peak, self.daemon.rss())
        agents = agent_processes(self.daemon.proc.pid)
        self.pids.update(agents)
        self.agents_peak = max(self.agents_peak, len(agents))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        self.sample()
        return {"rss_start_mib": round(self.rss_start / MiB, 1), "rss_peak_mib": round(self.rss_peak / MiB, 1),
                "rss_end_mib": round(self.daemon.rss() / MiB, 1), "agent_processes_max": self.agents_peak,
                "cpu_s": round(self.daemon.cpu_seconds(), 1), "load_start": round(self.load_start, 2), "load_end": round(os.getloadavg()[0], 2)}


def agent_processes(daemon_pid: int) -> list[int]:
    """The daemon's children but its watchdog (each an agent; what an agent starts is its own business)."""
    return [pid for pid in agents_of(daemon_pid) if _parent(pid) == daemon_pid]


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def scripted(where: Path, name: str, scenario: dict[str, Any]) -> dict[str, Any]:
    path = where / f"{name}.json"
    path.write_text(json.dumps(scenario))
    return {"id": name, "command": sys.executable, "args": [str(SCRIPTED_AGENT), str(path)]}


def start(where: Path, name: str, agents: list[dict[str, Any]], env: dict[str, str] | None = None) -> FuzzDaemon:
    # --session-wait 1: a chat over the cap (its sessions showing cards) waits 1 s, then is refused.
    daemon = FuzzDaemon(["--max-agent-processes", str(CAP), "--session-wait", "1", "--log-level", "warning"], where / f"{name}.stderr",
                        env={**QUIET_START, "LMBRIDGE_DRAIN_TIMEOUT": "2", **(env or {})})
    daemon.request("initialize", {"protocolVersion": 1, "workspaceFolders": [str(where)], "agents": agents}, "init")
    return daemon


def finish(daemon: FuzzDaemon, sampler: Sampler, violations: list[str], what: str, most_processes: int = CAP * 2) -> dict[str, Any]:
    if not daemon.ledger.wait_settled(60):
        violations.append(f"{what}: {daemon.ledger.owed()} requests unanswered 60 s after the last frame, e.g. {daemon.ledger.unanswered()[:2]}")
    if not daemon.alive():
        violations.append(f"{what}: the daemon exited (code {daemon.proc.returncode})")
    figures = sampler.stop()
    code = daemon.close()
    if code != 0:
        violations.append(f"{what}: the daemon exited with {code} at EOF")
    time.sleep(0.5)
    if left := [p for p in sampler.pids if alive(p)]:
        violations.append(f"{what}: {len(left)} agent processes outlived the daemon")
    if figures["agent_processes_max"] > most_processes:
        violations.append(f"{what}: {figures['agent_processes_max']} agent processes (at most {most_processes}: cap {CAP} per agent)")
    violations += [f"{what}: {v}" for v in daemon.ledger.violations]
    return figures


def stdin_part(where: Path, frames: int, seed: int) -> dict[str, Any]:
    agents = [
        scripted(where, "soak-ok", {"default_turn": [{"text": "ok"}]}),
        scripted(where, "soak-ask", {"default_turn": [{"ask": {"toolCall": {"toolCallId": "t", "title": "touch x", "kind": "execute"}}, "id": "p"}, {"text": "done"}]}),
    ]
    daemon = start(where, "stdin", agents)
    sampler = Sampler(daemon)
    state = FuzzState(models=[a["id"] for a in agents], agents=agents, workspace=str(where), max_text=2_000, max_deep=6_000, chat_share=0.01)
    daemon.ledger.on_answer = state.answered
    c = RandomChooser(random.Random(seed))
    violations: list[str] = []
    began = time.monotonic()
    sent_bytes = 0
    for n in range(frames):
        line = frame(c, state)
        sent_bytes += len(line) + 1
        daemon.send(line)
        if n % 100_000 == 0 and n:
            print(f"  stdin: {n} frames, {n / (time.monotonic() - began):.0f}/s, RSS {daemon.rss() / MiB:.0f} MiB", flush=True)
        if not daemon.alive():
            violations.append(f"stdin: the daemon exited after frame {n}: {line[:200]!r}")
            break
    written = time.monotonic() - began
    settled = daemon.ledger.wait_settled(60)
    elapsed = time.monotonic() - began
    ledger = daemon.ledger
    figures = finish(daemon, sampler, violations, "stdin")
    owed = ledger.owed()
    print(f"  stdin: {ledger.requests:,} answers owed by id: {ledger.answers:,} answered once, {ledger.answered_twice} twice or unasked, "
          f"{owed} never; slowest answer {ledger.latency_max:.2f} s ({ledger.slowest}): to a request on its own line "
          f"{ledger.slowest_single.seconds:.2f} s ({ledger.slowest_single.method}), to a batch's element {ledger.slowest_in_batch.seconds:.2f} s "
          f"({ledger.slowest_in_batch.method}); at most {ledger.owed_max:,} owed at once; "
          f"writes waited on the full pipe {daemon.write_seconds:.0f} s of {written:.0f} s; "
          f"RSS {figures['rss_start_mib']} / {figures['rss_peak_mib']} / {figures['rss_end_mib']} MiB (start / peak / end)", flush=True)
    return {"frames": daemon.frames_out, "bytes": sent_bytes, "seconds": round(elapsed, 1), "frames_per_s": round(daemon.frames_out / written),
            "frames_per_cpu_s": round(daemon.frames_out / max(figures["cpu_s"], 0.1)),
            "requests": ledger.requests, "answers": ledger.answers, "answered_twice": ledger.answered_twice, "unanswered": owed,
            "null_id_errors": ledger.null_answers, "chats_answered": state.chats_answered,
            "latency_max_s": round(ledger.latency_max, 2), "slowest_method": ledger.slowest, "settled": settled,
            "slowest_request": ledger.slowest_lines[0].decode("utf-8", "replace"), "slowest_answer": ledger.slowest_lines[1].decode("utf-8", "replace"),
            "single": ledger.slowest_single.figures(), "in_batch": ledger.slowest_in_batch.figures(),
            "owed_max": ledger.owed_max, "write_wait_s": round(daemon.write_seconds, 1), **figures, "violations": violations}


def agent_part(where: Path, agent_frames: int, seed: int) -> dict[str, Any]:
    per_prompt = 1_000
    logs = where / "hostile"
    logs.mkdir()
    agent = {"id": "hostile-mix", "command": sys.executable,
             "args": [str(HOSTILE), "mix", "--seed", str(seed), "--frames", str(per_prompt), "--log", str(logs / "h-{pid}.jsonl")]}
    daemon = start(where, "agent", [agent])
    sampler = Sampler(daemon)
    violations: list[str] = []
    began = time.monotonic()
    chats = 0
    rid = 0
    while chats * per_prompt < agent_frames:
        chats += 1
        history: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "value": f"chat {chats}"}]}]
        for _ in range(50):
            rid += 1
            parts = chat_once(daemon, agent["id"], history, rid, violations)
            if parts is None:
                break
            cards = [p for p in parts if p.get("type") == "tool_call" and str(p.get("name", "")).startswith("symposium-agent-action")]
            if not cards:
                break
            history += [{"role": "assistant", "content": [p for p in parts if p.get("type") in ("text", "tool_call")]},
                        *({"role": "user", "content": [{"type": "tool_result", "callId": card["callId"], "content": [
                            {"type": "text", "value": "The user chose to skip the tool call, they want to proceed without running it"}]}]} for card in cards)]
        if not daemon.alive():
            violations.append(f"agent: the daemon exited during chat {chats}")
            break
    elapsed = time.monotonic() - began
    figures = finish(daemon, sampler, violations, "agent")
    entries: list[dict[str, Any]] = []
    requests = answers = per_process_bad = 0
    for path in logs.glob("*.jsonl"):  # ids are per process (h1, h2, ...): checked per process
        own = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        entries += own
        sent = Counter(json.dumps(e["sent"]) for e in own if "sent" in e and answerable(e["sent"]))
        got = Counter(json.dumps(e["answer"]) for e in own if "answer" in e)
        requests, answers = requests + sum(sent.values()), answers + sum(got.values())
        # A request whose id cannot be answered by gets one error with id null.
        unanswerable = sum(1 for e in own if "sent" in e and not answerable(e["sent"]))
        per_process_bad += sum(1 for k in (sent.keys() | got.keys()) - {"null"} if got[k] != sent[k]) + (got["null"] != unanswerable)
    if per_process_bad:
        violations.append(f"agent: {per_process_bad} agent request ids not answered exactly once")
    approved = [e for e in entries if "answer" in e and isinstance(e.get("result"), dict)
                and (e["result"].get("outcome") or {}).get("outcome") == "selected"
                and str(e["result"]["outcome"].get("optionId")) in ("allow", "x", "y")]
    if approved:
        violations.append(f"agent: {len(approved)} approvals without the user's token")
    # Malformed permissions are answered at once (an error naming the field), never left to a timeout.
    malformed_waits: list[float] = []
    for path in logs.glob("*.jsonl"):
        own = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        sent_at = {json.dumps(e["sent"]): e["t"] for e in own if e.get("malformed")}
        malformed_waits += [e["t"] - sent_at[json.dumps(e["answer"])] for e in own if "answer" in e and json.dumps(e["answer"]) in sent_at]
        unanswered = len(sent_at) - sum(1 for e in own if "answer" in e and json.dumps(e["answer"]) in sent_at)
        if unanswered:
            violations.append(f"agent: {unanswered} malformed permissions not answered")
    figures["malformed_permissions"] = len(malformed_waits)
    figures["malformed_slowest_answer_s"] = round(max(malformed_waits, default=0.0), 3)
    frames_sent = sum(e.get("frames", 0) for e in entries if e.get("event") == "mix_done")
    return {"agent_frames": frames_sent, "chats": chats, "seconds": round(elapsed, 1), "frames_per_s": round(frames_sent / elapsed),
            "agent_requests": requests, "agent_answers": answers, **figures, "violations": violations}


def chat_once(daemon: FuzzDaemon, model: str, history: list[dict[str, Any]], rid: int, violations: list[str]) -> list[dict[str, Any]] | None:
    """One chat request, waited for; its parts, or None after an error (checked)."""
    done = threading.Event()
    answer: dict[str, Any] = {}

    def on_answer(got: Any, frame: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        if got == f"c{rid}":
            answer.update(frame=frame, parts=parts)
            done.set()

    daemon.ledger.on_answer = on_answer
    tools = [{"name": n, "description": "x"} for n in ("symposium-agent-action", "symposium-agent-action-read", "symposium-agent-action-edit")]
    daemon.send(json.dumps({"jsonrpc": "2.0", "id": f"c{rid}", "method": "lm/provideLanguageModelChatResponse",
                            "params": {"modelId": model, "messages": history, "options": {"tools": tools}}}).encode())
    if not done.wait(120):
        violations.append(f"chat c{rid} not answered within 120 s")
        return None
    frame = answer["frame"]
    if "error" in frame:
        message = str(frame["error"].get("message", ""))
        if model not in message or len(message) > 8192:
            violations.append(f"an error that does not name the agent or is too long ({len(message)}): {message[:200]}")
        return None
    return list(answer["parts"])


def cap_part(where: Path, chats: int) -> dict[str, Any]:
    agents = [scripted(where, "cap-ok", {"default_turn": [{"text": "ok"}]})]
    daemon = start(where, "cap", agents)
    sampler = Sampler(daemon, every=0.05)
    violations: list[str] = []
    began = time.monotonic()
    errors = 0
    for n in range(chats):
        parts = chat_once(daemon, "cap-ok", [{"role": "user", "content": [{"type": "text", "value": f"new chat {n}"}]}], n, violations)
        errors += parts is None
        sampler.sample()
        if sampler.agents_peak > CAP:
            violations.append(f"cap: {sampler.agents_peak} agent processes after chat {n} (cap {CAP})")
            break
    elapsed = time.monotonic() - began
    figures = finish(daemon, sampler, violations, "cap")
    return {"chats": chats, "errors": errors, "seconds": round(elapsed, 1), **figures, "violations": violations}


def modes_part(where: Path, rounds: int) -> dict[str, Any]:
    from tests.agents.hostile_agent import INIT_ANSWERS, NEW_ANSWERS

    logs = where / "modes"
    logs.mkdir()

    def spec(name: str, *args: str) -> dict[str, Any]:
        return {"id": name, "command": sys.executable, "args": [str(HOSTILE), *args, "--log", str(logs / f"{name}-{{pid}}.jsonl")]}

    starts = [spec(f"start-{i}-{n}", "malformed-start", "--init", i, "--new", n) for i in INIT_ANSWERS for n in NEW_ANSWERS]
    agents = [spec("freeze", "freeze", "--after", "1"), spec("flood", "flood", "--lines", "120000", "--long-mb", "64", "--long-count", "2"), *starts]
    daemon = start(where, "modes", agents, env={"LMBRIDGE_START_TIMEOUT": "10", "LMBRIDGE_SESSION_TIMEOUT": "10", "LMBRIDGE_DRAIN_TIMEOUT": "1"})
    sampler = Sampler(daemon, every=0.02)
    violations: list[str] = []
    outcomes: Counter[str] = Counter()
    rid = 0
    began = time.monotonic()
    rss_before_flood = rss_flood_peak = 0
    flood_seconds = 0.0

    def chat(model: str, history: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]] | None]:
        nonlocal rid
        rid += 1
        parts = chat_once(daemon, model, history, rid, violations)
        said = "error" if parts is None else "".join(str(p.get("value", "")) for p in parts if p.get("type") == "text")
        return said, parts

    for round_ in range(rounds):
        for agent in starts:
            said, _ = chat(agent["id"], [user_message(f"round {round_}")])
            outcomes[f"start {'answered' if said == 'ok' else 'error' if said == 'error' else 'other: ' + said[:40]}"] += 1
        # freeze: a chat continued until the agent freezes, stopped, then a new chat
        said, parts = chat("freeze", [user_message(f"freeze {round_}")])
        outcomes[f"freeze first chat {'answered' if said == 'ok' else 'error'}"] += 1
        if parts is not None:
            rid += 1
            history = [user_message(f"freeze {round_}"), {"role": "assistant", "content": parts}, user_message("more")]
            outcomes[f"freeze continued chat {chat_or_stop(daemon, 'freeze', history, rid, 2.0, violations)}"] += 1
        rid += 1
        outcomes[f"freeze new chat {chat_or_stop(daemon, 'freeze', [user_message(f'after the freeze {round_}')], rid, 30.0, violations)}"] += 1
        # flood
        rss_before_flood = rss_before_flood or daemon.rss()
        sampler.rss_peak = daemon.rss()
        flood_began = time.monotonic()
        said, _ = chat("flood", [user_message(f"flood {round_}")])
        flood_seconds += time.monotonic() - flood_began
        sampler.sample()
        rss_flood_peak = max(rss_flood_peak, sampler.rss_peak)
        outcomes[f"flood {'survived' if said == 'survived' else 'other'}"] += 1
        if said != "survived":
            violations.append(f"modes: the flood chat was answered {said[:200]!r}")
    elapsed = time.monotonic() - began
    if rss_flood_peak > 2 * rss_before_flood:
        violations.append(f"modes: RSS {rss_flood_peak / MiB:.0f} MiB during the floods, {rss_before_flood / MiB:.0f} MiB before them")
    requests = daemon.ledger.answers
    figures = finish(daemon, sampler, violations, "modes", most_processes=CAP * len(agents))
    del figures["rss_peak_mib"]  # reset for the floods: their peak is below
    own = [json.loads(line) for path in logs.glob("*.jsonl") for line in path.read_text().splitlines() if line.strip()]
    long_answers = [e for e in own if "answer" in e and "error" in e and "longer than" in str(e["error"].get("message"))]
    if len(long_answers) != sum(1 for e in own if e.get("long")):
        violations.append(f"modes: {len(long_answers)} answers to {sum(1 for e in own if e.get('long'))} over-long permission requests")
    return {"rounds": rounds, "chats": rid, "answers": requests, "seconds": round(elapsed, 1), "outcomes": dict(sorted(outcomes.items())),
            "start_pairs": len(starts), "flood_seconds": round(flood_seconds, 1), "over_long_permissions": len(long_answers),
            "agent_requests": sum(1 for e in own if "sent" in e),
            "rss_before_floods_mib": round(rss_before_flood / MiB, 1), "rss_flood_peak_mib": round(rss_flood_peak / MiB, 1),
            **figures, "violations": violations}


def chat_or_stop(daemon: FuzzDaemon, model: str, history: list[dict[str, Any]], rid: int, wait: float, violations: list[str]) -> str:
    """A chat, stopped (``$/cancelRequest``) if it is not answered within ``wait`` seconds, as
    a user stops a chat that shows nothing; how it was answered: "answered", "error",
    "stopped" (``cancelled`` after the Stop), or "unanswered" (a violation: 60 s after the Stop)."""
    done = threading.Event()
    answer: dict[str, Any] = {}

    def on_answer(got: Any, frame: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        if got == f"c{rid}":
            answer.update(frame=frame)
            done.set()

    daemon.ledger.on_answer = on_answer
    daemon.send(json.dumps({"jsonrpc": "2.0", "id": f"c{rid}", "method": "lm/provideLanguageModelChatResponse",
                            "params": {"modelId": model, "messages": history}}).encode())
    if done.wait(wait):
        frame = answer["frame"]
        if "error" in frame and model not in str(frame["error"].get("message", "")):
            violations.append(f"an error that does not name the agent: {str(frame['error'])[:200]}")
        return "error" if "error" in frame else "answered"
    daemon.send(json.dumps({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": f"c{rid}"}}).encode())
    if not done.wait(60):
        violations.append(f"chat c{rid} not answered 60 s after its Stop")
        return "unanswered"
    return "stopped" if answer["frame"].get("result") == {"stopReason": "cancelled"} else "answered after the Stop"


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "value": text}]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--agent-frames", type=int, default=100_000)
    parser.add_argument("--chats", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--only", choices=["stdin", "agent", "cap", "modes"], action="append", help="run only these parts")
    parser.add_argument("--out", default=str(ROOT / ".fuzz" / "results.json"))
    args = parser.parse_args()
    results: dict[str, Any] = {"seed": args.seed}
    with tempfile.TemporaryDirectory(prefix="lmbridge-fuzz-") as tmp:
        where = Path(tmp)
        for name, run in (("stdin", lambda: stdin_part(where, args.frames, args.seed)),
                          ("agent", lambda: agent_part(where, args.agent_frames, args.seed)),
                          ("cap", lambda: cap_part(where, args.chats)),
                          ("modes", lambda: modes_part(where, args.rounds))):
            if args.only and name not in args.only:
                continue
            print(f"{name}…", flush=True)
            results[name] = run()
            print(json.dumps(results[name], indent=1), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    total = sum(len(results[k]["violations"]) for k in ("stdin", "agent", "cap", "modes") if k in results)
    print(f"violations: {total}  (figures in {out})")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
