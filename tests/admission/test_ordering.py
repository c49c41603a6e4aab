"""Who goes first: guarantee, priority, fair share, submit time; and queue positions."""

from __future__ import annotations

import random
from dataclasses import replace

from scheduler_bridge.admission import AdmissionEngine, Flavour, Node, ReasonCode, run_cycle

from .factories import nodes, quota, running, snapshot, tenants, two_teams, workload


def ids(result):
    return [a.workload_id for a in result.admissions]


def test_higher_priority_goes_first_when_capacity_is_short():
    tree, quotas = two_teams(a=0, b=0)
    quotas = (*quotas, quota("org", 4))
    pending = [
        workload("low", "a", 4, priority=1),
        workload("high", "b", 4, priority=9, submitted=5),
    ]
    result = run_cycle(snapshot(tree, quotas, nodes(1), pending))
    assert ids(result) == ["high"]


def test_lower_share_goes_first_among_equal_priority():
    tree, quotas = two_teams(a=4, b=4)
    busy = [running("a-old", "a", {"n000": 4})]
    pending = [workload("a1", "a", 4), workload("b1", "b", 4, submitted=9)]
    # only 4 GPUs left: b holds nothing, so it goes first although it came later
    result = run_cycle(snapshot(tree, quotas, nodes(1), pending, busy))
    assert ids(result) == ["b1"]


def test_decayed_usage_history_lowers_priority_of_heavy_past_users():
    tree, quotas = two_teams(a=0, b=0)
    quotas = (*quotas, quota("org", 4))
    pending = [workload("a1", "a", 4), workload("b1", "b", 4, submitted=9)]
    snap = snapshot(tree, quotas, nodes(1), pending, history={"a": 500.0})
    assert ids(run_cycle(snap)) == ["b1"]


def test_weight_divides_the_share():
    tree = tenants({"org": None, "a": "org", "b": "org"}, weights={"a": 4.0})
    quotas = (quota("org", 4), quota("a", 0), quota("b", 0))
    busy = [running("a-old", "a", {"n000": 2}), running("b-old", "b", {"n000": 1})]
    pending = [workload("a1", "a", 1, submitted=9), workload("b1", "b", 1)]
    # a holds twice as much but weighs four times as much: its share is lower
    result = run_cycle(snapshot(tree, quotas, nodes(1, gpus=4), pending, busy))
    assert ids(result) == ["a1"]


def test_submit_time_then_id_break_remaining_ties():
    tree, quotas = two_teams(a=4, b=4)
    pending = [
        workload("z", "a", 4, submitted=1),
        workload("y", "b", 4, submitted=1),
        workload("x", "a", 4, submitted=2),
    ]
    result = run_cycle(snapshot(tree, quotas, nodes(1), pending))
    assert ids(result) == ["y", "z"]


def test_priorities_of_any_size_order_the_queue_within_and_across_tenants():
    # Kubernetes priorities span int32 and the engine takes any int: the queues' keys
    # must order the extremes as they order small numbers, within a tenant and across
    tree, quotas = two_teams(a=0, b=0)
    quotas = (*quotas, quota("org", 4))
    extremes = [-(2**40), -(2**31), -1, 0, 2**31 - 1, 2**40]
    for runner_up, top in zip(extremes, extremes[1:], strict=False):
        same_tenant = [
            workload("first-in", "a", 4, priority=runner_up, submitted=0),
            workload("late-but-higher", "a", 4, priority=top, submitted=9),
        ]
        result = run_cycle(snapshot(tree, quotas, nodes(1), same_tenant))
        assert ids(result) == ["late-but-higher"], (top, runner_up)
        across = [
            workload("first-in", "a", 4, priority=runner_up, submitted=0),
            workload("late-but-higher", "b", 4, priority=top, submitted=9),
        ]
        result = run_cycle(snapshot(tree, quotas, nodes(1), across))
        assert ids(result) == ["late-but-higher"], (top, runner_up)


def test_no_head_of_line_blocking_small_jobs_pass_a_big_one_that_does_not_fit():
    tree, quotas = two_teams(a=16, b=0)
    pending = [workload("big", "a", 8, count=2)] + [
        workload(f"s{i}", "a", 1, submitted=1 + i) for i in range(6)
    ]
    busy = [running("other", "a", {"n000": 2})]
    result = run_cycle(snapshot(tree, quotas, nodes(2), pending, busy))
    assert ids(result) == [f"s{i}" for i in range(6)]
    assert result.pending[0].workload_id == "big"


def test_a_cycle_admits_everything_that_fits_any_number_per_tenant():
    tree, quotas = two_teams(a=64, b=0)
    pending = [workload(f"j{i}", "a", 1, submitted=i) for i in range(40)]
    result = run_cycle(snapshot(tree, quotas, nodes(8), pending))
    assert len(result.admissions) == 40


