"""Every integrated kind through the queue against the local API server with the real
client, its objects checked by the kind's vendored CRD schema and its operator's
webhook rules: submitted suspended -> workload -> admitted (flavour injected, resumed)
-> preempted (suspended, templates restored) -> finished. A kind whose CRD is not
installed is skipped with a note; an object Tidegate cannot queue is refused with the
reason, on the workload and as an Event on the object."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_bridge.integrations import integration_for
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.jobs import jobs_sync
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.selectors import admitted_jobs
from tests.conftest import Cast
from tests.integrations import objects
from tests.kube_fake.schema import assert_valid_kubernetes
from tests.workloads.conftest import FakeCluster

pytestmark = pytest.mark.django_db

CRD_KINDS = ["JobSet", "PyTorchJob", "RayCluster", "RayJob"]


def install_all(fake: FakeCluster) -> None:
    for crd in objects.CRD_OF.values():
        fake.api.install_crd(crd)


def live(fake: FakeCluster, kind: str, namespace: str, name: str) -> dict[str, Any]:
    found = fake.api.get_object(kind, namespace, name)
    assert found is not None
    return found


def templates(kind: str, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(integration_for(kind).templates(obj))


def events_on(fake: FakeCluster, namespace: str, name: str) -> list[dict]:
    found = [e for e in fake.api.objects("Event", namespace) if e["involvedObject"]["name"] == name]
    return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))


@pytest.mark.parametrize("kind", CRD_KINDS)
def test_each_kind_is_queued_admitted_onto_its_flavour_and_finishes(
    fake_cluster: FakeCluster, cast: Cast, kind: str
) -> None:
    install_all(fake_cluster)
    written = fake_cluster.api.create_object(
        objects.eight_gpus(kind, "vision-train", "train", "vision")
    )
    synced = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    assert fake_cluster.cluster.workload_kinds[kind] == "queued"
    (workload,) = Workload.objects.filter(pk__in=synced.created)
    assert (workload.kind, workload.job_name, workload.job_uid) == (
        kind,
        "train",
        written["metadata"]["uid"],
    )
    assert sum(ps.gpus for ps in workload.pod_set_records) == 8

    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    assert workload.state == "running"
    running = live(fake_cluster, kind, "vision-train", "train")
    assert not integration_for(kind).is_suspended(running)
    for name, template in templates(kind, running).items():
        selector = template["spec"].get("nodeSelector") or {}
        assert selector.get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3", name
    [admitted] = events_on(fake_cluster, "vision-train", "train")
    assert admitted["involvedObject"]["kind"] == kind
    assert admitted["involvedObject"]["apiVersion"] == running["apiVersion"]
    assert_valid_kubernetes(admitted)
    # admitted once: another cycle and reconcile write nothing to it
    version = running["metadata"]["resourceVersion"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert live(fake_cluster, kind, "vision-train", "train")["metadata"]["resourceVersion"] == (
        version
    )

    if kind == "RayCluster":  # a Ray cluster runs until its owner deletes it
        fake_cluster.api.delete_object(kind, "vision-train", "train")
        ended = f"the {kind} was deleted"
    else:
        fake_cluster.api.edit_object(
            kind, "vision-train", "train", lambda o: o.update(status=objects.finished(kind))
        )
        ended = f"the {kind} completed"
    done = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    assert done.finished == [workload.pk]
    assert (workload.state, workload.reason) == ("finished", ended)


@pytest.mark.parametrize("kind", CRD_KINDS)
def test_preemption_suspends_each_kind_and_restores_its_templates(
    fake_cluster: FakeCluster, cast: Cast, kind: str
) -> None:
    install_all(fake_cluster)
    owner_written = objects.eight_gpus(kind, "speech-train", "big", "speech")
    fake_cluster.api.create_object(owner_written)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert not integration_for(kind).is_suspended(live(fake_cluster, kind, "speech-train", "big"))

    # vision reclaims its guarantee: the borrower's object is stopped
    fake_cluster.api.create_object(objects.batch_job("vision-train", "urgent", "vision", gpus=3))
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert len(outcome.preempted) == 1
    victim = live(fake_cluster, kind, "speech-train", "big")
    assert integration_for(kind).is_suspended(victim)
    assert "tidegate.io/original-scheduling" not in (victim["metadata"].get("annotations") or {})
    wanted = templates(
        kind,
        fake_cluster.api.create_object(
            {**owner_written, "metadata": {**owner_written["metadata"], "name": "twin"}}
        ),
    )
    assert templates(kind, victim) == wanted  # as its owner wrote them
    reasons = [e["reason"] for e in events_on(fake_cluster, "speech-train", "big")]
    assert reasons[-1] == "Preempted"


def test_a_kind_whose_crd_is_missing_is_skipped_with_a_note(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    fake_cluster.api.install_crd(objects.CRD_OF["JobSet"])
    fake_cluster.api.create_object(objects.jobset("vision-train", "js", "vision"))
    result = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    assert len(result.created) == 1
    kinds = fake_cluster.cluster.workload_kinds
    assert kinds["Job"] == kinds["JobSet"] == "queued"
    assert kinds["PyTorchJob"] == (
        "skipped: the cluster does not serve pytorchjobs.kubeflow.org/v1 (its CRD is not installed)"
    )
    fake_cluster.cluster.refresh_from_db()
    assert fake_cluster.cluster.workload_kinds == kinds
    from tests.conftest import client_for

    shown = client_for(cast.member).get("/api/v1/clusters/").json()["results"]
    assert [c["workload_kinds"]["PyTorchJob"] for c in shown] == [kinds["PyTorchJob"]]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)  # reconciles only served kinds
    assert Workload.objects.get(kind="JobSet").state == "running"


@pytest.mark.parametrize(
    ("manifest", "reason"),
    [
        (
            objects.pytorchjob("vision-train", "cpu-only", "vision", gpus=0),
            "no pod of this PyTorchJob requests a GPU",
        ),
        (
            {
                **objects.jobset("vision-train", "shrinkable", "vision"),
                "metadata": objects.meta(
                    "vision-train", "shrinkable", "vision", {"tidegate.io/min-pods": "1"}
                ),
            },
            "a JobSet cannot change how many pods it runs",
        ),
        (
            objects.batch_job(
                "vision-train",
                "too-few",
                "vision",
                parallelism=2,
                annotations={"tidegate.io/min-pods": "4"},
            ),
            "asks for at least 4 of 2 pods",
        ),
        (
            {
                **objects.jobset("vision-train", "pinned", "vision"),
                "metadata": objects.meta(
                    "vision-train", "pinned", "vision", {"tidegate.io/topology": "node"}
                ),
            },
            "a JobSet cannot be pinned to nodes",
        ),
        (
            {
                **objects.raycluster("vision-train", "eager", "vision"),
                "spec": {
                    **objects.raycluster("vision-train", "eager", "vision")["spec"],
                    "suspend": False,
                },
            },
            "the RayCluster was created running; create it suspended",
        ),
    ],
    ids=["no-gpu", "min-pods-on-jobset", "min-above-count", "topology-on-jobset", "running"],
)
def test_objects_that_cannot_queue_are_refused_with_the_reason(
    fake_cluster: FakeCluster, cast: Cast, manifest: dict[str, Any], reason: str
) -> None:
    install_all(fake_cluster)
    fake_cluster.api.create_object(manifest)
    result = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    (refused,) = Workload.objects.filter(pk__in=result.rejected)
    assert refused.state == "rejected" and reason in refused.reason
    assert refused.gpus == 0 and refused.placements == []
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    name = manifest["metadata"]["name"]
    [event] = events_on(fake_cluster, "vision-train", name)
    assert (event["reason"], event["type"]) == ("QueueRejected", "Warning")
    assert event["involvedObject"]["kind"] == manifest["kind"]
    assert jobs_sync(fake_cluster.cluster, fake_cluster.gateway).rejected == []  # decided once


ELASTIC_POD_SET = {"PyTorchJob": "Worker", "RayCluster": "gpu", "Job": "main"}


def elastic_object(kind: str) -> dict[str, Any]:
    """8 pods of 1 GPU, at least 4, in the framework's own terms."""
    if kind == "PyTorchJob":
        return objects.pytorchjob(
            "speech-train", "elastic", "speech", workers=8, gpus=1, elastic=(4, 8)
        )
    if kind == "RayCluster":
        return objects.raycluster("speech-train", "elastic", "speech", workers=8, gpus=1, minimum=4)
    return objects.batch_job(
        "speech-train",
        "elastic",
        "speech",
        parallelism=8,
        gpus=1,
        annotations={"tidegate.io/min-pods": "4"},
    )


