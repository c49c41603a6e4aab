"""Background work the bridge queues when a change commits, by task name (so no service
imports the task module, which imports the services): one function per kind of work."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tenants.transactions import queue_after_commit, queue_now

# Clusters whose admission cycle the running code runs itself once it is done.
_cycle_runs_next: ContextVar[frozenset[int]] = ContextVar("cycle_runs_next", default=frozenset())


@contextmanager
def cycle_runs_next(cluster_id: int) -> Iterator[None]:
    """Within the block, changes to ``cluster_id`` queue no admission cycle: the caller
    runs one right after (the Job sync does, for the Jobs it queued and closed)."""
    token = _cycle_runs_next.set(_cycle_runs_next.get() | {cluster_id})
    try:
        yield
    finally:
        _cycle_runs_next.reset(token)


def queue_admission_cycle(cluster_id: int) -> None:
    """Decide, then reconcile, the cluster's queue after commit: waiting work may fit now."""
    if cluster_id in _cycle_runs_next.get():
        return
    queue_after_commit("scheduler_bridge.tasks.admission_cycle", cluster_id)


def queue_admission_cycle_now(cluster_id: int) -> None:
    """The same from outside any change: queued at once, or joined to the one already
    waiting."""
    queue_now("scheduler_bridge.tasks.admission_cycle", cluster_id)


def queue_jobs_sync_now(cluster_id: int) -> None:
    """Read the cluster's queued objects again (the queue watch saw one change)."""
    queue_now("scheduler_bridge.tasks.jobs_sync", cluster_id)


def queue_quota_sync(cluster_id: int) -> None:
    """Bring the cluster's ResourceQuotas up to date after commit."""
    queue_after_commit("scheduler_bridge.tasks.quota_sync", cluster_id)


def queue_reconcile(cluster_id: int) -> None:
    """Make the cluster match the workloads' states after commit (start, suspend, Events)."""
    queue_after_commit("scheduler_bridge.tasks.cluster_reconcile", cluster_id)


def queue_inventory_sync(cluster_id: int) -> None:
    """Read the cluster's nodes again, then its ResourceQuotas, after commit."""
    queue_after_commit("scheduler_bridge.tasks.inventory_sync", cluster_id)
    queue_after_commit("scheduler_bridge.tasks.quota_sync", cluster_id)
