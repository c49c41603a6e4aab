"""A synthetic trace of any size (``benchmarks/replay.py`` scenario ``synthetic-100k``):
job sizes and run times drawn from the shipped Philly slice, tenants of Zipf-like
popularity, Poisson arrivals at the rate that offers ``load`` of the capacity."""

from __future__ import annotations

import random
from collections.abc import Sequence

from .trace import TraceJob


def synthetic_trace(
    sample: Sequence[TraceJob],
    *,
    jobs: int,
    tenants: int,
    capacity: int,
    load: float = 0.8,
    seed: int = 0,
) -> list[TraceJob]:
    """``jobs`` jobs for ``tenants`` tenants (``t00``...), deterministic for a seed."""
    if not sample:
        raise ValueError("the sample trace holds no jobs")
    rng = random.Random(seed)
    shapes = [(job.gpus, job.run_time_s) for job in sample if job.gpus <= capacity]
    mean_gpu_s = sum(g * r for g, r in shapes) / len(shapes)
    # arrivals per second so that GPU-seconds offered per second = load x capacity
    rate = load * capacity / mean_gpu_s
    names = [f"t{i:02d}" for i in range(tenants)]
    popularity = [1.0 / (rank + 1) for rank in range(tenants)]
    at = 0.0
    trace: list[TraceJob] = []
    for index in range(jobs):
        at += rng.expovariate(rate)
        gpus, run_time = rng.choice(shapes)
        tenant = rng.choices(names, popularity)[0]
        trace.append(TraceJob(f"s{index}", tenant, round(at, 3), run_time, gpus))
    return trace
