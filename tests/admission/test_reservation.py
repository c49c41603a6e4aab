"""Reservations for starving gangs and backfill around them."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from scheduler_bridge.admission import (
    AdmissionEngine,
    AdmitCode,
    EngineConfig,
    Flavour,
    ReasonCode,
    run_cycle,
)
from scheduler_bridge.admission.simulator import apply_result

from .factories import H100, nodes, quota, running, snapshot, tenants, workload
from .invariants import check_cycle

TREE = tenants({"org": None, "a": "org", "b": "org"})
QUOTAS = (quota("a", 16), quota("b", 16))
CONFIG = EngineConfig(reservation_wait_s=600, reservation_min_gpus=8)
NOW = 10_000.0


def cluster(pending, busy):
    return snapshot(TREE, QUOTAS, nodes(2), pending, busy, now=NOW)


def small_stream(max_run=None):
    return [workload(f"s{i}", "b", 1, submitted=NOW - 10 + i, max_run=max_run) for i in range(8)]


def busy_nodes():
    # half of each node frees in 10 minutes, the other half in 2 hours
    return [
        running("r0", "b", {"n000": 4}, admitted=NOW - 50, max_run=650),
        running("r1", "b", {"n001": 4}, admitted=NOW - 50, max_run=7250),
    ]


def test_a_young_gang_gets_no_reservation_and_small_jobs_fill_the_gaps():
    gang = workload("gang", "a", 8, submitted=NOW - 60)
    result = AdmissionEngine(CONFIG).run_cycle(cluster([gang, *small_stream()], busy_nodes()))
    assert result.reservations == ()
    assert len(result.admissions) == 8


def test_starving_gang_reserves_the_node_that_frees_first():
    gang = workload("gang", "a", 8, submitted=NOW - 3600)
    result = AdmissionEngine(CONFIG).run_cycle(cluster([gang, *small_stream()], busy_nodes()))
    (reservation,) = result.reservations
    assert reservation.workload_id == "gang"
    assert [(p.node, p.gpus) for p in reservation.placements] == [("n000", 8)]
    assert [(p.node, p.gpus) for p in reservation.blocked] == [("n000", 4)]
    assert reservation.expected_start == NOW + 600
    # small jobs without a declared run time only get the other node
    assert len(result.admissions) == 4
    assert {p.node for a in result.admissions for p in a.placements} == {"n001"}
    reasons = {p.workload_id: p for p in result.pending}
    assert reasons["gang"].code is ReasonCode.RESERVATION_HELD
    assert reasons["s7"].code is ReasonCode.RESERVED
    assert reasons["s7"].message.startswith("reserved for job gang (expected start in ~10 min)")


def test_backfill_uses_reserved_gpus_only_for_work_that_ends_before_the_reservation():
    gang = workload("gang", "a", 8, submitted=NOW - 3600)
    short = [workload(f"short{i}", "b", 1, submitted=NOW - 5, max_run=300) for i in range(2)]
    long = [workload(f"long{i}", "b", 1, submitted=NOW - 6, max_run=3000) for i in range(6)]
    busy = [
        running("r0", "b", {"n000": 4}, admitted=NOW - 50, max_run=650),
        running("r1", "b", {"n001": 8}, admitted=NOW - 50, max_run=7250),
    ]
    result = AdmissionEngine(CONFIG).run_cycle(cluster([gang, *short, *long], busy))
    codes = {a.workload_id: a.code for a in result.admissions}
    assert codes["short0"] is AdmitCode.BACKFILL and codes["short1"] is AdmitCode.BACKFILL
    assert set(codes) == {"short0", "short1"}
    (reservation,) = result.reservations
    assert sum(p.gpus for p in reservation.blocked) == 2
    long_reason = next(p for p in result.pending if p.workload_id == "long0")
    assert long_reason.code is ReasonCode.RESERVED


def test_reservation_owner_starts_on_its_gpus_once_they_are_free():
    gang = workload("gang", "a", 8, submitted=NOW - 3600)
    busy = [running("r1", "b", {"n001": 4}, admitted=NOW - 50, max_run=7250)]
    result = AdmissionEngine(CONFIG).run_cycle(cluster([gang, *small_stream()], busy))
    first = result.admissions[0]
    assert first.workload_id == "gang"
    assert "reserved for it" in first.message
    assert result.reservations == ()


def test_reservations_are_off_for_gangs_below_the_size_threshold():
    gang = workload("gang", "a", 4, count=1, submitted=NOW - 3600)
    config = EngineConfig(reservation_wait_s=600, reservation_min_gpus=16)
    result = AdmissionEngine(config).run_cycle(
        cluster([gang], busy_nodes() + [running("r2", "b", {"n000": 2, "n001": 2}, admitted=NOW)])
    )
    assert result.reservations == ()


def test_a_gang_that_does_not_fit_quota_gets_no_reservation():
    gang = workload("gang", "a", 8, count=3, submitted=NOW - 3600)
    result = run_cycle(cluster([gang], busy_nodes()), CONFIG)
    assert result.reservations == ()


def test_a_reservation_for_a_borrowing_gang_does_not_block_an_owners_guarantee():
    """Otherwise the starving borrower would hold, cycle after cycle, GPUs the owner
    keeps reclaiming: a preemption loop (found by the property tests)."""
    tree = tenants({"org": None, "a": "org", "c": "org"})
    quotas = (quota("a", 8), quota("c", 0))
    busy = [running("c-run", "c", {"n000": 4}, admitted=NOW - 50, max_run=650)]
    gang = workload("c-gang", "c", 1, count=8, submitted=NOW - 3600)
    owner = workload("a-own", "a", 4, submitted=NOW - 5)
    snap = snapshot(tree, quotas, nodes(1), [gang, owner], busy, now=NOW)
    result = AdmissionEngine(CONFIG).run_cycle(snap)
    assert [a.workload_id for a in result.admissions] == ["a-own"]


def test_gpus_held_for_a_gang_that_starts_elsewhere_are_free_again_next_cycle():
    """The gang holds H100s but starts on A100s once they free up. The H100s it held go
    back to the pool for the next cycle, not during this one (capacity only shrinks
    within a cycle), and the workload that needs them is told so. A warm engine, which
    remembers last cycle's failures, decides the same (found by the property tests)."""
    A100 = "A100"
    tree = tenants({"t0": None, "t1": None})
    quotas = (quota("t0", 3), quota("t1", 4), quota("t1", 4, flavour=A100))
    node_list = (*nodes(1, gpus=4), *nodes(1, gpus=4, flavour=A100, prefix="a"))
    flavours = (Flavour(H100), Flavour(A100, 0.5))
    config = EngineConfig(reservation_wait_s=60, reservation_min_gpus=1)
    gang = workload("gang", "t1", 2, count=2, flavour=(H100, A100), submitted=31.0)
    small = workload("small", "t0", 2, gang=False, submitted=0.0)
    own_run = running("t0-run", "t0", {"n000": 1}, admitted=90.0)
    a100_run = running("t1-a100", "t1", {"a000": 2}, flavour=A100, admitted=0.0, max_run=100)
    warm = AdmissionEngine(config)

    def cycle(now, pending, busy):
        snap = snapshot(tree, quotas, node_list, pending, busy, flavours, now=now)
        result = warm.run_cycle(snap)
        assert result == replace(run_cycle(snap, config), stats=result.stats)
        return snap, result

    # the A100s are busy: the gang holds the three free H100s, "small" waits for them
    _, held = cycle(120.0, [gang, small], [own_run, a100_run])
    assert held.admissions == ()
    assert [r.workload_id for r in held.reservations] == ["gang"]
    assert {p.workload_id: p.code for p in held.pending}["small"] is ReasonCode.RESERVED
    # the A100s free up: the gang starts there and gives its H100s back
    snap, started = cycle(150.0, [gang, small], [own_run])
    assert [(a.workload_id, a.flavours) for a in started.admissions] == [("gang", (A100,))]
    waiting = {p.workload_id: p.message for p in started.pending}
    assert waiting["small"] == (
        "fits on GPUs held for a job that started this cycle; they are free again in the "
        "next cycle, which will try it"
    )
    _, after = cycle(180.0, [small], apply_result(snap, started).running)
    assert [a.workload_id for a in after.admissions] == ["small"]


