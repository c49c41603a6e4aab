"""The explanation orders waiting work by ranks kept between cycles (pending.ArrivalRanks):
a warm engine lists positions exactly as a fresh one, whether work arrives after everyone
waiting, before them (a preempted job queued again with its first submit time) or at the
same moment."""

from __future__ import annotations

from dataclasses import replace

from scheduler_bridge.admission import AdmissionEngine, CycleResult, run_cycle
from scheduler_bridge.admission.pending import ArrivalRanks, Item, Shape

from .factories import nodes, quota, running, snapshot, tenants, workload


def positions(result: CycleResult) -> list[tuple[str, int | None, int | None]]:
    return [(d.workload_id, d.position, d.tenant_position) for d in result.pending]


def crowded(pending, busy=()):
    """Two tenants of one cohort on two full nodes: nothing new fits, everyone waits."""
    tree = tenants({"org": None, "a": "org", "b": "org"})
    fill = [running("r-a", "a", {"n000": 8}), running("r-b", "b", {"n001": 8}), *busy]
    return snapshot(tree, (quota("a", 8), quota("b", 8)), nodes(2), pending, fill)


def items(*arrivals: tuple[str, float]) -> list[Item]:
    shape = Shape.__new__(Shape)  # (ranks read neither shape nor node)
    return [Item(workload(wid, "a", submitted=at), 0, shape) for wid, at in arrivals]


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
    engine = AdmissionEngine()
    pending = [workload(f"p{i}", "a", 2, submitted=float(i)) for i in range(4)]
    first = crowded(pending)
    engine.run_cycle(first)
    # p1 asks for another priority: a new compiled item, the same arrival
    changed = [replace(w, priority=5) if w.id == "p1" else w for w in first.pending]
    second = replace(first, now=first.now + 60, pending=tuple(changed))

    warm = engine.run_cycle(second)

    assert warm.pending == run_cycle(second).pending
    assert warm.pending[0].workload_id == "p1"  # its priority puts it first
