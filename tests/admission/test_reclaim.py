"""Reclaim of guaranteed quota, and priority preemption within a tenant."""

from __future__ import annotations

from dataclasses import replace

from scheduler_bridge.admission import (
    AdmissionEngine,
    EngineConfig,
    Node,
    PodSet,
    PreemptionCode,
    ReasonCode,
    Topology,
    run_cycle,
)
from scheduler_bridge.admission.simulator import apply_result

from .factories import H100, nodes, quota, running, snapshot, tenants, two_teams, workload
from .invariants import check_cycle


def victims(result):
    return sorted(p.victim_id for p in result.preemptions)


def test_borrower_is_preempted_when_owner_needs_its_guarantee():
    tree, quotas = two_teams(a=8, b=8)
    busy = [running("b-own", "b", {"n000": 8}), running("b-borrow", "b", {"n001": 8}, admitted=5)]
    snap = snapshot(tree, quotas, nodes(2), [workload("a1", "a", 8, submitted=50)], busy)
    first = run_cycle(snap)
    check_cycle(snap, first)
    assert victims(first) == ["b-borrow"]
    assert first.preemptions[0].code is PreemptionCode.RECLAIM
    assert (
        first.preemptions[0].message == "reclaim: a needs its guaranteed H100 for a1; b borrows 8"
    )
    why = first.pending[0]
    assert why.code is ReasonCode.PREEMPTING
    second = run_cycle(apply_result(snap, first))
    assert [a.workload_id for a in second.admissions] == ["a1"]


def test_evicting_victims_are_waited_for_not_preempted_again():
    tree, quotas = two_teams(a=8, b=8)
    busy = [running("b-own", "b", {"n000": 8}), running("b-borrow", "b", {"n001": 8}, admitted=5)]
    snap = snapshot(tree, quotas, nodes(2), [workload("a1", "a", 8, submitted=50)], busy)
    first = run_cycle(snap)
    stopping = apply_result(snap, first, evict=True)
    second = run_cycle(stopping)
    assert second.preemptions == ()
    assert second.pending[0].message.startswith("waiting for preempted workloads of b")


def test_reclaim_takes_from_the_most_borrowing_tenant_first():
    tree = tenants({"org": None, "a": "org", "b": "org", "c": "org"})
    quotas = (quota("a", 4), quota("b", 2), quota("c", 2))
    busy = [
        running("b1", "b", {"n000": 3}),  # b borrows 1
        running("c1", "c", {"n000": 5}),  # c borrows 3
    ]
    snap = snapshot(tree, quotas, nodes(1), [workload("a1", "a", 2, submitted=9)], busy)
    assert victims(run_cycle(snap)) == ["c1"]


def test_within_a_borrower_lowest_priority_then_latest_admitted_goes_first():
    tree, quotas = two_teams(a=4, b=0)
    busy = [
        running("b-old-low", "b", {"n000": 1}, priority=1, admitted=1),
        running("b-new-low", "b", {"n000": 1}, priority=1, admitted=2),
        running("b-high", "b", {"n000": 2}, priority=5, admitted=3),
    ]
    snap = snapshot(tree, quotas, nodes(1, gpus=4), [workload("a1", "a", 1, submitted=9)], busy)
    assert victims(run_cycle(snap)) == ["b-new-low"]


def test_reclaim_preempts_as_few_workloads_as_needed():
    tree, quotas = two_teams(a=8, b=0)
    busy = [
        running("b-small-1", "b", {"n000": 1}, admitted=3),
        running("b-small-2", "b", {"n000": 1}, admitted=2),
        running("b-big", "b", {"n000": 6}, admitted=1),
    ]
    snap = snapshot(tree, quotas, nodes(1), [workload("a1", "a", 6, submitted=9)], busy)
    # greedy order takes both small ones first, then the big one; minimising gives back
    # the small ones because the big one alone frees enough
    assert victims(run_cycle(snap)) == ["b-big"]


def test_work_within_its_owners_guarantee_is_never_preempted_by_another_tenant():
    tree, quotas = two_teams(a=8, b=8)
    busy = [running("b-own", "b", {"n000": 8})]
    snap = snapshot(tree, quotas, nodes(1), [workload("a1", "a", 8)], busy)
    result = run_cycle(snap)
    assert result.preemptions == ()
    assert result.pending[0].code is ReasonCode.NODE_CAPACITY


