"""Hypothesis strategies: random tenant trees, quotas, nodes and workloads."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from scheduler_bridge.admission import (
    EngineConfig,
    Flavour,
    Node,
    PendingWorkload,
    PodSet,
    Quota,
    Tenant,
    Topology,
)
from scheduler_bridge.admission.simulator import SimJob

FLAVOURS = (Flavour("H100", 1.0), Flavour("A100", 0.5))
# with a MIG slice weighted as NVIDIA's 1g profile is (one seventh of an A100)
THREE_FLAVOURS = (*FLAVOURS, Flavour("MIG-1g", 1 / 7))


@dataclass(frozen=True)
class World:
    tenants: tuple[Tenant, ...]
    quotas: tuple[Quota, ...]
    nodes: tuple[Node, ...]
    flavours: tuple[Flavour, ...]

    @property
    def leaves(self) -> list[str]:
        parents = {t.parent_id for t in self.tenants}
        return [t.id for t in self.tenants if t.id not in parents]


@st.composite
def trees(draw: st.DrawFn, max_tenants: int = 9) -> tuple[Tenant, ...]:
    count = draw(st.integers(2, max_tenants))
    out: list[Tenant] = []
    for i in range(count):
        parent = None
        if i > 0 and draw(st.integers(0, 4)) > 0:
            parent = f"t{draw(st.integers(0, i - 1))}"
        weight = draw(st.sampled_from([1.0, 1.0, 2.0, 3.0]))
        out.append(Tenant(f"t{i}", parent, weight))
    return tuple(out)


def _optional(limit: int) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), st.integers(0, limit))


@st.composite
def worlds(
    draw: st.DrawFn,
    max_tenants: int = 9,
    backed: bool = False,
    flavour_choices: tuple[Flavour, ...] = FLAVOURS,
) -> World:
    """A tree with quotas and nodes. ``backed``: node capacity covers every tree's
    guarantee (the condition under which reclaim can always succeed) and topologies
    stay simple."""
    tenant_list = draw(trees(max_tenants))
    flavours = flavour_choices[: draw(st.integers(1, len(flavour_choices)))]
    quotas: list[Quota] = []
    for tenant in tenant_list:
        for flavour in flavours:
            if draw(st.integers(0, 3)) == 0:
                continue
            quotas.append(
                Quota(
                    tenant.id,
                    flavour.name,
                    draw(st.integers(0, 8)),
                    draw(_optional(8)),
                    draw(_optional(8)),
                )
            )
    nodes: list[Node] = []
    for flavour in flavours:
        needed = _root_guarantees(tenant_list, quotas, flavour.name) if backed else 0
        count = draw(st.integers(1, 4))
        size = draw(st.sampled_from([2, 4, 8]))
        while count * size < needed:
            count += 1
        group = draw(st.integers(1, 3))
        for i in range(count):
            nodes.append(
                Node(
                    f"{flavour.name}-{i}",
                    {flavour.name: size},
                    None,
                    f"{flavour.name}-d{i // group}",
                )
            )
    return World(tuple(tenant_list), tuple(quotas), tuple(nodes), flavours)


def _root_guarantees(tenants: tuple[Tenant, ...], quotas: list[Quota], flavour: str) -> int:
    rows = {q.tenant_id: q.guaranteed for q in quotas if q.flavour == flavour}
    children: dict[str | None, list[str]] = {}
    for t in tenants:
        children.setdefault(t.parent_id, []).append(t.id)

    def g(t: str) -> int:
        kids = children.get(t, [])
        own = rows.get(t, 0)
        return max(own, sum(g(c) for c in kids)) if kids else own

    return sum(g(root) for root in children.get(None, []))


@st.composite
def workloads(
    draw: st.DrawFn,
    world: World,
    wid: str,
    at: float,
    simple: bool = False,
    elastic: bool = False,
) -> PendingWorkload:
    """A random workload; with ``elastic`` its first pod set may have a min_count."""
    tenant = draw(st.sampled_from([t.id for t in world.tenants]))
    names = [f.name for f in world.flavours]
    flavours = tuple(draw(st.permutations(names))[: draw(st.integers(1, len(names)))])
    count = draw(st.integers(1, 5 if elastic else 3))
    min_count = draw(st.integers(1, count)) if elastic and draw(st.booleans()) else None
    pod_sets: tuple[PodSet, ...] = (
        PodSet(count, draw(st.integers(1, 4)), flavours, min_count=min_count),
    )
    if not simple and draw(st.integers(0, 5)) == 0:
        pod_sets = (*pod_sets, PodSet(1, 1, flavours, "launcher"))
    topology = Topology.NONE if simple else draw(st.sampled_from(list(Topology)))
    return PendingWorkload(
        id=wid,
        tenant_id=tenant,
        pod_sets=pod_sets,
        priority=draw(st.integers(0, 2)),
        submitted_at=at,
        topology=topology,
        gang=draw(st.booleans()),
        max_run_time_s=draw(st.one_of(st.none(), st.sampled_from([30.0, 300.0, 3000.0]))),
        preemptible=draw(st.integers(0, 5)) > 0,
    )


@st.composite
def tight_cohorts(draw: st.DrawFn) -> World:
    """One cohort of three to five teams on one flavour, guarantees of one to five GPUs
    with lend limits often at or below them, and nodes that hold the guarantees plus up
    to three spare GPUs: reclaims there often take work straddling its tenant's
    guarantee, and what comes back to the cohort is tight."""
    teams = draw(st.integers(3, 5))
    tenant_list = (Tenant("c"), *(Tenant(f"t{i}", "c") for i in range(teams)))
    quotas = []
    for i in range(teams):
        guaranteed = draw(st.integers(1, 5))
        quotas.append(
            Quota(
                f"t{i}",
                "H100",
                guaranteed,
                draw(st.one_of(st.none(), st.none(), st.integers(0, 4))),
                draw(st.one_of(st.none(), st.none(), st.just(0), st.integers(0, guaranteed))),
            )
        )
    size = draw(st.sampled_from([1, 2, 3]))
    gpus = sum(q.guaranteed for q in quotas) + draw(st.integers(0, 3))
    nodes = tuple(Node(f"n{i}", {"H100": size}) for i in range(-(-gpus // size)))
    return World(tenant_list, tuple(quotas), nodes, FLAVOURS[:1])


@st.composite
def multi_pod_set_workloads(draw: st.DrawFn, world: World, wid: str, at: float) -> PendingWorkload:
    """Two or three pod sets, each accepting its own ordered choice of flavours (a
    launcher on anything, workers on two kinds of GPU), some at their own amount per
    flavour, some large enough that only borrowing, or nothing, could hold them."""
    names = [f.name for f in world.flavours]

    def pod_set(i: int) -> PodSet:
        flavours = tuple(draw(st.permutations(names))[: draw(st.integers(1, len(names)))])
        # a prioritized list of claims may ask each alternative for its own number
        amounts = tuple(draw(st.sampled_from([1, 2, 4])) for _ in flavours)
        per_flavour = amounts if len(flavours) > 1 and draw(st.booleans()) else ()
        return PodSet(
            draw(st.integers(1, 8)), amounts[0], flavours, f"set{i}", per_flavour=per_flavour
        )

    pod_sets = tuple(pod_set(i) for i in range(draw(st.integers(2, 3))))
    return PendingWorkload(
        id=wid,
        tenant_id=draw(st.sampled_from([t.id for t in world.tenants])),
        pod_sets=pod_sets,
        priority=draw(st.integers(0, 2)),
        submitted_at=at,
        topology=draw(st.sampled_from([Topology.NONE, Topology.NONE, Topology.ONE_DOMAIN])),
        gang=True,
        max_run_time_s=draw(st.one_of(st.none(), st.sampled_from([300.0, 3000.0]))),
        preemptible=draw(st.integers(0, 5)) > 0,
    )


@st.composite
def job_lists(
    draw: st.DrawFn,
    world: World,
    max_jobs: int = 25,
    elastic: bool = False,
    multi_pod_sets: bool = False,
) -> list[SimJob]:
    count = draw(st.integers(1, max_jobs))
    jobs = []
    for i in range(count):
        at = float(draw(st.integers(0, 600)))
        if multi_pod_sets and draw(st.booleans()):
            wl = draw(multi_pod_set_workloads(world, f"w{i:02d}", at))
        else:
            wl = draw(workloads(world, f"w{i:02d}", at, elastic=elastic))
        checkpoint = draw(st.one_of(st.none(), st.sampled_from([60.0, 300.0]))) if elastic else None
        jobs.append(
            SimJob(
                workload=wl,
                run_time_s=float(draw(st.integers(10, 900))),
                checkpoint_interval_s=checkpoint,
            )
        )
    return jobs


configs = st.builds(
    EngineConfig,
    priority_preemption=st.booleans(),
    reservation_wait_s=st.sampled_from([60.0, 300.0, 1e9]),
    reservation_min_gpus=st.integers(1, 8),
    usage_blend=st.sampled_from([0.0, 0.5, 1.0]),
    reclaim_min_run_s=st.sampled_from([0.0, 0.0, 90.0]),
    reclaim_wait_s=st.sampled_from([0.0, 0.0, 45.0]),
)
