"""Exact metering against a real Prometheus: a pod restarted under the same name, Jobs
with similar names, a preempted run and its rerun in one hour, a GPU series missing,
and MIG instances without profiling metrics."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.models import BillingPeriod, CollectorWatermark, Statement, UsageRecord
from billing.statements.periods import period_close
from billing.usage.collection import usage_collect
from scheduler_bridge.gateways.base import PodInfo
from scheduler_bridge.gateways.parsing import pod_info
from scheduler_bridge.workloads import lifecycle
from scheduler_bridge.workloads.models import Workload
from tests.billing.conftest import GpuCluster
from tests.billing.prometheus_server import Series, available, prometheus_serving
from tests.billing.test_collection import FakeGateway
from tests.conftest import Cast, client_for

DAY = datetime(2026, 3, 10, tzinfo=UTC)
H10, H11, H12 = (DAY + timedelta(hours=h) for h in (10, 11, 12))
NOW = H12 + timedelta(minutes=10)  # hours 10 and 11 are due
MIN = timedelta(minutes=1)
H100 = {"Hostname": "h100-1", "modelName": "NVIDIA H100 80GB HBM3", "container": "main"}
A100 = {"Hostname": "a100-1", "modelName": "NVIDIA A100-SXM4-40GB", "container": "main"}
ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def _series() -> list[Series]:
    worker = {"namespace": "vision-train", "pod": "worker-0"}
    return [
        # worker-0, first run 10:00-10:20 on GPU 0, fully busy; restarted under the same
        # name on GPU 1 at 10:30, 20 % busy.
        Series(ACTIVE, H100 | worker | {"gpu": "0", "UUID": "GPU-a0"}).every(
            H10, H10 + 20 * MIN, 1.0
        ),
        Series(ACTIVE, H100 | worker | {"gpu": "1", "UUID": "GPU-a1"}).every(
            H10 + 30 * MIN, H12, 0.2
        ),
        # a pod of Job train-2 (not of Job train), 90 % busy
        Series(
            ACTIVE, H100 | {"namespace": "vision-train", "pod": "train-2-x7k2p"} | {"gpu": "2"}
        ).every(H10, H12, 0.9),
        # pair-0 holds GPUs 3 and 4, but only GPU 3 reports: 60 % busy
        Series(
            ACTIVE,
            H100 | {"namespace": "speech-train", "pod": "pair-0", "gpu": "3", "UUID": "GPU-a3"},
        ).every(H10, H12, 0.6),
        # mig-nb uses MIG instance 3 (1g.5gb) of GPU-c0, profiling metrics off: only the
        # framebuffer series names the pod; the parent GPU's GPU_UTIL is 35 %.
        Series(
            "DCGM_FI_DEV_FB_USED",
            A100
            | {"namespace": "speech-train", "pod": "mig-nb", "gpu": "1", "UUID": "GPU-c0"}
            | {"GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": "3"},
        ).every(H10, H12, 2048),
        Series("DCGM_FI_DEV_GPU_UTIL", {"Hostname": "a100-1", "gpu": "1", "UUID": "GPU-c0"}).every(
            H10, H12, 35
        ),
    ]


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not available():
        pytest.skip("Debian's prometheus and promtool are not installed")
    with prometheus_serving(_series(), tmp_path_factory.mktemp("prometheus-exact")) as url:
        yield url


def _pod(uid: str, name: str, namespace: str, start: datetime, **kw: object) -> PodInfo:
    defaults: dict[str, object] = {
        "uid": uid,
        "name": name,
        "namespace": namespace,
        "node_name": "h100-1",
        "phase": "Running",
        "gpu_requests": {"nvidia.com/gpu": 1},
        "started_at": start,
    }
    return PodInfo(**(defaults | kw))  # type: ignore[arg-type]


def _collect(gpu: GpuCluster, url: str | None, pods: list[PodInfo]) -> None:
    gpu.cluster.prometheus_url = url or ""
    gpu.cluster.save()
    CollectorWatermark.objects.create(cluster=gpu.cluster, collected_until=H10)
    usage_collect(cluster=gpu.cluster, gateway=FakeGateway(pods), now=NOW)


def _row(pod_uid: str, hour: datetime) -> UsageRecord:
    return UsageRecord.objects.get(pod_uid=pod_uid, interval_start=hour)


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
@pytest.mark.django_db
def test_a_pod_restarted_under_the_same_name_is_counted_once_per_run(
    cast: Cast, gpu: GpuCluster, prometheus_url: str
) -> None:
    first = _pod(
        "uid-w1", "worker-0", "vision-train", H10, phase="Failed", finished_at=H10 + 20 * MIN
    )
    second = _pod("uid-w2", "worker-0", "vision-train", H10 + 30 * MIN)
    _collect(gpu, prometheus_url, [first, second])
    one, two = _row("uid-w1", H10), _row("uid-w2", H10)
    # Each run is charged for the time it held its GPU and busy for its own samples only:
    # the first 20 minutes fully busy, the second 30 minutes at 20 %.
    assert (one.gpu_seconds_allocated, one.gpu_seconds_busy) == (1200, Decimal("1200"))
    assert (two.gpu_seconds_allocated, two.gpu_seconds_busy) == (1800, Decimal("360"))
    # the next hour the name is no longer shared: the hourly reading applies
    assert _row("uid-w2", H11).gpu_seconds_busy == Decimal("720")
    assert not UsageRecord.objects.filter(pod_uid="uid-w1", interval_start=H11).exists()


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
@pytest.mark.django_db
def test_a_job_never_takes_the_activity_of_a_job_whose_name_starts_like_it(
    cast: Cast, gpu: GpuCluster, prometheus_url: str
) -> None:
    Workload.objects.create(
        cluster=gpu.cluster,
        tenant=cast.team_a,
        name="train",
        namespace="vision-train",
        job_name="train",
        pod_sets=[{"name": "main", "count": 1, "gpus_per_pod": 1, "flavours": ["h100-80gb"]}],
        submitted_at=H10 - timedelta(hours=1),
        admitted_at=H10,
        finished_at=H11,
        state=Workload.State.FINISHED,
        flavour=gpu.h100,
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 1}],
        gpus=1,
    )
    # train's pod is gone; train-2's pod is listed, its Job named by its owner reference
    other = pod_info(
        {
            "metadata": {
                "uid": "uid-t2",
                "name": "train-2-x7k2p",
                "namespace": "vision-train",
                "ownerReferences": [{"kind": "Job", "name": "train-2", "controller": True}],
            },
            "spec": {
                "nodeName": "h100-1",
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Running", "startTime": H10.isoformat()},
        }
    )
    assert other.job_name == "train-2"
    _collect(gpu, prometheus_url, [other])
    (train,) = UsageRecord.objects.filter(source="workload", interval_start=H10)
    assert train.job_name == "train" and train.gpu_seconds_allocated == 3600
    assert train.gpu_seconds_busy is None  # not measured, not train-2's 90 %
    assert _row("uid-t2", H10).gpu_seconds_busy == Decimal("3240")


@pytest.mark.django_db
def test_a_preempted_run_and_its_rerun_in_the_same_hour_are_both_counted(
    cast: Cast, gpu: GpuCluster
) -> None:
    """Admitted at 10:00 on 2 GPUs, preempted at 10:30 (its pod is gone); admitted
    again at 10:40 and its pod runs on 2 GPUs until 11:00."""
    workload = Workload.objects.create(
        cluster=gpu.cluster,
        tenant=cast.team_a,
        name="sweep",
        namespace="vision-train",
        job_name="sweep",
        pod_sets=[{"name": "main", "count": 1, "gpus_per_pod": 2, "flavours": ["h100-80gb"]}],
        submitted_at=H10 - timedelta(hours=1),
        admitted_at=H10,
        state=Workload.State.ADMITTED,
        flavour=gpu.h100,
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 2}],
        gpus=2,
    )
    lifecycle.preempt(workload, now=H10 + 30 * MIN, by="vision", message="reclaim")
    workload.save()
    Workload.objects.filter(pk=workload.pk).update(
        state=Workload.State.FINISHED,
        admitted_at=H10 + 40 * MIN,
        finished_at=H11,
        flavour=gpu.h100,
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 2}],
        gpus=2,
    )
    rerun = _pod(
        "uid-sweep-2",
        "sweep-abcde",
        "vision-train",
        H10 + 40 * MIN,
        phase="Succeeded",
        finished_at=H11,
        gpu_requests={"nvidia.com/gpu": 2},
        job_name="sweep",
    )
    _collect(gpu, None, [rerun])
    rows = UsageRecord.objects.filter(interval_start=H10).order_by("source")
    assert [(r.source, r.workload_id, r.gpu_seconds_allocated) for r in rows] == [
        ("pod", workload.pk, 2 * 1200),  # the rerun, from its pod
        ("workload", workload.pk, 2 * 1800),  # the preempted run, from its record
    ]
    assert UsageRecord.objects.filter(interval_start=H11).count() == 0


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
@pytest.mark.django_db
def test_a_two_gpu_pod_with_one_series_missing_is_flagged_partial_on_its_statement(
    cast: Cast, gpu: GpuCluster, prometheus_url: str
) -> None:
    pair = _pod("uid-pair", "pair-0", "speech-train", H10, gpu_requests={"nvidia.com/gpu": 2})
    whole = _pod("uid-w2", "worker-0", "vision-train", H10 + 30 * MIN)
    _collect(gpu, prometheus_url, [pair, whole])
    row = _row("uid-pair", H10)
    # The GPU that did not report is taken to be as busy as the one that did, not idle.
    assert row.busy_partial and row.gpu_seconds_busy == Decimal("4320")
    assert not _row("uid-w2", H10).busy_partial
    seen = client_for(cast.dept_admin).get(f"/api/v1/billing/usage/{row.pk}/").json()
    assert (seen["busy_partial"], seen["busy_estimated"]) == (True, False)
    assert client_for(cast.outsider).get(f"/api/v1/billing/usage/{row.pk}/").status_code == 404
    period_close(actor=cast.platform_admin, period=BillingPeriod.objects.get(name="2026-03"))
    speech = Statement.objects.get(tenant=cast.team_b, period__name="2026-03")
    assert speech.warnings == [
        "busy time partial for h100-80gb: 2 of 2 pod-hours had GPU series missing; "
        "their busy time is scaled from the GPUs that reported"
    ]
    vision = Statement.objects.get(tenant=cast.team_a, period__name="2026-03")
    assert not any("busy time" in warning for warning in vision.warnings)


@pytest.mark.prometheus
@pytest.mark.xdist_group("prometheus")
@pytest.mark.django_db
def test_a_mig_pod_without_profiling_metrics_gets_its_parent_gpus_activity_flagged_estimated(
    cast: Cast, gpu: GpuCluster, prometheus_url: str
) -> None:
    notebook = _pod(
        "uid-mig-nb",
        "mig-nb",
        "speech-train",
        H10,
        node_name="a100-1",
        gpu_requests={"nvidia.com/mig-1g.5gb": 1},
    )
    _collect(gpu, prometheus_url, [notebook])
    row = _row("uid-mig-nb", H10)
    assert row.flavour_id == gpu.mig_1g.pk
    assert row.busy_estimated and not row.busy_partial
    assert row.gpu_seconds_busy == Decimal("1260")  # 35 % of the instance-hour
    period_close(actor=cast.platform_admin, period=BillingPeriod.objects.get(name="2026-03"))
    speech = Statement.objects.get(tenant=cast.team_b, period__name="2026-03")
    assert speech.warnings == [
        "busy time estimated for a100-sxm4-40gb-mig-1g.5gb: 2 of 2 pod-hours are MIG "
        "instances without profiling metrics, taken as busy as their parent GPU"
    ]
