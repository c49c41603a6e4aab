"""Replay the same trace under several admission policies and measure each.

Policies (all on the same simulated cluster and the same quotas):
- `static`: every team is held to its guarantee (borrowing off): the fixed-slice status
  quo that leaves GPUs idle while others queue.
- `fifo`: one shared queue, no guarantees honoured (everyone may borrow everything, no
  reclaim): high utilisation, but a burst from one team starves the rest.
- `fair-share`: Tidegate: guarantees, lending of idle guarantee, reclaim by preemption,
  weighted dominant share with decayed usage.
- `fair-share-elastic`: the same, with every job of 2 or more GPUs elastic (down to its
  trace's ``min_gpus``, or half its GPUs), starting small, growing into idle GPUs and shrunk
  before anything is preempted, with a checkpoint every 30 minutes unless the trace says
  otherwise. The simulator's speed-up model is linear (admission/simulator.py).

The engine is the product's own (scheduler_bridge.admission); this module only builds the
simulated cluster and measures (figures.py; docs/replay.md).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import Any

from scheduler_bridge.admission import EngineConfig, PendingWorkload, PodSet, Quota, Tenant
from scheduler_bridge.admission.devices import MILLI
from scheduler_bridge.admission.engine import AdmissionEngine
from scheduler_bridge.admission.model import Flavour, Node, Topology
from scheduler_bridge.admission.simulator import SimJob, SimulationResult, Simulator

from .cluster import Product, QuotaPlan, ReplayCluster
from .figures import FairnessMeter, Timeline, WaitFigures, jain, tenant_waits, waits_of
from .trace import TraceJob

POLICIES = ("static", "fifo", "fair-share", "fair-share-elastic")
ELASTIC_CHECKPOINT_S = 1800.0
ROOT = "cluster"
HOUR_S = 3600.0


class ReplayInputError(ValueError):
    """Inputs a replay cannot run on (said before anything runs)."""


@dataclass(frozen=True)
class ReplayOptions:
    half_life_h: float = 168.0  # usage history half-life of fair share
    reclaim_min_run_s: float = 0.0  # borrowed work runs this long before reclaim
    reclaim_wait_s: float = 0.0  # owners wait this long for GPUs to free before reclaim
    cycle_interval_s: float = 60.0
    seed: int = 0  # orders jobs submitted in the same second
    timeline_points: int = 0  # samples kept for plots; 0: none
    share_packing: str = "fgd"  # which GPU a share takes on shared products (EngineConfig)
    # higher-priority work may preempt its own tenant's lower-priority work (EngineConfig)
    priority_preemption: bool = False


@dataclass(frozen=True)
class ReplayFigures:
    policy: str
    jobs: int
    jobs_completed: int
    never_started: int
    wall_s: float
    capacity_gpus: int
    span_h: float
    makespan_h: float
    utilization: float
    peak_utilization: float  # the most the cluster ever had allocated, over its capacity
    allocated_gpu_hours: float
    goodput: float  # GPU-hours of work that counted
    wasted_gpu_hours: float
    borrowed_gpu_hours: float
    wait_mean_s: float
    wait_p50_s: float
    wait_p95_s: float
    wait_p99_s: float
    owner_wait_mean_s: float
    owner_wait_ratio: float | None
    share_fairness: float
    jain_fairness: float
    preemptions: int
    shrinks: int
    grows: int
    tenant_waits: dict[str, WaitFigures] = field(default_factory=dict)
    # jobs stopped whole at least once, and the most times one job was (None: a result
    # kept from before these were measured)
    preempted_jobs: int | None = None
    most_preemptions_of_a_job: int | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PolicyRun:
    figures: ReplayFigures
    timeline: Timeline | None
    tenant_wait_samples: dict[str, list[float]]
    guarantees: dict[str, float]


def check_inputs(jobs: Sequence[TraceJob], cluster: ReplayCluster, quotas: QuotaPlan) -> None:
    """Raise ReplayInputError when a job can never run or the quotas do not fit."""
    if not jobs:
        raise ReplayInputError("the trace holds no jobs to replay")
    known = ", ".join(p.flavor for p in cluster.products)
    checked: set[tuple[tuple[str, ...], int, bool]] = set()
    for job in sorted(jobs, key=lambda j: -j.gpus):  # the largest job is the one named
        flavors = job_flavors(job, cluster)
        key = (flavors, job.gpus, job.gpu_milli is not None)
        if key in checked:
            continue
        checked.add(key)
        products = [cluster.product(f) for f in flavors]
        if None in products:
            missing = next(f for f, p in zip(flavors, products, strict=True) if p is None)
            raise ReplayInputError(
                f"job {job.id} asks for {missing!r}, which the cluster does not have; "
                f"products: {known} (--products)"
            )
        if job.gpu_milli is not None and not all(p is not None and p.shared for p in products):
            raise ReplayInputError(
                f"job {job.id} asks for {job.gpu_milli} thousandths of a GPU, but "
                f"{', '.join(flavors)} is not shared; replay it on shared products"
            )
        room = max(_room(cluster, p) for p in products if p is not None)
        if job.gpus > room:
            where = "one node" if products[0] is not None and products[0].shared else "capacity"
            raise ReplayInputError(
                f"the {where} of {room} {'/'.join(flavors)} GPUs is smaller than the largest "
                f"job ({job.id}, {job.gpus} GPUs); give --capacity {job.gpus} or more"
            )
    for tenant, flavor in quotas.guaranteed:
        product = cluster.product(flavor)
        if product is None:
            raise ReplayInputError(f"the quota of {tenant} names unknown flavour {flavor!r}")
    for product in cluster.products:
        total = sum(
            g
            for (tenant, f), g in quotas.guaranteed.items()
            if f == product.flavor and not quotas.parents.get(tenant)  # top-level tenants
        )
        if total > product.gpus:
            raise ReplayInputError(
                f"guarantees of {product.flavor} add up to {total} GPUs, more than its "
                f"{product.gpus}"
            )


def job_flavors(job: TraceJob, cluster: ReplayCluster) -> tuple[str, ...]:
    """The flavours a job may run on, in the order the engine tries them."""
    return job.flavors or (job.flavor or cluster.default_flavor,)


def _room(cluster: ReplayCluster, product: Product) -> int:
    """The largest job a product can hold: all its GPUs, or one node's on a shared product
    (whose multi-GPU jobs keep their GPUs on one node)."""
    return cluster.largest_node(product.flavor) if product.shared else product.gpus


def replay(
    policy: str,
    jobs: Sequence[TraceJob],
    cluster: ReplayCluster,
    quotas: QuotaPlan,
    options: ReplayOptions = ReplayOptions(),
    *,
    static_owner_wait_s: float | None = None,
) -> PolicyRun:
    """Run ``jobs`` through the engine under ``policy`` and measure the outcome.
    ``static_owner_wait_s`` (owner work's mean wait under static slices) gives the
    ``owner_wait_ratio``; for ``static`` itself the ratio is 1."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
    check_inputs(jobs, cluster, quotas)
    tenants = sorted({j.tenant for j in jobs})
    elastic = policy == "fair-share-elastic"
    ordered = _tie_order(jobs, options.seed)
    sim_jobs = [_sim_job(job, cluster, elastic) for job in ordered]
    guarantee = {t: quotas.tenant_guarantee(t, cluster) for t in tenants}
    fairness = FairnessMeter(cluster_equivalents(cluster), guarantee, quotas.weights)
    timeline = _timeline(jobs, cluster, options.timeline_points)
    # FIFO is one queue for the whole cluster: no tree, no guarantees
    shape = QuotaPlan(quotas.guaranteed, quotas.weights) if policy == "fifo" else quotas

    def observe(now: float, held: Any, demand: Any) -> None:
        fairness.observe(now, held, demand)
        if timeline is not None:
            timeline.observe(now, held, demand)

    simulator = Simulator(
        tenants=_tenants(tenants, shape),
        flavours=[_flavour(p) for p in cluster.products],
        quotas=_quotas(policy, _tree(tenants, shape), cluster, shape),
        nodes=_nodes(cluster),
        jobs=sim_jobs,
        engine=AdmissionEngine(
            EngineConfig(
                reclaim=policy.startswith("fair-share"),
                reclaim_min_run_s=options.reclaim_min_run_s,
                reclaim_wait_s=options.reclaim_wait_s,
                share_packing=options.share_packing,
                priority_preemption=options.priority_preemption,
            )
        ),
        cycle_interval_s=options.cycle_interval_s,
        usage_half_life_s=options.half_life_h * HOUR_S,
        observer=observe,
        guarantees=guarantee,
    )
    started = time.perf_counter()
    result = simulator.run()
    wall = time.perf_counter() - started
    fairness.close(result.end_time)
    return _measure(
        policy, jobs, cluster, quotas, result, wall, fairness, timeline, static_owner_wait_s
    )


def replay_policies(
    policies: Sequence[str],
    jobs: Sequence[TraceJob],
    cluster: ReplayCluster,
    quotas: QuotaPlan,
    options: ReplayOptions = ReplayOptions(),
    progress: Callable[[str, int], None] | None = None,
) -> list[PolicyRun]:
    """Each policy in turn; static runs first (also when not asked for, to give every other
    policy its ``owner_wait_ratio``). ``progress(policy, done)`` is told before each run."""
    runs: dict[str, PolicyRun] = {}
    order = ["static", *[p for p in policies if p != "static"]]
    for done, policy in enumerate(order):
        if progress is not None:
            progress(policy, done)
        baseline = runs["static"].figures.owner_wait_mean_s if "static" in runs else None
        runs[policy] = replay(policy, jobs, cluster, quotas, options, static_owner_wait_s=baseline)
    return [runs[p] for p in policies]


def cluster_equivalents(cluster: ReplayCluster) -> float:
    return sum(p.gpus * p.gpu_equivalent for p in cluster.products)


def pod_sets_for(gpus: int, per_node: int, flavor: str) -> tuple[PodSet, ...]:
    """The fewest pods that hold exactly ``gpus``: full-node pods and one for the rest."""
    if gpus <= per_node:
        return (PodSet(count=1, gpus_per_pod=gpus, flavours=(flavor,)),)
    full, rest = divmod(gpus, per_node)
    sets = [PodSet(count=full, gpus_per_pod=per_node, flavours=(flavor,), name="main")]
    if rest:
        sets.append(PodSet(count=1, gpus_per_pod=rest, flavours=(flavor,), name="rest"))
    return tuple(sets)


def elastic_pod_set(gpus: int, min_gpus: int, per_node: int, flavor: str) -> PodSet:
    """Equal pods of the largest size that divides the job, its minimum and the node."""
    size = reduce(math.gcd, (gpus, min_gpus, per_node))
    return PodSet(gpus // size, size, (flavor,), min_count=max(1, min_gpus // size))


def _sim_job(job: TraceJob, cluster: ReplayCluster, elastic: bool) -> SimJob:
    flavors = job_flavors(job, cluster)
    product = cluster.product(flavors[0])
    assert product is not None  # check_inputs said so
    checkpoint = job.checkpoint_s
    min_gpus = job.min_gpus if job.min_gpus is not None else math.ceil(job.gpus / 2)
    topology = Topology.NONE
    if product.shared:
        pod_sets: tuple[PodSet, ...] = (_shared_pod_set(job, flavors),)
        topology = Topology.ONE_NODE if job.gpus > 1 else Topology.NONE
    elif elastic and job.gpus >= 2 and min_gpus < job.gpus:
        pod_sets = (elastic_pod_set(job.gpus, min_gpus, product.gpus_per_node, product.flavor),)
        checkpoint = checkpoint or ELASTIC_CHECKPOINT_S
    else:
        pod_sets = pod_sets_for(job.gpus, product.gpus_per_node, product.flavor)
    return SimJob(
        workload=PendingWorkload(
            id=job.id,
            tenant_id=job.tenant,
            pod_sets=pod_sets,
            priority=job.priority,
            submitted_at=job.submitted_at,
            topology=topology,
            fills_idle=job.fills_idle,
        ),
        run_time_s=job.run_time_s,
        checkpoint_interval_s=checkpoint,
    )


def _shared_pod_set(job: TraceJob, flavors: tuple[str, ...]) -> PodSet:
    """On a shared product: one pod holding the job's share of one GPU, or one pod per GPU
    holding it whole (kept on one node by the workload's topology)."""
    if job.gpu_milli is not None:
        return PodSet(count=1, gpus_per_pod=job.gpu_milli, flavours=flavors)
    return PodSet(count=job.gpus, gpus_per_pod=MILLI, flavours=flavors)


def _flavour(product: Product) -> Flavour:
    if product.shared:  # counted in thousandths of a GPU
        return Flavour(product.flavor, product.gpu_equivalent / MILLI, shared=True)
    return Flavour(product.flavor, product.gpu_equivalent)


def _tie_order(jobs: Sequence[TraceJob], seed: int) -> list[TraceJob]:
    """Jobs submitted in the same second queue in an order drawn from ``seed``."""
    rng = random.Random(seed)
    keyed = [(job.submitted_at, rng.random(), index) for index, job in enumerate(jobs)]
    return [jobs[index] for _, _, index in sorted(keyed)]


def _tree(tenants: Sequence[str], plan: QuotaPlan) -> list[str]:
    """The tenants with work, and every tenant above them in the plan's tree."""
    seen: dict[str, None] = {}
    for tenant in tenants:
        node: str | None = tenant
        while node is not None and node not in seen:
            seen[node] = None
            node = plan.parents.get(node)
    return sorted(seen)


def _tenants(tenants: Sequence[str], plan: QuotaPlan) -> list[Tenant]:
    """Flat plans put every tenant under one cluster-wide root that owns all the GPUs; a
    plan with a tree keeps it, each top-level tenant its own cohort, as on the cluster."""
    if plan.parents:
        return [
            Tenant(id=t, parent_id=plan.parents.get(t), weight=plan.weights.get(t, 1.0))
            for t in _tree(tenants, plan)
        ]
    return [Tenant(id=ROOT)] + [
        Tenant(id=t, parent_id=ROOT, weight=plan.weights.get(t, 1.0)) for t in tenants
    ]


def _quotas(
    policy: str, tenants: Sequence[str], cluster: ReplayCluster, plan: QuotaPlan
) -> list[Quota]:
    quotas: list[Quota] = []
    for product in cluster.products:
        unit = MILLI if product.shared else 1  # shared products count thousandths

        def units(gpus: int | None, unit: int = unit) -> int | None:
            return None if gpus is None else gpus * unit

        if not plan.parents:
            quotas.append(
                Quota(tenant_id=ROOT, flavour=product.flavor, guaranteed=product.gpus * unit)
            )
        for tenant in tenants:
            key = (tenant, product.flavor)
            if policy == "fifo":
                quotas.append(Quota(tenant_id=tenant, flavour=product.flavor, guaranteed=0))
                continue
            quotas.append(
                Quota(
                    tenant_id=tenant,
                    flavour=product.flavor,
                    guaranteed=plan.guaranteed.get(key, 0) * unit,
                    borrow_limit=0 if policy == "static" else units(plan.borrow_limits.get(key)),
                    lend_limit=None if policy == "static" else units(plan.lend_limits.get(key)),
                )
            )
    return quotas


def _nodes(cluster: ReplayCluster) -> list[Node]:
    unit = {p.flavor: MILLI if p.shared else 1 for p in cluster.products}
    if cluster.nodes:
        return [
            Node(name=n.name, capacity={n.flavor: n.gpus * unit[n.flavor]}) for n in cluster.nodes
        ]
    nodes: list[Node] = []
    for product in cluster.products:
        left = product.gpus
        index = 0
        while left > 0:
            gpus = min(product.gpus_per_node, left)
            nodes.append(
                Node(
                    name=f"{product.flavor}-{index:04d}",
                    capacity={product.flavor: gpus * unit[product.flavor]},
                )
            )
            left -= gpus
            index += 1
    return nodes


def _timeline(jobs: Sequence[TraceJob], cluster: ReplayCluster, points: int) -> Timeline | None:
    if points <= 0:
        return None
    first = min(j.submitted_at for j in jobs)
    last = max(j.submitted_at + j.run_time_s for j in jobs)
    return Timeline(cluster_equivalents(cluster), max(60.0, (last - first) / points))


def _measure(
    policy: str,
    jobs: Sequence[TraceJob],
    cluster: ReplayCluster,
    quotas: QuotaPlan,
    result: SimulationResult,
    wall: float,
    fairness: FairnessMeter,
    timeline: Timeline | None,
    static_owner_wait_s: float | None,
) -> PolicyRun:
    gpus = {j.id: j for j in jobs}
    guarantee = dict(fairness.guarantee)
    started = [o for o in result.jobs if o.wait_s is not None]
    waits = waits_of([o.wait_s for o in started if o.wait_s is not None])
    owner = [
        o.wait_s
        for o in started
        if o.wait_s is not None and _owner_work(gpus[o.id], cluster, quotas)
    ]
    owner_mean = sum(owner) / len(owner) if owner else 0.0
    if policy == "static":
        ratio: float | None = 1.0
    elif static_owner_wait_s is None:
        ratio = None
    elif static_owner_wait_s > 0:
        ratio = round(owner_mean / static_owner_wait_s, 4)
    else:
        ratio = 1.0 if owner_mean == 0 else None  # owners never waited under static slices
    slowdown: dict[str, list[float]] = {}
    samples: dict[str, list[float]] = {}
    for outcome in started:
        assert outcome.wait_s is not None
        run = gpus[outcome.id].run_time_s
        slowdown.setdefault(outcome.tenant_id, []).append((outcome.wait_s + run) / run)
        samples.setdefault(outcome.tenant_id, []).append(outcome.wait_s)
    held = sum(result.held_gpu_seconds.values())
    capacity = cluster_equivalents(cluster)
    span = result.end_time - result.start_time
    finishes = [o.finished_at for o in result.jobs if o.finished_at is not None]
    figures = ReplayFigures(
        policy=policy,
        jobs=len(result.jobs),
        jobs_completed=len(finishes),
        never_started=len(result.jobs) - len(started),
        wall_s=round(wall, 2),
        capacity_gpus=cluster.capacity,
        span_h=round(span / HOUR_S, 2),
        makespan_h=round((max(finishes) - result.start_time) / HOUR_S, 2) if finishes else 0.0,
        utilization=round(held / (span * capacity), 4) if span > 0 and capacity else 0.0,
        peak_utilization=round(max((s.utilization for s in result.samples), default=0.0), 4),
        allocated_gpu_hours=round(held / HOUR_S, 1),
        goodput=round((held - result.wasted_gpu_seconds) / HOUR_S, 1),
        wasted_gpu_hours=round(result.wasted_gpu_seconds / HOUR_S, 1),
        borrowed_gpu_hours=round(sum(result.borrowed_gpu_seconds.values()) / HOUR_S, 1),
        wait_mean_s=waits.mean_s,
        wait_p50_s=waits.p50_s,
        wait_p95_s=waits.p95_s,
        wait_p99_s=waits.p99_s,
        owner_wait_mean_s=round(owner_mean, 1),
        owner_wait_ratio=ratio,
        share_fairness=round(fairness.index(result.held_gpu_seconds), 4),
        jain_fairness=round(jain([sum(v) / len(v) for v in slowdown.values()]), 4),
        preemptions=result.preemptions,
        shrinks=result.shrinks,
        grows=result.grows,
        tenant_waits=tenant_waits(result.jobs),
        preempted_jobs=sum(1 for o in result.jobs if o.preemptions),
        most_preemptions_of_a_job=max((o.preemptions for o in result.jobs), default=0),
    )
    return PolicyRun(figures, timeline, samples, guarantee)


def _owner_work(job: TraceJob, cluster: ReplayCluster, quotas: QuotaPlan) -> bool:
    """Work its owner's guarantee holds whole: it would run under static slices."""
    return any(
        0 < job.gpu_equivalents <= quotas.guaranteed.get((job.tenant, flavor), 0)
        for flavor in job_flavors(job, cluster)
    )
