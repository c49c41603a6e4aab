"""Scenarios of Tidegate's own for benchmarks/versus_kueue.py, written in the form of
Kueue's scheduler performance generator (``generator.yaml``: cohorts of ClusterQueues,
each with workload sets created on a schedule) so that Kueue's runner and Tidegate's
driver run the very same workloads.

Kueue's generator creates the ``k``-th workload of a set after ``k`` times the set's
``creationIntervalMs``, every set of every queue at once; a set of one workload is
therefore one workload created at that offset, which is how these scenarios place
arrivals where they want them.

* ``contention``: in each of two cohorts, three borrower queues fill the whole cohort
  with 10-GPU work from the start; from 8 s on, three owner queues (the same nominal
  quota, nothing running until then) come back with 5-GPU work, more than their nominal
  quota holds. Owners reclaim what was lent, and from then on every queue wants more
  than its share. Same priority everywhere: fairness decides, not priority.
* ``philly``: the shipped two-week Philly slice (data/traces/, Jeon et al., USENIX ATC
  2019), time-compressed: arrivals and runtimes divided by one factor, one queue per
  virtual cluster with the replay's quota (its share of 320 GPUs by the virtual
  cluster's nodes) in one cohort.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmarks._versus_figures import Queue

PHILLY_CAPACITY = 320
OWNERS_RETURN_MS = 8000


def _queue_set(name: str, count: int, nominal: int, borrowing: int) -> dict[str, Any]:
    return {
        "className": name,
        "count": count,
        "nominalQuota": nominal,
        "borrowingLimit": borrowing,
        "reclaimWithinCohort": "Any",
        "withinClusterQueue": "Never",
        "workloadsSets": [],
    }


def _one_at(offset_ms: int, class_name: str, runtime_ms: int, gpus: int) -> dict[str, Any]:
    """A workload set of one workload, created ``offset_ms`` after the start."""
    return {
        "count": 1,
        "creationIntervalMs": max(0, offset_ms),
        "workloads": [
            {
                "className": class_name,
                "runtimeMs": max(1, runtime_ms),
                "priority": 100,
                "request": gpus,
            }
        ],
    }


def contention_scenario() -> dict[str, Any]:
    borrowers = _queue_set("borrower", 3, 20, 100)
    borrowers["workloadsSets"] = [
        {
            "count": 40,
            "creationIntervalMs": 250,
            "workloads": [
                {"className": "borrower", "runtimeMs": 6000, "priority": 100, "request": 10}
            ],
        }
    ]
    owners = _queue_set("owner", 3, 20, 100)
    owners["workloadsSets"] = [
        _one_at(OWNERS_RETURN_MS + 400 * k, "owner", 4000, 5) for k in range(20)
    ]
    return {"cohorts": [{"className": "cohort", "count": 2, "queuesSets": [borrowers, owners]}]}


def size_class(gpus: int) -> str:
    if gpus <= 1:
        return "small"
    return "medium" if gpus < 8 else "large"


def philly_scenario(compress: float, days: float | None = None) -> dict[str, Any]:
    """The Philly slice divided in time by ``compress`` (its first ``days`` only, when
    given), one queue per virtual cluster in one cohort of 320 GPUs."""
    from scheduler_bridge.replay.cluster import one_product, proportional_quotas
    from scheduler_bridge.replay.trace import PHILLY_JOBS, PHILLY_VC_NODES, read_jobs, read_vc_nodes

    if compress < 1:
        raise ValueError("compress divides time: give a factor of 1 or more")
    jobs = sorted(read_jobs(PHILLY_JOBS), key=lambda j: (j.submitted_at, j.id))
    start = jobs[0].submitted_at
    # the quotas of the whole slice, whichever days run
    tenants = sorted({j.tenant for j in jobs})
    if days is not None:
        jobs = [j for j in jobs if j.submitted_at - start < days * 86400]
    plan = proportional_quotas(
        tenants, read_vc_nodes(PHILLY_VC_NODES), one_product(PHILLY_CAPACITY)
    )
    queue_sets = []
    for tenant in tenants:
        nominal = plan.guaranteed.get((tenant, "gpu"), 0)
        # "vc-": a virtual cluster's name such as 6214e9 would read as a number in YAML
        queue_set = _queue_set(f"vc-{tenant}", 1, nominal, PHILLY_CAPACITY - nominal)
        queue_set["workloadsSets"] = [
            _one_at(
                round((j.submitted_at - start) * 1000 / compress),
                size_class(j.gpus),
                round(j.run_time_s * 1000 / compress),
                j.gpus,
            )
            for j in jobs
            if j.tenant == tenant
        ]
        queue_sets.append(queue_set)
    return {"cohorts": [{"className": "philly", "count": 1, "queuesSets": queue_sets}]}


def scenario_queues(config: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(cohort, queue, queue set) per ClusterQueue, named as Kueue's generator names them."""
    found = []
    for cohort_set in config.get("cohorts") or []:
        for c in range(cohort_set["count"]):
            cohort = f"{cohort_set['className']}-{c}"
            for s, queue_set in enumerate(cohort_set.get("queuesSets") or []):
                for q in range(queue_set["count"]):
                    found.append((cohort, f"{queue_set['className']}-{s}-{q}-{cohort}", queue_set))
    return found


