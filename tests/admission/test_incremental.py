"""A warm engine re-tries only what could now fit, and decides exactly as a fresh one."""

from __future__ import annotations

from dataclasses import replace

from scheduler_bridge.admission import (
    AdmissionEngine,
    CycleResult,
    CycleStats,
    Flavour,
    Node,
    ReasonCode,
    run_cycle,
)

from .factories import nodes, quota, running, snapshot, tenants, workload

FLAVOURS = (Flavour("H100"), Flavour("A100", 0.5))


def stats(result: CycleResult) -> CycleStats:
    assert result.stats is not None
    return result.stats


def crowded():
    tree = tenants({"org": None, "a": "org", "b": "org"})
    quotas = (
        quota("a", 8),
        quota("b", 8),
        quota("a", 8, flavour="A100"),
        quota("b", 8, flavour="A100"),
    )
    node_list = (*nodes(2), Node("x000", {"A100": 8}), Node("x001", {"A100": 8}))
    busy = [
        running("h-a", "a", {"n000": 8}),
        running("h-b", "b", {"n001": 8}),
        running("x-a", "a", {"x000": 8}, flavour="A100"),
        running("x-b", "b", {"x001": 8}, flavour="A100"),
    ]
    pending = [workload(f"h{i}", "ab"[i % 2], 2, submitted=i) for i in range(20)]
    pending += [workload(f"x{i}", "ab"[i % 2], 2, flavour="A100", submitted=i) for i in range(20)]
    return snapshot(tree, quotas, node_list, pending, busy, flavours=FLAVOURS)


def owner_behind_lenders():
    """a is inside its guarantee but the nodes are full of work inside guarantees too:
    its 2-GPU jobs fail after a preemption search finds no victim."""
    tree = tenants({"org": None, "a": "org", "b": "org"})
    quotas = (quota("a", 16), quota("b", 8))
    busy = [running("own-a", "a", {"n001": 8}), running("own-b", "b", {"n000": 8})]
    pending = [workload(f"a{i}", "a", 2, submitted=i) for i in range(10)]
    return snapshot(tree, quotas, nodes(2), pending, busy)


def test_borrowing_work_that_fits_neither_quota_nor_gpus_is_refused_before_the_pass():
    result = AdmissionEngine().run_cycle(crowded())
    assert result.admissions == ()
    assert stats(result).groups_failed_at_start == 4
    assert stats(result).groups_evaluated == 0


def test_a_tenant_whose_cohort_is_spent_has_its_borrowing_groups_refused_together():
    """b borrows a's idle guarantee: its big job takes all of it, and the first of its
    other shapes to fail on quota takes the rest down with it, untried (they would all
    fail the same way: quota only shrinks within a cycle)."""
    tree = tenants({"org": None, "a": "org", "b": "org"})
    quotas = (quota("a", 8), quota("b", 0))
    pending = [workload("big", "b", 8, submitted=0)]
    pending += [workload(f"b{n}", "b", n, submitted=n) for n in range(1, 6)]
    snap = snapshot(tree, quotas, nodes(2), pending)
    result = AdmissionEngine().run_cycle(snap)
    assert [a.workload_id for a in result.admissions] == ["big"]
    assert stats(result).groups_evaluated == 2  # big, then b1 fails on quota
    assert stats(result).groups_failed_with_tenant == 4
    assert {d.code for d in result.pending} == {ReasonCode.COHORT_EXHAUSTED}
    assert [d.position for d in result.pending] == [1, 2, 3, 4, 5]


def test_after_one_finish_only_groups_the_freed_gpus_could_fit_are_tried():
    snap = crowded()
    engine = AdmissionEngine()
    engine.run_cycle(snap)
    finished = replace(snap, running=tuple(r for r in snap.running if r.id != "x-a"))
    result = engine.run_cycle(finished)
    assert result == replace(run_cycle(finished), stats=result.stats)
    assert len(result.admissions) == 4  # four 2-GPU A100 jobs into the freed node
    # tries of the A100 groups of a and b only: four admissions, then each group fails
    # once the node is full
    assert stats(result).groups_evaluated == 6
    assert stats(result).groups_failed_at_start == 2  # the H100 groups


def test_a_larger_shape_than_the_freed_gpus_is_not_tried():
    tree = tenants({"org": None, "a": "org", "b": "org"})
    quotas = (quota("a", 8), quota("b", 8))
    busy = [
        running("a-6", "a", {"n000": 6}),
        running("a-2", "a", {"n000": 2}),
        running("b-8", "b", {"n001": 8}),
    ]
    pending = [workload(f"two{i}", "b", 2, submitted=i) for i in range(3)]
    pending += [workload(f"four{i}", "b", 4, submitted=i) for i in range(3)]
    snap = snapshot(tree, quotas, nodes(2), pending, busy)
    engine = AdmissionEngine()
    engine.run_cycle(snap)
    finished = replace(snap, running=tuple(r for r in busy if r.id != "a-2"))
    result = engine.run_cycle(finished)
    assert result == replace(run_cycle(finished), stats=result.stats)
    assert [a.workload_id for a in result.admissions] == ["two0"]
    assert stats(result).groups_evaluated == 2  # two0 starts, then two1 fails
    assert stats(result).groups_failed_at_start == 1  # four GPUs cannot fit in two


def test_an_unchanged_cluster_is_not_evaluated_again():
    snap = owner_behind_lenders()
    engine = AdmissionEngine()
    first = engine.run_cycle(snap)
    again = engine.run_cycle(snap)
    assert first == replace(again, stats=first.stats)
    assert stats(first).groups_evaluated == 1
    assert stats(first).groups_skipped == 0
    assert stats(again).groups_evaluated == 0
    assert stats(again).groups_skipped == 1
    assert stats(again).workloads_skipped == 10


def test_new_arrivals_of_a_failing_shape_are_skipped_with_it():
    snap = owner_behind_lenders()
    engine = AdmissionEngine()
    engine.run_cycle(snap)
    more = replace(snap, pending=(*snap.pending, workload("a-new", "a", 2, submitted=99)))
    result = engine.run_cycle(more)
    assert result == replace(run_cycle(more), stats=result.stats)
    assert stats(result).groups_evaluated == 0
    assert stats(result).workloads_skipped == 11


def test_a_finish_in_the_tree_makes_a_remembered_failure_try_again():
    snap = owner_behind_lenders()
    engine = AdmissionEngine()
    engine.run_cycle(snap)
    finished = replace(snap, running=tuple(r for r in snap.running if r.id != "own-b"))
    result = engine.run_cycle(finished)
    assert result == replace(run_cycle(finished), stats=result.stats)
    assert stats(result).groups_skipped == 0
    assert len(result.admissions) == 4


def test_a_changed_quota_starts_from_scratch():
    snap = owner_behind_lenders()
    engine = AdmissionEngine()
    engine.run_cycle(snap)
    bigger = replace(snap, quotas=(*snap.quotas, quota("org", 40)))
    result = engine.run_cycle(bigger)
    assert stats(result).groups_skipped == 0
    assert result == replace(run_cycle(bigger), stats=result.stats)
