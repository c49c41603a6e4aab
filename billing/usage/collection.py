"""Usage collection: one cluster's completed hours, from pods (and admitted workloads) and
Prometheus, into the ledger.

Each run collects the whole hours between the cluster's watermark and now (minus a delay
for scrape lag), at most MAX_HOURS_PER_RUN of them; the task re-queues itself while more
are due, so a collector that was down for a day catches up. Rows and the watermark are
written in one transaction, and the ledger skips keys it already has, so a run repeated
after a crash writes nothing twice. When Prometheus does not answer, nothing is written
and the run is retried later (no partial hour); after PROMETHEUS_GIVE_UP_HOURS, hours
that old are written without busy data so that allocation and budgets do not stall.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from billing.conf import billing_setting
from billing.models import CollectorWatermark, UsageRecord
from billing.usage import metering
from billing.usage.capacity_check import hours_over_capacity
from billing.usage.hourly_borrowing import with_borrowed
from billing.usage.ledger import LedgerRow, ledger_append
from billing.usage.prometheus import (
    PrometheusClient,
    PrometheusError,
    PrometheusTooMuchData,
    detect_pod_labels,
    hourly_busy,
    ksm_gpu_pod_runs,
    run_busy,
)
from scheduler_bridge.gateways.base import PodInfo
from scheduler_bridge.inventory.connection import cluster_gateway
from scheduler_bridge.inventory.models import SHARE_UNITS_PER_GPU, Cluster, Flavour, Node
from scheduler_bridge.inventory.sharing import device_units_per_gpu
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.records import Placement
from scheduler_bridge.workloads.runs import past_runs
from tenants.models import NamespaceBinding

logger = logging.getLogger(__name__)


class PodSource(Protocol):
    """What collection needs from a cluster gateway."""

    def list_gpu_pods(self) -> list[PodInfo]: ...


@dataclass
class CollectResult:
    hours: int = 0
    rows: int = 0
    inserted: int = 0
    collected_until: datetime | None = None
    more_due: bool = False
    unbound_namespaces: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    without_busy_data: bool = False
    # the DCGM pod/namespace label pair found (see CollectorWatermark.dcgm_pod_labels)
    dcgm_pod_labels: str = ""
    # what an admin must see: hours written without busy time for a reason retrying
    # cannot fix (kept as the watermark's last_error)
    alert: str = ""


def _hours_due(cluster: Cluster, now: datetime, max_hours: int) -> tuple[list[datetime], bool]:
    mark = CollectorWatermark.objects.filter(cluster=cluster).first()
    end = metering.floor_hour(now - timedelta(minutes=billing_setting("COLLECT_DELAY_MINUTES")))
    if mark is None:
        start = end - timedelta(hours=int(billing_setting("INITIAL_LOOKBACK_HOURS")))
    else:
        start = mark.collected_until
    hours = metering.hour_starts(start, end)
    return hours[:max_hours], len(hours) > max_hours


def _flavour_map(cluster: Cluster) -> metering.FlavourMap:
    flavours = [
        metering.FlavourRef(
            f.pk,
            f.name,
            f.product,
            f.resource_name,
            f.mig_profile,
            shared=f.is_shared,
            milli_per_unit=SHARE_UNITS_PER_GPU // device_units_per_gpu(f) if f.is_shared else 1,
        )
        for f in Flavour.objects.filter(cluster=cluster)
    ]
    nodes = [
        metering.NodeRef(n.name, n.product, (n.labels or {}).get(metering.GPU_PRODUCT_LABEL, ""))
        for n in Node.objects.filter(cluster=cluster)
    ]
    return metering.FlavourMap(flavours, nodes)


def _workloads(cluster: Cluster, start: datetime, end: datetime) -> list[metering.WorkloadRef]:
    """Runs of workloads on ``cluster`` that may have held GPUs in [start, end): the
    current run of admitted work, and runs that ended in preemption (past runs), each
    its own WorkloadRef. A workload's current run comes after its past ones."""
    rows = (
        Workload.objects.filter(cluster=cluster)
        .filter(
            Q(admitted_at__isnull=False, admitted_at__lt=end)
            | Q(preemptions__gt=0, submitted_at__lt=end)
        )
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .select_related("priority_class")
    )
    refs = []
    for workload in rows:
        for run in past_runs(workload.past_runs, workload.pk):
            if run.admitted_at < end and run.ended_at > start:  # overlaps [start, end)
                refs.append(_ref(workload, run.admitted_at, run.ended_at, run.placements))
        if workload.admitted_at is None or workload.admitted_at >= end:
            continue
        still_holding = workload.state in Workload.ACTIVE_STATES
        end_at = workload.finished_at
        if end_at is None and not still_holding:
            continue  # stopped without a recorded end: nothing we can measure
        refs.append(
            _ref(
                workload,
                workload.admitted_at,
                end_at,
                workload.placement_records,
            )
        )
    return refs