def pods_of(fake: FakeCluster, kind: str) -> int:
    """Pods the elastic pod set of the live object runs now."""
    obj = live(fake, kind, "speech-train", "elastic")
    return integration_for(kind).counts(obj)[ELASTIC_POD_SET[kind]]


@pytest.mark.parametrize("kind", list(ELASTIC_POD_SET))
def test_elastic_work_grows_into_idle_gpus_and_shrinks_from_8_to_4_when_the_owner_reclaims(
    fake_cluster: FakeCluster, cast: Cast, kind: str
) -> None:
    """A PyTorchJob with an elasticPolicy (its Worker replicas), a RayCluster worker
    group with minReplicas, a Job with tidegate.io/min-pods (its parallelism)."""
    from scheduler_bridge.quotas.models import Quota

    # vision is guaranteed 8 of its organisation's 12 H100 GPUs; speech (guaranteed 2)
    # borrows what vision leaves idle
    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(guaranteed=8)
    install_all(fake_cluster)
    fake_cluster.api.create_object(elastic_object(kind))
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="elastic")
    assert workload.elastic and workload.pod_set_records[0].min_count == 4

    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)  # the core: 4 workers
    workload.refresh_from_db()
    assert (workload.state, workload.gpus) == ("running", 4)
    assert pods_of(fake_cluster, kind) == 4

    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)  # idle GPUs: grow
    workload.refresh_from_db()
    assert outcome.resized == [workload.pk]
    assert (workload.gpus, len(workload.elastic_pod_records)) == (8, 4), workload.reason
    assert workload.reason == "running 8 of 8 pods: at its maximum"
    assert pods_of(fake_cluster, kind) == 8
    quota = fake_cluster.api.get_object("ResourceQuota", "speech-train", "tidegate-gpu")
    assert quota is not None and int(quota["spec"]["hard"]["requests.nvidia.com/gpu"]) >= 8
    settled = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert settled.resized == [] and settled.preempted == []  # no grow/shrink oscillation

    # vision asks for its guarantee: speech shrinks back to its core, nothing is preempted
    fake_cluster.api.create_object(
        objects.batch_job("vision-train", "owner", "vision", parallelism=2, gpus=4)
    )
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    reclaim = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    assert reclaim.preempted == [] and reclaim.resized == [workload.pk]
    assert (workload.state, workload.gpus, workload.elastic_pod_records) == ("running", 4, [])
    assert pods_of(fake_cluster, kind) == 4
    assert [run["ended_by"] for run in workload.past_runs] == ["shrunk"] * 4
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    owner = Workload.objects.get(job_name="owner")
    assert owner.state == "running"
    reasons = [e["reason"] for e in events_on(fake_cluster, "speech-train", "elastic")]
    assert reasons == ["Admitted", "Scaled", "Scaled"]
    scaled = live(fake_cluster, kind, "speech-train", "elastic")
    if kind == "Job":
        assert_valid_kubernetes(scaled)
    else:
        from tests.kube_fake import crds

        _, unknown, problems = crds.prepare(
            crds.load_crd(objects.CRD_OF[kind]), scaled, None, strict=True
        )
        assert unknown == [] and problems == []


