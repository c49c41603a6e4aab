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
