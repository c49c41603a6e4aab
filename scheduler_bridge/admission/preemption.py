"""Choosing victims: reclaim of guaranteed quota, and optional priority preemption.

Follows Kueue's classic preemption (pkg/scheduler/preemption): build an ordered list of
candidates, remove them one by one until the preemptor fits, then walk back and keep
every candidate whose return still lets it fit, so that only as few workloads as needed
are stopped. Order:

1. workloads already being evicted (stopping them again costs nothing);
2. reclaim - only for a preemptor whose workload fits inside its tenant's unused
   guarantee: running work of *other* tenants of the same tree that are above their
   guarantee, the most-borrowing tenant first (recomputed after every removal), within
   a tenant lowest priority first, then most recently admitted. A tenant is a candidate
   only while it borrows, so work inside its owner's guarantee is never preempted by
   another tenant. Tidegate goes one step past Kueue here: a first pass takes only
   work that is wholly borrowed (its tenant stays at or above its guarantee), and only
   if that is not enough does a second pass take work straddling the guarantee line;
   minimisation first tries to give back the victims of tenants pushed below their
   guarantee. Otherwise a victim whose tenant was pushed below its guarantee returns to
   the queue with a rightful claim and can beat the reclaimer to the GPUs next cycle;
3. priority (EngineConfig.priority_preemption) - the preemptor's own tenant's running
   work of strictly lower priority.

Non-preemptible workloads are never candidates. Loops cannot form: a reclaimer ends
inside its guarantee, where other tenants cannot touch it, and priority preemption only
goes down in priority.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from .pending import Item, Option
from .placement import Plan
from .state import CycleState, Run


@dataclass(slots=True)
class PreemptionPlan:
    victims: list[Run]
    plan: Plan
    reclaim: bool


class Preemptor:
    """Victim search over one cycle's state. Removals are applied to the state's usage
    while searching and always undone before returning."""

    def __init__(self, state: CycleState) -> None:
        self.state = state

    def plan(self, item: Item, option: Option) -> PreemptionPlan | None:
        st = self.state
        node = item.node
        tree = st.tree
        reclaim = st.config.reclaim and all(
            tree.access[f][node] and tree.within_guarantee(f, node, need, st.usage[f])
            for f, need in option.totals
        )
        priority = st.config.priority_preemption
        if not reclaim and not priority:
            return None
        evicting, others, own = self._candidates(item, option, reclaim, priority)
        if not evicting and not others and not own:
            return None
        search = _Search(st, item, option)
        done = search.take_in_order(sorted(evicting, key=_victim_order))
        flavours = [f for f, _ in option.totals]
        if not done and others:
            done = search.take_reclaim(others, flavours, strict=True)
        if not done and others:
            done = search.take_reclaim(others, flavours, strict=False)
        if not done and own:
            done = search.take_in_order(sorted(own, key=_victim_order))
        if not done:
            search.undo()
            return None
        plan = search.minimise()
        victims = search.victims()
        search.undo()
        return PreemptionPlan(victims, plan, any(v.node != node for v in victims))

    def _candidates(
        self, item: Item, option: Option, reclaim: bool, priority: bool
    ) -> tuple[list[Run], dict[int, list[Run]], list[Run]]:
        st = self.state
        node = item.node
        root = st.tree.root[node]
        seen: set[str] = set()
        evicting: list[Run] = []
        others: dict[int, list[Run]] = {}
        own: list[Run] = []
        for f, _ in option.totals:
            for run in st.runs_by_root.get((root, f), ()):
                if run.claimed or run.wl.id in seen:
                    continue
                seen.add(run.wl.id)
                if run.wl.evicting:
                    evicting.append(run)
                elif not run.wl.preemptible:
                    continue
                elif run.node == node:
                    if priority and run.wl.priority < item.wl.priority:
                        own.append(run)
                elif reclaim:
                    others.setdefault(run.node, []).append(run)
        return evicting, others, own


def _victim_order(run: Run) -> tuple[int, float, str]:
    return run.order


class _Search:
    """Greedy removal then minimisation, on the live usage arrays (undone by ``undo``)."""

    def __init__(self, state: CycleState, item: Item, option: Option) -> None:
        self.st = state
        self.item = item
        self.option = option
        self.removed: list[Run] = []
        self.out: set[str] = set()
        self.extra: dict[tuple[int, int], int] = {}
        self.last_plan: Plan | None = None
        # Victims claimed earlier in this cycle are leaving and their preemptors are
        # already charged: leave their quota out, or a second preemptor of the same
        # cycle would see it counted twice. Their GPUs stay taken (their own preemptor
        # may need them), so only quota is released.
        for run in state.claimed:
            if run.node >= 0:
                state.add_usage(run.node, list(run.totals.items()), -1)

    def _remove(self, run: Run) -> None:
        self.st.add_usage(run.node, list(run.totals.items()), -1)
        for f, j, gpus in run.parts:
            self.extra[(f, j)] = self.extra.get((f, j), 0) + gpus
        self.out.add(run.wl.id)

    def _restore(self, run: Run) -> None:
        self.st.add_usage(run.node, list(run.totals.items()), 1)
        for f, j, gpus in run.parts:
            self.extra[(f, j)] -= gpus
        self.out.discard(run.wl.id)

    def fits(self) -> Plan | None:
        st = self.st
        node = self.item.node
        for f, need in self.option.totals:
            if st.tree.available(f, node, st.usage[f]) < need:
                return None
        pool = st.pool
        caps: dict[int, list[int]] = {}
        for f, need in self.option.totals:
            arr = list(pool.flavours[f].avail)
            for (ef, j), gpus in self.extra.items():
                if ef == f and gpus:
                    arr[j] += gpus
            if sum(arr) < need:
                return None
            caps[f] = arr
        return pool.plan_generic(self.option.needs, self.item.shape.topology, caps)

    def _take(self, run: Run) -> bool:
        self._remove(run)
        self.removed.append(run)
        self.last_plan = self.fits()
        return self.last_plan is not None

    def take_in_order(self, runs: list[Run]) -> bool:
        return any(self._take(run) for run in runs)

    def take_reclaim(self, others: dict[int, list[Run]], flavours: list[int], strict: bool) -> bool:
        """Most-borrowing tenant first, recomputed after every removal. ``strict`` only
        takes work that leaves its tenant at or above its guarantee (work wholly
        borrowed); the second, Kueue-like pass also takes work straddling the guarantee
        line, as long as its tenant borrows when it is taken."""
        st = self.st
        guaranteed = st.tree.guaranteed
        label = st.tree.label
        usage = st.usage

        def borrowed(tenant: int) -> int:
            return sum(max(0, usage[f][tenant] - guaranteed[f][tenant]) for f in flavours)

        def eligible(run: Run, tenant: int) -> bool:
            mine = [f for f in run.totals if f in flavours]
            if not any(usage[f][tenant] > guaranteed[f][tenant] for f in mine):
                return False
            return not strict or all(
                usage[f][tenant] - run.totals[f] >= guaranteed[f][tenant] for f in mine
            )

        queues = {
            tenant: sorted((r for r in runs if r.wl.id not in self.out), key=_victim_order)
            for tenant, runs in others.items()
        }
        position = dict.fromkeys(queues, 0)
        heap = [(-borrowed(t), label[t], t) for t in queues if borrowed(t) > 0]
        heapq.heapify(heap)
        while heap:
            _, _, tenant = heapq.heappop(heap)
            runs = queues[tenant]
            i = position[tenant]
            taken = False
            while i < len(runs) and not taken:
                run = runs[i]
                i += 1
                taken = eligible(run, tenant)
                if taken and self._take(run):
                    return True
            position[tenant] = i
            if taken and i < len(runs) and borrowed(tenant) > 0:
                heapq.heappush(heap, (-borrowed(tenant), label[tenant], tenant))
        return False

    def minimise(self) -> Plan:
        """Walk back over the removed candidates and return every one whose return still
        lets the preemptor fit (Kueue's minimisation). First the victims of tenants the
        removals pushed below their guarantee, so that a reclaim takes from what others
        borrow rather than from their guarantees whenever a choice exists; then the
        rest, last removed first. Returning a candidate only raises its tenant's usage,
        so the "still borrowing" test every later candidate passed still holds."""
        plan = self.last_plan
        assert plan is not None
        dipped = [run for run in reversed(self.removed) if self._below_guarantee(run)]
        others = [run for run in reversed(self.removed) if run not in dipped]
        for run in dipped + others:
            self._restore(run)
            again = self.fits()
            if again is None:
                self._remove(run)
            else:
                plan = again
        return plan

    def _below_guarantee(self, run: Run) -> bool:
        if run.node == self.item.node or run.node < 0:
            return False
        usage = self.st.usage
        guaranteed = self.st.tree.guaranteed
        return any(usage[f][run.node] < guaranteed[f][run.node] for f in run.totals)

    def victims(self) -> list[Run]:
        return [run for run in self.removed if run.wl.id in self.out]

    def undo(self) -> None:
        for run in self.removed:
            if run.wl.id in self.out:
                self._restore(run)
        for run in self.st.claimed:
            if run.node >= 0:
                self.st.add_usage(run.node, list(run.totals.items()), 1)
