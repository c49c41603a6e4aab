"""What the scheduler bridge tells Prometheus: cycles, their decisions, cluster errors
and the pending queue (docs/operations.md#metrics).

The counters and the histogram count in the process that runs the cycle (a Celery
worker, or the web process in the demo); the pending depth is read from the database
when Prometheus scrapes (tenants.metrics).
"""

from __future__ import annotations

import json

from django.db.models import Count
from django.db.models.fields.json import KT
from prometheus_client import Counter, Histogram

from scheduler_bridge.workloads.models import Workload
from tenants.metrics import register_gauge

CYCLE_SECONDS = Histogram(
    "tidegate_admission_cycle_seconds",
    "Wall time of one admission cycle of a cluster: decide, save, reconcile.",
    ["cluster"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
ADMISSIONS = Counter(
    "tidegate_admissions_total", "Workloads admitted by admission cycles.", ["cluster"]
)
PREEMPTIONS = Counter(
    "tidegate_preemptions_total",
    "Workloads preempted by admission cycles (at once or when their grace ended).",
    ["cluster"],
)
SHRINKS = Counter(
    "tidegate_elastic_shrinks_total",
    "Elastic workloads an admission cycle shrank (gave back pods above their core).",
    ["cluster"],
)
RECONCILE_ERRORS = Counter(
    "tidegate_reconcile_errors_total",
    "Failures to make a cluster match the saved decisions: a reconcile run the cluster "
    "refused or did not answer, or a workload the cluster would not start.",
    ["cluster", "reconcile"],
)
SYNC_ERRORS = Counter(
    "tidegate_sync_errors_total",
    "Syncs with a cluster (inventory, quotas, Jobs) that failed.",
    ["cluster", "sync"],
)

# The name a task gives its work (scheduler_bridge.tasks) -> the counter and its label.
_ERROR_KINDS: dict[str, tuple[Counter, str]] = {
    "inventory sync": (SYNC_ERRORS, "inventory"),
    "quota sync": (SYNC_ERRORS, "quota"),
    "Job sync": (SYNC_ERRORS, "jobs"),
    "admission cycle": (RECONCILE_ERRORS, "cycle"),
    "reconcile": (RECONCILE_ERRORS, "workloads"),
    "MIG reconcile": (RECONCILE_ERRORS, "mig"),
}


def cluster_error_counted(cluster: str, work: str) -> None:
    """Count a failed ``work`` (a task's name for it) on ``cluster``."""
    counter, kind = _ERROR_KINDS.get(work, (RECONCILE_ERRORS, work))
    counter.labels(cluster, kind).inc()


def start_errors_counted(cluster: str, count: int) -> None:
    """Count workloads the cluster would not start in one reconcile."""
    if count:
        RECONCILE_ERRORS.labels(cluster, "start").inc(count)


def cycle_counted(
    cluster: str, *, seconds: float, admitted: int, preempted: int, shrunk: int
) -> None:
    """Record one admission cycle of ``cluster``."""
    CYCLE_SECONDS.labels(cluster).observe(seconds)
    ADMISSIONS.labels(cluster).inc(admitted)
    PREEMPTIONS.labels(cluster).inc(preempted)
    SHRINKS.labels(cluster).inc(shrunk)


def pending_depth() -> dict[tuple[str, ...], float]:
    """Pending workloads by cluster, tenant and the flavours they ask for ("any" when
    their first pod set names none)."""
    rows = (
        Workload.objects.filter(state=Workload.State.PENDING)
        .values("cluster__name", "tenant__slug", flavours=KT("pod_sets__0__flavours"))
        .annotate(count=Count("id"))
        .order_by()
    )
    depth: dict[tuple[str, ...], float] = {}
    for row in rows:
        key = (row["cluster__name"], row["tenant__slug"], _flavour_label(row["flavours"]))
        depth[key] = depth.get(key, 0) + row["count"]
    return depth


def _flavour_label(raw: str | None) -> str:
    try:
        names = json.loads(raw) if raw else []
    except ValueError:
        names = []
    if not isinstance(names, list) or not names:
        return "any"
    return ",".join(sorted(str(name) for name in names))


def register_gauges() -> None:
    """Serve the pending depth on /metrics (called once, from the app's ready())."""
    register_gauge(
        "tidegate_pending_workloads",
        "Workloads waiting for admission, by cluster, tenant and requested flavour.",
        pending_depth,
        labels=("cluster", "tenant", "flavour"),
    )
