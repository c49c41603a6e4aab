"""The admission cycle: who starts now, who is preempted, why everyone else waits.

One cycle, in order:

1. compile the snapshot: quota usage per tenant-tree node, free GPUs per node, shares;
   pending workloads grouped by (tenant, shape);
2. reservations for starving large gangs (reservation.py);
3. groups that cannot start whatever happens in this cycle fail before the main pass
   (capacity only shrinks within a cycle): beyond their own limits, too large for any
   node layout, or borrowing work that fits neither quota nor free GPUs now;
4. the main pass: a heap of tenants keyed by their best pending workload's
   (guarantee class, -priority, share, submit time, id). Pop, try that workload, push
   the tenant back with its next workload and its new share, so a tenant that just got
   a lot sinks. Every workload that fits is admitted, any number per tenant (no head
   of line blocking). A failure fails the rest of its (tenant, shape) group at once;
   a workload within its guarantee that does not fit may preempt (preemption.py);
5. positions and reasons for whatever is still pending (explain.py).

Step 3 is what keeps a cycle after a small change (one workload finished) cheap: only
the groups the change could help get to the main pass. Failures that needed the main
pass - a preemption search, capacity taken earlier in the cycle - are remembered across
cycles by ``AdmissionEngine`` with a fingerprint of everything they depended on (free
GPUs of their flavours, usage and running work of their tenant tree); a group whose
fingerprint is unchanged is not tried again.
This never changes a decision - skipped groups would fail anyway - it only saves work,
and tests check that the incremental engine and a fresh one agree.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from time import perf_counter
from typing import Final

from . import reasons, records
from .budget import AllowAllBudgetGate, BudgetGate
from .devices import from_devices, to_devices
from .explain import Explainer, Outcome
from .incremental import (
    Failure,
    FailureKey,
    failure_key,
    mark_skips,
    own_limits_only,
    record_failures,
)
from .model import (
    Admission,
    AdmitCode,
    ClusterSnapshot,
    CycleResult,
    CycleStats,
    EngineConfig,
    Node,
    PendingWorkload,
    Placement,
    PodSet,
    Preemption,
    ReasonCode,
)
from .pending import (
    NO_REACH,
    TOPOLOGY_CODES,
    ArrivalRanks,
    Group,
    Item,
    Option,
    QueueBuckets,
    Shape,
    TenantQueue,
    set_queue_keys,
)
from .placement import Plan
from .preemption import PreemptionPlan, Preemptor
from .reservation import (
    backfill_overlay,
    consume,
    hold_for_preemptors,
    release,
    reserve_for_starving,
)
from .state import CycleState, Layout, ReservationEntry, Static, node_layout

_DECIDED: Final = "decided"
_FAILED: Final = "failed"
_DEFERRED: Final = "deferred"
NO_REFUSAL: Final = 1 << 60  # (_Cycle.quota_memo: no need of the flavour refused yet)
NOT_KNOWN: Final = -(1 << 60)  # (_Cycle._fail_at_start's room: not worked out yet)


class AdmissionEngine:
    """Runs admission cycles and remembers what it may skip next time.

    ``run_cycle(snapshot)`` is a pure function of the snapshot, the config and the budget
    gate: the same snapshot gives the same decisions with a fresh engine or a warm one
    (whose only memory is a cache). Keep one engine per cluster in a long-lived worker to
    benefit from the cache; a new engine per cycle is correct, only slower.
    """

    def __init__(
        self, config: EngineConfig | None = None, budget_gate: BudgetGate | None = None
    ) -> None:
        self.config = config or EngineConfig()
        self.budget_gate: BudgetGate = budget_gate or AllowAllBudgetGate()
        self._static: Static | None = None
        self._nodes_seen: tuple[tuple[Node, ...], Layout] | None = None
        self._items: dict[str, Item] = {}
        self._ranks = ArrivalRanks()  # the items' ranks by arrival (explanation order)
        self._buckets = QueueBuckets()  # the queue's groups, kept between cycles
        self._failures: dict[FailureKey, Failure] = {}

    def run_cycle(self, snapshot: ClusterSnapshot, *, explain_pending: bool = True) -> CycleResult:
        """Decide one cycle. Raises ValueError for inconsistent input (duplicate ids, an
        unknown parent, a cycle in the tenant tree)."""
        with _cyclic_gc_paused():
            return self._run_cycle(snapshot, explain_pending)

    def _run_cycle(self, snapshot: ClusterSnapshot, explain_pending: bool) -> CycleResult:
        started = perf_counter()
        snapshot, devices = to_devices(snapshot)
        static = self._static_for(snapshot)
        items = self._compile(snapshot.pending, static)
        cycle = _Cycle(
            static,
            snapshot,
            self.config,
            self.budget_gate,
            items,
            self._failures,
            self._ranks,
            self._buckets,
        )
        result = cycle.run(explain_pending)
        self._failures = cycle.failures_out
        stats = CycleStats(
            pending=len(items) - len(result.admissions),
            groups_evaluated=cycle.groups_evaluated,
            groups_skipped=cycle.groups_skipped,
            groups_failed_at_start=cycle.groups_failed_at_start,
            groups_failed_with_tenant=cycle.groups_failed_with_tenant,
            workloads_skipped=cycle.workloads_skipped,
            duration_s=perf_counter() - started,
        )
        return from_devices(
            CycleResult(
                now=result.now,
                admissions=result.admissions,
                preemptions=result.preemptions,
                pending=result.pending,
                reservations=result.reservations,
                stats=stats,
            ),
            devices,
        )

    def borrowing_after(
        self, snapshot: ClusterSnapshot, result: CycleResult
    ) -> dict[str, dict[str, int]]:
        """GPUs each workload running after ``result`` borrows, per flavour name (flavours
        it does not borrow are left out). What a tenant holds above its guarantee is the
        work a reclaim would take back first (billing.usage.borrowing, the same order): work
        that cannot be preempted sits inside the guarantee, then higher priority before
        lower, older before newer; when older work ends or is preempted, newer work
        moves inside the guarantee. Admission records only what was borrowed at
        admission; billing and the ResourceQuota ceilings need what is borrowed now."""
        static = self._static_for(snapshot)
        tree = static.tree
        index = static.flavour_index
        stopped = {p.victim_id for p in result.preemptions}
        # (preemptible, -priority, admitted at, order within its cycle, id, tenant, GPUs by
        # flavour): work admitted in this cycle goes in the order the cycle admitted it
        held: list[tuple[bool, int, float, int, str, str, dict[str, int]]] = []
        for run in snapshot.running:
            if run.id not in stopped:
                gpus: dict[str, int] = {}
                for p in run.placements:
                    gpus[p.flavour] = gpus.get(p.flavour, 0) + p.gpus
                held.append(
                    (
                        run.preemptible,
                        -_reclaim_priority(run.priority, run.fills_idle),
                        run.admitted_at,
                        -1,
                        run.id,
                        run.tenant_id,
                        gpus,
                    )
                )
        pending = {wl.id: wl for wl in snapshot.pending}
        for seq, admission in enumerate(result.admissions):
            gpus = {}
            for p in admission.placements:
                gpus[p.flavour] = gpus.get(p.flavour, 0) + p.gpus
            wl = pending.get(admission.workload_id)
            flag = wl.preemptible if wl is not None else True
            rank = _reclaim_priority(wl.priority, wl.fills_idle) if wl is not None else 0
            held.append(
                (flag, -rank, snapshot.now, seq, admission.workload_id, admission.tenant_id, gpus)
            )
        used: dict[tuple[int, int], int] = {}
        out: dict[str, dict[str, int]] = {}
        for *_, workload_id, tenant_id, gpus in sorted(held, key=_held_order):
            tenant = tree.tenant_index.get(tenant_id)
            if tenant is None:
                continue
            node = tree.workload_node[tenant]
            for name, count in gpus.items():
                f = index.get(name)
                if f is None:
                    continue
                before = used.get((node, f), 0)
                used[(node, f)] = before + count
                guaranteed = tree.guaranteed[f][node]
                above = max(0, before + count - guaranteed) - max(0, before - guaranteed)
                if above:
                    out.setdefault(workload_id, {})[name] = above
        return out

    def _static_for(self, snapshot: ClusterSnapshot) -> Static:
        if self._nodes_seen is not None and self._nodes_seen[0] is snapshot.nodes:
            layout = self._nodes_seen[1]
        else:
            layout = node_layout(snapshot.nodes)
            self._nodes_seen = (snapshot.nodes, layout)
        key = (snapshot.tenants, snapshot.quotas, snapshot.flavours, layout)
        if self._static is None or self._static.key != key:
            self._static = Static(snapshot.tenants, snapshot.quotas, snapshot.flavours, layout)
            self._items = {}
            self._ranks = ArrivalRanks()
            self._buckets = QueueBuckets()
            self._failures = {}
        return self._static

    def _compile(self, pending: Sequence[PendingWorkload], static: Static) -> list[Item]:
        cache = self._items
        fresh: dict[str, Item] = {}
        tree = static.tree
        for wl in pending:
            item = cache.get(wl.id)
            if item is None or (item.wl is not wl and item.wl != wl):
                tenant = tree.tenant_index.get(wl.tenant_id)
                node = tree.workload_node[tenant] if tenant is not None else -1
                previous = item
                item = Item(wl, node, static.shape_of(wl))
                if previous is not None:
                    # it keeps its rank by arrival if its arrival stands (ArrivalRanks)
                    item.seq = previous.seq
            else:
                item.reach = NO_REACH
                item.holder = False
            fresh[wl.id] = item
        if len(fresh) != len(pending):  # (one test for the whole queue, not one per id)
            seen: set[str] = set()
            for wl in pending:
                if wl.id in seen:
                    raise ValueError(f"duplicate pending workload id {wl.id}")
                seen.add(wl.id)
        self._items = fresh
        return list(fresh.values())


def _on_flavour(pod_set: PodSet, flavour: str) -> PodSet:
    """``pod_set`` as it runs on ``flavour`` alone."""
    return replace(
        pod_set, flavours=(flavour,), gpus_per_pod=pod_set.per_pod(flavour), per_flavour=()
    )


def _held_order(
    entry: tuple[bool, int, float, int, str, str, dict[str, int]],
) -> tuple[bool, int, float, int, str]:
    return entry[0], entry[1], entry[2], entry[3], entry[4]


def _reclaim_priority(priority: int, fills_idle: bool) -> int:
    """Work that only fills idle GPUs is taken back before any other."""
    return -(2**62) if fills_idle else priority


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """A cycle over a deep queue allocates hundreds of thousands of short-lived tuples;
    each allocation burst would start a pass of Python's cyclic collector over every
    object of the worker, a third of the cycle's time over 50,000 pending workloads.
    The cycle makes no reference cycles that need collecting while it runs, so the
    collector waits until it ends (reference counting still frees memory as it goes).

    What the cycle leaves behind (its result, the engine's memos: hundreds of thousands
    of objects after a full cycle) would then be walked at once by a young collection,
    and again when promoted. It is known to hold no garbage cycles, so it goes straight
    to the oldest generation instead (freeze then unfreeze: two list splices), walked
    only by the rare full collections, as it would be once promoted anyway. Skipped if
    anything else keeps objects frozen (e.g. a server that froze them before forking)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def run_cycle(
    snapshot: ClusterSnapshot,
    config: EngineConfig | None = None,
    budget_gate: BudgetGate | None = None,
    *,
    explain_pending: bool = True,
) -> CycleResult:
    """One admission cycle with a fresh engine (see AdmissionEngine.run_cycle)."""
    return AdmissionEngine(config, budget_gate).run_cycle(snapshot, explain_pending=explain_pending)


