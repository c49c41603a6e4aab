"""Packing GPU shares against fragmentation: the openb inflation experiment.

The method of the FGD paper (Weng et al., USENIX ATC 2023), on the openb trace vendored
in data/traces/openb/ (Alibaba cluster-trace-gpu-v2023; 1,213 nodes, 6,212 GPUs): tasks
drawn from the trace's GPU tasks (with replacement, fixed seed) arrive one by one and
never leave, until the GPUs they asked for reach 100 % of the cluster's GPUs. Each policy
(``fgd``, ``best-fit``, ``random-fit``) places the same arrivals in the same run; a task
that fits nowhere fails and stays out.

Prints one line per policy: ``policy``, ``gpus`` (the cluster's), ``arrived_ratio``
(GPUs asked for over GPUs there, at the end: 1.0), ``allocated_ratio`` (GPUs placed over
GPUs there, at the end), ``allocated_ratio_at_90`` (the same when arrivals reached 90 %),
``failed_tasks`` and ``decisions_per_s``. The target: ``fgd`` allocates at least as much
as the other two, and at 90 % arrival at most 5 points below 0.9.

GPU capacity only: Tidegate does not schedule CPU, so the trace's CPU requests are not
placed (the paper's figures also count CPU). ``SHARING_SEED`` changes the draw.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402

from benchmarks._support import emit, progress  # noqa: E402
from scheduler_bridge.admission.sharing import MILLI, PackingPolicy, RequestMix  # noqa: E402
from scheduler_bridge.replay.inflation import (  # noqa: E402
    arrivals,
    inflate,
    request_of,
    shared_nodes,
)
from scheduler_bridge.replay.openb import gpu_tasks, read_openb_nodes, read_openb_tasks  # noqa: E402

SEED = int(os.environ.get("SHARING_SEED", "42"))


def main() -> None:
    nodes = shared_nodes(read_openb_nodes().rows)
    tasks = gpu_tasks(read_openb_tasks().rows)
    capacity = MILLI * sum(node.gpus for node in nodes)
    requests = arrivals(tasks, capacity, SEED)
    # what fgd measures fragmentation against: the trace's mix of GPU request shapes
    mix = RequestMix.of(request_of(task) for task in tasks)
    progress(f"openb: {len(nodes)} nodes, {capacity // MILLI} GPUs, {len(requests)} arrivals")
    lines = []
    with Progress(console=Console(stderr=True), transient=True) as bar:
        for policy in PackingPolicy:
            task = bar.add_task(f"{policy.value:>10}", total=len(requests))
            started = time.perf_counter()
            result = inflate(
                nodes, requests, mix, policy, seed=SEED, step=functools.partial(bar.advance, task)
            )
            elapsed = time.perf_counter() - started
            lines.append(
                {
                    "policy": policy.value,
                    "gpus": result.gpus,
                    "arrived_ratio": round(result.arrived_ratio, 3),
                    "allocated_ratio": round(result.allocated_ratio, 4),
                    "allocated_ratio_at_90": round(result.allocated_ratio_at_90, 4),
                    "failed_tasks": result.failed_tasks,
                    "tasks": result.tasks,
                    "decisions_per_s": round(result.tasks / elapsed, 1),
                }
            )
    for line in lines:
        emit(bench="sharing", scenario="openb-inflation", **line)


if __name__ == "__main__":
    main()