def test_non_preemptible_work_is_never_preempted():
    tree, quotas = two_teams(a=8, b=0)
    busy = [running("b-borrow", "b", {"n000": 8}, preemptible=False)]
    snap = snapshot(tree, quotas, nodes(1), [workload("a1", "a", 8)], busy)
    result = run_cycle(snap)
    assert result.preemptions == ()
    assert result.pending[0].message.startswith("cohort org has nothing to lend for H100")


def test_owner_above_its_guarantee_cannot_reclaim():
    tree, quotas = two_teams(a=4, b=0)
    busy = [running("b-borrow", "b", {"n000": 4})]
    snap = snapshot(tree, quotas, nodes(1), [workload("a1", "a", 8)], busy)
    assert run_cycle(snap).preemptions == ()


def test_priority_preemption_within_a_tenant_is_off_by_default():
    tree, quotas = two_teams(a=8, b=0)
    busy = [running("a-low", "a", {"n000": 8}, priority=1)]
    snap = snapshot(tree, quotas, nodes(1), [workload("a-high", "a", 8, priority=9)], busy)
    assert run_cycle(snap).preemptions == ()


def test_priority_preemption_within_a_tenant_when_enabled():
    tree, quotas = two_teams(a=8, b=8)
    busy = [
        running("a-low", "a", {"n000": 8}, priority=1),
        running("b-low", "b", {"n001": 8}, priority=0),
    ]
    pending = [workload("a-high", "a", 8, priority=9)]
    snap = snapshot(tree, quotas, nodes(2), pending, busy)
    result = AdmissionEngine(EngineConfig(priority_preemption=True)).run_cycle(snap)
    assert victims(result) == ["a-low"]
    assert result.preemptions[0].code is PreemptionCode.PRIORITY


def test_priority_preemption_never_targets_equal_or_higher_priority():
    tree, quotas = two_teams(a=8, b=0)
    busy = [running("a-same", "a", {"n000": 8}, priority=9)]
    snap = snapshot(tree, quotas, nodes(1), [workload("a-new", "a", 8, priority=9)], busy)
    result = AdmissionEngine(EngineConfig(priority_preemption=True)).run_cycle(snap)
    assert result.preemptions == ()


def test_one_victim_is_claimed_by_one_preemptor_only():
    tree, quotas = two_teams(a=8, b=0)
    busy = [running("b1", "b", {"n000": 4}), running("b2", "b", {"n000": 4}, admitted=1)]
    pending = [workload("a1", "a", 4), workload("a2", "a", 4, submitted=1)]
    snap = snapshot(tree, quotas, nodes(1), pending, busy)
    first = run_cycle(snap)
    assert victims(first) == ["b1", "b2"]
    assert {p.preemptor_id for p in first.preemptions} == {"a1", "a2"}
    second = run_cycle(apply_result(snap, first))
    assert sorted(a.workload_id for a in second.admissions) == ["a1", "a2"]


def test_reclaim_spares_a_borrowers_own_guarantee_when_it_can():
    tree = tenants({"org": None, "a": "org", "b": "org", "c": "org"})
    quotas = (quota("a", 5), quota("b", 1), quota("c", 0))
    busy = [
        running("a-own", "a", {"n000": 2}),
        running("b-big", "b", {"n001": 2}, priority=1, admitted=1),
        running("b-small", "b", {"n002": 1}, admitted=2),
        running("c1", "c", {"n002": 1}, admitted=3),
    ]
    snap = snapshot(tree, quotas, nodes(3, gpus=2), [workload("a1", "a", 1, count=3)], busy)
    first = run_cycle(snap)
    # taking b-small and b-big would push b below its guarantee of 1, and b-small,
    # queued again, would then rightly claim it back before a1 gets in
    assert victims(first) == ["b-big", "c1"]
    second = run_cycle(apply_result(snap, first))
    assert [a.workload_id for a in second.admissions] == ["a1"]


