"""Elastic workloads: a core admitted as usual, pods above it grown into idle GPUs and
taken back first (admission/elastic.py)."""

from __future__ import annotations

import pytest

from scheduler_bridge.admission import (
    ElasticPod,
    PendingDecision,
    Placement,
    PodSet,
    ReasonCode,
    RunningWorkload,
    core_of,
    elastic_changes,
    elastic_parts,
    elastic_reason,
    run_cycle,
    without_elastic_pods,
)
from tests.admission.factories import H100, nodes, running, snapshot, two_teams, workload


def elastic_request(wid: str, tenant: str, count: int, min_count: int):  # noqa: ANN201
    wl = workload(wid, tenant)
    return wl.__class__(
        id=wid,
        tenant_id=tenant,
        pod_sets=(PodSet(count, 1, (H100,), min_count=min_count),),
        submitted_at=0.0,
    )


def elastic_running(
    wid: str, tenant: str, core_on: dict[str, int], pods_on: list[str], count: int
) -> tuple[RunningWorkload, tuple, tuple]:
    """A running elastic workload: its core on ``core_on`` and one elastic pod on each
    node of ``pods_on``; returns the core and the engine's running and pending parts."""
    core_size = sum(core_on.values())
    request = elastic_request(wid, tenant, count, core_size)
    core = running(wid, tenant, core_on, admitted=10.0)
    pods = [
        ElasticPod("main", i, Placement(node, H100, 1), started_at=20.0 + i)
        for i, node in enumerate(pods_on)
    ]
    parts = elastic_parts(core, request, {"main": H100}, pods)
    return core, *parts


def test_an_elastic_pod_set_is_admitted_by_its_core_first() -> None:
    request = elastic_request("e", "a", count=8, min_count=2)
    assert core_of(request).pod_sets[0].count == 2
    assert core_of(request).gpus == 2
    rigid = workload("r", "a", gpus=1, count=4)
    assert core_of(rigid) is rigid


def test_min_count_outside_one_to_count_is_refused_with_the_range() -> None:
    with pytest.raises(ValueError, match=r"min_count must be within 1..4 \(its count\), got 5"):
        PodSet(4, 1, (H100,), min_count=5)
    with pytest.raises(ValueError, match="got 0"):
        PodSet(4, 1, (H100,), min_count=0)


def test_a_running_elastic_workload_grows_into_idle_gpus() -> None:
    tree, quotas = two_teams(a=8, b=8)
    core, pods_running, pods_pending = elastic_running("e", "a", {"n000": 4}, [], count=12)
    assert len(pods_pending) == 8 and not pods_running
    snap = snapshot(tree, quotas, nodes(2), pods_pending, [core])
    result = run_cycle(snap)
    changes = elastic_changes(snap, result)
    assert set(changes) == {"e"}
    assert len(changes["e"].grow) == 8 and not changes["e"].shrink
    assert not without_elastic_pods(snap, result).admissions  # nothing else started


def test_rigid_work_goes_before_elastic_growth_whoever_has_the_smaller_share() -> None:
    tree, quotas = two_teams(a=8, b=8)
    core, _, pods_pending = elastic_running("e", "a", {"n000": 4}, [], count=12)
    # b's rigid job borrows (it asks for 12 of b's 8): it still goes before a's pods
    rigid = workload("big", "b", gpus=1, count=10, gang=True)
    snap = snapshot(tree, quotas, nodes(2), [*pods_pending, rigid], [core])
    result = run_cycle(snap)
    assert [a.workload_id for a in without_elastic_pods(snap, result).admissions] == ["big"]
    assert len(elastic_changes(snap, result)["e"].grow) == 2  # what is left: 16 - 4 - 10


def test_reclaim_shrinks_elastic_pods_before_it_preempts_whole_workloads() -> None:
    tree, quotas = two_teams(a=8, b=8)
    # a holds 12 of its 8: a core of 4, 4 elastic pods, and a rigid job of 4 started
    # after them (plain reclaim would take that newest work); b runs 4; the cluster is full
    core, pods_running, pods_pending = elastic_running(
        "e", "a", {"n000": 4}, ["n000"] * 4, count=12
    )
    a_rigid = running("a-late", "a", {"n001": 4}, admitted=30.0)
    b_job = running("b-old", "b", {"n001": 4}, admitted=5.0)
    b_new = workload("b-new", "b", gpus=1, count=4)
    snap = snapshot(
        tree,
        quotas,
        nodes(2),
        [*pods_pending, b_new],
        [core, *pods_running, a_rigid, b_job],
    )
    result = run_cycle(snap)
    victims = {p.victim_id for p in result.preemptions}
    assert len(victims) == 4 and all(v.startswith("e~main~") for v in victims)
    changes = elastic_changes(snap, result)
    assert len(changes["e"].shrink) == 4 and not changes["e"].grow
    assert not without_elastic_pods(snap, result).preemptions  # a-late keeps running
    waiting = {d.workload_id: d for d in result.pending}
    assert waiting["b-new"].code is ReasonCode.PREEMPTING


def test_a_reclaim_that_needs_a_whole_workload_too_shrinks_only_the_pods_it_still_needs() -> None:
    tree, quotas = two_teams(a=8, b=8)
    # a holds all 16 GPUs: an elastic workload (core 2, 4 elastic pods) and a 2-GPU job on
    # n000, and its newest job of 8 on n001; b, idle, needs 5 of its guarantee back
    core, pods_running, pods_pending = elastic_running("e", "a", {"n000": 2}, ["n000"] * 4, count=6)
    a_small = running("a-small", "a", {"n000": 2}, admitted=20.0)
    a_late = running("a-late", "a", {"n001": 8}, admitted=30.0)
    b_new = workload("b-new", "b", gpus=1, count=5)
    snap = snapshot(
        tree, quotas, nodes(2), [*pods_pending, b_new], [core, *pods_running, a_small, a_late]
    )
    result = run_cycle(snap)
    # all 4 pods free too little: a-small stops as well (taking a-late would leave a
    # below its guarantee), and then 3 pods are enough, so one keeps running
    assert [p.victim_id for p in without_elastic_pods(snap, result).preemptions] == ["a-small"]
    assert len(elastic_changes(snap, result)["e"].shrink) == 3
    assert {d.workload_id: d.code for d in result.pending}["b-new"] is ReasonCode.PREEMPTING


