"""Reclaim wait: work inside its guarantee waits a while for GPUs to free on their own
before it preempts another tenant's borrowed work (EngineConfig.reclaim_wait_s)."""

from __future__ import annotations

from dataclasses import replace

from scheduler_bridge.admission import (
    AdmissionEngine,
    EngineConfig,
    ReasonCode,
    run_cycle,
)
from scheduler_bridge.admission.simulator import SimJob, Simulator, apply_result

from .factories import nodes, running, snapshot, two_teams, workload
from .invariants import check_cycle
from .test_elastic import elastic_running

WAIT = EngineConfig(reclaim_wait_s=120.0)


def _borrowed_cluster(now: float):
    """a (guarantee 8) has nothing running; b holds all 16 GPUs, 8 of them borrowed; a
    submits one 8-GPU job at t=50."""
    tree, quotas = two_teams(a=8, b=8)
    busy = [running("b-own", "b", {"n000": 8}), running("b-borrow", "b", {"n001": 8}, admitted=5)]
    return snapshot(tree, quotas, nodes(2), [workload("a1", "a", 8, submitted=50)], busy, now=now)


def test_an_owner_waits_out_its_reclaim_wait_then_reclaims():
    early = _borrowed_cluster(now=100.0)  # 50 s after it was submitted
    waiting = run_cycle(early, WAIT)
    check_cycle(early, waiting)
    assert waiting.preemptions == ()
    why = waiting.pending[0]
    assert why.position == 1
    assert why.message.endswith(
        "inside its guarantee, it waits up to 2 min for GPUs to free before it preempts "
        "borrowed work (~70 s left)"
    )
    late = _borrowed_cluster(now=171.0)
    reclaiming = run_cycle(late, WAIT)
    assert [p.victim_id for p in reclaiming.preemptions] == ["b-borrow"]
    assert reclaiming.pending[0].code is ReasonCode.PREEMPTING
    # without a wait the same owner reclaims at once
    assert [p.victim_id for p in run_cycle(early).preemptions] == ["b-borrow"]


def test_a_warm_engine_reclaims_once_the_wait_ends_although_nothing_else_changed():
    engine = AdmissionEngine(WAIT)
    assert engine.run_cycle(_borrowed_cluster(now=100.0)).preemptions == ()
    assert engine.run_cycle(_borrowed_cluster(now=150.0)).preemptions == ()
    later = engine.run_cycle(_borrowed_cluster(now=171.0))
    assert [p.victim_id for p in later.preemptions] == ["b-borrow"]
    assert later == run_cycle(_borrowed_cluster(now=171.0), WAIT)


def test_gpus_that_free_during_the_wait_go_to_the_owner_and_nothing_is_preempted():
    tree, quotas = two_teams(a=8, b=8)
    busy = [running("b-own", "b", {"n000": 8}), running("b-borrow", "b", {"n001": 8}, admitted=5)]
    queued = [workload("a1", "a", 8, submitted=50), workload("b2", "b", 8, submitted=10)]
    snap = snapshot(tree, quotas, nodes(2), queued, busy, now=60.0)
    first = run_cycle(snap, WAIT)
    assert first.preemptions == () and first.admissions == ()
    # b's borrowed job ends on its own; its own queued job (older) does not get the GPUs
    ended = replace(
        apply_result(snap, first),
        now=90.0,
        running=tuple(r for r in snap.running if r.id != "b-borrow"),
    )
    second = run_cycle(ended, WAIT)
    check_cycle(ended, second)
    assert [a.workload_id for a in second.admissions] == ["a1"]
    assert second.preemptions == ()


def test_elastic_pods_are_taken_back_at_once_during_the_wait():
    """Shrinking loses no work: the wait is only for whole workloads."""
    tree, quotas = two_teams(a=8, b=8)
    # b holds 12 of its 8: a core of 4 and 4 elastic pods on n000, a rigid job of 4 on
    # n001; a runs 4 and asks for 4 more (inside its guarantee); the cluster is full
    core, pods_running, pods_pending = elastic_running(
        "e", "b", {"n000": 4}, ["n000"] * 4, count=12
    )
    b_rigid = running("b-late", "b", {"n001": 4}, admitted=30.0)
    a_job = running("a-old", "a", {"n001": 4}, admitted=5.0)
    a_new = workload("a-new", "a", gpus=1, count=4, submitted=90.0)
    snap = snapshot(
        tree, quotas, nodes(2), [*pods_pending, a_new], [core, *pods_running, b_rigid, a_job]
    )
    result = run_cycle(snap, WAIT)
    check_cycle(snap, result)
    victims = {p.victim_id for p in result.preemptions}
    assert len(victims) == 4 and all(v.startswith("e~main~") for v in victims)


def test_the_simulator_runs_a_cycle_when_a_wait_ends_with_nothing_else_happening():
    """Nothing arrives or finishes for hours after the owner's job: the cycle at the end
    of its wait is what lets it reclaim (the product's periodic cycle does the same)."""
    tree, quotas = two_teams(a=8, b=8)
    jobs = [
        SimJob(workload=workload("b1", "b", 8, submitted=0), run_time_s=36_000),
        SimJob(workload=workload("b2", "b", 8, submitted=0), run_time_s=36_000),
        SimJob(workload=workload("a1", "a", 8, submitted=100), run_time_s=600),
    ]
    result = Simulator(
        tenants=tree,
        flavours=snapshot(tree, quotas, nodes(2)).flavours,
        quotas=quotas,
        nodes=nodes(2),
        jobs=jobs,
        engine=AdmissionEngine(WAIT),
        cycle_interval_s=10.0,
    ).run()
    started = {o.id: o.started_at for o in result.jobs}
    assert result.preemptions == 1
    # reclaims at 220 s (its wait ended), starts in the next cycle once the victim stopped
    assert started["a1"] is not None and 220.0 <= started["a1"] <= 240.0
