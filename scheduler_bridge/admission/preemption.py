"""Choosing victims: reclaim of guaranteed quota, and optional priority preemption.

Follows Kueue's classic preemption (pkg/scheduler/preemption): build an ordered list of
candidates, remove them one by one until the preemptor fits, then walk back and keep
every candidate whose return still lets it fit, so that only as few workloads as needed
are stopped. Order:

0. for a preemptor inside its guarantee: what this cycle's victims in its tree free
   beyond their own preemptors' needs (CycleState.spare): taking it over stops no one
   more. Several small reclaimers of one cycle would otherwise each stop a different
   large workload for GPUs one of them frees anyway;
1. workloads already being evicted (stopping them again costs nothing);
1b. elastic pods (RunningWorkload.elastic_of) and work that fills idle GPUs
   (``fills_idle``, e.g. low-priority shares in the fragments of shared GPUs), for a
   preemptor inside its guarantee:
   any tenant's of the same tree, its own included, the most-borrowing tenant first,
   then most recently started. Shrinking a workload keeps its core running, so reclaim
   shrinks before it preempts; minimisation gives whole workloads back first. A
   tenant's elastic pods do not count against its guarantee (state.py): its rigid work
   inside the guarantee takes them back like anyone's;
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
   the queue with a rightful claim and can beat the reclaimer to the GPUs next cycle.
   Work younger than ``EngineConfig.reclaim_min_run_s`` is protected: it counts as the
   tenant's borrowing first, so the tenant has that much less to give back (state.py).
   A preemptor submitted less than ``EngineConfig.reclaim_wait_s`` ago takes no whole
   workload of another tenant: it waits for GPUs to free on their own, which it gets
   before any borrower (it queues as guaranteed work); only spare victim GPUs, elastic
   pods and evicting work are taken in that time (``Preemptor.wait_until`` tells the engine when to try
   again);
3. priority (EngineConfig.priority_preemption) - the preemptor's own tenant's running
   work of strictly lower priority, if that makes the preemptor fit inside its
   tenant's guarantee; such a preemptor may then also reclaim (2.) what its tenant
   lent, its own lower-priority work taken first.

Every preemptor must end inside its guarantee. Next cycle it is then guaranteed work,
which queues before borrowing work and, within its tenant, before the lower-priority
work it displaced: the GPUs it freed cannot go back to its victims.

Non-preemptible workloads are never candidates. Loops cannot form: a reclaimer ends
inside its guarantee, where other tenants cannot touch it, and priority preemption only
goes down in priority.

Whether a tenant borrows is judged on the "victim view": the usage of the work that was
running when the cycle started, minus the victims already chosen. Work admitted in the
same cycle does not make a tenant's older work a victim, and two preemptors of one cycle
never count the same victim twice.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from .model import Topology
from .pending import Item, Option
from .placement import Plan
from .state import CycleState, Run

SPARE_TRIED: Final = 4  # spare victim GPUs tried per search (Preemptor._spare)
NO_TENANTS: Final[frozenset[int]] = frozenset()
TAKEN_WHOLE_FROM: Final = 4  # elastic pod lists this long are first tried whole (take_in_order)


@dataclass(slots=True)
class PreemptionPlan:
    victims: list[Run]
    plan: Plan
    reclaim: bool


@dataclass(slots=True)
class _Index:
    """Running work of one (tree, flavour) that may ever be a victim, each list in
    victim order; built once per cycle, claimed runs are skipped when read."""

    evicting: list[Run]
    by_tenant: dict[int, list[Run]]
    smallest: dict[int, int]  # per tenant, its smallest preemptible workload


@dataclass(slots=True)
class _StrictOrder:
    """The tenants a strict reclaim pass of one tree and flavour starts from, sorted
    (a heap already), kept between the cycle's reclaims: ``dirty`` tenants had work
    claimed since, and are placed again before the next reclaim reads it."""

    entries: list[tuple[int, str, int]]  # (guarantee - usage, label, tenant)
    by_tenant: dict[int, tuple[int, str, int]]
    dirty: set[int]


def _victim_order(run: Run) -> tuple:
    return run.order


class Preemptor:
    """Victim search over one cycle's state. A search removes candidates from the quota
    usage (to test whether the preemptor then fits) and from the victim view (to test
    whether their tenant still borrows), and undoes both before returning."""

    def __init__(self, state: CycleState) -> None:
        self.state = state
        self._indexes: dict[tuple[int, int], _Index] = {}
        # when the last plan left other tenants' borrowed work alone because the
        # preemptor was still in its reclaim wait: the end of that wait (else None)
        self.wait_until: float | None = None
        # (workload node, flavour) -> the smallest need a reclaim found out of quota's
        # reach with every candidate it could take gone; capacity only shrinks within a
        # cycle, so a need as large fails there again - until a nomination records
        # usage its victims will take off (CycleState.taken_from, which a search reads
        # as gone) or a returning reclaimer's held quota is released for its turn
        self._quota_misses: dict[tuple[int, int], int] = {}
        self._misses_version = 0  # CycleState.taken_version they were found under
        # (tree, flavour, spare victim GPUs tried) -> the usage left at the tree's root
        # by a reclaim that took every candidate it could take: the least any reclaim
        # of one flavour there with those spare GPUs can leave until the candidates
        # change (a nomination) or quota is given back (forget_quota_misses). Many
        # tenants of a tree fail alike once this cycle's admissions fill its quota:
        # each would take the same victims in vain.
        self._root_floors: dict[tuple[int, int, tuple[Run, ...]], int] = {}
        # (workload node, flavour) -> the private quota on its path below the root
        self._private_on_path: dict[tuple[int, int], int] = {}
        # (tree, flavour) -> where strict reclaim passes start (_Search.take_reclaim)
        self._strict_orders: dict[tuple[int, int], _StrictOrder] = {}

    def _index(self, root: int, f: int) -> _Index:
        index = self._indexes.get((root, f))
        if index is None:
            evicting: list[Run] = []
            by_tenant: dict[int, list[Run]] = {}
            for run in self.state.runs_by_root.get((root, f), ()):
                if run.wl.evicting:
                    evicting.append(run)
                elif run.wl.preemptible:
                    by_tenant.setdefault(run.node, []).append(run)
            evicting.sort(key=_victim_order)
            smallest: dict[int, int] = {}
            for tenant, runs in by_tenant.items():
                runs.sort(key=_victim_order)
                smallest[tenant] = min(r.totals[f] for r in runs)
            index = self._indexes[(root, f)] = _Index(evicting, by_tenant, smallest)
        return index

    def forget(self, victims: list[Run]) -> None:
        """Victims were claimed: drop them from the candidate lists (and keep each
        tenant's smallest workload accurate, which the strict pass filters on)."""
        self._root_floors.clear()  # the candidates change
        claimed = {run.node for run in victims if run.spare_of is None}
        for order in self._strict_orders.values():
            order.dirty.update(claimed)  # (they borrow less now)
        for run in victims:
            if run.spare_of is not None:
                continue  # its victim was forgotten when it was claimed
            for f in run.totals:
                index = self._indexes.get((run.root, f))
                if index is None:
                    continue
                if run.wl.evicting:
                    index.evicting = [r for r in index.evicting if r is not run]
                    continue
                runs = index.by_tenant.get(run.node)
                if runs is not None and run in runs:
                    runs.remove(run)
                    index.smallest[run.node] = min((r.totals[f] for r in runs), default=0)

    def plan(self, item: Item, option: Option) -> PreemptionPlan | None:
        st = self.state
        self.wait_until = None
        node = item.node
        tree = st.tree
        within = all(
            tree.access[f][node] and st.rigid_usage(f, node) + need <= tree.guaranteed[f][node]
            for f, need in option.totals
        )
        if not (st.config.reclaim and within) and not st.config.priority_preemption:
            return None
        root = tree.root[node]
        flavours = [f for f, _ in option.totals]
        indexes = [self._index(root, f) for f in flavours]
        own = self._own(item, option, indexes, within) if st.config.priority_preemption else []
        # inside its guarantee once its own lower-priority work is gone (_own): it may
        # then take back what its tenant lent as well, as Kueue's reclaimWithinCohort
        # with withinClusterQueue: LowerPriority does
        reclaim = st.config.reclaim and (within or bool(own))
        if not reclaim and not own:
            return None
        evicting = _merge([[r for r in ix.evicting if not r.claimed] for ix in indexes])
        # tenants to reclaim from (any order: take_reclaim's heap decides), the
        # preemptor's own among them on one flavour
        borrowers: Collection[int] = ()
        if reclaim:
            if len(flavours) == 1:
                # the live set, not a copy. It is read after removals too (whether
                # anyone is left to reclaim from, the second pass), but a removal only
                # drops a tenant that no longer borrows, which take_reclaim leaves out
                # anyway; nothing changes it while take_reclaim builds its heap
                live = st.borrowers.get((root, flavours[0]), NO_TENANTS)
                if len(live) > 1 or (live and node not in live):
                    borrowers = live
            else:
                found: set[int] = set()
                for f in flavours:
                    found.update(st.borrowers.get((root, f), ()))
                found.discard(node)
                borrowers = found
            wait_ends = item.wl.submitted_at + st.config.reclaim_wait_s
            if borrowers and st.now < wait_ends:  # GPUs may yet free on their own
                borrowers = ()
                self.wait_until = wait_ends
        # a reclaim's candidates depend on the node and flavour alone (without priority
        # preemption, and out of the reclaim wait): its quota misses can be remembered
        remember = reclaim and not own and self.wait_until is None
        if remember and self._quota_missed(node, option):
            return None
        spare = self._spare(root, option) if reclaim else []
        if remember and len(flavours) == 1 and self._root_floor_missed(root, node, option, spare):
            return None
        # the tree's elastic pods, looked up only when no spare victim GPUs do (taking
        # those leaves the victim view, which orders the pods, as it was)
        elastic: list[Run] = []
        if not spare:
            elastic = self._elastic(root, flavours) if reclaim else []
            if not evicting and not elastic and not borrowers and not own:
                return None
        search = _Search(st, item, option)
        done = bool(spare) and search.take_in_order(spare)
        if not done:
            if spare:
                elastic = self._elastic(root, flavours)
            done = search.take_in_order(evicting)
        if not done and elastic:
            done = search.take_in_order(elastic, whole_first=True)
        if not done and own and not within:
            # its own first: only without them does the reclaim stay inside the guarantee
            done = search.take_in_order(own)
        if not done and borrowers:
            queues: dict[int, list[Run]] = {}
            # (a reclaim that may take its own tenant's work reads that tenant as it
            # is, not as the kept order has it)
            orders = self._strict_orders if not own else None
            done = search.take_reclaim(
                borrowers, indexes, queues, flavours, strict=True, orders=orders
            )
            if not done:
                done = search.take_reclaim(borrowers, indexes, queues, flavours, strict=False)
        if not done and own and within:
            done = search.take_in_order(own)
        if not done:
            if remember:
                self._note_quota_misses(search)
                if len(flavours) == 1:
                    self._note_root_floor(root, flavours[0], node, spare)
            search.undo()
            return None
        plan = search.minimise()
        victims = search.victims()
        search.undo()
        return PreemptionPlan(victims, plan, any(v.node != node for v in victims))

    def _spare(self, root: int, option: Option) -> list[Run]:
        """Spare victim GPUs worth a try (CycleState.spare): those of a victim that
        frees at least the option's whole need on its flavours, the first few only. A
        need that only several leftovers together could cover stops a workload of its
        own: walking every scrap of every victim of a deep queue's cycle would cost far
        more than it saves."""
        return self.state.spare_covering(root, option.totals, SPARE_TRIED)

    def _quota_missed(self, node: int, option: Option) -> bool:
        if self._misses_version != self.state.taken_version:
            self._quota_misses.clear()
            self._misses_version = self.state.taken_version
        misses = self._quota_misses
        for f, need in option.totals:
            missed_at = misses.get((node, f))
            if missed_at is not None and need >= missed_at:
                return True
        return False

    def _note_quota_misses(self, search: _Search) -> None:
        """The search failed with every candidate taken: remember each flavour whose
        quota the preemptor still could not reach."""
        node = search.item.node
        for f, need in search.option.totals:
            if not search.quota_fits(f, need):
                key = (node, f)
                self._quota_misses[key] = min(self._quota_misses.get(key, need), need)

    def forget_quota_misses(self, node: int) -> None:
        """``node``'s quota grew back for a moment (a returning reclaimer's held quota
        released for its own turn): its remembered misses no longer hold, nor does any
        tree's floor."""
        for f in range(len(self.state.usage)):
            self._quota_misses.pop((node, f), None)
        self._root_floors.clear()

    def _note_root_floor(self, root: int, f: int, node: int, spare: list[Run]) -> None:
        """A reclaim on ``f`` alone failed with every candidate taken (and not yet
        given back): record the usage it left at the root. Any later reclaim of the
        tree on ``f`` alone trying the same spare victim GPUs, out of its reclaim wait
        and without priority preemption, takes a subset of the same candidates (those
        spare GPUs, the evicting work and elastic pods of the tree, and of every
        borrowing tenant but itself the same runs, each tenant's taken by its own
        figures alone), so it leaves at least that much there for as long as no
        nomination changes the candidates and no quota is given back: within a cycle
        usage otherwise only grows, and what a removal carries up the tree grows with
        it. The failed preemptor's own runs were not among its candidates, but they
        are no one else's either: inside its guarantee, its tenant does not borrow
        once its elastic pods are out."""
        left = self.state.usage[f][root]
        key = (root, f, tuple(spare))
        self._root_floors[key] = max(self._root_floors.get(key, left), left)

    def _root_floor_missed(self, root: int, node: int, option: Option, spare: list[Run]) -> bool:
        """Whether a reclaim of ``option`` (one flavour) is bound to fail on quota: its
        tenant could be given at most what the root has left above the floor plus the
        private quota along its path (QuotaTree.available adds no more than that below
        the root), and that is less than it needs."""
        if not self._root_floors:
            return False
        f, need = option.totals[0]
        floor = self._root_floors.get((root, f, tuple(spare)))
        if floor is None:
            return False
        tree = self.state.tree
        private = self._private_on_path.get((node, f))
        if private is None:
            below = tree.paths[node][:-1]
            private = self._private_on_path[(node, f)] = sum(tree.private[f][n] for n in below)
        if tree.quota[f][root] - floor + private >= need:
            return False
        misses = self._quota_misses  # (as the search would have found)
        misses[(node, f)] = min(misses.get((node, f), need), need)
        return True

    def _elastic(self, root: int, flavours: list[int]) -> list[Run]:
        """Elastic pods of the tree on ``flavours``, most-borrowing tenant first (as the
        cycle started), then most recently started."""
        st = self.state
        view = st.victim_view
        guaranteed = st.tree.guaranteed
        found: dict[str, Run] = {}
        for f in flavours:
            for run in st.opportunistic_by_root.get((root, f), ()):
                if not run.claimed and not run.wl.evicting:
                    found.setdefault(run.wl.id, run)

        def order(run: Run) -> tuple[int, int, float, str]:
            borrowed = sum(max(0, view[f][run.node] - guaranteed[f][run.node]) for f in flavours)
            return (-borrowed, run.order[0], run.order[1], run.order[2])

        return sorted(found.values(), key=order)

    def _own(self, item: Item, option: Option, indexes: list[_Index], within: bool) -> list[Run]:
        """The tenant's own lower-priority work, if stopping all of it could bring the
        preemptor inside its guarantee."""
        node = item.node
        priority = item.wl.priority
        own = _merge(
            [
                [
                    r
                    for r in ix.by_tenant.get(node, [])
                    if not r.claimed and r.wl.priority < priority
                ]
                for ix in indexes
            ]
        )
        if not own or within:
            return own
        st = self.state
        for f, need in option.totals:
            freeable = sum(r.totals.get(f, 0) for r in own)
            if st.usage[f][node] - freeable + need > st.tree.guaranteed[f][node]:
                return []
        return own


def _merge(lists: list[list[Run]]) -> list[Run]:
    """One list in victim order without duplicates (a run may use several flavours)."""
    if len(lists) == 1:
        return lists[0]
    seen: dict[str, Run] = {}
    for runs in lists:
        for run in runs:
            seen.setdefault(run.wl.id, run)
    return sorted(seen.values(), key=_victim_order)


def _closed_to(state: CycleState, item: Item) -> list[set[int]]:
    """Per flavour, the nodes of every reservation plan ``item`` may not use: not its
    own, not one of a borrowing gang (a preemptor ends inside its guarantee, and
    reservations never outrank guarantees), and not one it would finish before
    (backfill)."""
    closed: list[set[int]] = [set() for _ in state.usage]
    runtime = item.wl.max_run_time_s
    for entry in state.reservations:
        if entry.workload_id == item.wl.id or entry.cls > 0:
            continue
        start = entry.expected_start
        if runtime is not None and start is not None and state.now + runtime <= start:
            continue
        for f, j, _ in entry.plan:
            closed[f].add(j)
    return closed


class _Search:
    """Greedy removal then minimisation (undone by ``undo``)."""

    def __init__(self, state: CycleState, item: Item, option: Option) -> None:
        self.st = state
        self.item = item
        self.option = option
        self.removed: list[Run] = []
        self.out: set[str] = set()
        # GPUs the preemptor may use besides free ones: those its victims hold, and
        # those reserved for borrowing gangs (a preemptor ends inside its guarantee,
        # and reservations never outrank guarantees)
        # (per flavour: local node -> GPUs)
        self.extra: list[dict[int, int]] = state.borrowing_holds()
        # Nodes where a reservation the preemptor may not use is waiting for GPUs to be
        # released: what a victim frees there is the gang's, not the preemptor's, so a
        # preemption for it would stop work for nothing (and the victim, back in the
        # queue, would backfill there again: a loop)
        self.closed = _closed_to(state, item)
        # lists take_in_order took whole (each in removal order), for minimise
        self.taken_whole: list[list[Run]] = []
        # a fit test that is exact and only grows with removals (take_in_order)
        shape = item.shape
        self.simple = shape.simple and shape.topology is not Topology.ONE_DOMAIN
        self.seen_gone: list[tuple[int, int, int]] = []  # (flavour, tree node, GPUs)
        # tree nodes _see_gone already adjusted (with each of them, all above it),
        # flagged in CycleState.level_seen until undo
        self.seen_levels: list[int] = []
        if state.taken_version:
            self._see_gone(item.node)

    def _see_gone(self, node: int) -> None:
        """Usage on ``node``'s path as it will be once this cycle's earlier victims have
        stopped (CycleState.taken_from), for the length of this search: a preemptor
        taking from a tenant that already gave up work must see what that tenant still
        holds, or a victim's stop looks like it frees more of the cohort than it will
        (the part falling back into its tenant's private guarantee counted twice).
        Levels where victims and their preemptors meet keep both: there the view only
        errs on the safe side. ``undo`` puts the usage back."""
        st = self.st
        flags = st.level_seen
        taken = st.taken_from
        usage = st.usage
        for n in st.tree.paths[node]:
            if flags[n]:  # and so is every level above it
                return
            flags[n] = True
            self.seen_levels.append(n)
            level = taken[n]
            if level is not None:
                for f, gpus in level.items():
                    if gpus:
                        usage[f][n] -= gpus
                        self.seen_gone.append((f, n, gpus))

    def _remove(self, run: Run) -> None:
        # (a victim's spare part left the victim view when the victim was claimed)
        in_view = run.spare_of is None
        if run.node >= 0:
            if self.st.taken_version:
                self._see_gone(run.node)
            for f, gpus in run.totals.items():
                self.st.tree.add(f, run.node, -gpus, self.st.usage[f])
                if in_view:
                    self.st.add_victim_view(run.node, f, -gpus)
        closed, extra = self.closed, self.extra
        for f, j, gpus in run.parts:
            if j not in closed[f]:
                room = extra[f]
                room[j] = room.get(j, 0) + gpus
        self.out.add(run.wl.id)

    def _restore(self, run: Run) -> None:
        in_view = run.spare_of is None
        if run.node >= 0:
            for f, gpus in run.totals.items():
                self.st.tree.add(f, run.node, gpus, self.st.usage[f])
                if in_view:
                    self.st.add_victim_view(run.node, f, gpus)
        closed, extra = self.closed, self.extra
        for f, j, gpus in run.parts:
            if j not in closed[f]:
                extra[f][j] -= gpus
        self.out.discard(run.wl.id)

    def quota_fits(self, f: int, need: int) -> bool:
        # every preemptor ends inside its guarantee (Kueue: reclaimWithinCohort and
        # withinClusterQueue both ask the preemptor to fit its nominal quota); so it
        # queues as guaranteed work next cycle, ahead of any victim it displaced
        st = self.st
        node = self.item.node
        usage = st.usage[f]
        if usage[node] + need > st.tree.guaranteed[f][node]:
            return False
        return st.tree.available(f, node, usage) >= need

    def fits(self) -> bool:
        for f, need in self.option.totals:
            if not self.quota_fits(f, need):
                return False
        if self.simple:
            return self._fits_simple()
        return self.plan() is not None

    def _fits_simple(self) -> bool:
        """Exact and cheap for one pod set spread or on one node: the histogram of free
        GPUs plus what the removed candidates free on their nodes."""
        f, count, per_pod = self.option.needs[0]
        fn = self.st.pool.flavours[f]
        avail = fn.avail
        if self.item.shape.topology is Topology.ONE_NODE:
            best = fn.largest_free()
            for j, gpus in self.extra[f].items():
                if gpus and avail[j] + gpus > best:
                    best = avail[j] + gpus
            return best >= count * per_pod
        pods = fn.pods_fit(per_pod, count)
        for j, gpus in self.extra[f].items():
            if gpus:
                pods += (avail[j] + gpus) // per_pod - avail[j] // per_pod
        return pods >= count

    def plan(self, victims_only: bool = False) -> Plan | None:
        if victims_only and self.simple:
            return self._plan_on_victims()
        pool = self.st.pool
        caps = pool.caps([f for f, _ in self.option.totals])
        if victims_only:
            caps = {f: [0] * len(arr) for f, arr in caps.items()}
        for f, cap in caps.items():
            for j, gpus in self.extra[f].items():
                cap[j] += gpus
        return pool.plan_generic(self.option.needs, self.item.shape.topology, caps)

    def _plan_on_victims(self) -> Plan | None:
        """Best fit over the victims' GPUs only, without touching the other nodes."""
        f, count, per_pod = self.option.needs[0]
        room = sorted((gpus, j) for j, gpus in self.extra[f].items() if gpus)
        if self.item.shape.topology is Topology.ONE_NODE:
            need = count * per_pod
            for gpus, j in room:
                if gpus >= need:
                    return [(f, j, need)]
            return None
        plan: Plan = []
        left = count
        for gpus, j in room:
            pods = min(left, gpus // per_pod)
            if pods:
                plan.append((f, j, pods * per_pod))
                left -= pods
                if left == 0:
                    return sorted(plan)
        return None

    def _take(self, run: Run) -> bool:
        self._remove(run)
        self.removed.append(run)
        return self.fits()

    def take_in_order(self, runs: list[Run], whole_first: bool = False) -> bool:
        """Take ``runs`` one by one until the preemptor fits. ``whole_first``: a long
        list (a tree's elastic pods, which in a deep queue most often do not make the
        preemptor fit even all together) is taken whole and tried once. Where the fit
        test is exact (one pod set, not gathered in one domain) more removals never
        make a fitting preemptor unfit, so no shorter part of the list would have done
        either, and the search goes on as one by one would: the same runs removed, the
        same usage on the preemptor's path (the paths of the runs given back stay
        adjusted for this cycle's earlier victims, which nothing reads but ``undo``)."""
        if whole_first and len(runs) >= TAKEN_WHOLE_FROM and self.simple:
            out = self.out
            taken = len(self.removed)
            for run in runs:
                if run.wl.id not in out:
                    self._remove(run)
                    self.removed.append(run)
            if not self.fits():
                if len(self.removed) - taken >= TAKEN_WHOLE_FROM:
                    self.taken_whole.append(self.removed[taken:])
                return False
            for run in reversed(self.removed[taken:]):  # it would do: find how little
                self._restore(run)
            del self.removed[taken:]
        return any(self._take(run) for run in runs if run.wl.id not in self.out)

    def take_reclaim(
        self,
        borrowers: Collection[int],
        indexes: list[_Index],
        queues: dict[int, list[Run]],
        flavours: list[int],
        strict: bool,
        orders: dict[tuple[int, int], _StrictOrder] | None = None,
    ) -> bool:
        """Most-borrowing tenant first, recomputed after every removal. ``strict`` only
        takes work that leaves its tenant at or above its guarantee (work wholly
        borrowed); the second, Kueue-like pass also takes work straddling the guarantee
        line, as long as its tenant borrows when it is taken. ``queues`` caches each
        tenant's candidates across both passes.

        ``orders`` keeps, per tree and flavour, the order a strict pass of one flavour
        starts from (never with the preemptor's own tenant: inside its guarantee, it
        does not borrow once its elastic pods are out). What it reads (how much each
        tenant borrows, its smallest workload) is, when the pass starts, what the cycle
        started with less this cycle's victims and less what every such reclaim has
        taken by then: all evicting work and elastic pods of the tree (spare victim GPUs
        count for no tenant's borrowing). It holds for every reclaim that took no work
        of its own first, and changes only for the tenants of victims claimed since
        (Preemptor.forget), placed again here."""
        st = self.st
        guaranteed = st.tree.guaranteed
        label = st.tree.label
        view = st.victim_view
        if len(flavours) == 1:  # the common case, without a call per tenant
            used, owed = view[flavours[0]], guaranteed[flavours[0]]
            me = self.item.node
            if not strict:
                heap = [
                    (owed[t] - used[t], label[t], t)
                    for t in borrowers
                    if used[t] > owed[t] and t != me
                ]
                heapq.heapify(heap)
            elif orders is not None:
                order = self._strict_order(orders, borrowers, indexes[0], flavours[0])
                heap = list(order.entries)  # (sorted: a heap already)
            else:
                # tenants whose smallest workload would already take them below their
                # guarantee cannot give anything in this pass: leave them out at once
                small = indexes[0].smallest
                heap = [
                    (owed[t] - used[t], label[t], t)
                    for t in borrowers
                    if used[t] > owed[t]
                    and t != me
                    and small.get(t, 0)
                    and used[t] - small[t] >= owed[t]
                ]
                heapq.heapify(heap)
        else:
            heap = [
                (-self._borrowed(t, flavours), label[t], t)
                for t in borrowers
                if self._borrowed(t, flavours) > 0
            ]
            heapq.heapify(heap)
        position: dict[int, int] = {}
        while heap:
            _, _, tenant = heapq.heappop(heap)
            runs = queues.get(tenant)
            if runs is None:
                runs = queues[tenant] = _merge([ix.by_tenant.get(tenant, []) for ix in indexes])
            i = position.get(tenant, 0)
            taken = False
            while i < len(runs) and not taken:
                run = runs[i]
                i += 1
                taken = self._eligible(run, tenant, flavours, strict)
                if taken and self._take(run):
                    return True
            position[tenant] = i
            if taken and i < len(runs) and self._borrowed(tenant, flavours) > 0:
                heapq.heappush(heap, (-self._borrowed(tenant, flavours), label[tenant], tenant))
        return False

    def _borrowed(self, tenant: int, flavours: list[int]) -> int:
        """What ``tenant`` borrows on ``flavours``, as the victim view has it."""
        view, guaranteed = self.st.victim_view, self.st.tree.guaranteed
        return sum(max(0, view[f][tenant] - guaranteed[f][tenant]) for f in flavours)

    def _eligible(self, run: Run, tenant: int, flavours: list[int], strict: bool) -> bool:
        """Whether take_reclaim may take ``run`` of ``tenant``: unclaimed, unprotected,
        its tenant borrowing a flavour of it, and in the strict pass left at or above
        its guarantee on each without it."""
        if run.claimed or run.protected_until is not None or run.wl.id in self.out:
            return False
        view, guaranteed = self.st.victim_view, self.st.tree.guaranteed
        mine = [f for f in run.totals if f in flavours]
        if not any(view[f][tenant] > guaranteed[f][tenant] for f in mine):
            return False
        return not strict or all(
            view[f][tenant] - run.totals[f] >= guaranteed[f][tenant] for f in mine
        )

    def _strict_order(
        self,
        orders: dict[tuple[int, int], _StrictOrder],
        borrowers: Collection[int],
        index: _Index,
        f: int,
    ) -> _StrictOrder:
        """The strict pass's starting order of ``f`` in the preemptor's tree (see
        take_reclaim): tenants that borrow, and whose smallest workload leaves them at
        or above their guarantee, most-borrowing first."""
        used, owed = self.st.victim_view[f], self.st.tree.guaranteed[f]
        label = self.st.tree.label
        small = index.smallest
        key = (self.st.tree.root[self.item.node], f)
        order = orders.get(key)
        if order is None:
            entries = [
                (owed[t] - used[t], label[t], t)
                for t in borrowers
                if used[t] > owed[t] and small.get(t, 0) and used[t] - small[t] >= owed[t]
            ]
            entries.sort()
            order = orders[key] = _StrictOrder(entries, {e[2]: e for e in entries}, set())
        elif order.dirty:
            entries, by_tenant = order.entries, order.by_tenant
            for t in order.dirty:
                old = by_tenant.pop(t, None)
                if old is not None:
                    del entries[bisect_left(entries, old)]
                if (
                    t in borrowers
                    and used[t] > owed[t]
                    and small.get(t, 0)
                    and used[t] - small[t] >= owed[t]
                ):
                    entry = by_tenant[t] = (owed[t] - used[t], label[t], t)
                    insort(entries, entry)
            order.dirty.clear()
        return order

    def minimise(self) -> Plan:
        """Walk back over the removed candidates and return every one whose return still
        lets the preemptor fit (Kueue's minimisation). First the victims of tenants the
        removals pushed below their guarantee, so that a reclaim takes from what others
        borrow rather than from their guarantees whenever a choice exists; then the
        rest, last removed first. Returning a candidate only raises its tenant's usage,
        so the "still borrowing" test every later candidate passed still holds."""
        # (spare parts of earlier victims stop no one more: they are given back last)
        walk: list[Run] = []
        others: list[Run] = []
        for run in reversed(self.removed):
            if run.spare_of is None and self._below_guarantee(run):
                walk.append(run)
            else:
                others.append(run)
        walk.extend(others)
        # a list taken whole (take_in_order) comes back whole if the preemptor then
        # still fits: one fit test for what one by one would give back anyway
        blocks = {id(block[-1]): block for block in self.taken_whole}
        i = 0
        while i < len(walk):
            run = walk[i]
            block = blocks.get(id(run)) if blocks else None
            if block is not None and self._give_back_whole(walk, i, block):
                i += len(block)
                continue
            self._restore(run)
            if not self.fits():
                self._remove(run)
            i += 1
        # The victims' GPUs are of no use to anyone else this cycle: place the preemptor
        # on them if it fits there, and leave the free GPUs to the rest of the queue.
        plan = self.plan(victims_only=True) or self.plan()
        assert plan is not None, "victims were chosen so that the preemptor fits"
        return plan

    def _give_back_whole(self, walk: list[Run], start: int, block: list[Run]) -> bool:
        """Return ``block`` (runs taken whole, in removal order) at once if it stands in
        ``walk`` from ``start`` as one by one would meet it (last removed first) and the
        preemptor still fits without it. The fit test only grows with removals, so one
        by one would then have given back every one of them too."""
        size = len(block)
        if start + size > len(walk):
            return False
        for k in range(size):
            if walk[start + k] is not block[size - 1 - k]:
                return False
        for run in block:
            self._restore(run)
        if self.fits():
            return True
        for run in block:
            self._remove(run)
        return False

    def _below_guarantee(self, run: Run) -> bool:
        if run.node == self.item.node or run.node < 0:
            return False
        view = self.st.victim_view
        protected = self.st.protected_usage
        guaranteed = self.st.tree.guaranteed
        return any(
            view[f][run.node] + protected[f][run.node] < guaranteed[f][run.node] for f in run.totals
        )

    def victims(self) -> list[Run]:
        return [run for run in self.removed if run.wl.id in self.out]

    def undo(self) -> None:
        for run in self.removed:
            if run.wl.id in self.out:
                self._restore(run)
        usage = self.st.usage
        for f, n, gpus in self.seen_gone:
            usage[f][n] += gpus
        flags = self.st.level_seen
        for n in self.seen_levels:
            flags[n] = False