def test_a_reservation_holder_that_fails_does_not_take_down_backfill_of_its_shape():
    """A holds GPUs on n002 and cannot start; C, same tenant and shape, declares 30 s and
    backfills on GPUs held for B and A, which it would finish before."""
    tree = tenants({"a": None, "b": None, "c": None})
    quotas = (quota("a", 24), quota("b", 24), quota("c", 24))
    busy = [
        running("x", "c", {"n000": 8}, admitted=NOW - 10, max_run=5010),
        running("y", "c", {"n001": 4}, admitted=NOW - 10, max_run=2010),
        running("z", "c", {"n002": 4}, admitted=NOW - 10, max_run=3010),
    ]
    holder_b = workload("B", "b", 8, submitted=NOW - 3600, priority=1)
    holder_a = workload("A", "a", 4, count=2, submitted=NOW - 3000)
    short = workload("C", "a", 4, count=2, submitted=NOW - 10, max_run=30)
    snap = snapshot(tree, quotas, nodes(3), [holder_b, holder_a, short], busy, now=NOW)
    result = run_cycle(snap, CONFIG)
    assert [(a.workload_id, a.code) for a in result.admissions] == [("C", AdmitCode.BACKFILL)]
    assert sorted(r.workload_id for r in result.reservations) == ["A", "B"]


