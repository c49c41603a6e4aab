"""A warm engine re-tries only what could now fit, and decides exactly as a fresh one."""

from __future__ import annotations

from dataclasses import replace

from scheduler_bridge.admission import (
    AdmissionEngine,
    CycleResult,
    CycleStats,
    Flavour,
    Node,
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


def test_an_unchanged_cluster_is_not_evaluated_again():
    snap = crowded()
    engine = AdmissionEngine()
    first = engine.run_cycle(snap)
    again = engine.run_cycle(snap)
    assert first == again
    assert stats(first).groups_skipped == 0
    assert stats(again).groups_evaluated == 0
    assert stats(again).workloads_skipped == 40


def test_after_one_finish_only_groups_of_that_flavour_are_tried_again():
    snap = crowded()
    engine = AdmissionEngine()
    engine.run_cycle(snap)
    finished = replace(snap, running=tuple(r for r in snap.running if r.id != "x-a"))
    result = engine.run_cycle(finished)
    assert result == run_cycle(finished)
    assert len(result.admissions) == 4  # four 2-GPU A100 jobs into the freed node
    assert stats(result).groups_skipped == 2  # the H100 groups of a and b
    assert stats(result).workloads_skipped == 20


def test_new_arrivals_of_a_failing_shape_are_skipped_with_it():
    snap = crowded()
    engine = AdmissionEngine()
    engine.run_cycle(snap)
    more = replace(snap, pending=(*snap.pending, workload("h-new", "a", 2, submitted=99)))
    result = engine.run_cycle(more)
    assert result == run_cycle(more)
    assert stats(result).groups_evaluated == 0


def test_a_changed_quota_starts_from_scratch():
    snap = crowded()
    engine = AdmissionEngine()
    engine.run_cycle(snap)
    bigger = replace(snap, quotas=(*snap.quotas, quota("org", 40)))
    result = engine.run_cycle(bigger)
    assert stats(result).groups_skipped == 0
    assert result == run_cycle(bigger)
