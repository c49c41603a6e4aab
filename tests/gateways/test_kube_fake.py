"""The fake API server answers the real client the way a Kubernetes API server does."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.kube_fake import FakeKubeApi
from tests.kube_fake.schema import assert_valid_kubernetes


@pytest.fixture
def fake_client(kube_api: FakeKubeApi, kubeconfig: tuple[Path, str]):
    """The real client on the fake server alone (tests that drive the fake's own helpers)."""
    path, context = kubeconfig
    configuration = client.Configuration()
    config.load_kube_config(str(path), context, client_configuration=configuration)
    kube_api.add_namespace("team-a")
    with client.ApiClient(configuration) as api:
        yield api


@pytest.fixture(params=["fake", "real"])
def api_client(request: pytest.FixtureRequest):
    """The real client on the fake server and on the real control plane: each rule the
    fake claims must hold on both (where they differ, the real one is right)."""
    if request.param == "fake":
        yield request.getfixturevalue("fake_client")
        return
    real = request.getfixturevalue("real_cluster")
    real.add_namespace("team-a")
    configuration = client.Configuration()
    config.load_kube_config(
        str(real.plane.admin_kubeconfig), "admin", client_configuration=configuration
    )
    with client.ApiClient(configuration) as api:
        yield api


@pytest.fixture
def core(api_client) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def fake_core(fake_client) -> client.CoreV1Api:
    return client.CoreV1Api(fake_client)


def quota(name: str = "q", gpus: str = "8") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"hard": {"requests.nvidia.com/gpu": gpus}},
    }


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body or "{}")


def test_create_fills_server_fields_and_rejects_duplicates(core) -> None:
    created = core.create_namespaced_resource_quota("team-a", quota())

    meta = created.metadata
    assert meta.uid and meta.resource_version and meta.creation_timestamp
    assert meta.generation is None  # a quota has no generation (a Job or a pod has)
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_resource_quota("team-a", quota())
    assert caught.value.status == 409 and status_of(caught.value)["reason"] == "AlreadyExists"


def test_resource_version_is_one_counter_that_moves_on_every_write(core) -> None:
    first = core.create_namespaced_config_map(
        "team-a", {"metadata": {"name": "a"}, "data": {"k": "v"}}
    )
    second = core.create_namespaced_resource_quota("team-a", quota())
    patched = core.patch_namespaced_config_map("a", "team-a", {"data": {"k": "w"}})

    versions = [int(o.metadata.resource_version) for o in (first, second, patched)]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_a_namespaced_create_in_a_missing_namespace_is_not_found(core) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_config_map("ghost", {"metadata": {"name": "a"}})

    status = status_of(caught.value)
    assert caught.value.status == 404
    assert status["details"] == {"name": "ghost", "kind": "namespaces"}


def test_update_with_a_stale_resource_version_conflicts(core) -> None:
    created = core.create_namespaced_resource_quota("team-a", quota())
    for _ in range(10):  # the quota controller writes the status meanwhile: read again
        fresh = core.read_namespaced_resource_quota("q", "team-a")
        fresh.spec.hard = {"requests.nvidia.com/gpu": "4"}
        try:
            updated = core.replace_namespaced_resource_quota("q", "team-a", fresh)
            break
        except ApiException as error:
            if error.status != 409:
                raise

    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    stale = created
    stale.spec.hard = {"requests.nvidia.com/gpu": "2"}
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_resource_quota("q", "team-a", stale)
    assert caught.value.status == 409 and status_of(caught.value)["reason"] == "Conflict"


def test_a_quota_that_is_not_a_quantity_is_invalid(core) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_resource_quota("team-a", quota(gpus="lots"))

    # the body cannot even be decoded into a ResourceQuota: 400, naming the value's rule
    assert caught.value.status == 400 and status_of(caught.value)["reason"] == "BadRequest"
    assert "quantities must match the regular expression" in status_of(caught.value)["message"]


