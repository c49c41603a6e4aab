"""Cohort tree accounting: guaranteed, borrowing and lending quota per flavour.

The model is Kueue's hierarchical cohorts (KEP-79, "resource_node" accounting in
kubernetes-sigs/kueue pkg/cache), translated to Tidegate's quotas where a parent's
guarantee *contains* its children's:

* every tenant is a node; a tenant with children also gets a "self" node holding the
  part of its guarantee not handed to a child (the pool its subtree shares) and the
  usage of workloads submitted to the parent tenant itself;
* ``subtree quota`` Q(n) = own pool + sum over children of what each child makes
  lendable, Q(c) - G(c); a node's private part G(n) = Q(n) - lend_limit (0 without a
  lend limit) is never visible to anyone outside its subtree;
* usage of an inner node counts only what its children use beyond their private
  parts: U(n) = sum max(0, U(c) - G(c));
* what a workload node may still take is local + from-parent, where local is its unused
  private quota and from-parent is the parent's availability, capped by the node's
  borrow limit: U(n) may not exceed Q(n) + borrow_limit. The root may use Q(root).

A leaf therefore uses its own guarantee first, then the unused lendable guarantee of its
siblings and the pool of its parent, then of higher levels, within every borrow limit on
the way and never touching a lender's private part. Trees (tenants without a parent)
never share with each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .model import Quota, ReasonCode, Tenant
from .reasons import QuotaReasons

# (below 2**62: compiled, a larger int is a Python object, read and compared slowly)
NO_LIMIT: Final = 1 << 60
# cohort reasons kept (QuotaTree.explain) before starting over
EXHAUSTED_KEPT: Final = 100_000


class QuotaTree:
    """Static structure of the tenant forest and its quotas, compiled once per quota
    change. Per-cycle usage lives in plain lists indexed like the nodes here."""

    def __init__(
        self, tenants: Sequence[Tenant], quotas: Sequence[Quota], flavours: Sequence[str]
    ) -> None:
        self.flavours = list(flavours)
        ordered = sorted(tenants, key=lambda t: t.id)
        self.tenant_index = {t.id: i for i, t in enumerate(ordered)}
        if len(self.tenant_index) != len(ordered):
            raise ValueError("duplicate tenant ids")
        self.tenant_ids = [t.id for t in ordered]
        self.tenant_weight = [t.weight for t in ordered]
        children: list[list[int]] = [[] for _ in ordered]
        tenant_parent = [-1] * len(ordered)
        for i, tenant in enumerate(ordered):
            if tenant.parent_id is not None:
                parent = self.tenant_index.get(tenant.parent_id)
                if parent is None:
                    raise ValueError(f"tenant {tenant.id}: unknown parent {tenant.parent_id}")
                tenant_parent[i] = parent
                children[parent].append(i)
        self._build_nodes(ordered, tenant_parent, children)
        self._build_quotas(quotas)

    # ----------------------------------------------------------------- structure
    def _build_nodes(
        self, ordered: list[Tenant], tenant_parent: list[int], children: list[list[int]]
    ) -> None:
        count = len(ordered)
        self.parent = list(tenant_parent)
        self.tenant_of = list(range(count))
        self.label = list(self.tenant_ids)
        self.children = [list(c) for c in children]
        self.workload_node = list(range(count))
        for i in range(count):
            if children[i]:
                node = len(self.parent)
                self.parent.append(i)
                self.tenant_of.append(i)
                self.label.append(self.tenant_ids[i])
                self.children.append([])
                self.children[i].append(node)
                self.workload_node[i] = node
        self.size = len(self.parent)
        self.paths: list[tuple[int, ...]] = []
        for node in range(self.size):
            path = [node]
            while self.parent[path[-1]] >= 0:
                path.append(self.parent[path[-1]])
                if len(path) > self.size:
                    raise ValueError("the tenant tree has a cycle")
            self.paths.append(tuple(path))
        self.root = [path[-1] for path in self.paths]
        self.is_workload_node = [not self.children[n] for n in range(self.size)]
        self.root_members: dict[int, list[int]] = {}
        for node in range(self.size):
            if self.is_workload_node[node]:
                self.root_members.setdefault(self.root[node], []).append(node)
        # post-order: children before parents, so sums can be built in one sweep
        self.post_order = sorted(range(self.size), key=lambda n: -len(self.paths[n]))
        self.zero_usage = [0] * self.size
        self._ceilings: list[list[int | None]] = []  # per flavour, by node (ceiling)
        # "the cohort has too little to lend", worded once per set of figures: thousands
        # of borrowing groups of a deep queue share a few dozen of them
        self._exhausted: dict[tuple[int, int, int, int, int, int], str] = {}

    def _build_quotas(self, quotas: Sequence[Quota]) -> None:
        findex = {name: i for i, name in enumerate(self.flavours)}
        rows: dict[tuple[int, int], Quota] = {}
        for quota in quotas:
            tenant = self.tenant_index.get(quota.tenant_id)
            flavour = findex.get(quota.flavour)
            if tenant is None or flavour is None:
                continue  # quota for a tenant or flavour this cluster does not know
            rows[(flavour, tenant)] = quota
        self.guaranteed: list[list[int]] = []
        self.quota: list[list[int]] = []
        self.private: list[list[int]] = []
        self.borrow_limit: list[list[int]] = []
        self.access: list[list[bool]] = []
        for f in range(len(self.flavours)):
            self._build_flavour(f, rows)

    def _build_flavour(self, f: int, rows: dict[tuple[int, int], Quota]) -> None:
        size = self.size
        guaranteed = [0] * size
        subtree = [0] * size
        private = [0] * size
        limit = [NO_LIMIT] * size
        has_row = [False] * size
        for node in self.post_order:
            tenant = self.tenant_of[node]
            is_self = node != tenant
            row = None if is_self else rows.get((f, tenant))
            has_row[node] = row is not None or (is_self and (f, tenant) in rows)
            if is_self:
                continue  # filled by the owner, whose children are all built by now
            kids = self.children[node]
            if not kids:
                guaranteed[node] = row.guaranteed if row else 0
                subtree[node] = guaranteed[node]
            else:
                own = self.workload_node[tenant]
                kid_sum = sum(guaranteed[c] for c in kids if c != own)
                guaranteed[node] = max(row.guaranteed if row else 0, kid_sum)
                guaranteed[own] = subtree[own] = guaranteed[node] - kid_sum
                subtree[node] = sum(subtree[c] - private[c] for c in kids)
            if row is not None and row.lend_limit is not None:
                private[node] = max(0, subtree[node] - row.lend_limit)
            if row is not None and row.borrow_limit is not None:
                limit[node] = row.borrow_limit
        access = [False] * size
        for node in range(size):
            access[node] = any(has_row[n] for n in self.paths[node])
        self.guaranteed.append(guaranteed)
        self.quota.append(subtree)
        self.private.append(private)
        self.borrow_limit.append(limit)
        self.access.append(access)
        self._ceilings.append([None] * size)

    # ----------------------------------------------------------------- accounting
    def available(self, f: int, node: int, usage: list[int]) -> int:
        """How much more of flavour ``f`` the workload node may take right now."""
        path = self.paths[node]
        quota = self.quota[f]
        private = self.private[f]
        limits = self.borrow_limit[f]
        root = path[-1]
        avail = quota[root] - usage[root]
        for i in range(len(path) - 2, -1, -1):
            n = path[i]
            used = usage[n]
            priv = private[n]
            over = used - priv if used > priv else 0
            limit = limits[n]
            if limit != NO_LIMIT:
                cap = quota[n] - priv - over + limit
                if cap < avail:
                    avail = cap
            if priv > used:
                avail += priv - used
        return avail

    def add(self, f: int, node: int, delta: int, usage: list[int]) -> None:
        """Add ``delta`` (may be negative) to the usage of a workload node and carry the
        change in what each level takes from its parent up the path. (The loop is
        ``add_below``'s without the stop test: victim search calls this millions of
        times in a deep queue, so it does not pay for a call and a comparison more.)"""
        private = self.private[f]
        for n in self.paths[node]:
            old = usage[n]
            new = old + delta
            usage[n] = new
            priv = private[n]
            delta = (new - priv if new > priv else 0) - (old - priv if old > priv else 0)
            if delta == 0:
                return

    def add_below(self, f: int, node: int, delta: int, usage: list[int], stop: int) -> int:
        """``add``, carried up the path only as far as the level below ``stop``; returns
        the change that would have reached ``stop``."""
        private = self.private[f]
        for n in self.paths[node]:
            if n == stop:
                return delta
            old = usage[n]
            new = old + delta
            usage[n] = new
            priv = private[n]
            delta = (new - priv if new > priv else 0) - (old - priv if old > priv else 0)
            if delta == 0:
                return 0
        return delta

    def carried_up(self, f: int, node: int, delta: int, usage: list[int]) -> int:
        """What adding ``delta`` to ``node`` would add to its parent's usage."""
        priv = self.private[f][node]
        old = usage[node]
        new = old + delta
        return (new - priv if new > priv else 0) - (old - priv if old > priv else 0)

    def carried(
        self,
        f: int,
        node: int,
        delta: int,
        usage: list[int],
        stop: int,
        gone: list[dict[int, int] | None],
    ) -> int:
        """The change that taking ``delta`` off ``node`` would carry to ``stop``, with
        ``gone`` (by tree node, then flavour; changed here) already taken off each level
        below it: usage that falls back inside a level's private part stops there."""
        private = self.private[f]
        for n in self.paths[node]:
            if n == stop:
                return delta
            level = gone[n]
            if level is None:
                level = gone[n] = {}
            taken = level.get(f, 0)
            old = usage[n] - taken
            new = old - delta
            level[f] = taken + delta
            priv = private[n]
            delta = (old - priv if old > priv else 0) - (new - priv if new > priv else 0)
            if delta == 0:
                return 0
        return delta

    def lowest_common(self, a: int, b: int) -> int:
        """The lowest node on both paths (``a`` itself when ``b`` is ``a``)."""
        above_b = set(self.paths[b])
        return next(n for n in self.paths[a] if n in above_b)

    def borrowed(self, f: int, node: int, need: int, usage: list[int]) -> int:
        """GPUs of ``need`` that land above the node's own guarantee."""
        g = self.guaranteed[f][node]
        used = usage[node]
        return max(0, used + need - g) - max(0, used - g)

    def within_guarantee(self, f: int, node: int, need: int, usage: list[int]) -> bool:
        return usage[node] + need <= self.guaranteed[f][node]

    def fingerprint(self, f: int, root: int, usage: list[int]) -> tuple[int, ...]:
        return tuple([usage[n] for n in self.root_members[root]])

    # ----------------------------------------------------------------- explanation
    def explain(
        self,
        f: int,
        node: int,
        need: int,
        usage: list[int],
        view: tuple[int, int, int, int] | None = None,
    ) -> tuple[ReasonCode, str]:
        """Why ``need`` GPUs of flavour ``f`` do not fit the quota of ``node``. ``view``,
        when the caller has it for this usage, is (the node's usage, what it may still
        take, what its parent may give, the binding cohort or -1), each at least 0
        (``view``): not worked out again along the path."""
        flavour = self.flavours[f]
        tenant = self.label[node]
        if not self.access[f][node]:
            return ReasonCode.NO_QUOTA, QuotaReasons.no_quota(flavour, tenant)
        g = self.guaranteed[f][node]
        limit = self.borrow_limit[f][node]
        ceiling = self.ceiling(f, node)
        if need > ceiling:
            return ReasonCode.NEVER_FITS, QuotaReasons.never(flavour, tenant, need, ceiling)
        used = usage[node]
        if limit != NO_LIMIT and used + need > g + limit:
            return ReasonCode.QUOTA_LIMIT, QuotaReasons.own_limit(flavour, used, g, limit, need)
        if view is None:
            view = self.view(f, node, usage)
        _, total, from_parent, binding = view
        unused = max(0, g - used)
        if binding >= 0:
            return ReasonCode.COHORT_LIMIT, QuotaReasons.cohort_limit(
                flavour, self.label[binding], from_parent, need
            )
        root = self.root[node]
        key = (f, root, g, unused, total, need)
        message = self._exhausted.get(key)
        if message is None:
            if len(self._exhausted) >= EXHAUSTED_KEPT:
                self._exhausted.clear()
            message = self._exhausted[key] = QuotaReasons.cohort_exhausted(
                flavour, self.label[root], g, unused, total, need
            )
        return ReasonCode.COHORT_EXHAUSTED, message

    def view(self, f: int, node: int, usage: list[int]) -> tuple[int, int, int, int]:
        """What a quota verdict of ``node`` on flavour ``f`` reads of ``usage``: the
        node's own usage, what it may still take, what its parent may give (both at
        least 0: a verdict says none is left however far below zero it is) and the inner
        cohort whose borrowing limit binds it (-1 when the root's pool does)."""
        from_parent, binding = self.from_parent(f, node, usage)
        return (
            usage[node],
            max(0, self.available(f, node, usage)),
            max(0, from_parent),
            -1 if binding is None else binding,
        )

    def ceiling(self, f: int, node: int) -> int:
        """The most of flavour ``f`` the node could ever hold (its whole tree idle)."""
        known = self._ceilings[f]
        found = known[node]
        if found is None:
            found = known[node] = self.available(f, node, self.zero_usage)
        return found

    def from_parent(self, f: int, node: int, usage: list[int]) -> tuple[int, int | None]:
        """What the node can take from above it, and the inner cohort whose borrow limit
        is the binding constraint (None when the root's pool is)."""
        path = self.paths[node]
        quota = self.quota[f]
        private = self.private[f]
        limits = self.borrow_limit[f]
        root = path[-1]
        avail = quota[root] - usage[root]
        binding: int | None = None
        for i in range(len(path) - 2, 0, -1):
            n = path[i]
            used = usage[n]
            priv = private[n]
            if limits[n] != NO_LIMIT:
                cap = quota[n] - priv - max(0, used - priv) + limits[n]
                if cap < avail:
                    avail, binding = cap, n
            avail += max(0, priv - used)
        if len(path) > 1 and limits[node] != NO_LIMIT:
            priv = private[node]
            cap = quota[node] - priv - max(0, usage[node] - priv) + limits[node]
            avail = min(avail, cap)
        return avail, binding
