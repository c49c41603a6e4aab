"""Allocation metering: pod lifecycles and admitted workloads become hourly allocations.

Pure Python (no Django): the collector loads pods, nodes, flavours and workloads, and this
module turns them into :class:`Allocation` values, one per pod x flavour x hour, that the
ledger stores. A GPU is "allocated" from the moment a pod holding it starts until it ends,
whatever the pod does with it; how busy it really was comes from Prometheus
(:mod:`billing.usage.prometheus`) and is attached with :func:`attach_busy`.

Units: ``devices`` are whole units of the flavour (a full GPU, or one MIG instance);
``seconds`` are whole seconds of one device within the hour, so ``device_seconds`` is an
exact integer. Times are timezone-aware UTC datetimes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from billing.usage.prometheus import HourlyBusy, Reading, RunBusyMap, RunWindow
from scheduler_bridge.gateways.base import PodInfo, is_gpu_resource

HOUR = timedelta(hours=1)
MILLI = 1000  # a shared flavour counts thousandths of a GPU
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
    # shared: devices are thousandths of a GPU; one unit of the resource a pod outside
    # the queue requests (a time-slicing replica, a vGPU) is ``milli_per_unit`` of them
    shared: bool = False
    milli_per_unit: int = 1


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
    """An admitted workload run: who owns it, where admission put it, when it ran.

    ``placements`` are (node, flavour name, devices); ``end`` is None while it runs.
    What of it was borrowed is decided per hour once the ledger rows are known
    (:mod:`billing.usage.borrowing`), not here.
    """

    id: int
    tenant_id: int
    namespace: str
    job_name: str
    priority_class: str
    admitted_at: datetime
    end: datetime | None
    placements: tuple[tuple[str, str, int], ...] = ()

    @property
    def run_key(self) -> str:
        """The ledger key of this run's workload-derived rows (one per admission)."""
        return f"workload:{self.id}:{int(self.admitted_at.timestamp())}"

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
    workload_id: int | None = None
    job_name: str = ""
    priority_class: str = ""
    source: str = "pod"
    busy_seconds: Decimal | None = None
    # the workload run (WorkloadRef.run_key) this allocation counts for, "" for none
    run_key: str = ""
    # [window_start, window_end): the part of the hour the devices were held
    window_start: datetime | None = None
    window_end: datetime | None = None
    # fewer device series reported than devices held: busy scaled from those that did
    busy_partial: bool = False
    # MIG without profiling metrics: busy estimated from the parent GPU's utilisation
    busy_estimated: bool = False

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
    # pods of admitted shares: not billed (their workload is, from its admission), only
    # read for how busy they kept their GPU (attach_busy)
    share_pods: list[Allocation] = field(default_factory=list)


def _pod_window(pod: PodInfo) -> tuple[datetime, datetime | None] | None:
    if pod.phase not in RAN_PHASES or pod.started_at is None:
        return None
    if pod.phase == "Running":
        return pod.started_at, None
    # A finished pod without an end time held nothing we can measure.
    return (pod.started_at, pod.finished_at) if pod.finished_at is not None else None


def runs_by_job(workloads: Iterable[WorkloadRef]) -> dict[tuple[str, str], list[WorkloadRef]]:
    """Workload runs by (namespace, Job name), oldest admission first."""
    runs: dict[tuple[str, str], list[WorkloadRef]] = {}
    for workload in sorted(workloads, key=lambda w: w.admitted_at):
        if workload.job_name:
            runs.setdefault((workload.namespace, workload.job_name), []).append(workload)
    return runs


def _run_of(pod: PodInfo, started: datetime, runs: Sequence[WorkloadRef]) -> WorkloadRef | None:
    """The run a pod belongs to: the last one admitted before the pod started (a pod of a
    preempted run that lingers past the preemption still belongs to that run)."""
    if not runs:
        return None
    earlier = [run for run in runs if run.admitted_at <= started]
    return earlier[-1] if earlier else runs[0]


