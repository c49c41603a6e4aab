"""Shared flavours in the admission engine: shares are placed on one GPU each and the
decision names it, no GPU is ever over-committed, a shared guarantee is taken back
within one cycle, and the same snapshot gives the same placements."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_bridge.admission import (
    ClusterSnapshot,
    EngineConfig,
    Flavour,
    Node,
    PendingWorkload,
    Placement,
    PodSet,
    Quota,
    RunningWorkload,
    Tenant,
    Topology,
    run_cycle,
)
from scheduler_bridge.admission.model import ReasonCode
from scheduler_bridge.admission.simulator import apply_result

T4 = "t4-shared"
MILLI = 1000


def snapshot(
    pending: tuple[PendingWorkload, ...],
    *,
    nodes: int = 2,
    gpus: int = 2,
    quotas: tuple[Quota, ...] | None = None,
    running: tuple[RunningWorkload, ...] = (),
) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=1_000.0,
        tenants=(Tenant("org"), Tenant("a", "org"), Tenant("b", "org")),
        flavours=(Flavour(T4, gpu_equivalent=0.001, shared=True),),
        quotas=quotas
        or (Quota("org", T4, nodes * gpus * MILLI), Quota("a", T4, nodes * gpus * MILLI // 2)),
        nodes=tuple(Node(f"n{i}", {T4: gpus * MILLI}) for i in range(nodes)),
        running=running,
        pending=pending,
    )


def share(
    wid: str,
    milli: int,
    tenant: str = "a",
    count: int = 1,
    submitted_at: float = 0.0,
    topology: Topology = Topology.NONE,
) -> PendingWorkload:
    return PendingWorkload(
        id=wid,
        tenant_id=tenant,
        pod_sets=(PodSet(count, milli, (T4,)),),
        submitted_at=submitted_at,
        topology=topology,
    )


def held_per_gpu(snap: ClusterSnapshot) -> dict[tuple[str, int | None], int]:
    held: dict[tuple[str, int | None], int] = defaultdict(int)
    for workload in snap.running:
        for p in workload.placements:
            held[(p.node, p.gpu)] += p.gpus
    return held


def test_shares_fill_the_fullest_gpu_that_holds_them_and_name_it() -> None:
    pending = (share("w1", 600), share("w2", 600, submitted_at=1), share("w3", 400, submitted_at=2))
    result = run_cycle(snapshot(pending, nodes=1))
    placed = {a.workload_id: a.placements for a in result.admissions}
    assert placed["w1"] == (Placement("n0", T4, 600, gpu=0),)
    # 400 left on GPU 0 is too little for the second 600: it takes GPU 1
    assert placed["w2"] == (Placement("n0", T4, 600, gpu=1),)
    # 400 fits exactly where 400 is left (best fit), not on a fresh GPU
    assert placed["w3"][0].gpu in (0, 1) and placed["w3"][0].gpus == 400


def _running(wid: str, gpu: int, milli: int) -> RunningWorkload:
    return RunningWorkload(
        id=wid,
        tenant_id="a",
        placements=(Placement("n0", T4, milli, gpu=gpu),),
        admitted_at=1,
        request=share(wid, milli),
    )


def test_fgd_keeps_a_whole_free_gpu_for_the_sizes_that_come_when_best_fit_would_not() -> None:
    # GPU 0 has 600 free, GPU 1 is untouched, GPU 2 is full; half-GPU shares are common
    running = (_running("r1", 0, 400), _running("r2", 2, 500), _running("r3", 2, 500))
    snap = snapshot((share("w", 200, submitted_at=5),), nodes=1, gpus=3, running=running)
    best_fit = run_cycle(snap).admissions[0].placements
    assert best_fit == (Placement("n0", T4, 200, gpu=0),)
    fgd = run_cycle(snap, EngineConfig(share_packing="fgd")).admissions[0].placements
    # on GPU 0 it would leave 400 free, which the 500s cannot use
    assert fgd == (Placement("n0", T4, 200, gpu=1),)


def test_an_unknown_packing_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="share_packing must be one of best-fit, fgd"):
        EngineConfig(share_packing="worst-fit")


def test_a_share_never_spans_gpus_even_when_the_node_has_room_in_total() -> None:
    running = (
        RunningWorkload(
            id="r1", tenant_id="a", placements=(Placement("n0", T4, 700, gpu=0),), admitted_at=1
        ),
        RunningWorkload(
            id="r2", tenant_id="a", placements=(Placement("n0", T4, 700, gpu=1),), admitted_at=1
        ),
    )
    # 600 free on the node, but 300 on each GPU
    result = run_cycle(snapshot((share("w", 500),), nodes=1, running=running))
    assert not result.admissions
    (decision,) = result.pending
    assert decision.code is ReasonCode.NODE_CAPACITY


def test_a_pod_above_one_gpu_on_a_shared_flavour_never_fits() -> None:
    result = run_cycle(snapshot((share("w", 1500),)))
    assert not result.admissions
    assert result.pending[0].code is ReasonCode.NEVER_FITS


def test_pods_of_one_workload_that_want_one_node_share_one_nodes_gpus() -> None:
    result = run_cycle(snapshot((share("w", 700, count=3, topology=Topology.ONE_NODE),), gpus=4))
    (admission,) = result.admissions
    assert {p.node for p in admission.placements} == {"n0"}
    assert sorted(p.gpu or 0 for p in admission.placements) == [0, 1, 2]


def test_gpus_held_by_pods_outside_tidegate_are_left_alone() -> None:
    snap = snapshot((share("w", 600),), nodes=1)
    busy = (Node("n0", {T4: 2 * MILLI}, device_used={T4: (500, 0)}),)
    result = run_cycle(replace(snap, nodes=busy))
    assert result.admissions[0].placements == (Placement("n0", T4, 600, gpu=1),)


# -- properties -----------------------------------------------------------------------

sizes = st.sampled_from([50, 100, 160, 250, 320, 470, 500, 650, 810, 1000])


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(sizes, st.sampled_from(["a", "b"]), st.integers(1, 3)), max_size=25),
    st.integers(1, 4),
    st.sampled_from(["best-fit", "fgd"]),
)
def test_no_gpu_is_ever_over_committed(
    requests: list[tuple[int, str, int]], cycles: int, packing: str
) -> None:
    pending = tuple(
        share(f"w{i:02d}", milli, tenant=tenant, count=count, submitted_at=float(i))
        for i, (milli, tenant, count) in enumerate(requests)
    )
    snap = snapshot(pending, nodes=3, gpus=2)
    for _ in range(cycles):
        result = run_cycle(snap, EngineConfig(share_packing=packing))
        snap = apply_result(snap, result)
        for (node, gpu), held in held_per_gpu(snap).items():
            assert gpu is not None and 0 <= gpu < 2, (node, gpu)
            assert held <= MILLI, f"GPU {gpu} of {node} holds {held} thousandths"


def _borrowed_full(borrowed: list[int]) -> ClusterSnapshot:
    """b, without a guarantee, borrows all it can of a's idle guarantee (4 GPUs)."""
    quotas = (Quota("org", T4, 4 * MILLI), Quota("a", T4, 4 * MILLI))
    snap = snapshot(
        tuple(
            share(f"b{i:02d}", m, tenant="b", submitted_at=float(i)) for i, m in enumerate(borrowed)
        ),
        nodes=2,
        gpus=2,
        quotas=quotas,
    )
    snap = apply_result(snap, run_cycle(snap))
    assert all(w.tenant_id == "b" for w in snap.running)
    return snap