def test_no_preemption_for_gpus_reserved_for_someone_elses_gang():
    """a's 2 x 8 gang holds a reservation on n000 and n001 (a-long on n000 ends at 7200);
    b-short backfills 4 GPUs of n001. a-small, inside a's guarantee, must not preempt
    b-short: the GPUs it would free are the gang's, a-small could not use them, and
    b-short would come back through backfill and be preempted again, every other cycle."""
    tree = tenants({"org": None, "a": "org", "b": "org"})
    quotas = (quota("org", 32), quota("a", 32), quota("b", 0))
    busy = [
        running("a-long", "a", {"n000": 8}, admitted=0, max_run=7200),
        running("b-short", "b", {"n001": 4}, admitted=3990, max_run=600),
    ]
    pending = [
        workload("gang", "a", 8, count=2, submitted=0),
        workload("a-small", "a", 4, submitted=3995),
    ]
    snap = snapshot(tree, quotas, nodes(2), pending, busy, now=4000)
    result = run_cycle(snap)
    check_cycle(snap, result)
    assert result.preemptions == ()
    why = {d.workload_id: d for d in result.pending}
    assert why["gang"].code is ReasonCode.RESERVATION_HELD
    assert why["a-small"].code is ReasonCode.RESERVED
    assert why["a-small"].message.startswith("reserved for job gang")


def test_no_reservations_when_max_reservations_is_zero():
    """0 turns reservations off: the starving gang waits and the small jobs take both
    nodes' free GPUs, as they would before it starved."""
    gang = workload("gang", "a", 8, submitted=NOW - 3600)
    config = replace(CONFIG, max_reservations=0)
    result = AdmissionEngine(config).run_cycle(cluster([gang, *small_stream()], busy_nodes()))
    assert result.reservations == ()
    assert len(result.admissions) == 8
    assert {p.node for a in result.admissions for p in a.placements} == {"n000", "n001"}


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("max_reservations", -1, "max_reservations must not be negative (0 reserves nothing)"),
        ("reservation_min_gpus", -8, "reservation_min_gpus must not be negative"),
        ("reservation_wait_s", -60.0, "reservation_wait_s must be 0 or more seconds, got -60.0"),
        ("reclaim_wait_s", math.nan, "reclaim_wait_s must be 0 or more seconds, got nan"),
        ("reclaim_min_run_s", -1.0, "reclaim_min_run_s must be 0 or more seconds, got -1.0"),
        ("assumed_run_time_s", 0.0, "assumed_run_time_s must be more than 0 seconds, got 0.0"),
        ("assumed_run_time_s", math.nan, "assumed_run_time_s must be more than 0 seconds"),
    ],
)
def test_engine_settings_out_of_range_are_refused_with_their_name(field, value, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        EngineConfig(**{field: value})
