"""Celery tasks of the scheduler bridge: thin, take ids, idempotent, retry on transient errors.

Each `*_all` task fans out one task per cluster, so one broken cluster never stops the
others. Every per-cluster task runs its service through ``_on_cluster``: a cluster that
does not answer raises ClusterUnreachable and the task retries with backoff; bad settings
(any other gateway error) are logged, recorded where the service records them, and not
retried until an admin fixes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from scheduler_bridge import metrics
from scheduler_bridge.gateways import ClusterUnreachable, GatewayError
from scheduler_bridge.inventory.models import Cluster
from tenants.task_policy import background_task

logger = logging.getLogger(__name__)

Result = TypeVar("Result")

# Clusters that do not answer are retried with exponential backoff; bad settings are not
# (they are recorded on the cluster for an admin to fix).
retrying_task = background_task(retry_for=(ClusterUnreachable,))


def _on_cluster(
    cluster_id: int,
    work: str,
    run: Callable[[Cluster], Result],
    on_error: Callable[[Cluster, GatewayError], None] | None = None,
) -> Result | None:
    """``run(cluster)``; None when the cluster is gone or its settings cannot work."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return None
    try:
        return run(cluster)
    except ClusterUnreachable:
        metrics.cluster_error_counted(cluster.name, work)
        raise  # retried with backoff; whatever was decided and saved stays saved
    except GatewayError as error:
        metrics.cluster_error_counted(cluster.name, work)
        if on_error is not None:
            on_error(cluster, error)
        logger.warning("%s of %s failed: %s", work, cluster.name, error)
        return None


def _all_clusters(task: Callable[..., object]) -> int:
    """Queue ``task`` for every cluster. Beat's fan-outs send directly: they run on a
    worker the broker just reached, and a send that fails is the next beat's."""
    ids = list(Cluster.objects.values_list("pk", flat=True))
    for cluster_id in ids:
        task.delay(cluster_id)  # type: ignore[attr-defined]
    return len(ids)


@retrying_task
def inventory_sync(cluster_id: int) -> dict[str, int] | None:
    """Sync nodes and flavours of one cluster (capacity may have changed)."""
    from scheduler_bridge.inventory.services import inventory_sync as sync
    from scheduler_bridge.workloads.selectors import admitted_jobs

    result = _on_cluster(cluster_id, "inventory sync", lambda c: sync(c, admitted=admitted_jobs))
    if result is None:
        return None
    return {"nodes": result.nodes, "gpus": result.gpus, "flavours": result.flavours}


@background_task()
def inventory_sync_all() -> int:
    return _all_clusters(inventory_sync)


def _mark_error(cluster: Cluster, error: GatewayError) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(status="error", status_message=str(error))


@retrying_task
def quota_sync(cluster_id: int) -> dict[str, int] | None:
    """Apply the ResourceQuotas of every namespace bound on one cluster."""
    from scheduler_bridge.quotas.sync import quota_sync as sync
    from scheduler_bridge.workloads.selectors import queue_holdings

    result = _on_cluster(
        cluster_id, "quota sync", lambda c: sync(c, queue=queue_holdings(c)), on_error=_mark_error
    )
    if result is None:
        return None
    return {
        "namespaces": result.namespaces,
        "writes": result.writes,
        "drift_repaired": result.drift_repaired,
        "missing": len(result.missing),
    }


@background_task()
def quota_sync_all() -> int:
    return _all_clusters(quota_sync)


@retrying_task
def mig_reconcile(cluster_id: int) -> dict[str, int] | None:
    """Plan MIG layouts for one cluster and ask MIG Manager for the changes; follow up
    on earlier requests (success or failure)."""
    from scheduler_bridge.mig.services import mig_reconcile as reconcile
    from scheduler_bridge.workloads.selectors import admitted_jobs

    result = _on_cluster(
        cluster_id, "MIG reconcile", lambda c: reconcile(c, admitted=admitted_jobs)
    )
    if result is None:
        return None
    return {
        "requested": result.requested,
        "succeeded": result.succeeded,
        "failed": result.failed,
        "laid_out": result.laid_out,
    }


@background_task()
def mig_reconcile_all() -> int:
    return _all_clusters(mig_reconcile)