def _ref(
    workload: Workload,
    admitted_at: datetime,
    end: datetime | None,
    placements: list[Placement],
) -> metering.WorkloadRef:
    return metering.WorkloadRef(
        id=workload.pk,
        tenant_id=workload.tenant_id,
        namespace=workload.namespace,
        job_name=workload.job_name,
        priority_class=workload.priority_class.name if workload.priority_class else "",
        admitted_at=admitted_at,
        end=end,
        placements=tuple((p.node, p.flavour, p.gpus) for p in placements),
    )


def _prometheus_down_too_long(cluster: Cluster, now: datetime) -> bool:
    mark = CollectorWatermark.objects.filter(cluster=cluster).first()
    if mark is None or mark.prometheus_down_since is None:
        return False
    give_up = timedelta(hours=int(billing_setting("PROMETHEUS_GIVE_UP_HOURS")))
    return now - mark.prometheus_down_since >= give_up


def _note_prometheus_down(
    cluster: Cluster, start: datetime, now: datetime, error: PrometheusError
) -> None:
    mark, _created = CollectorWatermark.objects.get_or_create(
        cluster=cluster, defaults={"collected_until": start}
    )
    CollectorWatermark.objects.filter(pk=mark.pk, prometheus_down_since__isnull=True).update(
        prometheus_down_since=now
    )
    CollectorWatermark.objects.filter(pk=mark.pk).update(last_error=error.message[:2000])


def usage_collect(
    *,
    cluster: Cluster,
    gateway: PodSource | None = None,
    prometheus: PrometheusClient | None = None,
    now: datetime | None = None,
    max_hours: int | None = None,
) -> CollectResult:
    """Collect the completed hours of ``cluster`` that are not in the ledger yet.

    Raises ClusterUnreachable (gateway) or PrometheusUnavailable when a source is down;
    then nothing was written and the watermark did not move, so a retry is safe.
    """
    now = now or timezone.now()
    max_hours = max_hours or int(billing_setting("MAX_HOURS_PER_RUN"))
    result = CollectResult()
    hours, result.more_due = _hours_due(cluster, now, max_hours)
    if not hours:
        return result
    if gateway is not None:
        pods = gateway.list_gpu_pods()
    else:
        with cluster_gateway(cluster) as opened:
            pods = opened.list_gpu_pods()
    flavours = _flavour_map(cluster)
    window_end = hours[-1] + metering.HOUR
    client = None
    if cluster.prometheus_url:
        client = prometheus or PrometheusClient(
            cluster.prometheus_url, timeout_s=float(billing_setting("PROMETHEUS_TIMEOUT_S"))
        )
        pods = pods + _gone_pods(cluster, client, pods, hours[0], window_end, result)
    workloads = _workloads(cluster, hours[0], window_end)
    allocations, share_pods = _allocations(cluster, pods, hours, flavours, workloads, result)
    if client is not None:
        readings = _busy_readings(cluster, client, hours, allocations, now, result)
        allocations = metering.attach_busy(allocations, readings, share_pods)
    tenants = dict(
        NamespaceBinding.objects.filter(cluster_name=cluster.name).values_list(
            "namespace", "tenant_id"
        )
    )
    workload_tenants = {w.id: w.tenant_id for w in workloads}
    rows = _ledger_rows(cluster, allocations, tenants, workload_tenants, result)
    run_admitted = {w.run_key: w.admitted_at for w in workloads}
    admitted = {a.key: run_admitted[a.run_key] for a in allocations if a.run_key in run_admitted}
    if not _append_hours(cluster, hours[0], window_end, rows, admitted, now, result):
        result.rows = 0
        return result
    result.hours = len(hours)
    result.rows = len(rows)
    result.collected_until = window_end
    for breach in hours_over_capacity(hours[0], window_end, {cluster.pk}):
        logger.error("%s: %s", cluster.name, breach)
        result.problems.append(str(breach))
    return result


