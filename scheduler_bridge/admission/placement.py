"""Node fit: free GPUs per node and flavour, gangs, topology and best-fit packing.

Best fit (put the pods where the least free capacity is left, Knuth's bin packing
heuristic) keeps large holes for large jobs. Free capacity per flavour is kept in
buckets by free count (a histogram of sorted node lists), so that the common questions
- smallest node with at least N free, how many pods of size g fit, largest free block -
cost O(GPUs per node) instead of O(nodes). Topology domains (NVLink cliques) keep a
sorted list of their free totals for the same reason. Anything unusual (several pod
sets, capacity borrowed from a reservation or from victims) goes through the generic
planner, which works on plain arrays and is O(nodes).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Mapping, Sequence

from .model import Node, Topology

Need = tuple[int, int, int]  # (flavour index, pod count, GPUs per pod)
Plan = list[tuple[int, int, int]]  # (flavour index, local node index, GPUs)


class FlavourNodes:
    """Free capacity of one flavour across the nodes that have it."""

    __slots__ = (
        "avail",
        "buckets",
        "fragment",
        "dom",
        "dom_avail",
        "dom_members",
        "dom_order",
        "largest_domain_total",
        "largest_node_total",
        "members",
        "total",
    )

    def __init__(self, members: list[int], totals: list[int], free: list[int], dom: list[int]):
        self.members = members  # global node index per local index
        self.total = totals
        self.avail = free
        self.dom = dom  # local domain per local node
        top = max(totals, default=0)
        self.buckets: list[list[int]] = [[] for _ in range(top + 1)]
        for j, value in enumerate(free):
            if value > 0:
                self.buckets[value].append(j)
        ndom = max(dom, default=-1) + 1
        self.dom_members: list[list[int]] = [[] for _ in range(ndom)]
        self.dom_avail = [0] * ndom
        dom_total = [0] * ndom
        for j, d in enumerate(dom):
            self.dom_members[d].append(j)
            self.dom_avail[d] += free[j]
            dom_total[d] += totals[j]
        self.dom_order = sorted((value, d) for d, value in enumerate(self.dom_avail))
        self.largest_node_total = top
        self.largest_domain_total = max(dom_total, default=0)
        # shared flavours packed by fragmentation (EngineConfig.share_packing "fgd"): the
        # free capacity of a GPU with x free that the recent request mix could not use
        self.fragment: Callable[[int], float] | None = None

    def set_avail(self, j: int, new: int) -> None:
        old = self.avail[j]
        if old == new:
            return
        if old > 0:
            bucket = self.buckets[old]
            del bucket[bisect_left(bucket, j)]
        if new > 0:
            insort(self.buckets[new], j)
        self.avail[j] = new
        d = self.dom[j]
        before = self.dom_avail[d]
        after = before + new - old
        order = self.dom_order
        del order[bisect_left(order, (before, d))]
        insort(order, (after, d))
        self.dom_avail[d] = after

    def largest_free(self) -> int:
        for value in range(len(self.buckets) - 1, 0, -1):
            if self.buckets[value]:
                return value
        return 0

    def largest_domain_free(self) -> int:
        return self.dom_order[-1][0] if self.dom_order else 0

    def pods_fit(self, per_pod: int, limit: int | None = None) -> int:
        pods = 0
        buckets = self.buckets
        for value in range(per_pod, len(buckets)):
            bucket = buckets[value]
            if bucket:
                pods += len(bucket) * (value // per_pod)
                if limit is not None and pods >= limit:
                    return pods
        return pods

    def pods_capacity(self, per_pod: int) -> int:
        return sum(total // per_pod for total in self.total)

    # -------------------------------------------------------------- fast plans
    def plan_spread(self, count: int, per_pod: int) -> list[tuple[int, int]] | None:
        """Best fit pod by pod: filling the tightest node that fits first is the same as
        placing each pod on the node with the least room that still fits."""
        if self.pods_fit(per_pod, count) < count:
            return None
        if self.fragment is not None:
            return self._plan_least_fragmenting(count, per_pod)
        plan: list[tuple[int, int]] = []
        left = count
        buckets = self.buckets
        for value in range(per_pod, len(buckets)):
            for j in buckets[value]:
                pods = min(left, value // per_pod)
                plan.append((j, pods * per_pod))
                left -= pods
                if left == 0:
                    return plan
        return None  # pragma: no cover - pods_fit said it fits

    def _plan_least_fragmenting(self, count: int, per_pod: int) -> list[tuple[int, int]]:
        """Pod by pod, the GPU whose change in unusable free capacity is least (ties: the
        tightest, then the lowest index): FGD on one GPU at a time, since a share changes
        only the GPU it lands on (admission/sharing.py measures whole nodes)."""
        left: dict[int, int] = {}  # GPUs this plan already took from: what is left
        plan: dict[int, int] = {}
        for _ in range(count):
            j = least_fragmenting(self.buckets, left, per_pod, self.fragment)
            left[j] = left.get(j, self.avail[j]) - per_pod
            plan[j] = plan.get(j, 0) + per_pod
        return sorted(plan.items())

    def plan_one_node(self, need: int) -> list[tuple[int, int]] | None:
        buckets = self.buckets
        for value in range(need, len(buckets)):
            if buckets[value]:
                return [(buckets[value][0], need)]
        return None

    def plan_one_domain(self, count: int, per_pod: int) -> list[tuple[int, int]] | None:
        need = count * per_pod
        order = self.dom_order
        avail = self.avail
        for i in range(bisect_left(order, (need, -1)), len(order)):
            members = self.dom_members[order[i][1]]
            if sum(avail[j] // per_pod for j in members) < count:
                continue
            plan: list[tuple[int, int]] = []
            left = count
            for value, j in sorted((avail[j], j) for j in members if avail[j] >= per_pod):
                pods = min(left, value // per_pod)
                plan.append((j, pods * per_pod))
                left -= pods
                if left == 0:
                    return plan
        return None

    def plan(self, count: int, per_pod: int, topology: Topology) -> list[tuple[int, int]] | None:
        if topology is Topology.NONE:
            return self.plan_spread(count, per_pod)
        if topology is Topology.ONE_NODE:
            return self.plan_one_node(count * per_pod)
        return self.plan_one_domain(count, per_pod)

    def largest_block(self, topology: Topology) -> int:
        if topology is Topology.ONE_DOMAIN:
            return self.largest_domain_free()
        return self.largest_free()


class NodePool:
    """Free GPUs of every node for one cycle. Nodes are ordered by name so that ties
    break the same way whatever order the snapshot lists them in."""

    def __init__(
        self,
        nodes: Sequence[Node],
        flavours: Sequence[str],
        held: Mapping[tuple[int, int], int],
    ) -> None:
        self.names = [n.name for n in nodes]
        domain_ids: dict[tuple[str, str], int] = {}
        self.domain_of: list[int] = []
        for node in nodes:
            key = ("domain", node.domain) if node.domain is not None else ("node", node.name)
            self.domain_of.append(domain_ids.setdefault(key, len(domain_ids)))
        self.domain_count = len(domain_ids)
        self.flavours: list[FlavourNodes] = []
        self.local: list[list[int]] = []  # per flavour: global node -> local index or -1
        for f, name in enumerate(flavours):
            members: list[int] = []
            totals: list[int] = []
            free: list[int] = []
            dom: list[int] = []
            local_dom: dict[int, int] = {}
            local = [-1] * len(nodes)
            for n, node in enumerate(nodes):
                total = node.capacity.get(name, 0)
                if total <= 0:
                    continue
                # no free figure: derive it from what the snapshot's running work holds
                derived = total - held.get((n, f), 0)
                value = derived if node.free is None else node.free.get(name, 0)
                local[n] = len(members)
                members.append(n)
                totals.append(total)
                free.append(min(total, max(0, value)))
                dom.append(local_dom.setdefault(self.domain_of[n], len(local_dom)))
            self.flavours.append(FlavourNodes(members, totals, free, dom))
            self.local.append(local)

    def fingerprint(self, f: int) -> int:
        return hash(tuple(self.flavours[f].avail))

    def caps(self, flavours: Sequence[int]) -> dict[int, list[int]]:
        return {f: list(self.flavours[f].avail) for f in flavours}

    # ------------------------------------------------------------ generic plan
    def plan_generic(
        self, needs: Sequence[Need], topology: Topology, caps: Mapping[int, list[int]]
    ) -> Plan | None:
        """Place several pod sets (possibly of several flavours) on arbitrary capacity
        arrays (``caps[f][j]``: what the placement may use on local node j). Returns
        (flavour, local node, GPUs) triples or None."""
        if topology is Topology.NONE:
            return self._spread(needs, {f: list(c) for f, c in caps.items()}, None)
        if topology is Topology.ONE_NODE:
            return self._one_node(needs, caps)
        return self._one_domain(needs, caps)

    def _spread(
        self, needs: Sequence[Need], work: dict[int, list[int]], allowed: set[int] | None
    ) -> Plan | None:
        plan: Plan = []
        for f, count, per_pod in needs:
            arr = work[f]
            members = self.flavours[f].members
            fragment = self.flavours[f].fragment
            if fragment is not None and allowed is None:
                if not self._spread_least_fragmenting(f, count, per_pod, arr, fragment, plan):
                    return None
                continue
            order = sorted(
                (value, j)
                for j, value in enumerate(arr)
                if value >= per_pod and (allowed is None or members[j] in allowed)
            )
            left = count
            for value, j in order:
                pods = min(left, value // per_pod)
                arr[j] -= pods * per_pod
                plan.append((f, j, pods * per_pod))
                left -= pods
                if left == 0:
                    break
            if left:
                return None
        return _merge(plan)

    @staticmethod
    def _spread_least_fragmenting(
        f: int,
        count: int,
        per_pod: int,
        arr: list[int],
        fragment: Callable[[int], float],
        plan: Plan,
    ) -> bool:
        """Place ``count`` shares on ``arr`` (changed in place) one GPU at a time, least
        fragmenting first; False if they do not all fit."""
        for _ in range(count):
            best: tuple[float, int, int] | None = None
            for j, value in enumerate(arr):
                if value >= per_pod:
                    score = (fragment(value - per_pod) - fragment(value), value, j)
                    best = score if best is None or score < best else best
            if best is None:
                return False
            arr[best[2]] -= per_pod
            plan.append((f, best[2], per_pod))
        return True

    def _one_node(self, needs: Sequence[Need], caps: Mapping[int, list[int]]) -> Plan | None:
        totals: dict[int, int] = {}
        for f, count, per_pod in needs:
            totals[f] = totals.get(f, 0) + count * per_pod
        best: tuple[int, int] | None = None
        for n in range(len(self.names)):
            room = 0
            for f, need in totals.items():
                j = self.local[f][n]
                if j < 0 or caps[f][j] < need:
                    break
                room += caps[f][j]
            else:
                if best is None or room < best[0]:
                    best = (room, n)
        if best is None:
            return None
        return [(f, self.local[f][best[1]], need) for f, need in totals.items()]

    def _one_domain(self, needs: Sequence[Need], caps: Mapping[int, list[int]]) -> Plan | None:
        totals: dict[int, int] = {}
        for f, count, per_pod in needs:
            totals[f] = totals.get(f, 0) + count * per_pod
        room: list[dict[int, int]] = [{} for _ in range(self.domain_count)]
        for f in totals:
            members = self.flavours[f].members
            for j, value in enumerate(caps[f]):
                d = self.domain_of[members[j]]
                room[d][f] = room[d].get(f, 0) + value
        candidates = sorted(
            (sum(r.values()), d)
            for d, r in enumerate(room)
            if all(r.get(f, 0) >= need for f, need in totals.items())
        )
        for _, d in candidates:
            allowed = {n for n in range(len(self.names)) if self.domain_of[n] == d}
            plan = self._spread(needs, {f: list(caps[f]) for f in totals}, allowed)
            if plan is not None:
                return plan
        return None


def least_fragmenting(
    buckets: list[list[int]],
    left: Mapping[int, int],
    per_pod: int,
    fragment: Callable[[int], float] | None,
) -> int:
    """The GPU (local index) a share of ``per_pod`` should take: the one whose unusable
    free capacity grows least. ``buckets`` index GPUs by free amount; ``left`` overrides
    it for GPUs a plan in progress already took from."""
    assert fragment is not None
    best: tuple[float, int, int] | None = None
    for value in range(per_pod, len(buckets)):
        j = next((j for j in buckets[value] if j not in left), None)
        if j is not None:
            score = (fragment(value - per_pod) - fragment(value), value, j)
            best = score if best is None or score < best else best
    for j, value in left.items():
        if value >= per_pod:
            score = (fragment(value - per_pod) - fragment(value), value, j)
            best = score if best is None or score < best else best
    assert best is not None, "pods_fit said it fits"
    return best[2]


def fragment_of(sizes: Mapping[int, float]) -> Callable[[int], float]:
    """``x`` free on a GPU times the share of requests (weighted ``sizes``) larger than
    ``x``: what of ``x`` the request mix could not use (FGD's fragmentation of one GPU,
    after Weng et al., USENIX ATC 2023)."""
    total = sum(sizes.values())
    ordered = sorted(sizes)
    above: list[float] = []  # weight of the sizes above ordered[i - 1]
    running = total
    for size in ordered:
        above.append(running)
        running -= sizes[size]
    above.append(0.0)

    def fragment(free: int) -> float:
        if free <= 0 or total <= 0:
            return 0.0
        return free * above[bisect_right(ordered, free)] / total

    return fragment


def _merge(plan: Plan) -> Plan:
    """One entry per (flavour, node), in node order."""
    merged: dict[tuple[int, int], int] = {}
    for f, j, gpus in plan:
        if gpus:
            merged[(f, j)] = merged.get((f, j), 0) + gpus
    return [(f, j, gpus) for (f, j), gpus in sorted(merged.items())]
