"""Independent checks of what must always hold after a cycle (docs/admission.md#invariants).

The quota check is deliberately written differently from the engine's quota.py: it
walks the tree once and computes, for every node, how much it offers to or asks from
its parent level ("net"), rather than asking each node's availability along a path. If
both agree on thousands of random trees the accounting is right.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from scheduler_bridge.admission import (
    ClusterSnapshot,
    CycleResult,
    PendingWorkload,
    ReasonCode,
    RunningWorkload,
    fits_when_idle,
    run_cycle,
)
from scheduler_bridge.admission.simulator import apply_result


def running_after(snapshot: ClusterSnapshot, result: CycleResult) -> list[RunningWorkload]:
    """Running work once the admissions start and before the victims have stopped: the
    moment when both hold GPUs, so the strictest one to check."""
    admitted = apply_result(snapshot, result, evict=True)
    return list(admitted.running)


def capacity_violations(snapshot: ClusterSnapshot, result: CycleResult) -> list[str]:
    out = []
    held: dict[tuple[str, str], int] = {}
    for wl in running_after(snapshot, result):
        for p in wl.placements:
            held[(p.node, p.flavour)] = held.get((p.node, p.flavour), 0) + p.gpus
    admitted: dict[tuple[str, str], int] = {}
    for a in result.admissions:
        for p in a.placements:
            admitted[(p.node, p.flavour)] = admitted.get((p.node, p.flavour), 0) + p.gpus
    for node in snapshot.nodes:
        for flavour, total in node.capacity.items():
            used = held.get((node.name, flavour), 0)
            if node.free is None and used > total:
                out.append(f"{node.name}/{flavour}: {used} > {total}")
            if node.free is not None and admitted.get((node.name, flavour), 0) > node.free.get(
                flavour, 0
            ):
                out.append(f"{node.name}/{flavour}: admitted more than free")
    return out


def quota_violations(snapshot: ClusterSnapshot, workloads: Iterable[RunningWorkload]) -> list[str]:
    usage: dict[tuple[str, str], int] = {}
    for wl in workloads:
        for p in wl.placements:
            usage[(wl.tenant_id, p.flavour)] = usage.get((wl.tenant_id, p.flavour), 0) + p.gpus
    out: list[str] = []
    for flavour in {f.name for f in snapshot.flavours}:
        out.extend(_flavour_violations(snapshot, flavour, usage))
    return out


def _flavour_violations(
    snapshot: ClusterSnapshot, flavour: str, usage: dict[tuple[str, str], int]
) -> list[str]:
    rows = {q.tenant_id: q for q in snapshot.quotas if q.flavour == flavour}
    children: dict[str | None, list[str]] = {}
    for t in snapshot.tenants:
        children.setdefault(t.parent_id, []).append(t.id)
    out: list[str] = []

    def guaranteed(t: str) -> int:
        own = rows[t].guaranteed if t in rows else 0
        kids = children.get(t, [])
        return max(own, sum(guaranteed(c) for c in kids)) if kids else own

    def has_access(t: str, ancestors: tuple[str, ...]) -> bool:
        return any(a in rows for a in (t, *ancestors))

    def net(t: str, ancestors: tuple[str, ...]) -> int:
        """What t's subtree offers to (>0) or takes from (<0) its parent level."""
        row = rows.get(t)
        kids = children.get(t, [])
        own_use = usage.get((t, flavour), 0)
        if own_use and not has_access(t, ancestors):
            out.append(f"{t} uses {flavour} without any quota on its path")
        if not kids:
            value = guaranteed(t) - own_use
            if row is not None and row.borrow_limit is not None and value + row.borrow_limit < 0:
                out.append(f"{t}: {own_use} {flavour} above guaranteed + borrow limit")
        else:
            pool = guaranteed(t) - sum(guaranteed(c) for c in kids)
            value = (pool - own_use) + sum(net(c, (t, *ancestors)) for c in kids)
            if row is not None and row.borrow_limit is not None and value + row.borrow_limit < 0:
                out.append(f"{t}: subtree above its borrow limit for {flavour}")
        if row is not None and row.lend_limit is not None:
            value = min(value, row.lend_limit)
        return value

    for root in children.get(None, []):
        if net(root, ()) < 0:
            out.append(f"tree {root} uses more {flavour} than its lenders allow")
    return out


