"""Make a cluster match what the queue decided: the per-cluster reconciler.

The admission cycle only decides and saves (cycle.py). This module reads the saved
states and brings the cluster to them, level-triggered and idempotent:

1. Objects (Jobs, JobSets, PyTorchJobs, ...) of work that must not run (pending again
   after a preemption, cancelled, stopped at its time limit, finished by its owner)
   and that still run are suspended, their pod templates put back as their owners
   wrote them.
2. ResourceQuota ceilings are synced (before anything starts, so no pod is refused).
3. Admitted work is started: its object's pod templates get the flavour's node
   selector and tolerations and it is resumed (``start``, through the kind's
   integration); work with no object to start (API submissions) is
   started at once. A start that fails leaves the work admitted with the error shown
   (``note_start_failure``) for the next run to retry; after
   ``RECONCILE_START_ATTEMPTS`` failures it goes back to the queue (``requeue``).
4. Kubernetes Events the transitions owe the Jobs' owners are posted.

Running it twice with nothing changed in between sends no write to the cluster: it
lists the queue's Jobs and finds nothing to do. It runs after every admission cycle (so
on the queue tick too); a cluster that stops answering raises ClusterUnreachable, and the
task retries with backoff, the decisions staying saved meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from functools import partial
from typing import Any

from django.db.models import Q
from django.utils import timezone

from scheduler_bridge import metrics
from scheduler_bridge.gateways import ClusterGateway, ClusterUnreachable, GatewayError, JobRef
from scheduler_bridge.gateways.base import POD_KIND
from scheduler_bridge.integrations import INTEGRATIONS, ObjectRead, integration_for
from scheduler_bridge.integrations import access as objects
from scheduler_bridge.integrations.base import PREEMPT_AT_ANNOTATION
from scheduler_bridge.integrations.pods import KIND as POD_GROUP
from scheduler_bridge.integrations.pods import pod_groups, released
from scheduler_bridge.inventory.connection import cluster_gateway
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.quotas.sync import quota_sync
from scheduler_bridge.workloads import lifecycle
from scheduler_bridge.workloads import wording as worded
from scheduler_bridge.workloads.jobs import QUEUE_LABEL, QUEUED
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.persist import clear_job_events
from scheduler_bridge.workloads.records import placement_nodes
from scheduler_bridge.workloads.selectors import queue_holdings
from tenants.errors import Conflict

logger = logging.getLogger(__name__)

# Failed tries to start admitted work before it goes back to the queue.
RECONCILE_START_ATTEMPTS = 3

State = Workload.State
# States whose Job must be suspended if it runs (rejected Jobs are left as their owners made them).
MUST_NOT_RUN = (State.PENDING, State.CANCELLED, State.TIMED_OUT, State.FINISHED, State.FAILED)


@dataclass
class ReconcileResult:
    started: list[int] = field(default_factory=list)
    suspended: list[int] = field(default_factory=list)
    start_errors: dict[int, str] = field(default_factory=dict)
    requeued: list[int] = field(default_factory=list)
    scaled: list[int] = field(default_factory=list)
    announced: list[int] = field(default_factory=list)
    events: int = 0
    quota_writes: int = 0


def reconcile(
    cluster: Cluster,
    gateway: ClusterGateway | None = None,
    *,
    sync_quotas: bool = False,
    listed: Mapping[str, list[ObjectRead]] | None = None,
) -> ReconcileResult:
    """Bring ``cluster`` to the saved decisions (see the module docstring).
    ``sync_quotas`` asks for a ResourceQuota sync even when no Job starts or stops (the
    cycle changed what tenants borrow). ``listed`` (kind -> objects) are the queue's
    objects as a Job sync read them a moment ago: those kinds are not listed again."""
    with cluster_gateway(cluster, gateway) as opened:
        result = _reconcile(cluster, opened, sync_quotas, listed or {})
    metrics.start_errors_counted(cluster.name, len(result.start_errors))
    return result


def _reconcile(
    cluster: Cluster,
    gateway: ClusterGateway,
    sync_quotas: bool,
    listed: Mapping[str, list[ObjectRead]],
) -> ReconcileResult:
    result = ReconcileResult()
    live = _live_objects(cluster, gateway, listed)
    to_suspend, to_start = _work_to_do(cluster, live)
    # each stop waits for the object's pods to go before restoring its placement: up to
    # write_concurrency at once
    stopped = _in_parallel(gateway, to_suspend, partial(_stop_object, gateway))
    for workload in to_suspend:
        error = stopped.get(workload.pk)
        if isinstance(error, ClusterUnreachable):
            raise error
        if error is not None:
            logger.warning(
                "could not suspend %s/%s: %s", workload.namespace, workload.job_name, error
            )
            continue
        result.suspended.append(workload.pk)
    if to_start or result.suspended or sync_quotas:
        # Raise ceilings before any Job starts, so its pods are never refused.
        result.quota_writes += quota_sync(cluster, gateway, queue=queue_holdings(cluster)).writes
    _start_all(gateway, to_start, live, result)
    _scale_elastic(cluster, gateway, live, result)
    _announce_preemptions(cluster, gateway, live, result)
    _reconcile_pod_groups(cluster, gateway, result)
    if result.suspended or result.start_errors:
        result.quota_writes += quota_sync(
            cluster, gateway, queue=queue_holdings(cluster)
        ).writes  # lower them again
    result.events = _post_events(cluster, gateway)
    return result


def _live_objects(
    cluster: Cluster, gateway: ClusterGateway, listed: Mapping[str, list[ObjectRead]]
) -> dict[str, ObjectRead]:
    """The queue's objects that have not finished, by uid: Jobs always, other kinds
    where the last workload sync found them served; from ``listed`` where it has the
    kind."""
    live: dict[str, ObjectRead] = {}
    for integration in INTEGRATIONS:
        if integration.kind != "Job" and cluster.workload_kinds.get(integration.kind) != QUEUED:
            continue
        found = listed.get(integration.kind)
        if found is None:
            found = objects.list_queued(gateway, integration, QUEUE_LABEL) or []
        for obj in found:
            if not obj.finished:
                live[obj.uid] = obj
    return live


def _work_to_do(
    cluster: Cluster, live: dict[str, ObjectRead]
) -> tuple[list[Workload], list[Workload]]:
    """Workloads whose Job runs but must not, and admitted or running work to start."""
    running_uids = [uid for uid, job in live.items() if not job.suspended]
    to_suspend = list(
        Workload.objects.filter(
            cluster=cluster,
            source=Workload.Source.JOB,
            state__in=MUST_NOT_RUN,
            job_uid__in=running_uids,
        ).order_by("pk")
    )
    suspended_uids = [uid for uid, job in live.items() if job.suspended]
    to_start = list(
        Workload.objects.filter(cluster=cluster)
        .filter(
            Q(state=State.ADMITTED)
            # running work whose Job was suspended behind Tidegate's back runs again
            | Q(state=State.RUNNING, source=Workload.Source.JOB, job_uid__in=suspended_uids)
        )
        .select_related("flavour")
        .order_by("admitted_at", "pk")
    )
    return to_suspend, to_start


def _start_all(
    gateway: ClusterGateway,
    to_start: list[Workload],
    live: dict[str, ObjectRead],
    result: ReconcileResult,
) -> None:
    """Tell the cluster to run each admitted workload (up to the gateway's
    ``write_concurrency`` writes at once), then record the starts in one transaction."""
    jobs = [w for w in to_start if w.source == Workload.Source.JOB]
    # a Job gone or over is left to the Job sync, which closes its workload
    waiting = {w.pk for w in jobs if live.get(w.job_uid) is not None}
    to_resume = [w for w in jobs if w.pk in waiting and live[w.job_uid].suspended]
    failures = _in_parallel(gateway, to_resume, partial(_admit_object, gateway))
    told: list[Workload] = []
    for workload in to_start:
        if workload.source == Workload.Source.JOB and workload.pk not in waiting:
            continue
        error = failures.get(workload.pk)
        if isinstance(error, ClusterUnreachable):
            raise error
        if error is not None:
            _start_failed(workload, str(error), result)
            continue
        told.append(workload)
    admitted = [w for w in told if w.state == State.ADMITTED]
    started = set(lifecycle.start_many(admitted, now=timezone.now()))
    # running work whose Job was resumed again counts as started too
    result.started += [w.pk for w in told if w.state != State.ADMITTED or w.pk in started]


def _in_parallel(
    gateway: ClusterGateway, workloads: list[Workload], call: Callable[[Workload], None]
) -> dict[int, GatewayError]:
    """``call`` for each workload, up to ``gateway.write_concurrency`` at once; the
    errors by workload id. Once the cluster stops answering, calls not yet made are
    skipped (each given that ClusterUnreachable)."""
    unreachable: list[ClusterUnreachable] = []

    def one(workload: Workload) -> GatewayError | None:
        if unreachable:
            return unreachable[0]
        try:
            call(workload)
        except ClusterUnreachable as error:
            unreachable.append(error)
            return error
        except GatewayError as error:
            return error
        return None

    workers = min(gateway.write_concurrency, len(workloads))
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reconcile") as pool:
            outcomes = list(pool.map(one, workloads))
    else:
        outcomes = [one(w) for w in workloads]
    return {w.pk: error for w, error in zip(workloads, outcomes, strict=True) if error is not None}


def _stop_object(gateway: ClusterGateway, workload: Workload) -> None:
    objects.stop(gateway, integration_for(workload.kind), workload.namespace, workload.job_name)


def _admit_object(gateway: ClusterGateway, workload: Workload) -> None:
    flavour = workload.flavour
    if flavour is None:
        raise GatewayError(f"workload {workload.pk} is admitted without a flavour")
    nodes = None
    # a flavour without a node selector (GPUs only DRA publishes, on nodes without GPU
    # Feature Discovery labels) is held to by the nodes admission placed it on
    unlabelled = not flavour.node_selector and integration_for(workload.kind).pins_nodes
    if workload.topology != Workload.Topology.NONE or unlabelled:
        nodes = placement_nodes(workload.placements)
    # elastic pod sets start with their core and the pods they have grown by
    counts = _elastic_counts(workload)
    objects.start(
        gateway,
        integration_for(workload.kind),
        workload.namespace,
        workload.job_name,
        dict(flavour.node_selector),
        list(flavour.tolerations),
        nodes,
        counts,
    )


def _tried(what: str, workload: Workload, call: Callable[[], None]) -> bool:
    """Run one write to the cluster; a refusal is a log line (level-triggered: the next
    run tries again), an unreachable cluster stops the run."""
    try:
        call()
    except ClusterUnreachable:
        raise
    except GatewayError as error:
        logger.warning("could not %s %s/%s: %s", what, workload.namespace, workload.job_name, error)
        return False
    return True


def _elastic_counts(workload: Workload) -> dict[str, int]:
    """Pods each elastic pod set of ``workload`` must run now."""
    elastic = {ps.name for ps in workload.pod_set_records if ps.min_count is not None}
    return {name: n for name, n in workload.pod_counts().items() if name in elastic}


def _scale_elastic(
    cluster: Cluster, gateway: ClusterGateway, live: dict[str, ObjectRead], result: ReconcileResult
) -> None:
    """Running elastic work whose object runs another number of pods than the queue
    gave it is scaled to that number (grown into idle GPUs, shrunk by a reclaim)."""
    for workload in Workload.objects.filter(
        cluster=cluster, state=State.RUNNING, source=Workload.Source.JOB, elastic=True
    ):
        obj = live.get(workload.job_uid)
        wanted = _elastic_counts(workload)
        if obj is None or obj.suspended or not wanted:
            continue
        current = {ps.name: ps.count for ps in obj.pod_sets}
        if all(current.get(name) == n for name, n in wanted.items()):
            continue
        integration = integration_for(workload.kind)
        scale = partial(
            objects.scale, gateway, integration, workload.namespace, workload.job_name, wanted
        )
        if _tried("scale", workload, scale):
            result.scaled.append(workload.pk)


def _reconcile_pod_groups(
    cluster: Cluster, gateway: ClusterGateway, result: ReconcileResult
) -> None:
    """Gated pods: release (ungate onto the flavour) as many as the queue gave each
    group, oldest first; delete released pods beyond that, newest first (their
    controller creates them again, gated), with the workload's grace; start admitted
    groups once their pods are released."""
    recent = timezone.now() - timedelta(hours=1)
    queued = Workload.objects.filter(cluster=cluster, kind=POD_GROUP).filter(
        Q(state__in=Workload.OPEN_STATES) | Q(finished_at__gte=recent)
    )
    if not gateway.serves(POD_KIND) or not queued.exists():
        return  # (pods of work closed long ago were deleted then)
    groups = {g.read.uid: g for g in pod_groups(gateway.list_objects(POD_KIND, QUEUE_LABEL))}
    if not groups:
        return
    for workload in (
        Workload.objects.filter(cluster=cluster, kind=POD_GROUP, job_uid__in=list(groups))
        .exclude(state=State.REJECTED)
        .select_related("flavour", "priority_class")
        .order_by("pk")
    ):
        group = groups[workload.job_uid]
        active = workload.state in Workload.ACTIVE_STATES and workload.flavour is not None
        wanted = sum(workload.pod_counts().values()) if active else 0
        grace = lifecycle.grace_of(workload) or None
        if workload.preempt_at is not None:
            # an announced preemption: the pods are told now (SIGTERM) and get the rest
            # of the grace to save a checkpoint; the GPUs go back when it ends
            wanted = 0
            grace = max(0, int((workload.preempt_at - timezone.now()).total_seconds()))
        running = group.released
        try:
            if workload.flavour is not None:
                release = _releasing(workload.flavour, workload)
                for pod in group.waiting[: max(0, wanted - len(running))]:
                    gateway.update_object(POD_KIND, group.namespace, pod.name, release)
            for pod in list(reversed(running))[: max(0, len(running) - wanted)]:
                gateway.delete_pod(group.namespace, pod.name, grace)
        except ClusterUnreachable:
            raise
        except GatewayError as error:
            if workload.state == State.ADMITTED:
                _start_failed(workload, str(error), result)
            else:
                logger.warning("pods of %s: %s", workload.name, error)
            continue
        if workload.state == State.ADMITTED:
            try:
                lifecycle.start(workload, now=timezone.now())
            except Conflict:
                continue
            result.started.append(workload.pk)


def _releasing(flavour: Flavour, workload: Workload) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What releasing a gated pod of ``workload`` onto ``flavour`` makes of it: a flavour
    without a node selector (GPUs only DRA publishes) is held to by the nodes admission
    placed the workload on, as Jobs are (_admit_object)."""
    selector, tolerations = dict(flavour.node_selector), list(flavour.tolerations)
    nodes = None if selector else placement_nodes(workload.placements)

    def release(pod: dict[str, Any]) -> dict[str, Any]:
        return released(pod, selector, tolerations, nodes)

    return release