def pod_allocations(
    pods: Iterable[PodInfo],
    hours: Sequence[datetime],
    flavours: FlavourMap,
    workloads: Mapping[tuple[str, str], Sequence[WorkloadRef]],
) -> MeteringResult:
    """One allocation per pod x GPU resource x hour in ``hours`` that the pod overlapped.

    ``workloads`` maps (namespace, Job name) to the runs of the admitted workload the
    pod belongs to (see :func:`runs_by_job`); the pod's Job name comes from its owner
    references and workload labels (``PodInfo.job_name``), never from its own name. A
    pod of a workload counts for the run it started in and inherits its priority class.
    """
    result = MeteringResult()
    for pod in pods:
        window = _pod_window(pod)
        if window is None:
            continue
        runs = workloads.get((pod.namespace, pod.job_name or ""), ()) if pod.job_name else ()
        workload = _run_of(pod, window[0], runs)
        # devices it asks for, then thousandths of shared GPUs its claims hold (DRA)
        held = [(r, n, False) for r, n in sorted(pod.gpu_requests.items())]
        held += [(r, n, True) for r, n in sorted((pod.claimed_shares or {}).items())]
        for resource, devices, in_thousandths in held:
            if devices <= 0 or not is_gpu_resource(resource):
                continue
            flavour = flavours.for_pod(pod.node_name, resource)
            if flavour is None:
                result.problems.append(
                    f"pod {pod.namespace}/{pod.name}: no flavour for {resource} on node "
                    f"{pod.node_name or '(unscheduled)'}; run an inventory sync"
                )
                continue
            # a share is metered from its admission (what it holds of one GPU), not from
            # the replicas or vGPUs its pods request (workload_allocations); its pods only
            # say how busy it was
            if in_thousandths and not flavour.shared:
                result.problems.append(
                    f"pod {pod.namespace}/{pod.name}: its claims hold part of a {resource} "
                    f"GPU, but flavour {flavour.name} is not shared; set its sharing to dra "
                    "(PATCH /api/v1/flavours/{id}/)"
                )
                continue
            billed = not (flavour.shared and workload is not None)
            if flavour.shared and not in_thousandths:
                devices *= flavour.milli_per_unit
            for hour in hours:
                seconds = overlap_seconds(window[0], window[1], hour)
                if seconds <= 0:
                    continue
                held_from = max(window[0], hour)
                (result.allocations if billed else result.share_pods).append(
                    Allocation(
                        key=pod.uid,
                        pod_name=pod.name,
                        namespace=pod.namespace,
                        flavour=flavour,
                        interval_start=hour,
                        devices=int(devices),
                        seconds=seconds,
                        workload_id=workload.id if workload else None,
                        job_name=pod.job_name or "",
                        priority_class=workload.priority_class if workload else "",
                        source="pod",
                        run_key=workload.run_key if workload else "",
                        window_start=held_from,
                        window_end=held_from + timedelta(seconds=seconds),
                    )
                )
    return result


def workload_allocations(
    workloads: Iterable[WorkloadRef],
    hours: Sequence[datetime],
    flavours_by_name: Mapping[str, FlavourRef],
    covered: set[tuple[str, datetime]],
    covered_workloads: set[tuple[int, datetime]] | None = None,
) -> MeteringResult:
    """Allocations of admitted workload runs for the hours no pod of that run was metered in.

    Pods are the better source (they say when GPUs were really held), but a pod that
    ended and was garbage-collected while the collector was down is gone; the workload's
    admission record still says what it held. Hours are accounted per run: ``covered``
    holds (run key, hour) pairs metered from pods of that run, so a preempted run and
    its rerun sharing an hour are both counted. ``covered_workloads``: (workload id,
    hour) pairs the ledger already has pod rows for (an hour collected again), which
    cover every run of that workload.
    """
    result = MeteringResult()
    already = covered_workloads or set()
    for workload in workloads:
        placed = workload.devices_by_flavour()
        key = workload.run_key
        for flavour_name, devices in sorted(placed.items()):
            flavour = flavours_by_name.get(flavour_name)
            if flavour is None:
                result.problems.append(
                    f"workload {workload.id}: unknown flavour {flavour_name}; not metered"
                )
                continue
            for hour in hours:
                if (key, hour) in covered or (workload.id, hour) in already:
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
                        workload_id=workload.id,
                        job_name=workload.job_name,
                        priority_class=workload.priority_class,
                        source="workload",
                        run_key=key,
                    )
                )
    return result


