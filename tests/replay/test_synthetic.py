"""The synthetic traces (scheduler_bridge/replay/synthetic.py): the size they are asked
for, in submit order, the same for a seed, offering the load asked of the capacity; the
bursty one with its own job sizes and tenants that come back all at once."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

import pytest

from scheduler_bridge.replay.synthetic import (
    BURSTY_RUN_BOUNDS_S,
    BURSTY_SIZES,
    bursty_trace,
    synthetic_trace,
)
from scheduler_bridge.replay.trace import PHILLY_JOBS, TraceJob, read_jobs

SIX_HOURS = 6 * 3600


def offered_load(trace: Sequence[TraceJob], capacity: int) -> float:
    span = trace[-1].submitted_at - trace[0].submitted_at
    return sum(job.gpus * job.run_time_s for job in trace) / span / capacity


def busiest_window_ratios(trace: Sequence[TraceJob]) -> list[float]:
    """Per tenant with enough jobs to tell: its busiest six hours' submissions over its
    average six hours'."""
    span = trace[-1].submitted_at - trace[0].submitted_at
    ratios = []
    for tenant in sorted({job.tenant for job in trace}):
        windows = Counter(int(j.submitted_at // SIX_HOURS) for j in trace if j.tenant == tenant)
        total = sum(windows.values())
        if total >= 100:
            ratios.append(max(windows.values()) / (total / (span / SIX_HOURS)))
    return ratios


def test_the_bursty_trace_has_the_jobs_asked_for_in_submit_order_the_same_for_a_seed() -> None:
    trace = bursty_trace(jobs=3000, tenants=6, capacity=128, seed=7)
    assert len(trace) == 3000
    assert len({job.id for job in trace}) == 3000
    assert [j.submitted_at for j in trace] == sorted(j.submitted_at for j in trace)
    assert {job.tenant for job in trace} == {f"b{i:02d}" for i in range(6)}
    assert trace == bursty_trace(jobs=3000, tenants=6, capacity=128, seed=7)
    assert trace != bursty_trace(jobs=3000, tenants=6, capacity=128, seed=8)


def test_the_bursty_trace_draws_its_own_sizes_and_bounded_run_times() -> None:
    trace = bursty_trace(jobs=6000, tenants=8, capacity=256, seed=1)
    sizes = Counter(job.gpus for job in trace)
    assert set(sizes) == {gpus for gpus, _ in BURSTY_SIZES}
    for gpus, weight in BURSTY_SIZES:  # each size about as often as its weight says
        assert sizes[gpus] / len(trace) == pytest.approx(weight, abs=0.02)
    low, high = BURSTY_RUN_BOUNDS_S
    assert all(low <= job.run_time_s <= high for job in trace)
    # never larger than the cluster: a capacity of 8 leaves out the 16- and 32-GPU jobs
    small = bursty_trace(jobs=500, tenants=4, capacity=8, seed=1)
    assert {job.gpus for job in small} == {1, 2, 4, 8}


@pytest.mark.parametrize("seed", range(12))
def test_a_single_tenant_quiet_for_days_still_gives_every_job_asked_for(seed: int) -> None:
    trace = bursty_trace(jobs=50, tenants=1, capacity=8, seed=seed)
    assert len(trace) == 50
    assert [j.submitted_at for j in trace] == sorted(j.submitted_at for j in trace)


def test_the_bursty_trace_offers_about_the_load_asked_of_the_capacity() -> None:
    loads = [
        offered_load(bursty_trace(jobs=4000, tenants=8, capacity=256, load=0.85, seed=s), 256)
        for s in range(4)
    ]
    assert statistics.mean(loads) == pytest.approx(0.85, rel=0.15)
    lighter = [
        offered_load(bursty_trace(jobs=4000, tenants=8, capacity=256, load=0.4, seed=s), 256)
        for s in range(4)
    ]
    assert statistics.mean(lighter) == pytest.approx(0.4, rel=0.15)


def test_bursty_tenants_come_back_all_at_once_where_poisson_tenants_trickle() -> None:
    bursty = busiest_window_ratios(bursty_trace(jobs=4000, tenants=8, capacity=256, seed=1))
    steady = busiest_window_ratios(
        synthetic_trace(read_jobs(PHILLY_JOBS), jobs=4000, tenants=8, capacity=256, seed=1)
    )
    assert len(bursty) == 8
    assert statistics.median(bursty) >= 2.5
    assert statistics.median(bursty) >= 1.4 * statistics.median(steady)


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"jobs": 0, "tenants": 4, "capacity": 64}, "jobs must be at least 1, not 0"),
        ({"jobs": 10, "tenants": 0, "capacity": 64}, "tenants must be at least 1, not 0"),
        ({"jobs": 10, "tenants": 4, "capacity": -8}, "capacity must be at least 1, not -8"),
        ({"jobs": 10, "tenants": 4, "capacity": 64, "load": 0.0}, "above 0, not 0.0"),
        ({"jobs": 10, "tenants": 4, "capacity": 64, "load": float("nan")}, "not nan"),
        ({"jobs": 10, "tenants": 4, "capacity": 64, "load": float("inf")}, "not inf"),
    ],
)
def test_a_bursty_trace_that_cannot_be_made_says_which_argument_is_wrong(
    arguments: dict[str, float], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        bursty_trace(**arguments)  # type: ignore[arg-type]


def test_the_synthetic_trace_keeps_the_sample_shapes_and_offers_the_load() -> None:
    sample = read_jobs(PHILLY_JOBS)
    shapes = {(job.gpus, job.run_time_s) for job in sample}
    trace = synthetic_trace(sample, jobs=5000, tenants=10, capacity=512, seed=3)
    assert len(trace) == 5000
    assert {(job.gpus, job.run_time_s) for job in trace} <= shapes
    assert [j.submitted_at for j in trace] == sorted(j.submitted_at for j in trace)
    assert trace == synthetic_trace(sample, jobs=5000, tenants=10, capacity=512, seed=3)
    popular = Counter(job.tenant for job in trace).most_common()
    assert popular[0][0] == "t00"  # Zipf-like: the first tenant submits most
    loads = [
        offered_load(synthetic_trace(sample, jobs=5000, tenants=10, capacity=512, seed=s), 512)
        for s in range(3)
    ]
    assert statistics.mean(loads) == pytest.approx(0.8, rel=0.2)
    with pytest.raises(ValueError, match="no jobs"):
        synthetic_trace([], jobs=10, tenants=2, capacity=8)
