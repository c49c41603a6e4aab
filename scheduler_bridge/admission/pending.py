"""The pending queue, indexed for speed: workloads compiled once, grouped by tenant and shape.

Two workloads of one tenant with the same shape (pod sets, flavours, topology) succeed or
fail together on quota and nodes, and within one cycle capacity only shrinks. So a
cycle tries the head of a (tenant, shape) group, and when it fails every other member
fails with it, except members that could use capacity the head could not: a workload
holding a reservation, or one that may backfill on reserved GPUs for a shorter run than
the head declared (``Item.holder``, ``Item.reach``). That is what makes 50,000 pending
workloads cheap: the work is per group, not per workload, while the order of admissions
stays exactly what one-by-one evaluation would give.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

from .model import Node, PendingWorkload, PodSet, Topology
from .placement import Need, NodePool

# (topology, per pod set (count, per pod - one amount, or one per flavour -, flavours),
# may borrow, elastic)
RawShape = tuple[
    Topology, tuple[tuple[int, int | tuple[int, ...], tuple[str, ...]], ...], bool, bool
]


TOPOLOGY_CODES: Final = {topology: code for code, topology in enumerate(Topology)}


@dataclass(frozen=True, slots=True)
class Option:
    """One flavour assignment: a flavour per pod set."""

    index: int
    flavours: tuple[int, ...]
    needs: tuple[Need, ...]
    totals: tuple[tuple[int, int], ...]  # (flavour, GPUs) summed over pod sets


@dataclass(frozen=True, slots=True)
class Shape:
    """What a workload asks for, independent of who asks and when."""

    key: RawShape
    id: int  # index within the compiled Static: a cheap dict key (nested tuples rehash)
    topology: Topology
    options: tuple[Option, ...]
    flavours: tuple[int, ...]  # every flavour any option uses, sorted
    unknown: tuple[str, ...]  # flavour names this cluster does not have
    gpus: int
    # False for work that cannot be preempted: it runs only within its tenant's
    # guarantee, or no owner could ever reclaim what it borrowed (KAI has the same rule)
    may_borrow: bool = True
    # an elastic pod or work that fills idle GPUs (PendingWorkload.opportunistic):
    # queued after all other work
    elastic: bool = False
    # ``flavours`` as one int, bit f set for flavour f: a cheap part of a dict key
    flavour_mask: int = 0
    # ``topology`` as a small int (TOPOLOGY_CODES), for the same use
    topology_code: int = 0

    @property
    def simple(self) -> bool:
        """One pod set: the fast placement path applies."""
        return len(self.key[1]) == 1


def build_shape(raw: RawShape, shape_id: int, flavour_index: dict[str, int]) -> Shape:
    """Flavour fungibility as in Kueue: options are tried in the order given; option k
    gives pod set i its k-th acceptable flavour (its last one once it has no more). The
    engine tries the options inside the tenant's unused guarantee before the ones that
    would borrow (Kueue's ``whenCanBorrow: TryNextFlavor``), see engine._evaluate."""
    topology, pod_sets, may_borrow, elastic = raw
    unknown = sorted({f for _, _, names in pod_sets for f in names if f not in flavour_index})
    gpus = sum(count * _on(per_pod, 0) for count, per_pod, _ in pod_sets)
    if unknown:
        code = TOPOLOGY_CODES[topology]
        return Shape(
            raw, shape_id, topology, (), (), tuple(unknown), gpus, may_borrow, elastic, 0, code
        )
    options: list[Option] = []
    seen: set[tuple[int, ...]] = set()
    for k in range(max(len(names) for _, _, names in pod_sets)):
        chosen = tuple(flavour_index[names[min(k, len(names) - 1)]] for _, _, names in pod_sets)
        if chosen in seen:
            continue
        seen.add(chosen)
        needs = tuple(
            (f, count, _on(per_pod, k))
            for f, (count, per_pod, _) in zip(chosen, pod_sets, strict=True)
        )
        totals: dict[int, int] = {}
        for f, count, per_pod in needs:
            totals[f] = totals.get(f, 0) + count * per_pod
        options.append(Option(len(options), chosen, needs, tuple(sorted(totals.items()))))
    flavours = tuple(sorted({f for option in options for f in option.flavours}))
    mask = 0
    for f in flavours:
        mask |= 1 << f
    return Shape(
        raw,
        shape_id,
        topology,
        tuple(options),
        flavours,
        (),
        gpus,
        may_borrow,
        elastic,
        flavour_mask=mask,
        topology_code=TOPOLOGY_CODES[topology],
    )


def _on(per_pod: int | tuple[int, ...], k: int) -> int:
    """What a pod needs on its ``k``-th flavour (its last one once it has no more)."""
    return per_pod if isinstance(per_pod, int) else per_pod[min(k, len(per_pod) - 1)]


class Item:
    """A compiled pending workload."""

    __slots__ = (
        "group",
        "grouped_in",
        "holder",
        "kept",
        "node",
        "queue_key",
        "reach",
        "seq",
        "shape",
        "wl",
    )

    def __init__(self, wl: PendingWorkload, node: int, shape: Shape) -> None:
        self.wl = wl
        self.node = node  # workload node in the quota tree, -1 for an unknown tenant
        self.shape = shape
        self.seq = -1  # its rank by arrival among the engine's items (ArrivalRanks)
        # its queue order (priority, highest first, then submit time and id) as one int,
        # set per cycle from ``seq`` (set_queue_keys)
        self.queue_key = -1
        self.group = -1  # set per explanation: the index of its group there
        self.kept = False  # in the engine's kept groups (QueueBuckets)
        self.grouped_in = 0  # the last QueueBuckets.grouped call it was queued in
        self.reach = NO_REACH  # set per cycle, see below
        self.holder = False  # set per cycle: holds a reservation (GPUs of its own)


class ArrivalRanks:
    """Every pending workload's rank by arrival (submission, then id) among the engine's
    items, as one small int (``Item.seq``, below ``size``), kept between cycles. Within
    one guarantee class, priority and share the queue goes by arrival, so the
    explanation sorts ints instead of tuples. A workload keeps its rank while it waits;
    new ones, which mostly arrive after every workload ranked so far, take the next
    ranks. One arriving before the latest ranked arrival (a preempted job queued again
    with its first submit time), or no rank left below ``size``, ranks everyone again
    with one sort (by submission time, a float: ties, rare, are put in id order after
    it)."""

    __slots__ = ("by_seq", "last", "size", "taken")

    def __init__(self) -> None:
        self.by_seq: list[Item | None] = []  # the item of each rank (stale once it left)
        self.size = 0  # a power of two; ranks are below it
        self.taken = 0  # ranks handed out
        # the latest arrival ranked (its workload may have left the queue since)
        self.last: tuple[float, str] | None = None

    def assign(self, items: Sequence[Item]) -> None:
        """Give every item without a rank one (Item.seq). An item holds its rank only if
        the rank's slot holds it: a rank carried over from another item of the same
        workload and arrival (compiled again because it changed) is taken over; any
        other is a rank it does not have."""
        by_seq = self.by_seq
        ranked = len(by_seq)
        fresh: list[Item] = []
        for item in items:
            seq = item.seq
            if 0 <= seq < ranked:
                held = by_seq[seq]
                if held is item:
                    continue
                if (
                    held is not None
                    and held.wl.id == item.wl.id
                    and held.wl.submitted_at == item.wl.submitted_at
                ):
                    by_seq[seq] = item  # the same workload, changed while it waited
                    continue
            fresh.append(item)
        if not fresh:
            return
        _by_arrival(fresh)
        first = fresh[0].wl
        last = self.last
        if self.taken + len(fresh) > self.size or (
            last is not None and (first.submitted_at, first.id) < last
        ):
            # (all new, as in a fresh engine's first cycle: they are in order already)
            everyone = len(fresh) == len(items)
            self._rank_all(fresh if everyone else items, in_order=everyone)
            return
        seq = self.taken
        for item in fresh:
            item.seq = seq
            by_seq[seq] = item
            seq += 1
        self.taken = seq
        self.last = (fresh[-1].wl.submitted_at, fresh[-1].wl.id)

    def _rank_all(self, items: Sequence[Item], in_order: bool = False) -> None:
        ranked = list(items)
        if not in_order:
            _by_arrival(ranked)
        size = 1024
        while size < 2 * len(ranked):
            size *= 2
        by_seq: list[Item | None] = [None] * size
        for seq, item in enumerate(ranked):
            item.seq = seq
            by_seq[seq] = item
        self.by_seq = by_seq
        self.size = size
        self.taken = len(ranked)
        self.last = (ranked[-1].wl.submitted_at, ranked[-1].wl.id) if ranked else None


def _submitted(item: Item) -> float:
    return item.wl.submitted_at


def _workload_id(item: Item) -> str:
    return item.wl.id


def _by_arrival(items: list[Item]) -> None:
    """Sort by (submitted, id): by the float first (Python sorts floats fast), then each
    run of equal times by id."""
    items.sort(key=_submitted)
    start = 0
    count = len(items)
    while start < count - 1:
        at = items[start].wl.submitted_at
        end = start + 1
        while end < count and items[end].wl.submitted_at == at:
            end += 1
        if end - start > 1:
            items[start:end] = sorted(items[start:end], key=_workload_id)
        start = end


# How far a pending workload may reach into other workloads' reserved GPUs as backfill
# (set per cycle): not at all (NO_REACH), or -(declared max run time) - a shorter run
# ends before more reservations start, so it may use a superset of the GPUs a longer one
# may. Within a group, a workload that fails takes down every later member whose reach
# is not greater than its own, except reservation holders, which have GPUs of their own.
NO_REACH: Final = -math.inf
# a group's failed_priority before it fails in the main pass (a short int; the first
# failure sets it whatever the priority: engine._Cycle._fail_group)
NOT_FAILED: Final = -(1 << 60)


class Group:
    """Pending workloads of one tenant with one shape, in (priority, submit, id) order."""

    __slots__ = (
        "borrows",
        "failed",
        "failed_at_start",
        "failed_priority",
        "items",
        "members",
        "node",
        "pos",
        "shape",
        "skip",
        "stamp",
    )

    def __init__(self, node: int, shape: Shape, items: list[Item]) -> None:
        self.node = node  # the tenant's workload node
        self.shape = shape
        self.items = items
        # every member, in order: ``items`` shrinks as the cycle goes (explain.py reads this)
        self.members = items
        self.pos = 0
        self.skip = False  # failed last cycle and nothing it depends on changed
        self.failed = False
        self.failed_at_start = False  # refused before the main pass (engine._fail_at_start)
        # set when the option that really fits needs to borrow although another option
        # would have been inside the guarantee: the group then queues as borrowing work
        self.borrows = False
        self.stamp = 0  # bumped whenever its head changes: older heap entries are stale
        # the highest priority among the members that failed in this cycle's main pass
        # (incremental.Failure.max_priority)
        self.failed_priority = NOT_FAILED

    @property
    def max_priority(self) -> int:
        return max(item.wl.priority for item in self.items)


class TenantQueue:
    """All groups of one workload node, plus its current share."""

    __slots__ = ("built", "groups", "head", "head_class", "heap", "node", "share", "version")

    def __init__(self, node: int, groups: list[Group], share: float) -> None:
        self.node = node
        self.groups = groups
        self.share = share
        self.head: Group | None = None
        self.head_class = 0  # guarantee class the head was queued with
        self.version = 0  # bumped whenever the tenant's usage changes
        self.built = -1  # -1 until the group heap is first built
        self.heap: list[tuple[int, int, int, Group]] = []


def set_queue_keys(items: Sequence[Item], size: int) -> tuple[int, int]:
    """Give each item its queue order (priority, highest first, then arrival) as one
    int, ``Item.queue_key``: ``(highest priority - priority) * size + seq``, where every
    arrival rank (Item.seq, ArrivalRanks) is below ``size``. Returns the highest and the
    lowest priority among ``items``."""
    top = bottom = 0
    if items:
        top = bottom = items[0].wl.priority
        for item in items:
            priority = item.wl.priority
            if priority > top:
                top = priority
            elif priority < bottom:
                bottom = priority
    for item in items:
        item.queue_key = (top - item.wl.priority) * size + item.seq
    return top, bottom


# a cycle in which more than 1/REGROUP_SHARE of the queue arrived or left (or changed)
# groups it afresh
REGROUP_SHARE: Final = 8


class QueueBuckets:
    """The queue's (tenant, shape) groups kept between cycles, each a list of items in
    queue order (Item.queue_key). A cycle in which few workloads arrived or left updates
    the lists instead of grouping the whole queue again (group_items); one in which many
    did (a fresh engine's first) groups it afresh. Lists are changed only here, before
    a cycle uses them: a cycle replaces a group's list, never changes it. Which items
    are kept is marked on the items (Item.kept, Item.grouped_in), not looked up by id."""

    __slots__ = ("buckets", "cycle", "kept")

    def __init__(self) -> None:
        self.buckets: dict[int, list[Item]] = {}  # by shape.id * tree size + node
        self.kept = 0  # items in the lists
        self.cycle = 0  # calls of ``grouped``

    def grouped(self, items: Sequence[Item], tree_size: int) -> dict[int, list[list[Item]]]:
        """``items`` (every one with a tenant and flavours, queue keys set for this
        cycle) by workload node, then by shape: group_items' answer, nodes and groups
        in the order they were first kept."""
        self.cycle += 1
        cycle = self.cycle
        arrived: list[Item] = []
        for item in items:
            item.grouped_in = cycle
            if not item.kept:
                arrived.append(item)
        # kept ones that left the queue, or were compiled again (changed while waiting)
        gone = self.kept - (len(items) - len(arrived))
        if not self.kept or len(arrived) + gone > len(items) // REGROUP_SHARE:
            return self._regroup(items, tree_size)
        if gone:
            for key, bucket in list(self.buckets.items()):
                if any(item.grouped_in != cycle for item in bucket):
                    for item in bucket:
                        if item.grouped_in != cycle:
                            item.kept = False
                    bucket[:] = [item for item in bucket if item.grouped_in == cycle]
                    if not bucket:
                        del self.buckets[key]
            self.kept -= gone
        for item in arrived:
            self._insert(item, tree_size)
        return _by_node(self.buckets.values())

    def _regroup(self, items: Sequence[Item], tree_size: int) -> dict[int, list[list[Item]]]:
        for bucket in self.buckets.values():  # (items of earlier cycles no longer kept)
            for item in bucket:
                item.kept = False
        self.buckets = _sorted_buckets(items, tree_size)
        for item in items:
            item.kept = True
        self.kept = len(items)
        return _by_node(self.buckets.values())

    def _insert(self, item: Item, tree_size: int) -> None:
        key = item.shape.id * tree_size + item.node
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [item]
        else:
            low, high = 0, len(bucket)
            at = item.queue_key
            while low < high:
                middle = (low + high) // 2
                if bucket[middle].queue_key < at:
                    low = middle + 1
                else:
                    high = middle
            bucket.insert(low, item)
        item.kept = True
        self.kept += 1


def group_items(items: Sequence[Item], tree_size: int) -> dict[int, list[list[Item]]]:
    """Items by workload node, then by shape (each group a list sorted by queue order,
    ``Item.queue_key``), nodes and groups in the order their first item comes. Grouped
    first by one int per (shape, node), ``shape.id * tree_size + node``: one dictionary
    for 50,000 items."""
    return _by_node(_sorted_buckets(items, tree_size).values())


def _sorted_buckets(items: Sequence[Item], tree_size: int) -> dict[int, list[Item]]:
    """Items by ``shape.id * tree_size + node``, each list in queue order."""
    buckets: dict[int, list[Item]] = {}
    for item in items:
        key = item.shape.id * tree_size + item.node
        bucket = buckets.get(key)
        if bucket is None:
            buckets[key] = [item]
        else:
            bucket.append(item)
    for bucket in buckets.values():
        if len(bucket) > SHORT_GROUP:
            bucket.sort(key=_queue_key)
        elif len(bucket) > 1:
            _sort_short(bucket)
    return buckets


def _sort_short(bucket: list[Item]) -> None:
    """Sort a short list of items by queue order in place (insertion sort): compiled
    compares of two ints, where ``list.sort`` would call its key function per item
    through Python's calling convention. Most groups hold a few workloads."""
    for i in range(1, len(bucket)):
        item = bucket[i]
        at = item.queue_key
        j = i - 1
        while j >= 0 and bucket[j].queue_key > at:
            bucket[j + 1] = bucket[j]
            j -= 1
        bucket[j + 1] = item


def _by_node(buckets: Iterable[list[Item]]) -> dict[int, list[list[Item]]]:
    """Groups (lists of one node's items) by their node, in the order given."""
    by_node: dict[int, list[list[Item]]] = {}
    for bucket in buckets:
        node = bucket[0].node
        groups = by_node.get(node)
        if groups is None:
            by_node[node] = [bucket]
        else:
            groups.append(bucket)
    return by_node


_queue_key = attrgetter("queue_key")  # (an Item's queue order; in C, 50,000 times a cycle)
SHORT_GROUP: Final = 16  # a group this long or shorter is sorted by _sort_short


def fits_when_idle(nodes: Sequence[Node], pod_sets: Sequence[PodSet], topology: Topology) -> bool:
    """Whether some flavour choice of ``pod_sets`` could be placed on ``nodes`` with all
    their GPUs free: the test for work that can never run, whatever else happens. It
    looks at the pod sets together (two pod sets of 16 need 32), as admission does."""
    names = sorted(
        {f for n in nodes for f in n.capacity} | {f for p in pod_sets for f in p.flavours}
    )
    index = {name: i for i, name in enumerate(names)}
    raw = (topology, tuple(p.raw for p in pod_sets), True, False)
    shape = build_shape(raw, 0, index)
    idle = [
        Node(n.name, dict(n.capacity), None, n.domain) for n in sorted(nodes, key=lambda n: n.name)
    ]
    pool = NodePool(idle, names, {})
    return any(
        pool.plan_generic(
            option.needs, topology, {f: list(pool.flavours[f].total) for f, _ in option.totals}
        )
        is not None
        for option in shape.options
    )