def _allocations(
    cluster: Cluster,
    pods: list[PodInfo],
    hours: list[datetime],
    flavours: metering.FlavourMap,
    workloads: list[metering.WorkloadRef],
    result: CollectResult,
) -> tuple[list[metering.Allocation], list[metering.Allocation]]:
    """What each pod held per hour, and for the hours no pod shows, what each workload's
    admission says it held (a workload whose pods are gone); problems go on ``result``.
    Also the pods that hold shares of a GPU (their busy time is apportioned)."""
    window_end = hours[-1] + metering.HOUR
    metered = metering.pod_allocations(pods, hours, flavours, metering.runs_by_job(workloads))
    # Per run: a preempted run and its rerun sharing an hour are both counted.
    covered = {(a.run_key, a.interval_start) for a in metered.allocations if a.run_key}
    covered_before = set(
        UsageRecord.objects.filter(
            cluster=cluster,
            source=UsageRecord.Source.POD,
            workload__isnull=False,
            interval_start__gte=hours[0],
            interval_start__lt=window_end,
        ).values_list("workload_id", "interval_start")
    )
    fallback = metering.workload_allocations(
        workloads, hours, flavours.by_name, covered, covered_before
    )
    result.problems = metered.problems + fallback.problems
    return metered.allocations + fallback.allocations, metered.share_pods


def _busy_readings(
    cluster: Cluster,
    client: PrometheusClient,
    hours: list[datetime],
    allocations: list[metering.Allocation],
    now: datetime,
    result: CollectResult,
) -> metering.BusyReadings:
    """How busy the GPUs were, from DCGM through Prometheus: per hour and per run.
    Empty readings (busy time not measured, said on ``result``) when even one hour holds
    more samples than Prometheus allows, or when Prometheus cannot answer and has been
    down too long to wait; raises PrometheusError while waiting is still right."""
    window_end = hours[-1] + metering.HOUR
    try:
        found = detect_pod_labels(client, hours[0] + metering.HOUR, window_end)
        pod_label, namespace_label = found or (
            billing_setting("POD_LABEL"),
            billing_setting("NAMESPACE_LABEL"),
        )
        result.dcgm_pod_labels = f"{pod_label}/{namespace_label}" if found else ""
        labels = {"pod_label": pod_label, "namespace_label": namespace_label}
        readings = metering.BusyReadings(hourly=hourly_busy(client, hours, **labels))
        windows = metering.run_windows(allocations)
        if windows:
            readings.run_active, readings.run_util = run_busy(client, windows, **labels)
        return readings
    except PrometheusTooMuchData as error:
        # Even one hour loads more samples than Prometheus allows: retrying cannot
        # help, and waiting would stall collection for good. The hours are written
        # without busy time (NULL: not measured) and the collector's health says so.
        logger.error("%s: busy time not measured: %s", cluster.name, error)
        result.without_busy_data = True
        result.alert = (
            f"Busy time from {hours[0]:%Y-%m-%d %H:00} to {window_end:%Y-%m-%d %H:00} UTC "
            f"was not measured: {error.message} Raise --query.max-samples on that "
            "Prometheus or narrow its DCGM series."
        )
        return metering.BusyReadings()
    except PrometheusError as error:
        _note_prometheus_down(cluster, hours[0], now, error)
        if not error.retryable or not _prometheus_down_too_long(cluster, now):
            raise
        logger.warning("%s: writing hours without busy data: %s", cluster.name, error)
        result.without_busy_data = True
        return metering.BusyReadings()


