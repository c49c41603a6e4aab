"""The MIG layout planner: which idle GPUs to repartition so MIG demand fits.

Input: every GPU (node, index, product, current layout, busy), optional admin
pins per node, and the demand: instances wanted per (product, profile) plus
whole GPUs (MIG disabled) to keep per product. Output: a ``MigPlan`` with a
target layout per GPU, which GPUs change, and what demand is met or not and why.

Rules, in priority order:

1. Every target layout is legal (``layouts.is_legal_layout``).
2. Busy GPUs (running pods) never change: MIG Manager does not evict pods.
3. Pinned GPUs get their pin when idle and keep their layout while busy.
4. Meet as much demand as possible, weighted by compute slices; a whole-GPU
   request weighs 8, more than any MIG content of one GPU (7 slices), so
   keeping whole GPUs whole wins over filling them with MIG instances.
5. Change as few GPUs as possible: GPUs whose instances are already wanted stay.
6. Limit fragmentation: put demand on as few GPUs as possible, prefer
   extending a partitioned GPU over partitioning a whole one, place instances
   so the free slices stay in aligned blocks, and create only instances that
   demand asks for (free slices of a changed GPU stay free for the next plan).

How: work per product on count vectors (how many of each profile, plus one
"whole GPU" component), using the product's precomputed table of realisable
vectors (``layouts.layout_table``). Small problems (a node or three) are solved
exactly by dynamic programming over the unmet demand; large ones greedily:
repeatedly give the idle GPU class whose repartition covers the most unmet
demand its best legal vector, in batches. Both are deterministic. Pure Python.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import NotRequired, TypedDict

from scheduler_bridge.inventory.catalogue import (
    MIG_COMPUTE_SLICES,
    GpuProduct,
    UnknownGpuProduct,
    parse_profile_name,
    product_by_name,
    profile_by_name,
)
from scheduler_bridge.mig.layouts import (
    CountVector,
    LayoutTable,
    MigLayout,
    check_layout,
    layout_from_counts,
    layout_table,
)

# Weight of one whole GPU in the "demand met" objective; see rule 4 above.
WHOLE_GPU_WEIGHT = MIG_COMPUTE_SLICES + 1
# The exact solver runs when its estimated work (candidate vectors tried, see
# _exact_work) stays under this: about 0.2 s at worst. Larger problems go greedy.
EXACT_BUDGET = 100_000


@dataclass(frozen=True)
class GpuState:
    """One GPU as the inventory sees it. ``busy``: pods run on it, so it cannot change."""

    node: str
    index: int
    product: GpuProduct
    layout: MigLayout
    busy: bool = False


@dataclass(frozen=True)
class NodePin:
    """An admin's pin of a node's layouts: ``layout`` for every GPU, or per GPU index.

    A GPU of a pinned node with no layout in the pin keeps its current layout.
    Pins compare by MIG mode and profile counts, which is what mig-parted applies.
    """

    layout: MigLayout | None = None
    per_gpu: Mapping[int, MigLayout] = field(default_factory=dict)

    def layout_for(self, index: int) -> MigLayout | None:
        return self.per_gpu.get(index, self.layout)


@dataclass(frozen=True)
class MigDemand:
    """What should exist: MIG instances per (product name, profile name), whole GPUs per product."""

    instances: Mapping[tuple[str, str], int] = field(default_factory=dict)
    whole_gpus: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuPlan:
    """The planned layout of one GPU; ``changed`` means mig-parted will reconfigure it."""

    node: str
    index: int
    product: GpuProduct
    current: MigLayout
    target: MigLayout
    changed: bool
    reason: str


@dataclass(frozen=True)
class DemandOutcome:
    """Demand for one profile (``profile`` None: whole GPUs) against the plan's supply."""

    product: str
    profile: str | None
    wanted: int
    planned: int
    gpu_equivalent: float
    reason: str = ""

    @property
    def met(self) -> int:
        return min(self.wanted, self.planned)

    @property
    def unmet(self) -> int:
        return self.wanted - self.met


