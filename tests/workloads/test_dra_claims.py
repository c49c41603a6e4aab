"""A queued Job whose pods ask through claims Tidegate cannot resolve is refused with the
reason, in the reader's language; nothing of it starts. (The real control plane runs the
claims that resolve: tests/real_cluster/test_dra.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import translation

from scheduler_bridge.templatetags.tidegate import reason
from scheduler_bridge.workloads.jobs import jobs_sync
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.selectors import admitted_jobs
from tests.bridge.conftest import FakeCluster

pytestmark = pytest.mark.django_db


def _claiming_job(fake: FakeCluster, name: str, entry: dict[str, str]) -> None:
    from scheduler_bridge.gateways.simulated_objects import job as job_manifest

    manifest = job_manifest(
        "vision-train", name, requests={}, labels={"tidegate.io/queue": "vision"}
    )
    manifest["apiVersion"] = "batch/v1"
    spec: dict[str, Any] = manifest["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpus", **entry}]
    spec["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    fake.api.create_object(manifest)


@pytest.mark.parametrize(
    ("entry", "says", "in_chinese"),
    [
        (
            {"resourceClaimTemplateName": "missing"},
            "ResourceClaimTemplate missing does not exist in namespace vision-train",
            "命名空间 vision-train 中不存在 ResourceClaimTemplate missing",
        ),
        (
            {"resourceClaimName": "team-gpus"},
            "ResourceClaim team-gpus does not exist in namespace vision-train",
            "命名空间 vision-train 中不存在 ResourceClaim team-gpus",
        ),
    ],
)
def test_a_job_whose_claims_do_not_exist_is_refused_with_what_to_create(
    fake_cluster: FakeCluster, entry: dict[str, str], says: str, in_chinese: str
) -> None:
    _claiming_job(fake_cluster, "claims", entry)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="claims")
    assert workload.state == Workload.State.REJECTED
    assert says in workload.reason and "create it, then the workload again" in workload.reason
    with translation.override("zh-hans"):
        said = reason(workload)
    assert in_chinese in said, said
    live = fake_cluster.api.get_object("Job", "vision-train", "claims")
    assert live is not None and live["spec"]["suspend"] is True


def test_a_share_of_a_gpu_is_refused_on_a_flavour_not_shared_through_dra(
    fake_cluster: FakeCluster,
) -> None:
    """The driver publishes the A100 for several claims, but its flavour is not shared
    through DRA (an administrator said otherwise): a claim taking part of it is refused
    with what to change, in the reader's language."""
    import copy

    from scheduler_bridge.inventory.models import Flavour
    from scheduler_bridge.inventory.services import inventory_sync
    from tests.dra.devices import A100, GPU_CLASS, gpu, node_slice

    api = fake_cluster.api
    api.add_node("dra-shared", labels={}, allocatable={"cpu": "8"})
    gpu_class = copy.deepcopy(GPU_CLASS)
    gpu_class["spec"].pop("extendedResourceName")
    api.create_object(gpu_class)
    api.create_object(node_slice("dra-shared", [gpu(0, A100, "80Gi", shared=True)]))
    inventory_sync(fake_cluster.cluster, fake_cluster.gateway, admitted=admitted_jobs)
    a100 = Flavour.objects.get(cluster=fake_cluster.cluster, name="a100-sxm4-80gb")
    assert a100.sharing == Flavour.Sharing.DRA  # as the driver publishes it
    Flavour.objects.filter(pk=a100.pk).update(sharing=Flavour.Sharing.HAMI)
    api.create_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "quarter", "namespace": "vision-train"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": "gpu.nvidia.com",
                                    "capacity": {"requests": {"memory": "20Gi"}},
                                },
                            }
                        ]
                    }
                }
            },
        }
    )
    _claiming_job(fake_cluster, "quarter", {"resourceClaimTemplateName": "quarter"})
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="quarter")
    assert workload.state == Workload.State.REJECTED
    assert "a100-sxm4-80gb is not shared through DRA (its sharing is hami)" in workload.reason
    assert "set its sharing to 'dra'" in workload.reason
    with translation.override("zh-hans"):
        said = reason(workload)
    assert "a100-sxm4-80gb 并未通过 DRA 共享" in said, said


def test_whole_gpus_or_else_a_share_is_refused_where_a_flavours_sharing_says_otherwise(
    fake_cluster: FakeCluster,
) -> None:
    """ "Two whole H100s, or else 20Gi of an A100" counts each alternative in its own
    unit; when an administrator made the A100's flavour other than shared through DRA,
    its thousandths would be read as GPUs: refused with what to change instead."""
    import copy

    from scheduler_bridge.inventory.models import Flavour
    from scheduler_bridge.inventory.services import inventory_sync
    from tests.dra.devices import A100, GPU_CLASS, H100, gpu, node_slice

    api = fake_cluster.api
    api.add_node("dra-shared", labels={}, allocatable={"cpu": "8"})
    api.add_node("dra-h100", labels={}, allocatable={"cpu": "8"})
    gpu_class = copy.deepcopy(GPU_CLASS)
    gpu_class["spec"].pop("extendedResourceName")
    api.create_object(gpu_class)
    api.create_object(node_slice("dra-shared", [gpu(0, A100, "80Gi", shared=True)]))
    api.create_object(node_slice("dra-h100", [gpu(i, H100, "80Gi") for i in range(2)]))
    inventory_sync(fake_cluster.cluster, fake_cluster.gateway, admitted=admitted_jobs)
    a100 = Flavour.objects.get(cluster=fake_cluster.cluster, name="a100-sxm4-80gb")
    Flavour.objects.filter(pk=a100.pk).update(sharing=Flavour.Sharing.TIME_SLICING)
    product = "device.attributes['gpu.nvidia.com'].productName.contains('{}')"
    options = [
        {
            "name": "whole",
            "deviceClassName": "gpu.nvidia.com",
            "count": 2,
            "selectors": [{"cel": {"expression": product.format("H100")}}],
        },
        {
            "name": "quarter",
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression": product.format("A100")}}],
            "capacity": {"requests": {"memory": "20Gi"}},
        },
    ]
    api.create_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "either", "namespace": "vision-train"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": options}]}}
            },
        }
    )
    _claiming_job(fake_cluster, "either", {"resourceClaimTemplateName": "either"})
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="either")
    assert workload.state == Workload.State.REJECTED
    assert "take part of a GPU of a100-sxm4-80gb" in workload.reason, workload.reason
    assert "the sharing of a100-sxm4-80gb says otherwise" in workload.reason
    with translation.override("zh-hans"):
        said = reason(workload)
    assert "a100-sxm4-80gb 的共享设置与此不符" in said, said
