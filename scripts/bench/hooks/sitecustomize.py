"""Memory tracing on demand for a benchmarked server process (`sse_streams.py --trace`).

Python imports `sitecustomize` at start-up from its path; the benchmark puts this folder there
and sets BENCH_TRACEMALLOC to a file. Then SIGUSR1 starts `tracemalloc` (after a garbage
collection) and SIGUSR2 writes a snapshot of what is allocated to that file. Without the
variable it does nothing.
"""

from __future__ import annotations

import gc
import os
import signal
import tracemalloc
from types import FrameType

FRAMES = 40  # deep enough to reach the first frame outside the standard library
_target = os.environ.get("BENCH_TRACEMALLOC")


def _start(_signal: int, _frame: FrameType | None) -> None:
    gc.collect()
    tracemalloc.start(FRAMES)


def _snapshot(_signal: int, _frame: FrameType | None) -> None:
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    assert _target is not None
    snapshot.dump(_target + ".part")
    os.replace(_target + ".part", _target)  # whole, or not there


if _target:
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _snapshot)