def test_a_tenants_rigid_work_takes_back_its_own_elastic_pods() -> None:
    tree, quotas = two_teams(a=8, b=8)
    # a's elastic workload fills a's whole guarantee and the node: 2 core + 6 elastic
    core, pods_running, _ = elastic_running("e", "a", {"n000": 2}, ["n000"] * 6, count=8)
    mine = workload("a-rigid", "a", gpus=1, count=4)
    snap = snapshot(tree, quotas, nodes(1), [mine], [core, *pods_running])
    result = run_cycle(snap)
    assert len(elastic_changes(snap, result)["e"].shrink) == 4
    assert {d.workload_id: d.code for d in result.pending}["a-rigid"] is ReasonCode.PREEMPTING


def test_the_core_inside_its_guarantee_is_never_taken() -> None:
    tree, quotas = two_teams(a=8, b=8)
    # a: a core of 8 (its whole guarantee), no elastic pod running; b wants 8 of its own
    core, pods_running, _ = elastic_running("e", "a", {"n000": 8}, [], count=12)
    b_new = workload("b-new", "b", gpus=8, count=1)
    snap = snapshot(tree, quotas, nodes(1), [b_new], [core, *pods_running])
    result = run_cycle(snap)
    assert not result.preemptions
    assert {d.workload_id for d in result.pending} >= {"b-new"}


def test_a_settled_cluster_with_elastic_work_changes_nothing() -> None:
    tree, quotas = two_teams(a=8, b=8)
    core, pods_running, pods_pending = elastic_running(
        "e", "a", {"n000": 4}, ["n000"] * 4 + ["n001"] * 4, count=16
    )
    b_job = running("b-old", "b", {"n001": 4})
    snap = snapshot(tree, quotas, nodes(2), pods_pending, [core, *pods_running, b_job])
    result = run_cycle(snap)
    assert not result.admissions and not result.preemptions
    assert len(pods_pending) == 4
    assert all(d.workload_id.startswith("e~") for d in result.pending)


def test_elastic_pods_are_never_preempted_by_borrowing_work_nor_preempt_themselves() -> None:
    tree, quotas = two_teams(a=8, b=8)
    # b already uses its guarantee; its new job would borrow: it may not shrink a
    core, pods_running, _ = elastic_running("e", "a", {"n000": 4}, ["n001"] * 4, count=8)
    b_job = running("b-old", "b", {"n000": 4, "n001": 4})
    borrower = workload("b-more", "b", gpus=1, count=4)
    snap = snapshot(tree, quotas, nodes(2), [borrower], [core, *pods_running, b_job])
    assert not run_cycle(snap).preemptions


def test_elastic_parts_refuse_pods_beyond_the_pod_sets_range() -> None:
    request = elastic_request("e", "a", count=4, min_count=2)
    core = running("e", "a", {"n000": 2})
    with pytest.raises(ValueError, match="outside what the pod set may grow to"):
        elastic_parts(
            core, request, {"main": H100}, [ElasticPod("main", 2, Placement("n000", H100, 1), 0.0)]
        )
    with pytest.raises(ValueError, match="listed twice"):
        pod = ElasticPod("main", 0, Placement("n000", H100, 1), 0.0)
        elastic_parts(core, request, {"main": H100}, [pod, pod])


def test_a_stopping_elastic_pod_is_not_asked_for_again_until_it_is_gone() -> None:
    request = elastic_request("e", "a", count=4, min_count=2)
    core = running("e", "a", {"n000": 2})
    pod = ElasticPod("main", 0, Placement("n000", H100, 1), 0.0, stopping=True)
    run_parts, pending = elastic_parts(core, request, {"main": H100}, [pod])
    assert run_parts[0].evicting
    assert [p.id for p in pending] == ["e~main~1"]


def test_the_reason_says_how_many_pods_run_and_why_not_more() -> None:
    request = elastic_request("e", "a", count=8, min_count=4)
    decision = PendingDecision(
        workload_id="e~main~6",
        tenant_id="a",
        position=3,
        tenant_position=1,
        code=ReasonCode.NODE_CAPACITY,
        message="no node has 1 free H100",
    )
    assert elastic_reason(request, 6, [decision]) == (
        "running 6 of 8 pods (at least 4): 2 wait for GPUs nobody else needs "
        "(no node has 1 free H100)"
    )
    assert elastic_reason(request, 8, []) == "running 8 of 8 pods: at its maximum"


def test_own_elastic_pods_do_not_put_rigid_work_beyond_the_tenants_own_limits() -> None:
    """With no room to borrow, a tenant's elastic pods fill its guarantee: its rigid
    work is still not refused as beyond its limits, it takes the pods back."""
    tree, quotas = two_teams(a=2, b=0, a_limit=0)
    core, pods_running, _ = elastic_running("e", "a", {"n000": 1}, ["n000"], count=2)
    mine = workload("a-rigid", "a", gpus=1, count=1)
    snap = snapshot(tree, quotas, nodes(1, gpus=2), [mine], [core, *pods_running])
    result = run_cycle(snap)
    assert [p.victim_id for p in result.preemptions] == ["e~main~0"]
