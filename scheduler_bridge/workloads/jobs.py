"""Workload objects on a cluster as workloads: Jobs, JobSets, PyTorchJobs, RayClusters
and RayJobs (scheduler_bridge/integrations has one adapter per kind).

An object created suspended in a bound namespace with the label `tidegate.io/queue:
<tenant-slug>` becomes a workload; its pod sets and GPU requests come from its pod
templates, its elastic counts from the framework's own fields or the annotation
`tidegate.io/min-pods`. An object that finished or was deleted frees its GPUs. A queue
label naming an unknown tenant, or a tenant other than the namespace's own (or one of
its sub-teams), an object Tidegate cannot queue (no GPU request, a minimum above the
count), or one created running is never admitted: the workload is recorded as rejected
with the reason, and an audit event says so. A kind whose CRD the cluster does not
serve is skipped, and the cluster's `workload_kinds` says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from scheduler_bridge.gateways import ClusterGateway, ClusterUnreachable
from scheduler_bridge.gateways.base import POD_KIND, QUEUE_LABEL, PodInfo
from scheduler_bridge.integrations import INTEGRATIONS, ObjectRead, PodSetRead, integration_for
from scheduler_bridge.integrations.access import list_queued, queued_pod_groups
from scheduler_bridge.integrations.kinds import kind_facts
from scheduler_bridge.integrations.pods import KIND as POD_GROUP
from scheduler_bridge.inventory.connection import cluster_gateway
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.workloads import lifecycle
from scheduler_bridge.workloads import wording as worded
from scheduler_bridge.workloads.claims import ClaimResolver
from scheduler_bridge.workloads.locks import held_sync_lock
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.services import ClusterFacts, PodSetSpec, workload_submit
from tenants.errors import Conflict, TidegateError
from tenants.models import NamespaceBinding, Tenant

logger = logging.getLogger(__name__)

PRIORITY_LABEL = "tidegate.io/priority-class"
TOPOLOGY_ANNOTATION = "tidegate.io/topology"
MAX_RUN_TIME_ANNOTATION = "tidegate.io/max-run-time-seconds"
GRACE_ANNOTATION = "tidegate.io/preemption-grace-seconds"
CHECKPOINT_ANNOTATION = "tidegate.io/checkpoint-interval-seconds"
QUEUED = "queued"


@dataclass
class JobSyncResult:
    created: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    # running workloads whose completed pods gave their GPUs back
    released: list[int] = field(default_factory=list)
    # kind -> "queued", or why it was skipped
    kinds: dict[str, str] = field(default_factory=dict)
    # pod groups whose controller or autoscaler changed how many pods they have
    rescaled: list[int] = field(default_factory=list)
    # kind -> the objects this sync listed (the reconcile right after reads them again
    # from here rather than from the cluster)
    listed: dict[str, list[ObjectRead]] = field(default_factory=dict)


def _pod_sets(job: ObjectRead, claims: ClaimResolver) -> list[PodSetSpec]:
    specs = [_asked(read) for read in job.pod_sets]
    if not any(read.claims or read.shared_claims for read in job.pod_sets):
        return specs
    return claims.pod_sets(job.namespace, job.pod_sets, specs)


def _asked(read: PodSetRead) -> PodSetSpec:
    product = None
    if read.product:
        # the object's own product selector narrows the flavours admission may choose,
        # so the flavour's selector never contradicts it
        from scheduler_bridge.inventory.catalogue import product_from_gfd_label

        product = product_from_gfd_label(read.product).name
    return PodSetSpec(
        count=read.count,
        gpus_per_pod=read.gpus_per_pod,
        name=read.name,
        product=product,
        mig_profile=read.mig_profile,
        min_count=read.min_count,
        gpu_milli=read.share.gpu_milli if read.share else None,
        gpu_memory_mib=read.share.memory_mib if read.share else None,
        share_style=read.share.style if read.share else None,
    )


def _release_completed_pods(
    workload: Workload, obj: ObjectRead, completed_on: Callable[[ObjectRead], list[str]]
) -> bool:
    """Release the GPUs of the Job's completed pods not released yet; True if it did."""
    due = obj.reclaimable_pods - workload.released_pods
    if workload.state != Workload.State.RUNNING or due <= 0:
        return False
    try:
        lifecycle.release_pods(workload, pods=due, nodes=completed_on(obj))
    except Conflict:
        return False
    return True


