"""The figures of a contention or trace run on a real control plane, computed the same way
for Kueue and for Tidegate from what each workload went through, and with the definitions
of Tidegate's replay (docs/replay.md#figures), so that the simulator's figures for the
same jobs sit beside them:

- ``utilization``: GPU-seconds held over the queues' nominal capacity, from the first
  creation to the last end;
- waits (mean, p95, per workload class): from creation to the first admission;
- ``owner_wait_mean_s``: the mean wait of *owner work*, a workload its queue's nominal
  quota holds whole (it would run under static slices);
- ``preemptions``: admissions that ended before the workload's runtime was done;
- ``min_usage``: the lowest queue class's GPU-seconds held over its nominal capacity for
  the span (Kueue's checker's usage, by the same held time);
- ``share_fairness``: Jain's index over queues of the GPU-seconds each held over its fair
  entitlement while it had demand (its nominal quota up to its demand, then a max-min
  share of what its cohort leaves), re-taken at every change.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_bridge.replay.figures import entitlement, jain, waits_of

EPSILON = 1e-9


@dataclass
class Observed:
    """One workload as a run saw it: when it was created and each admission it had."""

    queue: str
    class_name: str
    gpus: int
    created: float
    runs: list[tuple[float, float]] = field(default_factory=list)  # (start, end)


@dataclass(frozen=True)
class Queue:
    cohort: str
    nominal: int
    class_name: str = ""  # its queue set's class (Kueue's ClusterQueue class)


def measured_figures(workloads: Iterable[Observed], queues: Mapping[str, Queue]) -> dict[str, Any]:
    """The figures above for ``workloads`` run on ``queues`` (name -> cohort, nominal)."""
    seen = list(workloads)
    if not seen:
        raise ValueError("no workload was observed: nothing to measure")
    first = min(w.created for w in seen)
    last = max(max([w.created, *(end for _, end in w.runs)]) for w in seen)
    span = last - first
    capacity = sum(q.nominal for q in queues.values())
    held = {name: 0.0 for name in queues}
    for w in seen:
        held[w.queue] = held.get(w.queue, 0.0) + w.gpus * sum(e - s for s, e in w.runs)
    started = [w for w in seen if w.runs]
    waits = [w.runs[0][0] - w.created for w in started]
    owner = [w.runs[0][0] - w.created for w in started if w.gpus <= queues[w.queue].nominal]
    by_class: dict[str, list[float]] = defaultdict(list)
    for w in started:
        by_class[w.class_name].append(w.runs[0][0] - w.created)
    wait = waits_of(waits)
    held_by_class: dict[str, float] = defaultdict(float)
    nominal_by_class: dict[str, int] = defaultdict(int)
    for name, queue in queues.items():
        held_by_class[queue.class_name] += held.get(name, 0.0)
        nominal_by_class[queue.class_name] += queue.nominal
    usages = [
        held_by_class[name] / (span * nominal)
        for name, nominal in nominal_by_class.items()
        if nominal and span > 0
    ]
    figures: dict[str, Any] = {
        "workloads": len(seen),
        "never_admitted": len(seen) - len(started),
        "span_s": round(span, 3),
        "utilization": round(sum(held.values()) / (span * capacity), 4) if span > 0 else 0.0,
        "min_usage": round(min(usages), 4) if usages else 0.0,
        "wait_mean_s": round(sum(waits) / len(waits), 3) if waits else 0.0,
        "wait_p95_s": wait.p95_s,
        "owner_wait_mean_s": round(sum(owner) / len(owner), 3) if owner else 0.0,
        "preemptions": sum(max(0, len(w.runs) - 1) for w in seen),
        "share_fairness": round(share_fairness(seen, queues, held, last), 4),
    }
    for name, values in sorted(by_class.items()):
        figures[f"mean_admission_s_{name}"] = round(sum(values) / len(values), 3)
        figures[f"p95_admission_s_{name}"] = waits_of(values).p95_s
    return figures


def share_fairness(
    workloads: list[Observed],
    queues: Mapping[str, Queue],
    held: Mapping[str, float],
    last: float,
) -> float:
    """Jain's index over queues of GPU-seconds held over GPU-seconds entitled, the
    entitlement re-taken per cohort whenever a queue's demand changes (a workload is
    demand from its creation to the end of its last admission, or to ``last``)."""
    changes: list[tuple[float, str, int]] = []  # (time, queue, +/- GPUs of demand)
    for w in workloads:
        changes.append((w.created, w.queue, w.gpus))
        changes.append((w.runs[-1][1] if w.runs else last, w.queue, -w.gpus))
    changes.sort()
    cohorts: dict[str, list[str]] = defaultdict(list)
    for name, queue in queues.items():
        cohorts[queue.cohort].append(name)
    demand: dict[str, float] = defaultdict(float)
    entitled: dict[str, float] = defaultdict(float)
    now_entitled: dict[str, float] = {}
    since: float | None = None
    for at, changed, delta in changes:
        if since is not None and at > since:
            for name, amount in now_entitled.items():
                entitled[name] += amount * (at - since)
        since = at
        demand[changed] += delta
        now_entitled = {}
        for members in cohorts.values():
            capacity = sum(queues[m].nominal for m in members)
            now_entitled |= entitlement(
                capacity,
                {m: demand[m] for m in members},
                {m: float(queues[m].nominal) for m in members},
                {},
            )
    return jain(
        [held.get(name, 0.0) / amount for name, amount in entitled.items() if amount > EPSILON]
    )