def test_young_borrowed_work_is_reclaimed_only_after_its_minimum_run():
    """With reclaim_min_run_s, borrowed work gets its first 10 minutes; the owner is
    told when it can reclaim, and reclaims in the first cycle after that."""
    tree, quotas = two_teams(a=8, b=0)
    config = EngineConfig(reclaim_min_run_s=600)
    busy = [running("b-young", "b", {"n000": 8}, admitted=40.0)]
    owner = workload("a1", "a", 4, submitted=90.0)
    engine = AdmissionEngine(config)
    early = snapshot(tree, quotas, nodes(1), [owner], busy, now=100.0)
    result = engine.run_cycle(early)
    assert result == run_cycle(early, config)
    assert result.preemptions == () and result.admissions == ()
    assert result.pending[0].message.endswith(
        "borrowed work is not reclaimed in its first 10 min: the guarantee can be reclaimed "
        "in ~9 min"
    )
    later = snapshot(tree, quotas, nodes(1), [owner], busy, now=640.0)
    result = engine.run_cycle(later)  # a warm engine must not skip it as remembered
    assert result == run_cycle(later, config)
    assert victims(result) == ["b-young"]


def test_the_minimum_run_does_not_shield_work_already_being_stopped():
    tree, quotas = two_teams(a=8, b=0)
    config = EngineConfig(reclaim_min_run_s=600)
    busy = [running("b-young", "b", {"n000": 8}, admitted=40.0, evicting=True)]
    snap = snapshot(tree, quotas, nodes(1), [workload("a1", "a", 8)], busy, now=100.0)
    result = run_cycle(snap, config)
    assert result.pending[0].code is ReasonCode.PREEMPTING


def test_protected_young_work_is_the_borrowing_so_older_work_is_not_taken_instead():
    """b's borrowing is its newest work; while that is protected, b has nothing to give
    back, and when b borrows more, the unprotected surplus goes, never the young job."""
    tree, quotas = two_teams(a=4, b=4)
    config = EngineConfig(reclaim_min_run_s=600)
    old = running("old", "b", {"n000": 4}, admitted=-5000.0)
    young = running("young", "b", {"n000": 4}, admitted=40.0)
    ask = workload("own", "a", 4, submitted=90.0)
    result = run_cycle(snapshot(tree, quotas, nodes(1), [ask], [old, young], now=100.0), config)
    assert result.preemptions == ()
    assert (
        run_cycle(snapshot(tree, quotas, nodes(1), [ask], [old, young], now=100.0))
        .preemptions[0]
        .victim_id
        == "young"
    )  # without protection the newest goes
    older = running("older", "b", {"n000": 4}, admitted=-9000.0)
    old = running("old", "b", {"n001": 4}, admitted=-5000.0)
    young = running("young", "b", {"n002": 4}, admitted=40.0)
    org = (*quotas, quota("org", 12))  # room for b to borrow 8
    wide = snapshot(tree, org, nodes(3, gpus=4), [ask], [older, old, young], now=100.0)
    assert victims(run_cycle(wide, config)) == ["old"]


def test_work_that_cannot_be_preempted_runs_only_within_its_guarantee():
    """Otherwise what it borrowed could never be reclaimed."""
    tree, quotas = two_teams(a=8, b=4)
    big_prod = workload("prod", "b", 8, preemptible=False)
    big_batch = workload("batch", "b", 8, submitted=1.0)
    small_prod = workload("prod-small", "b", 4, preemptible=False, submitted=2.0)
    result = run_cycle(snapshot(tree, quotas, nodes(2), [big_prod, big_batch, small_prod]))
    assert sorted(a.workload_id for a in result.admissions) == ["batch", "prod-small"]
    waiting = {p.workload_id: p for p in result.pending}
    # more than b's whole guarantee: not in line until the guarantee grows
    assert (waiting["prod"].code, waiting["prod"].position) == (ReasonCode.NEVER_FITS, None)
    assert waiting["prod"].message == (
        "cannot be preempted, so it runs only within b's guarantee of H100: 4/4 held by "
        "work that cannot be preempted, needs 8; choose a preemptible priority class to borrow"
    )