def _reject(cluster: Cluster, job: ObjectRead, tenant: Tenant, reason: str) -> Workload:
    workload = Workload(
        cluster=cluster,
        tenant=tenant,
        name=job.name,
        source=Workload.Source.JOB,
        namespace=job.namespace,
        job_name=job.name,
        job_uid=job.uid,
        kind=job.kind,
        pod_sets=[],
        submitted_at=timezone.now(),
    )
    return lifecycle.reject(workload, reason)


def jobs_sync(cluster: Cluster, gateway: ClusterGateway | None = None) -> JobSyncResult:
    """Turn new queue-labelled objects of every served kind into workloads; close
    workloads whose object ended. Reads the cluster only: what it decides (a
    rejection's Event, a stop) the reconciler applies."""
    result = JobSyncResult()
    with held_sync_lock(cluster.pk), cluster_gateway(cluster, gateway) as reader:
        gpu_pods: list[PodInfo] | None = None
        claims = ClaimResolver(reader)  # reads DRA objects only if a pod set has claims
        facts = _SyncFacts(cluster)  # read once for every Job this sync queues

        def completed_on(job: ObjectRead) -> list[str]:
            """Nodes the Job's completed pods ran on (pods read once, when needed)."""
            nonlocal gpu_pods
            if gpu_pods is None:
                gpu_pods = reader.list_gpu_pods()
            return [
                p.node_name
                for p in gpu_pods
                if p.namespace == job.namespace
                and p.job_name == job.name
                and p.phase == "Succeeded"
                and p.node_name
            ]

        for integration in INTEGRATIONS:
            objects = list_queued(reader, integration, QUEUE_LABEL)
            if objects is None:
                result.kinds[integration.kind] = (
                    f"skipped: the cluster does not serve {integration.ref.plural}."
                    f"{integration.ref.group}/{integration.ref.version} (its CRD is not installed)"
                )
                continue
            result.kinds[integration.kind] = QUEUED
            result.listed[integration.kind] = objects
            _sync_objects(
                cluster,
                integration.kind,
                integration.pins_nodes,
                objects,
                completed_on,
                result,
                claims,
                facts,
            )
        if reader.serves(POD_KIND):
            groups = queued_pod_groups(reader, QUEUE_LABEL)
            result.kinds[POD_GROUP] = QUEUED
            reads = [g.read for g in groups]
            _sync_objects(cluster, POD_GROUP, False, reads, completed_on, result, claims, facts)
    if cluster.workload_kinds != result.kinds:
        cluster.workload_kinds = result.kinds
        Cluster.objects.filter(pk=cluster.pk).update(workload_kinds=result.kinds)
    return result


def _sync_objects(
    cluster: Cluster,
    kind: str,
    pins_nodes: bool,
    objects: list[ObjectRead],
    completed_on: Callable[[ObjectRead], list[str]],
    result: JobSyncResult,
    claims: ClaimResolver,
    facts: _SyncFacts,
) -> None:
    bindings = {
        b.namespace: b.tenant
        for b in NamespaceBinding.objects.filter(cluster_name=cluster.name).select_related("tenant")
    }
    kinds = [kind] + ([""] if kind == "Job" else [])
    # the workloads of the objects listed, and the open ones (whose object may be gone);
    # never every workload the cluster ever ran
    listed = [job.uid for job in objects]
    known = {
        uid: _Known(pk, state, released)
        for pk, uid, state, released in Workload.objects.filter(
            Q(job_uid__in=listed) | Q(state__in=Workload.OPEN_STATES),
            cluster=cluster,
            source=Workload.Source.JOB,
            kind__in=kinds,
        )
        .exclude(job_uid="")
        .values_list("pk", "job_uid", "state", "released_pods")
    }
    seen = {job.uid for job in objects}
    # workloads whose object ended or is gone: closed together below
    closing: list[_Close] = [
        _Close(k.pk, kind, failed=False, deleted=True)
        for uid, k in known.items()
        if uid not in seen and k.state in Workload.OPEN_STATES
    ]
    # running workloads whose object gave back pods or was scaled: followed after the
    # batches, each in its own short transaction (they take the admission lock)
    following: list[tuple[int, ObjectRead]] = []
    steps: list[Callable[[], None]] = [
        partial(
            _sync_one,
            cluster,
            pins_nodes,
            job,
            known,
            bindings,
            result,
            claims,
            facts,
            closing,
            following,
        )
        for job in objects
    ]
    # one commit per batch (and one admission cycle asked for), not one per object; each
    # object in a savepoint of its own, so one that fails rolls back alone (and is tried
    # again by the next sync)
    for first in range(0, len(steps), SYNC_BATCH):
        with transaction.atomic():
            for step in steps[first : first + SYNC_BATCH]:
                _in_savepoint(step)
    # whole rows only for the workloads something happens to, not for every one listed
    rows = Workload.objects.in_bulk([c.pk for c in closing] + [pk for pk, _ in following])
    closed = [
        _closing(rows[c.pk], c.kind, failed=c.failed, deleted=c.deleted)
        for c in closing
        if c.pk in rows
    ]
    for first in range(0, len(closed), SYNC_BATCH):
        result.finished += lifecycle.close_many(closed[first : first + SYNC_BATCH])
    for pk, job in following:
        workload = rows.get(pk)
        if workload is None:
            continue
        if _release_completed_pods(workload, job, completed_on):
            result.released.append(workload.pk)
        elif kind_facts(kind).follows_pod_count and job.pod_sets and _follow_scale(workload, job):
            result.rescaled.append(workload.pk)


