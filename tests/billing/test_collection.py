"""Usage collection end to end: pods from a gateway, activity from a real Prometheus
(DCGM series, MIG included), numbers checked against hand-computed ones; collecting
twice, catching up after downtime, and Prometheus down or slow."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from billing.models import CollectorWatermark, UsageRecord
from billing.usage.collection import usage_collect
from billing.usage.prometheus import (
    PrometheusClient,
    PrometheusTooMuchData,
    PrometheusUnavailable,
    Reading,
    detect_pod_labels,
    engine_active_query,
    hourly_busy,
)
from scheduler_bridge.gateways.base import PodInfo
from scheduler_bridge.workloads import lifecycle
from scheduler_bridge.workloads.models import PriorityClass, Workload
from tests.billing.conftest import GpuCluster
from tests.billing.prometheus_server import Series, available, prometheus_serving
from tests.conftest import Cast, client_for

DAY = datetime(2026, 3, 10, tzinfo=UTC)
H10, H11, H12, H13 = (DAY + timedelta(hours=h) for h in (10, 11, 12, 13))
NOW = H13 + timedelta(minutes=10)  # hour 12 is complete and past the scrape delay


def dcgm_series() -> list[Series]:
    """What dcgm-exporter would have reported for the pods of `pods()`."""
    base = {"Hostname": "h100-1", "modelName": "NVIDIA H100 80GB HBM3", "container": "main"}
    mig = {"Hostname": "a100-1", "modelName": "NVIDIA A100-SXM4-40GB", "container": "main"}
    train = {"namespace": "vision-train", "pod": "train-0"}
    infer = {"namespace": "speech-train", "pod": "infer-0"}
    return [
        # train-0 holds GPUs 0 and 1 from 10:00 to 12:30: engines 50 % and 25 % busy.
        Series(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE", base | train | {"gpu": "0", "UUID": "GPU-a0"}
        ).every(H10, H12 + timedelta(minutes=30), 0.5),
        Series(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE", base | train | {"gpu": "1", "UUID": "GPU-a1"}
        ).every(H10, H12 + timedelta(minutes=30), 0.25),
        # The notebook's GPU has profiling off: GPU_UTIL 40 % is the fallback.
        Series(
            "DCGM_FI_DEV_GPU_UTIL",
            base | {"gpu": "2", "UUID": "GPU-a2", "namespace": "vision-dev", "pod": "notebook"},
        ).every(H10, H13, 40),
        # Two 1g.5gb MIG instances of infer-0: 10 % and 30 % busy.
        Series(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            mig
            | infer
            | {"gpu": "0", "UUID": "GPU-b0", "GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": "1"},
        ).every(H10, H13, 0.1),
        Series(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            mig
            | infer
            | {"gpu": "0", "UUID": "GPU-b0", "GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": "2"},
        ).every(H10, H13, 0.3),
        # GPU_UTIL is not valid on MIG: a bogus value there must be ignored.
        Series(
            "DCGM_FI_DEV_GPU_UTIL",
            mig
            | infer
            | {"gpu": "0", "UUID": "GPU-b0", "GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": "1"},
        ).every(H10, H13, 99),
        # globex's job sits idle: 1 % engine activity.
        Series(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            base | {"gpu": "3", "UUID": "GPU-a3", "namespace": "globex-train", "pod": "sleepy"},
        ).every(H10, H13, 0.01),
        # HAMi's monitor: share-0's two containers on one shared GPU use 20 % and 15 % of it
        *(
            Series(
                "Device_utilization_desc_of_container",
                {
                    "podnamespace": "vision-dev",
                    "podname": "share-0",
                    "ctrname": container,
                    "deviceuuid": "GPU-a4",
                    "vdeviceid": "0",
                },
            ).every(H10, H12, percent)
            for container, percent in (("main", 20), ("sidecar", 15))
        ),
    ]


def pods() -> list[PodInfo]:
    return [
        PodInfo(
            uid="uid-train-0",
            name="train-0",
            namespace="vision-train",
            node_name="h100-1",
            phase="Succeeded",
            gpu_requests={"nvidia.com/gpu": 2},
            started_at=H10,
            finished_at=H12 + timedelta(minutes=30),
            job_name="train",
        ),
        PodInfo(
            uid="uid-notebook",
            name="notebook",
            namespace="vision-dev",
            node_name="h100-1",
            phase="Running",
            gpu_requests={"nvidia.com/gpu": 1},
            started_at=H10,
        ),
        PodInfo(
            uid="uid-infer-0",
            name="infer-0",
            namespace="speech-train",
            node_name="a100-1",
            phase="Running",
            gpu_requests={"nvidia.com/mig-1g.5gb": 2},
            started_at=H10,
        ),
        PodInfo(
            uid="uid-sleepy",
            name="sleepy",
            namespace="globex-train",
            node_name="h100-1",
            phase="Running",
            gpu_requests={"nvidia.com/gpu": 1},
            started_at=H10,
        ),
        PodInfo(  # nobody owns this namespace
            uid="uid-stray",
            name="stray",
            namespace="unbound",
            node_name="h100-1",
            phase="Running",
            gpu_requests={"nvidia.com/gpu": 1},
            started_at=H10,
        ),
        PodInfo(  # never started: holds nothing
            uid="uid-pending",
            name="pending",
            namespace="vision-train",
            node_name=None,
            phase="Pending",
            gpu_requests={"nvidia.com/gpu": 4},
        ),
    ]


class FakeGateway:
    def __init__(self, listed: list[PodInfo]) -> None:
        self.listed = listed
        self.calls = 0

    def list_gpu_pods(self) -> list[PodInfo]:
        self.calls += 1
        return list(self.listed)

    def __enter__(self) -> FakeGateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True


@pytest.fixture(scope="session")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not available():
        pytest.skip("Debian's prometheus and promtool are not installed")
    with prometheus_serving(dcgm_series(), tmp_path_factory.mktemp("prometheus")) as url:
        yield url


def rows_by_key() -> dict[tuple[str, datetime], UsageRecord]:
    return {(r.pod_uid, r.interval_start): r for r in UsageRecord.objects.all()}


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
def test_prometheus_answers_hourly_busy_devices_per_pod_and_mig_profile(
    prometheus_url: str,
) -> None:
    found = hourly_busy(PrometheusClient(prometheus_url), [H10, H11, H12])
    busy, util = found.active, found.util
    # the sum over the pod's devices of their average activity, and how many reported
    assert busy[("vision-train", "train-0", "", H10)] == Reading(Decimal("0.75"), 2)
    assert busy[("vision-train", "train-0", "", H12)] == Reading(Decimal("0.75"), 2)
    assert busy[("speech-train", "infer-0", "1g.5gb", H11)] == Reading(Decimal("0.4"), 2)
    assert ("vision-dev", "notebook", "", H10) not in busy
    assert util[("vision-dev", "notebook", "", H10)] == Reading(Decimal("0.4"), 1)
    assert ("speech-train", "infer-0", "", H10) not in util  # MIG GPU_UTIL left out
    # HAMi: the part of the shared GPU each container kept busy, added up per pod
    assert found.hami[("vision-dev", "share-0", "", H11)] == Reading(Decimal("0.35"), 2)
    assert ("vision-dev", "share-0", "", H12) not in found.hami  # it had ended


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
@pytest.mark.django_db
def test_collector_writes_hand_computed_allocation_and_busy_seconds(
    cast: Cast, gpu: GpuCluster, prometheus_url: str
) -> None:
    gpu.cluster.prometheus_url = prometheus_url
    gpu.cluster.save()
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    result = usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods()), now=NOW)
    assert result.hours == 3 and result.unbound_namespaces == {"unbound"}
    rows = rows_by_key()
    train = [rows[("uid-train-0", h)] for h in (H10, H11, H12)]
    assert [r.gpu_seconds_allocated for r in train] == [7200, 7200, 3600]
    # 0.5 + 0.25 busy devices while it ran: 2700 s per full hour, 1350 s in the half hour.
    assert [r.gpu_seconds_busy for r in train] == [
        Decimal("2700"),
        Decimal("2700"),
        Decimal("1350"),
    ]
    assert all(r.tenant_id == cast.team_a.pk and r.flavour_id == gpu.h100.pk for r in train)
    notebook = rows[("uid-notebook", H11)]
    assert (notebook.gpu_seconds_allocated, notebook.gpu_seconds_busy) == (3600, Decimal("1440"))
    infer = rows[("uid-infer-0", H12)]
    assert infer.flavour_id == gpu.mig_1g.pk and infer.tenant_id == cast.team_b.pk
    assert (infer.gpu_seconds_allocated, infer.gpu_seconds_busy) == (7200, Decimal("1440"))
    sleepy = rows[("uid-sleepy", H10)]
    assert sleepy.tenant_id == cast.other_org.pk and sleepy.gpu_seconds_busy == Decimal("36")
    assert len(rows) == 12  # 3 hours x 4 bound pods; the stray and the pending pod: none
    assert CollectorWatermark.objects.get(cluster=gpu.cluster).collected_until == H13


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
@pytest.mark.django_db
def test_collecting_the_same_hours_twice_never_counts_twice(
    cast: Cast, gpu: GpuCluster, prometheus_url: str
) -> None:
    gpu.cluster.prometheus_url = prometheus_url
    gpu.cluster.save()
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods()), now=NOW)
    # A crash after the write but before the watermark moved: the same hours again.
    CollectorWatermark.objects.filter(cluster=gpu.cluster).update(collected_until=H10)
    again = usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods()), now=NOW)
    assert again.rows == 12 and again.inserted == 0
    assert UsageRecord.objects.count() == 12


@pytest.mark.django_db
def test_a_collector_down_for_a_day_catches_up_in_chunks(cast: Cast, gpu: GpuCluster) -> None:
    start = DAY
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=start)
    notebook = PodInfo(
        uid="uid-long",
        name="long",
        namespace="vision-train",
        node_name="h100-1",
        phase="Running",
        gpu_requests={"nvidia.com/gpu": 1},
        started_at=start - timedelta(days=2),
    )
    now = start + timedelta(days=1, minutes=30)
    first = usage_collect(
        cluster=gpu.cluster, gateway=FakeGateway([notebook]), now=now, max_hours=10
    )
    assert (first.hours, first.more_due) == (10, True)
    while True:
        step = usage_collect(
            cluster=gpu.cluster, gateway=FakeGateway([notebook]), now=now, max_hours=10
        )
        if not step.more_due:
            break
    hours = list(
        UsageRecord.objects.order_by("interval_start").values_list("interval_start", flat=True)
    )
    assert len(hours) == 24 and hours[0] == start and hours[-1] == start + timedelta(hours=23)
    assert usage_collect(cluster=gpu.cluster, gateway=FakeGateway([notebook]), now=now).hours == 0


@pytest.mark.django_db
def test_a_pod_collected_while_gone_is_metered_from_its_admitted_workload(
    cast: Cast, gpu: GpuCluster
) -> None:
    spot = PriorityClass.objects.create(name="spot", price_multiplier=Decimal("0.5"))
    workload = Workload.objects.create(
        cluster=gpu.cluster,
        tenant=cast.team_a,
        name="train",
        namespace="vision-train",
        job_name="train",
        pod_sets=[{"name": "main", "count": 1, "gpus_per_pod": 4, "flavours": ["h100-80gb"]}],
        submitted_at=H10 - timedelta(hours=1),
        admitted_at=H10,
        finished_at=H11 + timedelta(minutes=45),
        state=Workload.State.FINISHED,
        flavour=gpu.h100,
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 4}],
        borrowed={"h100-80gb": 1},
        gpus=4,
        priority_class=spot,
    )
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    usage_collect(cluster=gpu.cluster, gateway=FakeGateway([]), now=NOW)
    rows = list(UsageRecord.objects.order_by("interval_start"))
    # admitted borrowing 1, but alone in its hours the job is inside vision's guarantee
    # of 4 H100s: nothing borrowed (billing.usage.borrowing)
    assert [(r.interval_start, r.gpu_seconds_allocated, r.gpu_seconds_borrowed) for r in rows] == [
        (H10, 4 * 3600, 0),
        (H11, 4 * 2700, 0),
    ]
    assert all(r.workload_id == workload.pk and r.priority_class == "spot" for r in rows)
    assert all(r.source == "workload" for r in rows)


@pytest.mark.django_db
def test_work_submitted_through_the_api_is_billed_to_its_tenant(
    cast: Cast, gpu: GpuCluster
) -> None:
    workload = Workload.objects.create(
        cluster=gpu.cluster,
        tenant=cast.team_a,
        name="notebook-grant",
        pod_sets=[{"name": "main", "count": 1, "gpus_per_pod": 2, "flavours": ["h100-80gb"]}],
        submitted_at=H10 - timedelta(hours=1),
        admitted_at=H10,
        finished_at=H11,
        state=Workload.State.FINISHED,
        flavour=gpu.h100,
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 2}],
        gpus=2,
    )
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    result = usage_collect(cluster=gpu.cluster, gateway=FakeGateway([]), now=NOW)
    rows = list(UsageRecord.objects.all())
    assert [(r.tenant_id, r.workload_id, r.gpu_seconds_allocated) for r in rows] == [
        (cast.team_a.pk, workload.pk, 2 * 3600)
    ]
    assert "" not in result.unbound_namespaces


@pytest.mark.django_db
def test_a_run_ended_by_preemption_is_billed_as_well_as_the_run_after_it(
    cast: Cast, gpu: GpuCluster
) -> None:
    """Preempted at 10:30 after half an hour on 2 GPUs, admitted again at 11:15 on 4,
    finished at 12:00: both runs are charged, each for the time it held its GPUs."""
    workload = Workload.objects.create(
        cluster=gpu.cluster,
        tenant=cast.team_a,
        name="preempted-once",
        pod_sets=[{"name": "main", "count": 1, "gpus_per_pod": 2, "flavours": ["h100-80gb"]}],
        submitted_at=H10 - timedelta(hours=1),
        admitted_at=H10,
        state=Workload.State.ADMITTED,
        flavour=gpu.h100,
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 2}],
        borrowed={"nvidia.com/gpu": 2},
        gpus=2,
    )
    lifecycle.preempt(workload, now=H10 + timedelta(minutes=30), by="vision", message="reclaim")
    workload.save()
    assert workload.admitted_at is None and len(workload.past_runs) == 1
    Workload.objects.filter(pk=workload.pk).update(
        state=Workload.State.FINISHED,
        admitted_at=H11 + timedelta(minutes=15),
        finished_at=H12,
        flavour=gpu.h100,
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 4}],
        gpus=4,
    )
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    usage_collect(cluster=gpu.cluster, gateway=FakeGateway([]), now=NOW)
    rows = sorted(UsageRecord.objects.all(), key=lambda r: r.interval_start)
    assert [
        (r.interval_start, r.workload_id, r.gpu_seconds_allocated, r.gpu_seconds_borrowed)
        for r in rows
    ] == [(H10, workload.pk, 2 * 1800, 0), (H11, workload.pk, 4 * 2700, 0)]


def test_pods_of_a_workload_take_precedence_over_its_admission_record(
    cast: Cast, gpu: GpuCluster
) -> None:
    Workload.objects.create(
        cluster=gpu.cluster,
        tenant=cast.team_a,
        name="train",
        namespace="vision-train",
        job_name="train",
        pod_sets=[],
        submitted_at=H10,
        admitted_at=H10,
        state=Workload.State.RUNNING,
        flavour=gpu.h100,
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 2}],
        gpus=2,
    )
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods()[:1]), now=NOW)
    sources = set(UsageRecord.objects.values_list("source", "interval_start"))
    # Pods cover 10, 11 and 12 h; the workload record adds nothing for those hours.
    assert sources == {("pod", H10), ("pod", H11), ("pod", H12)}


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An HTTP port that accepts connections and never answers (Prometheus hanging)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.django_db
@pytest.mark.parametrize("down", ["refused", "slow"])
def test_prometheus_down_or_slow_writes_nothing_and_retries_later(
    cast: Cast, gpu: GpuCluster, settings: Any, silent_server: str, down: str
) -> None:
    settings.TIDEGATE_BILLING = {"PROMETHEUS_TIMEOUT_S": 0.3}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{closed_port}" if down == "refused" else silent_server
    gpu.cluster.prometheus_url = url
    gpu.cluster.save()
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    with pytest.raises(PrometheusUnavailable):
        usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods()), now=NOW)
    assert UsageRecord.objects.count() == 0
    mark = CollectorWatermark.objects.get(cluster=gpu.cluster)
    assert mark.collected_until == H10 and mark.prometheus_down_since == NOW


@pytest.mark.django_db
def test_after_a_long_outage_old_hours_are_written_without_busy_data(
    cast: Cast, gpu: GpuCluster, settings: Any
) -> None:
    settings.TIDEGATE_BILLING = {"PROMETHEUS_TIMEOUT_S": 0.3, "PROMETHEUS_GIVE_UP_HOURS": 2}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gpu.cluster.prometheus_url = f"http://127.0.0.1:{port}"
    gpu.cluster.save()
    CollectorWatermark.objects.create(
        cluster=gpu.cluster, collected_until=H10, prometheus_down_since=NOW - timedelta(hours=3)
    )
    result = usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods()), now=NOW)
    assert result.without_busy_data and result.inserted == 12
    assert not UsageRecord.objects.filter(gpu_seconds_busy__isnull=False).exists()


@pytest.mark.django_db
def test_collection_runs_as_a_celery_task_and_requeues_while_behind(
    cast: Cast,
    gpu: GpuCluster,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from billing import tasks

    gateway = FakeGateway(pods()[1:2])
    monkeypatch.setattr(
        "scheduler_bridge.inventory.connection.gateway_for_cluster", lambda cluster: gateway
    )
    CollectorWatermark.objects.create(
        cluster=gpu.cluster,
        collected_until=datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        - timedelta(hours=60),
    )
    with django_capture_on_commit_callbacks(execute=True):
        tasks.usage_collect.delay(gpu.cluster.pk)
    # 60 hours due at 48 per run: the task re-queued itself once and caught up.
    assert gateway.calls == 2
    assert UsageRecord.objects.count() >= 59


def _as_scraped_without_honor_labels(series: list[Series]) -> list[Series]:
    """What Prometheus stores behind the GPU operator's ServiceMonitor (honorLabels:
    false): the exporter's pod/namespace become exported_*, and pod/namespace name the
    dcgm-exporter pod that was scraped."""
    out = []
    for item in series:
        if "pod" not in item.labels:  # HAMi's series carry their own pod labels
            out.append(item)
            continue
        labels = {k: v for k, v in item.labels.items() if k not in ("pod", "namespace")}
        labels["exported_pod"] = item.labels["pod"]
        labels["exported_namespace"] = item.labels["namespace"]
        labels["pod"] = "nvidia-dcgm-exporter-x7k2p"
        labels["namespace"] = "gpu-operator"
        out.append(Series(item.metric, labels, list(item.samples)))
    return out


@pytest.fixture(scope="session")
def exported_labels_prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not available():
        pytest.skip("Debian's prometheus and promtool are not installed")
    series = _as_scraped_without_honor_labels(dcgm_series())
    with prometheus_serving(series, tmp_path_factory.mktemp("prometheus-exported")) as url:
        yield url


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
@pytest.mark.django_db
def test_exported_pod_labels_are_detected_per_cluster_and_reported(
    cast: Cast, gpu: GpuCluster, prometheus_url: str, exported_labels_prometheus_url: str
) -> None:
    gpu.cluster.prometheus_url = exported_labels_prometheus_url
    gpu.cluster.save()
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods()), now=NOW)
    rows = rows_by_key()
    # the same busy time as with plain pod/namespace labels
    assert rows[("uid-train-0", H10)].gpu_seconds_busy == Decimal("2700")
    assert rows[("uid-infer-0", H12)].gpu_seconds_busy == Decimal("1440")
    mark = CollectorWatermark.objects.get(cluster=gpu.cluster)
    assert mark.dcgm_pod_labels == "exported_pod/exported_namespace"
    health = client_for(cast.platform_admin).get("/api/v1/billing/collections/").json()
    assert health[0]["dcgm_pod_labels"] == "exported_pod/exported_namespace"
    assert "honorLabels: false" in health[0]["dcgm_pod_labels_note"]
    # another cluster whose Prometheus keeps the exporter's labels: detected on its own
    client = PrometheusClient(prometheus_url)
    assert detect_pod_labels(client, H11, H13) == ("pod", "namespace")
    assert detect_pod_labels(PrometheusClient(exported_labels_prometheus_url), H11, H13) == (
        "exported_pod",
        "exported_namespace",
    )


@pytest.fixture(scope="session")
def small_prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus that refuses (422) a query holding more than 125 samples at once:
    one hour's window of a series (120 samples) and the few result points of a one-hour
    query fit, the result points of two or three hours do not."""
    if not available():
        pytest.skip("Debian's prometheus and promtool are not installed")
    workdir = tmp_path_factory.mktemp("prometheus-small")
    with prometheus_serving(dcgm_series(), workdir, max_samples=125) as url:
        yield url


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
@pytest.mark.django_db
def test_a_window_too_large_for_prometheus_is_split_and_collected_in_full(
    cast: Cast, gpu: GpuCluster, small_prometheus_url: str, prometheus_url: str
) -> None:
    with pytest.raises(PrometheusTooMuchData):  # the whole window at once is refused
        PrometheusClient(small_prometheus_url).query_range(engine_active_query(), H11, H13)
    gpu.cluster.prometheus_url = small_prometheus_url
    gpu.cluster.save()
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    result = usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods()), now=NOW)
    assert not result.without_busy_data and result.alert == ""
    rows = rows_by_key()
    assert [rows[("uid-train-0", h)].gpu_seconds_busy for h in (H10, H11, H12)] == [
        Decimal("2700"),
        Decimal("2700"),
        Decimal("1350"),
    ]


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
@pytest.mark.django_db
def test_an_hour_too_large_even_alone_is_written_without_busy_time_and_alerted(
    cast: Cast, gpu: GpuCluster, tmp_path: Any
) -> None:
    if not available():
        pytest.skip("Debian's prometheus and promtool are not installed")
    with prometheus_serving(dcgm_series(), tmp_path, max_samples=10) as url:
        gpu.cluster.prometheus_url = url
        gpu.cluster.save()
        CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
        result = usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods()), now=NOW)
    assert result.without_busy_data and result.inserted == 12
    assert not UsageRecord.objects.filter(gpu_seconds_busy__isnull=False).exists()
    mark = CollectorWatermark.objects.get(cluster=gpu.cluster)
    assert mark.collected_until == H13  # collection goes on
    assert "was not measured" in mark.last_error and "--query.max-samples" in mark.last_error
    health = client_for(cast.platform_admin).get("/api/v1/billing/collections/").json()
    assert "was not measured" in health[0]["last_error"]


