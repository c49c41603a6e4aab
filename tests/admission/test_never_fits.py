"""Work no node layout could ever hold has no place in line, whatever its quota says."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduler_bridge.admission import (
    AdmissionEngine,
    ClusterSnapshot,
    CycleResult,
    Flavour,
    PendingWorkload,
    PodSet,
    ReasonCode,
    run_cycle,
)
from scheduler_bridge.admission.simulator import Simulator

from .factories import nodes, quota, running, snapshot, tenants, two_teams, workload
from .invariants import IdleWorld, check_cycle, never_runs_violations
from .strategies import THREE_FLAVOURS, configs, job_lists, worlds
from .test_properties import PROFILE


def test_a_job_larger_than_any_node_layout_has_no_position_even_when_its_quota_is_short():
    """1 x 16 GPUs on 8-GPU nodes: never fits, with its quota short or not."""
    tree, quotas = two_teams(a=8, b=8)
    too_big = workload("big", "a", 16, submitted=1)
    busy = [running("a-own", "a", {"n000": 8})]  # a's quota is used up
    for running_list in ([], busy):
        result = run_cycle(snapshot(tree, quotas, nodes(2), [too_big], running_list))
        [decision] = result.pending
        assert decision.code is ReasonCode.NEVER_FITS, decision
        assert decision.position is None
        assert decision.message == "needs 1 pod x 16 H100; the largest node has 8"


def test_a_job_that_never_fits_is_listed_after_the_line_without_a_quota_row_too():
    tree = tenants({"org": None, "a": "org", "b": "org"})
    quotas = (quota("org", 16), quota("b", 8))  # a has no row of its own
    pending = [workload("big", "a", 16, submitted=1), workload("small", "b", 8, submitted=2)]
    busy = [running("b-own", "b", {"n000": 8}), running("b-two", "b", {"n001": 8})]
    result = run_cycle(snapshot(tree, quotas, nodes(2), pending, busy))
    by_id = {d.workload_id: d for d in result.pending}
    assert by_id["big"].code is ReasonCode.NEVER_FITS and by_id["big"].position is None
    assert by_id["small"].position == 1
    assert [d.workload_id for d in result.pending] == ["small", "big"]


def test_two_pod_sets_that_no_flavour_choice_fits_the_tenants_tree_have_no_position():
    """4 x 4 GPUs on H100, MIG or A100 beside 8 x 2 on MIG or A100, in a tenant that can
    hold at most 8 MIG and 9 A100: every choice needs 16 of one of them. H100 being
    short right now must not give it a place in line (it did: cohort_exhausted)."""
    tree = tenants({"org": None, "a": "org", "b": "org"})
    quotas = (
        quota("a", 16),
        quota("b", 16),
        quota("a", 8, 0, flavour="MIG"),
        quota("a", 9, 0, flavour="A100"),
    )
    flavours = (Flavour("H100"), Flavour("MIG", 1 / 7), Flavour("A100", 0.5))
    node_list = (
        *nodes(4),
        *nodes(4, flavour="MIG", prefix="m"),
        *nodes(4, flavour="A100", prefix="x"),
    )
    busy = [running(f"b{i}", "b", {f"n00{i}": 8}) for i in range(4)]  # H100 all lent out
    mixed = PendingWorkload(
        id="mixed",
        tenant_id="a",
        pod_sets=(
            PodSet(4, 4, ("H100", "MIG", "A100"), "workers"),
            PodSet(8, 2, ("MIG", "A100"), "helpers"),
        ),
        submitted_at=1.0,
    )
    small = workload("small", "a", 1, flavour="A100", submitted=2.0)
    result = run_cycle(snapshot(tree, quotas, node_list, [mixed, small], busy, flavours=flavours))
    by_id = {d.workload_id: d for d in result.pending}
    assert by_id["mixed"].code is ReasonCode.NEVER_FITS, by_id["mixed"]
    assert by_id["mixed"].position is None
    # the message names the flavour that can never be had, not the passing shortage
    assert "MIG" in by_id["mixed"].message and "A100" in by_id["mixed"].message
    assert "small" in {a.workload_id for a in result.admissions}


@PROFILE
@given(data=st.data(), config=configs)
def test_work_has_a_place_in_line_exactly_when_its_idle_world_would_run_it(data, config):
    """Random trees with lend and borrow limits, three flavours of different weights and
    workloads of two or three pod sets with flavour alternatives: through a whole
    simulation, every pending workload with a position could run once its world is
    idle, and every workload without one could not."""
    world = data.draw(worlds(flavour_choices=THREE_FLAVOURS))
    jobs = data.draw(job_lists(world, max_jobs=12, multi_pod_sets=True))
    idle = IdleWorld()
    cycles = [0]

    def check(snapshot: ClusterSnapshot, result: CycleResult) -> None:
        cycles[0] += 1
        assert cycles[0] < 20 * (len(jobs) + 5), "the simulation does not settle"
        check_cycle(snapshot, result)
        problems = never_runs_violations(snapshot, result, idle)
        assert not problems, problems

    Simulator(
        tenants=world.tenants,
        flavours=world.flavours,
        quotas=world.quotas,
        nodes=world.nodes,
        jobs=jobs,
        engine=AdmissionEngine(config),
        cycle_interval_s=30.0,
        explain_pending=True,
        on_cycle=check,
    ).run()