BusyKey = tuple[str, str, str, datetime]
"""(namespace, pod, MIG profile or "", hour start)."""


@dataclass
class BusyReadings:
    """Everything Prometheus said about busy time for a collection: the hourly readings
    per pod name, and per run (pod uid) for names reused within an hour."""

    hourly: HourlyBusy = field(default_factory=HourlyBusy)
    run_active: RunBusyMap = field(default_factory=dict)
    run_util: RunBusyMap = field(default_factory=dict)


def reused_names(allocations: Iterable[Allocation]) -> set[tuple[str, str, datetime]]:
    """(namespace, pod name, hour) held by more than one pod (a restart under the same
    name): DCGM series name the pod, so these hours must be read per run."""
    uids: dict[tuple[str, str, datetime], set[str]] = {}
    for allocation in allocations:
        if allocation.source == "pod":
            name = (allocation.namespace, allocation.pod_name, allocation.interval_start)
            uids.setdefault(name, set()).add(allocation.key)
    return {name for name, found in uids.items() if len(found) > 1}


def run_windows(allocations: Iterable[Allocation]) -> list[RunWindow]:
    """The windows to read per run: each pod allocation of a name reused in its hour."""
    listed = list(allocations)
    reused = reused_names(listed)
    windows = {
        RunWindow(a.key, a.namespace, a.pod_name, a.interval_start, a.window_start, a.window_end)
        for a in listed
        if a.source == "pod"
        and (a.namespace, a.pod_name, a.interval_start) in reused
        and a.window_start is not None
        and a.window_end is not None
    }
    return sorted(windows, key=lambda w: (w.hour, w.namespace, w.pod, w.start, w.uid))


def attach_busy(
    allocations: Iterable[Allocation],
    readings: BusyReadings,
    share_pods: Sequence[Allocation] = (),
) -> list[Allocation]:
    """Each allocation with ``busy_seconds`` from Prometheus, or None when no series exist.

    A reading is, per pod, MIG profile and hour (or per run, for a pod name reused within
    the hour), the sum over the pod's devices of their average activity. Busy seconds
    are that times the seconds the pod held its devices, never more than it held. When
    fewer devices reported than the pod held, the missing ones are taken to be as busy
    as the average reporting one (not idle) and the row is flagged ``busy_partial``.
    MIG instances without engine activity use their parent GPU's utilisation, flagged
    ``busy_estimated``. Workload-derived rows add up the pods known, by owner reference
    or workload label, to belong to their Job (never pods matched by name).

    Shares of a GPU (shared flavours, in thousandths): HAMi's per-container reading says
    how much of the GPU a pod kept busy, counted up to what it holds. Without it, the
    GPU's own activity is split by the part each share holds (activity x held), flagged
    ``busy_estimated``: on a shared GPU, DCGM cannot tell whose work kept it busy. An
    admitted share is billed from its admission; ``share_pods`` are its pods, read only
    for this.
    """
    listed = list(allocations)
    reused = reused_names(listed)
    out: list[Allocation] = []
    pods: list[Allocation] = []
    for allocation in listed:
        if allocation.source != "pod":
            continue
        if allocation.flavour.shared:
            pods.append(_share_busy(allocation, readings, held=allocation.device_seconds))
            continue
        found, estimated = _pod_reading(allocation, readings, reused)
        pods.append(_with_reading(allocation, found, estimated))
    share_readings = [_share_busy(pod, readings, held=None) for pod in share_pods]
    by_pod = iter(pods)
    for allocation in listed:
        if allocation.source == "pod":
            out.append(next(by_pod))
        elif allocation.flavour.shared:
            out.append(_workload_share_busy(allocation, share_readings))
        else:
            out.append(_workload_busy(allocation, pods))
    return out