@dataclass(frozen=True)
class MigPlan:
    """A deterministic plan: every GPU's target and the demand outcome per profile."""

    gpus: tuple[GpuPlan, ...]
    outcomes: tuple[DemandOutcome, ...]

    @property
    def changed(self) -> tuple[GpuPlan, ...]:
        return tuple(g for g in self.gpus if g.changed)

    @property
    def unmet(self) -> tuple[DemandOutcome, ...]:
        return tuple(o for o in self.outcomes if o.unmet)

    @property
    def nodes_to_reconfigure(self) -> tuple[str, ...]:
        return tuple(sorted({g.node for g in self.gpus if g.changed}))

    @property
    def demand_met_ratio(self) -> float:
        """Met share of the wanted GPU-equivalents (1.0 when nothing is wanted)."""
        wanted = sum(o.wanted * o.gpu_equivalent for o in self.outcomes)
        met = sum(o.met * o.gpu_equivalent for o in self.outcomes)
        return 1.0 if wanted == 0 else met / wanted

    def node(self, name: str) -> tuple[GpuPlan, ...]:
        """The GPUs of one node, by index."""
        return tuple(g for g in self.gpus if g.node == name)


def same_config(a: MigLayout, b: MigLayout) -> bool:
    """Equal as mig-parted sees them: same MIG mode and same count per profile."""
    return a.mig_enabled == b.mig_enabled and a.counts() == b.counts()


# --- count vectors -----------------------------------------------------------
# A vector has one component per profile of the product (catalogue order) and a
# last component for "whole GPU" (MIG disabled).


def _vector(table: LayoutTable | None, layout: MigLayout) -> CountVector:
    width = len(table.profiles) if table else 0
    if not layout.mig_enabled:
        return (0,) * width + (1,)
    assert table is not None  # a MIG-enabled layout passed check_layout
    return table.vector_of(layout.counts()) + (0,)


def _weights(table: LayoutTable | None) -> CountVector:
    profiles = table.profiles if table else ()
    return tuple(p.compute_slices for p in profiles) + (WHOLE_GPU_WEIGHT,)


def _idle_slices(table: LayoutTable, vector: CountVector) -> int:
    """Compute slices a MIG-enabled GPU leaves unused; a whole GPU wastes none."""
    if vector[-1]:
        return 0
    return MIG_COMPUTE_SLICES - table.compute_slices(vector[:-1])


def _layout_of(table: LayoutTable, vector: CountVector, keep: MigLayout) -> MigLayout:
    if vector[-1]:
        return MigLayout.disabled()
    return layout_from_counts(table.product, table.counts_of(vector[:-1]), keep=keep)


@dataclass
class _Problem:
    """One product's planning problem; ``choice[i]`` is the new vector of ``flex[i]``."""

    table: LayoutTable
    demand: CountVector
    weights: CountVector
    base: CountVector  # supply of the GPUs that cannot change
    current: list[CountVector]
    candidates: list[CountVector]  # vectors a changed GPU may take (maximal + whole)
    choice: dict[int, CountVector] = field(default_factory=dict)

    def residual(self) -> CountVector:
        return tuple(max(d - b, 0) for d, b in zip(self.demand, self.base, strict=True))


def _exact_work(gpus: int, residual: CountVector, candidates: int) -> int:
    """Upper bound on the vectors the exact solver tries: per GPU, states x options.

    States are bounded both by the unmet-demand box and by the branching so far.
    """
    box = prod(r + 1 for r in residual)
    work, states = 0, 1
    for _ in range(gpus):
        work += states * (candidates + 1)
        states = min(box, states * (candidates + 1))
        if work > EXACT_BUDGET:
            break
    return work


# Decisions of the exact solver as a linked list: (earlier, gpu position, vector).
_Chain = tuple["_Chain", int, CountVector] | None
_Cost = tuple[int, int, _Chain]  # (changes, idle slices created, decisions)


