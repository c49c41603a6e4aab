"""Reservations for starving large gangs, and the backfill rule around them.

Without reservations a gang of 32 GPUs can wait forever in a stream of 1-GPU jobs: each
time a GPU frees up, a small job takes it. Slurm's backfill scheduler answers with a
reservation for the top job at its earliest possible start and lets other jobs run in
the hole only if they end before that start. Tidegate does the same for any gang of at
least ``reservation_min_gpus`` that has waited ``reservation_wait_s``:

* at the start of each cycle, before anything is admitted, starving gangs (in queue
  order, at most ``max_reservations``) get the placement that becomes possible earliest,
  judging from when running work should end (its declared max run time, else
  ``assumed_run_time_s``); the GPUs of that placement that are free now are blocked;
* blocked GPUs may be used by the gang itself, or by work whose declared max run time
  ends before the reservation's expected start (backfill);
* a gang that starts gives up its reservation; GPUs it held but did not use are free
  again from the next cycle on;
* a reservation never outranks a guarantee: work inside its tenant's guarantee may use
  the GPUs held for a gang that borrows (otherwise a starving borrower would hold, cycle
  after cycle, the GPUs an owner keeps reclaiming - a preemption loop).

Reservations are recomputed every cycle from the snapshot, so they need no storage and
follow the cluster as it changes; a reservation whose start is unknown blocks without
allowing backfill.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from .pending import Item, Option
from .placement import Plan
from .state import CycleState, ReservationEntry


def reserve_for_starving(state: CycleState, items: Sequence[Item]) -> None:
    """Give starving gangs their reservations (see the module docstring), the first
    ``max_reservations`` of them in the order the cycle starts work: guarantee class,
    priority, share, arrival (Item.seq ranks submission, then id)."""
    config = state.config
    starving = [
        item
        for item in items
        if item.node >= 0
        and item.shape.options
        and item.wl.gang
        and not item.wl.opportunistic
        and item.shape.gpus >= config.reservation_min_gpus
        and state.now - item.wl.submitted_at >= config.reservation_wait_s
    ]
    shares: dict[int, float] = {}  # per tenant, as the cycle starts
    keyed: list[tuple[int, int, float, int, Item]] = []
    for item in starving:
        if item.wl.id in state.reservation_of:
            continue
        node = item.node
        share = shares.get(node)
        if share is None:
            share = shares[node] = state.share(node)
        cls = state.guarantee_class(node, item.shape)
        keyed.append((cls, -item.wl.priority, share, item.seq, item))  # (seq: no ties)
    excluded: set[tuple[int, int]] = set()
    for first in heapq.nsmallest(config.max_reservations, keyed):
        item = first[4]
        for option in item.shape.options:
            if not state.quota_fits(item.node, option.totals):
                continue
            found = _earliest(state, item, option, excluded)
            if found is None:
                continue
            plan, start = found
            inside = all(
                state.usage[f][item.node] + need <= state.tree.guaranteed[f][item.node]
                for f, need in option.totals
            )
            if not item.shape.may_borrow and not state.pinned_fits(item.node, option.totals):
                continue  # it would never start there: no room left in the guarantee
            entry = ReservationEntry(
                item.wl.id, item.wl.tenant_id, option.index, plan, start, 0 if inside else 1
            )
            for f, j, gpus in plan:
                fn = state.pool.flavours[f]
                blocked = min(fn.avail[j], gpus)
                if blocked > 0:
                    fn.set_avail(j, fn.avail[j] - blocked)
                    entry.blocked[(f, j)] = blocked
                # one reservation per node: a second would count the same releases twice
                excluded.add((f, j))
            state.reservations.append(entry)
            state.reservation_of[item.wl.id] = entry
            item.holder = True
            break


def hold_for_preemptors(state: CycleState, items: Sequence[Item]) -> None:
    """Hold, for each workload that preempted in the previous cycle, the GPUs its plan
    named (``PendingWorkload.held``) that are free now: before reservations and the main
    pass, so nothing queued ahead of it takes what its victims freed. Only it may use
    them; whatever it leaves unused is free again from the next cycle (``release``)."""
    pool = state.pool
    names = state.static
    for item in items:
        held = item.wl.held
        if not held or item.node < 0 or not item.shape.options:
            continue
        plan: list[tuple[int, int, int]] = []
        for placement in held:
            f = names.flavour_index.get(placement.flavour)
            n = names.node_index.get(placement.node)
            if f is None or n is None:
                continue
            j = pool.local[f][n]
            if j >= 0 and placement.gpus > 0:
                plan.append((f, j, placement.gpus))
        flavours = {f for f, _, _ in plan}
        option = next((o for o in item.shape.options if set(o.flavours) == flavours), None)
        if option is None:
            continue
        _hold_quota(state, item, option)
        entry = ReservationEntry(
            item.wl.id, item.wl.tenant_id, option.index, plan, None, 0, hold=True
        )
        for f, j, gpus in plan:
            fn = pool.flavours[f]
            blocked = min(fn.avail[j], gpus)
            if blocked > 0:
                fn.set_avail(j, fn.avail[j] - blocked)
                entry.blocked[(f, j)] = entry.blocked.get((f, j), 0) + blocked
        state.reservations.append(entry)
        state.reservation_of[item.wl.id] = entry
        item.holder = True


def _hold_quota(state: CycleState, item: Item, option: Option) -> None:
    """A reclaimer whose victims stopped has its quota charged before anyone is tried,
    as its GPUs are held: other tenants' work inside their guarantees would otherwise
    spend the quota its victims gave back (the victims' own requeued work among them)
    and leave it waiting for another reclaim. The charge is released when its turn
    comes (engine._Cycle._visit), or at the end of the main pass."""
    node = item.node
    tree = state.tree
    parent = tree.parent[node]
    if parent < 0:
        return  # a tree of one tenant: nobody else draws on its quota
    for f, need in option.totals:
        if state.rigid_usage(f, node) + need > tree.guaranteed[f][node]:
            return  # not a reclaimer (it borrows): no claim on anyone's quota
        if not tree.access[f][node] or tree.available(f, node, state.usage[f]) < need:
            return
    # charged above the tenant only: its own guarantee still shows the room it is owed,
    # so it keeps its place in line as work inside its guarantee
    charges = tuple(
        (f, tree.carried_up(f, node, need, state.usage[f])) for f, need in option.totals
    )
    for f, gpus in charges:
        tree.add(f, parent, gpus, state.usage[f])
    state.quota_held[item.wl.id] = (parent, charges)


def _earliest(
    state: CycleState, item: Item, option: Option, excluded: set[tuple[int, int]]
) -> tuple[Plan, float] | None:
    """Placement at the earliest time it becomes possible, by binary search over the
    sorted expected ends of running work (possible-ness only grows with time)."""
    pool = state.pool
    flavours = [f for f, _ in option.totals]
    base: dict[int, list[int]] = {}
    for f in flavours:
        arr = list(pool.flavours[f].avail)
        for ef, j in excluded:
            if ef == f:
                arr[j] = 0
        base[f] = arr
    topology = item.shape.topology
    plan = pool.plan_generic(option.needs, topology, base)
    if plan is not None:
        return plan, state.now
    releases = sorted(
        (run.end, run.wl.id, f, j, gpus)
        for f in flavours
        for run in state.runs_by_flavour.get(f, ())
        if not run.claimed
        for rf, j, gpus in run.parts
        if rf == f and (f, j) not in excluded
    )

    def plan_at(k: int) -> Plan | None:
        caps = {f: list(arr) for f, arr in base.items()}
        for _, _, f, j, gpus in releases[:k]:
            caps[f][j] += gpus
        return pool.plan_generic(option.needs, topology, caps)

    if not releases or plan_at(len(releases)) is None:
        return None
    low, high = 1, len(releases)
    while low < high:
        middle = (low + high) // 2
        if plan_at(middle) is None:
            low = middle + 1
        else:
            high = middle
    found = plan_at(low)
    assert found is not None
    return found, releases[low - 1][0]


def backfill_overlay(
    state: CycleState, item: Item, cls: int
) -> tuple[dict[tuple[int, int], int], list[ReservationEntry], bool]:
    """Blocked GPUs ``item`` (queued with guarantee class ``cls``) may use: its own
    reservation's, those of reservations of borrowing gangs if it is inside its
    guarantee, and those of reservations it would finish before (declared max run time
    only). The flag says whether any of them is usable only as backfill."""
    extra: dict[tuple[int, int], int] = {}
    sources: list[ReservationEntry] = []
    backfill = False
    own = state.reservation_of.get(item.wl.id)
    runtime = item.wl.max_run_time_s
    for entry in state.reservations:
        if not entry.blocked:
            continue
        outranks = entry is own or entry.cls > cls
        ends_before = (
            runtime is not None
            and entry.expected_start is not None
            and state.now + runtime <= entry.expected_start
        )
        if outranks or ends_before:
            sources.append(entry)
            backfill |= not outranks
            for key, gpus in entry.blocked.items():
                extra[key] = extra.get(key, 0) + gpus
    return extra, sources, backfill


def consume(
    state: CycleState,
    plan: Plan,
    sources: Sequence[ReservationEntry],
    covered: dict[tuple[int, int], int] | None = None,
) -> None:
    """Commit a plan made with an overlay: GPUs ``covered`` otherwise (a preemptor's
    victims) first, then free GPUs, then blocked ones."""
    pool = state.pool
    for f, j, gpus in plan:
        if covered:
            gpus -= min(gpus, covered.get((f, j), 0))
        fn = pool.flavours[f]
        from_free = min(fn.avail[j], gpus)
        fn.set_avail(j, fn.avail[j] - from_free)
        left = gpus - from_free
        for entry in sources:
            if left == 0:
                break
            held = entry.blocked.get((f, j), 0)
            used = min(held, left)
            if used:
                entry.blocked[(f, j)] = held - used
                left -= used


def release(state: CycleState, entry: ReservationEntry) -> None:
    """Drop a reservation (its gang started, perhaps on other GPUs or another flavour).
    Blocked GPUs it did not use stay out of reach until the next cycle, which finds them
    free: handing them back now would let capacity grow within the cycle, and a group
    that failed before the release would then be wrongly failed (or skipped) with it."""
    for key, gpus in entry.blocked.items():
        if gpus:
            state.released[key] = state.released.get(key, 0) + gpus
    entry.blocked.clear()
    state.reservations.remove(entry)
    state.reservation_of.pop(entry.workload_id, None)