def test_an_owner_reclaims_from_a_tenant_whose_unpreemptible_work_stays_home():
    tree, quotas = two_teams(a=8, b=4)
    busy = [
        running("b-prod", "b", {"n000": 4}, preemptible=False),
        running("b-batch", "b", {"n000": 4, "n001": 4}, admitted=10.0),
    ]
    owner = workload("a1", "a", 8, submitted=50.0)
    result = run_cycle(snapshot(tree, quotas, nodes(2), [owner], busy))
    assert victims(result) == ["b-batch"]


def test_unpreemptible_work_uses_the_guarantee_its_tenants_borrowing_work_sits_in():
    """b's preemptible work borrows; b's work that cannot be preempted still starts in
    b's guarantee (the borrowed part is then the preemptible work, still reclaimable),
    without preempting b's own work - which would start a loop (found by the property
    tests with priority preemption on)."""
    tree, quotas = two_teams(a=8, b=1)
    config = EngineConfig(priority_preemption=True)
    busy = [running("b-batch", "b", {"n000": 3}, priority=1)]
    urgent = workload("b-urgent", "b", 1, priority=2, preemptible=False)
    snap = snapshot(tree, quotas, nodes(2), [urgent], busy)
    result = run_cycle(snap, config)
    assert [a.workload_id for a in result.admissions] == ["b-urgent"]
    assert result.preemptions == ()
    owner = workload("a1", "a", 8, submitted=50.0)
    later = apply_result(snap, result)
    reclaim = run_cycle(replace(later, pending=(owner,)), config)
    assert victims(reclaim) == ["b-batch"]  # the owner gets its GPUs from b's batch work


def test_young_work_that_cannot_be_preempted_does_not_shield_older_borrowing():
    """Only preemptible work is protected by reclaim_min_run_s: b's fresh "prod" job sits
    inside b's guarantee and must not make b's old borrowing work untouchable."""
    tree, quotas = two_teams(a=8, b=4)
    config = EngineConfig(reclaim_min_run_s=3600)
    busy = [
        running("b-batch", "b", {"n000": 4}, admitted=0.0),
        running("b-prod", "b", {"n001": 4}, admitted=9990.0, preemptible=False),
        running("a-x", "a", {"n000": 2, "n001": 2}, admitted=0.0),
    ]
    owner = workload("a1", "a", 4, submitted=9995.0)
    full = snapshot(tree, quotas, nodes(2, gpus=6), [owner], busy, now=10000.0)
    assert victims(run_cycle(full, config)) == ["b-batch"]


def test_two_reclaimers_of_one_tenant_never_take_more_than_its_guarantee():
    """org 16 -> a (8), b (0); b borrows both nodes. a's two 8-GPU jobs each fit a's
    guarantee alone, not together: one reclaims, the other waits for it and says so, and
    b keeps the node a is not owed."""
    tree = tenants({"org": None, "a": "org", "b": "org"})
    quotas = (quota("org", 16), quota("a", 8), quota("b", 0))
    busy = [
        running("b1", "b", {"n000": 8}, admitted=1),
        running("b2", "b", {"n001": 8}, admitted=2),
    ]
    pending = [workload("a1", "a", 8, submitted=50), workload("a2", "a", 8, submitted=51)]
    snap = snapshot(tree, quotas, nodes(2), pending, busy)
    first = run_cycle(snap)
    check_cycle(snap, first)
    assert victims(first) == ["b2"]  # the most recently admitted of b's
    waiting = {d.workload_id: d for d in first.pending}
    assert waiting["a1"].code is ReasonCode.PREEMPTING
    assert waiting["a2"].code is ReasonCode.WAITING_RECLAIM
    assert waiting["a2"].message == (
        "waits for a1's reclaim: together they would pass a's guarantee of 8 H100 (it needs 8)"
    )
    second = run_cycle(apply_result(snap, first))
    assert [a.workload_id for a in second.admissions] == ["a1"]
    assert second.preemptions == ()