def _solve_exact(problem: _Problem) -> None:
    """Dynamic programming over unmet demand, one idle GPU at a time.

    Each GPU keeps its vector (free) or takes a candidate vector cut down to
    the demand still open (one change). Cutting keeps the vector legal, since
    removing instances from a legal layout leaves a legal layout, and
    maximal candidates suffice: a bigger cut leaves less unmet demand and
    fewer idle slices. End states rank by (weighted unmet, changes, idle slices
    created); the first state reached wins ties, so the result is deterministic.
    """
    table = problem.table
    states: dict[CountVector, _Cost] = {problem.residual(): (0, 0, None)}
    for position, current in enumerate(problem.current):
        idle_before = _idle_slices(table, current)
        following: dict[CountVector, _Cost] = {}
        for residual, (changes, frag, chain) in states.items():
            options: list[tuple[CountVector, _Cost]] = [
                (
                    tuple(max(r - c, 0) for r, c in zip(residual, current, strict=True)),
                    (changes, frag, chain),
                )
            ]
            seen: set[CountVector] = set()
            for vector in problem.candidates:
                cut = tuple(min(v, r) for v, r in zip(vector, residual, strict=True))
                if cut in seen or cut == current or not any(cut):
                    continue
                seen.add(cut)
                left = tuple(r - c for r, c in zip(residual, cut, strict=True))
                delta = _idle_slices(table, cut) - idle_before
                options.append((left, (changes + 1, frag + delta, (chain, position, cut))))
            for state, cost in options:
                best = following.get(state)
                if best is None or cost[:2] < best[:2]:
                    following[state] = cost
        states = following

    weights = problem.weights

    def rank(item: tuple[CountVector, _Cost]) -> tuple[int, int, int]:
        residual, (changes, frag, _) = item
        return sum(w * r for w, r in zip(weights, residual, strict=True)), changes, frag

    chain = min(states.items(), key=rank)[1][2]
    while chain is not None:
        chain, position, vector = chain
        problem.choice[position] = vector


def _solve_greedy(problem: _Problem) -> None:
    """Repeatedly repartition the idle GPU whose change covers the most unmet demand.

    GPUs with the same current vector are interchangeable, so the search runs
    over those classes (tens), not over GPUs (thousands), and a chosen move is
    repeated while it gains as much. Gain = weighted demand the new vector
    covers minus what the GPU's current instances covered (so wanted instances
    stay). Ties go to the move that creates fewer idle slices (extending a
    partitioned GPU before breaking a whole one), then to larger profiles,
    which are harder to place later.
    """
    table, weights, demand = problem.table, problem.weights, problem.demand
    supply = list(problem.base)
    for current in problem.current:
        for d, c in enumerate(current):
            supply[d] += c
    classes: dict[CountVector, deque[int]] = {}
    for position, current in enumerate(problem.current):
        classes.setdefault(current, deque()).append(position)
    order = sorted(classes)
    # (gain, idle slices saved, largest-profile key), the cut vector, the uncut candidate
    Move = tuple[tuple[int, int, CountVector], CountVector, CountVector]

    def moves(current: CountVector, candidates: Sequence[CountVector]) -> Move | None:
        need = [max(d - s + c, 0) for d, s, c in zip(demand, supply, current, strict=True)]
        had = sum(w * min(n, c) for w, n, c in zip(weights, need, current, strict=True))
        idle_before = _idle_slices(table, current)
        best: Move | None = None
        for vector in candidates:
            cut = tuple(min(v, n) for v, n in zip(vector, need, strict=True))
            covered = sum(w * c for w, c in zip(weights, cut, strict=True))
            if covered <= had or (best is not None and covered - had < best[0][0]):
                continue
            # Weights of the profile components are their compute slices, so
            # the idle slices of a MIG cut are 7 minus what it covers.
            idle_after = 0 if cut[-1] else MIG_COMPUTE_SLICES - covered
            score = (covered - had, idle_before - idle_after, _largest_first(cut))
            if best is None or score > best[0]:
                best = (score, cut, vector)
        return best

    while True:
        move: Move | None = None
        chosen_class: CountVector | None = None
        for current in order:
            if classes[current]:
                found = moves(current, problem.candidates)
                if found is not None and (move is None or found[0] > move[0]):
                    move, chosen_class = found, current
        if move is None or chosen_class is None:
            return
        members = classes[chosen_class]
        # Repeat the move on the class's next GPUs while it gains as much: a
        # full re-scan per GPU would cost thousands of scans on a big cluster.
        while members and move is not None:
            score, cut, vector = move
            problem.choice[members.popleft()] = cut
            for d, (c, v) in enumerate(zip(chosen_class, cut, strict=True)):
                supply[d] += v - c
            again = moves(chosen_class, (vector,)) if members else None
            move = again if again is not None and again[:2] == (score, cut) else None