def test_server_side_apply_needs_a_field_manager_and_respects_ownership(core) -> None:
    apply = {"_content_type": "application/apply-patch+yaml"}
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_resource_quota("q", "team-a", quota(), **apply)
    assert caught.value.status == 422

    created = core.patch_namespaced_resource_quota(
        "q", "team-a", quota(), field_manager="a", **apply
    )
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_resource_quota(
            "q", "team-a", quota(gpus="2"), field_manager="b", **apply
        )
    assert caught.value.status == 409 and 'conflict with "a"' in status_of(caught.value)["message"]

    forced = core.patch_namespaced_resource_quota(
        "q", "team-a", quota(gpus="2"), field_manager="b", force=True, **apply
    )
    assert forced.spec.hard == {"requests.nvidia.com/gpu": "2"}
    appliers = [e.manager for e in forced.metadata.managed_fields if e.operation == "Apply"]
    assert appliers == ["b"]  # (the quota controller owns the status it writes)
    for _ in range(20):  # an identical apply writes nothing (once the quota controller,
        # which writes the quota's status, has caught up)
        before = core.read_namespaced_resource_quota("q", "team-a").metadata.resource_version
        same = core.patch_namespaced_resource_quota(
            "q", "team-a", quota(gpus="2"), field_manager="b", **apply
        )
        if same.metadata.resource_version == before:
            break
        time.sleep(0.1)
    assert same.metadata.resource_version == before
    assert created.metadata.uid == same.metadata.uid


def test_merge_patch_null_removes_a_key(core) -> None:
    core.create_namespaced_config_map(
        "team-a", {"metadata": {"name": "a"}, "data": {"x": "1", "y": "2"}}
    )

    patched = core.patch_namespaced_config_map(
        "a", "team-a", {"data": {"x": None}}, _content_type="application/merge-patch+json"
    )

    assert patched.data == {"y": "2"}


def test_lists_filter_by_label_and_field_selectors(kube_api, fake_core) -> None:
    kube_api.add_pod("team-a", "p1", node_name="gpu-1", labels={"app": "train"})
    kube_api.add_pod("team-a", "p2", node_name="gpu-2", labels={"app": "serve"})

    def names(**selectors) -> list[str]:
        return [p.metadata.name for p in fake_core.list_pod_for_all_namespaces(**selectors).items]

    assert names(label_selector="app=train") == ["p1"]
    assert names(label_selector="app!=train") == ["p2"]
    assert names(label_selector="app in (serve,batch)") == ["p2"]
    assert names(field_selector="spec.nodeName=gpu-2") == ["p2"]
    assert names(field_selector="metadata.name=p1") == ["p1"]


def test_delete_removes_and_a_second_delete_is_not_found(core) -> None:
    core.create_namespaced_resource_quota("team-a", quota())

    deleted = core.delete_namespaced_resource_quota("q", "team-a")

    assert deleted.metadata.name == "q"
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_resource_quota("q", "team-a")
    assert caught.value.status == 404


def test_deleting_a_namespace_deletes_what_is_in_it(kube_api, fake_core) -> None:
    fake_core.create_namespaced_resource_quota("team-a", quota())

    fake_core.delete_namespace("team-a")

    assert kube_api.objects("ResourceQuota") == []
    assert kube_api.objects("Namespace") == []


def test_version_and_discovery(api_client) -> None:
    from kubernetes.dynamic import DynamicClient

    assert client.VersionApi(api_client).get_code().git_version.startswith("v1.37")
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    dynamic = DynamicClient(api_client)
    jobs = dynamic.resources.get(api_version="batch/v1", kind="Job")
    assert jobs.namespaced and jobs.name == "jobs"