def test_a_reclaimer_finds_the_gpus_it_freed_when_it_returns_topology_included():
    """Owner a (guarantee 10); n0-n2 have 2 GPUs each in NVLink domain d0, n3 has 4 and
    no domain; b holds everything. W0 (1 x 2) and W1 (3 x 2 in one domain) fit a's
    guarantee together: cycle 1 preempts for both; in cycle 2 each starts where its
    preemption planned it (best fit alone would put W0 inside d0 and leave W1 waiting)."""
    tree = tenants({"org": None, "a": "org", "b": "org"})
    quotas = (quota("org", 10), quota("a", 10), quota("b", 0))
    domain = (Node("n0", {H100: 2}, None, "d0"), Node("n1", {H100: 2}, None, "d0"))
    cluster = (*domain, Node("n2", {H100: 2}, None, "d0"), Node("n3", {H100: 4}, None, None))
    busy = [
        running("b0", "b", {"n0": 2}, admitted=1),
        running("b1", "b", {"n1": 2}, admitted=2),
        running("b2", "b", {"n2": 2}, admitted=3),
        running("b3", "b", {"n3": 4}, admitted=4),
    ]
    pending = [
        workload("W0", "a", 2, submitted=10),
        workload("W1", "a", 2, count=3, submitted=11, topology=Topology.ONE_DOMAIN),
    ]
    snap = snapshot(tree, quotas, cluster, pending, busy)
    first = run_cycle(snap)
    check_cycle(snap, first)
    held = {d.workload_id: sorted(p.node for p in d.held) for d in first.pending}
    assert held == {"W0": ["n3"], "W1": ["n0", "n1", "n2"]}
    after = apply_result(snap, first)
    second = run_cycle(after)
    check_cycle(after, second)
    placed = {a.workload_id: sorted(p.node for p in a.placements) for a in second.admissions}
    assert placed == {"W0": ["n3"], "W1": ["n0", "n1", "n2"]}
    assert second.preemptions == ()


def test_a_victim_returning_through_its_reservation_never_displaces_its_preemptor():
    """Priority preemption and reservations on (a hypothesis find, shrunk): team a
    (guarantee 2, one 2-GPU node) runs the starving gang a-low; a-high, of higher
    priority and not preemptible, preempts it. Before, a-low's reservation then blocked
    the GPUs a-high had freed, a-low started again through it, a-high preempted it
    again, and so on every other cycle. Now a-high starts where it preempted."""
    two = (PodSet(1, 1, (H100,), "main"), PodSet(1, 1, (H100,), "launcher"))
    low = replace(workload("a-low", "a", submitted=63.0), pod_sets=two)
    high = replace(
        workload("a-high", "a", priority=1, submitted=64.0, gang=False, preemptible=False),
        pod_sets=two,
    )
    config = EngineConfig(priority_preemption=True, reservation_wait_s=60.0, reservation_min_gpus=2)
    snap = snapshot(tenants({"a": None}), (quota("a", 2),), nodes(1, gpus=2), [low, high])
    engine = AdmissionEngine(config)
    stopped: list[str] = []
    for cycle in range(8):
        snap = replace(snap, now=200.0 + cycle)
        result = engine.run_cycle(snap)
        check_cycle(snap, result)
        stopped += [p.victim_id for p in result.preemptions]
        snap = apply_result(snap, result)
    assert stopped == ["a-low"]
    assert [wl.id for wl in snap.running] == ["a-high"]


def test_a_tenant_borrows_nothing_of_a_flavour_while_it_reclaims_it():
    """org (no guarantee of its own) with a (guarantee 3), s (guarantee 2, idle) and a
    member team m. org's own job borrows 2, m's 1. a submits a-big (3) and a-small (1):
    a-big reclaims org's job. a-small could borrow what s leaves idle, but it waits for
    a-big's reclaim: had it started, next cycle it would count against a's guarantee
    first, a-big would look like borrowing and org's returning job, first by share,
    would borrow its quota back. Next cycle a-big starts on what it freed."""
    tree = tenants({"org": None, "m": "org", "a": "org", "s": "org"})
    quotas = (quota("org", 0), quota("a", 3), quota("s", 2))
    busy = [
        running("org-job", "org", {"n000": 2}, admitted=28),
        running("m-job", "m", {"n000": 1}, admitted=29),
    ]
    owned = [workload("a-big", "a", 3, submitted=99), workload("a-small", "a", 1, submitted=100)]
    snap = snapshot(tree, quotas, nodes(2, gpus=4), owned, busy, now=200)
    first = run_cycle(snap)
    check_cycle(snap, first)
    assert victims(first) == ["org-job"]
    assert first.admissions == ()
    small = next(d for d in first.pending if d.workload_id == "a-small")
    assert small.code is ReasonCode.WAITING_RECLAIM
    assert small.message == (
        "waits for a-big's reclaim: together they would pass a's guarantee of 3 H100 (it needs 1)"
    )
    after = apply_result(snap, first)
    second = run_cycle(replace(after, now=230))
    check_cycle(after, second)
    assert [a.workload_id for a in second.admissions][:1] == ["a-big"]


