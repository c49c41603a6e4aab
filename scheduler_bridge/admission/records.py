"""Turning the engine's internal decisions into the output dataclasses.

Internally placements are (flavour index, local node index, GPUs) and tenants are tree
nodes; the outside world wants names. Kept apart from the cycle so that engine.py reads
as the algorithm only.
"""

from __future__ import annotations

from . import reasons
from .model import AdmitCode, Placement, Preemption, PreemptionCode, Reservation
from .pending import Item, Option
from .placement import Plan
from .state import CycleState, ReservationEntry, Run


def placements(state: CycleState, plan: Plan) -> tuple[Placement, ...]:
    """Named placements, sorted by node then flavour."""
    pool = state.pool
    names = state.static.flavour_names
    out = [
        Placement(pool.names[pool.flavours[f].members[j]], names[f], gpus)
        for f, j, gpus in plan
        if gpus
    ]
    out.sort(key=lambda p: (p.node, p.flavour))
    return tuple(out)


def admission_words(
    state: CycleState,
    item: Item,
    option: Option,
    borrowed: dict[str, int],
    via: AdmitCode | None,
    sources: list[ReservationEntry],
) -> tuple[AdmitCode, str]:
    """Code and message of an admission (call after the usage was charged)."""
    if via is AdmitCode.BACKFILL:
        owner = next((s.workload_id for s in sources), "?")
        return via, reasons.admitted_backfill(owner)
    node = item.node
    f, _ = option.totals[0]
    used = state.usage[f][node]
    guaranteed = state.tree.guaranteed[f][node]
    if not item.shape.may_borrow:
        name = state.static.flavour_names[f]
        pinned = state.pinned[f][node]
        return AdmitCode.WITHIN_GUARANTEE, reasons.admitted_pinned(name, pinned, guaranteed)
    if borrowed:
        root = state.tree.label[state.tree.root[node]]
        name = next(iter(borrowed))
        message = reasons.admitted_borrowing(name, borrowed[name], used, guaranteed, root)
        return AdmitCode.BORROWING, message
    name = state.static.flavour_names[f]
    return AdmitCode.WITHIN_GUARANTEE, reasons.admitted_within(name, used, guaranteed)


def preemption(state: CycleState, item: Item, victim: Run, f: int) -> Preemption:
    """The record of one victim stopped for ``item`` (reclaim or priority)."""
    wl = victim.wl
    flavour = state.static.flavour_names[f]
    if victim.node != item.node:
        borrowed = state.usage[f][victim.node] - state.tree.guaranteed[f][victim.node]
        message = reasons.preempted_reclaim(
            item.wl.id, item.wl.tenant_id, wl.tenant_id, flavour, max(0, borrowed)
        )
        code = PreemptionCode.RECLAIM
    else:
        message = reasons.preempted_priority(item.wl.id, item.wl.priority, wl.priority)
        code = PreemptionCode.PRIORITY
    return Preemption(
        victim_id=wl.id,
        victim_tenant_id=wl.tenant_id,
        preemptor_id=item.wl.id,
        preemptor_tenant_id=item.wl.tenant_id,
        flavour=flavour,
        code=code,
        message=message,
    )


def reservation(state: CycleState, entry: ReservationEntry) -> Reservation:
    blocked = [(f, j, gpus) for (f, j), gpus in entry.blocked.items() if gpus]
    return Reservation(
        workload_id=entry.workload_id,
        tenant_id=entry.tenant_id,
        placements=placements(state, entry.plan),
        blocked=placements(state, blocked),
        expected_start=entry.expected_start,
    )
