"""The virtual-time simulator, and fair share over time."""

from __future__ import annotations

import math
import random

import pytest

from scheduler_bridge.admission import Flavour, PendingWorkload, PodSet, decay_usage
from scheduler_bridge.admission.fairshare import decay_factor, mean_life_hours
from scheduler_bridge.admission.simulator import SimJob, Simulator

from .factories import nodes, quota, tenants, workload


def saturating(weights: dict[str, float], jobs_each: int = 600, gpus: int = 24) -> dict[str, float]:
    """Tenants that always have work queued share a pool; GPU-seconds held per tenant."""
    tree = tenants({"org": None, **dict.fromkeys(weights, "org")}, weights=weights)
    rng = random.Random(42)
    jobs = [
        SimJob(
            workload=workload(f"{t}-{i:04d}", t, 1, submitted=float(i)),
            run_time_s=rng.uniform(60, 300),
        )
        for t in weights
        for i in range(jobs_each)
    ]
    result = Simulator(
        tenants=tree,
        flavours=(Flavour("H100"),),
        quotas=(quota("org", gpus),),
        nodes=nodes(gpus // 8),
        jobs=jobs,
        cycle_interval_s=10.0,
    ).run(until=3600.0)
    return dict(result.held_gpu_seconds)


def test_two_saturating_tenants_of_equal_weight_converge_to_equal_shares():
    held = saturating({"a": 1.0, "b": 1.0})
    assert held["a"] / held["b"] == pytest.approx(1.0, rel=0.05)


def test_weights_three_to_one_converge_to_three_to_one():
    held = saturating({"a": 3.0, "b": 1.0})
    assert held["a"] / held["b"] == pytest.approx(3.0, rel=0.1)


def test_jobs_run_to_completion_and_waits_are_measured():
    tree = tenants({"org": None, "a": "org"})
    jobs = [
        SimJob(workload=workload(f"j{i}", "a", 8, submitted=0.0), run_time_s=100.0)
        for i in range(3)
    ]
    result = Simulator(
        tenants=tree,
        flavours=(Flavour("H100"),),
        quotas=(quota("a", 8),),
        nodes=nodes(1),
        jobs=jobs,
    ).run()
    assert [(j.started_at, j.finished_at) for j in result.jobs] == [
        (0.0, 100.0),
        (100.0, 200.0),
        (200.0, 300.0),
    ]
    assert result.admissions == 3
    assert result.mean_utilization == pytest.approx(1.0)


def test_preempted_jobs_restart_from_scratch_and_are_counted():
    tree = tenants({"org": None, "a": "org", "b": "org"})
    jobs = [
        SimJob(workload=workload("b-long", "b", 8, submitted=0.0), run_time_s=1000.0),
        SimJob(workload=workload("a-owner", "a", 8, submitted=50.0), run_time_s=100.0),
    ]
    result = Simulator(
        tenants=tree,
        flavours=(Flavour("H100"),),
        quotas=(quota("a", 8), quota("b", 0)),
        nodes=nodes(1),
        jobs=jobs,
        cycle_interval_s=1.0,
    ).run()
    outcome = {j.id: j for j in result.jobs}
    assert outcome["b-long"].preemptions == 1
    assert outcome["a-owner"].started_at == 51.0
    assert outcome["b-long"].finished_at == 151.0 + 1000.0


def test_simulation_is_deterministic():
    first = saturating({"a": 1.0, "b": 2.0}, jobs_each=100)
    assert first == saturating({"a": 1.0, "b": 2.0}, jobs_each=100)


def test_decayed_usage_halves_after_one_half_life_and_converges_to_holding_times_tau():
    week = 7 * 86400.0
    assert decay_factor(week, week) == pytest.approx(0.5)
    assert decay_usage(100.0, 0.0, week, week) == pytest.approx(50.0)
    assert decay_usage(0.0, 8.0, 100 * week, week) == pytest.approx(8.0 * mean_life_hours(week))
    # the exact integral does not depend on how the interval is cut
    once = decay_usage(10.0, 4.0, 3600.0, week)
    twice = decay_usage(decay_usage(10.0, 4.0, 1800.0, week), 4.0, 1800.0, week)
    assert once == pytest.approx(twice)
    assert mean_life_hours(week) == pytest.approx(week / math.log(2) / 3600)


def _two_teams_one_node(jobs: list[SimJob], a: int = 4, b: int = 4):  # noqa: ANN202
    tree = tenants({"org": None, "a": "org", "b": "org"})
    return Simulator(
        tenants=tree,
        flavours=(Flavour("H100"),),
        quotas=(quota("a", a), quota("b", b)),
        nodes=nodes(1),
        jobs=jobs,
        cycle_interval_s=1.0,
    ).run()


def test_a_preempted_job_resumes_from_its_last_checkpoint_and_the_rest_is_wasted():
    def run(checkpoint: float | None):  # noqa: ANN202
        jobs = [
            SimJob(
                workload=workload("b-long", "b", 8, submitted=0.0),
                run_time_s=1000.0,
                checkpoint_interval_s=checkpoint,
            ),
            SimJob(workload=workload("a-owner", "a", 8, submitted=250.0), run_time_s=100.0),
        ]
        return _two_teams_one_node(jobs, a=8, b=0)

    saved = run(100.0)
    # checkpoints at 100 and 200: the 50 s after the last one are lost on 8 GPUs
    assert saved.wasted_gpu_seconds == pytest.approx(50 * 8)
    assert {j.id: j.finished_at for j in saved.jobs}["b-long"] == pytest.approx(351 + 800)
    lost = run(None)
    assert lost.wasted_gpu_seconds == pytest.approx(250 * 8)
    assert {j.id: j.finished_at for j in lost.jobs}["b-long"] == pytest.approx(351 + 1000)
    assert saved.goodput > lost.goodput


def test_an_elastic_job_grows_into_idle_gpus_and_runs_faster():
    elastic = workload("a-elastic", "a", 1, count=8)
    elastic = elastic.__class__(
        id="a-elastic",
        tenant_id="a",
        pod_sets=(PodSet(8, 1, ("H100",), min_count=2),),
        submitted_at=0.0,
    )
    result = _two_teams_one_node([SimJob(workload=elastic, run_time_s=800.0)])
    job = {j.id: j for j in result.jobs}["a-elastic"]
    # the core starts at 0, six pods join at 1 (paused 60 s for the change): 1 s at 2/8
    # speed, then full speed for the remaining 799.75 s plus the pause
    assert result.grows == 6 and result.shrinks == 0
    assert job.finished_at == pytest.approx(1 + 60 + (800 - 0.25))
    assert result.wasted_gpu_seconds == pytest.approx(60 * 8)


def test_an_owner_shrinks_an_elastic_borrower_instead_of_preempting_it():
    elastic = PendingWorkload(
        id="a-elastic",
        tenant_id="a",
        pod_sets=(PodSet(8, 1, ("H100",), min_count=2),),
        submitted_at=0.0,
    )
    jobs = [
        SimJob(workload=elastic, run_time_s=800.0),
        SimJob(workload=workload("b-owner", "b", 1, count=4, submitted=100.0), run_time_s=50.0),
    ]
    result = _two_teams_one_node(jobs)
    outcome = {j.id: j for j in result.jobs}
    assert result.preemptions == 0 and outcome["a-elastic"].preemptions == 0
    assert result.shrinks == 4
    assert outcome["b-owner"].started_at == 101.0
    # once b is done, a grows back to its full size
    assert result.grows == 6 + 4