def _with_pending(snap: ClusterSnapshot, pending: tuple[PendingWorkload, ...]) -> ClusterSnapshot:
    return replace(snap, pending=snap.pending + pending)


@settings(max_examples=80, deadline=None)
@given(st.lists(sizes, min_size=1, max_size=12), sizes, st.integers(1, 4))
def test_a_shared_guarantee_is_taken_back_within_one_cycle(
    borrowed: list[int], milli: int, pods: int
) -> None:
    """a comes back for work inside its guarantee: once the preemptions of one cycle are
    carried out, the next cycle admits it."""
    snap = _with_pending(_borrowed_full(borrowed), (share("owner", milli, count=pods),))
    first = run_cycle(snap)
    if any(a.workload_id == "owner" for a in first.admissions):
        return
    assert first.preemptions, first.pending
    second = run_cycle(apply_result(snap, first, requeue=False))
    # (b's work that waited may borrow what the victims freed beyond the owner's need)
    assert "owner" in {a.workload_id for a in second.admissions}, second.pending


@settings(max_examples=60, deadline=None)
@given(
    st.lists(sizes, min_size=1, max_size=12),
    st.lists(st.sampled_from([100, 250, 500, 1000]), min_size=1, max_size=6),
)
def test_every_share_preempted_for_starts_within_two_cycles_and_all_fitting_work_runs(
    borrowed: list[int], owned: list[int]
) -> None:
    """Each preempts as it reaches the head of the line, and every workload a cycle
    preempts for starts at most two cycles after its victims stopped (as for whole
    GPUs). In the end all of a's work inside its guarantee runs, unless a's own shares
    leave slivers no other of its requests fits in: b's work never stands in the way."""
    if sum(owned) > 4 * MILLI:
        return
    mine = tuple(share(f"a{i:02d}", m, submitted_at=100.0 + i) for i, m in enumerate(owned))
    snap = _with_pending(_borrowed_full(borrowed), mine)
    stopped: dict[str, int] = {}  # reclaimer -> first cycle after its victims stopped
    admitted: set[str] = set()
    for cycle in range(6):
        result = run_cycle(snap)
        admitted |= {a.workload_id for a in result.admissions}
        for p in result.preemptions:
            stopped.setdefault(p.preemptor_id, cycle + 1)
        for reclaimer, after in stopped.items():
            assert reclaimer in admitted or cycle <= after, (reclaimer, after, result.pending)
        snap = apply_result(snap, result)
    waiting = {w.id for w in mine} - {w.id for w in snap.running}
    if not waiting:
        return
    without_b = replace(
        snap,
        running=tuple(w for w in snap.running if w.tenant_id == "a"),
        pending=tuple(w for w in snap.pending if w.tenant_id == "a"),
    )
    could = {a.workload_id for a in run_cycle(without_b).admissions}
    assert not (could & waiting), f"{waiting} {borrowed} {owned}"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(sizes, st.sampled_from(["a", "b"])), min_size=1, max_size=20),
    st.sampled_from(["best-fit", "fgd"]),
)
def test_the_same_snapshot_gives_the_same_placements(
    requests: list[tuple[int, str]], packing: str
) -> None:
    pending = tuple(
        share(f"w{i:02d}", milli, tenant=tenant, submitted_at=float(i))
        for i, (milli, tenant) in enumerate(requests)
    )
    snap = snapshot(pending, nodes=3, gpus=4)
    config = EngineConfig(share_packing=packing)
    assert run_cycle(snap, config).admissions == run_cycle(snap, config).admissions