def test_jobs_follow_suspension_like_the_job_controller_before_1_36(kube_api, fake_client) -> None:
    kube_api.store.suspended_jobs_mutable = False
    batch = client.BatchV1Api(fake_client)
    kube_api.add_node("gpu-1", labels={"pool": "h100"})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {
            "suspend": True,
            "parallelism": 2,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
            },
        },
    }
    body = client.V1Job.from_dict(job)
    assert body is not None
    created = batch.create_namespaced_job("team-a", body)
    assert created.spec and created.spec.selector and created.status
    assert created.spec.selector.match_labels  # defaulted by the server
    assert (created.status.conditions or [])[0].type == "Suspended"

    # While suspended and never started, scheduling directives may change...
    batch.patch_namespaced_job(
        "train",
        "team-a",
        {"spec": {"suspend": False, "template": {"spec": {"nodeSelector": {"pool": "h100"}}}}},
    )
    pods = kube_api.run_job("team-a", "train")
    assert [p["spec"]["nodeName"] for p in pods] == ["gpu-1", "gpu-1"]
    # ... but not once it runs, and the rest of the template never.
    for change in (
        {"nodeSelector": {"pool": "a100"}},
        {"containers": [{"name": "c", "image": "j"}]},
    ):
        with pytest.raises(ApiException) as caught:
            batch.patch_namespaced_job("train", "team-a", {"spec": {"template": {"spec": change}}})
        assert caught.value.status == 422

    batch.patch_namespaced_job("train", "team-a", {"spec": {"suspend": True}})
    assert kube_api.objects("Pod") == []
    # before 1.36 the Job controller keeps startTime on suspension: the template stays
    # frozen ...
    assert kube_api.get_object("Job", "team-a", "train")["status"]["startTime"]
    moved = {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a100"}}}}}
    with pytest.raises(ApiException) as caught:
        batch.patch_namespaced_job("train", "team-a", moved)
    assert caught.value.status == 422
    # ... until startTime is cleared through jobs/status, allowed only while suspended
    batch.patch_namespaced_job_status("train", "team-a", {"status": {"startTime": None}})
    batch.patch_namespaced_job("train", "team-a", moved)

    batch.patch_namespaced_job("train", "team-a", {"spec": {"suspend": False}})
    kube_api.run_job("team-a", "train")
    finished = kube_api.complete_job("team-a", "train")
    assert finished["status"]["conditions"][0]["type"] == "Complete"
    assert {p["status"]["phase"] for p in kube_api.objects("Pod")} == {"Succeeded"}
    for obj in [*kube_api.objects("Job"), *kube_api.objects("Pod")]:
        assert_valid_kubernetes(obj)


def test_a_suspended_job_whose_pods_stopped_may_move_from_1_36(kube_api, fake_client) -> None:
    """MutableSchedulingDirectivesForSuspendedJobs (beta, on since 1.36): suspending clears
    startTime and, once no pod is active, the template's directives may change."""
    batch = client.BatchV1Api(fake_client)
    kube_api.add_node("gpu-1", labels={"pool": "h100"})
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {
            "suspend": False,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
            },
        },
    }
    batch.create_namespaced_job("team-a", client.V1Job.from_dict(job))  # type: ignore[arg-type]
    kube_api.run_job("team-a", "train")
    moved = {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a100"}}}}}
    with pytest.raises(ApiException) as caught:
        batch.patch_namespaced_job("train", "team-a", moved)
    assert caught.value.status == 422

    batch.patch_namespaced_job("train", "team-a", {"spec": {"suspend": True}})
    stopped = kube_api.get_object("Job", "team-a", "train")["status"]
    assert "startTime" not in stopped and stopped["active"] == 0
    batch.patch_namespaced_job("train", "team-a", moved)


def _suspended_job(batch: client.BatchV1Api, name: str = "train") -> None:
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
            },
        },
    }
    job = client.V1Job.from_dict(body)
    assert job is not None
    batch.create_namespaced_job("team-a", job)


def test_start_time_stays_while_a_job_runs(kube_api, fake_client) -> None:
    """pkg/apis/batch/validation/validation.go, RejectStartTimeUpdateForUnsuspendedJob."""
    batch = client.BatchV1Api(fake_client)
    _suspended_job(batch)
    batch.patch_namespaced_job("train", "team-a", {"spec": {"suspend": False}})
    with pytest.raises(ApiException) as caught:
        batch.patch_namespaced_job_status("train", "team-a", {"status": {"startTime": None}})
    assert caught.value.status == 422
    assert status_of(caught.value)["details"]["causes"][0]["field"] == "status.startTime"


def test_of_the_affinity_only_node_affinity_may_change_while_suspended(api_client) -> None:
    """pkg/apis/batch/validation/validation.go, validatePodTemplateUpdate."""
    batch = client.BatchV1Api(api_client)
    _suspended_job(batch)
    term = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}
    node_affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
    }
    pod_affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"a": "b"}}}
        ]
    }

    def set_affinity(affinity: dict) -> None:
        patch = {"spec": {"template": {"spec": {"affinity": affinity}}}}
        batch.patch_namespaced_job("train", "team-a", patch)

    set_affinity({"nodeAffinity": node_affinity})
    with pytest.raises(ApiException) as caught:
        set_affinity({"podAffinity": pod_affinity})
    assert caught.value.status == 422


def test_requests_need_the_kubeconfig_token(kube_api) -> None:
    configuration = client.Configuration()
    configuration.host = kube_api.url
    with client.ApiClient(configuration) as anonymous, pytest.raises(ApiException) as caught:
        client.CoreV1Api(anonymous).list_namespace()
    assert caught.value.status == 401