def test_work_that_would_borrow_waits_while_its_tenant_reclaims_the_flavour():
    """a (guarantee 4) runs 3 and reclaims 1 more for a-one; a-two (2) would borrow even
    on its own, from what s leaves idle: not while a reclaims H100."""
    tree = tenants({"org": None, "a": "org", "b": "org", "s": "org"})
    quotas = (quota("a", 4), quota("b", 0), quota("s", 4))
    busy = [
        running("a-run", "a", {"n000": 3}, admitted=1),
        running("b-job", "b", {"n000": 5}, admitted=2),
    ]
    owned = [workload("a-one", "a", 1, submitted=99), workload("a-two", "a", 2, submitted=100)]
    snap = snapshot(tree, quotas, nodes(1, gpus=8), owned, busy, now=200)
    first = run_cycle(snap)
    check_cycle(snap, first)
    assert victims(first) == ["b-job"] and first.admissions == ()
    two = next(d for d in first.pending if d.workload_id == "a-two")
    assert two.code is ReasonCode.WAITING_RECLAIM
    assert two.message == (
        "waits for a-one's reclaim: a borrows no H100 beyond its guarantee of 4 while it "
        "reclaims it (it needs 2)"
    )


def test_a_tenants_earlier_work_does_not_take_the_guarantee_its_reclaimers_freed():
    """c (guarantee 7) runs 2 GPUs; b borrows 6 on n1 and n2; the cohort is full. c
    submits c0 (3 on one node), c1 (4 x 1) and c2 (2 x 1): c0 and c2 reclaim b's jobs,
    c1 finds too little left and waits. Next cycle c1, submitted before c2, would take
    what c2 reclaimed and leave it waiting for good; the returning reclaimers go first
    among c's work, and c1 waits for room of its own."""
    tree = tenants({"org": None, "a": "org", "b": "org", "c": "org"})
    quotas = (quota("a", 3), quota("b", 0), quota("c", 7))
    busy = [
        running("a-fixed", "a", {"n000": 2}, preemptible=False),
        running("c-fixed", "c", {"n000": 2}, preemptible=False),
        running("b1", "b", {"n001": 3}, admitted=26),
        running("b2", "b", {"n002": 3}, admitted=28),
    ]
    owned = [
        workload("c0", "c", 3, submitted=99),
        workload("c1", "c", 1, count=4, submitted=100, gang=False),
        workload("c2", "c", 1, count=2, submitted=101, gang=False),
    ]
    snap = snapshot(tree, quotas, nodes(3, gpus=4), owned, busy, now=200)
    first = run_cycle(snap)
    check_cycle(snap, first)
    assert sorted(p.preemptor_id for p in first.preemptions) == ["c0", "c2"]
    assert sorted(p.victim_id for p in first.preemptions) == ["b1", "b2"]
    after = apply_result(snap, first)
    second = run_cycle(replace(after, now=230))
    check_cycle(after, second)
    admitted = {a.workload_id for a in second.admissions}
    assert {"c0", "c2"} <= admitted and "c1" not in admitted