def _largest_first(vector: CountVector) -> CountVector:
    """Tie-break key preferring vectors heavy in the later (larger) profiles."""
    return tuple(reversed(vector))


# --- the entry point -----------------------------------------------------------


def plan_mig_layouts(
    gpus: Sequence[GpuState],
    demand: MigDemand,
    pins: Mapping[str, NodePin] | None = None,
) -> MigPlan:
    """Plan target MIG layouts for ``gpus`` so that ``demand`` fits (see the module doc).

    GPUs of products without a MIG table (L4, opaque products) are never
    changed. Raises ``IllegalMigLayout`` when a catalogue GPU's current layout
    or a pin is illegal for its GPU, ``UnknownMigProfile`` when demand names a profile the product does
    not offer, and ``ValueError`` for a GPU listed twice or a negative demand.
    Same input, same plan.
    """
    pins = pins or {}
    ordered = sorted(gpus, key=lambda g: (g.node, g.index))
    seen: set[tuple[str, int]] = set()
    for gpu in ordered:
        if (gpu.node, gpu.index) in seen:
            raise ValueError(f"GPU {gpu.index} of node {gpu.node} is listed twice")
        seen.add((gpu.node, gpu.index))
        if gpu.product.mig_capable:
            # A product outside the catalogue may run MIG with profiles we do
            # not know: it is left as is rather than failing the whole plan.
            check_layout(gpu.product, gpu.layout, f"{gpu.node} GPU {gpu.index}")
        pin = pins[gpu.node].layout_for(gpu.index) if gpu.node in pins else None
        if pin is not None:
            check_layout(gpu.product, pin, f"pin of {gpu.node} GPU {gpu.index}")
    for key, count in (*demand.instances.items(), *demand.whole_gpus.items()):
        if count < 0:
            raise ValueError(f"demand for {key} is negative: {count}")

    by_product: dict[str, list[GpuState]] = {}
    for gpu in ordered:
        by_product.setdefault(gpu.product.name, []).append(gpu)
    names = sorted(set(by_product) | {p for p, _ in demand.instances} | set(demand.whole_gpus))
    plans: list[GpuPlan] = []
    outcomes: list[DemandOutcome] = []
    for name in names:
        product_plans, product_outcomes = _plan_product(
            name, by_product.get(name, []), demand, pins
        )
        plans.extend(product_plans)
        outcomes.extend(product_outcomes)
    plans.sort(key=lambda g: (g.node, g.index))
    return MigPlan(tuple(plans), tuple(outcomes))