class _Cycle:
    """One cycle's work; see the module docstring for the steps."""

    def __init__(
        self,
        static: Static,
        snapshot: ClusterSnapshot,
        config: EngineConfig,
        gate: BudgetGate,
        items: list[Item],
        failures_in: dict[FailureKey, Failure],
        ranks: ArrivalRanks,
        buckets: QueueBuckets,
    ) -> None:
        self.state = CycleState(static, snapshot, config)
        self.ranks = ranks
        self.buckets = buckets
        self.names = static.flavour_names
        self.items = items
        self.gate = gate
        # the default gate allows everything: nothing to price per workload
        self.budgets = type(gate) is not AllowAllBudgetGate
        self.failures_in = failures_in
        self.failures_out: dict[FailureKey, Failure] = {}
        self.preemptor = Preemptor(self.state)
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.outcomes: dict[str, Outcome] = {}
        self.holds: dict[str, tuple[Placement, ...]] = {}  # preemptors' planned placements
        self.admitted: set[str] = set()
        self.admitted_priority: dict[int, int] = {}
        # per flavour, by workload node: the smallest need its quota refused this cycle
        self.quota_memo: list[list[int]] = [
            [NO_REFUSAL] * self.state.tree.size for _ in self.state.usage
        ]
        # the smallest count of pods that found no free GPUs, by flavour, topology and
        # GPUs per pod as one int (_place_free)
        self.node_memo: dict[int, int] = {}
        self.preempt_memo: set[FailureKey] = set()
        # groups that did not reclaim only because their head was in its reclaim wait:
        # when that wait ends (a remembered failure does not outlive it)
        self.retry_at: dict[FailureKey, float] = {}
        self.groups: list[Group] = []
        self.unqueued: list[Item] = []  # unknown tenant or flavour
        self.queue_class = 0  # guarantee class of the workload being evaluated
        # the queues' heap keys as ints (_key_units): the highest priority queued, and
        # what "not a returning preemptor" and one step of guarantee class are worth
        self.top_priority = 0
        self.held_unit = 1
        self.class_unit = 1
        self.groups_evaluated = 0
        self.groups_skipped = 0
        self.groups_failed_at_start = 0
        self.groups_failed_with_tenant = 0  # refused with the tenant's, untried
        self.workloads_skipped = 0

    # ------------------------------------------------------------------ driver
    def run(self, explain: bool) -> CycleResult:
        st = self.state
        # every item's arrival rank first: the queues' heap keys are built from it
        self.ranks.assign(self.items)
        self._key_units(self.items)
        queues = self._build_queues()
        hold_for_preemptors(st, self.items)
        reserve_for_starving(st, self.items)
        if st.reservations:
            for item in self.items:
                runtime = item.wl.max_run_time_s
                if runtime is not None:
                    item.reach = -runtime
        self._fail_at_start(queues)
        mark_skips(st, queues, self.failures_in)
        start_caps = st.pool.caps(range(len(self.names))) if explain else {}
        self._main_pass(queues)
        for workload_id in list(st.quota_held):  # reclaimers that did not start
            st.release_quota_held(workload_id)
        self.failures_out = record_failures(st, self.groups, self.retry_at)
        pending: tuple = ()
        if explain:
            # no budgets, nothing to ask per workload (older gates may lack the method)
            blocked = (
                None
                if isinstance(self.gate, AllowAllBudgetGate)
                else getattr(self.gate, "blocked", None)
            )
            explainer = Explainer(
                st,
                self.ranks,
                start_caps,
                self.admitted,
                self.admitted_priority,
                self.outcomes,
                budget_blocked=blocked,
                holds=self.holds,
            )
            pending = explainer.decisions(self.groups, self.unqueued)
        return CycleResult(
            now=st.now,
            admissions=tuple(self.admissions),
            preemptions=tuple(self.preemptions),
            pending=pending,
            reservations=tuple(records.reservation(st, e) for e in st.reservations if not e.hold),
        )

    def _build_queues(self) -> dict[int, TenantQueue]:
        st = self.state
        known: list[Item] = []
        for item in self.items:
            if item.node < 0 or not item.shape.options:
                self.unqueued.append(item)
            if item.node < 0:
                self.outcomes[item.wl.id] = (
                    ReasonCode.UNKNOWN_TENANT,
                    reasons.unknown_tenant(item.wl.tenant_id),
                    None,
                )
            elif not item.shape.options:
                self.outcomes[item.wl.id] = (
                    ReasonCode.UNKNOWN_FLAVOUR,
                    reasons.unknown_flavour(item.shape.unknown),
                    None,
                )
            else:
                known.append(item)
        queues: dict[int, TenantQueue] = {}
        for node, buckets in self.buckets.grouped(known, st.tree.size).items():
            groups = [Group(node, items[0].shape, items) for items in buckets]
            queues[node] = TenantQueue(node, groups, st.share(node))
            self.groups.extend(groups)
        return queues

    def _fail_at_start(self, queues: dict[int, TenantQueue]) -> None:
        """Fail, without queueing them, groups that cannot start in this cycle whatever
        happens in it (capacity only shrinks within a cycle):

        * every option beyond the tenant's own limits: usage only grows, and such a
          workload cannot preempt either (preemptors must end inside their guarantee);
        * a shape no node layout of the cluster can hold;
        * borrowing work, with priority preemption off, of which no option fits quota,
          the free GPUs and, for work that cannot be preempted, what its tenant's other
          such work leaves of the guarantee. Members that may use reserved GPUs stay
          queued."""
        st = self.state
        may_preempt_borrowing = st.config.priority_preemption
        headroom: dict[int, int] = {}  # a tenant's groups share it (own_limits_only)
        # without reservations or holds, no member reaches into reserved GPUs
        reaching = bool(st.reservations or st.reservation_of)
        # Nothing is admitted before the main pass: usage and free GPUs stand, so each
        # tenant's room on a flavour is worked out once (by flavour, then node; NOT_KNOWN
        # until then) and so is the most pods of a simple shape's size the free GPUs
        # hold (by _place_free's key; fewer pods fit wherever more do)
        room: list[list[int]] = (
            [] if may_preempt_borrowing else [[NOT_KNOWN] * st.tree.size for _ in self.names]
        )
        fitted: dict[int, int] = {}
        for node, queue in queues.items():
            for group in queue.groups:
                shape = group.shape
                if own_limits_only(st, node, shape, headroom) or st.never_fits(shape):
                    self._fail_before_pass(group, [])
                elif (
                    not may_preempt_borrowing
                    and st.guarantee_class(node, shape) >= 1
                    and not self._fits_now(node, shape, room, fitted)
                ):
                    kept = (
                        [i for i in group.items if i.holder or i.reach > NO_REACH]
                        if reaching
                        else []
                    )
                    self._fail_before_pass(group, kept)

    def _fits_now(
        self, node: int, shape: Shape, room: list[list[int]], fitted: dict[int, int]
    ) -> bool:
        """Whether some option fits quota and the free GPUs before the main pass (with
        _fail_at_start's memos of both: nothing changes them until it ends)."""
        for option in shape.options:
            if (
                (shape.may_borrow or self.state.pinned_fits(node, option.totals))
                and self._quota_ok_at_start(node, option, room)
                and self._fits_free_at_start(shape, option, fitted)
            ):
                return True
        return False

    def _quota_ok_at_start(self, node: int, option: Option, room: list[list[int]]) -> bool:
        """_quota_ok while usage stands: the same answer, and the same refusals noted
        for the main pass."""
        st = self.state
        tree = st.tree
        memo = self.quota_memo
        for f, need in option.totals:
            refused = memo[f]
            if need >= refused[node]:
                return False
            if not tree.access[f][node]:
                refused[node] = need
                return False
            free = room[f][node]
            if free == NOT_KNOWN:
                free = room[f][node] = tree.available(f, node, st.usage[f])
            if free < need:
                refused[node] = need
                return False
        return True

    def _fits_free_at_start(self, shape: Shape, option: Option, fitted: dict[int, int]) -> bool:
        """Whether _place_free would find a plan, while the free GPUs stand."""
        if not shape.simple:
            return self._place_free(shape, option) is not None
        f, count, per_pod = option.needs[0]
        key = self._free_key(shape, f, per_pod)
        most = fitted.get(key)
        if most is not None and count <= most:
            return True
        if self._simple_on_free(shape, option) is None:
            return False
        fitted[key] = count if most is None else max(most, count)
        return True

    def _fail_before_pass(self, group: Group, keep: list[Item]) -> None:
        # (no failure is recorded for it: record_failures leaves such groups to be
        # checked again at the next start)
        self.groups_failed_at_start += 1
        group.failed = True
        group.failed_at_start = True
        group.items = keep

    # --------------------------------------------------------------- main pass
    def _main_pass(self, queues: dict[int, TenantQueue]) -> None:
        heap = []
        for queue in queues.values():
            key = self._head(queue)
            if key is not None:
                heap.append(key)
        heapq.heapify(heap)
        while heap:
            # the tenant at the top is visited, then its entry replaced in one sift (or
            # dropped): the others' entries stand as they were
            queue = queues[heap[0][-1]]
            self._visit(queue)
            key = self._head(queue)
            if key is not None:
                heapq.heapreplace(heap, key)
            else:
                heapq.heappop(heap)

    def _key_units(self, items: Sequence[Item]) -> None:
        """Give each item its queue order as one int (pending.set_queue_keys), and size
        the queues' heap keys (_group_key) around it."""
        top, bottom = set_queue_keys(items, self.ranks.size)
        self.top_priority = top
        self.held_unit = self.ranks.size * (top - bottom + 1)
        self.class_unit = 2 * self.held_unit

    def _head(self, queue: TenantQueue) -> tuple | None:
        """The tenant's next workload and its heap key: work inside its guarantee first,
        then priority, share, submit time, id. The guarantee class comes before priority
        everywhere, within a tenant too, so that no borrowing admission can take GPUs a
        pending owner would reclaim right after (which would start a preemption loop).

        Each tenant keeps a heap of its groups. A group's class can only go from 0
        (inside the guarantee) to 1 as the tenant's usage grows, so keys only ever
        increase: an entry made before the tenant's last admission is re-checked when it
        reaches the top and pushed back if its class changed (lazy increase-key)."""
        heap = queue.heap
        if queue.built < 0:
            heap = queue.heap = [
                (self._group_key(queue, g), g.stamp, queue.version, g)
                for g in queue.groups
                if g.pos < len(g.items)
            ]
            heapq.heapify(heap)
            queue.built = 0
        while heap:
            key, stamp, version, group = heap[0]
            if stamp != group.stamp or group.pos >= len(group.items):
                heapq.heappop(heap)
                continue
            if version != queue.version:
                fresh = self._group_key(queue, group)
                if fresh != key:
                    heapq.heapreplace(heap, (fresh, stamp, queue.version, group))
                    continue
            cls = key // self.class_unit
            queue.head = group
            queue.head_class = cls
            # across tenants: class, priority, share, arrival (a returning reclaimer
            # goes first only among its own tenant's work)
            head = group.items[group.pos]
            before_share = cls * self.class_unit + (self.top_priority - head.wl.priority)
            return (before_share, queue.share, head.seq, queue.node)
        queue.head = None
        return None

    def _group_key(self, queue: TenantQueue, group: Group) -> int:
        """(guarantee class, returning preemptor first, priority, arrival) as one int:
        ints compare far faster than tuples, and the heaps compare a great many.

        Within its class, a workload whose victims stopped for it in the previous cycle
        goes before the rest of its tenant's work: the guarantee it reclaimed is its own,
        and the tenant's other work, ordered by submit time alone, would otherwise take
        it and leave the reclaimer waiting. (Other tenants' order is not changed.)"""
        head = group.items[group.pos]
        cls = 1 if group.borrows else self.state.guarantee_class(queue.node, group.shape)
        held = 0 if head.wl.held else self.held_unit
        return cls * self.class_unit + held + head.queue_key

    def _requeue(self, queue: TenantQueue, group: Group) -> None:
        """The group's head changed: its old heap entry is stale, push the new one."""
        group.stamp += 1
        if group.pos < len(group.items):
            entry = (self._group_key(queue, group), group.stamp, queue.version, group)
            heapq.heappush(queue.heap, entry)

    def _visit(self, queue: TenantQueue) -> None:
        group = queue.head
        assert group is not None
        item = group.items[group.pos]
        if (
            group.skip
            and item.reach == NO_REACH
            and not item.holder
            and not self._spare_for(queue.node, group.shape)
        ):
            self._fail_group(group, item, skipped=True)
            key = failure_key(self.state, queue.node, group.shape)
            retry_at = self.failures_in[key].retry_at  # mark_skips found it
            if retry_at != math.inf:  # the wait it sits out still ends then
                self.retry_at[key] = retry_at
        else:
            self.groups_evaluated += 1
            held = self.state.quota_held.get(item.wl.id)
            if held is not None:  # its own quota, held since the start: tried with it
                self.state.release_quota_held(item.wl.id)
                # its own refusals remembered while its quota was held do not hold now
                # (others' do: it is charged again whether it starts or not)
                for f in item.shape.flavours:
                    self.quota_memo[f][item.node] = NO_REFUSAL
                self.preempt_memo.discard(failure_key(self.state, item.node, item.shape))
                self.preemptor.forget_quota_misses(item.node)
            verdict = self._evaluate(queue, group, item)
            wid = item.wl.id
            if held is not None and wid not in self.admitted and wid not in self.holds:
                # not started: the quota stays held to the end of the main pass, so
                # that capacity only shrinks within a cycle
                self.state.add_usage(held[0], held[1])
                self.state.quota_held[wid] = held
            if verdict is _DECIDED:
                group.pos += 1
            elif verdict is _FAILED:
                self._fail_group(group, item, skipped=False)
                if queue.head_class >= 1 and not self.state.config.priority_preemption:
                    self._fail_beyond_quota(queue, item)
            # _DEFERRED: the group goes back to the heap as borrowing work
        self._requeue(queue, group)

    def _spare_for(self, node: int, shape: Shape) -> bool:
        """Whether this cycle's victims left GPUs in the tenant's tree that ``shape``
        could take over (CycleState.spare): something its remembered failure did not
        have, so it is tried."""
        st = self.state
        return bool(st.spare) and st.has_spare(st.tree.root[node], shape.flavours)

    def _fail_beyond_quota(self, queue: TenantQueue, failed: Item) -> None:
        """Borrowing work of the tenant just failed on quota: fail at once every other
        borrowing group of the tenant that no option's quota admits either, instead of
        taking each through the queue to fail it there. Quota only shrinks within a
        cycle and borrowing work cannot preempt (priority preemption off), so each would
        fail the same way when its turn came; a tenant whose cohort is spent has all its
        borrowing groups refused in one pass."""
        # (methods are called on their object: a compiled method bound to a local is
        # called through Python's calling convention, several times slower)
        node = queue.node
        if self._quota_ok_any(node, failed.shape):
            return  # it failed on nodes, not on quota: the others may well fit
        st = self.state
        for group in queue.groups:
            if group.pos >= len(group.items) or group.skip:
                continue
            shape = group.shape
            if not group.borrows and st.guarantee_class(node, shape) == 0:
                continue  # may still reclaim inside its guarantee
            if self._quota_ok_any(node, shape):
                continue
            self.groups_failed_with_tenant += 1
            self._fail_group(group, group.items[group.pos], skipped=False)
            self._requeue(queue, group)  # members that reach reserved GPUs stay queued

    def _quota_ok_any(self, node: int, shape: Shape) -> bool:
        """Whether the quota admits some option of ``shape`` for ``node`` now."""
        return any(self._quota_ok(node, option) for option in shape.options)

    def _fail_group(self, group: Group, item: Item, skipped: bool) -> None:
        """``item`` failed; so does every later member that cannot use more capacity
        than it could (capacity only shrinks within a cycle). A skipped group's failure
        stands for members without reach into reserved GPUs only."""
        items = group.items
        priority = item.wl.priority
        failed = 1
        reach = NO_REACH if skipped else item.reach
        keep: list[Item] = []
        for other in items[group.pos + 1 :]:
            if other.holder or other.reach > reach:
                keep.append(other)
            else:
                failed += 1
                priority = max(priority, other.wl.priority)
        if not group.failed or priority > group.failed_priority:
            group.failed_priority = priority
        group.items = keep
        group.pos = 0
        group.failed = True
        if skipped:
            self.groups_skipped += 1
            self.workloads_skipped += failed

    # -------------------------------------------------------------- evaluation
    def _evaluate(self, queue: TenantQueue, group: Group, item: Item) -> object:
        """Try to admit (or preempt for) ``item``: _DECIDED when it was decided on its own
        (admitted, preempting, refused by budget), _FAILED when it does not fit, and
        _DEFERRED when it queued as guaranteed work but can only start by borrowing.

        Work queued as guaranteed (some flavour option fits the tenant's unused
        guarantee) tries those options first, then reclaims its guarantee, and only
        then goes back to the queue as borrowing work for its other options: a
        preemptor must find the GPUs it freed when it comes back next cycle, not wander
        off to borrow another flavour and leave them to its victims."""
        options = item.shape.options
        node = item.node
        self.queue_class = queue.head_class
        if queue.head_class == 0:
            inside = [o for o in options if not self._borrows(node, o)]
            verdict = self._admit_first(queue, item, inside) or self._preempt(queue, item, inside)
            if verdict is not None:
                return verdict
            if len(inside) < len(options):
                group.borrows = True
                return _DEFERRED
            return _FAILED
        self.queue_class = 1
        if not item.shape.may_borrow:
            # work that cannot be preempted may start only where its tenant's other such
            # work leaves room in the guarantee; the tenant's preemptible work then holds
            # whatever is borrowed, and stays reclaimable
            allowed = tuple(o for o in options if self.state.pinned_fits(node, o.totals))
        else:
            allowed = options
        # While the tenant reclaims a flavour in this cycle its other work does not
        # borrow that flavour: next cycle the reclaimer, charged its whole need now,
        # would otherwise find the tenant's guarantee taken by work that started after
        # it and count as borrowing itself (explain.py says it waits for the reclaim).
        if node in self.state.reclaiming_nodes:  # rare: only reclaiming tenants pay
            reclaiming = self.state.reclaiming
            allowed = tuple(o for o in allowed if not any(reclaiming[f][node] for f in o.flavours))
        verdict = self._admit_first(queue, item, allowed) if allowed else None
        # an elastic pod takes what is left once all other work had its turn; it never
        # preempts anything (it would be the first to be taken back)
        if verdict is None and self.state.config.priority_preemption and not item.shape.elastic:
            # no option is inside the guarantee, so reclaim is out: only the tenant's
            # own lower-priority work could make room
            verdict = self._preempt(queue, item, options)
        return _FAILED if verdict is None else verdict

    def _admit_first(self, queue: TenantQueue, item: Item, options: Sequence[Option]) -> str | None:
        """Admit on the first option that fits quota and nodes (Kueue's flavour
        fungibility); None when none does."""
        for option in options:
            if not self._quota_ok(item.node, option):
                continue
            placed = self._place(item, option)
            if placed is None:
                continue
            if self._budget_ok(item, option):
                plan, via, sources = placed  # (unpacked: a starred call is not a native one)
                self._admit(queue, item, option, plan, via, sources)
            return _DECIDED
        return None

    def _preempt(self, queue: TenantQueue, item: Item, options: Sequence[Option]) -> str | None:
        config = self.state.config
        key = failure_key(self.state, item.node, item.shape)
        if not (config.reclaim or config.priority_preemption) or key in self.preempt_memo:
            return None
        for option in options:
            found = self.preemptor.plan(item, option)
            if found is not None:
                if self._budget_ok(item, option):
                    self._nominate(queue, item, option, found)
                return _DECIDED
            wait_until = self.preemptor.wait_until
            if wait_until is not None:
                self.retry_at[key] = min(self.retry_at.get(key, wait_until), wait_until)
        self.preempt_memo.add(key)
        return None

    def _keep_spare(self, found: PreemptionPlan, taken: dict[int, dict[int, int]]) -> None:
        """What the victims free beyond what the preemptor takes over (quota) and
        places on (GPUs) stays for the cycle's later reclaimers of the tree
        (CycleState.spare): a small reclaimer does not make the next one stop another
        large workload for GPUs this stop frees anyway."""
        st = self.state
        use: dict[tuple[int, int], int] = {}
        for f, j, gpus in found.plan:
            use[(f, j)] = use.get((f, j), 0) + gpus
        for victim in found.victims:
            if victim.node < 0:
                continue
            parts: list[tuple[int, int, int]] = []
            for f, j, gpus in victim.parts:
                used = min(gpus, use.get((f, j), 0))
                if used:
                    use[(f, j)] -= used
                if gpus > used:
                    parts.append((f, j, gpus - used))
            got = taken.get(id(victim), {})
            totals = {f: g - got.get(f, 0) for f, g in victim.totals.items() if g > got.get(f, 0)}
            whole = victim.spare_of or victim
            st.keep_spare(whole, whole.spare_part(totals, parts) if totals and parts else None)

    def _borrows(self, node: int, option: Option) -> bool:
        """Whether ``option`` goes past the tenant's guarantee (its elastic pods, which
        its rigid work may take back, do not count)."""
        rigid = self.state.rigid_usage
        guaranteed = self.state.tree.guaranteed
        return any(rigid(f, node) + need > guaranteed[f][node] for f, need in option.totals)

    def _quota_ok(self, node: int, option: Option) -> bool:
        st = self.state
        tree = st.tree
        memo = self.quota_memo
        for f, need in option.totals:
            refused = memo[f]
            failed_at = refused[node]
            if need >= failed_at:
                return False
            if not tree.access[f][node] or tree.available(f, node, st.usage[f]) < need:
                refused[node] = need  # (less than failed_at)
                return False
        return True

    def _place(
        self, item: Item, option: Option
    ) -> tuple[Plan, AdmitCode | None, list[ReservationEntry]] | None:
        """Where the pods go: the fast bucket path for one pod set, the generic planner
        otherwise, and a second try on reserved GPUs for the reservation's owner and for
        backfill. Returns the plan, AdmitCode.BACKFILL when it stands on someone else's
        reserved GPUs (None otherwise), and the reservations whose GPUs it may use."""
        st = self.state
        pool = st.pool
        shape = item.shape
        own = st.reservation_of.get(item.wl.id)
        flavours = [f for f, _ in option.totals]
        if own is None or not own.blocked:
            plan = self._place_free(shape, option)
            if plan is not None:
                return plan, None, []
            if not self._may_overlay(item, own is not None):
                return None
        extra, sources, backfill = backfill_overlay(st, item, self.queue_class)
        if not sources:
            return None
        if own is not None and own.hold and own.blocked:
            # a preemptor starts where its victims made room: left unused, those GPUs
            # would go back to the victims next cycle (churn)
            where = {f: [0] * len(pool.flavours[f].avail) for f in flavours}
            for (f, j), gpus in own.blocked.items():
                if f in where:
                    where[f][j] = pool.flavours[f].avail[j] + gpus
            plan = pool.plan_generic(option.needs, shape.topology, where)
            if plan is not None:
                return plan, None, [own]
        caps = pool.caps(flavours)
        for (f, j), gpus in extra.items():
            if f in caps:
                caps[f][j] += gpus
        plan = pool.plan_generic(option.needs, shape.topology, caps)
        if plan is None:
            return None
        return plan, (AdmitCode.BACKFILL if backfill and own is None else None), sources

    def _free_key(self, shape: Shape, f: int, per_pod: int) -> int:
        """A simple shape's pods on free GPUs of flavour ``f``, as one int: what decides
        whether a number of them fits (node_memo, _fits_free_at_start)."""
        return (per_pod * len(TOPOLOGY_CODES) + shape.topology_code) * len(self.names) + f

    def _place_free(self, shape: Shape, option: Option) -> Plan | None:
        """A placement on free GPUs alone (memoised: within a cycle they only shrink)."""
        pool = self.state.pool
        if shape.simple:
            local = self._simple_on_free(shape, option)
            if local is None:
                return None
            f = option.needs[0][0]
            return [(f, j, gpus) for j, gpus in local]
        flavours = [f for f, _ in option.totals]
        return pool.plan_generic(option.needs, shape.topology, pool.caps(flavours))

    def _simple_on_free(self, shape: Shape, option: Option) -> list[tuple[int, int]] | None:
        """A simple shape's pods on the free GPUs of its flavour (by local node), or None;
        a refusal is remembered for the cycle (node_memo: fewer free GPUs only)."""
        f, count, per_pod = option.needs[0]
        key = self._free_key(shape, f, per_pod)
        failed_at = self.node_memo.get(key)
        if failed_at is not None and count >= failed_at:
            return None
        local = self.state.pool.flavours[f].plan(count, per_pod, shape.topology)
        if local is None:
            self.node_memo[key] = count if failed_at is None else min(failed_at, count)
        return local

    def _may_overlay(self, item: Item, owner: bool) -> bool:
        """Whether some reserved GPUs could be open to ``item`` (see reservation.py)."""
        reservations = self.state.reservations
        if not reservations:
            return False
        if owner or item.wl.max_run_time_s is not None:
            return True
        return self.queue_class == 0 and any(entry.cls > 0 for entry in reservations)

    def _budget_ok(self, item: Item, option: Option) -> bool:
        if not self.budgets:
            return True
        # The gate prices the workload as it would run: each pod set on the flavour this
        # option gives it, so the card and the borrowing it estimates are that flavour's.
        wl = item.wl
        pod_sets = tuple(
            ps if ps.flavours == (self.names[f],) else _on_flavour(ps, self.names[f])
            for ps, f in zip(wl.pod_sets, option.flavours, strict=True)
        )
        as_run = wl if pod_sets == wl.pod_sets else replace(wl, pod_sets=pod_sets)
        allowed, why = self.gate.may_start(wl.tenant_id, as_run)
        if not allowed:
            flavour = self.names[item.shape.options[0].totals[0][0]]
            self.outcomes[item.wl.id] = (ReasonCode.BUDGET, reasons.budget(why), flavour)
        return allowed

    # --------------------------------------------------------------- decisions
    def _admit(
        self,
        queue: TenantQueue,
        item: Item,
        option: Option,
        plan: Plan,
        via: AdmitCode | None,
        sources: list[ReservationEntry],
    ) -> None:
        st = self.state
        tree = st.tree
        node = item.node
        borrowed: dict[str, int] = {}
        # work that cannot be preempted sits inside the guarantee (pinned_fits held);
        # whatever its tenant holds above the guarantee is its preemptible work
        for f, need in option.totals if item.shape.may_borrow else ():
            amount = tree.borrowed(f, node, need, st.usage[f])
            if amount:
                borrowed[self.names[f]] = amount
        st.add_usage(node, option.totals)
        if not item.shape.may_borrow:
            st.add_pinned(node, option.totals)
        if item.shape.elastic:
            for f, need in option.totals:
                st.elastic[f][node] += need
        own = st.reservation_of.get(item.wl.id)
        if sources:
            consume(st, plan, sources)
        else:
            for f, j, gpus in plan:
                fn = st.pool.flavours[f]
                fn.set_avail(j, fn.avail[j] - gpus)
        if own is not None:
            release(st, own)
        queue.share = st.share(node)
        queue.version += 1
        code, message = records.admission_words(st, item, option, borrowed, via, sources)
        if own is not None:
            message = reasons.admitted_reservation(message)
        self.admissions.append(
            Admission(
                workload_id=item.wl.id,
                tenant_id=item.wl.tenant_id,
                flavours=tuple(self.names[f] for f in option.flavours),
                placements=records.placements(st, plan),
                borrowed=borrowed,
                code=code,
                message=message,
            )
        )
        self.admitted.add(item.wl.id)
        for f, _ in option.totals:
            if item.wl.priority > self.admitted_priority.get(f, item.wl.priority - 1):
                self.admitted_priority[f] = item.wl.priority

    def _nominate(
        self, queue: TenantQueue, item: Item, option: Option, found: PreemptionPlan
    ) -> None:
        """Victims are told to stop; the preemptor keeps its claim on quota and on the
        free part of its placement for the rest of this cycle, and starts in a later
        cycle, once the victims are gone."""
        st = self.state
        node = item.node
        # The part of the need its victims do not free is taken from the quota free
        # now, which no later workload of this cycle may take; the part they free is
        # taken over from them (CycleState.take_over: charged where their usage does not
        # already count it). Releasing the victims instead would let capacity grow
        # within a cycle, and the engine relies on it only ever shrinking.
        taken: dict[int, dict[int, int]] = {}  # per victim (id), per flavour
        for f, need in option.totals:
            for victim in found.victims:
                gpus = min(need, victim.totals.get(f, 0)) if victim.node >= 0 else 0
                if gpus:
                    st.take_over(node, f, gpus, victim, item.wl.id)
                    taken.setdefault(id(victim), {})[f] = gpus
                    need -= gpus
            if need:
                st.add_usage(node, [(f, need)])
        if not item.shape.may_borrow:
            st.add_pinned(node, option.totals)  # victims are preemptible: none was pinned
        # GPUs: the victims' first, then free ones, then those a borrowing gang holds
        covered: dict[tuple[int, int], int] = {}
        for victim in found.victims:
            for f, j, gpus in victim.parts:
                covered[(f, j)] = covered.get((f, j), 0) + gpus
        held_by_borrowers = [entry for entry in st.reservations if entry.cls > 0]
        consume(st, found.plan, held_by_borrowers, covered)
        self._keep_spare(found, taken)
        queue.share = st.share(node)
        queue.version += 1
        f0 = option.totals[0][0]
        # (a victim's spare part is taken over without stopping anyone more)
        fresh = [v for v in found.victims if v.spare_of is None and not v.wl.evicting]
        for victim in found.victims:
            if victim.spare_of is not None:
                continue
            st.claim(victim)
            if victim.wl.opportunistic and victim.node >= 0:
                # its GPUs are spoken for: no longer elastic room of its tenant
                for f, gpus in victim.totals.items():
                    st.elastic[f][victim.node] -= gpus
        self.preemptor.forget(found.victims)
        for victim in fresh:
            self.preemptions.append(records.preemption(st, item, victim, f0))
        tenants = sorted({v.wl.tenant_id for v in found.victims})
        message = reasons.preempting(len(fresh), tenants, self.names[f0], found.reclaim)
        self.outcomes[item.wl.id] = (ReasonCode.PREEMPTING, message, self.names[f0])
        self.holds[item.wl.id] = records.placements(st, found.plan)