def running_share(wid: str, tenant: str, milli: int, gpu: int, fills_idle: bool = False):
    return RunningWorkload(
        id=wid,
        tenant_id=tenant,
        placements=(Placement("n0", T4, milli, gpu=gpu),),
        admitted_at=0.0,
        fills_idle=fills_idle,
    )


def two_tenants_of_one_gpu_each(*running: RunningWorkload, pending=()) -> ClusterSnapshot:
    quotas = (Quota("org", T4, 2 * MILLI), Quota("a", T4, MILLI), Quota("b", T4, MILLI))
    return snapshot(tuple(pending), nodes=1, gpus=2, quotas=quotas, running=running)


@pytest.mark.parametrize("fills_idle", [True, False])
def test_a_share_filling_a_fragment_is_taken_back_first_when_a_whole_gpu_is_needed(
    fills_idle: bool,
) -> None:
    # b runs a 600 share inside its guarantee on GPU 0 and a 400 one on GPU 1: no GPU is
    # whole, and b borrows nothing. Only if the 400 one only filled a fragment may a's
    # whole-GPU work take it back.
    snap = two_tenants_of_one_gpu_each(
        running_share("b-rigid", "b", 600, gpu=0),
        running_share("b-filler", "b", 400, gpu=1, fills_idle=fills_idle),
        pending=(share("a-whole", MILLI),),
    )
    result = run_cycle(snap)
    if not fills_idle:
        assert not result.preemptions and not result.admissions
        return
    (preemption,) = result.preemptions
    assert (preemption.victim_id, preemption.preemptor_id) == ("b-filler", "a-whole")
    snap = apply_result(snap, result)
    (admission,) = run_cycle(snap).admissions
    assert admission.placements == (Placement("n0", T4, MILLI, gpu=1),)


def test_work_that_fills_idle_gpus_waits_behind_all_other_work_and_never_preempts() -> None:
    filler = PendingWorkload(
        id="b-filler",
        tenant_id="b",
        pod_sets=(PodSet(1, 400, (T4,)),),
        submitted_at=0.0,
        fills_idle=True,
    )
    snap = two_tenants_of_one_gpu_each(
        running_share("a-half", "a", 500, gpu=0),
        running_share("a-more", "a", 500, gpu=0),
        pending=(filler, share("b-whole", MILLI, tenant="b", submitted_at=5.0)),
    )
    result = run_cycle(snap)
    assert [a.workload_id for a in result.admissions] == ["b-whole"]  # the filler waits
    assert not result.preemptions
    # on a full cluster it preempts nothing, even inside its tenant's guarantee
    snap = apply_result(snap, result)
    result = run_cycle(snap)
    assert not result.admissions and not result.preemptions


def test_work_that_fills_idle_gpus_is_preemptible() -> None:
    with pytest.raises(ValueError, match="fills idle GPUs is preemptible"):
        PendingWorkload(
            id="w",
            tenant_id="a",
            pod_sets=(PodSet(1, 400, (T4,)),),
            fills_idle=True,
            preemptible=False,
        )


