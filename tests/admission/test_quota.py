"""Borrowing and lending within the cohort tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler_bridge.admission import AdmissionEngine, AdmitCode, ReasonCode, run_cycle

from .factories import nodes, quota, running, snapshot, tenants, two_teams, workload
from .invariants import check_cycle


def admitted_ids(result):
    return [a.workload_id for a in result.admissions]


def reason_of(result, wid):
    return next(p for p in result.pending if p.workload_id == wid)


def test_team_uses_its_own_guarantee_without_borrowing():
    tree, quotas = two_teams(a=8, b=8)
    snap = snapshot(tree, quotas, nodes(2), [workload("a1", "a", 8)])
    result = run_cycle(snap)
    assert result.admissions[0].code is AdmitCode.WITHIN_GUARANTEE
    assert result.admissions[0].borrowed == {}


def test_team_borrows_idle_guarantee_of_its_sibling_within_its_borrow_limit():
    tree, quotas = two_teams(a=8, b=8, a_limit=4)
    pending = [workload(f"a{i}", "a", 4, submitted=i) for i in range(4)]
    result = run_cycle(snapshot(tree, quotas, nodes(2), pending))
    assert admitted_ids(result) == ["a0", "a1", "a2"]
    assert result.admissions[2].borrowed == {"H100": 4}
    assert result.admissions[2].code is AdmitCode.BORROWING
    why = reason_of(result, "a3")
    assert why.code is ReasonCode.QUOTA_LIMIT
    assert why.message.startswith("quota of H100 used 12/12 (guaranteed 8, borrowing limit 4)")
    check_cycle(snapshot(tree, quotas, nodes(2), pending), result)


def test_borrowing_limit_zero_reads_like_the_design_example():
    tree, quotas = two_teams(a=8, b=8, a_limit=0)
    pending = [workload("a1", "a", 8), workload("a2", "a", 4, submitted=1)]
    result = run_cycle(snapshot(tree, quotas, nodes(2), pending))
    assert reason_of(result, "a2").message.startswith(
        "quota of H100 used 8/8 (guaranteed 8, borrowing limit 0)"
    )


def test_lend_limit_caps_what_others_may_borrow():
    tree, quotas = two_teams(a=8, b=8, b_lend=2)
    pending = [workload(f"a{i}", "a", 2, submitted=i) for i in range(8)]
    snap = snapshot(tree, quotas, nodes(2), pending)
    result = run_cycle(snap)
    assert len(result.admissions) == 5  # 8 own + 2 lendable of b
    check_cycle(snap, result)
    assert reason_of(result, "a5").code is ReasonCode.COHORT_EXHAUSTED


def test_lender_keeps_its_private_part_while_its_lendable_part_is_borrowed():
    tree, quotas = two_teams(a=8, b=8, b_lend=2)
    busy = [running("a-big", "a", {"n000": 8, "n001": 2})]
    snap = snapshot(tree, quotas, nodes(2), [workload("b1", "b", 6)], busy)
    result = run_cycle(snap)
    assert admitted_ids(result) == ["b1"]


def test_cohort_with_nothing_to_lend_says_so():
    tree, quotas = two_teams(a=8, b=8)
    busy = [running("b-all", "b", {"n001": 8}), running("a-all", "a", {"n000": 8})]
    snap = snapshot(tree, quotas, nodes(3), [workload("a1", "a", 4)], busy)
    why = reason_of(run_cycle(snap), "a1")
    assert why.code is ReasonCode.COHORT_EXHAUSTED
    assert why.message.startswith("cohort org has nothing to lend for H100")


def test_parent_pool_is_shared_by_its_children():
    tree = tenants({"org": None, "dept": "org", "a": "dept", "b": "dept"})
    quotas = (quota("dept", 16), quota("a", 4, 0), quota("b", 4))
    pending = [workload("b1", "b", 4, count=3)]
    result = run_cycle(snapshot(tree, quotas, nodes(2), pending))
    # b: its own 4, the dept pool of 8, nothing of a beyond... a's 4 are lendable too
    assert admitted_ids(result) == ["b1"]
    assert result.admissions[0].borrowed == {"H100": 8}


def test_children_without_own_quota_share_the_parent_pool():
    tree = tenants({"dept": None, "a": "dept", "b": "dept"})
    quotas = (quota("dept", 8),)
    pending = [workload("a1", "a", 6), workload("b1", "b", 4, submitted=1)]
    result = run_cycle(snapshot(tree, quotas, nodes(2), pending))
    assert admitted_ids(result) == ["a1"]
    assert reason_of(result, "b1").code is ReasonCode.COHORT_EXHAUSTED


def test_tenant_without_any_quota_on_its_path_may_not_use_the_flavour():
    tree = tenants({"org": None, "a": "org", "other": None})
    quotas = (quota("a", 8),)
    result = run_cycle(snapshot(tree, quotas, nodes(2), [workload("x", "other", 1)]))
    why = reason_of(result, "x")
    assert why.code is ReasonCode.NO_QUOTA


def test_trees_never_lend_to_each_other():
    tree = tenants({"org1": None, "a": "org1", "org2": None, "b": "org2"})
    quotas = (quota("a", 8), quota("b", 8))
    pending = [workload("a1", "a", 8), workload("a2", "a", 8, submitted=1)]
    result = run_cycle(snapshot(tree, quotas, nodes(4), pending))
    assert admitted_ids(result) == ["a1"]


def test_inner_cohort_borrow_limit_binds_its_whole_subtree():
    tree = tenants({"org": None, "d1": "org", "a": "d1", "d2": "org", "c": "d2"})
    quotas = (quota("d1", 8, borrow_limit=2), quota("a", 8), quota("d2", 8), quota("c", 8))
    pending = [workload("a1", "a", 8), workload("a2", "a", 4, submitted=1)]
    result = run_cycle(snapshot(tree, quotas, nodes(4), pending))
    assert admitted_ids(result) == ["a1"]
    why = reason_of(result, "a2")
    assert why.code is ReasonCode.COHORT_LIMIT
    assert "cohort d1 is at its borrowing limit" in why.message


def test_deep_tree_borrows_from_nearest_level_up_to_the_root():
    tree = tenants({"org": None, "d1": "org", "t1": "d1", "t2": "d1", "d2": "org", "t3": "d2"})
    quotas = (quota("t1", 2), quota("t2", 2), quota("t3", 4), quota("org", 10))
    pending = [workload("big", "t1", 2, count=5)]
    snap = snapshot(tree, quotas, nodes(2), pending)
    result = run_cycle(snap)
    assert admitted_ids(result) == ["big"]
    check_cycle(snap, result)


def test_workload_larger_than_quota_could_ever_allow_is_marked_never_fits():
    tree, quotas = two_teams(a=8, b=8, a_limit=4)
    result = run_cycle(snapshot(tree, quotas, nodes(4), [workload("a1", "a", 8, count=2)]))
    why = reason_of(result, "a1")
    assert why.code is ReasonCode.NEVER_FITS
    assert "at most 12" in why.message


def test_parent_tenant_may_run_its_own_workloads_from_its_pool():
    tree = tenants({"dept": None, "a": "dept"})
    quotas = (quota("dept", 12), quota("a", 8))
    result = run_cycle(snapshot(tree, quotas, nodes(2), [workload("d1", "dept", 4)]))
    assert result.admissions[0].code is AdmitCode.WITHIN_GUARANTEE


def test_unknown_tenants_and_flavours_are_named_not_dropped():
    tree, quotas = two_teams()
    pending = [workload("x1", "nobody", 1), workload("x2", "a", 1, flavour="B200")]
    result = run_cycle(snapshot(tree, quotas, nodes(1), pending))
    codes = {p.workload_id: (p.code, p.message) for p in result.pending}
    assert codes["x1"] == (ReasonCode.UNKNOWN_TENANT, "tenant nobody is not known to this cluster")
    assert codes["x2"] == (ReasonCode.UNKNOWN_FLAVOUR, "no such flavour on this cluster: B200")


def test_inconsistent_input_is_refused_with_a_reason():
    tree, quotas = two_teams()
    twice = [workload("same", "a", 1), workload("same", "b", 1)]
    with pytest.raises(ValueError, match="duplicate pending workload id same"):
        run_cycle(snapshot(tree, quotas, nodes(1), twice))
    orphan = tenants({"a": "ghost"})
    with pytest.raises(ValueError, match="unknown parent ghost"):
        run_cycle(snapshot(orphan, quotas, nodes(1)))


def test_borrowing_is_the_newest_work_above_the_guarantee_after_each_cycle():
    from scheduler_bridge.admission import AdmissionEngine

    tree, quotas = two_teams(a=8, b=2)
    older = running("older", "b", {"n000": 2}, admitted=0.0)
    newer = running("newer", "b", {"n000": 4}, admitted=10.0)
    engine = AdmissionEngine()
    both = snapshot(tree, quotas, nodes(1), [], [older, newer])
    assert engine.borrowing_after(both, engine.run_cycle(both)) == {"newer": {"H100": 4}}
    alone = snapshot(tree, quotas, nodes(1), [], [newer])
    assert engine.borrowing_after(alone, engine.run_cycle(alone)) == {"newer": {"H100": 2}}
    joined = snapshot(tree, quotas, nodes(1), [workload("late", "b", 2)], [newer])
    result = engine.run_cycle(joined)
    assert [a.workload_id for a in result.admissions] == ["late"]
    assert engine.borrowing_after(joined, result) == {"newer": {"H100": 2}, "late": {"H100": 2}}


def test_tenants_that_stand_alike_are_told_alike_and_the_others_their_own():
    """A reason is worked out once for the groups whose tenants stand alike (the same
    quota settings and tree, the same reading of the usage); each tenant still reads its
    own figures, its own cohort and its own limits, cycle after cycle."""
    teams = ("team-a", "team-b", "team-c", "team-d", "team-e", "team-y", "team-z", "team-w")
    tree = tenants(
        {"org": None, "x": None} | {t: "org" for t in teams[:5]} | {t: "x" for t in teams[5:]}
    )
    quotas = (
        *(quota(t, 4) for t in ("team-a", "team-b", "team-e")),  # alike
        quota("team-c", 4, lend_limit=0),  # lends nothing: may borrow more than they
        quota("team-d", 4, borrow_limit=0),  # may not borrow at all
        *(quota(t, 4) for t in teams[5:]),  # alike to a, b and e, in a tree of their own
    )
    busy = [running(f"{t}-run", t, {f"n{i:03d}": 4}) for i, t in enumerate(teams)]
    waiting = ("team-a", "team-b", "team-c", "team-d", "team-e", "team-y")
    pending = [workload(f"{t}-1", t, 4) for t in waiting]
    # more than team-a or team-b could ever hold: a reason that names its tenant is its own
    pending += [workload(f"{t}-huge", t, 4, count=5, submitted=1) for t in ("team-a", "team-b")]
    engine = AdmissionEngine()
    snap = snapshot(tree, quotas, nodes(len(teams), gpus=4), pending, busy)
    result = engine.run_cycle(snap)
    assert result.admissions == ()
    why = {t: reason_of(result, f"{t}-1") for t in waiting}
    alike = (
        "cohort org has nothing to lend for H100 (its tenant's 4 guaranteed are in use; needs 4)"
    )
    for t in ("team-a", "team-b", "team-c", "team-e"):
        assert (why[t].code, why[t].message) == (ReasonCode.COHORT_EXHAUSTED, alike)
    assert why["team-d"].code is ReasonCode.QUOTA_LIMIT
    assert why["team-d"].message.startswith(
        "quota of H100 used 4/4 (guaranteed 4, borrowing limit 0)"
    )
    assert why["team-y"].message == alike.replace("cohort org", "cohort x")
    for t in ("team-a", "team-b"):
        huge = reason_of(result, f"{t}-huge")
        assert (huge.code, huge.position) == (ReasonCode.NEVER_FITS, None)
        assert f"quota lets {t} hold at most 16 " in huge.message
    check_cycle(snap, result)
    # next cycle half of team-b's running work has ended (too little for anyone to
    # start): the reasons it shared must now follow its own usage, and the cohort's
    engine_half = snapshot(
        tree,
        quotas,
        nodes(len(teams), gpus=4),
        pending,
        [r for r in busy if r.tenant_id != "team-b"]
        + [running("team-b-run", "team-b", {"n001": 2})],
    )
    again = engine.run_cycle(engine_half)
    assert again.admissions == ()
    assert reason_of(again, "team-b-1").message == (
        "cohort org can lend only 0 H100 (its tenant has 2 guaranteed unused); needs 4"
    )
    assert reason_of(again, "team-a-1").message == (
        "cohort org can lend only 2 H100 (its tenant has 0 guaranteed unused); needs 4"
    )
    fresh = AdmissionEngine().run_cycle(engine_half)  # a warm engine decides as a fresh one
    assert [(d.workload_id, d.position, d.code, d.message) for d in again.pending] == [
        (d.workload_id, d.position, d.code, d.message) for d in fresh.pending
    ]


def test_borrowers_are_told_alike_whatever_each_borrows_but_a_borrowing_limit_reads_its_own():
    """Without a borrowing limit a tenant's reason reads its usage only as the guarantee
    it leaves unused: tenants that borrow different amounts are told alike, in every
    cycle. With a borrowing limit how much the tenant holds decides whether its own
    limit or the cohort stops it, and the reason follows it when that changes. (That
    the engine works such a reason out once for all who share it, and keeps it while
    they borrow more or less, shows in its time, not in its decisions: the warm engine
    is checked against a fresh one.)"""
    teams = ("team-a", "team-b", "team-c", "team-d")
    tree = tenants({"org": None} | {t: "org" for t in teams})
    quotas = (
        quota("team-a", 4),
        quota("team-b", 4),
        quota("team-c", 4, borrow_limit=4),
        quota("team-d", 4),  # idle: its guarantee is lent
    )
    pending = [workload("team-a-1", "team-a", 4), workload("team-b-1", "team-b", 4)]
    pending.append(workload("team-c-1", "team-c", 2))

    def holding(a: int, b: int, c: int):
        busy = [
            running(f"{t}-run", t, {f"n00{i}": 4} | ({"n003": held - 4} if held > 4 else {}))
            for i, (t, held) in enumerate(zip(teams[:3], (a, b, c), strict=True))
        ]
        return snapshot(tree, quotas, nodes(4, gpus=4), pending, busy)

    nothing = "cohort org has nothing to lend for H100 (its tenant's 4 guaranteed are in use; "
    engine = AdmissionEngine()
    first = engine.run_cycle(holding(6, 5, 5))
    assert first.admissions == ()
    assert reason_of(first, "team-a-1").message == nothing + "needs 4)"
    assert reason_of(first, "team-b-1").message == nothing + "needs 4)"
    assert reason_of(first, "team-c-1").message == nothing + "needs 2)"
    # next cycle team-a holds its guarantee alone, team-c up to 7 of the 8 it may hold
    again = holding(4, 5, 7)
    warm = engine.run_cycle(again)
    assert reason_of(warm, "team-a-1").message == nothing + "needs 4)"
    assert reason_of(warm, "team-b-1").message == nothing + "needs 4)"
    assert reason_of(warm, "team-c-1").code is ReasonCode.QUOTA_LIMIT
    assert reason_of(warm, "team-c-1").message.startswith("quota of H100 used 7/8 ")
    fresh = AdmissionEngine().run_cycle(again)
    assert [(d.workload_id, d.position, d.code, d.message) for d in warm.pending] == [
        (d.workload_id, d.position, d.code, d.message) for d in fresh.pending
    ]
    check_cycle(again, warm)


def test_every_reason_puts_its_values_into_its_text_whole():
    # explain._names decides whether a reason names its tenant (and so may not be shared
    # with a tenant standing alike) by looking for the name in the text first: every
    # template must put a value in as %(name)s, whole; only numbers are formatted
    source = (Path(__file__).parents[2] / "scheduler_bridge/admission/reasons.py").read_text()
    conversions = re.findall(r"%\((\w+)\)([^s])", source)
    assert conversions, "the reasons are worded from templates with named values"
    assert {name for name, _ in conversions} <= {"seconds", "minutes", "hours", "days"}
