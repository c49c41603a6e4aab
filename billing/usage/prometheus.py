"""Reading GPU activity from Prometheus (DCGM exporter metrics). Pure Python, no Django.

Engine activity comes from ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a ratio 0..1 per GPU or MIG
instance, labelled with the pod and namespace using it, and on MIG with ``GPU_I_PROFILE``
and ``GPU_I_ID``). On full GPUs whose profiling metrics are off, ``DCGM_FI_DEV_GPU_UTIL``
(percent; not valid on MIG) divided by 100 stands in. Source: NVIDIA dcgm-exporter's
counter lists (``etc/default-counters.csv``, ``etc/dcp-metrics-included.csv``); how
Tidegate uses them: docs/chargeback.md#busy-time-from-prometheus.

One ``query_range`` per metric covers any number of whole hours: evaluated at each hour's
end with step 1h, ``avg_over_time(...[1h])`` is the average over that hour's samples. The
series are read one per device (not summed in PromQL) so that a pod holding more devices
than reported is seen (:class:`Reading`). A pod name used by two pods within one hour (a
restart under the same name) is read again per run, bounded to that run's own window
(:func:`run_busy`). MIG instances without profiling metrics get an estimate from their
parent GPU (:func:`mig_estimate`). On GPUs HAMi shares, its vGPU monitor's
``Device_utilization_desc_of_container`` (percent of the whole GPU per container,
labelled ``podnamespace``/``podname``; Project-HAMi/HAMi, the monitor's metric list) says
how much of the GPU each share really used (``HourlyBusy.hami``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# HAMi's per-container utilisation of the GPU it shares (percent of the whole GPU's SMs),
# labelled with HAMi's own pod labels (its vGPU monitor, hami-device-plugin)
HAMI_UTIL = "Device_utilization_desc_of_container"
HAMI_POD_LABEL = "podname"
HAMI_NAMESPACE_LABEL = "podnamespace"
HAMI_DEVICE_LABELS = ("ctrname", "deviceuuid", "vdeviceid")
# Framebuffer in use: a default counter dcgm-exporter reports per MIG instance with the
# pod using it, profiling on or off; it tells which parent GPU a MIG pod sits on.
FB_USED = "DCGM_FI_DEV_FB_USED"
MIG_PROFILE_LABEL = "GPU_I_PROFILE"
MIG_INSTANCE_LABEL = "GPU_I_ID"
# dcgm-exporter's device labels: the node, the (parent) GPU's UUID and index.
DEVICE_LABELS = ("Hostname", "UUID", "gpu", MIG_INSTANCE_LABEL)
HOUR_S = 3600


@dataclass(frozen=True)
class Reading:
    """What the series of one pod (per MIG profile) said about one hour or run window:
    ``devices`` is the sum over its devices of their average activity (1.5 = one and a
    half devices busy on average), ``series`` how many devices reported at all."""

    devices: Decimal
    series: int


BusyMap = dict[tuple[str, str, str, datetime], Reading]
"""(namespace, pod, MIG profile or "", hour start) -> Reading."""
RunBusyMap = dict[tuple[str, str, datetime], Reading]
"""(pod uid, MIG profile or "", hour start) -> Reading over that run's part of the hour."""


class PrometheusError(Exception):
    """Prometheus could not answer a query. ``retryable``: trying later may help."""

    retryable = True

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class PrometheusUnavailable(PrometheusError):
    """Down, unreachable, too slow, or answering 5xx/503 (e.g. still starting)."""


class PrometheusQueryRejected(PrometheusError):
    """Prometheus refused the query (HTTP 400/422): a bug or a bad URL, not worth retrying."""

    retryable = False


class PrometheusTooMuchData(PrometheusQueryRejected):
    """HTTP 422: evaluating the query would load more samples than Prometheus allows
    (``--query.max-samples``); a shorter window may pass."""


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    values: list[tuple[float, str]]


