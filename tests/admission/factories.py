"""Builders for admission-engine inputs, so tests state only what matters to them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from scheduler_bridge.admission import (
    ClusterSnapshot,
    Flavour,
    Node,
    PendingWorkload,
    Placement,
    PodSet,
    Quota,
    RunningWorkload,
    Tenant,
    Topology,
)

H100 = "H100"


def tenants(
    spec: Mapping[str, str | None], weights: Mapping[str, float] | None = None
) -> tuple[Tenant, ...]:
    """{"team-a": "org", "org": None} -> Tenant tuple."""
    weights = weights or {}
    return tuple(Tenant(t, parent, weights.get(t, 1.0)) for t, parent in spec.items())


def quota(
    tenant: str,
    guaranteed: int,
    borrow_limit: int | None = None,
    lend_limit: int | None = None,
    flavour: str = H100,
) -> Quota:
    return Quota(tenant, flavour, guaranteed, borrow_limit, lend_limit)


def nodes(
    count: int,
    gpus: int = 8,
    flavour: str = H100,
    prefix: str = "n",
    domain_size: int | None = None,
    free: Sequence[int] | None = None,
) -> tuple[Node, ...]:
    out = []
    for i in range(count):
        domain = f"{prefix}-nvl{i // domain_size}" if domain_size else None
        node_free = None if free is None else {flavour: free[i]}
        out.append(Node(f"{prefix}{i:03d}", {flavour: gpus}, node_free, domain))
    return tuple(out)


def workload(
    wid: str,
    tenant: str,
    gpus: int = 1,
    count: int = 1,
    flavour: str | Sequence[str] = H100,
    priority: int = 0,
    submitted: float = 0.0,
    topology: Topology = Topology.NONE,
    gang: bool = True,
    max_run: float | None = None,
    preemptible: bool = True,
) -> PendingWorkload:
    flavours = (flavour,) if isinstance(flavour, str) else tuple(flavour)
    return PendingWorkload(
        id=wid,
        tenant_id=tenant,
        pod_sets=(PodSet(count, gpus, flavours),),
        priority=priority,
        submitted_at=submitted,
        topology=topology,
        gang=gang,
        max_run_time_s=max_run,
        preemptible=preemptible,
    )


def running(
    wid: str,
    tenant: str,
    on: Mapping[str, int],
    flavour: str = H100,
    priority: int = 0,
    admitted: float = 0.0,
    preemptible: bool = True,
    max_run: float | None = None,
    evicting: bool = False,
) -> RunningWorkload:
    """A running workload holding on[node] GPUs; it carries its request so that
    apply_result can queue it again when preempted."""
    total = sum(on.values())
    request = workload(
        wid,
        tenant,
        gpus=total,
        flavour=flavour,
        priority=priority,
        submitted=admitted,
        max_run=max_run,
        preemptible=preemptible,
    )
    return RunningWorkload(
        id=wid,
        tenant_id=tenant,
        placements=tuple(Placement(node, flavour, gpus) for node, gpus in sorted(on.items())),
        priority=priority,
        admitted_at=admitted,
        preemptible=preemptible,
        max_run_time_s=max_run,
        evicting=evicting,
        request=request,
    )


def snapshot(
    tenant_tree: Iterable[Tenant],
    quotas: Iterable[Quota],
    node_list: Iterable[Node],
    pending: Iterable[PendingWorkload] = (),
    running_list: Iterable[RunningWorkload] = (),
    flavours: Iterable[Flavour] = (Flavour(H100),),
    now: float = 100.0,
    history: Mapping[str, float] | None = None,
) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=now,
        tenants=tuple(tenant_tree),
        flavours=tuple(flavours),
        quotas=tuple(quotas),
        nodes=tuple(node_list),
        running=tuple(running_list),
        pending=tuple(pending),
        usage_history=dict(history or {}),
    )


def two_teams(
    a: int = 8,
    b: int = 8,
    a_limit: int | None = None,
    b_limit: int | None = None,
    a_lend: int | None = None,
    b_lend: int | None = None,
) -> tuple[tuple[Tenant, ...], tuple[Quota, ...]]:
    """org with teams a and b, the usual cohort of two."""
    tree = tenants({"org": None, "a": "org", "b": "org"})
    return tree, (quota("a", a, a_limit, a_lend), quota("b", b, b_limit, b_lend))
