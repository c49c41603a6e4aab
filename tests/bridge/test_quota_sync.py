"""ResourceQuota sync: the rule, idempotency, drift repair, missing namespaces, faults.

The behaviour tests run on the local test server and on the real control plane (the
same nodes, namespaces and guarantees); the faults (500s, an API server that stops
answering) are injected into the local one."""

from __future__ import annotations

import pytest

from scheduler_bridge.gateways import ClusterUnreachable
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.quotas.resource_quota import TenantNamespaces, desired_hard_limits
from scheduler_bridge.quotas.sync import quota_sync
from scheduler_bridge.workloads.selectors import admitted_jobs, queue_holdings
from tenants.models import AuditEvent, NamespaceBinding
from tests.bridge.conftest import FakeCluster, Synced
from tests.conftest import Cast
from tests.kube_fake.schema import assert_valid_kubernetes

pytestmark = pytest.mark.django_db


def hard(api: object, namespace: str) -> dict[str, str]:
    quota = api.get_object("ResourceQuota", namespace, "tidegate-gpu")  # type: ignore[attr-defined]
    assert quota is not None, f"no quota in {namespace}"
    return dict(quota["spec"]["hard"])


def test_a_tenants_namespaces_share_its_guarantee_and_add_up_to_it(synced: Synced) -> None:
    result = quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    assert (result.created, result.namespaces) == (4, 4)
    api = synced.api
    # vision: 6 H100 and 14 1g.5gb over two namespaces, first in name order takes the rest
    assert hard(api, "vision-dev") == {
        "requests.nvidia.com/gpu": "3",
        "requests.nvidia.com/mig-1g.5gb": "7",
    }
    assert hard(api, "vision-train") == {
        "requests.nvidia.com/gpu": "3",
        "requests.nvidia.com/mig-1g.5gb": "7",
    }
    # speech has no MIG guarantee: 0, so pods cannot take MIG slices outside the queue
    assert hard(api, "speech-train") == {
        "requests.nvidia.com/gpu": "2",
        "requests.nvidia.com/mig-1g.5gb": "0",
    }
    for namespace in ("vision-dev", "speech-train", "globex-train"):
        quota = api.get_object("ResourceQuota", namespace, "tidegate-gpu")
        assert quota is not None
        assert quota["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tidegate"
        assert_valid_kubernetes(quota)


def test_usage_stays_within_the_namespace_that_has_it() -> None:
    tenants = [TenantNamespaces("vision", ("a", "b", "c"), {"nvidia.com/gpu": 9})]
    used = {"b": {"nvidia.com/gpu": 5}}
    limits = desired_hard_limits(tenants, used, ["nvidia.com/gpu"])
    values = {ns: int(h["requests.nvidia.com/gpu"]) for ns, h in limits.items()}
    assert values == {"a": 2, "b": 6, "c": 1}
    assert sum(values.values()) == 9  # headroom 4 split 2/1/1, a first in name order
    over = desired_hard_limits(tenants, {"a": {"nvidia.com/gpu": 10}}, ["nvidia.com/gpu"])
    assert {ns: h["requests.nvidia.com/gpu"] for ns, h in over.items()} == {
        "a": "10",
        "b": "0",
        "c": "0",
    }


def _gpus(limits: dict[str, dict[str, str]]) -> dict[str, int]:
    return {ns: int(h["requests.nvidia.com/gpu"]) for ns, h in limits.items()}


def test_limits_in_the_cluster_are_kept_while_they_still_hold() -> None:
    tenants = [TenantNamespaces("vision", ("a", "b", "c"), {"nvidia.com/gpu": 30})]
    now = {"a": {"requests.nvidia.com/gpu": "10"}, "b": {"requests.nvidia.com/gpu": "10"}}
    now["c"] = {"requests.nvidia.com/gpu": "10"}
    # a starts 4 pods and b 2 (inside their limits), c finishes none: nothing moves
    used = {"a": {"nvidia.com/gpu": 4}, "b": {"nvidia.com/gpu": 2}}
    assert _gpus(desired_hard_limits(tenants, used, ["nvidia.com/gpu"], now)) == {
        "a": 10,
        "b": 10,
        "c": 10,
    }
    # without the cluster's limits the headroom of 24 is split evenly again
    assert _gpus(desired_hard_limits(tenants, used, ["nvidia.com/gpu"])) == {
        "a": 12,
        "b": 10,
        "c": 8,
    }


def test_limits_are_split_anew_once_a_bound_breaks() -> None:
    tenants = [TenantNamespaces("vision", ("a", "b", "c"), {"nvidia.com/gpu": 30})]
    now = {ns: {"requests.nvidia.com/gpu": "10"} for ns in ("a", "b", "c")}
    resources = ["nvidia.com/gpu"]
    # a has 2 of its 10 left, under half of the even share of 17 // 3 = 5 (rounded up: 3)
    low = {"a": {"nvidia.com/gpu": 8}, "b": {"nvidia.com/gpu": 5}}
    assert _gpus(desired_hard_limits(tenants, low, resources, now)) == {"a": 14, "b": 11, "c": 5}
    # with 3 left it would have kept its limit
    enough = {"a": {"nvidia.com/gpu": 7}, "b": {"nvidia.com/gpu": 5}}
    assert _gpus(desired_hard_limits(tenants, enough, resources, now)) == {
        "a": 10,
        "b": 10,
        "c": 10,
    }
    # the guarantee grew to 33: the limits no longer add up to it
    grown = [TenantNamespaces("vision", ("a", "b", "c"), {"nvidia.com/gpu": 33})]
    assert sum(_gpus(desired_hard_limits(grown, {}, resources, now)).values()) == 33
    # a namespace bound since (no quota yet), or a limit written by hand as "1k"
    more = [TenantNamespaces("vision", ("a", "b", "c", "d"), {"nvidia.com/gpu": 30})]
    assert _gpus(desired_hard_limits(more, {}, resources, now)) == {"a": 8, "b": 8, "c": 7, "d": 7}
    odd = {**now, "c": {"requests.nvidia.com/gpu": "1k"}}
    assert _gpus(desired_hard_limits(tenants, {}, resources, odd)) == {"a": 10, "b": 10, "c": 10}
    assert desired_hard_limits(tenants, {}, resources, odd)["c"] == {
        "requests.nvidia.com/gpu": "10"
    }
    # over the ceiling (it was cut to 12 while 15 run): each namespace exactly its use
    cut = [TenantNamespaces("vision", ("a", "b", "c"), {"nvidia.com/gpu": 12})]
    busy = {"a": {"nvidia.com/gpu": 9}, "b": {"nvidia.com/gpu": 6}}
    assert _gpus(desired_hard_limits(cut, busy, resources, now)) == {"a": 9, "b": 6, "c": 0}


def test_pods_coming_and_going_inside_the_limits_cost_no_quota_write(synced: Synced) -> None:
    quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    api = synced.api
    before = {ns: hard(api, ns) for ns in ("vision-dev", "vision-train")}
    synced.run_pod("vision-dev", "notebook", "h100-1")
    writes = synced.writes()
    result = quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    assert (result.writes, result.unchanged) == (0, 4)
    assert synced.writes() == writes
    assert {ns: hard(api, ns) for ns in ("vision-dev", "vision-train")} == before
    # vision-dev's last GPU is taken: the tenant's headroom is split anew
    for name in ("notebook-2", "notebook-3"):
        synced.run_pod("vision-dev", name, "h100-1")
    result = quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    assert result.updated == 2
    assert hard(api, "vision-dev")["requests.nvidia.com/gpu"] == "5"
    assert hard(api, "vision-train")["requests.nvidia.com/gpu"] == "1"


def test_a_second_sync_with_nothing_changed_writes_nothing(synced: Synced) -> None:
    quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    writes = synced.writes()
    assert writes >= 4  # the quotas created (the count can fail)
    result = quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    assert (result.writes, result.unchanged) == (0, 4)
    assert synced.writes() == writes


def test_hand_edits_and_deletions_are_restored_and_recorded(synced: Synced) -> None:
    quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    api = synced.api

    def raise_limit(obj: dict) -> None:
        obj["spec"]["hard"]["requests.nvidia.com/gpu"] = "64"

    api.edit_object("ResourceQuota", "vision-dev", "tidegate-gpu", raise_limit)
    api.delete_object("ResourceQuota", "speech-train", "tidegate-gpu")
    result = quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    assert result.drift_repaired == 2
    assert hard(api, "vision-dev")["requests.nvidia.com/gpu"] == "3"
    assert hard(api, "speech-train")["requests.nvidia.com/gpu"] == "2"
    messages = list(
        AuditEvent.objects.filter(source="system", action="action").values_list(
            "message", flat=True
        )
    )
    assert len(messages) == 2
    assert any("vision-dev/tidegate-gpu" in m and "64" in m for m in messages)
    assert any("speech-train/tidegate-gpu" in m for m in messages)


def test_a_missing_namespace_marks_its_binding_and_the_run_goes_on(
    fake_cluster: FakeCluster,
) -> None:
    fake_cluster.api.delete_object("Namespace", None, "speech-train")
    result = quota_sync(
        fake_cluster.cluster, fake_cluster.gateway, queue=queue_holdings(fake_cluster.cluster)
    )
    assert result.missing == ["speech-train"]
    assert result.created == 3
    binding = NamespaceBinding.objects.get(namespace="speech-train")
    assert binding.sync_state == "namespace_missing"
    assert "does not exist" in binding.sync_message


def test_server_errors_are_retried_until_the_write_lands(fake_cluster: FakeCluster) -> None:
    fake_cluster.api.fail_next(2, status=500, method="PATCH")
    result = quota_sync(
        fake_cluster.cluster, fake_cluster.gateway, queue=queue_holdings(fake_cluster.cluster)
    )
    assert result.created == 4 and not result.errors


def test_an_unreachable_cluster_fails_the_run_for_a_later_retry(fake_cluster: FakeCluster) -> None:
    fake_cluster.api.fail_next(50, status=503)
    with pytest.raises(ClusterUnreachable):
        quota_sync(
            fake_cluster.cluster, fake_cluster.gateway, queue=queue_holdings(fake_cluster.cluster)
        )


def test_unbinding_a_namespace_deletes_tidegates_quota_there(
    synced: Synced, cast: object, django_capture_on_commit_callbacks: object
) -> None:
    from tenants.services import binding_delete

    quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    # someone else's quota in the namespace is not Tidegate's to delete
    synced.create(
        {
            "kind": "ResourceQuota",
            "metadata": {"name": "team-cpu", "namespace": "speech-train"},
            "spec": {"hard": {"requests.cpu": "64"}},
        }
    )
    binding = NamespaceBinding.objects.get(namespace="speech-train")
    with django_capture_on_commit_callbacks() as queued:  # type: ignore[operator]
        binding_delete(actor=cast.platform_admin, binding=binding)  # type: ignore[attr-defined]
    assert queued, "unbinding queues a quota sync of the cluster"

    result = quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))

    assert result.removed == ["speech-train"]
    api = synced.api
    assert api.get_object("ResourceQuota", "speech-train", "tidegate-gpu") is None
    assert api.get_object("ResourceQuota", "speech-train", "team-cpu") is not None
    assert api.get_object("ResourceQuota", "vision-dev", "tidegate-gpu") is not None
    assert AuditEvent.objects.filter(message__contains="no longer bound").count() == 1
    assert (
        quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster)).removed
        == []
    )