@dataclass(frozen=True)
class _Known:
    """What a sync reads of every workload it might match with a listed object."""

    pk: int
    state: str
    released_pods: int


@dataclass(frozen=True)
class _Close:
    """A workload to close because its object completed, failed or was deleted."""

    pk: int
    kind: str
    failed: bool
    deleted: bool


def _in_savepoint(step: Callable[[], None]) -> None:
    """Run ``step`` in a savepoint; an error rolls back its changes alone and is logged
    (an unreachable cluster still stops the sync: the task retries it)."""
    try:
        with transaction.atomic():
            step()
    except ClusterUnreachable:
        raise
    except Exception:  # noqa: BLE001 - one odd object must not stop the others
        logger.exception("Job sync: an object could not be synced; the next sync tries again")


# objects whose changes are saved in one transaction
SYNC_BATCH = 200


def _sync_one(
    cluster: Cluster,
    pins_nodes: bool,
    job: ObjectRead,
    known: dict[str, _Known],
    bindings: dict[str, Tenant],
    result: JobSyncResult,
    claims: ClaimResolver,
    facts: _SyncFacts,
    closing: list[_Close],
    following: list[tuple[int, ObjectRead]],
) -> None:
    """One listed object: queue a new workload, or leave its workload in ``closing``
    (its object ended) or ``following`` (it goes on)."""
    workload = known.get(job.uid)
    if workload is not None:
        if (job.finished or job.failed) and workload.state in Workload.OPEN_STATES:
            closing.append(_Close(workload.pk, job.kind, failed=job.failed, deleted=False))
        elif job.reclaimable_pods > workload.released_pods or (
            kind_facts(job.kind).follows_pod_count and job.pod_sets
        ):
            following.append((workload.pk, job))
        return
    owner = bindings.get(job.namespace)
    if owner is None or job.finished or job.failed:
        return  # not a namespace Tidegate manages, or already over
    refusal, tenant = _refusal(pins_nodes, job, owner, facts.tenants)
    if refusal is not None:
        result.rejected.append(_reject(cluster, job, tenant, refusal).pk)
        return
    try:
        # a savepoint: a database error here leaves the rest of the batch usable
        with transaction.atomic():
            created = workload_submit(
                actor=None,
                cluster=cluster,
                tenant=tenant,
                name=job.name,
                pod_sets=_pod_sets(job, claims),
                topology=job.annotations.get(TOPOLOGY_ANNOTATION, Workload.Topology.NONE),
                priority_class=job.labels.get(PRIORITY_LABEL) or job.priority_class_name,
                max_run_time_s=_int(job.annotations.get(MAX_RUN_TIME_ANNOTATION)),
                preemption_grace_s=_seconds(job.annotations, GRACE_ANNOTATION),
                checkpoint_interval_s=_seconds(job.annotations, CHECKPOINT_ANNOTATION),
                source=Workload.Source.JOB,
                namespace=job.namespace,
                job_name=job.name,
                job_uid=job.uid,
                kind=job.kind,
                audit_source="system",
                labels=job.labels,
                annotations=_kept_annotations(job.annotations),
                facts=facts,
            )
    except TidegateError as error:
        result.rejected.append(_reject(cluster, job, tenant, worded.refused(error)).pk)
        return
    except Exception as error:  # noqa: BLE001 - one odd object must not stop the sync
        logger.exception("%s %s/%s could not be queued", job.kind, job.namespace, job.name)
        result.rejected.append(_reject(cluster, job, tenant, worded.not_queued(str(error))).pk)
        return
    result.created.append(created.pk)


