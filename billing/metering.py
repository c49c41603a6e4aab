"""Allocation metering: pod lifecycles and admitted workloads become hourly allocations.

Pure Python (no Django): the collector loads pods, nodes, flavours and workloads, and this
module turns them into :class:`Allocation` values, one per pod x flavour x hour, that the
ledger stores. A GPU is "allocated" from the moment a pod holding it starts until it ends,
whatever the pod does with it; how busy it really was comes from Prometheus
(:mod:`billing.prometheus`) and is attached with :func:`attach_busy`.

Units: ``devices`` are whole units of the flavour (a full GPU, or one MIG instance);
``seconds`` are whole seconds of one device within the hour, so ``device_seconds`` is an
exact integer. Times are timezone-aware UTC datetimes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from scheduler_bridge.gateways.base import PodInfo, is_gpu_resource

HOUR = timedelta(hours=1)
BUSY_PLACES = Decimal("0.001")
# Pods in these phases held their GPUs while they ran; Pending pods never started.
RAN_PHASES = frozenset({"Running", "Succeeded", "Failed"})
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


def floor_hour(moment: datetime) -> datetime:
    """The start of the UTC hour containing ``moment``."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def hour_starts(start: datetime, end: datetime) -> list[datetime]:
    """Starts of the whole hours in [start, end); ``start`` must be on an hour."""
    hours = []
    moment = floor_hour(start)
    while moment + HOUR <= end:
        hours.append(moment)
        moment += HOUR
    return hours


def overlap_seconds(start: datetime, end: datetime | None, hour: datetime) -> int:
    """Whole seconds of [start, end) inside [hour, hour + 1h); ``end`` None: still going."""
    lo = max(start, hour)
    hi = min(end, hour + HOUR) if end is not None else hour + HOUR
    return max(0, int((hi - lo).total_seconds()))


@dataclass(frozen=True, slots=True)
class FlavourRef:
    """A flavour of the cluster being metered."""

    id: int
    name: str
    product: str
    resource_name: str
    mig_profile: str = ""


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A node as inventory saw it: its GPU product and the GFD product label."""

    name: str
    product: str
    product_label: str = ""


class FlavourMap:
    """Maps (node, resource) of a pod to the cluster's flavour.

    A flavour is a resource on a product, so the node supplies the product. Under MIG's
    ``single`` strategy several flavours share ``nvidia.com/gpu`` on one product; the
    node's product label (``...-MIG-1g.10gb``) then names the profile.
    """

    def __init__(self, flavours: Iterable[FlavourRef], nodes: Iterable[NodeRef]) -> None:
        self._by_key: dict[tuple[str, str], list[FlavourRef]] = {}
        self.by_name: dict[str, FlavourRef] = {}
        for flavour in flavours:
            self._by_key.setdefault((flavour.product, flavour.resource_name), []).append(flavour)
            self.by_name[flavour.name] = flavour
        self._nodes = {node.name: node for node in nodes}

    def for_pod(self, node_name: str | None, resource: str) -> FlavourRef | None:
        node = self._nodes.get(node_name or "")
        if node is None:
            return None
        candidates = self._by_key.get((node.product, resource), [])
        if len(candidates) <= 1:
            return candidates[0] if candidates else None
        label = node.product_label.lower()
        for flavour in candidates:
            if flavour.mig_profile and label.endswith(f"-mig-{flavour.mig_profile.lower()}"):
                return flavour
        return next((f for f in candidates if not f.mig_profile), candidates[0])


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    """An admitted workload: who owns it, where admission put it, what it borrowed.

    ``placements`` are (node, flavour name, devices); ``borrowed`` maps a flavour name or
    resource name to the devices it borrows (each admission cycle keeps it up to date);
    ``end`` is None while it runs.
    """

    id: int
    tenant_id: int
    namespace: str
    job_name: str
    priority_class: str
    admitted_at: datetime
    end: datetime | None
    placements: tuple[tuple[str, str, int], ...] = ()
    borrowed: Mapping[str, int] = field(default_factory=dict)

    def borrowed_fraction(self, flavour: FlavourRef, placed: Mapping[str, int]) -> Fraction:
        """Share of this workload's devices of ``flavour`` that were borrowed (0..1)."""
        total = placed.get(flavour.name, 0)
        borrowed = self.borrowed.get(flavour.name, self.borrowed.get(flavour.resource_name, 0))
        if total <= 0 or borrowed <= 0:
            return Fraction(0)
        return min(Fraction(1), Fraction(int(borrowed), total))

    def devices_by_flavour(self) -> dict[str, int]:
        placed: dict[str, int] = {}
        for _node, flavour, devices in self.placements:
            placed[flavour] = placed.get(flavour, 0) + int(devices)
        return placed