def test_share_is_recomputed_as_the_cycle_admits():
    tree, quotas = two_teams(a=0, b=0)
    quotas = (*quotas, quota("org", 6))
    pending = [workload(f"a{i}", "a", 1, submitted=i) for i in range(6)]
    pending += [workload(f"b{i}", "b", 1, submitted=10 + i) for i in range(6)]
    result = run_cycle(snapshot(tree, quotas, nodes(1, gpus=6), pending))
    assert ids(result) == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_work_within_guarantee_goes_before_higher_priority_borrowing_work():
    tree, quotas = two_teams(a=4, b=4)
    busy = [running("b-own", "b", {"n000": 4})]
    pending = [workload("b-borrow", "b", 4, priority=100), workload("a-own", "a", 4, submitted=5)]
    result = run_cycle(snapshot(tree, quotas, nodes(1), pending, busy))
    assert ids(result) == ["a-own"]


def test_queue_positions_follow_the_order_of_the_next_cycle():
    tree, quotas = two_teams(a=2, b=2)
    pending = [
        workload("a-low", "a", 4, priority=0, submitted=2),
        workload("a-high", "a", 4, priority=5, submitted=3),
        workload("b-1", "b", 4, submitted=1),
        workload("too-big", "b", 8, count=2, submitted=0),  # more than the cluster has
    ]
    node_full = [running("other-cluster-user", "gone", {"n000": 8})]
    result = run_cycle(snapshot(tree, quotas, nodes(1), pending, node_full))
    order = [(p.workload_id, p.position, p.tenant_position) for p in result.pending]
    assert order == [("a-high", 1, 1), ("b-1", 2, 1), ("a-low", 3, 2), ("too-big", None, None)]
    assert result.pending[-1].code is ReasonCode.NEVER_FITS


def test_waiting_behind_higher_priority_when_it_lost_free_gpus_this_cycle():
    tree, quotas = two_teams(a=8, b=8)
    pending = [workload("hi", "a", 8, priority=10), workload("lo", "b", 8, submitted=1)]
    result = run_cycle(snapshot(tree, quotas, nodes(1), pending))
    assert ids(result) == ["hi"]
    why = result.pending[0]
    assert why.code is ReasonCode.WAITING_PRIORITY
    assert why.message.startswith("waiting behind higher priority")


def test_same_input_same_output_whatever_the_input_order():
    tree, quotas = two_teams(a=6, b=6)
    pending = [workload(f"w{i}", "ab"[i % 2], 1 + i % 3, submitted=i % 4) for i in range(30)]
    snap = snapshot(tree, quotas, nodes(3), pending)
    first = run_cycle(snap)
    shuffled = list(pending)
    random.Random(7).shuffle(shuffled)
    again = run_cycle(replace(snap, pending=tuple(shuffled), nodes=tuple(reversed(snap.nodes))))
    assert first == again
    assert first == AdmissionEngine().run_cycle(snap)


def test_a_flavour_inside_the_guarantee_is_preferred_to_borrowing_an_earlier_one():
    """Like Kueue's whenCanBorrow: TryNextFlavor. A preemptor must get the guaranteed
    GPUs it freed when it comes back, rather than borrow elsewhere and leave them to its
    victims, which would preempt back and forth."""
    flavours = (Flavour("H100"), Flavour("A100", 0.5))
    quotas = (quota("a", 8), quota("b", 8, flavour="A100"))
    node_list = (*nodes(1), Node("x000", {"A100": 8}))
    wl = workload("a1", "a", 4, flavour=("A100", "H100"))
    tree = tenants({"org": None, "a": "org", "b": "org"})
    result = run_cycle(snapshot(tree, quotas, node_list, [wl], flavours=flavours))
    assert result.admissions[0].flavour == "H100"
    assert result.admissions[0].borrowed == {}


def test_work_another_flavour_could_run_keeps_its_place_in_line():
    """No quota for the first flavour it accepts, but it waits for the second: in line."""
    tree = tenants({"org": None, "a": "org"})
    quotas = (quota("a", 8, flavour="A100"),)
    node_list = (*nodes(1), *nodes(1, flavour="A100", prefix="x"))
    busy = [running("a-run", "a", {"x000": 8}, flavour="A100")]
    both = workload("either", "a", 4, flavour=("H100", "A100"), submitted=1.0)
    later = workload("a100-only", "a", 4, flavour="A100", submitted=2.0)
    flavours = (Flavour("H100"), Flavour("A100", 0.5))
    result = run_cycle(snapshot(tree, quotas, node_list, [both, later], busy, flavours))
    order = [(p.workload_id, p.position) for p in result.pending]
    assert order == [("either", 1), ("a100-only", 2)]