def _announce_preemptions(
    cluster: Cluster, gateway: ClusterGateway, live: dict[str, ObjectRead], result: ReconcileResult
) -> None:
    """Objects of work whose preemption was announced carry the time it happens."""
    for workload in Workload.objects.filter(
        cluster=cluster, state=State.RUNNING, source=Workload.Source.JOB, preempt_at__isnull=False
    ):
        obj = live.get(workload.job_uid)
        at = workload.preempt_at
        stamp = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if at else ""
        if obj is None or obj.annotations.get(PREEMPT_AT_ANNOTATION) == stamp:
            continue
        integration = integration_for(workload.kind)
        announce = partial(
            objects.announce_preemption,
            gateway,
            integration,
            workload.namespace,
            workload.job_name,
            stamp,
        )
        if _tried("announce the preemption of", workload, announce):
            result.announced.append(workload.pk)


def _start_failed(workload: Workload, error: str, result: ReconcileResult) -> None:
    result.start_errors[workload.pk] = error
    noted = lifecycle.note_start_failure(workload, error)
    if noted.state == State.ADMITTED and noted.apply_attempts >= RECONCILE_START_ATTEMPTS:
        try:
            lifecycle.requeue(noted, worded.could_not_start(error))
        except Conflict:
            return
        result.requeued.append(workload.pk)