def _plan_product(
    name: str, gpus: list[GpuState], demand: MigDemand, pins: Mapping[str, NodePin]
) -> tuple[list[GpuPlan], list[DemandOutcome]]:
    product = gpus[0].product if gpus else _catalogue_product(name)
    wanted: dict[str, int] = {}
    for (owner, profile), count in demand.instances.items():
        if owner == name and count:
            if product is not None:  # UnknownMigProfile lists the valid profiles
                profile = profile_by_name(product, profile).name
            wanted[profile] = wanted.get(profile, 0) + count
    table = layout_table(product) if product is not None and product.mig_capable else None
    names = [p.name for p in table.profiles] if table else []
    demand_vector = tuple(wanted.get(p, 0) for p in names) + (demand.whole_gpus.get(name, 0),)

    fixed: list[GpuPlan] = []
    flex: list[GpuState] = []
    pinned = 0
    for gpu in gpus:
        pin = pins[gpu.node].layout_for(gpu.index) if gpu.node in pins else None
        if table is None:
            note = "no catalogue MIG table: left as is"
            fixed.append(_unchanged(gpu, note if gpu.layout.mig_enabled else "whole GPU"))
        elif gpu.busy:
            note = "busy: runs pods"
            if pin is not None and not same_config(pin, gpu.layout):
                note += "; its pin applies once it is idle"
            fixed.append(_unchanged(gpu, note))
        elif pin is not None:
            pinned += 1
            if same_config(pin, gpu.layout):
                fixed.append(_unchanged(gpu, "pinned"))
            else:
                fixed.append(
                    GpuPlan(
                        gpu.node, gpu.index, gpu.product, gpu.layout, pin, True, "set to its pin"
                    )
                )
        else:
            flex.append(gpu)

    plans = fixed
    if table is not None and flex:
        plans += _plan_flexible(table, demand_vector, fixed, flex)
    busy = sum(g.busy for g in gpus)
    counts = (len(gpus), busy, pinned)
    outcomes = _outcomes(name, product, wanted, demand.whole_gpus.get(name, 0), plans, counts)
    return plans, outcomes


def _catalogue_product(name: str) -> GpuProduct | None:
    try:
        return product_by_name(name)
    except UnknownGpuProduct:
        return None


def _unchanged(gpu: GpuState, reason: str) -> GpuPlan:
    return GpuPlan(gpu.node, gpu.index, gpu.product, gpu.layout, gpu.layout, False, reason)


def _plan_flexible(
    table: LayoutTable, demand: CountVector, fixed: list[GpuPlan], flex: list[GpuState]
) -> list[GpuPlan]:
    """Choose new vectors for some idle, unpinned GPUs and turn them into plans."""
    base = [0] * len(demand)
    for plan in fixed:
        for d, v in enumerate(_vector(table, plan.target)):
            base[d] += v
    width = len(table.profiles)
    problem = _Problem(
        table=table,
        demand=demand,
        weights=_weights(table),
        base=tuple(base),
        current=[_vector(table, gpu.layout) for gpu in flex],
        candidates=[v + (0,) for v in table.maximal] + [(0,) * width + (1,)],
    )
    residual = problem.residual()
    if any(residual):
        if _exact_work(len(flex), residual, len(problem.candidates)) <= EXACT_BUDGET:
            _solve_exact(problem)
        else:
            _solve_greedy(problem)
    plans: list[GpuPlan] = []
    for position, gpu in enumerate(flex):
        vector = problem.choice.get(position)
        if vector is None:
            plans.append(_unchanged(gpu, "kept: idle"))
            continue
        target = _layout_of(table, vector, keep=gpu.layout)
        reason = (
            "MIG disabled to keep a whole GPU"
            if not target.mig_enabled
            else f"repartitioned for demand: {target.describe()}"
        )
        plans.append(GpuPlan(gpu.node, gpu.index, gpu.product, gpu.layout, target, True, reason))
    return plans


