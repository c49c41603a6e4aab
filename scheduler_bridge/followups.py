"""Background work the bridge queues when a change commits, by task name (so no service
imports the task module, which imports the services): one function per kind of work."""

from __future__ import annotations

from tenants.transactions import queue_after_commit, queue_now


def queue_admission_cycle(cluster_id: int) -> None:
    """Decide, then reconcile, the cluster's queue after commit: waiting work may fit now."""
    queue_after_commit("scheduler_bridge.tasks.admission_cycle", cluster_id)


def queue_admission_cycle_now(cluster_id: int) -> None:
    """The same from a task that changed nothing itself (the Job sync after its tick):
    queued at once, or joined to the one already waiting."""
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