def _post_events(cluster: Cluster, gateway: ClusterGateway) -> int:
    """Post the Events transitions owe Jobs' owners (each object's in order, up to the
    gateway's ``write_concurrency`` objects at once), then clear them (only if no new
    one was owed meanwhile). Best effort: the decision is saved and shown in Tidegate,
    a lost Event costs a log line."""
    owing = list(
        Workload.objects.filter(cluster=cluster)
        .exclude(job_events=[])
        .order_by("pk")
        .only("pk", "namespace", "job_name", "job_uid", "kind", "job_events")
    )
    posted: dict[int, int] = {}

    def post(workload: Workload) -> None:
        ref = _object_ref(workload)
        for event in workload.job_events or []:
            try:
                gateway.record_job_event(
                    ref,
                    str(event.get("reason", "")),
                    str(event.get("message", "")),
                    warning=bool(event.get("warning")),
                )
                posted[workload.pk] = posted.get(workload.pk, 0) + 1
            except ClusterUnreachable:
                raise
            except GatewayError as error:
                logger.warning("no Event on %s %s/%s: %s", ref.kind, ref.namespace, ref.name, error)

    failures = _in_parallel(gateway, owing, post)
    clear_job_events(
        [
            (w.pk, list(w.job_events or []))
            for w in owing
            # owed still when the cluster stopped answering: posted by the next run
            if not isinstance(failures.get(w.pk), ClusterUnreachable)
        ]
    )
    unreachable = next((e for e in failures.values() if isinstance(e, ClusterUnreachable)), None)
    if unreachable is not None:
        raise unreachable
    return sum(posted.values())


def _object_ref(workload: Workload) -> JobRef:
    """The object an Event about ``workload`` is posted on."""
    try:
        kind = integration_for(workload.kind).ref
    except KeyError:
        return JobRef(workload.namespace, workload.job_name, workload.job_uid)
    return JobRef(
        workload.namespace, workload.job_name, workload.job_uid, kind.kind, kind.api_version
    )