@dataclass(frozen=True, slots=True)
class Allocation:
    """Devices of one flavour that one pod (or workload) held during one hour."""

    key: str  # pod uid, or "workload:<id>:<admitted epoch>" for workload-derived rows
    pod_name: str
    namespace: str
    flavour: FlavourRef
    interval_start: datetime
    devices: int
    seconds: int
    borrowed_seconds: int = 0
    workload_id: int | None = None
    job_name: str = ""
    priority_class: str = ""
    source: str = "pod"
    busy_seconds: Decimal | None = None

    @property
    def device_seconds(self) -> int:
        return self.devices * self.seconds

    @property
    def interval_end(self) -> datetime:
        return self.interval_start + HOUR


@dataclass
class MeteringResult:
    allocations: list[Allocation] = field(default_factory=list)
    # Human-readable reasons for pods that could not be metered (unknown flavour, ...).
    problems: list[str] = field(default_factory=list)


def _pod_window(pod: PodInfo) -> tuple[datetime, datetime | None] | None:
    if pod.phase not in RAN_PHASES or pod.started_at is None:
        return None
    if pod.phase == "Running":
        return pod.started_at, None
    # A finished pod without an end time held nothing we can measure.
    return (pod.started_at, pod.finished_at) if pod.finished_at is not None else None


def pod_allocations(
    pods: Iterable[PodInfo],
    hours: Sequence[datetime],
    flavours: FlavourMap,
    workloads: Mapping[tuple[str, str], WorkloadRef],
) -> MeteringResult:
    """One allocation per pod x GPU resource x hour in ``hours`` that the pod overlapped.

    ``workloads`` maps (namespace, job name) to the admitted workload the pod belongs to;
    a pod of a workload inherits its priority class and its borrowed share.
    """
    result = MeteringResult()
    for pod in pods:
        window = _pod_window(pod)
        if window is None:
            continue
        workload = workloads.get((pod.namespace, pod.job_name or "")) if pod.job_name else None
        placed = workload.devices_by_flavour() if workload else {}
        for resource, devices in sorted(pod.gpu_requests.items()):
            if devices <= 0 or not is_gpu_resource(resource):
                continue
            flavour = flavours.for_pod(pod.node_name, resource)
            if flavour is None:
                result.problems.append(
                    f"pod {pod.namespace}/{pod.name}: no flavour for {resource} on node "
                    f"{pod.node_name or '(unscheduled)'}; run an inventory sync"
                )
                continue
            share = workload.borrowed_fraction(flavour, placed) if workload else Fraction(0)
            for hour in hours:
                seconds = overlap_seconds(window[0], window[1], hour)
                if seconds <= 0:
                    continue
                result.allocations.append(
                    Allocation(
                        key=pod.uid,
                        pod_name=pod.name,
                        namespace=pod.namespace,
                        flavour=flavour,
                        interval_start=hour,
                        devices=int(devices),
                        seconds=seconds,
                        borrowed_seconds=int(share * devices * seconds),
                        workload_id=workload.id if workload else None,
                        job_name=pod.job_name or "",
                        priority_class=workload.priority_class if workload else "",
                        source="pod",
                    )
                )
    return result


