"""What a cycle's victim search remembers of reclaims that failed (preemption.Preemptor:
misses per tenant, the usage left at a tree's root with every candidate gone) refuses
only reclaims a search without memory refuses too: the cycle decides as if it had
searched every time."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume, given
from hypothesis import strategies as st

from scheduler_bridge.admission import (
    AdmissionEngine,
    EngineConfig,
    Node,
    Quota,
    Tenant,
)
from scheduler_bridge.admission.pending import Item, Option
from scheduler_bridge.admission.preemption import PreemptionPlan, Preemptor
from scheduler_bridge.admission.state import CycleState

from .factories import nodes, quota, running, snapshot, tenants, workload
from .strategies import FLAVOURS, World, tight_cohorts, worlds
from .test_properties import PROFILE, _filled, _lowest_owner, _owners


def _victims(plan: PreemptionPlan | None) -> list[str] | None:
    return None if plan is None else sorted(v.wl.id for v in plan.victims)


def _nominate(
    state: CycleState, preemptor: Preemptor, item: Item, option: Option, plan: PreemptionPlan
) -> None:
    """What a nomination does to quota and candidates (engine._Cycle._nominate)."""
    for f, need in option.totals:
        for victim in plan.victims:
            gpus = min(need, victim.totals.get(f, 0)) if victim.node >= 0 else 0
            if gpus:
                state.take_over(item.node, f, gpus, victim, item.wl.id)
                need -= gpus
        if need:
            state.add_usage(item.node, [(f, need)])
    for victim in plan.victims:
        if victim.spare_of is None:
            state.claim(victim)
    preemptor.forget(plan.victims)


@st.composite
def root_bound(draw: st.DrawFn) -> World:
    """One cohort whose root's quota is its teams' guarantees, on as many GPUs: once
    the cycle's own work has taken its share, reclaims fail at the root alike."""
    teams = draw(st.integers(3, 6))
    guarantees = [draw(st.integers(1, 4)) for _ in range(teams)]
    quotas = [Quota("org", "H100", sum(guarantees))]
    for i, guaranteed in enumerate(guarantees):
        lend_limit = draw(st.one_of(st.none(), st.integers(0, guaranteed)))
        quotas.append(Quota(f"t{i}", "H100", guaranteed, None, lend_limit))
    size = draw(st.sampled_from([1, 2, 4]))
    nodes = tuple(Node(f"n{i}", {"H100": size}) for i in range(-(-sum(guarantees) // size)))
    tenants = (Tenant("org"), *(Tenant(f"t{i}", "org") for i in range(teams)))
    return World(tenants, tuple(quotas), nodes, FLAVOURS[:1])


@PROFILE
@given(data=st.data(), kind=st.sampled_from(["root-bound", "tight", "any"]))
def test_a_remembering_search_finds_what_a_fresh_one_finds(data, kind):
    """Borrowers fill the cluster; then owners reclaim one after another in one cycle's
    state, with what a cycle does in between: work admitted (usage only grows), victims
    nominated (the candidates change, and what they free is counted) and quota given
    back for a returning reclaimer's turn. Each reclaim's victims are those a search
    without memory finds. Some borrowed work is young (reclaim protection), so many
    reclaims fail alike."""
    worlds_of_kind = {"root-bound": root_bound(), "tight": tight_cohorts()}
    world = data.draw(worlds_of_kind.get(kind, worlds(backed=True)))
    snap = _filled(data, world)
    ages = st.sampled_from([0.0, 150.0])  # at 200 s: reclaimable, or protected
    snap = replace(
        snap, running=tuple(replace(r, admitted_at=data.draw(ages)) for r in snap.running)
    )
    owners = _owners(world, snap)
    assume(owners)
    pending = []
    for i in range(16):
        tenant, flavour, room = data.draw(st.sampled_from(owners))
        owner = _lowest_owner(tenant, flavour, data.draw(st.integers(1, room)))
        pending.append(replace(owner, id=f"owner{i}", submitted_at=100.0 + i))
    snap = replace(snap, pending=tuple(pending), now=200.0)
    config = EngineConfig(reclaim_min_run_s=100.0)
    engine = AdmissionEngine(config)
    static = engine._static_for(snap)
    items = [i for i in engine._compile(snap.pending, static) if i.node >= 0 and i.shape.options]
    state = CycleState(static, snap, config)
    remembering = Preemptor(state)
    charged: list[tuple[int, tuple[tuple[int, int], ...]]] = []
    for item in items:
        # a returning reclaimer's quota, held since the start, given back for its turn
        held = next((c for c in charged if c[0] == item.node), None)
        if held is not None and data.draw(st.booleans()):
            state.add_usage(item.node, held[1], -1)
            remembering.forget_quota_misses(item.node)
        else:
            held = None
        for option in item.shape.options:
            expected = Preemptor(state).plan(item, option)
            found = remembering.plan(item, option)
            assert _victims(found) == _victims(expected), (item.wl, option)
        if held is not None:
            state.add_usage(item.node, held[1])  # (not started: held again)
        option = item.shape.options[0]
        step = data.draw(st.sampled_from(["none", "none", "none", "admit", "claim"]))
        if step == "admit":
            state.add_usage(item.node, option.totals)
            charged.append((item.node, option.totals))
        elif step == "claim":
            plan = Preemptor(state).plan(item, option)
            if plan is not None:
                _nominate(state, remembering, item, option, plan)


def test_reclaims_failing_alike_at_the_root_are_refused_until_quota_comes_back():
    """org's 8 GPUs are all d's: 5 of them young (protected, counted as borrowed first)
    and d1's 2 inside d's guarantee, so a reclaim can take back 1 GPU (d2). With b's
    held quota charged, a's reclaim of 1 fails at org; c's then fails alike without a
    search. Once b's held quota is given back for b's own turn, b's reclaim of 1 takes
    d2, as a fresh search does."""
    tree = tenants({"org": None, "a": "org", "b": "org", "c": "org", "d": "org"})
    quotas = (quota("org", 8), *(quota(t, 2) for t in "abcd"))
    young = 4500.0
    snap = snapshot(
        tree,
        quotas,
        nodes(2, gpus=4),
        pending=[workload(f"{t}-job", t, gpus=1, submitted=4900.0) for t in "abc"],
        running_list=[
            running("d1", "d", {"n000": 2}),
            running("d2", "d", {"n000": 1}),
            running("d3", "d", {"n001": 3}, admitted=young),
            running("d4", "d", {"n000": 1}, admitted=young),
            running("d5", "d", {"n001": 1}, admitted=young),
        ],
        now=5000.0,
    )
    config = EngineConfig(reclaim_min_run_s=1000.0)
    engine = AdmissionEngine(config)
    static = engine._static_for(snap)
    items = {i.wl.tenant_id: i for i in engine._compile(snap.pending, static)}
    state = CycleState(static, snap, config)
    remembering = Preemptor(state)

    def plan(tenant: str) -> tuple[list[str] | None, list[str] | None]:
        item = items[tenant]
        option = item.shape.options[0]
        return _victims(remembering.plan(item, option)), _victims(
            Preemptor(state).plan(item, option)
        )

    # b's quota, held since the start of the cycle above b (reservation._hold_quota)
    held = state.tree.parent[items["b"].node], items["b"].shape.options[0].totals
    state.add_usage(*held)
    assert plan("a") == (None, None)
    assert remembering._root_floors, "a's failure is remembered"
    assert plan("c") == (None, None)
    state.add_usage(*held, -1)  # b's turn: its held quota given back
    remembering.forget_quota_misses(items["b"].node)
    assert plan("b") == (["d2"], ["d2"])


def test_after_a_nomination_the_strict_pass_starts_from_the_tenant_borrowing_most_now():
    """x borrows 3 and y 2 on nine one-GPU nodes, all busy. a's reclaim of 2 takes x's
    two newest runs; then x borrows 1, and b's reclaim of 1 takes y's newest run: the
    order kept between reclaims has placed x again."""
    tree = tenants({"org": None, "a": "org", "b": "org", "x": "org", "y": "org"})
    quotas = (quota("org", 10), quota("a", 3), quota("b", 3), quota("x", 2), quota("y", 2))
    snap = snapshot(
        tree,
        quotas,
        nodes(9, gpus=1),
        pending=[
            workload("a-job", "a", gpus=1, count=2, gang=False, submitted=90.0),
            workload("b-job", "b", gpus=1, submitted=91.0),
        ],
        running_list=[
            running("x0", "x", {"n000": 1, "n001": 1}),
            running("x1", "x", {"n002": 1}, admitted=10.0),
            running("x2", "x", {"n003": 1}, admitted=20.0),
            running("x3", "x", {"n004": 1}, admitted=30.0),
            running("y0", "y", {"n005": 1, "n006": 1}),
            running("y1", "y", {"n007": 1}, admitted=15.0),
            running("y2", "y", {"n008": 1}, admitted=25.0),
        ],
    )
    engine = AdmissionEngine()
    static = engine._static_for(snap)
    items = {i.wl.tenant_id: i for i in engine._compile(snap.pending, static)}
    state = CycleState(static, snap, EngineConfig())
    remembering = Preemptor(state)
    a, option = items["a"], items["a"].shape.options[0]
    found = remembering.plan(a, option)
    assert found is not None and _victims(found) == ["x2", "x3"]
    _nominate(state, remembering, a, option, found)
    b = items["b"]
    expected = Preemptor(state).plan(b, b.shape.options[0])
    assert _victims(expected) == ["y2"]
    assert _victims(remembering.plan(b, b.shape.options[0])) == ["y2"]
