"""The queue's groups are kept between cycles (pending.QueueBuckets): a cycle in which a few
workloads arrived, left or changed updates them, and they must be exactly what grouping
the whole queue afresh gives (pending.group_items), and a warm engine must decide exactly
what a fresh one does."""

from __future__ import annotations

import random
from dataclasses import replace

from scheduler_bridge.admission import AdmissionEngine, run_cycle
from scheduler_bridge.admission.model import Topology
from scheduler_bridge.admission.pending import (
    REGROUP_SHARE,
    SHORT_GROUP,
    ArrivalRanks,
    Item,
    QueueBuckets,
    build_shape,
    group_items,
    set_queue_keys,
)

from .factories import nodes, quota, snapshot, tenants, workload
from .test_arrival_ranks import explained

TREE_SIZE = 7
SHAPES = [
    build_shape((Topology.NONE, ((1, gpus, ("h100",)),), True, False), i, {"h100": 0})
    for i, gpus in enumerate((1, 2, 4))
]


def as_groups(by_node: dict[int, list[list[Item]]]) -> dict[int, set[tuple[str, ...]]]:
    """Each node's groups, each as its workload ids in queue order (the order of groups
    is not part of the answer: the queues are heaps)."""
    return {
        node: {tuple(item.wl.id for item in bucket) for bucket in buckets}
        for node, buckets in by_node.items()
    }


def test_kept_groups_are_what_grouping_afresh_gives_through_arrivals_changes_and_departures():
    rng = random.Random(7)
    ranks = ArrivalRanks()
    kept = QueueBuckets()
    serial = 0

    def arrival() -> Item:
        nonlocal serial
        serial += 1
        wl = workload(
            f"w{serial:04d}", "a", priority=rng.choice((0, 0, 5, -3)), submitted=rng.random()
        )
        return Item(wl, rng.randrange(TREE_SIZE), rng.choice(SHAPES))

    queue = [arrival() for _ in range(400)]
    updated = 0
    for _ in range(30):
        ranks.assign(queue)
        set_queue_keys(queue, ranks.size)
        before = dict(kept.buckets)
        grouped = kept.grouped(queue, TREE_SIZE)
        assert as_groups(grouped) == as_groups(group_items(queue, TREE_SIZE))
        # the groups nothing happened to are the very lists kept: no regrouping
        if before and any(kept.buckets.get(key) is bucket for key, bucket in before.items()):
            updated += 1
        # a few leave (admitted), a few arrive (some before those waiting), a few change
        # their priority while they wait (compiled again: a new item, the same arrival)
        changes = rng.randrange(len(queue) // REGROUP_SHARE // 3 + 1)
        for _ in range(changes):
            queue.pop(rng.randrange(len(queue)))
        queue += [arrival() for _ in range(changes)]
        for _ in range(changes):
            at = rng.randrange(len(queue))
            old = queue[at]
            wl = replace(old.wl, priority=old.wl.priority + 1)
            queue[at] = Item(wl, old.node, old.shape)
            queue[at].seq = old.seq
    assert updated >= 20  # the update path, not only regrouping, was what ran


def test_a_warm_engine_over_a_queue_that_changes_a_little_decides_as_a_fresh_one():
    rng = random.Random(11)
    tree = tenants({"org": None, "a": "org", "b": "org", "c": "org"})
    quotas = (quota("a", 8), quota("b", 8), quota("c", 8))
    pending = [
        workload(
            f"p{i:03d}",
            rng.choice("abc"),
            rng.choice((1, 2, 4, 8)),
            priority=rng.choice((0, 0, 1)),
            submitted=float(rng.randrange(1000)),
        )
        for i in range(240)
    ]
    engine = AdmissionEngine()
    snap = snapshot(tree, quotas, nodes(2), pending)
    for cycle in range(8):
        warm, fresh = engine.run_cycle(snap), run_cycle(snap)
        assert [a.workload_id for a in warm.admissions] == [a.workload_id for a in fresh.admissions]
        assert explained(warm) == explained(fresh), cycle
        admitted = {a.workload_id for a in warm.admissions}
        waiting = [w for w in snap.pending if w.id not in admitted]
        # one arrives, one leaves, one changes its priority
        waiting.pop(rng.randrange(len(waiting)))
        at = rng.randrange(len(waiting))
        waiting[at] = replace(waiting[at], priority=waiting[at].priority + 1)
        waiting.append(workload(f"n{cycle}", rng.choice("abc"), 2, submitted=float(cycle)))
        snap = replace(snap, now=snap.now + 60, pending=tuple(waiting))


def test_every_group_comes_in_queue_order_whatever_its_length():
    # short groups are sorted by insertion, longer ones by list.sort: both in queue order
    rng = random.Random(11)
    lengths = [1, 2, 3, SHORT_GROUP - 1, SHORT_GROUP, SHORT_GROUP + 1, 3 * SHORT_GROUP]
    items: list[Item] = []
    for node, length in enumerate(lengths):
        for i in range(length):
            wl = workload(f"n{node}-{i:03d}", "a", priority=rng.choice((0, 5, -3)))
            items.append(Item(wl, node, SHAPES[0]))
    rng.shuffle(items)
    for item in items:
        item.queue_key = rng.randrange(10**9)
    grouped = group_items(items, TREE_SIZE * len(lengths))
    assert sorted(len(groups[0]) for groups in grouped.values()) == sorted(lengths)
    for groups in grouped.values():
        keys = [item.queue_key for item in groups[0]]
        assert keys == sorted(keys)
