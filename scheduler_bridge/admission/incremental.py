"""What a warm engine remembers between cycles: which groups failed, and on what.

A (tenant, shape) group that failed in one cycle fails in the next one too if nothing
its failure depended on has changed, because within a cycle capacity only shrinks: the
next cycle starts from the state the last one ended in, which was no better than the
state in which the group failed. So at the end of a cycle each group that failed in the
main pass is stored with a fingerprint of that state, and at the start of the next one a
group whose fingerprint is unchanged is failed without being tried. (Groups refused
before the main pass, engine._fail_at_start, are simply checked again: that check is as
cheap as a fingerprint.)

What a failure depends on:

* every flavour option beyond the tenant's own limits (no quota on its path, its
  borrowing limit reached): the tenant's own usage only;
* anything else: per flavour, the free GPUs (after reservations) and the usage of the
  tenant's whole tree; and, for a workload that may preempt, the running work of the
  tree too. That running-work token is the one from the start of the cycle: work
  admitted during a cycle was no preemption candidate then but is one in the next
  cycle, so for such workloads an admission anywhere in the tree must invalidate.

A failure of a reclaimer still in its reclaim wait (EngineConfig.reclaim_wait_s)
also stands only until that wait ends: from then on the same state lets it preempt.

Skipping never changes a decision - tests run the warm engine against a fresh one on
every cycle of random simulations - it only saves the work of trying.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from .pending import Group, Shape, TenantQueue
from .quota import NO_LIMIT
from .state import CycleState

Fingerprint = tuple[tuple[object, ...], ...]
FailureKey = int  # shape id x tree size + workload node (failure_key)


@dataclass(slots=True, init=False)
class Failure:
    """A group's failure and what it depended on. Read-only, but not frozen: a full
    cycle over a deep queue records 18,000, and a frozen dataclass costs three times as
    much to make. Its constructor is written out, so that it is compiled with the
    engine (one made by ``dataclass`` runs interpreted)."""

    fingerprint: Fingerprint
    max_priority: int  # with priority preemption, a higher-priority newcomer may succeed
    # a reclaim held back by the head's reclaim wait may happen from then on, whatever
    # else changed (EngineConfig.reclaim_wait_s)
    retry_at: float

    def __init__(
        self, fingerprint: Fingerprint, max_priority: int, retry_at: float = math.inf
    ) -> None:
        self.fingerprint = fingerprint
        self.max_priority = max_priority
        self.retry_at = retry_at


def failure_key(state: CycleState, node: int, shape: Shape) -> FailureKey:
    """The key of a (workload node, shape) group's failure: one int, as the other
    per-group memos (a tuple key is allocated and hashed element by element)."""
    return shape.id * state.tree.size + node


def own_limits_only(
    state: CycleState,
    node: int,
    shape: Shape,
    headroom: dict[int, int] | None = None,
) -> bool:
    """Every option is beyond the tenant's own limits: guaranteed + borrow limit, or the
    guarantee alone for work that may not borrow. Never true with priority preemption
    on: stopping the tenant's own lower-priority work lowers its usage; and the
    tenant's elastic pods do not count for its rigid work when reclaim is on, which
    takes them back. ``headroom`` memoises the room left per (node, flavour, may
    borrow, rigid)."""
    if state.config.priority_preemption or state.static.is_unbounded(node, shape):
        return False
    if headroom is None:
        headroom = {}
    may_borrow = shape.may_borrow
    rigid = state.config.reclaim and not shape.elastic
    # (one int per node, flavour, may borrow, rigid)
    kind = (2 if may_borrow else 0) + (1 if rigid else 0)
    base = node * len(state.usage)
    for option in shape.options:
        for f, need in option.totals:
            key = (base + f) * 4 + kind
            room = headroom.get(key)
            if room is None:
                room = headroom[key] = _headroom(state, node, f, may_borrow, rigid)
            if need > room:
                break
        else:
            return False
    return True


def _headroom(
    state: CycleState, node: int, f: int, may_borrow: bool = True, rigid: bool = False
) -> int:
    tree = state.tree
    if not tree.access[f][node]:
        return -1
    if not may_borrow:
        return tree.guaranteed[f][node] - state.pinned[f][node]
    limit = tree.borrow_limit[f][node]
    if limit == NO_LIMIT:
        return NO_LIMIT
    used = state.rigid_usage(f, node) if rigid else state.usage[f][node]
    return tree.guaranteed[f][node] + limit - used


def fingerprint(
    state: CycleState,
    node: int,
    shape: Shape,
    memo: dict[int, Fingerprint],
    headroom: dict[int, int],
) -> Fingerprint:
    """What a failure of ``shape`` for ``node`` depends on, as the state stands now.
    ``memo`` keeps the parts a tree's groups share, ``headroom`` own_limits_only's."""
    if own_limits_only(state, node, shape, headroom):
        return tuple(
            ("own", f, state.usage[f][node], state.pinned[f][node]) for f in shape.flavours
        )
    # Running work matters only to a workload that may preempt: one inside its
    # guarantee (reclaim), or any with priority preemption on. A borrowing workload
    # fails or not on usage and free GPUs alone, whoever holds them.
    may_preempt = state.config.priority_preemption or (
        state.config.reclaim and state.guarantee_class(node, shape) == 0
    )
    root = state.tree.root[node]
    key = (shape.flavour_mask * state.tree.size + root) * 2 + (1 if may_preempt else 0)
    found = memo.get(key)
    if found is None:
        parts = []
        for f in shape.flavours:
            usage, tokens = state.quota_fingerprint(f, root)
            parts.append((f, state.node_fingerprint(f), usage, tokens if may_preempt else 0))
        found = memo[key] = tuple(parts)
    if not shape.may_borrow:  # and what the tenant's unpreemptible work leaves of it
        found = (*found, ("pinned", *(state.pinned[f][node] for f in shape.flavours)))
    return found


def mark_skips(
    state: CycleState, queues: dict[int, TenantQueue], failures: dict[FailureKey, Failure]
) -> None:
    """Flag the groups whose last failure still stands (call after reservations)."""
    if not failures:
        return
    memo: dict[int, Fingerprint] = {}
    headroom: dict[int, int] = {}
    check_priority = state.config.priority_preemption
    for node, queue in queues.items():
        for group in queue.groups:
            if group.failed_at_start:
                continue
            failure = failures.get(failure_key(state, node, group.shape))
            if failure is None:
                continue
            if check_priority and group.max_priority > failure.max_priority:
                continue
            if failure.retry_at != math.inf and state.now >= _wait_ends(state, group, failure):
                continue
            if failure.fingerprint == fingerprint(state, node, group.shape, memo, headroom):
                group.skip = True


def _wait_ends(state: CycleState, group: Group, failure: Failure) -> float:
    """When the reclaim wait a failure sat out ends: as recorded, or earlier if a
    member's submit time now says so (a warm engine trusts the queue, not its memory)."""
    submitted = min(item.wl.submitted_at for item in group.items)
    return min(failure.retry_at, submitted + state.config.reclaim_wait_s)


def record_failures(
    state: CycleState,
    groups: Iterable[Group],
    retry_at: dict[FailureKey, float] | None = None,
) -> dict[FailureKey, Failure]:
    """The failures of this cycle, fingerprinted with the state it ended in;
    ``retry_at`` says when a group's reclaim wait ends."""
    memo: dict[int, Fingerprint] = {}
    headroom: dict[int, int] = {}
    out: dict[FailureKey, Failure] = {}
    if retry_at is None:
        retry_at = {}
    for group in groups:
        if group.failed and not group.failed_at_start:  # those are re-checked at start
            stamp = fingerprint(state, group.node, group.shape, memo, headroom)
            key = failure_key(state, group.node, group.shape)
            out[key] = Failure(stamp, group.failed_priority, retry_at.get(key, math.inf))
    return out