def test_every_bindings_outcome_is_written_with_one_statement_per_outcome(
    synced: Synced,
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    table = NamespaceBinding._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        result = quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    assert result.unchanged == 4
    updates = [q for q in queries if q["sql"].startswith(f'UPDATE "{table}"')]
    assert len(updates) == 1
    assert set(NamespaceBinding.objects.values_list("sync_state", "sync_message")) == {
        ("ok", "quota unchanged")
    }


def test_a_cluster_that_stops_answering_mid_sync_leaves_only_true_outcomes(
    fake_cluster: FakeCluster,
) -> None:
    api = fake_cluster.api
    api.after_request(lambda a: a.fail_next(500, status=503), r"/resourcequotas/", method="PATCH")
    with pytest.raises(ClusterUnreachable):
        quota_sync(
            fake_cluster.cluster, fake_cluster.gateway, queue=queue_holdings(fake_cluster.cluster)
        )
    for binding in NamespaceBinding.objects.all():
        applied = api.get_object("ResourceQuota", binding.namespace, "tidegate-gpu") is not None
        # a binding says "ok" exactly when its quota is in the cluster
        assert (binding.sync_state == "ok") == applied, binding.namespace
    assert NamespaceBinding.objects.filter(sync_state="ok").count() >= 1


def test_the_audit_trail_says_quota_events_in_the_readers_language(
    fake_cluster: FakeCluster, cast: object
) -> None:
    """Chinese readers read "vision asks 6 h100-80gb (approved)", "quota request:
    approved" and "ResourceQuota ... was deleted outside Tidegate" in English before."""
    from scheduler_bridge.quotas.services import quota_request_approve, quota_request_create
    from tests.tenants.test_portal import logged_in

    request = quota_request_create(
        actor=cast.lead,  # type: ignore[attr-defined]
        tenant=cast.team_a,  # type: ignore[attr-defined]
        flavour=fake_cluster.h100,
        guaranteed=7,
        justification="more",
    )
    quota_request_approve(actor=cast.dept_admin, request=request)  # type: ignore[attr-defined]
    quota_sync(
        fake_cluster.cluster, fake_cluster.gateway, queue=queue_holdings(fake_cluster.cluster)
    )
    fake_cluster.api.delete_object("ResourceQuota", "speech-train", "tidegate-gpu")
    quota_sync(
        fake_cluster.cluster, fake_cluster.gateway, queue=queue_holdings(fake_cluster.cluster)
    )

    page = logged_in(cast.platform_admin).get(  # type: ignore[attr-defined]
        "/audit/", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    text = page.content.decode()
    assert "vision 申请 7 个 h100-80gb（已批准）" in text
    assert "配额申请：已批准" in text
    assert "在 Tidegate 之外被删除；已重新创建" in text
    for english in (" asks ", "quota request approved", "was deleted outside Tidegate"):
        assert english not in text, english


def test_a_device_class_of_gpus_gets_its_key_with_the_guarantee_of_its_flavours(
    synced: Synced,
) -> None:
    """h100-1 offers its H100s both as nvidia.com/gpu and through DRA, dra-only through
    DRA alone: the H100 guarantees stand under both keys (docs/dra.md#enforcement); a
    class that admits no published device (MIG here) gets no key."""
    import copy

    from scheduler_bridge.dra.demand import device_class_quota_key
    from tests.dra.devices import GPU_CLASS, H100, MIG_CLASS, gpu, node_slice
    from tests.kube_real.cluster import RealCluster

    api = synced.api
    if isinstance(api, RealCluster):
        api.register_kind("ResourceSlice", "resource.k8s.io/v1", "resourceslices", False)
        api.register_kind("DeviceClass", "resource.k8s.io/v1", "deviceclasses", False)
    api.add_node("dra-only", labels={}, allocatable={"cpu": "8"})
    gpu_class = copy.deepcopy(GPU_CLASS)
    gpu_class["spec"].pop("extendedResourceName")
    published = [
        node_slice("h100-1", [gpu(i, H100, "80Gi") for i in range(8)]),
        node_slice("dra-only", [gpu(i, H100, "80Gi") for i in range(2)]),
        gpu_class,
        MIG_CLASS,
    ]
    for obj in published:
        api.create_object(obj)
    try:
        inventory_sync(synced.cluster, synced.gateway, admitted=admitted_jobs)
        quota_sync(synced.cluster, synced.gateway, queue=queue_holdings(synced.cluster))
    finally:
        for obj in published:
            api.delete_object(obj["kind"], None, obj["metadata"]["name"])
    key = device_class_quota_key("gpu.nvidia.com")
    limits = {ns: hard(api, ns) for ns in ("vision-dev", "vision-train", "speech-train")}
    assert {ns: h.get(key) for ns, h in limits.items()} == {
        "vision-dev": "3",
        "vision-train": "3",
        "speech-train": "2",
    }
    assert {ns: h["requests.nvidia.com/gpu"] for ns, h in limits.items()} == {
        "vision-dev": "3",
        "vision-train": "3",
        "speech-train": "2",
    }
    assert not any(device_class_quota_key("mig.nvidia.com") in h for h in limits.values())


def test_a_queued_jobs_claims_count_once_before_the_scheduler_allocates_them(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """Kubernetes counts the claims of an admitted Job's pods as soon as they exist;
    Tidegate counts the Job at its full size from admission. Before the scheduler
    allocates them the pod holds no GPU, yet its claims are the Job's: counted once.
    A claim made by hand beside it counts on its own."""
    from django.utils import timezone

    from scheduler_bridge.dra.demand import device_class_quota_key
    from scheduler_bridge.quotas.sync import used_by_namespace
    from scheduler_bridge.workloads.models import Workload
    from tests.dra.devices import H100, gpu, node_slice
    from tests.factories import WorkloadFactory

    api, cluster = fake_cluster.api, fake_cluster.cluster
    api.add_node("dra-only", labels={}, allocatable={"cpu": "8"})
    api.create_object(node_slice("dra-only", [gpu(i, H100, "80Gi") for i in range(4)]))
    inventory_sync(cluster, fake_cluster.gateway, admitted=admitted_jobs)
    WorkloadFactory(
        cluster=cluster,
        tenant=cast.team_a,
        source=Workload.Source.JOB,
        namespace="vision-train",
        job_name="train",
        state=Workload.State.RUNNING,
        admitted_at=timezone.now(),
        flavour=fake_cluster.h100,
        gpus=4,
        pod_sets=[
            {
                "name": "main",
                "count": 2,
                "gpus_per_pod": 2,
                "flavours": ["h100-80gb"],
                "claim_devices": {"gpu.nvidia.com": 2},
            }
        ],
    )
    requests = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]
    for index in range(2):  # the Job's pods, their claims made, not yet allocated
        name = f"train-{index}"
        api.add_pod("vision-train", name, phase="Pending", labels={"job-name": "train"})
        api.edit_object(
            "Pod",
            "vision-train",
            name,
            lambda p: p["spec"].update(
                resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "two"}]
            ),
        )
        made = api.get_object("Pod", "vision-train", name)
        assert made is not None
        uid = made["metadata"]["uid"]
        api.create_object(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": f"{name}-gpus",
                    "namespace": "vision-train",
                    "ownerReferences": [{"kind": "Pod", "name": name, "uid": uid}],
                },
                "spec": {"devices": {"requests": requests}},
            }
        )
    api.create_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "by-hand", "namespace": "vision-train"},
            "spec": {"devices": {"requests": requests}},
        }
    )
    used = used_by_namespace(cluster, fake_cluster.gateway, queue_holdings(cluster))
    # the Job's 2 pods x 2 devices, and the hand-made claim's 2; no extended resource
    assert used["vision-train"] == {device_class_quota_key("gpu.nvidia.com"): 6}