def test_a_cycles_later_reclaimers_take_what_its_victims_free_before_stopping_more():
    """a (guarantee 8) is idle; b borrows a's 8 with two 4-GPU jobs. a1 needs 1 and stops
    the newer, b-y; a2 needs 1 too and takes one of the 3 GPUs b-y's stop frees beyond
    a1's need, instead of stopping b-x as well (a second job killed for GPUs the first
    frees anyway)."""
    tree, quotas = two_teams(a=8, b=8)
    busy = [
        running("b-own", "b", {"n000": 8}, admitted=1),
        running("b-x", "b", {"n001": 4}, admitted=2),
        running("b-y", "b", {"n001": 4}, admitted=3),
    ]
    owned = [workload("a1", "a", 1, submitted=50), workload("a2", "a", 1, submitted=51)]
    snap = snapshot(tree, quotas, nodes(2), owned, busy)
    first = run_cycle(snap)
    check_cycle(snap, first)
    assert [(p.victim_id, p.preemptor_id) for p in first.preemptions] == [("b-y", "a1")]
    waiting = {d.workload_id: d for d in first.pending}
    assert waiting["a2"].code is ReasonCode.PREEMPTING
    assert waiting["a2"].message == "waiting for preempted workloads of b to release H100"
    assert [(p.node, p.gpus) for p in waiting["a2"].held] == [("n001", 1)]
    after = apply_result(snap, first)
    second = run_cycle(replace(after, now=130))
    check_cycle(after, second)
    assert sorted(a.workload_id for a in second.admissions) == ["a1", "a2"]
    assert second.preemptions == ()
    assert "b-x" in {r.id for r in after.running}


def _cycles(snap, count: int = 3):
    """``count`` cycles, victims stopping and admissions starting between them:
    [(admitted ids, [(victim, preemptor)])] per cycle."""
    out = []
    for cycle in range(count):
        result = run_cycle(replace(snap, now=snap.now + 30 * cycle))
        check_cycle(snap, result)
        out.append(
            (
                sorted(a.workload_id for a in result.admissions),
                sorted((p.victim_id, p.preemptor_id) for p in result.preemptions),
            )
        )
        snap = apply_result(snap, result)
    return out


def test_a_reclaimer_whose_victims_fall_back_into_a_guarantee_nobody_may_borrow_still_starts():
    """v's guarantee of 4 is not lendable (lend limit 0); it runs 6, borrowing 2. o (owed
    4) reclaims 3 from v's newest job of 3: only 2 of those come back to the cohort, the
    third falls back into v's own guarantee. o is charged that GPU when it reclaims, so
    its own later job does not take the cohort's last GPU in the same cycle (it did, and
    the reclaimer waited for good). Both of o's jobs start once the victims stopped."""
    tree = tenants({"c": None, "o": "c", "v": "c", "w": "c"})
    quotas = (quota("o", 4), quota("v", 4, lend_limit=0), quota("w", 0))
    busy = [
        running("v1", "v", {"n000": 3}, admitted=1.0),
        running("v2", "v", {"n001": 3}, admitted=2.0),
        running("w1", "w", {"n002": 1}, admitted=3.0),
    ]
    pending = [workload("R", "o", 1, 3, submitted=99.0), workload("s1", "o", 1, submitted=100.0)]
    snap = snapshot(tree, quotas, nodes(3, gpus=3), pending, busy, now=200.0)
    first, second, third = _cycles(snap)
    assert first == ([], [("v2", "R"), ("w1", "s1")])
    assert second == (["R", "s1"], [])
    assert third == ([], [])


def _started_at_100(wid: str, tenant: str, node: str, gpus: int, submitted: float):
    """Running since 100 s, ``gpus`` pods of one GPU submitted at ``submitted``."""
    run = running(wid, tenant, {node: gpus}, admitted=100.0)
    return replace(run, request=workload(wid, tenant, 1, gpus, submitted=submitted))


def test_a_reclaimer_keeps_the_quota_its_victims_gave_back_when_they_stop():
    """a (owed 4) reclaims 3 GPUs, all from b, whose smaller job is inside b's guarantee
    of 1; c still borrows 1. When the victims have stopped, b's job inside its guarantee
    comes back too and would take the quota a reclaimed, leaving a to preempt again a
    cycle later. a's quota is held for it from the start of the cycle: a starts first,
    and b reclaims its own guarantee from c, the tenant that still borrows."""
    tree = tenants({"t0": None, "a": "t0", "b": "t0", "c": "t0"})
    quotas = (quota("a", 4), quota("b", 1), quota("c", 1))
    busy = [
        _started_at_100("b1", "b", "n000", 1, submitted=1.0),
        _started_at_100("c1", "c", "n001", 2, submitted=3.0),
        _started_at_100("b2", "b", "n002", 2, submitted=5.0),
    ]
    pending = [workload("A", "a", 1, 4, submitted=99.0)]  # four pods of one GPU
    snap = snapshot(tree, quotas, nodes(4, gpus=2), pending, busy, now=200.0)
    first, second, third = _cycles(snap)
    assert first == ([], [("b1", "A"), ("b2", "A")])
    assert second == (["A"], [("c1", "b1")])
    assert third == (["b1"], [])