def reclaim_violations(snapshot: ClusterSnapshot, result: CycleResult) -> list[str]:
    """A tenant's preemptors of one cycle, each charged its whole need, stay inside its
    guarantee together with what it keeps running and what it got inside the guarantee
    this cycle (a preemptor must end inside its guarantee; two of them must not each
    count the same unused guarantee)."""
    guaranteed = {(q.tenant_id, q.flavour): q.guaranteed for q in snapshot.quotas}
    requests = {wl.id: wl for wl in snapshot.pending}
    victims = {p.victim_id for p in result.preemptions}
    claimed: dict[tuple[str, str], int] = {}
    preemptors: dict[tuple[str, str], list[str]] = {}
    for decision in result.pending:
        if decision.code is ReasonCode.PREEMPTING and decision.flavour:
            wl = requests[decision.workload_id]
            # per flavour where its victims' GPUs are held for it (pod sets may differ)
            needs: dict[str, int] = {}
            for p in decision.held:
                needs[p.flavour] = needs.get(p.flavour, 0) + p.gpus
            if not needs:
                needs = {
                    decision.flavour: sum(
                        ps.count * ps.per_pod(decision.flavour) for ps in wl.pod_sets
                    )
                }
            for flavour, need in needs.items():
                key = (wl.tenant_id, flavour)
                claimed[key] = claimed.get(key, 0) + need
                preemptors.setdefault(key, []).append(wl.id)
    for run in snapshot.running:
        if run.id in victims:
            continue
        for p in run.placements:
            key = (run.tenant_id, p.flavour)
            if key in claimed:
                claimed[key] += p.gpus
    for admission in result.admissions:
        for p in admission.placements:
            key = (admission.tenant_id, p.flavour)
            if key in claimed:
                claimed[key] += p.gpus
        for flavour, amount in admission.borrowed.items():
            key = (admission.tenant_id, flavour)
            if key in claimed:
                claimed[key] -= amount
    return [
        f"{tenant} holds and reclaims {held} {flavour} ({preemptors[(tenant, flavour)]}), "
        f"guarantee {guaranteed.get((tenant, flavour), 0)}"
        for (tenant, flavour), held in claimed.items()
        if held > guaranteed.get((tenant, flavour), 0)
    ]


def position_violations(snapshot: ClusterSnapshot, result: CycleResult) -> list[str]:
    """Only work that some state of the cluster could run has a place in line."""
    requests = {wl.id: wl for wl in snapshot.pending}
    return [
        f"{d.workload_id} has position {d.position} but no node layout holds it ({d.message})"
        for d in result.pending
        if d.position is not None
        and not fits_when_idle(
            snapshot.nodes, requests[d.workload_id].pod_sets, requests[d.workload_id].topology
        )
    ]


class IdleWorld:
    """Whether a workload could ever run: a cycle on its world with nothing running and
    nothing else pending admits it (quota and nodes at their most generous). It asks
    the engine, but an engine whose explanations disagree with its own admissions is
    exactly what this catches. Answers are kept per request shape."""

    def __init__(self) -> None:
        self._answers: dict[tuple[object, ...], bool] = {}

    def runs(self, snapshot: ClusterSnapshot, wl: PendingWorkload) -> bool:
        key = (
            id(snapshot.quotas),
            wl.tenant_id,
            wl.pod_sets,
            wl.topology,
            wl.preemptible,
            wl.gang,
        )
        answer = self._answers.get(key)
        if answer is None:
            idle = replace(
                snapshot,
                nodes=tuple(replace(n, free=None, device_used={}) for n in snapshot.nodes),
                running=(),
                pending=(replace(wl, held=(), elastic_of=None, fills_idle=False),),
                usage_history={},
            )
            answer = self._answers[key] = bool(run_cycle(idle).admissions)
        return answer


def never_runs_violations(
    snapshot: ClusterSnapshot, result: CycleResult, idle: IdleWorld
) -> list[str]:
    """Work has a place in line exactly when it could run in its world left idle: the
    rule of model.PendingDecision (docs/admission.md#invariants)."""
    requests = {wl.id: wl for wl in snapshot.pending}
    out = []
    for d in result.pending:
        wl = requests[d.workload_id]
        if wl.fills_idle or wl.elastic_of is not None:
            continue
        runs = idle.runs(snapshot, wl)
        if d.position is not None and not runs:
            out.append(f"{d.workload_id} is at {d.position} but could never run: {d.message}")
        if d.position is None and runs:
            out.append(f"{d.workload_id} has no position but could run: {d.message}")
    return out


def check_cycle(snapshot: ClusterSnapshot, result: CycleResult) -> None:
    """Capacity and quota hold with admissions and victims both still holding GPUs, and
    a tenant's preemptors together stay inside its guarantee."""
    problems = capacity_violations(snapshot, result)
    problems += quota_violations(snapshot, running_after(snapshot, result))
    problems += reclaim_violations(snapshot, result)
    problems += position_violations(snapshot, result)
    assert not problems, problems
    ids = [a.workload_id for a in result.admissions]
    assert len(ids) == len(set(ids))
    pending_ids = {p.workload_id for p in result.pending}
    assert not pending_ids & set(ids)
