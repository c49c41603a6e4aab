"""A queue Job on the real control plane, end to end: applied as a user would, held by
Tidegate's webhook (called by the API server over TLS), synced, admitted, resumed; the Job
controller creates the pods, the scheduler binds them to the admitted nodes, KWOK runs
them; the finish is recorded and the ledger's rows come from those pods. And reclaim: a
borrower preempted for its owner, its pods deleted by the Job controller, admitted again
later with its template restored."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from billing.models import UsageRecord
from billing.usage.collection import usage_collect
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.jobs import jobs_sync
from scheduler_bridge.workloads.models import Workload
from tests.conftest import Cast

from .conftest import RealGpuCluster, job_manifest

pytestmark = pytest.mark.django_db


def _sync_and_admit(gpu: RealGpuCluster) -> None:
    jobs_sync(gpu.cluster, gpu.gateway)
    admission_cycle(gpu.cluster, gpu.gateway)


def test_a_job_applied_running_is_held_admitted_bound_to_its_nodes_and_metered(
    gpu_cluster: RealGpuCluster, cast: Cast, tidegate_webhook: str, priorities: Any
) -> None:
    real = gpu_cluster.real
    # a user applies a queue Job without suspend: the API server asks Tidegate's webhook
    manifest = job_manifest(
        "vision-train",
        "resnet",
        queue="vision",
        gpus=8,
        pods=2,
        suspend=None,
        annotations={"tidegate.io/topology": "domain"},
    )
    created = real.create_object(manifest)
    assert created["spec"]["suspend"] is True  # held by the webhook, before any pod exists
    assert real.pods_owned_by("Job", "vision-train", "resnet") == []

    _sync_and_admit(gpu_cluster)

    workload = Workload.objects.get(job_name="resnet")
    assert workload.state == Workload.State.RUNNING, workload.reason  # resumed
    admitted_nodes = {p["node"] for p in workload.placements}
    # a gang of two 8-GPU pods in one NVLink domain: both H100 nodes of fabric.1
    assert admitted_nodes == {"h100-1", "h100-2"}
    live = real.read("Job", "vision-train", "resnet")
    assert live["spec"]["suspend"] is False
    template = live["spec"]["template"]["spec"]
    assert template["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"

    # the Job controller makes the pods, the scheduler binds each to an admitted node
    pods = real.active_job_pods("vision-train", "resnet")
    assert len(pods) == 2
    assert {p["spec"]["nodeName"] for p in pods} == admitted_nodes
    real.wait_for(
        lambda: all(
            p["status"].get("phase") == "Running"
            for p in real.pods_owned_by("Job", "vision-train", "resnet")
        ),
        "KWOK to run the pods",
    )

    # the pods run a few seconds, finish; the Job controller completes the Job
    time.sleep(3)
    for pod in pods:
        real.finish_pod("vision-train", pod["metadata"]["name"])
    real.wait_for(
        lambda: (
            (real.read("Job", "vision-train", "resnet") or {}).get("status", {}).get("succeeded")
            == 2
        ),
        "the Job controller to count both pods succeeded",
    )
    jobs_sync(gpu_cluster.cluster, gpu_cluster.gateway)  # Tidegate records the finish
    workload.refresh_from_db()
    assert workload.state == Workload.State.FINISHED

    # the ledger's rows are those pods, as the cluster reports them
    finished = real.pods_owned_by("Job", "vision-train", "resnet")
    usage_collect(
        cluster=gpu_cluster.cluster,
        gateway=gpu_cluster.gateway,
        now=timezone.now() + timedelta(hours=2),
    )
    rows = UsageRecord.objects.filter(workload=workload, source=UsageRecord.Source.POD)
    assert {r.pod_uid for r in rows} == {p["metadata"]["uid"] for p in finished}
    assert {r.tenant_id for r in rows} == {cast.team_a.pk}
    assert {r.flavour_id for r in rows} == {gpu_cluster.h100.pk}
    for pod in finished:
        started = _stamp(pod["status"]["startTime"])
        ended = _stamp(pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"])
        held = sum(r.gpu_seconds_allocated for r in rows if r.pod_uid == pod["metadata"]["uid"])
        assert held == 8 * int((ended - started).total_seconds()) >= 8 * 3


def _stamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _cycle(gpu: RealGpuCluster) -> None:
    jobs_sync(gpu.cluster, gpu.gateway)
    admission_cycle(gpu.cluster, gpu.gateway)


def test_a_borrower_is_preempted_for_its_owner_and_admitted_again_later(
    gpu_cluster: RealGpuCluster, cast: Cast, priorities: Any
) -> None:
    """speech borrows all 16 H100s (4 its own); vision, owner of 8, submits 8: the borrower's
    Job is suspended after its grace, the Job controller deletes its pods, vision's pod
    starts on a freed GPU; when vision is done the borrower returns, its template restored
    and admitted anew (no 422), its startTime set again by Kubernetes."""
    real = gpu_cluster.real
    users_template = real.create_object(
        job_manifest(
            "speech-train",
            "big",
            queue="speech",
            gpus=8,
            pods=2,
            annotations={"tidegate.io/preemption-grace-seconds": "2"},
        )
    )["spec"]["template"]["spec"]
    _cycle(gpu_cluster)
    big = Workload.objects.get(job_name="big")
    assert big.state == Workload.State.RUNNING, big.reason
    first_pods = real.active_job_pods("speech-train", "big")
    first_start = real.wait_for(
        lambda: real.read("Job", "speech-train", "big")["status"].get("startTime"),
        "the Job controller to set startTime",
    )

    real.create_object(job_manifest("vision-train", "owner", queue="vision", gpus=8))
    _cycle(gpu_cluster)
    # within its grace the borrower keeps running, told when it will be stopped
    live = real.read("Job", "speech-train", "big")
    assert live["spec"]["suspend"] is False
    assert "tidegate.io/preempt-at" in live["metadata"]["annotations"]
    assert {p["metadata"]["uid"] for p in real.active_job_pods("speech-train", "big")} == {
        p["metadata"]["uid"] for p in first_pods
    }

    time.sleep(2.5)
    _cycle(gpu_cluster)
    live = real.read("Job", "speech-train", "big")
    assert live["spec"]["suspend"] is True
    assert real.active_job_pods("speech-train", "big") == []  # the Job controller stopped them
    # the placement Tidegate gave is gone from the template: the user's own again
    assert live["spec"]["template"]["spec"] == users_template
    big.refresh_from_db()
    assert big.state == Workload.State.PENDING and big.preemptions == 1

    # the owner starts on the GPUs the borrower freed
    for _ in range(3):
        _cycle(gpu_cluster)
        if Workload.objects.get(job_name="owner").state == Workload.State.RUNNING:
            break
    owner = Workload.objects.get(job_name="owner")
    assert owner.state == Workload.State.RUNNING, owner.reason
    (owner_pod,) = real.active_job_pods("vision-train", "owner")
    assert owner_pod["spec"]["nodeName"] in {p["spec"]["nodeName"] for p in first_pods}

    # the owner finishes; the borrower is admitted again and runs
    real.finish_pod("vision-train", owner_pod["metadata"]["name"])
    real.wait_for(
        lambda: real.read("Job", "vision-train", "owner")["status"].get("succeeded") == 1,
        "the owner's Job to complete",
    )
    for _ in range(3):
        _cycle(gpu_cluster)
        big.refresh_from_db()
        if big.state == Workload.State.RUNNING:
            break
    assert big.state == Workload.State.RUNNING, big.reason
    again = real.active_job_pods("speech-train", "big")
    assert len(again) == 2 and not {p["metadata"]["uid"] for p in again} & {
        p["metadata"]["uid"] for p in first_pods
    }
    second_start = real.wait_for(
        lambda: real.read("Job", "speech-train", "big")["status"].get("startTime"),
        "the resume to set startTime",
    )
    assert _stamp(second_start) > _stamp(first_start)


def test_an_owner_in_its_reclaim_wait_leaves_the_borrower_running_then_reclaims(
    gpu_cluster: RealGpuCluster, cast: Cast, priorities: Any, settings: Any
) -> None:
    """TIDEGATE_RECLAIM_WAIT_S on the real control plane: the owner's Job stays suspended
    and the borrower's pods keep running, untouched, while the owner waits for GPUs to
    free on their own; once its wait is over the borrower is told it will be preempted."""
    settings.TIDEGATE = {**settings.TIDEGATE, "RECLAIM_WAIT_S": 600.0}
    real = gpu_cluster.real
    real.create_object(
        job_manifest(
            "speech-train",
            "big",
            queue="speech",
            gpus=8,
            pods=2,
            annotations={"tidegate.io/preemption-grace-seconds": "2"},
        )
    )
    _cycle(gpu_cluster)
    assert Workload.objects.get(job_name="big").state == Workload.State.RUNNING
    first_pods = {p["metadata"]["uid"] for p in real.active_job_pods("speech-train", "big")}

    real.create_object(job_manifest("vision-train", "owner", queue="vision", gpus=8))
    _cycle(gpu_cluster)
    owner = Workload.objects.get(job_name="owner")
    assert owner.state == Workload.State.PENDING
    assert "it waits up to 10 min for GPUs to free" in owner.reason
    assert real.read("Job", "vision-train", "owner")["spec"]["suspend"] is True
    live = real.read("Job", "speech-train", "big")
    assert live["spec"]["suspend"] is False
    assert "tidegate.io/preempt-at" not in (live["metadata"].get("annotations") or {})
    assert {p["metadata"]["uid"] for p in real.active_job_pods("speech-train", "big")} == (
        first_pods
    )

    # the wait is over: the borrower is told when it will be stopped, as without a wait
    Workload.objects.filter(pk=owner.pk).update(
        submitted_at=timezone.now() - timedelta(seconds=601)
    )
    _cycle(gpu_cluster)
    live = real.read("Job", "speech-train", "big")
    assert "tidegate.io/preempt-at" in live["metadata"]["annotations"]
