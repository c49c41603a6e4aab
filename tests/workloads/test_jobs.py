"""Kubernetes Jobs through the queue, against the local API server with the real client:
suspended Job -> workload -> admitted (node selector injected, unsuspended) -> done;
preemption suspends and restores; bad queue labels are refused, never crash the cycle."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connections

from scheduler_bridge import tasks
from scheduler_bridge.gateways.simulated_objects import job as job_manifest
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.jobs import jobs_sync
from scheduler_bridge.workloads.locks import held_sync_lock
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.selectors import admitted_jobs
from tenants.models import AuditEvent
from tests.concurrency import at_once
from tests.conftest import Cast
from tests.kube_fake.schema import assert_valid_kubernetes
from tests.workloads.conftest import FakeCluster

pytestmark = pytest.mark.django_db


def create_job(
    fake: FakeCluster, namespace: str, name: str, queue: str, gpus: int, **extra: Any
) -> dict:
    manifest = job_manifest(
        namespace,
        name,
        requests={"nvidia.com/gpu": gpus},
        labels={"tidegate.io/queue": queue},
        **extra,
    )
    manifest["apiVersion"] = "batch/v1"
    manifest["spec"]["template"]["spec"]["containers"][0]["image"] = "trainer:1"
    return fake.api.create_object(manifest)


def events_on(fake: FakeCluster, namespace: str, name: str) -> list[dict]:
    found = [e for e in fake.api.objects("Event", namespace) if e["involvedObject"]["name"] == name]
    return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))


def job(fake: FakeCluster, namespace: str, name: str) -> dict:
    found = fake.api.get_object("Job", namespace, name)
    assert found is not None
    return found


def test_a_suspended_job_is_admitted_onto_its_flavour_and_finishes(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    create_job(fake_cluster, "vision-train", "resnet", "vision", 4, parallelism=2)
    synced = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    assert len(synced.created) == 1
    workload = Workload.objects.get(pk=synced.created[0])
    assert (workload.source, workload.namespace, workload.job_name) == (
        "job",
        "vision-train",
        "resnet",
    )
    assert workload.pod_sets == [
        {"name": "main", "count": 2, "gpus_per_pod": 4, "flavours": ["h100-80gb"]}
    ]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    live = job(fake_cluster, "vision-train", "resnet")
    assert live["spec"]["suspend"] is False
    pod_spec = live["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert_valid_kubernetes(live)
    # The namespace's quota makes room for the admitted Job before it starts.
    quota = fake_cluster.api.get_object("ResourceQuota", "vision-train", "tidegate-gpu")
    assert quota is not None and int(quota["spec"]["hard"]["requests.nvidia.com/gpu"]) >= 8
    fake_cluster.api.run_job("vision-train", "resnet")
    fake_cluster.api.complete_job("vision-train", "resnet")
    done = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    assert done.finished == [workload.pk]
    assert workload.state == "finished" and workload.finished_at is not None


def test_admission_injects_the_tolerations_an_admin_set_and_no_others(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from scheduler_bridge.inventory.models import Flavour
    from scheduler_bridge.inventory.services import flavour_set_tolerations, inventory_sync

    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    for name in ("h100-1", "h100-2"):
        fake_cluster.api.edit_object(
            "Node",
            None,
            name,
            lambda n: n["spec"].update(
                taints=[gpu_taint, {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
            ),
        )
    inventory_sync(fake_cluster.cluster, fake_cluster.gateway, admitted=admitted_jobs)
    chosen = {
        "key": "nvidia.com/gpu",
        "operator": "Equal",
        "value": "present",
        "effect": "NoSchedule",
    }
    flavour_set_tolerations(
        actor=cast.platform_admin,
        flavour=Flavour.objects.get(pk=fake_cluster.h100.pk),
        tolerations=[chosen],
    )
    create_job(fake_cluster, "vision-train", "tainted", "vision", 1)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    spec = job(fake_cluster, "vision-train", "tainted")["spec"]["template"]["spec"]
    assert spec["tolerations"] == [chosen]


def test_preemption_suspends_the_job_and_restores_its_template(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    create_job(fake_cluster, "speech-train", "big", "speech", 8)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert job(fake_cluster, "speech-train", "big")["spec"]["suspend"] is False
    create_job(fake_cluster, "vision-train", "urgent", "vision", 6)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert len(outcome.preempted) == 1
    victim = job(fake_cluster, "speech-train", "big")
    assert victim["spec"]["suspend"] is True
    assert "nodeSelector" not in victim["spec"]["template"]["spec"]
    assert "tidegate.io/original-scheduling" not in (victim["metadata"].get("annotations") or {})
    assert Workload.objects.get(job_name="big").state == "pending"
    # `kubectl describe job` tells both owners what happened, and why
    [started, preempted] = events_on(fake_cluster, "speech-train", "big")
    assert (started["reason"], started["type"]) == ("Admitted", "Normal")
    assert started["message"].startswith("admitted by Tidegate onto h100-80gb (")
    assert (preempted["reason"], preempted["type"]) == ("Preempted", "Warning")
    assert preempted["message"].startswith("preempted: reclaim: vision needs its guaranteed")
    assert preempted["involvedObject"]["uid"] == victim["metadata"]["uid"]
    for event in (started, preempted):
        assert_valid_kubernetes(event)
    # the victim's GPUs are free once it is stopped: the owner starts in this same cycle
    assert job(fake_cluster, "vision-train", "urgent")["spec"]["suspend"] is False
    assert [e["reason"] for e in events_on(fake_cluster, "vision-train", "urgent")] == ["Admitted"]


def test_a_queue_label_naming_a_foreign_or_unknown_tenant_is_refused_with_a_reason(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    create_job(fake_cluster, "vision-train", "sneaky", "globex", 1)
    create_job(fake_cluster, "vision-train", "typo", "visoin", 1)
    create_job(fake_cluster, "vision-dev", "ok", "vision", 1)
    result = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    assert len(result.rejected) == 2 and len(result.created) == 1
    sneaky = Workload.objects.get(job_name="sneaky")
    assert sneaky.state == "rejected"
    assert sneaky.reason == "namespace vision-train belongs to vision, not globex"
    assert "unknown tenant 'visoin'" in Workload.objects.get(job_name="typo").reason
    assert AuditEvent.objects.filter(message__contains="not admitted").count() == 2
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)  # the cycle goes on
    assert job(fake_cluster, "vision-train", "sneaky")["spec"]["suspend"] is True
    assert job(fake_cluster, "vision-dev", "ok")["spec"]["suspend"] is False
    again = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    assert again.rejected == [] and again.created == []  # decided once
    [refused] = events_on(fake_cluster, "vision-train", "sneaky")
    assert (refused["reason"], refused["type"]) == ("QueueRejected", "Warning")
    assert refused["message"] == "namespace vision-train belongs to vision, not globex"
    assert_valid_kubernetes(refused)


def test_a_deleted_job_frees_its_capacity(fake_cluster: FakeCluster, cast: Cast) -> None:
    create_job(fake_cluster, "vision-train", "gone", "vision", 8)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    fake_cluster.api.delete_object("Job", "vision-train", "gone")
    result = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="gone")
    assert result.finished == [workload.pk] and workload.state == "finished"
    assert workload.reason == "the Job was deleted"


def test_a_job_the_cluster_refuses_to_start_stays_admitted_with_the_error_then_requeues(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from scheduler_bridge.workloads.reconcile import RECONCILE_START_ATTEMPTS, reconcile

    create_job(fake_cluster, "vision-train", "flaky", "vision", 2)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    fake_cluster.api.fail_next(
        1000, r"/apis/batch/v1/namespaces/vision-train/jobs/flaky", status=403, method="PATCH"
    )
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="flaky")
    assert workload.pk in outcome.apply_errors
    # the decision stands: admitted, holding its GPUs, with the error shown
    assert workload.state == "admitted" and workload.apply_attempts == 1
    assert workload.apply_error.startswith("not yet started: ")
    for _ in range(RECONCILE_START_ATTEMPTS - 1):
        reconcile(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    assert workload.state == "pending" and workload.reason_code == "apply_failed"
    assert workload.reason.startswith("could not start the Job: ")
    assert workload.admitted_at is None and workload.gpus == 0
    [not_started] = events_on(fake_cluster, "vision-train", "flaky")
    assert (not_started["reason"], not_started["type"]) == ("NotStarted", "Warning")
    assert job(fake_cluster, "vision-train", "flaky")["spec"]["suspend"] is True


def test_when_the_cluster_stops_answering_the_decision_stays_and_the_next_reconcile_starts_it(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from scheduler_bridge.gateways import ClusterUnreachable
    from scheduler_bridge.workloads.reconcile import reconcile

    create_job(fake_cluster, "vision-train", "stranded", "vision", 2)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    fake_cluster.api.fail_next(50, status=503)  # the reconcile after the decision fails
    with pytest.raises(ClusterUnreachable):
        admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    fake_cluster.api.clear_faults()
    workload = Workload.objects.get(job_name="stranded")
    assert workload.state == "admitted" and workload.admitted_at is not None
    assert job(fake_cluster, "vision-train", "stranded")["spec"]["suspend"] is True
    result = reconcile(fake_cluster.cluster, fake_cluster.gateway)
    assert result.started == [workload.pk]
    assert job(fake_cluster, "vision-train", "stranded")["spec"]["suspend"] is False
    workload.refresh_from_db()
    assert workload.state == "running" and workload.started_at is not None
    # nothing was admitted twice: one admission in its history, one Admitted Event
    admit(fake_cluster.cluster, fake_cluster.gateway)
    transitions = [
        (e.after or {})["transition"]
        for e in AuditEvent.objects.filter(object_id=str(workload.pk)).order_by("id")
    ]
    assert transitions == ["submit", "admit", "start"]
    assert [e["reason"] for e in events_on(fake_cluster, "vision-train", "stranded")] == [
        "Admitted"
    ]


def admit(cluster: Any, gateway: Any) -> None:
    admission_cycle(cluster, gateway)


def test_an_odd_annotation_never_stops_the_job_sync(fake_cluster: FakeCluster, cast: Cast) -> None:
    create_job(
        fake_cluster,
        "vision-train",
        "odd",
        "vision",
        1,
        annotations={"tidegate.io/max-run-time-seconds": "99999999999"},
    )
    create_job(fake_cluster, "vision-dev", "fine", "vision", 1)
    result = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    assert len(result.created) == 2
    assert Workload.objects.get(job_name="odd").max_run_time_s is None


def test_a_job_holds_the_pods_kubernetes_runs_at_once(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """parallelism 4 but 2 completions: the Job controller never runs more than 2 pods,
    so the workload asks for 2 x 1 GPU, and 2 pods start."""
    manifest = job_manifest(
        "vision-train",
        "short",
        requests={"nvidia.com/gpu": 1},
        parallelism=4,
        labels={"tidegate.io/queue": "vision"},
    )
    manifest["apiVersion"] = "batch/v1"
    manifest["spec"]["completions"] = 2
    fake_cluster.api.create_object(manifest)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="short")
    assert [(p.count, p.gpus_per_pod) for p in workload.pod_set_records] == [(2, 1)]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert len(fake_cluster.api.run_job("vision-train", "short")) == 2


def test_a_selector_contradicting_the_flavour_is_refused_not_overridden() -> None:
    from scheduler_bridge.gateways.manifests import admitted_job

    manifest = job_manifest(
        "team-a",
        "pinned",
        requests={"nvidia.com/gpu": 1},
        node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    )
    with pytest.raises(ValueError, match="contradicts the chosen flavour"):
        admitted_job(manifest, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, [])
    same = admitted_job(manifest, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, [])
    assert same["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"
    }


def test_a_mig_job_pinned_to_a_product_only_gets_that_products_slices(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    manifest = job_manifest(
        "vision-train",
        "mig-h100",
        requests={"nvidia.com/mig-1g.5gb": 1},
        labels={"tidegate.io/queue": "vision"},
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    )
    manifest["apiVersion"] = "batch/v1"
    fake_cluster.api.create_object(manifest)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="mig-h100")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    # the cluster's 1g.5gb slices are A100's: the H100-pinned Job is not put there
    assert workload.state not in Workload.ACTIVE_STATES
    assert job(fake_cluster, "vision-train", "mig-h100")["spec"]["suspend"] is True


def queued_and_run(
    fake: FakeCluster, namespace: str, name: str, queue: str, gpus: int, **extra: Any
) -> Workload:
    """A queue Job synced, admitted and its pods started; its workload."""
    create_job(fake, namespace, name, queue, gpus, **extra)
    jobs_sync(fake.cluster, fake.gateway)
    admission_cycle(fake.cluster, fake.gateway)
    fake.api.run_job(namespace, name)
    return Workload.objects.get(job_name=name)


def test_completed_pods_of_a_running_job_give_their_gpus_back(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    # vision is guaranteed 6 H100s; a 4-pod Job of 1 GPU each runs, then 2 pods finish
    workload = queued_and_run(fake_cluster, "vision-train", "sweep", "vision", 1, parallelism=4)
    assert (workload.state, workload.gpus) == ("running", 4)
    fake_cluster.api.complete_pods("vision-train", "sweep", 2)

    synced = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    assert synced.released == [workload.pk]
    assert (workload.state, workload.gpus, workload.released_pods) == ("running", 2, 2)
    assert sum(p.gpus for p in workload.placement_records) == 2
    assert workload.pod_set_records[0].count == 2  # a preempted Job runs only what is left
    part = workload.past_runs[-1]
    assert (part["ended_by"], part["gpus"]) == ("pods_completed", 2)
    assert [e["reason"] for e in workload.job_events][-1] == "PodsReleased"
    # nothing more to release on the next sync (idempotent)
    assert jobs_sync(fake_cluster.cluster, fake_cluster.gateway).released == []
    record = AuditEvent.objects.filter(object_id=str(workload.pk)).latest("id")
    assert (record.after or {}).get("transition") == "release"


def test_the_gpus_completed_pods_gave_back_admit_waiting_work(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    # Two nodes of 8 H100s: four 3-GPU pods leave 2 free on each, too few for a 4-GPU pod.
    queued_and_run(fake_cluster, "vision-train", "big", "vision", 3, parallelism=4)
    create_job(fake_cluster, "vision-dev", "probe", "vision", 4)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    waiting = Workload.objects.get(job_name="probe")
    assert waiting.state == "pending"
    fake_cluster.api.complete_pods("vision-train", "big", 2)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    waiting.refresh_from_db()
    assert waiting.state in ("admitted", "running"), waiting.reason


def test_a_queued_job_keeps_its_labels_and_annotations_for_cost_allocation(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    manifest = job_manifest(
        "vision-train",
        "labelled",
        requests={"nvidia.com/gpu": 1},
        labels={"tidegate.io/queue": "vision", "team": "cv"},
        annotations={
            "owner": "ada",
            "kubectl.kubernetes.io/last-applied-configuration": "{...}",
        },
    )
    manifest["apiVersion"] = "batch/v1"
    fake_cluster.api.create_object(manifest)
    synced = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(pk=synced.created[0])
    assert workload.labels == {"tidegate.io/queue": "vision", "team": "cv"}
    assert workload.annotations == {"owner": "ada"}


@pytest.mark.django_db(transaction=True)
def test_two_syncs_at_once_queue_each_job_once(fake_cluster: FakeCluster, cast: Cast) -> None:
    """The queue watch and the tick may ask for syncs of one cluster that two workers
    run at the same time: the sync lock makes the second find the first one's work."""
    for i in range(20):
        create_job(fake_cluster, "vision-train", f"burst-{i}", "vision", 1)
    results = at_once(lambda: jobs_sync(fake_cluster.cluster))
    assert sorted(len(r.created) for r in results) == [0, 20]
    assert Workload.objects.filter(job_name__startswith="burst-").count() == 20


@pytest.mark.django_db(transaction=True)
def test_a_sync_asked_for_while_another_runs_is_asked_again_rather_than_waited_for(
    fake_cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker never sits behind another's sync: it asks for the sync again (the outbox
    sends it after the task's shortest interval) and is free at once."""
    cluster_id = fake_cluster.cluster.pk
    holding, release = threading.Event(), threading.Event()

    def other_sync() -> None:
        with held_sync_lock(cluster_id):
            holding.set()
            release.wait(30)
        connections.close_all()

    asked: list[int] = []
    monkeypatch.setattr("scheduler_bridge.followups.queue_jobs_sync_now", asked.append)
    other = threading.Thread(target=other_sync)
    other.start()
    try:
        assert holding.wait(30)
        assert tasks.jobs_sync(cluster_id) == {"busy": 1}
        assert asked == [cluster_id]
    finally:
        release.set()
        other.join(30)
    assert tasks.jobs_sync(cluster_id) == {
        "created": 0,
        "rejected": 0,
        "finished": 0,
        "admitted": 0,
    }
