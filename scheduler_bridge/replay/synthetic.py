"""A synthetic trace of any size (``benchmarks/replay.py`` scenario ``synthetic-100k``):
job sizes and run times drawn from the shipped Philly slice, tenants of Zipf-like
popularity, Poisson arrivals at the rate that offers ``load`` of the capacity."""

from __future__ import annotations

import math
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


# The bursty trace's job sizes (GPUs, weight): more multi-node work than the Philly slice,
# where three jobs in four use one GPU; chosen, not measured
BURSTY_SIZES = ((1, 0.35), (2, 0.15), (4, 0.2), (8, 0.2), (16, 0.08), (32, 0.02))
BURSTY_MEDIAN_RUN_S = 3600.0  # log-normal run times around an hour, from 2 minutes to 3 days
BURSTY_RUN_SIGMA = 1.3
BURSTY_RUN_BOUNDS_S = (120.0, 3 * 86400.0)
BURSTY_BURST_RATE = 4.0  # a tenant in a burst submits this many times its quiet rate
BURSTY_QUIET_S = 2 * 86400.0  # mean length of a quiet spell
BURSTY_BURST_S = 6 * 3600.0  # mean length of a burst


def bursty_trace(
    *,
    jobs: int,
    tenants: int,
    capacity: int,
    load: float = 0.85,
    seed: int = 0,
) -> list[TraceJob]:
    """A trace unlike the shipped slice, to try what was tuned on it: its own job-size mix
    (BURSTY_SIZES, log-normal run times) and tenants of equal weight, each quiet for days
    on end and then in a burst of hours at BURSTY_BURST_RATE times its quiet rate, so
    that owners come back all at once for the guarantee others borrowed. Arrivals offer
    ``load`` of ``capacity`` on average. ``jobs`` jobs for ``tenants`` tenants
    (``b00``...), in submit order, deterministic for a seed."""
    for name, value in (("jobs", jobs), ("tenants", tenants), ("capacity", capacity)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    if not (math.isfinite(load) and load > 0):
        raise ValueError(f"load must be a fraction of the capacity above 0, not {load}")
    rng = random.Random(seed)
    sizes = [gpus for gpus, _ in BURSTY_SIZES if gpus <= capacity]
    weights = [weight for gpus, weight in BURSTY_SIZES if gpus <= capacity]
    low, high = BURSTY_RUN_BOUNDS_S

    def run_time() -> float:
        drawn = rng.lognormvariate(math.log(BURSTY_MEDIAN_RUN_S), BURSTY_RUN_SIGMA)
        return round(min(high, max(low, drawn)), 1)

    # the mean GPU-seconds of a job, estimated from 20,000 draws of the same
    # distributions (within a few per cent)
    probe = [rng.choices(sizes, weights)[0] * run_time() for _ in range(20_000)]
    mean_gpu_s = sum(probe) / len(probe)
    # a tenant is in a burst this share of the time; its quiet rate is set so that the
    # tenants together offer ``load`` of the capacity on average
    bursting = BURSTY_BURST_S / (BURSTY_BURST_S + BURSTY_QUIET_S)
    per_tenant = load * capacity / mean_gpu_s / tenants
    quiet_rate = per_tenant / (1 - bursting + bursting * BURSTY_BURST_RATE)

    def phase(in_burst: bool) -> float:
        return rng.expovariate(1 / (BURSTY_BURST_S if in_burst else BURSTY_QUIET_S))

    # each tenant's clock, whether it is in a burst, and when that phase ends (drawn as
    # its arrivals first are)
    states: list[tuple[float, bool, float] | None] = [None] * tenants
    names = [f"b{i:02d}" for i in range(tenants)]
    arrivals: list[tuple[float, str]] = []
    # simulated time for every tenant to reach its share of the jobs, on average; a
    # long quiet spell (few tenants) can leave the trace short: then on, twice as far
    horizon = jobs / (per_tenant * tenants) * 1.2
    while True:
        for index, name in enumerate(names):
            state = states[index]
            if state is None:
                starts_in_burst = rng.random() < bursting
                state = (0.0, starts_in_burst, phase(starts_in_burst))
            at, in_burst, phase_ends = state
            while at < horizon:
                rate = quiet_rate * (BURSTY_BURST_RATE if in_burst else 1.0)
                step = rng.expovariate(rate)
                if at + step > phase_ends:  # the phase changes first: draw again from there
                    at = phase_ends
                    in_burst = not in_burst
                    phase_ends = at + phase(in_burst)
                    continue
                at += step
                arrivals.append((at, name))
            states[index] = (at, in_burst, phase_ends)
        if len(arrivals) >= jobs:
            break
        horizon *= 2
    arrivals.sort()
    return [
        TraceJob(f"b{index}", tenant, round(at, 3), run_time(), rng.choices(sizes, weights)[0])
        for index, (at, tenant) in enumerate(arrivals[:jobs])
    ]