def queues_of(config: dict[str, Any]) -> dict[str, Queue]:
    """Every ClusterQueue of a scenario, named as Kueue's generator names it (the name is
    also its namespace), with its cohort and nominal quota."""
    return {
        name: Queue(cohort, int(queue_set["nominalQuota"]), queue_set["className"])
        for cohort, name, queue_set in scenario_queues(config)
    }


def classes_of(config: dict[str, Any]) -> Counter[str]:
    """How many workloads of each class the scenario creates."""
    found: Counter[str] = Counter()
    for cohort in config["cohorts"]:
        for queue_set in cohort["queuesSets"]:
            for workloads in queue_set["workloadsSets"]:
                for w in workloads["workloads"]:
                    found[w["className"]] += (
                        cohort["count"] * queue_set["count"] * workloads["count"]
                    )
    return found


def workload_count(config: dict[str, Any]) -> int:
    total = 0
    for cohort in config.get("cohorts") or []:
        for queues in cohort.get("queuesSets") or []:
            for workloads in queues.get("workloadsSets") or []:
                total += (
                    cohort["count"]
                    * queues["count"]
                    * workloads["count"]
                    * len(workloads.get("workloads") or [])
                )
    return total


def creation_schedule(config: dict[str, Any]) -> list[tuple[float, str, str, str, dict[str, Any]]]:
    """Every workload's creation as (seconds after the start, namespace, queue class,
    name, workload), in time order: Kueue's generator creates the ``k``-th workload of a
    set (counting from 1) ``k`` intervals after the start, every set at once."""
    schedule = []
    for _, queue, queue_set in scenario_queues(config):
        for index, workloads in enumerate(queue_set["workloadsSets"]):
            interval = workloads["creationIntervalMs"] / 1000
            k = 0
            for s in range(workloads["count"]):
                for i, workload in enumerate(workloads["workloads"]):
                    k += 1
                    name = f"{workload['className']}-{index}-{s}-{i}"
                    schedule.append((k * interval, queue, queue_set["className"], name, workload))
    schedule.sort(key=lambda entry: entry[0])
    return schedule


def simulated_figures(config: dict[str, Any], cycle_interval_s: float) -> dict[str, Any]:
    """Tidegate's replay simulator (the pure engine, simulated time) on the scenario's
    workloads with the same queues as tenants, one node holding every GPU, fair share
    with reclaim, a cycle at most every ``cycle_interval_s`` after a change: the
    figures benchmarks/_versus_figures.py gives for a real run, by the same definitions."""
    from scheduler_bridge.replay.cluster import QuotaPlan, one_product
    from scheduler_bridge.replay.policies import ReplayOptions, replay
    from scheduler_bridge.replay.trace import TraceJob

    queues = queues_of(config)
    capacity = sum(q.nominal for q in queues.values())
    cohorts = sorted({q.cohort for q in queues.values()})
    jobs = [
        TraceJob(
            id=f"{queue}/{name}",
            tenant=queue,
            submitted_at=offset,
            run_time_s=max(workload["runtimeMs"], 1) / 1000,
            gpus=int(workload["request"]),
        )
        for offset, queue, _, name, workload in creation_schedule(config)
    ]
    guaranteed = {(name, "gpu"): q.nominal for name, q in queues.items()}
    if len(cohorts) > 1:
        # each cohort a top-level tenant holding its queues' quota, lending nothing out
        for cohort in cohorts:
            guaranteed[(cohort, "gpu")] = sum(
                q.nominal for q in queues.values() if q.cohort == cohort
            )
        plan = QuotaPlan(
            guaranteed,
            parents={name: q.cohort for name, q in queues.items()},
            borrow_limits={(c, "gpu"): 0 for c in cohorts},
            lend_limits={(c, "gpu"): 0 for c in cohorts},
        )
    else:
        plan = QuotaPlan(guaranteed)
    run = replay(
        "fair-share",
        jobs,
        one_product(capacity, gpus_per_node=capacity),
        plan,
        ReplayOptions(cycle_interval_s=cycle_interval_s),
    )
    figures = run.figures
    # waits per workload class, where each queue holds one class (the replay keeps waits
    # per tenant): a class's waits are then its queues' waits
    by_class: dict[str, list[float]] = {}
    classes = _classes_by_queue(config)
    if all(len(found) == 1 for found in classes.values()):
        for queue, waits in run.tenant_wait_samples.items():
            by_class.setdefault(next(iter(classes[queue])), []).extend(waits)
    return {
        "workloads": figures.jobs,
        "never_admitted": figures.never_started,
        "span_s": round(figures.span_h * 3600, 3),
        "utilization": figures.utilization,
        "wait_mean_s": figures.wait_mean_s,
        "wait_p95_s": figures.wait_p95_s,
        "owner_wait_mean_s": figures.owner_wait_mean_s,
        "preemptions": figures.preemptions,
        "share_fairness": figures.share_fairness,
        "cycle_interval_s": cycle_interval_s,
        "wall_s": figures.wall_s,
    } | {
        f"mean_admission_s_{name}": round(sum(waits) / len(waits), 3)
        for name, waits in sorted(by_class.items())
        if waits
    }


def _classes_by_queue(config: dict[str, Any]) -> dict[str, set[str]]:
    return {
        queue: {w["className"] for s in queue_set["workloadsSets"] for w in s["workloads"]}
        for _, queue, queue_set in scenario_queues(config)
    }