@pytest.mark.parametrize("kind", ["Job", *CRD_KINDS])
def test_a_preemption_with_grace_is_announced_and_the_gpus_go_back_when_the_grace_ends(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict, kind: str
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    install_all(fake_cluster)
    manifest = objects.eight_gpus(kind, "speech-train", "big", "speech")
    manifest["metadata"]["annotations"] = {
        "tidegate.io/preemption-grace-seconds": "5000",  # the batch class caps it at 600
        "tidegate.io/checkpoint-interval-seconds": "1800",
    }
    fake_cluster.api.create_object(manifest)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    victim = Workload.objects.get(job_name="big")
    assert (victim.preemption_grace_s, victim.checkpoint_interval_s) == (5000, 1800)

    fake_cluster.api.create_object(objects.batch_job("vision-train", "owner", "vision", gpus=3))
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    before = timezone.now()
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    victim.refresh_from_db()
    assert outcome.preempted == [] and outcome.announced == [victim.pk]
    assert victim.state == "running" and victim.gpus == 8  # still holds its GPUs
    assert victim.preempt_at is not None
    grace = (victim.preempt_at - before).total_seconds()
    assert 590 <= grace <= 610
    running = live(fake_cluster, kind, "speech-train", "big")
    assert not integration_for(kind).is_suspended(running)
    stamp = victim.preempt_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert running["metadata"]["annotations"]["tidegate.io/preempt-at"] == stamp
    warned = events_on(fake_cluster, "speech-train", "big")[-1]
    assert (warned["reason"], warned["type"]) == ("Preempting", "Warning")
    assert stamp in warned["message"]
    owner = Workload.objects.get(job_name="owner")
    assert owner.state == "pending"  # waits for the GPUs being freed
    again = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert again.announced == [] and again.preempted == []  # announced once

    # the grace ends: the victim is preempted and its object suspended and restored
    Workload.objects.filter(pk=victim.pk).update(preempt_at=timezone.now() - timedelta(seconds=1))
    ended = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    victim.refresh_from_db()
    assert ended.preempted == [victim.pk]
    assert (victim.state, victim.preempt_at, victim.gpus) == ("pending", None, 0)
    stopped = live(fake_cluster, kind, "speech-train", "big")
    assert integration_for(kind).is_suspended(stopped)
    assert "tidegate.io/preempt-at" not in (stopped["metadata"].get("annotations") or {})
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(job_name="owner").state == "running"


def test_a_negative_grace_is_refused_on_the_object_and_in_the_api(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from tests.conftest import client_for

    manifest = objects.batch_job("vision-train", "hasty", "vision")
    manifest["metadata"]["annotations"] = {"tidegate.io/preemption-grace-seconds": "-30"}
    fake_cluster.api.create_object(manifest)
    result = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    (refused,) = Workload.objects.filter(pk__in=result.rejected)
    assert refused.reason == (
        "annotation tidegate.io/preemption-grace-seconds is '-30'; it must be a whole "
        "number of seconds, 0 or more"
    )
    body = {
        "cluster": "gpu-east",
        "tenant": "vision",
        "name": "api-hasty",
        "pod_sets": [{"count": 1, "gpus_per_pod": 1}],
        "preemption_grace_s": -30,
    }
    response = client_for(cast.member).post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 400 and "preemption_grace_s" in response.json()
    assert not Workload.objects.filter(name="api-hasty").exists()


def test_the_pods_an_operator_starts_count_once_as_the_workloads_holding(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """A PyTorchJob's pods, started by its operator, are the workload's own: neither the
    inventory nor the quota sync counts them a second time as GPUs used outside the
    queue, so what is left stays free for other work."""
    from scheduler_bridge.inventory.models import Node
    from scheduler_bridge.inventory.services import inventory_sync
    from tests.conftest import client_for

    install_all(fake_cluster)
    fake_cluster.api.create_object(
        objects.pytorchjob("speech-train", "ddp", "speech", workers=3, gpus=2)
    )
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="ddp")
    assert (workload.state, workload.gpus) == ("running", 8)
    owner = live(fake_cluster, "PyTorchJob", "speech-train", "ddp")
    for index, (role, node) in enumerate(
        [("master", "h100-1"), ("worker", "h100-1"), ("worker", "h100-1"), ("worker", "h100-1")]
    ):
        pod = fake_cluster.api.add_pod(
            "speech-train",
            f"ddp-{role}-{index}",
            requests={"nvidia.com/gpu": 2},
            node_name=node,
            labels={"training.kubeflow.org/job-name": "ddp"},
        )
        fake_cluster.api.edit_object(
            "Pod",
            "speech-train",
            pod["metadata"]["name"],
            lambda p: p["metadata"].update(
                ownerReferences=[
                    {
                        "apiVersion": "kubeflow.org/v1",
                        "kind": "PyTorchJob",
                        "name": "ddp",
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                    }
                ]
            ),
        )
    inventory_sync(fake_cluster.cluster, fake_cluster.gateway, admitted=admitted_jobs)
    assert Node.objects.get(cluster=fake_cluster.cluster, name="h100-1").busy_foreign == {}
    # GPUs are left free: vision's 4 (what its organisation has left) start at once
    body = {
        "cluster": "gpu-east",
        "tenant": "vision",
        "name": "next",
        "pod_sets": [{"count": 1, "gpus_per_pod": 4}],
    }
    assert (
        client_for(cast.member).post("/api/v1/workloads/", body, format="json").status_code == 201
    )
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    nxt = Workload.objects.get(name="next")
    assert nxt.state == "running", nxt.reason
