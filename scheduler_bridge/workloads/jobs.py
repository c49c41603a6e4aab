"""Kubernetes Jobs as workloads.

A Job created suspended in a bound namespace with the label `tidegate.io/queue:
<tenant-slug>` becomes a workload; its requests come from the pod template. A Job that
finished or was deleted frees its GPUs. A queue label naming an unknown tenant, or a
tenant other than the namespace's own (or one of its sub-teams), is never admitted: the
workload is recorded as rejected with the reason, and an audit event says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.utils import timezone

from scheduler_bridge.gateways import ClusterGateway
from scheduler_bridge.gateways.admission_webhook import QUEUE_LABEL
from scheduler_bridge.gateways.base import GPU_RESOURCE, JobInfo, PodInfo, is_gpu_resource
from scheduler_bridge.inventory.connection import cluster_gateway
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.workloads import lifecycle
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.services import PodSetSpec, workload_submit
from tenants.errors import Conflict, TidegateError
from tenants.models import NamespaceBinding, Tenant

logger = logging.getLogger(__name__)

PRIORITY_LABEL = "tidegate.io/priority-class"
TOPOLOGY_ANNOTATION = "tidegate.io/topology"
MAX_RUN_TIME_ANNOTATION = "tidegate.io/max-run-time-seconds"
PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass
class JobSyncResult:
    created: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    # running workloads whose completed pods gave their GPUs back
    released: list[int] = field(default_factory=list)


def _pod_set(cluster: Cluster, job: JobInfo) -> PodSetSpec:
    gpu = {r: n for r, n in job.requests_per_pod.items() if is_gpu_resource(r) and n > 0}
    if len(gpu) != 1:
        raise TidegateError(
            "the pod template must request exactly one GPU resource "
            f"(nvidia.com/gpu or one nvidia.com/mig-*), found: {sorted(gpu) or 'none'}"
        )
    resource, amount = next(iter(gpu.items()))
    count = pods_at_once(job)
    product_label = job.node_selector.get(PRODUCT_LABEL)
    product = None
    if product_label:
        # the Job's own product selector narrows the flavours admission may choose, so
        # the flavour's selector never contradicts it
        from scheduler_bridge.inventory.catalogue import product_from_gfd_label

        product = product_from_gfd_label(product_label).name
    if resource == GPU_RESOURCE:
        return PodSetSpec(count=count, gpus_per_pod=amount, product=product)
    return PodSetSpec(
        count=count,
        gpus_per_pod=amount,
        product=product,
        mig_profile=resource.removeprefix("nvidia.com/mig-").replace(".me", "+me"),
    )


def pods_at_once(job: JobInfo) -> int:
    """How many pods of the Job run at once: the Job controller keeps at most
    ``parallelism`` active and never more than the completions still to go
    (``pkg/controller/job/job_controller.go``, ``manageJob``), so a Job of 8 parallel
    pods and 2 completions holds 2 pods' GPUs, not 8."""
    count = max(job.parallelism, 1)
    if job.completions is not None:
        count = min(count, max(job.completions, 1))
    return count


def reclaimable_pods(job: JobInfo) -> int:
    """Pods of a running Job whose GPUs can go back: once the completions still to go
    are fewer than the pods it holds, the Job controller never runs more than those
    again (as Kueue's ``ReclaimablePods`` for batch/v1 Jobs, pkg/controller/jobs/job;
    without ``completions`` the Job ends when its pods do, so each success frees one)."""
    parallelism = max(job.parallelism, 1)
    if parallelism == 1 or job.succeeded == 0:
        return 0
    completions = job.completions if job.completions is not None else parallelism
    remaining = max(completions - job.succeeded, 0)
    return max(0, pods_at_once(job) - remaining)


def _release_completed_pods(
    workload: Workload, job: JobInfo, completed_on: Callable[[JobInfo], list[str]]
) -> bool:
    """Release the GPUs of the Job's completed pods not released yet; True if it did."""
    due = reclaimable_pods(job) - workload.released_pods
    if workload.state != Workload.State.RUNNING or due <= 0:
        return False
    try:
        lifecycle.release_pods(workload, pods=due, nodes=completed_on(job))
    except Conflict:
        return False
    return True


def _reject(cluster: Cluster, job: JobInfo, tenant: Tenant, reason: str) -> Workload:
    workload = Workload(
        cluster=cluster,
        tenant=tenant,
        name=job.name,
        source=Workload.Source.JOB,
        namespace=job.namespace,
        job_name=job.name,
        job_uid=job.uid,
        pod_sets=[],
        submitted_at=timezone.now(),
    )
    return lifecycle.reject(workload, reason)


def jobs_sync(cluster: Cluster, gateway: ClusterGateway | None = None) -> JobSyncResult:
    """Turn new queue-labelled Jobs into workloads; close workloads whose Job ended.
    Reads the cluster only: what it decides (a rejection's Event, a stop) the reconciler
    applies."""
    with cluster_gateway(cluster, gateway) as reader:
        jobs = reader.list_jobs(QUEUE_LABEL)
        pods: list[PodInfo] | None = None

        def completed_on(job: JobInfo) -> list[str]:
            """Nodes the Job's completed pods ran on (pods read once, when needed)."""
            nonlocal pods
            if pods is None:
                pods = reader.list_gpu_pods()
            return [
                p.node_name
                for p in pods
                if p.namespace == job.namespace
                and p.job_name == job.name
                and p.phase == "Succeeded"
                and p.node_name
            ]

        return _sync_jobs(cluster, jobs, completed_on)


def _sync_jobs(
    cluster: Cluster, jobs: list[JobInfo], completed_on: Callable[[JobInfo], list[str]]
) -> JobSyncResult:
    result = JobSyncResult()
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
            over = (job.finished or job.failed) and workload.state in Workload.OPEN_STATES
            if over and _job_ended(workload, failed=job.failed):
                result.finished.append(workload.pk)
            elif not over and _release_completed_pods(workload, job, completed_on):
                result.released.append(workload.pk)
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
    for uid, workload in known.items():
        gone = uid not in seen and workload.state in Workload.OPEN_STATES
        if gone and _job_ended(workload, deleted=True):
            result.finished.append(workload.pk)
    return result


def _job_ended(workload: Workload, *, failed: bool = False, deleted: bool = False) -> bool:
    """Close the workload of a Job that completed, failed or was deleted: work that held
    GPUs finishes (or fails), work still waiting is cancelled. False when it had already
    changed meanwhile (nothing to do)."""
    if deleted:
        reason = "the Job was deleted"
    else:
        reason = "the Job failed" if failed else "the Job completed"
    try:
        if workload.state not in Workload.ACTIVE_STATES:
            lifecycle.cancel(workload, reason)
        elif failed:
            lifecycle.fail(workload, reason)
        else:
            lifecycle.finish(workload, reason)
    except Conflict:
        return False
    return True


MAX_RUN_TIME_S = 2**31 - 1


def _int(value: str | None) -> int | None:
    """A positive whole number of seconds from an annotation, else None (ignored)."""
    try:
        number = int(value) if value else None
    except ValueError:
        return None
    return number if number is not None and 0 < number <= MAX_RUN_TIME_S else None


__all__ = ["JobSyncResult", "jobs_sync", "logger"]