class PrometheusClient:
    """A minimal client of the Prometheus HTTP API (``/api/v1/query_range``)."""

    def __init__(self, base_url: str, *, timeout_s: float = 10.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise PrometheusQueryRejected(f"Prometheus URL {base_url!r} is not http(s)")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def query_range(
        self, query: str, start: datetime, end: datetime, step_s: int = HOUR_S
    ) -> list[Series]:
        """Series of a range query; raises PrometheusUnavailable or PrometheusQueryRejected."""
        params = {
            "query": query,
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
            "step": str(step_s),
        }
        body = self._get("/api/v1/query_range", params)
        data = body.get("data") or {}
        if data.get("resultType") != "matrix":
            raise PrometheusQueryRejected(f"unexpected result type {data.get('resultType')!r}")
        return [
            Series(
                labels=dict(item.get("metric") or {}),
                values=[(float(t), str(v)) for t, v in item.get("values") or []],
            )
            for item in data.get("result") or []
        ]

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                payload = response.read()
        except urllib.error.HTTPError as error:
            detail = _error_detail(error)
            if error.code == 422:
                raise PrometheusTooMuchData(
                    f"Prometheus at {self.base_url} refused the query as too large: {detail}"
                ) from error
            if error.code == 400:
                raise PrometheusQueryRejected(
                    f"Prometheus at {self.base_url} rejected the query: {detail}"
                ) from error
            raise PrometheusUnavailable(
                f"Prometheus at {self.base_url} answered HTTP {error.code}: {detail}"
            ) from error
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            raise PrometheusUnavailable(
                f"Prometheus at {self.base_url} did not answer within {self.timeout_s:g} s: "
                f"{getattr(error, 'reason', error)}"
            ) from error
        try:
            body: dict[str, Any] = json.loads(payload)
        except ValueError as error:
            raise PrometheusUnavailable(
                f"Prometheus at {self.base_url} sent a body that is not JSON"
            ) from error
        if body.get("status") != "success":
            raise PrometheusUnavailable(
                f"Prometheus at {self.base_url} failed the query: {body.get('error', body)}"
            )
        return body


def _error_detail(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read() or b"{}")
    except ValueError:
        return error.reason or ""
    return str(body.get("error") or error.reason or "")


def _selector(namespaces: Sequence[str] | None, namespace_label: str, extra: str = "") -> str:
    matchers = [f'{namespace_label}!=""']
    if namespaces:
        escaped = "|".join(sorted(n.replace("\\", "\\\\").replace('"', '\\"') for n in namespaces))
        matchers = [f'{namespace_label}=~"{escaped}"']
    if extra:
        matchers.append(extra)
    return "{" + ",".join(matchers) + "}"


def engine_active_query(
    namespaces: Sequence[str] | None = None,
    *,
    pod_label: str = "pod",
    namespace_label: str = "namespace",
    window: str = "1h",
    extra: str = "",
) -> str:
    """Per device series of a pod: its average engine activity over ``window``."""
    selector = _selector(namespaces, namespace_label, extra)
    return f"avg_over_time({ENGINE_ACTIVE}{selector}[{window}])"


def gpu_util_query(
    namespaces: Sequence[str] | None = None,
    *,
    pod_label: str = "pod",
    namespace_label: str = "namespace",
    window: str = "1h",
    extra: str = "",
) -> str:
    """The fallback for full GPUs: GPU_UTIL percent over 100, MIG series left out."""
    matchers = f'{MIG_PROFILE_LABEL}=""' + (f",{extra}" if extra else "")
    selector = _selector(namespaces, namespace_label, matchers)
    return f"avg_over_time({GPU_UTIL}{selector}[{window}]) / 100"


def hami_util_query(namespaces: Sequence[str] | None = None, *, window: str = "1h") -> str:
    """Per container and shared GPU: HAMi's average utilisation over ``window``, as the
    part of the whole GPU it kept busy (percent over 100)."""
    selector = _selector(namespaces, HAMI_NAMESPACE_LABEL)
    return f"avg_over_time({HAMI_UTIL}{selector}[{window}]) / 100"


def mig_instances_query(
    namespaces: Sequence[str] | None = None,
    *,
    pod_label: str = "pod",
    namespace_label: str = "namespace",
) -> str:
    """The MIG instances each pod used in the hour (any value: the series exists)."""
    selector = _selector(namespaces, namespace_label, f'{MIG_PROFILE_LABEL}!=""')
    return f"max_over_time({FB_USED}{selector}[1h])"


def parent_util_query() -> str:
    """Per physical GPU, its hourly average GPU_UTIL over 100 (series of whole GPUs)."""
    return (
        f'avg by (Hostname, UUID) (avg_over_time({GPU_UTIL}{{{MIG_PROFILE_LABEL}=""}}[1h])) / 100'
    )


def _device(labels: dict[str, str]) -> tuple[str, ...]:
    return tuple(labels.get(name, "") for name in DEVICE_LABELS)


def _hami_device(labels: dict[str, str]) -> tuple[str, ...]:
    return tuple(labels.get(name, "") for name in HAMI_DEVICE_LABELS)


def _value(raw: str) -> Decimal | None:
    try:
        value = Decimal(raw)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def _hour_of(timestamp: float) -> datetime:
    """The hour a point evaluated at an hour's end describes."""
    return datetime.fromtimestamp(round(timestamp), tz=UTC) - timedelta(hours=1)


def _to_busy_map(
    series: list[Series],
    pod_label: str,
    namespace_label: str,
    *,
    with_profile: bool,
    device_of: Callable[[dict[str, str]], tuple[str, ...]] = _device,
) -> BusyMap:
    """Per-device series summed per pod, MIG profile and hour, devices counted once."""
    sums: dict[tuple[str, str, str, datetime], dict[tuple[str, ...], Decimal]] = {}
    for item in series:
        namespace = item.labels.get(namespace_label, "")
        pod = item.labels.get(pod_label, "")
        if not namespace or not pod:
            continue
        profile = item.labels.get(MIG_PROFILE_LABEL, "") if with_profile else ""
        device = device_of(item.labels)
        for timestamp, raw in item.values:
            value = _value(raw)
            if value is None:
                continue
            devices = sums.setdefault((namespace, pod, profile, _hour_of(timestamp)), {})
            devices[device] = devices.get(device, Decimal(0)) + value
    return {
        key: Reading(sum(devices.values(), Decimal(0)), len(devices))
        for key, devices in sums.items()
    }


@dataclass
class HourlyBusy:
    """Busy readings of a run's hours, per (namespace, pod, MIG profile, hour start).

    ``active``: engine activity; ``util``: the GPU_UTIL fallback for full GPUs;
    ``mig_estimate``: for MIG instances, their parent GPU's GPU_UTIL (an estimate, see
    :func:`mig_estimate`); ``hami``: for pods on GPUs HAMi shares, the part of the GPU each
    of their containers kept busy (``devices`` in whole GPUs, profile "")."""

    active: BusyMap = field(default_factory=dict)
    util: BusyMap = field(default_factory=dict)
    mig_estimate: BusyMap = field(default_factory=dict)
    hami: BusyMap = field(default_factory=dict)

    def merged(self, other: HourlyBusy) -> HourlyBusy:
        return HourlyBusy(
            self.active | other.active,
            self.util | other.util,
            self.mig_estimate | other.mig_estimate,
            self.hami | other.hami,
        )


def hourly_busy(
    client: PrometheusClient,
    hours: Sequence[datetime],
    namespaces: Sequence[str] | None = None,
    *,
    pod_label: str = "pod",
    namespace_label: str = "namespace",
) -> HourlyBusy:
    """Busy readings per (namespace, pod, MIG profile, hour start) of ``hours``.

    ``hours`` are consecutive hour starts. A window Prometheus refuses as too large
    (422) is split in halves and each asked again, down to single hours; a single hour
    still too large raises PrometheusTooMuchData. Raises PrometheusError; on error
    nothing is returned, so the caller writes no partial hour.
    """
    if not hours:
        return HourlyBusy()
    try:
        return _hourly_busy(client, hours, namespaces, pod_label, namespace_label)
    except PrometheusTooMuchData:
        if len(hours) == 1:
            raise
    ordered = sorted(hours)
    middle = len(ordered) // 2
    labels = {"pod_label": pod_label, "namespace_label": namespace_label}
    earlier = hourly_busy(client, ordered[:middle], namespaces, **labels)
    return earlier.merged(hourly_busy(client, ordered[middle:], namespaces, **labels))


def _hourly_busy(
    client: PrometheusClient,
    hours: Sequence[datetime],
    namespaces: Sequence[str] | None,
    pod_label: str,
    namespace_label: str,
) -> HourlyBusy:
    first_end = min(hours) + timedelta(hours=1)
    last_end = max(hours) + timedelta(hours=1)
    labels = {"pod_label": pod_label, "namespace_label": namespace_label}
    active = client.query_range(engine_active_query(namespaces, **labels), first_end, last_end)
    util = client.query_range(gpu_util_query(namespaces, **labels), first_end, last_end)
    wanted = set(hours)
    busy = _to_busy_map(active, pod_label, namespace_label, with_profile=True)
    fallback = _to_busy_map(util, pod_label, namespace_label, with_profile=False)
    hami = client.query_range(hami_util_query(namespaces), first_end, last_end)
    shares = _to_busy_map(
        hami, HAMI_POD_LABEL, HAMI_NAMESPACE_LABEL, with_profile=False, device_of=_hami_device
    )
    result = HourlyBusy(
        active={k: v for k, v in busy.items() if k[3] in wanted},
        util={k: v for k, v in fallback.items() if k[3] in wanted},
        hami={k: v for k, v in shares.items() if k[3] in wanted},
    )
    # Only MIG pods without engine activity need the estimate: ask only if there are any.
    instances = client.query_range(mig_instances_query(namespaces, **labels), first_end, last_end)
    if instances:
        parents = client.query_range(parent_util_query(), first_end, last_end)
        estimate = mig_estimate(instances, parents, pod_label, namespace_label)
        result.mig_estimate = {
            k: v for k, v in estimate.items() if k[3] in wanted and k not in result.active
        }
    return result


def mig_estimate(
    instances: list[Series], parents: list[Series], pod_label: str, namespace_label: str
) -> BusyMap:
    """MIG busy time without profiling metrics: DCGM has no GPU_UTIL per MIG instance,
    so each instance a pod used is taken to be as busy as its parent GPU was that hour
    (the parent's ``DCGM_FI_DEV_GPU_UTIL``). In whole-GPU terms that is the parent's
    busy time split over its instances by their compute slices. Instances whose parent
    reports no GPU_UTIL are left out (the reading then counts fewer series)."""
    util: dict[tuple[str, str, datetime], Decimal] = {}
    for item in parents:
        for timestamp, raw in item.values:
            value = _value(raw)
            if value is not None:
                key = (item.labels.get("Hostname", ""), item.labels.get("UUID", ""))
                util[(*key, _hour_of(timestamp))] = min(max(value, Decimal(0)), Decimal(1))
    per_instance: list[Series] = []
    for item in instances:
        parent = (item.labels.get("Hostname", ""), item.labels.get("UUID", ""))
        values = [
            (t, str(util[(*parent, _hour_of(t))]))
            for t, _raw in item.values
            if (*parent, _hour_of(t)) in util
        ]
        per_instance.append(Series(labels=item.labels, values=values))
    return _to_busy_map(per_instance, pod_label, namespace_label, with_profile=True)


@dataclass(frozen=True)
class RunWindow:
    """The part of one hour one pod run held its devices: [start, end) within ``hour``."""

    uid: str
    namespace: str
    pod: str
    hour: datetime
    start: datetime
    end: datetime


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_busy(
    client: PrometheusClient,
    windows: Sequence[RunWindow],
    *,
    pod_label: str = "pod",
    namespace_label: str = "namespace",
) -> tuple[RunBusyMap, RunBusyMap]:
    """(engine activity, GPU_UTIL fallback) per (pod uid, MIG profile, hour) for pod runs
    whose name another run used in the same hour: DCGM series name the pod, not its uid,
    so each run is read over its own window only (``avg_over_time(...[<seconds>s])``
    evaluated at the window's end) and one run's samples never count for the other.
    Two queries per window; meant for the few names reused within an hour."""
    active: RunBusyMap = {}
    util: RunBusyMap = {}
    for window in windows:
        seconds = int((window.end - window.start).total_seconds())
        if seconds <= 0:
            continue
        pod = f"{pod_label}={_quoted(window.pod)}"
        options = {
            "pod_label": pod_label,
            "namespace_label": namespace_label,
            "window": f"{seconds}s",
            "extra": pod,
        }
        for query, target, with_profile in (
            (engine_active_query([window.namespace], **options), active, True),
            (gpu_util_query([window.namespace], **options), util, False),
        ):
            found = client.query_range(query, window.end, window.end, HOUR_S)
            moved = [
                Series(
                    item.labels, [(window.hour.timestamp() + HOUR_S, v) for _t, v in item.values]
                )
                for item in found
            ]
            for (_ns, _pod, profile, hour), reading in _to_busy_map(
                moved, pod_label, namespace_label, with_profile=with_profile
            ).items():
                target[(window.uid, profile, hour)] = reading
    return active, util


# The label pairs DCGM series carry for the pod using a GPU. dcgm-exporter labels its
# samples pod/namespace; behind a ServiceMonitor with honorLabels: false (the GPU
# operator's and dcgm-exporter's default), Prometheus keeps the target's own pod and
# namespace (the exporter pod) and renames the exporter's to exported_pod and
# exported_namespace (Prometheus docs, scrape_config honor_labels).
POD_LABEL_PAIRS = (("exported_pod", "exported_namespace"), ("pod", "namespace"))


def detect_pod_labels(
    client: PrometheusClient, start: datetime, end: datetime
) -> tuple[str, str] | None:
    """The (pod, namespace) label pair this Prometheus's DCGM series use between
    ``start`` and ``end``, or None when it has no DCGM series with a pod at all.

    ``exported_pod`` wins: where it exists, ``pod`` names the exporter itself. A window
    too large to count (422) is narrowed to its last hour."""
    for pod_label, namespace_label in POD_LABEL_PAIRS:
        query = f'count({{__name__=~"{ENGINE_ACTIVE}|{GPU_UTIL}", {pod_label}!=""}})'
        try:
            found = client.query_range(query, start, end)
        except PrometheusTooMuchData:
            if end - start <= timedelta(hours=1):
                raise
            return detect_pod_labels(client, end - timedelta(hours=1), end)
        if found:
            return pod_label, namespace_label
    return None


# kube-state-metrics: what pods requested and when they ran, kept by Prometheus after the
# pods are gone (kube-state-metrics docs, pod metrics: kube_pod_container_resource_requests
# with resource "nvidia_com_gpu" / "nvidia_com_mig_1g_10gb" - "." and "/" written "_" -
# and kube_pod_status_phase). OpenCost reads allocations the same way.
KSM_REQUESTS = "kube_pod_container_resource_requests"
KSM_PHASE = "kube_pod_status_phase"
# kube_pod_owner: the pod's owner references (owner_kind, owner_name); a Job's pods name it.
KSM_OWNER = "kube_pod_owner"


@dataclass(frozen=True)
class PodRun:
    """A GPU pod seen running by kube-state-metrics between ``start`` and ``end``."""

    namespace: str
    pod: str
    uid: str
    node: str
    resource: str  # as kube-state-metrics writes it: nvidia_com_gpu
    amount: int
    start: datetime
    end: datetime
    job: str = ""  # the Job owning the pod (its owner reference), if any


def ksm_gpu_pod_runs(
    client: PrometheusClient, start: datetime, end: datetime, step_s: int = 60
) -> list[PodRun]:
    """GPU requests of pods while they were Running, sampled every ``step_s``: a pod's
    run spans its first to its last sample plus one step (so it is known to the step)."""
    query = (
        f"sum by (namespace, pod, uid, node, resource) "
        f'({KSM_REQUESTS}{{resource=~"nvidia_com_gpu|nvidia_com_mig_.+"}}) '
        f'and on (namespace, pod, uid) ({KSM_PHASE}{{phase="Running"}} == 1)'
    )
    runs = []
    for item in client.query_range(query, start, end, step_s):
        seen = [(t, float(v)) for t, v in item.values if float(v) > 0]
        if not seen:
            continue
        labels = item.labels
        runs.append(
            PodRun(
                namespace=labels.get("namespace", ""),
                pod=labels.get("pod", ""),
                uid=labels.get("uid", ""),
                node=labels.get("node", ""),
                resource=labels.get("resource", ""),
                amount=int(max(v for _, v in seen)),
                start=datetime.fromtimestamp(seen[0][0], tz=UTC),
                end=datetime.fromtimestamp(seen[-1][0] + step_s, tz=UTC),
            )
        )
    return _with_owners(client, runs, start, end, step_s)


def _with_owners(
    client: PrometheusClient, runs: list[PodRun], start: datetime, end: datetime, step_s: int
) -> list[PodRun]:
    """``runs`` with the Job owning each pod (``kube_pod_owner``). Best effort: a query
    refused as too large leaves the runs without a Job (they are still billed)."""
    if not runs:
        return runs
    query = f'max by (uid, owner_name) ({KSM_OWNER}{{owner_kind="Job"}})'
    try:
        found = client.query_range(query, start, end, step_s)
    except PrometheusQueryRejected:
        return runs
    owners = {item.labels.get("uid", ""): item.labels.get("owner_name", "") for item in found}
    return [replace(run, job=owners.get(run.uid, "")) for run in runs]