def _kube_state_metrics() -> list[Series]:
    """kube-state-metrics for gone-0 (1 GPU on h100-1 from 10:00, Succeeded at 11:30,
    deleted at 11:45, so not in the live pod list) and for train-0 (in the list)."""
    gone = {"namespace": "vision-train", "pod": "gone-0", "uid": "uid-gone-0"}
    train = {"namespace": "vision-train", "pod": "train-0", "uid": "uid-train-0"}
    requests = {"container": "main", "node": "h100-1", "resource": "nvidia_com_gpu"}
    series = []
    for pod, end in ((gone, H11 + timedelta(minutes=30)), (train, H12 + timedelta(minutes=30))):
        series.append(
            Series(
                "kube_pod_container_resource_requests", pod | requests | {"unit": "integer"}
            ).every(H10, end + timedelta(minutes=15), 1, step_s=30)
        )
        running = Series("kube_pod_status_phase", pod | {"phase": "Running"})
        running.every(H10, end, 1, step_s=30)
        running.every(end, end + timedelta(minutes=15), 0, step_s=30)
        series.append(running)
    # gone-0 was a pod of Job train (its owner reference, kept by kube-state-metrics)
    owner = {"owner_kind": "Job", "owner_name": "train", "owner_is_controller": "true"}
    series.append(Series("kube_pod_owner", gone | owner).every(H10, H12, 1, step_s=30))
    return series


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
@pytest.mark.django_db
def test_a_pod_deleted_between_collections_is_billed_from_kube_state_metrics(
    cast: Cast, gpu: GpuCluster, tmp_path: Any
) -> None:
    if not available():
        pytest.skip("Debian's prometheus and promtool are not installed")
    with prometheus_serving(dcgm_series() + _kube_state_metrics(), tmp_path) as url:
        gpu.cluster.prometheus_url = url
        gpu.cluster.save()
        CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
        result = usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods()), now=NOW)
    rows = rows_by_key()
    gone = [rows[("uid-gone-0", h)] for h in (H10, H11)]
    assert all(r.tenant_id == cast.team_a.pk and r.flavour_id == gpu.h100.pk for r in gone)
    # known to the query step (60 s): 10:00-11:30 is 3600 s and 1800 s
    assert abs(gone[0].gpu_seconds_allocated - 3600) <= 120
    assert abs(gone[1].gpu_seconds_allocated - 1800) <= 120
    assert ("uid-gone-0", H12) not in rows
    assert all(r.job_name == "train" for r in gone)  # its Job, from kube_pod_owner
    # a pod in the live list is not counted twice
    train = [rows[("uid-train-0", h)].gpu_seconds_allocated for h in (H10, H11, H12)]
    assert train == [7200, 7200, 3600]
    assert result.problems == [] or all("kube-state" not in p for p in result.problems)