def test_two_reclaimers_of_one_tenant_price_what_the_second_victim_really_gives_back():
    """o (owed 5) reclaims for A (2 GPUs) and B (3) in one cycle, both from v, whose
    guarantee of 1 is not lendable. A's victim takes v from 4 to 2; B's search must see
    v at 2, where stopping v's other job gives the cohort 1 GPU, not 2 (it saw v at 4,
    and B waited a cycle after its victims stopped, then preempted again). B takes the
    cohort's own borrower too, and both start as soon as their victims stopped."""
    tree = tenants({"c": None, "o": "c", "v": "c"})
    quotas = (quota("c", 0), quota("o", 5), quota("v", 1, lend_limit=0))
    busy = [
        _started_at_100("r1", "c", "n000", 1, submitted=0.0),
        _started_at_100("v1", "v", "n001", 2, submitted=4.0),
        _started_at_100("v2", "v", "n002", 2, submitted=6.0),
    ]
    pending = [workload("A", "o", 1, 2, submitted=99.0), workload("B", "o", 1, 3, submitted=100.0)]
    snap = snapshot(tree, quotas, nodes(3, gpus=2), pending, busy, now=200.0)
    first, second, third = _cycles(snap)
    assert first == ([], [("r1", "B"), ("v1", "A"), ("v2", "B")])
    assert second == (["A", "B"], [])
    assert third == ([], [])


def test_with_priority_preemption_an_owner_takes_its_own_lower_priority_work_and_what_it_lent():
    """A 20-GPU job of a (guarantee 20) while a runs 10 small ones of lower priority and
    b borrows a's other 10: stopping a's own small ones brings it inside its guarantee,
    and then it reclaims what b borrowed, as Kueue's reclaimWithinCohort together with
    withinClusterQueue: LowerPriority does. Before, it waited for GPUs to free."""
    tree, quotas = two_teams(a=20, b=20)
    busy = [running(f"a-small-{i}", "a", {"n000": 1}, priority=1) for i in range(10)]
    busy += [running(f"b-small-{i}", "b", {"n000": 1}, admitted=float(i)) for i in range(30)]
    large = workload("a-large", "a", 20, priority=9)
    snap = snapshot(tree, quotas, nodes(1, gpus=40), [large], busy)
    result = AdmissionEngine(EngineConfig(priority_preemption=True)).run_cycle(snap)
    check_cycle(snap, result)
    codes = {p.victim_id: p.code for p in result.preemptions}
    assert sorted(v for v, c in codes.items() if c is PreemptionCode.PRIORITY) == sorted(
        f"a-small-{i}" for i in range(10)
    )
    reclaimed = [v for v, c in codes.items() if c is PreemptionCode.RECLAIM]
    assert len(reclaimed) == 10 and all(v.startswith("b-small-") for v in reclaimed)
    # b keeps its own guarantee: only what it borrowed goes
    assert result.pending[0].code is ReasonCode.PREEMPTING


def test_with_priority_preemption_higher_priority_does_not_reclaim_while_its_tenant_borrows():
    """Without lower-priority work of its own to stop, work that would leave its tenant
    above its guarantee takes nothing from another tenant."""
    tree, quotas = two_teams(a=20, b=20)
    busy = [running(f"a-same-{i}", "a", {"n000": 1}, priority=9) for i in range(10)]
    busy += [running(f"b-small-{i}", "b", {"n000": 1}) for i in range(30)]
    snap = snapshot(
        tree, quotas, nodes(1, gpus=40), [workload("a-large", "a", 20, priority=9)], busy
    )
    result = AdmissionEngine(EngineConfig(priority_preemption=True)).run_cycle(snap)
    assert result.preemptions == ()
