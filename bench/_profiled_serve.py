"""``lmbridge serve`` under pyinstrument, imports done first (used by ``bench.profile``).

Usage: ``python bench/_profiled_serve.py OUT.txt``. The lazy imports of the
first chat request (the ACP SDK) are made before the profiler starts, so the
profile shows the steady state: streaming.
"""

import atexit
import sys

from pyinstrument import Profiler

import lmbridge.daemon.history_actor  # noqa: F401  (the lazy imports of the first chat)
import lmbridge.daemon.session_actor  # noqa: F401
from lmbridge.cli import main

out = sys.argv[1]
profiler = Profiler(interval=0.0005)
profiler.start()


def _report() -> None:
    profiler.stop()
    with open(out, "w") as f:
        f.write(profiler.output_text(unicode=True, show_all=False, flat=True))
        f.write("\n\n")
        f.write(profiler.output_text(unicode=True, show_all=False))


atexit.register(_report)
sys.exit(main(["serve"]))