@retrying_task
def admission_cycle(cluster_id: int) -> dict[str, int] | None:
    """One admission cycle of a cluster: decide and save, then reconcile the cluster."""
    from scheduler_bridge.workloads.cycle import admission_cycle as cycle

    outcome = _on_cluster(cluster_id, "admission cycle", cycle)
    if outcome is None:
        return None
    return {
        "admitted": len(outcome.admitted),
        "preempted": len(outcome.preempted),
        "pending": outcome.pending,
        "apply_errors": len(outcome.apply_errors),
    }


@retrying_task
def cluster_reconcile(cluster_id: int) -> dict[str, int] | None:
    """Make the cluster match the saved decisions: suspend Jobs of work that must not run,
    sync ResourceQuotas, start admitted work, post owed Events."""
    from scheduler_bridge.workloads.reconcile import reconcile

    result = _on_cluster(cluster_id, "reconcile", reconcile)
    if result is None:
        return None
    return {
        "started": len(result.started),
        "suspended": len(result.suspended),
        "start_errors": len(result.start_errors),
        "events": result.events,
    }


@retrying_task
def jobs_sync(cluster_id: int) -> dict[str, int] | None:
    """Pick up queue-labelled Jobs and close workloads whose Job ended, then run an
    admission cycle right here (time alone may have changed what fits, and the Jobs just
    queued or closed should not wait for another task): the sync's own changes queue no
    cycle of their own. If the sync fails, a cycle is queued instead."""
    from scheduler_bridge.followups import (
        cycle_runs_next,
        queue_admission_cycle_now,
        queue_jobs_sync_now,
    )
    from scheduler_bridge.inventory.connection import cluster_gateway
    from scheduler_bridge.workloads.cycle import CycleOutcome
    from scheduler_bridge.workloads.cycle import admission_cycle as cycle
    from scheduler_bridge.workloads.jobs import JobSyncResult
    from scheduler_bridge.workloads.jobs import jobs_sync as sync
    from scheduler_bridge.workloads.locks import sync_lock_if_free

    def sync_then_cycle(cluster: Cluster) -> tuple[JobSyncResult, CycleOutcome]:
        with cluster_gateway(cluster) as gateway:  # one connection for both
            try:
                with cycle_runs_next(cluster.pk):
                    synced = sync(cluster, gateway)
            except BaseException:
                queue_admission_cycle_now(cluster.pk)  # for what it saved before failing
                raise
            # the cycle's reconcile reads the objects the sync just listed
            return synced, cycle(cluster, gateway, synced.listed)

    with sync_lock_if_free(cluster_id) as free:
        if not free:
            # another worker syncs this cluster now and may have listed before the change
            # that asked for this sync: ask again, after the task's shortest interval
            queue_jobs_sync_now(cluster_id)
            return {"busy": 1}
        done = _on_cluster(cluster_id, "Job sync", sync_then_cycle)
    if done is None:
        return None
    result, outcome = done
    return {
        "created": len(result.created),
        "rejected": len(result.rejected),
        "finished": len(result.finished),
        "admitted": len(outcome.admitted),
    }


@background_task()
def queue_tick_all() -> int:
    """The short period: Job sync and an admission cycle for every cluster."""
    return _all_clusters(jobs_sync)


@background_task(retry_for=(ConnectionError, TimeoutError))
def mig_failure_notify(node_id: int, message: str) -> int:
    """Email the active staff admins that MIG Manager failed on a node. Returns mails sent."""
    from django.contrib.auth import get_user_model
    from django.core.mail import send_mail
    from django.utils import translation
    from django.utils.translation import gettext as _

    from scheduler_bridge.inventory.models import Node
    from tenants.languages import emails_by_language

    node = Node.objects.select_related("cluster").filter(pk=node_id).first()
    if node is None:
        return 0
    admins = get_user_model().objects.filter(is_staff=True, is_active=True).exclude(email="")
    sent = 0
    for language, recipients in emails_by_language(admins).items():
        with translation.override(language):
            subject = _("Tidegate: MIG reconfiguration failed on %(node)s") % {"node": node.name}
            body = _(
                "MIG Manager could not apply the layout Tidegate asked for on node %(node)s "
                "(cluster %(cluster)s). What it reported:\n\n%(message)s\n\n"
                "The node keeps its previous layout; see its page in Tidegate."
            ) % {"node": node.name, "cluster": node.cluster.name, "message": message}
        sent += send_mail(subject, body, None, recipients, fail_silently=True)
    return sent
