"""The explanation orders waiting work by ranks kept between cycles (pending.ArrivalRanks):
a warm engine lists positions exactly as a fresh one, whether work arrives after everyone
waiting, before them (a preempted job queued again with its first submit time) or at the
same moment."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from scheduler_bridge.admission import AdmissionEngine, CycleResult, PendingWorkload, run_cycle
from scheduler_bridge.admission.pending import ArrivalRanks, Item, Shape

from .factories import nodes, quota, running, snapshot, tenants, workload


def positions(result: CycleResult) -> list[tuple[str, int | None, int | None]]:
    return [(d.workload_id, d.position, d.tenant_position) for d in result.pending]


def explained(result: CycleResult) -> list[tuple]:
    """Everything a waiting workload is told, in the order it is listed."""
    return [
        (d.workload_id, d.tenant_id, d.position, d.tenant_position, d.code, d.message)
        for d in result.pending
    ]


def crowded(pending, busy=()):
    """Two tenants of one cohort on two full nodes: nothing new fits, everyone waits."""
    tree = tenants({"org": None, "a": "org", "b": "org"})
    fill = [running("r-a", "a", {"n000": 8}), running("r-b", "b", {"n001": 8}), *busy]
    return snapshot(tree, (quota("a", 8), quota("b", 8)), nodes(2), pending, fill)


def items(*arrivals: tuple[str, float]) -> list[Item]:
    shape = Shape.__new__(Shape)  # (ranks read neither shape nor node)
    return [Item(workload(wid, "a", submitted=at), 0, shape) for wid, at in arrivals]


def after_a_change(
    workload_id: str, change: Callable[[PendingWorkload], PendingWorkload]
) -> tuple[CycleResult, CycleResult]:
    """a's four jobs wait in a warm engine; one of them changes while it waits. The next
    cycle as the warm engine and as a fresh one decide it."""
    engine = AdmissionEngine()
    first = crowded([workload(f"p{i}", "a", 2, submitted=float(i)) for i in range(4)])
    engine.run_cycle(first)
    changed = [change(w) if w.id == workload_id else w for w in first.pending]
    second = replace(first, now=first.now + 60, pending=tuple(changed))
    return engine.run_cycle(second), run_cycle(second)


def test_later_arrivals_take_the_next_ranks_without_ranking_everyone_again() -> None:
    ranks = ArrivalRanks()
    waiting = items(("w2", 20.0), ("w0", 0.0), ("w1", 10.0))
    ranks.assign(waiting)
    assert [i.seq for i in waiting] == [2, 0, 1]
    table = ranks.by_seq

    later = items(("w4", 40.0), ("w3", 30.0))
    ranks.assign([*waiting, *later])

    assert ranks.by_seq is table  # appended, not ranked again
    assert [i.seq for i in later] == [4, 3]
    assert [i.seq for i in waiting] == [2, 0, 1]


def test_an_earlier_arrival_ranks_everyone_again_by_submission_then_id() -> None:
    ranks = ArrivalRanks()
    waiting = items(("w5", 50.0), ("w6", 60.0))
    ranks.assign(waiting)
    # a preempted job comes back with its first submit time; two share one moment
    back = items(("b", 10.0), ("a", 10.0))

    ranks.assign([*waiting, *back])

    everyone = sorted([*waiting, *back], key=lambda i: i.seq)
    assert [i.wl.id for i in everyone] == ["a", "b", "w5", "w6"]
    assert [i.seq for i in everyone] == [0, 1, 2, 3]
    assert all(ranks.by_seq[i.seq] is i for i in everyone)


def test_ranks_run_out_and_are_handed_out_again_from_zero() -> None:
    ranks = ArrivalRanks()
    first = items(("w0", 0.0))
    ranks.assign(first)
    size = ranks.size
    # one at a time, each after the last: every rank below size is used once
    waiting = first
    for n in range(1, size + 1):
        waiting = [waiting[-1], *items((f"w{n}", float(n)))]
        ranks.assign(waiting)
    assert ranks.size == size
    assert [i.seq for i in waiting] == [0, 1]  # ranked again when none was left


def test_a_warm_engine_lists_the_same_positions_as_a_fresh_one_when_work_comes_back() -> None:
    engine = AdmissionEngine()
    pending = [workload(f"p{i}", "ab"[i % 2], 2, submitted=100.0 + i) for i in range(6)]
    first = crowded(pending)
    assert positions(engine.run_cycle(first)) == positions(run_cycle(first))

    # a job of b preempted elsewhere is queued again with its first submit time, before
    # everyone waiting; one more arrives at the same moment as p2; and one arrives last
    back = workload("back", "b", 2, submitted=5.0)
    tie = workload("p2-twin", "a", 2, submitted=102.0)
    last = workload("z", "b", 2, submitted=500.0)
    second = replace(first, now=first.now + 60, pending=(*first.pending, back, tie, last))
    warm = engine.run_cycle(second)
    fresh = run_cycle(second)

    assert warm.pending == fresh.pending
    line_b = [d.workload_id for d in warm.pending if d.tenant_id == "b"]
    assert line_b == ["back", "p1", "p3", "p5", "z"]  # its oldest work first
    line_a = [d.workload_id for d in warm.pending if d.tenant_id == "a"]
    assert line_a == ["p0", "p2", "p2-twin", "p4"]  # a tie goes by id


def test_work_that_changes_while_it_waits_keeps_its_place() -> None:
    # p1 asks for another priority: a new compiled item, the same arrival
    warm, fresh = after_a_change("p1", lambda w: replace(w, priority=5))

    assert warm.pending == fresh.pending
    assert warm.pending[0].workload_id == "p1"  # its priority puts it first


def test_tenants_with_equal_shares_are_interleaved_by_arrival() -> None:
    """a and b hold the same, so their work waits in one line by submit time, then id."""
    pending = [
        workload("p0", "a", 2, submitted=1.0),
        workload("p1", "b", 2, submitted=2.0),
        workload("p3", "b", 2, submitted=3.0),
        workload("p2", "a", 2, submitted=3.0),
    ]
    result = run_cycle(crowded(pending))
    assert [d.workload_id for d in result.pending] == ["p0", "p1", "p2", "p3"]
    assert [d.position for d in result.pending] == [1, 2, 3, 4]


def test_work_that_moves_to_another_tenant_is_explained_as_it_is_now() -> None:
    warm, fresh = after_a_change(
        "p1", lambda w: replace(w, tenant_id="b", pod_sets=(replace(w.pod_sets[0], count=3),))
    )

    assert explained(warm) == explained(fresh)
    assert [d.tenant_id for d in warm.pending if d.workload_id == "p1"] == ["b"]


def test_work_queued_again_with_a_later_submit_time_goes_to_the_back() -> None:
    warm, fresh = after_a_change("p0", lambda w: replace(w, submitted_at=10.0))

    assert explained(warm) == explained(fresh)
    assert [d.workload_id for d in warm.pending] == ["p1", "p2", "p3", "p0"]


def test_cycles_without_explanations_in_between_keep_positions_right() -> None:
    engine = AdmissionEngine()
    pending = [workload(f"p{i}", "a", 2, submitted=float(10 + i)) for i in range(4)]
    first = crowded(pending)
    engine.run_cycle(first)
    early = workload("early", "b", 2, submitted=1.0)
    second = replace(first, pending=(*first.pending, early))
    engine.run_cycle(second, explain_pending=False)
    late = workload("late", "a", 2, submitted=99.0)
    third = replace(second, pending=(*second.pending[1:], late))

    assert explained(engine.run_cycle(third)) == explained(run_cycle(third))


def test_a_refused_snapshot_leaves_a_warm_engine_as_it_was() -> None:
    """A queue with one id twice is refused whole; the next cycle is the last one's."""
    engine = AdmissionEngine()
    pending = [workload("p0", "a", 2, submitted=1.0), workload("p1", "a", 2, submitted=2.0)]
    first = crowded(pending)
    engine.run_cycle(first)
    twin = replace(pending[0], tenant_id="b", priority=3)
    with pytest.raises(ValueError, match="duplicate pending workload id p0"):
        engine.run_cycle(replace(first, pending=(twin, twin, pending[1])))

    assert explained(engine.run_cycle(first)) == explained(run_cycle(first))