def test_elastic_shares_grow_into_idle_gpus_and_shrink_before_anything_is_preempted() -> None:
    from scheduler_bridge.admission.engine import AdmissionEngine
    from scheduler_bridge.admission.simulator import SimJob, Simulator

    elastic = PendingWorkload(
        id="notebooks", tenant_id="a", pod_sets=(PodSet(4, 300, (T4,), min_count=2),)
    )
    whole = PendingWorkload(
        id="train", tenant_id="b", pod_sets=(PodSet(1, MILLI, (T4,)),), submitted_at=600.0
    )
    worst: dict[tuple[str, int | None], int] = defaultdict(int)

    def check(snap: ClusterSnapshot, result: object) -> None:
        for key, held in held_per_gpu(snap).items():
            worst[key] = max(worst[key], held)

    simulator = Simulator(
        tenants=[Tenant("org"), Tenant("a", "org"), Tenant("b", "org")],
        flavours=[Flavour(T4, gpu_equivalent=0.001, shared=True)],
        quotas=[Quota("org", T4, 2 * MILLI), Quota("a", T4, MILLI), Quota("b", T4, MILLI)],
        nodes=[Node("n0", {T4: 2 * MILLI})],
        jobs=[
            SimJob(workload=elastic, run_time_s=3600.0),
            SimJob(workload=whole, run_time_s=1800.0),
        ],
        engine=AdmissionEngine(EngineConfig()),
        on_cycle=check,
    )
    result = simulator.run()
    outcomes = {o.id: o for o in result.jobs}
    # a's four 300-thousandths pods take both GPUs (two above its guarantee of one GPU);
    # b's whole GPU is its guarantee: an elastic pod goes back, nothing is preempted
    assert outcomes["notebooks"].started_at == 0.0 and result.grows >= 2
    assert outcomes["train"].started_at is not None and outcomes["train"].started_at <= 720.0
    assert result.shrinks >= 1 and result.preemptions == 0
    assert all(held <= MILLI for held in worst.values()), worst
    assert all(o.finished_at is not None for o in result.jobs)


def test_work_that_fills_idle_gpus_says_why_it_waits() -> None:
    filler = PendingWorkload(
        id="b-filler", tenant_id="b", pod_sets=(PodSet(1, 400, (T4,)),), fills_idle=True
    )
    snap = two_tenants_of_one_gpu_each(
        running_share("a1", "a", MILLI, gpu=0),
        running_share("a2", "a", 700, gpu=1),
        pending=(filler,),
    )
    (decision,) = run_cycle(snap).pending
    assert decision.message.startswith("fills idle GPUs only (it never preempts")
    assert "needs 400 t4-shared" in decision.message  # and what stands in its way


def test_a_preemptor_starts_on_the_gpus_its_victims_freed_and_no_victim_returns_first() -> None:
    # A borrower fills two nodes with shares, the owner's shares and whole GPUs arrive;
    # seeded, 200 times. Started anywhere else, the GPUs freed for a preemptor would go
    # back to its victims: preempted for nothing.
    rng = random.Random(1)
    preemptions = elsewhere = returned = 0
    for _ in range(200):
        sizes = (200, 300, 500, 700)
        borrowed = tuple(
            share(f"b{i}", rng.choice(sizes), tenant="b", submitted_at=i) for i in range(12)
        )
        snap = snapshot(borrowed, nodes=2, gpus=2)
        snap = apply_result(snap, run_cycle(snap))
        owned = tuple(
            share(f"a{i}", rng.choice((300, 600, MILLI)), submitted_at=100 + i) for i in range(4)
        )
        snap = replace(snap, pending=snap.pending + owned)
        planned: dict[str, set[tuple[str, int | None]]] = {}
        preemptor_of: dict[str, str] = {}
        for _cycle in range(5):
            result = run_cycle(snap)
            running = {w.id for w in snap.running} | {a.workload_id for a in result.admissions}
            for decision in result.pending:
                if decision.held:
                    planned[decision.workload_id] = {(p.node, p.gpu) for p in decision.held}
            for preemption in result.preemptions:
                preemptions += 1
                preemptor_of[preemption.victim_id] = preemption.preemptor_id
            for admission in result.admissions:
                where = {(p.node, p.gpu) for p in admission.placements}
                if admission.workload_id in planned and where != planned[admission.workload_id]:
                    elsewhere += 1
                if preemptor_of.get(admission.workload_id, "") not in running | {""}:
                    returned += 1
            snap = apply_result(snap, result)
    assert preemptions > 100  # the scenario does reclaim
    assert (elsewhere, returned) == (0, 0)