def _share_busy(allocation: Allocation, readings: BusyReadings, held: int | None) -> Allocation:
    """A pod of a shared GPU with its busy thousandth-seconds: HAMi's reading of the part
    of the GPU it kept busy (up to ``held``), else the GPU's activity over the part it
    holds (``held``; None: over a whole GPU, for a share pod to be folded into its
    workload), flagged as an estimate."""
    name = (allocation.namespace, allocation.pod_name, "", allocation.interval_start)
    hourly = readings.hourly
    used = hourly.hami.get(name)
    if used is not None and used.series > 0:
        busy = used.devices * MILLI * allocation.seconds
        if held is not None:
            busy = min(busy, Decimal(held))
        return replace(allocation, busy_seconds=max(busy, Decimal(0)).quantize(BUSY_PLACES))
    gpu = hourly.active.get(name) or hourly.util.get(name)
    if gpu is None or gpu.series <= 0:
        return allocation
    activity = min(max(gpu.devices / gpu.series, Decimal(0)), Decimal(1))
    whole = held if held is not None else MILLI * allocation.seconds
    return replace(
        allocation, busy_seconds=(activity * whole).quantize(BUSY_PLACES), busy_estimated=True
    )


def _workload_share_busy(allocation: Allocation, share_pods: Sequence[Allocation]) -> Allocation:
    """An admitted share's busy time from its pods of that hour: HAMi's readings added up
    (to what it holds), else the GPUs' average activity over what it holds (estimated)."""
    members = _measured_pods_of(allocation, share_pods)
    if not members:
        return allocation
    held = Decimal(allocation.device_seconds)
    measured = [pod for pod in members if not pod.busy_estimated]
    if measured:
        busy = min(sum((pod.busy_seconds or Decimal(0) for pod in measured), Decimal(0)), held)
        return replace(allocation, busy_seconds=busy.quantize(BUSY_PLACES))
    whole = sum((Decimal(MILLI * pod.seconds) for pod in members), Decimal(0))
    activity = sum((pod.busy_seconds or Decimal(0) for pod in members), Decimal(0)) / whole
    return replace(
        allocation, busy_seconds=(activity * held).quantize(BUSY_PLACES), busy_estimated=True
    )


def _pod_reading(
    allocation: Allocation, readings: BusyReadings, reused: set[tuple[str, str, datetime]]
) -> tuple[Reading | None, bool]:
    profile = allocation.flavour.mig_profile
    hour = allocation.interval_start
    name = (allocation.namespace, allocation.pod_name, profile, hour)
    hourly = readings.hourly
    if (allocation.namespace, allocation.pod_name, hour) in reused:
        run = (allocation.key, profile, hour)
        found = readings.run_active.get(run)
        if found is None and not profile:
            found = readings.run_util.get(run)
    else:
        found = hourly.active.get(name)
        if found is None and not profile:
            found = hourly.util.get(name)
    if found is None and profile and name in hourly.mig_estimate:
        return hourly.mig_estimate[name], True
    return found, False


def _with_reading(allocation: Allocation, found: Reading | None, estimated: bool) -> Allocation:
    if found is None or found.series <= 0:
        return allocation
    devices = Decimal(allocation.devices)
    busy_devices = found.devices
    partial = found.series < allocation.devices
    if partial:
        busy_devices = found.devices / found.series * devices
    busy = min(busy_devices * allocation.seconds, Decimal(allocation.device_seconds))
    return replace(
        allocation,
        busy_seconds=max(busy, Decimal(0)).quantize(BUSY_PLACES),
        busy_partial=partial,
        busy_estimated=estimated,
    )


def _measured_pods_of(allocation: Allocation, pods: Sequence[Allocation]) -> list[Allocation]:
    """The pods with busy time that belong to a workload-derived row's Job, run, flavour
    and hour (by owner reference or workload label, never by name); none without a Job."""
    if not allocation.job_name:
        return []
    return [
        pod
        for pod in pods
        if pod.namespace == allocation.namespace
        and pod.job_name == allocation.job_name
        and pod.interval_start == allocation.interval_start
        and pod.flavour == allocation.flavour
        and pod.run_key in ("", allocation.run_key)
        and pod.busy_seconds is not None
    ]


def _workload_busy(allocation: Allocation, pods: Sequence[Allocation]) -> Allocation:
    members = _measured_pods_of(allocation, pods)
    if not members:
        return allocation
    busy = sum((pod.busy_seconds or Decimal(0) for pod in members), Decimal(0))
    return replace(
        allocation,
        busy_seconds=min(busy, Decimal(allocation.device_seconds)).quantize(BUSY_PLACES),
        busy_partial=any(pod.busy_partial for pod in members),
        busy_estimated=any(pod.busy_estimated for pod in members),
    )