def workload_allocations(
    workloads: Iterable[WorkloadRef],
    hours: Sequence[datetime],
    flavours_by_name: Mapping[str, FlavourRef],
    covered: set[tuple[int, datetime]],
) -> MeteringResult:
    """Allocations of admitted workloads for the hours no pod of theirs was metered in.

    Pods are the better source (they say when GPUs were really held), but a pod that
    ended and was garbage-collected while the collector was down is gone; the workload's
    admission record still says what it held. ``covered`` holds (workload id, hour) pairs
    already metered from pods, in this run or an earlier one.
    """
    result = MeteringResult()
    for workload in workloads:
        placed = workload.devices_by_flavour()
        key = f"workload:{workload.id}:{int(workload.admitted_at.timestamp())}"
        for flavour_name, devices in sorted(placed.items()):
            flavour = flavours_by_name.get(flavour_name)
            if flavour is None:
                result.problems.append(
                    f"workload {workload.id}: unknown flavour {flavour_name}; not metered"
                )
                continue
            share = workload.borrowed_fraction(flavour, placed)
            for hour in hours:
                if (workload.id, hour) in covered:
                    continue
                seconds = overlap_seconds(workload.admitted_at, workload.end, hour)
                if seconds <= 0:
                    continue
                result.allocations.append(
                    Allocation(
                        key=key,
                        pod_name="",
                        namespace=workload.namespace,
                        flavour=flavour,
                        interval_start=hour,
                        devices=devices,
                        seconds=seconds,
                        borrowed_seconds=int(share * devices * seconds),
                        workload_id=workload.id,
                        job_name=workload.job_name,
                        priority_class=workload.priority_class,
                        source="workload",
                    )
                )
    return result


BusyKey = tuple[str, str, str, datetime]
"""(namespace, pod, MIG profile or "", hour start)."""


def attach_busy(
    allocations: Iterable[Allocation],
    busy_devices: Mapping[BusyKey, Decimal],
    fallback_devices: Mapping[BusyKey, Decimal],
) -> list[Allocation]:
    """Each allocation with ``busy_seconds`` from Prometheus, or None when no series exist.

    ``busy_devices`` holds, per pod, MIG profile and hour, the sum over the pod's devices
    of their average engine activity while the pod ran (so 1.5 = one and a half devices
    busy on average); ``fallback_devices`` the same from GPU_UTIL for full GPUs. Busy
    seconds are that average times the seconds the pod held its devices in the hour,
    never more than it held. Workload-derived allocations sum their Job's pods (pod names
    ``<job>-<suffix>``).
    """
    by_prefix: dict[tuple[str, str, datetime], list[tuple[str, Decimal]]] = {}
    for (namespace, pod, profile, hour), value in busy_devices.items():
        by_prefix.setdefault((namespace, profile, hour), []).append((pod, value))
    out = []
    for allocation in allocations:
        found = _busy_value(allocation, busy_devices, fallback_devices, by_prefix)
        if found is None:
            out.append(allocation)
            continue
        busy = min(found * allocation.seconds, Decimal(allocation.device_seconds))
        out.append(replace(allocation, busy_seconds=max(busy, Decimal(0)).quantize(BUSY_PLACES)))
    return out


def _busy_value(
    allocation: Allocation,
    busy: Mapping[BusyKey, Decimal],
    fallback: Mapping[BusyKey, Decimal],
    by_prefix: Mapping[tuple[str, str, datetime], list[tuple[str, Decimal]]],
) -> Decimal | None:
    profile = allocation.flavour.mig_profile
    hour = allocation.interval_start
    if allocation.source == "pod":
        key = (allocation.namespace, allocation.pod_name, profile, hour)
        if key in busy:
            return busy[key]
        return None if profile else fallback.get(key)
    if not allocation.job_name:
        return None
    prefix = f"{allocation.job_name}-"
    values = [
        value
        for pod, value in by_prefix.get((allocation.namespace, profile, hour), [])
        if pod.startswith(prefix)
    ]
    return sum(values, Decimal(0)) if values else None
