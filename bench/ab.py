"""Streaming A/B between checkouts: ``python -m bench.ab base=/tmp/base/src,new= [--rounds 8] [--only text,4k]``.

Each side is a daemon (``python -m lmbridge serve``) run with that side's ``src`` first on
``PYTHONPATH`` (empty: this checkout's), started once and kept for the whole run. Each round
streams every size through every side, in an order reversed each round, each stream right
after a direct client's own (``bench.run``'s readers and agent), so all sides share the
machine's load. Prints, per size: the ratio's median and spread over the rounds (daemon ÷
direct), and each daemon's CPU per chunk summed over all its streams (``/proc`` counts 10 ms
ticks; summed over rounds × chunks the figure resolves well under a microsecond; each
daemon's pre-warm and first chat are left out) and its minor page faults per chunk (each a fresh
page of memory the kernel hands it, ~1 µs here: docs/performance.md, "Streaming: what is left in
the window"), with the 1-minute load average of every round (docs/performance.md, "How it measures").

Make a side's ``src`` with ``git archive <commit> src | tar -x -C /tmp/<name>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from bench.run import Peer, analyse, cpu_seconds, daemon, daemon_stream, direct_stream, init_daemon, own_cpu_seconds, private_state


def minor_faults(pid: int) -> int:
    """Minor page faults of a process so far (Linux /proc: ``minflt``)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


SIZES = {"text": (20_000, 32), "4k": (2_000, 4096)}


def start(src: str) -> Peer:
    """A daemon importing lmbridge from ``src`` (empty: this checkout's)."""
    before = os.environ.pop("PYTHONPATH", None)
    if src:
        os.environ["PYTHONPATH"] = src
    try:
        d = daemon()
    finally:
        os.environ.pop("PYTHONPATH", None)
        if before is not None:
            os.environ["PYTHONPATH"] = before
    init_daemon(d)
    return d


def run(sides: dict[str, str], rounds: int, sizes: list[str]) -> None:
    ratios: dict[tuple[str, str], list[float]] = {(s, w): [] for s in sides for w in sizes}
    cpu = {(s, w): 0.0 for s in sides for w in sizes}
    faults = {(s, w): 0 for s in sides for w in sizes}
    client = {w: 0.0 for w in sizes}
    loads = [os.getloadavg()[0]]
    daemons = {name: start(src) for name, src in sides.items()}
    try:
        # Not counted: each daemon's pre-warm (imports after ``initialize``, ~0.5 s of CPU)
        # and first chat, which would land in whichever stream came first.
        for d in daemons.values():
            for w in sizes:
                daemon_stream(d, SIZES[w][0] // 10, SIZES[w][1], 0)
        time.sleep(2.0)
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for w in sizes:
                n, size = SIZES[w]
                for s in order:
                    c0 = own_cpu_seconds()
                    texts, _ = direct_stream(n, size, 0)
                    client[w] += own_cpu_seconds() - c0
                    direct = analyse(texts, n)
                    c0, f0 = cpu_seconds(daemons[s].pid), minor_faults(daemons[s].pid)
                    texts, _ = daemon_stream(daemons[s], n, size, 0)
                    cpu[(s, w)] += cpu_seconds(daemons[s].pid) - c0
                    faults[(s, w)] += minor_faults(daemons[s].pid) - f0
                    ratios[(s, w)].append(analyse(texts, n)["chunks_per_s"] / direct["chunks_per_s"])
            loads.append(os.getloadavg()[0])
            print(f"round {r}, load {loads[-1]:.2f}: " + ", ".join(f"{s} {w} {ratios[(s, w)][-1]:.2f}x" for s in sides for w in sizes), flush=True)
    finally:
        for d in daemons.values():
            d.close()
    print("load average by round: " + " ".join(f"{x:.2f}" for x in loads))
    for w in sizes:
        n = SIZES[w][0]
        print(f"{w}: bare client CPU {client[w] / (rounds * len(sides) * n) * 1e6:.1f} us a chunk")
        for s in sides:
            rs = sorted(ratios[(s, w)])
            per_chunk = f"daemon CPU {cpu[(s, w)] / (rounds * n) * 1e6:.1f} us a chunk, {faults[(s, w)] / (rounds * n):.2f} page faults a chunk"
            print(f"  {s}: ratio {statistics.median(rs):.2f}x ({rs[0]:.2f}-{rs[-1]:.2f}), {per_chunk}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("sides", help="name=src,name=src,... (an empty src: this checkout)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--only", default="text,4k", help="sizes: text,4k")
    args = ap.parse_args(argv)
    sides = dict(side.split("=", 1) for side in args.sides.split(","))
    with private_state():  # the daemons read no state of this machine's
        run(sides, args.rounds, args.only.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main())