def test_work_of_an_unknown_tenant_is_listed_before_later_work_that_never_fits() -> None:
    """Both have no position; work that never queued is placed as of share 0, ahead of
    an idle filler of a tenant that holds GPUs."""
    tree = tenants({"org": None, "a": "org", "b": "org"})
    fill = [running("r-a", "a", {"n000": 4})]
    never = replace(workload("E", "a", 16, submitted=1.0), fills_idle=True)
    stray = workload("U", "nobody", 1, submitted=2.0)
    result = run_cycle(
        snapshot(tree, (quota("a", 8), quota("b", 8)), nodes(2), [never, stray], fill)
    )
    assert [(d.workload_id, d.position) for d in result.pending] == [("U", None), ("E", None)]


def test_a_rank_passes_to_the_same_workload_compiled_again_only() -> None:
    ranks = ArrivalRanks()
    waiting = items(("w0", 0.0), ("w1", 10.0), ("w2", 20.0))
    ranks.assign(waiting)
    again = items(("w1", 10.0))[0]  # w1 changed while it waited: compiled anew
    again.seq = waiting[1].seq
    impostor = items(("x", 30.0))[0]  # a rank it was never given
    impostor.seq = waiting[2].seq

    ranks.assign([waiting[0], again, impostor])

    assert again.seq == 1 and ranks.by_seq[1] is again
    assert impostor.seq == 3 and ranks.by_seq[3] is impostor
