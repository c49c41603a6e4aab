"""Kubernetes Jobs as workloads.

A Job created suspended in a bound namespace with the label `tidegate.io/queue:
<tenant-slug>` becomes a workload; its requests come from the pod template. A Job that
finished or was deleted frees its GPUs. A queue label naming an unknown tenant, or a
tenant other than the namespace's own (or one of its sub-teams), is never admitted: the
workload is recorded as rejected with the reason, and an audit event says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from scheduler_bridge.gateways import ClusterGateway
from scheduler_bridge.gateways.base import GPU_RESOURCE, JobInfo, is_gpu_resource
from scheduler_bridge.inventory.connection import gateway_for_cluster
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.quotas.services import queue_quota_sync
from scheduler_bridge.workloads.events import job_event
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.services import (
    PodSetSpec,
    lock_for_change,
    queue_cycle,
    workload_submit,
)
from tenants.audit import audit_record
from tenants.errors import TidegateError
from tenants.models import NamespaceBinding, Tenant

logger = logging.getLogger(__name__)

QUEUE_LABEL = "tidegate.io/queue"
PRIORITY_LABEL = "tidegate.io/priority-class"
TOPOLOGY_ANNOTATION = "tidegate.io/topology"
MAX_RUN_TIME_ANNOTATION = "tidegate.io/max-run-time-seconds"
PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass
class JobSyncResult:
    created: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)


def _pod_set(cluster: Cluster, job: JobInfo) -> PodSetSpec:
    gpu = {r: n for r, n in job.requests_per_pod.items() if is_gpu_resource(r) and n > 0}
    if len(gpu) != 1:
        raise TidegateError(
            "the pod template must request exactly one GPU resource "
            f"(nvidia.com/gpu or one nvidia.com/mig-*), found: {sorted(gpu) or 'none'}"
        )
    resource, amount = next(iter(gpu.items()))
    count = max(job.parallelism, 1)
    product_label = job.node_selector.get(PRODUCT_LABEL)
    if resource == GPU_RESOURCE:
        product = None
        if product_label:
            from scheduler_bridge.inventory.catalogue import product_from_gfd_label

            product = product_from_gfd_label(product_label).name
        return PodSetSpec(count=count, gpus_per_pod=amount, product=product)
    return PodSetSpec(
        count=count,
        gpus_per_pod=amount,
        mig_profile=resource.removeprefix("nvidia.com/mig-").replace(".me", "+me"),
    )


def _reject(cluster: Cluster, job: JobInfo, tenant: Tenant, reason: str) -> Workload:
    with transaction.atomic():
        workload = Workload.objects.create(
            cluster=cluster,
            tenant=tenant,
            name=job.name,
            source=Workload.Source.JOB,
            namespace=job.namespace,
            job_name=job.name,
            job_uid=job.uid,
            pod_sets=[],
            state=Workload.State.REJECTED,
            submitted_at=timezone.now(),
            reason_code="rejected",
            reason=reason,
        )
        audit_record(
            actor=None,
            action="action",
            instance=workload,
            before=None,
            after=None,
            message=f"Job {job.namespace}/{job.name} not admitted: {reason}",
        )
    return workload


def jobs_sync(cluster: Cluster, gateway: ClusterGateway | None = None) -> JobSyncResult:
    """Turn new queue-labelled Jobs into workloads; close workloads whose Job ended."""
    gateway = gateway or gateway_for_cluster(cluster)
    result = JobSyncResult()
    jobs = gateway.list_jobs(QUEUE_LABEL)
    bindings = {
        b.namespace: b.tenant
        for b in NamespaceBinding.objects.filter(cluster_name=cluster.name).select_related("tenant")
    }
    known = {
        w.job_uid: w
        for w in Workload.objects.filter(cluster=cluster, source=Workload.Source.JOB).exclude(
            job_uid=""
        )
    }
    seen = set()
    for job in jobs:
        seen.add(job.uid)
        workload = known.get(job.uid)
        if workload is not None:
            if (job.finished or job.failed) and workload.state in Workload.OPEN_STATES:
                _finish(workload, "the Job failed" if job.failed else "the Job completed")
                result.finished.append(workload.pk)
            continue
        owner = bindings.get(job.namespace)
        if owner is None or job.finished or job.failed:
            continue  # not a namespace Tidegate manages, or already over
        slug = job.labels.get(QUEUE_LABEL, "")
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            result.rejected.append(
                _reject(cluster, job, owner, f"the queue label names unknown tenant {slug!r}").pk
            )
            continue
        if not tenant.path.startswith(owner.path):
            result.rejected.append(
                _reject(
                    cluster,
                    job,
                    owner,
                    f"namespace {job.namespace} belongs to {owner.slug}, not {slug}",
                ).pk
            )
            continue
        if not job.suspended:
            result.rejected.append(
                _reject(
                    cluster,
                    job,
                    tenant,
                    "the Job was created running; create it with spec.suspend: true so the queue can admit it",
                ).pk
            )
            continue
        try:
            created = workload_submit(
                actor=None,
                cluster=cluster,
                tenant=tenant,
                name=job.name,
                pod_sets=[_pod_set(cluster, job)],
                topology=job.annotations.get(TOPOLOGY_ANNOTATION, Workload.Topology.NONE),
                priority_class=job.labels.get(PRIORITY_LABEL) or job.priority_class_name,
                max_run_time_s=_int(job.annotations.get(MAX_RUN_TIME_ANNOTATION)),
                source=Workload.Source.JOB,
                namespace=job.namespace,
                job_name=job.name,
                job_uid=job.uid,
                audit_source="system",
            )
        except TidegateError as error:
            result.rejected.append(_reject(cluster, job, tenant, error.message).pk)
            continue
        except Exception as error:  # noqa: BLE001 - one odd Job must not stop the sync
            logger.exception("Job %s/%s could not be queued", job.namespace, job.name)
            result.rejected.append(
                _reject(cluster, job, tenant, f"could not be queued: {error}").pk
            )
            continue
        result.created.append(created.pk)
    for refused in Workload.objects.filter(pk__in=result.rejected):
        job_event(gateway, refused, "QueueRejected", refused.reason, warning=True)
    for uid, workload in known.items():
        if uid not in seen and workload.state in Workload.OPEN_STATES:
            _finish(workload, "the Job was deleted")
            result.finished.append(workload.pk)
    return result


def _finish(workload: Workload, reason: str) -> None:
    with transaction.atomic():
        locked = lock_for_change(workload)
        if locked.state not in Workload.OPEN_STATES:
            return
        was_active = locked.state in Workload.ACTIVE_STATES
        locked.state = Workload.State.FINISHED if was_active else Workload.State.CANCELLED
        locked.finished_at = timezone.now() if was_active else None
        locked.queue_position = None
        locked.reason = reason
        locked.save()
        queue_cycle(locked.cluster_id)
        if locked.borrowed:
            queue_quota_sync(locked.cluster_id)  # lower the ceiling it had raised


MAX_RUN_TIME_S = 2**31 - 1


def _int(value: str | None) -> int | None:
    """A positive whole number of seconds from an annotation, else None (ignored)."""
    try:
        number = int(value) if value else None
    except ValueError:
        return None
    return number if number is not None and 0 < number <= MAX_RUN_TIME_S else None


__all__ = ["JobSyncResult", "jobs_sync", "logger"]
