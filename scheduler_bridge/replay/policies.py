"""Replay the same trace under several admission policies and measure each.

Policies (all on the same simulated cluster, GPUs per node fixed, one flavour):
- `static`: every team is held to its guarantee (borrowing off): the fixed-slice status
  quo that leaves GPUs idle while others queue.
- `fifo`: one shared queue, no guarantees honoured (everyone may borrow everything, no
  reclaim): high utilisation, but a burst from one team starves the rest.
- `fair-share`: Tidegate: guarantees, lending of idle guarantee, reclaim by preemption,
  weighted dominant share with decayed usage.
- `fair-share-elastic`: the same, with every job of 2 or more GPUs elastic down to half
  its GPUs (it starts with half, grows into idle GPUs and is shrunk before anything is
  preempted; a job of an even number of GPUs within a node runs as two pods, an odd one
  as pods of one GPU, a larger one as full-node pods) and a checkpoint every 30 minutes.
  The simulator's speed-up model is linear (admission/simulator.py).

Every policy reports ``goodput`` (GPU time of work that counted over the GPU time
offered) and ``wasted_gpu_hours`` (work thrown away by preemption, and elastic resize
pauses) beside ``utilization``.
Guarantees follow each virtual cluster's node count (philly_vc_nodes.csv) scaled to the
simulated capacity; teams missing from that file get no guarantee.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler_bridge.admission import EngineConfig, PendingWorkload, PodSet, Quota, Tenant
from scheduler_bridge.admission.engine import AdmissionEngine
from scheduler_bridge.admission.model import Flavour, Node, Topology
from scheduler_bridge.admission.simulator import SimJob, Simulator
from scheduler_bridge.replay.trace import TraceJob

POLICIES = ("static", "fifo", "fair-share", "fair-share-elastic")
ELASTIC_CHECKPOINT_S = 1800.0
FLAVOUR = "gpu"
ROOT = "cluster"


@dataclass(frozen=True)
class ReplayFigures:
    policy: str
    jobs: int
    wall_s: float
    utilization: float
    wait_mean_s: float
    wait_p95_s: float
    jain_fairness: float
    preemptions: int
    unfinished: int
    goodput: float = 0.0
    wasted_gpu_hours: float = 0.0
    shrinks: int = 0
    grows: int = 0


def guarantees(tenants: Sequence[str], vc_nodes: dict[str, int], capacity: int) -> dict[str, int]:
    """Capacity split in proportion to node counts (largest remainders get the rest)."""
    weights = {t: vc_nodes.get(t, 0) for t in tenants}
    total = sum(weights.values())
    if total == 0:
        return dict.fromkeys(tenants, 0)
    exact = {t: capacity * w / total for t, w in weights.items()}
    shares = {t: math.floor(v) for t, v in exact.items()}
    left = capacity - sum(shares.values())
    for tenant in sorted(exact, key=lambda t: (-(exact[t] - shares[t]), t))[:left]:
        shares[tenant] += 1
    return shares


def _quotas(policy: str, shares: dict[str, int], capacity: int) -> list[Quota]:
    root = Quota(tenant_id=ROOT, flavour=FLAVOUR, guaranteed=capacity)
    if policy == "fifo":
        return [root] + [Quota(tenant_id=t, flavour=FLAVOUR, guaranteed=0) for t in shares]
    borrow = 0 if policy == "static" else None
    return [root] + [
        Quota(tenant_id=t, flavour=FLAVOUR, guaranteed=g, borrow_limit=borrow)
        for t, g in shares.items()
    ]


def replay(
    policy: str,
    jobs: Sequence[TraceJob],
    vc_nodes: dict[str, int],
    *,
    nodes: int,
    gpus_per_node: int = 8,
    cycle_interval_s: float = 60.0,
    reclaim_min_run_s: float = 0.0,
) -> ReplayFigures:
    """Run `jobs` through the engine under `policy` and measure the outcome.
    ``reclaim_min_run_s`` protects young borrowed work from reclaim (fair-share only)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
    capacity = nodes * gpus_per_node
    tenant_names = sorted({j.tenant for j in jobs})
    shares = guarantees(tenant_names, vc_nodes, capacity)
    fits = [j for j in jobs if j.gpus <= capacity]
    elastic = policy == "fair-share-elastic"
    pod_set = _elastic_pod_set if elastic else _pod_set
    sim_jobs = [
        SimJob(
            workload=PendingWorkload(
                id=j.id,
                tenant_id=j.tenant,
                pod_sets=(pod_set(j.gpus, gpus_per_node),),
                submitted_at=j.submitted_at,
                topology=Topology.NONE,
            ),
            run_time_s=j.run_time_s,
            checkpoint_interval_s=ELASTIC_CHECKPOINT_S if elastic else None,
        )
        for j in fits
    ]
    simulator = Simulator(
        tenants=[Tenant(id=ROOT)] + [Tenant(id=t, parent_id=ROOT) for t in tenant_names],
        flavours=[Flavour(FLAVOUR, 1.0)],
        quotas=_quotas(policy, shares, capacity),
        nodes=[Node(name=f"n{i:04d}", capacity={FLAVOUR: gpus_per_node}) for i in range(nodes)],
        jobs=sim_jobs,
        engine=AdmissionEngine(
            EngineConfig(
                reclaim=policy.startswith("fair-share"), reclaim_min_run_s=reclaim_min_run_s
            )
        ),
        cycle_interval_s=cycle_interval_s,
    )
    started = time.perf_counter()
    result = simulator.run()
    wall = time.perf_counter() - started
    waits = sorted(o.wait_s for o in result.jobs if o.wait_s is not None)
    run_time = {j.workload.id: j.run_time_s for j in sim_jobs}
    slowdown: dict[str, list[float]] = defaultdict(list)
    for outcome in result.jobs:
        if outcome.wait_s is not None:
            slowdown[outcome.tenant_id].append(
                (outcome.wait_s + run_time[outcome.id]) / run_time[outcome.id]
            )
    per_tenant = [sum(v) / len(v) for v in slowdown.values() if v]
    return ReplayFigures(
        policy=policy,
        jobs=len(sim_jobs),
        wall_s=round(wall, 2),
        utilization=round(result.mean_utilization, 4),
        wait_mean_s=round(sum(waits) / len(waits), 1) if waits else 0.0,
        wait_p95_s=round(waits[min(len(waits) - 1, int(0.95 * len(waits)))], 1) if waits else 0.0,
        jain_fairness=round(jain(per_tenant), 4),
        preemptions=result.preemptions,
        unfinished=sum(1 for o in result.jobs if o.finished_at is None),
        goodput=round(result.goodput, 4),
        wasted_gpu_hours=round(result.wasted_gpu_seconds / 3600, 1),
        shrinks=result.shrinks,
        grows=result.grows,
    )


def _pod_set(gpus: int, per_node: int) -> PodSet:
    """Jobs larger than a node run as several full-node pods (as in Philly)."""
    if gpus <= per_node:
        return PodSet(count=1, gpus_per_pod=gpus, flavours=(FLAVOUR,))
    return PodSet(count=math.ceil(gpus / per_node), gpus_per_pod=per_node, flavours=(FLAVOUR,))


def _elastic_pod_set(gpus: int, per_node: int) -> PodSet:
    """A job of 2 or more GPUs that can run on half of them (see the module docstring)."""
    if gpus < 2:
        return _pod_set(gpus, per_node)
    if gpus > per_node:
        count = math.ceil(gpus / per_node)
        return PodSet(count, per_node, (FLAVOUR,), min_count=math.ceil(count / 2))
    if gpus % 2 == 0:
        return PodSet(2, gpus // 2, (FLAVOUR,), min_count=1)
    return PodSet(gpus, 1, (FLAVOUR,), min_count=math.ceil(gpus / 2))


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when every tenant sees the same mean slowdown."""
    if not values:
        return 1.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))
