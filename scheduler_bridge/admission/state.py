"""What one admission cycle knows: quota usage, free GPUs, running work and reservations.

Built from a snapshot at the start of a cycle and changed only by the cycle itself.
Within a cycle capacity only ever shrinks: admissions take GPUs and quota; a preemption
takes the free GPUs and the free quota its preemptor needs on top of what its victims
free, while the victims keep theirs until the caller has stopped them (next cycle); and
candidates for preemption are only ever removed. That monotony is what lets the engine
stop trying a (tenant, shape) group, or a shape on the nodes, after its first failure,
and skip it in the next cycle if nothing it depends on changed (incremental.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Final

from .fairshare import ShareCalculator
from .model import (
    ClusterSnapshot,
    EngineConfig,
    Flavour,
    Node,
    PendingWorkload,
    Quota,
    RunningWorkload,
    Tenant,
)
from .pending import TOPOLOGY_CODES, RawShape, Shape, build_shape
from .placement import NodePool, fragment_of
from .quota import NO_LIMIT, QuotaTree

Layout = tuple[tuple[str, tuple[tuple[str, int], ...], str | None], ...]
UNKNOWN: Final = -1  # a memo's entry not worked out yet (Static.unbounded)
# a pod count or GPUs per pod at or above this is looked up by the nested key (shape_of)
PART_LIMIT: Final = 1 << 20


class Static:
    """Compiled tenants, quotas, flavours and node layout; rebuilt only when they change."""

    def __init__(
        self,
        tenants: tuple[Tenant, ...],
        quotas: tuple[Quota, ...],
        flavours: tuple[Flavour, ...],
        layout: Layout,
    ) -> None:
        self.key = (tenants, quotas, flavours, layout)
        ordered = sorted(flavours, key=lambda f: f.name)
        self.flavour_names = [f.name for f in ordered]
        self.flavour_index = {name: i for i, name in enumerate(self.flavour_names)}
        self.gpu_equivalent = [f.gpu_equivalent for f in ordered]
        self.shared = [f.shared for f in ordered]
        self.tree = QuotaTree(tenants, quotas, self.flavour_names)
        self.node_names = [name for name, _, _ in layout]
        self.node_index = {name: i for i, name in enumerate(self.node_names)}
        if len(self.node_index) != len(self.node_names):
            raise ValueError("duplicate node names")
        self.shapes: dict[RawShape, Shape] = {}
        # shapes of one pod set by one int (shape_of), and the flavour lists in them
        self.simple_shapes: dict[int, Shape] = {}
        self.flavour_lists: dict[tuple[str, ...], int] = {}
        self.never_fits: dict[int, bool] = {}  # by shape id, per node layout
        # options whose every flavour is within the tenant's reach by its quotas, as
        # (shape id x tree size + workload node) << 16 | option index: plain ints, which
        # the cyclic collector never walks (explain.Explainer._never_by_quota)
        self.reachable: set[int] = set()
        # the reason of a workload with several flavour options, by its options' reasons
        # (explain.Explainer._explain_shape): most do not change between cycles
        self.worded_options: dict[tuple[tuple[str, str], ...], str] = {}
        # and each option's part of it, by (flavours' label, reason)
        self.worded_options_parts: dict[tuple[str, str], str] = {}
        # verdicts of (workload node, shape) groups with what they read, by shape id x
        # tree size + workload node (explain.Explainer._explain_shape)
        self.explained_groups: dict[int, tuple] = {}  # (stamp, *verdict, node verdicts)
        # whether some option of a (workload node, shape) group is free of the tenant's
        # own limits (every flavour within reach, none borrow-limited): 1, 0 or UNKNOWN,
        # by shape id, then workload node: such a group is never refused by them alone
        self.unbounded: list[list[int]] = []
        self._quota_classes: list[int] | None = None

    def quota_classes(self) -> list[int]:
        """Per tree node, one int shared by the nodes whose quota settings are the same
        on every flavour (access, guarantee, borrowing limit, the most they could ever
        hold) in the same tree: what a verdict reads of a tenant besides its usage
        (explain.Explainer._explain_shape). Worked out once while the quotas stand."""
        if self._quota_classes is None:
            tree = self.tree
            flavours = range(len(self.flavour_names))
            seen: dict[tuple, int] = {}
            classes: list[int] = []
            for node in range(tree.size):
                settings = (
                    tree.root[node],
                    *[
                        (
                            tree.access[f][node],
                            tree.guaranteed[f][node],
                            tree.borrow_limit[f][node],
                            tree.ceiling(f, node),
                        )
                        for f in flavours
                    ],
                )
                classes.append(seen.setdefault(settings, len(seen)))
            self._quota_classes = classes
        return self._quota_classes

    def is_unbounded(self, node: int, shape: Shape) -> bool:
        """Whether some option of ``shape`` may borrow without limit on every flavour
        for ``node`` (see ``unbounded``): true until the quotas change."""
        unbounded = self.unbounded
        while len(unbounded) <= shape.id:
            unbounded.append([])
        by_node = unbounded[shape.id]
        if not by_node:
            by_node = unbounded[shape.id] = [UNKNOWN] * self.tree.size
        found = by_node[node]
        if found == UNKNOWN:
            tree = self.tree
            found = by_node[node] = (
                1
                if shape.may_borrow
                and any(
                    all(
                        tree.access[f][node] and tree.borrow_limit[f][node] == NO_LIMIT
                        for f, _ in option.totals
                    )
                    for option in shape.options
                )
                else 0
            )
        return found == 1

    def shape(self, raw: RawShape) -> Shape:
        shape = self.shapes.get(raw)
        if shape is None:
            shape = self.shapes[raw] = build_shape(raw, len(self.shapes), self.flavour_index)
        return shape

    def shape_of(self, wl: PendingWorkload) -> Shape:
        """The shape of ``wl``. Most workloads have one pod set with one amount per pod:
        theirs is found by one int made of its parts (the flavour list's number, may
        borrow, opportunistic, topology, count, GPUs per pod), without building and
        hashing the nested key, which a fresh engine would do for every pending
        workload; any other is found by that key."""
        pod_sets = wl.pod_sets
        if len(pod_sets) == 1:
            ps = pod_sets[0]
            count = ps.count
            per_pod = ps.gpus_per_pod
            if not ps.per_flavour and 0 <= count < PART_LIMIT and 0 <= per_pod < PART_LIMIT:
                flavours = self.flavour_lists.get(ps.flavours)
                if flavours is None:
                    flavours = self.flavour_lists[ps.flavours] = len(self.flavour_lists)
                kind = (
                    (flavours * 2 + (1 if wl.preemptible else 0)) * 2
                    + (1 if wl.opportunistic else 0)
                ) * len(TOPOLOGY_CODES) + TOPOLOGY_CODES[wl.topology]
                key = (kind * PART_LIMIT + count) * PART_LIMIT + per_pod
                found = self.simple_shapes.get(key)
                if found is None:
                    raw = (wl.topology, (ps.raw,), wl.preemptible, wl.opportunistic)
                    found = self.simple_shapes[key] = self.shape(raw)
                return found
        return self.shape(
            (wl.topology, tuple([p.raw for p in pod_sets]), wl.preemptible, wl.opportunistic)
        )


def node_layout(nodes: Sequence[Node]) -> Layout:
    """The parts of the nodes that change rarely (names, capacity, domain), sorted by name."""
    return tuple(sorted((n.name, tuple(sorted(n.capacity.items())), n.domain) for n in nodes))


_running_id = attrgetter("id")  # (in C: a cycle sorts every running workload)


class Run:
    """A compiled running workload."""

    __slots__ = (
        "claimed",
        "end",
        "node",
        "order",
        "parts",
        "protected_until",
        "root",
        "spare_of",
        "token",
        "totals",
        "wl",
    )

    def __init__(
        self, wl: RunningWorkload, node: int, root: int, protected_until: float | None
    ) -> None:
        self.wl = wl
        self.node = node  # workload node in the quota tree, -1 for an unknown tenant
        self.root = root
        self.parts: list[tuple[int, int, int]] = []  # (flavour, local node, GPUs)
        self.totals: dict[int, int] = {}
        # victims go lowest priority first, then most recently admitted
        # (kept as one boxed tuple: typed by its fields, the compiled engine would store
        # it unboxed and make a new tuple, and float, at every read)
        self.order: tuple = (wl.priority, -wl.admitted_at, wl.id)
        self.claimed = False
        self.end = 0.0
        # until then no other tenant may reclaim it (EngineConfig.reclaim_min_run_s)
        self.protected_until = protected_until
        protected = protected_until is not None
        self.token = hash((wl.id, wl.priority, wl.preemptible, wl.evicting, protected))
        self.spare_of: Run | None = None  # set on spare_part's copies only

    def spare_part(self, totals: dict[int, int], parts: list[tuple[int, int, int]]) -> Run:
        """What is left of this claimed victim once its preemptor took its share: GPUs
        its stop frees that no preemptor of the cycle has taken over yet
        (CycleState.spare). Another reclaimer of the tree may take them over without
        stopping anyone else."""
        spare = Run(self.wl, self.node, self.root, None)
        spare.parts = parts
        spare.totals = totals
        spare.order = self.order
        spare.end = self.end
        spare.token = self.token
        spare.spare_of = self
        return spare


@dataclass(slots=True, eq=False)  # compared by identity (released by list.remove)
class ReservationEntry:
    """GPUs held for a starving workload during this cycle."""

    workload_id: str
    tenant_id: str
    option: int
    plan: list[tuple[int, int, int]]
    expected_start: float | None
    cls: int = 1  # guarantee class of the gang: 0 inside its tenant's guarantee
    blocked: dict[tuple[int, int], int] = field(default_factory=dict)
    hold: bool = False  # GPUs a preemption freed for this workload, not a gang's


class CycleState:
    """Mutable state of one cycle (see the module docstring)."""

    def __init__(self, static: Static, snapshot: ClusterSnapshot, config: EngineConfig) -> None:
        self.static = static
        self.tree = static.tree
        self.config = config
        self.now = snapshot.now
        nflavours = len(static.flavour_names)
        self.usage: list[list[int]] = [[0] * self.tree.size for _ in range(nflavours)]
        # what work that cannot be preempted holds, per flavour and workload node: it must
        # stay within the guarantee, so that whatever a tenant borrows is preemptible
        self.pinned: list[list[int]] = [[0] * self.tree.size for _ in range(nflavours)]
        # what elastic pods hold, per flavour and workload node: never part of the
        # tenant's claim on its guarantee (its rigid work may take them back)
        self.elastic: list[list[int]] = [[0] * self.tree.size for _ in range(nflavours)]
        # GPUs preemptors of this cycle took over from their victims, per flavour and
        # preemptor node, and who took them (for the reasons of work left waiting)
        self.reclaiming: list[list[int]] = [[0] * self.tree.size for _ in range(nflavours)]
        self.reclaimers: dict[tuple[int, int], list[str]] = {}
        self.reclaiming_nodes: set[int] = set()  # tenants with a reclaim in this cycle
        # per tree node, by flavour: usage the victims of this cycle will take off it
        # when they stop (take_over); by node, as a victim search reads it by level
        self.taken_from: list[dict[int, int] | None] = [None] * self.tree.size
        self.taken_version = 0  # changes whenever taken_from does (0: nothing taken)
        # tree nodes a victim search has adjusted for taken_from (_Search, until undo)
        self.level_seen: list[bool] = [False] * self.tree.size
        # per (tree, flavour), by victim id: the part of each victim of this cycle that
        # no preemptor has taken over yet (Run.spare_part), in nomination order
        self.spare: dict[tuple[int, int], dict[str, Run]] = {}
        # quota charged at the start for reclaimers whose victims stopped, by workload id
        # (reservation.hold_for_preemptors): (the tenant's parent level, (flavour, GPUs)
        # charged there)
        self.quota_held: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {}
        nodes = sorted(snapshot.nodes, key=lambda n: n.name)
        held = self._compile_running(snapshot.running, static)
        self.pool = NodePool(nodes, static.flavour_names, held)
        if config.share_packing == "fgd":
            self._pack_shares_by_fragmentation(snapshot)
        self._localise_runs()
        self.shares = ShareCalculator(
            self.tree,
            static.gpu_equivalent,
            snapshot.usage_history,
            snapshot.usage_half_life_s,
            config.usage_blend,
        )
        self._init_victim_view()
        self.reservations: list[ReservationEntry] = []
        self.reservation_of: dict[str, ReservationEntry] = {}
        # GPUs of reservations dropped during this cycle: free from the next one on
        self.released: dict[tuple[int, int], int] = {}

    def _compile_running(
        self, running: Sequence[RunningWorkload], static: Static
    ) -> dict[tuple[int, int], int]:
        tree = self.tree
        held: dict[tuple[int, int], int] = {}
        self.runs: list[Run] = []
        self._global_parts: list[list[tuple[int, int, int]]] = []
        self.run_tokens: dict[tuple[int, int], int] = {}
        assumed = self.config.assumed_run_time_s
        min_run = self.config.reclaim_min_run_s
        for wl in sorted(running, key=_running_id):
            tenant = tree.tenant_index.get(wl.tenant_id)
            node = tree.workload_node[tenant] if tenant is not None else -1
            protection = wl.admitted_at + min_run
            # elastic pods are the first thing taken back, however young
            protected = (
                protection > self.now
                and not wl.evicting
                and wl.preemptible
                and not wl.opportunistic
            )
            protected_until = protection if protected else None
            run = Run(wl, node, tree.root[node] if node >= 0 else -1, protected_until)
            limit = wl.max_run_time_s if wl.max_run_time_s is not None else assumed
            run.end = self.now if wl.evicting else max(self.now, wl.admitted_at + limit)
            parts: list[tuple[int, int, int]] = []
            for placement in wl.placements:
                f = static.flavour_index.get(placement.flavour)
                n = static.node_index.get(placement.node)
                if f is None or placement.gpus <= 0:
                    continue
                run.totals[f] = run.totals.get(f, 0) + placement.gpus
                if n is not None:
                    held[(n, f)] = held.get((n, f), 0) + placement.gpus
                    parts.append((f, n, placement.gpus))
            if node >= 0:
                for f, gpus in run.totals.items():
                    tree.add(f, node, gpus, self.usage[f])
                    if not wl.preemptible:
                        self.pinned[f][node] += gpus
                    if wl.opportunistic:
                        self.elastic[f][node] += gpus
                    key = (run.root, f)
                    self.run_tokens[key] = self.run_tokens.get(key, 0) + run.token
            self.runs.append(run)
            self._global_parts.append(parts)
        return held

    def _localise_runs(self) -> None:
        """Running parts by local node index, and indexes for victim search."""
        self.runs_by_root: dict[tuple[int, int], list[Run]] = {}
        # the elastic pods and idle fillers among them: what reclaim takes back first
        self.opportunistic_by_root: dict[tuple[int, int], list[Run]] = {}
        self.runs_by_node: dict[tuple[int, int], list[Run]] = {}
        self.runs_by_flavour: dict[int, list[Run]] = {}
        for run, parts in zip(self.runs, self._global_parts, strict=True):
            for f, n, gpus in parts:
                j = self.pool.local[f][n]
                if j >= 0:
                    run.parts.append((f, j, gpus))
            for f in run.totals:
                self.runs_by_flavour.setdefault(f, []).append(run)
                if run.node >= 0:
                    self.runs_by_root.setdefault((run.root, f), []).append(run)
                    self.runs_by_node.setdefault((run.node, f), []).append(run)
                    if run.wl.opportunistic:
                        self.opportunistic_by_root.setdefault((run.root, f), []).append(run)
        self._global_parts = []  # (kept by the runs now)

    def _init_victim_view(self) -> None:
        """Usage of the work that was running when the cycle started, minus the victims
        chosen so far. Whether a tenant borrows - and so whether its work may be a
        victim - is judged on it, not on ``usage``: work admitted during this cycle must
        not turn a tenant's older work into victims, and victim search stays monotone
        (it only ever loses candidates within a cycle). ``borrowers`` holds, per (tree,
        flavour), the workload nodes above their guarantee in this view.

        Work under reclaim protection (EngineConfig.reclaim_min_run_s) is left out of the
        view and kept in ``protected_usage``: a tenant's borrowing is its newest work, so
        while that is protected the tenant has nothing to give back, and its older work
        is not taken in its place."""
        tree = self.tree
        self.victim_view: list[list[int]] = [list(u) for u in self.usage]
        self.protected_usage: list[list[int]] = [[0] * tree.size for _ in self.usage]
        for run in self.runs:
            if run.protected_until is not None and run.node >= 0:
                for f, gpus in run.totals.items():
                    self.victim_view[f][run.node] -= gpus
                    self.protected_usage[f][run.node] += gpus
        self.borrowers: dict[tuple[int, int], set[int]] = {}
        for f, guaranteed in enumerate(tree.guaranteed):
            used = self.victim_view[f]
            for node in range(tree.size):
                if tree.is_workload_node[node] and used[node] > guaranteed[node]:
                    self.borrowers.setdefault((tree.root[node], f), set()).add(node)

    def add_victim_view(self, node: int, f: int, delta: int) -> None:
        """Change one workload node's usage in the victim view, keeping ``borrowers``."""
        used = self.victim_view[f]
        guaranteed = self.tree.guaranteed[f][node]
        before = used[node] > guaranteed
        used[node] += delta  # only the workload node's own figure is ever read
        after = used[node] > guaranteed
        if before != after:
            key = (self.tree.root[node], f)
            if after:
                self.borrowers.setdefault(key, set()).add(node)
            else:
                self.borrowers[key].discard(node)

    def keep_spare(self, whole: Run, spare: Run | None) -> None:
        """Record (or, with None, drop) what is left of victim ``whole``."""
        for f in whole.totals:
            by_victim = self.spare.get((whole.root, f))
            if spare is not None and spare.totals.get(f, 0) > 0:
                if by_victim is None:
                    by_victim = self.spare[(whole.root, f)] = {}
                by_victim[whole.wl.id] = spare
            elif by_victim is not None:
                by_victim.pop(whole.wl.id, None)

    def has_spare(self, root: int, flavours: Sequence[int]) -> bool:
        return any(self.spare.get((root, f)) for f in flavours)

    def spare_covering(self, root: int, totals: Sequence[tuple[int, int]], limit: int) -> list[Run]:
        """The first ``limit`` of the tree's spare victim GPUs that each cover the whole
        of ``totals`` ((flavour, GPUs) pairs) on their own, in the order their victims
        were chosen (by the first of ``totals``' flavours they are spare on). Read in
        place: a deep queue's tree can keep hundreds of them."""
        need = 0
        for _, gpus in totals:
            need += gpus
        found: list[Run] = []
        walked: list[dict[str, Run]] = []  # flavours already walked: their victims were seen
        for f, _ in totals:
            by_victim = self.spare.get((root, f))
            if not by_victim:
                continue
            for victim_id, run in by_victim.items():
                if walked and any(victim_id in seen for seen in walked):
                    continue
                covered = 0
                for g, _ in totals:
                    covered += run.totals.get(g, 0)
                if covered >= need:
                    found.append(run)
                    if len(found) == limit:
                        return found
            walked.append(by_victim)
        return found

    def claim(self, run: Run) -> None:
        """``run`` was chosen as a victim: no other preemptor may take it, and its
        tenant's borrowing is judged without it."""
        run.claimed = True
        if run.node >= 0:
            for f, gpus in run.totals.items():
                self.add_victim_view(run.node, f, -gpus)

    # ------------------------------------------------------------------ quota
    def quota_fits(self, node: int, totals: Sequence[tuple[int, int]]) -> bool:
        tree = self.tree
        for f, need in totals:
            if not tree.access[f][node] or tree.available(f, node, self.usage[f]) < need:
                return False
        return True

    def pinned_fits(self, node: int, totals: Sequence[tuple[int, int]]) -> bool:
        """Whether work that cannot be preempted fits what is left of the guarantee after
        the tenant's other such work (its preemptible work may hold the rest, borrowing)."""
        guaranteed = self.tree.guaranteed
        pinned = self.pinned
        return all(pinned[f][node] + need <= guaranteed[f][node] for f, need in totals)

    def add_pinned(self, node: int, totals: Sequence[tuple[int, int]]) -> None:
        for f, gpus in totals:
            self.pinned[f][node] += gpus

    def take_over(self, node: int, f: int, gpus: int, victim: Run, workload_id: str) -> None:
        """A preemptor at ``node`` takes over ``gpus`` of flavour ``f`` from ``victim``.
        The victim keeps counting where it counts until it stops (next cycle), so the
        GPUs are charged to the preemptor only on the levels the victim's usage does not
        reach: its own tenant and the levels up to, not including, the lowest one the
        two share. Its tenant's guarantee then counts the preemptor's whole need, so a
        second reclaimer of the tenant cannot claim the same unused guarantee, while no
        shared level counts the GPUs twice (and capacity still only shrinks)."""
        tree = self.tree
        usage = self.usage[f]
        shared = tree.lowest_common(node, victim.node)
        arriving = tree.add_below(f, node, gpus, usage, shared)
        # What the victim's stop frees at the shared level can be less than its GPUs:
        # the part that falls back inside its tenant's private (unlendable) guarantee
        # stays there. The preemptor is charged that part on the shared level now, or
        # work admitted later in this cycle would take quota the preemptor needs then.
        if shared != victim.node:
            self.taken_version += 1
            freed = tree.carried(f, victim.node, gpus, usage, shared, self.taken_from)
            if arriving > freed:
                tree.add(f, shared, arriving - freed, usage)
        self.reclaiming[f][node] += gpus
        self.reclaimers.setdefault((f, node), []).append(workload_id)
        self.reclaiming_nodes.add(node)

    def release_quota_held(self, workload_id: str) -> None:
        """Give back the quota held for a returning reclaimer (see quota_held)."""
        node, totals = self.quota_held.pop(workload_id)
        self.add_usage(node, totals, -1)

    def add_usage(self, node: int, totals: Sequence[tuple[int, int]], sign: int = 1) -> None:
        """Charge (or, with sign -1, release) quota usage of a workload node."""
        for f, gpus in totals:
            self.tree.add(f, node, sign * gpus, self.usage[f])

    def share(self, node: int) -> float:
        return self.shares.share(node, self.usage)

    def guarantee_class(self, node: int, shape: Shape) -> int:
        """0 if some flavour option fits inside the tenant's unused guarantee, else 1;
        2 for an elastic pod, which queues after all other work.

        Work inside its guarantee goes before borrowing work whatever its priority (Kueue
        sorts "does not borrow" first too): otherwise a higher-priority borrower could
        take GPUs just reclaimed for their owner, and reclaim would start over. The
        tenant's elastic pods do not count against its guarantee here: its rigid work
        takes them back (preemption.py)."""
        if shape.elastic:
            return 2
        guaranteed = self.tree.guaranteed
        usage = self.usage
        elastic = self.elastic
        for option in shape.options:
            for f, need in option.totals:
                if usage[f][node] - elastic[f][node] + need > guaranteed[f][node]:
                    break
            else:
                return 0
        return 1

    def rigid_usage(self, f: int, node: int) -> int:
        """What the workload node uses of flavour ``f`` apart from its elastic pods."""
        return self.usage[f][node] - self.elastic[f][node]

    def never_fits(self, shape: Shape) -> bool:
        """No option of ``shape`` fits even an idle cluster (cached per node layout)."""
        cache = self.static.never_fits
        verdict = cache.get(shape.id)
        if verdict is None:
            pool = self.pool
            verdict = all(
                pool.plan_generic(
                    option.needs,
                    shape.topology,
                    {f: list(pool.flavours[f].total) for f, _ in option.totals},
                )
                is None
                for option in shape.options
            )
            cache[shape.id] = verdict
        return verdict

    def _pack_shares_by_fragmentation(self, snapshot: ClusterSnapshot) -> None:
        """Shared flavours place each share where it fragments least, measured against
        the mix of share sizes queued and running now (one count per pod)."""
        index = self.static.flavour_index
        requests = [*snapshot.pending, *(r.request for r in snapshot.running if r.request)]
        mixes: dict[int, dict[int, float]] = {}
        for workload in requests:
            for pod_set in workload.pod_sets:
                f = index.get(pod_set.flavours[0])
                if f is not None and self.static.shared[f]:
                    mix = mixes.setdefault(f, {})
                    mix[pod_set.gpus_per_pod] = mix.get(pod_set.gpus_per_pod, 0.0) + pod_set.count
        for f, mix in mixes.items():
            self.pool.flavours[f].fragment = fragment_of(mix)

    # ------------------------------------------------------------ fingerprints
    def node_fingerprint(self, f: int) -> int:
        """Free GPUs of flavour ``f``, and what borrowing gangs hold reserved (work
        inside its guarantee may use those, see reservation.py)."""
        held = tuple(
            sorted(
                (j, gpus)
                for entry in self.reservations
                if entry.cls > 0
                for (ef, j), gpus in entry.blocked.items()
                if ef == f and gpus
            )
        )
        return hash((self.pool.fingerprint(f), held))

    def borrowing_holds(self) -> list[dict[int, int]]:
        """GPUs held by reservations of borrowing gangs: per flavour, local node -> GPUs."""
        held: list[dict[int, int]] = [{} for _ in self.usage]
        for entry in self.reservations:
            if entry.cls > 0:
                for (f, j), gpus in entry.blocked.items():
                    if gpus:
                        room = held[f]
                        room[j] = room.get(j, 0) + gpus
        return held

    def quota_fingerprint(self, f: int, root: int) -> tuple[tuple[int, ...], int]:
        return self.tree.fingerprint(f, root, self.usage[f]), self.run_tokens.get((root, f), 0)
