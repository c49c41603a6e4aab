"""gunicorn configuration for ``LOAD_PROFILE=1 benchmarks/load.py``: every web worker runs
under cProfile and writes its 25 most expensive functions (cumulative CPU) to
``$TIDEGATE_PROFILE_DIR/profile-<pid>.txt`` when it exits."""

from __future__ import annotations

import cProfile
import io
import os
import pstats
from typing import Any

PROFILERS: dict[int, cProfile.Profile] = {}


def post_fork(server: Any, worker: Any) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    PROFILERS[os.getpid()] = profiler


def worker_exit(server: Any, worker: Any) -> None:
    profiler = PROFILERS.pop(os.getpid(), None)
    if profiler is None:
        return
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)
    folder = os.environ.get("TIDEGATE_PROFILE_DIR", "/tmp")
    with open(os.path.join(folder, f"profile-{os.getpid()}.txt"), "w") as file:
        file.write(out.getvalue())