def _outcomes(
    name: str,
    product: GpuProduct | None,
    wanted: Mapping[str, int],
    whole_wanted: int,
    plans: Sequence[GpuPlan],
    counts: tuple[int, int, int],
) -> list[DemandOutcome]:
    """Demand against planned supply per profile, with a reason for any shortfall."""
    supply: dict[str | None, int] = {}
    for plan in plans:
        if not plan.target.mig_enabled:
            supply[None] = supply.get(None, 0) + 1
        for profile, count in plan.target.counts().items():
            supply[profile] = supply.get(profile, 0) + count
    total, busy, pinned = counts

    def why(short: int) -> str:
        if not short:
            return ""
        if not total:
            return f"{short} short: no {name} GPUs in the inventory"
        return (
            f"{short} short: of {total} {name} GPUs {busy} are busy and {pinned} pinned, and no "
            f"change to the {total - busy - pinned} idle ones adds room for it without "
            "dropping other wanted instances"
        )

    outcomes: list[DemandOutcome] = []
    order = [p.name for p in product.mig_profiles] if product else []
    for profile in sorted(wanted, key=lambda p: (order.index(p) if p in order else len(order), p)):
        compute = _compute_slices(product, profile)
        planned = supply.get(profile, 0)
        short = max(wanted[profile] - planned, 0)
        weight = compute / MIG_COMPUTE_SLICES
        outcomes.append(DemandOutcome(name, profile, wanted[profile], planned, weight, why(short)))
    if whole_wanted:
        planned = supply.get(None, 0)
        short = max(whole_wanted - planned, 0)
        outcomes.append(DemandOutcome(name, None, whole_wanted, planned, 1.0, why(short)))
    return outcomes


def _compute_slices(product: GpuProduct | None, profile: str) -> int:
    if product is not None:
        return profile_by_name(product, profile).compute_slices
    return parse_profile_name(profile)[0]  # demand for a product we have never seen


# --- mig-parted rendering -------------------------------------------------------

# mig-parted's keys hold dashes, hence the functional TypedDict form.
MigPartedEntry = TypedDict(
    "MigPartedEntry",
    {"devices": list[int], "mig-enabled": bool, "mig-devices": NotRequired[dict[str, int]]},
)
MigPartedConfig = TypedDict(
    "MigPartedConfig", {"version": str, "mig-configs": dict[str, list[MigPartedEntry]]}
)


def mig_parted_devices(gpus: Sequence[GpuPlan]) -> list[MigPartedEntry]:
    """One node's targets as mig-parted ``mig-configs`` entries, GPUs with equal layouts grouped.

    Gives ``[{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
    {"devices": [2, 3], "mig-enabled": False}]``. mig-parted takes counts, not
    placements: the driver places instances (mig-parted tries creation orders
    until one succeeds). Every count emitted here comes from a target that
    passed ``is_legal_layout``, so a placement is known to exist. Busy GPUs are
    included with their current counts, which mig-parted sees as already
    applied and skips (it compares per-GPU profile counts).
    """
    groups: dict[tuple[bool, tuple[tuple[str, int], ...]], list[int]] = {}
    for gpu in sorted(gpus, key=lambda g: g.index):
        order = {p.name: i for i, p in enumerate(gpu.product.mig_profiles)}
        ordered = sorted(gpu.target.counts().items(), key=lambda kv: order.get(kv[0], len(order)))
        groups.setdefault((gpu.target.mig_enabled, tuple(ordered)), []).append(gpu.index)
    entries: list[MigPartedEntry] = []
    for (enabled, counts), indexes in groups.items():
        entry: MigPartedEntry = {"devices": indexes, "mig-enabled": enabled}
        if enabled:
            entry["mig-devices"] = dict(counts)
        entries.append(entry)
    return entries


def mig_parted_config(gpus: Sequence[GpuPlan], name: str | None = None) -> MigPartedConfig:
    """A complete mig-parted config (``version: v1``) holding one node's plan.

    ``name`` defaults to ``tidegate-`` plus a digest of the entries, so nodes
    with the same plan share one config and the name fits a label value
    (``nvidia.com/mig.config=<name>``, at most 63 characters).
    """
    entries = mig_parted_devices(gpus)
    if name is None:
        digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()
        name = f"tidegate-{digest[:12]}"
    return {"version": "v1", "mig-configs": {name: entries}}