def _append_hours(
    cluster: Cluster,
    first_hour: datetime,
    window_end: datetime,
    rows: list[LedgerRow],
    admitted: Mapping[str, datetime],
    now: datetime,
    result: CollectResult,
) -> bool:
    """Append the hours' rows to the ledger, their borrowed time split by when each run
    was admitted (``admitted``), and move the watermark, in one transaction under the
    cluster's lock; False (nothing written) when another run collected these hours
    meanwhile."""
    with transaction.atomic():
        # Two collectors of one cluster at once (beat, a re-queued run, the API) must not
        # both write the same hours: the second one finds the watermark moved and stops.
        Cluster.objects.select_for_update().get(pk=cluster.pk)
        mark = CollectorWatermark.objects.filter(cluster=cluster).first()
        if (
            mark is not None
            and mark.collected_until is not None
            and mark.collected_until > first_hour
        ):
            logger.info(
                "%s: hours from %s already collected by another run", cluster.name, first_hour
            )
            return False
        # (borrowing is split from the ledger and the guarantees as the lock leaves them)
        result.inserted = ledger_append(with_borrowed(rows, admitted))
        CollectorWatermark.objects.update_or_create(
            cluster=cluster,
            defaults={
                "collected_until": window_end,
                "last_run_at": now,
                "last_rows": result.inserted,
                "last_error": result.alert,
                **({} if result.without_busy_data else {"prometheus_down_since": None}),
                **(
                    {"dcgm_pod_labels": result.dcgm_pod_labels}
                    if cluster.prometheus_url and not result.without_busy_data
                    else {}
                ),
            },
        )
    return True


def _gone_pods(
    cluster: Cluster,
    client: PrometheusClient,
    live: Sequence[PodInfo],
    start: datetime,
    end: datetime,
    result: CollectResult,
) -> list[PodInfo]:
    """Pods that held GPUs in [start, end) but are gone from the live list (deleted
    between two collections), from kube-state-metrics' history in Prometheus: they are
    billed for the time they ran. Best effort: without that history the live list and
    the workloads' own records still count."""
    try:
        runs = ksm_gpu_pod_runs(client, start, end)
    except PrometheusError as error:
        result.problems.append(f"no pod history from kube-state-metrics: {error.message}")
        return []
    names = {
        re.sub(r"[^A-Za-z0-9_]", "_", resource): resource
        for resource in Flavour.objects.filter(cluster=cluster).values_list(
            "resource_name", flat=True
        )
    }
    known = {p.uid for p in live}
    gone: dict[str, PodInfo] = {}
    for run in runs:
        resource = names.get(run.resource)
        if not run.uid or run.uid in known or resource is None:
            continue
        pod = gone.get(run.uid) or PodInfo(
            uid=run.uid,
            name=run.pod,
            namespace=run.namespace,
            node_name=run.node or None,
            phase="Succeeded",
            started_at=run.start,
            finished_at=run.end,
            job_name=run.job or None,
        )
        pod.gpu_requests[resource] = run.amount
        gone[run.uid] = pod
    return list(gone.values())


def _ledger_rows(
    cluster: Cluster,
    allocations: Sequence[metering.Allocation],
    tenants: dict[str, int],
    workload_tenants: dict[int, int],
    result: CollectResult,
) -> list[LedgerRow]:
    rows = []
    for allocation in allocations:
        # Work submitted through the API has no namespace: its workload names the tenant.
        tenant_id = tenants.get(allocation.namespace)
        if tenant_id is None and allocation.workload_id is not None:
            tenant_id = workload_tenants.get(allocation.workload_id)
        if tenant_id is None:
            # No tenant owns the namespace: nobody to bill. It still counts as held
            # capacity nowhere, so it shows up as idle; admins see the namespace here.
            result.unbound_namespaces.add(allocation.namespace)
            continue
        rows.append(
            LedgerRow(
                tenant_id=tenant_id,
                cluster_id=cluster.pk,
                flavour_id=allocation.flavour.id,
                namespace=allocation.namespace,
                pod_uid=allocation.key,
                pod_name=allocation.pod_name,
                workload_id=allocation.workload_id,
                job_name=allocation.job_name,
                priority_class=allocation.priority_class,
                source=allocation.source,
                interval_start=allocation.interval_start,
                devices=allocation.devices,
                gpu_seconds_allocated=allocation.device_seconds,
                gpu_seconds_busy=allocation.busy_seconds,
                busy_partial=allocation.busy_partial,
                busy_estimated=allocation.busy_estimated,
            )
        )
    return rows