def _follow_scale(workload: Workload, group: ObjectRead) -> bool:
    """A pod group's pod count changed (its autoscaler or controller scaled it): the
    workload asks for that many from now on; True if it changed."""
    count = group.pod_sets[0].count
    if workload.pod_set_records and workload.pod_set_records[0].count == count:
        return False
    try:
        lifecycle.follow_scale(workload, count)
    except Conflict:
        return False
    return True


class _SyncFacts(ClusterFacts):
    """The cluster's facts, and the tenants queue labels name, for one sync."""

    @cached_property
    def tenants(self) -> dict[str, Tenant]:
        return {t.slug: t for t in Tenant.objects.all()}


def _refusal(
    pins_nodes: bool, job: ObjectRead, owner: Tenant, tenants: dict[str, Tenant]
) -> tuple[str | None, Tenant]:
    """Why ``job`` cannot queue (None when it can), and the tenant the workload is
    recorded for."""
    slug = job.labels.get(QUEUE_LABEL, "")
    tenant = tenants.get(slug)
    if tenant is None:
        return worded.unknown_queue(slug), owner
    if not tenant.path.startswith(owner.path):
        return worded.foreign_namespace(job.namespace, owner.slug, slug), owner
    if job.problem is not None:
        return job.problem, tenant
    if not job.suspended:
        facts = kind_facts(job.kind)
        if facts.held_by_gate:
            return worded.ungated_pods(), tenant
        return worded.created_running(job.kind, integration_for(job.kind).suspend_field), tenant
    for key in (GRACE_ANNOTATION, CHECKPOINT_ANNOTATION):
        try:
            _seconds(job.annotations, key)
        except ValueError as error:
            return str(error), tenant
    topology = job.annotations.get(TOPOLOGY_ANNOTATION, Workload.Topology.NONE)
    if topology != Workload.Topology.NONE and not pins_nodes:
        return worded.cannot_pin(job.kind, TOPOLOGY_ANNOTATION), tenant
    return None, tenant


def _closing(
    workload: Workload, kind: str, *, failed: bool = False, deleted: bool = False
) -> tuple[Workload, str, str]:
    """How the workload of an object that completed, failed or was deleted is closed:
    work that held GPUs finishes (or fails), work still waiting is cancelled."""
    if deleted and not kind_facts(kind).has_one_object:
        reason = worded.pods_gone()
    else:
        reason = worded.object_ended(kind, failed=failed, deleted=deleted)
    if workload.state not in Workload.ACTIVE_STATES:
        return workload, "cancel", reason
    return workload, "fail" if failed else "finish", reason


MAX_RUN_TIME_S = 2**31 - 1
# kubectl's copy of the whole manifest: large, and nothing anyone groups costs by
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


def _kept_annotations(annotations: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if k != LAST_APPLIED_ANNOTATION}


def _seconds(annotations: dict[str, str], key: str) -> int | None:
    """A whole number of seconds, 0 or more, from an annotation (None when absent).
    ValueError saying what to write instead for anything else."""
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_RUN_TIME_S:
        raise ValueError(
            f"annotation {key} is {raw!r}; it must be a whole number of seconds, 0 or more"
        )
    return value


def _int(value: str | None) -> int | None:
    """A positive whole number of seconds from an annotation, else None (ignored)."""
    try:
        number = int(value) if value else None
    except ValueError:
        return None
    return number if number is not None and 0 < number <= MAX_RUN_TIME_S else None


__all__ = ["JobSyncResult", "jobs_sync", "logger"]