@pytest.mark.django_db
def test_only_what_a_team_holds_beyond_its_guarantee_in_an_hour_is_borrowed(
    cast: Cast, gpu: GpuCluster
) -> None:
    """Vision is guaranteed 4 H100s. A 4-GPU job admitted at 10:00 while vision's 2-GPU
    spot job still ran was admitted borrowing 2; the spot job ended at 10:30. In hour
    10 vision held 4 x 3600 + 2 x 1800 GPU-seconds: 1 GPU-hour over its guarantee,
    charged to the spot job (reclaimed first); hour 11 is all inside the guarantee."""
    spot = PriorityClass.objects.create(name="spot", value=0)
    prod = PriorityClass.objects.create(name="prod", value=100, preemptible=False)
    common: dict[str, Any] = {
        "cluster": gpu.cluster,
        "tenant": cast.team_a,
        "namespace": "vision-train",
        "pod_sets": [],
        "submitted_at": H10 - timedelta(hours=2),
        "flavour": gpu.h100,
        "state": Workload.State.FINISHED,
    }
    early = Workload.objects.create(
        **common,
        name="sweep",
        job_name="sweep",
        admitted_at=H10 - timedelta(hours=1),
        finished_at=H10 + timedelta(minutes=30),
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 2}],
        gpus=2,
        priority_class=spot,
    )
    big = Workload.objects.create(
        **common,
        name="train",
        job_name="train",
        admitted_at=H10,
        finished_at=H12,
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 4}],
        borrowed={"nvidia.com/gpu": 2},  # as admitted
        gpus=4,
        priority_class=prod,
    )
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    usage_collect(cluster=gpu.cluster, gateway=FakeGateway([]), now=NOW)
    rows = {
        (r.workload_id, r.interval_start): (r.gpu_seconds_allocated, r.gpu_seconds_borrowed)
        for r in UsageRecord.objects.all()
    }
    assert rows == {
        (early.pk, H10): (2 * 1800, 3600),
        (big.pk, H10): (4 * 3600, 0),
        (big.pk, H11): (4 * 3600, 0),
    }


@pytest.mark.django_db
def test_a_collection_that_would_hold_more_than_the_flavour_has_says_so(
    cast: Cast, gpu: GpuCluster
) -> None:
    """Per cluster, flavour and hour the ledger never holds more than capacity x 3600:
    the collector checks what it wrote and names an hour that breaks it."""
    from tests.billing.factories import record_usage

    # 8 H100s held all of hour 10 already (rows from another source, e.g. an import)
    record_usage(cast.team_b, gpu.h100, H10, devices=8, pod="imported")
    notebook = PodInfo(
        uid="uid-nb",
        name="nb",
        namespace="vision-dev",
        node_name="h100-1",
        phase="Succeeded",
        gpu_requests={"nvidia.com/gpu": 1},
        started_at=H10,
        finished_at=H11,
    )
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    result = usage_collect(cluster=gpu.cluster, gateway=FakeGateway([notebook]), now=NOW)
    breaches = [p for p in result.problems if "more than its capacity allows" in p]
    assert breaches == [
        "h100-80gb at 2026-03-10 10:00 UTC: the ledger holds 32400 device-seconds, more "
        "than its capacity allows (28800)"
    ]