def test_a_configmap_above_one_mebibyte_is_invalid(core) -> None:
    """pkg/apis/core/validation/validation.go, ValidateConfigMap (MaxSecretSize)."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "big", "namespace": "team-a"},
        "data": {"config.yaml": "x" * (1024 * 1024)},
    }
    body["data"] = {"config.yaml": "x" * (1024 * 1024 + 1)}  # the values count, not the keys
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_config_map("team-a", body)
    assert caught.value.status == 422
    assert "1048576" in status_of(caught.value)["message"]
    body["data"] = {"config.yaml": "x" * (1024 * 1024)}
    core.create_namespaced_config_map("team-a", body)


def test_a_pod_past_its_namespaces_quota_is_refused_403(kube_api, fake_core) -> None:
    """plugin/pkg/admission/resourcequota/controller.go: exceeded quota."""
    fake_core.create_namespaced_resource_quota("team-a", quota(gpus="2"))
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "team-a"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "resources": {
                        "requests": {"nvidia.com/gpu": "2"},
                        "limits": {"nvidia.com/gpu": "2"},
                    },
                }
            ]
        },
    }
    fake_core.create_namespaced_pod("team-a", pod)
    pod["metadata"]["name"] = "p2"
    with pytest.raises(ApiException) as caught:
        fake_core.create_namespaced_pod("team-a", pod)
    assert caught.value.status == 403
    assert (
        "exceeded quota: q, requested: requests.nvidia.com/gpu=2"
        in status_of(caught.value)["message"]
    )


def test_the_job_controller_creates_only_the_pods_the_quota_admits(kube_api, fake_core) -> None:
    fake_core.create_namespaced_resource_quota("team-a", quota(gpus="3"))
    kube_api.add_node("gpu-1")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {
            "parallelism": 4,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "i",
                            "resources": {
                                "requests": {"nvidia.com/gpu": "1"},
                                "limits": {"nvidia.com/gpu": "1"},
                            },
                        }
                    ],
                }
            },
        },
    }
    kube_api.create_object(job)
    assert len(kube_api.run_job("team-a", "train")) == 3
    assert "exceeded quota" in kube_api.refused[0]


def test_strict_field_validation_refuses_unknown_fields(core) -> None:
    """The gateway writes with fieldValidation=Strict: a misspelt field in a patch is refused
    (422 on the patch; a create or update would be a 400)."""
    core.create_namespaced_resource_quota("team-a", quota())
    misspelt = {"spec": {"hardd": {"requests.nvidia.com/gpu": "1"}}}
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_resource_quota("q", "team-a", misspelt, field_validation="Strict")
    assert caught.value.status == 422
    assert "hardd" in status_of(caught.value)["message"]
    core.patch_namespaced_resource_quota(
        "q",
        "team-a",
        {"spec": {"hard": {"requests.nvidia.com/gpu": "1"}}},
        field_validation="Strict",
    )


def test_an_indexed_jobs_completion_mode_and_completions_are_immutable(api_client) -> None:
    """pkg/apis/batch/validation/validation.go, ValidateJobSpecUpdate."""
    batch = client.BatchV1Api(api_client)
    _suspended_job(batch)
    for change in ({"completionMode": "Indexed"}, {"completions": 3}):
        with pytest.raises(ApiException) as caught:
            batch.patch_namespaced_job("train", "team-a", {"spec": change})
        assert caught.value.status == 422


@pytest.mark.parametrize(
    ("resources", "says"),
    [
        ({"requests": {"nvidia.com/gpu": "1"}}, "Limit must be set for non overcommitable"),
        (
            {"requests": {"nvidia.com/gpumem": "4000"}, "limits": {"nvidia.com/gpumem": "2000"}},
            "must be equal to nvidia.com/gpumem limit of 2k",
        ),
        ({"limits": {"nvidia.com/gpucores": "0.5"}}, "must be an integer"),
    ],
)
def test_an_extended_resource_is_whole_and_never_overcommitted(core, resources, says) -> None:
    """pkg/apis/core/validation/validation.go, ValidateResourceRequirements: an extended
    resource (helper.IsExtendedResourceName) needs requests == limits, in whole units."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]},
    }
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("team-a", pod)
    assert caught.value.status == 422
    assert says in status_of(caught.value)["message"]
    # cpu and memory may be overcommitted: a request without a limit is fine
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    core.create_namespaced_pod("team-a", pod)
