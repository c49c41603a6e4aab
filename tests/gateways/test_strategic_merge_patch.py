"""The local API server applies strategic merge patches as Kubernetes does: lists with a
patchMergeKey are merged by it, string sets are unioned, other lists are replaced, and
the $patch / $deleteFromPrimitiveList / $setElementOrder / $retainKeys directives hold
(staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go), sent with the
official client."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config

from tests.gateways.conftest import kubernetes_gateway
from tests.kube_fake import FakeKubeApi
from tests.kube_fake.fieldmanager import merge_patch
from tests.kube_fake.strategic import strategic_merge_patch

SMP = "application/strategic-merge-patch+json"


POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "a", "finalizers": ["x.io/keep"]},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "train:1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            },
            {"name": "sidecar", "image": "log:1"},
        ],
        "tolerations": [{"key": "a", "operator": "Exists"}],
    },
}


@pytest.fixture(params=["fake", "real"])
def core(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[k8s.CoreV1Api]:
    """The official client on the fake server and on the real control plane (where the two
    differ, the real one is right)."""
    if request.param == "fake":
        kube_api: FakeKubeApi = request.getfixturevalue("kube_api")
        kube_api.add_namespace("a")
        kube_api.create_object(copy.deepcopy(POD))
        yield k8s.CoreV1Api(kubernetes_gateway(kube_api, tmp_path)._api)
        return
    real = request.getfixturevalue("real_cluster")
    real.add_namespace("a")
    real.create_object(copy.deepcopy(POD))
    configuration = k8s.Configuration()
    config.load_kube_config(
        str(real.plane.admin_kubeconfig), "admin", client_configuration=configuration
    )
    with k8s.ApiClient(configuration) as api:
        yield k8s.CoreV1Api(api)


def patch(core: k8s.CoreV1Api, body: dict[str, Any]) -> dict[str, Any]:
    answer = core.patch_namespaced_pod("p", "a", body, _content_type=SMP)
    return core.api_client.sanitize_for_serialization(answer)


def stored_pod(core: k8s.CoreV1Api) -> dict[str, Any]:
    return core.api_client.sanitize_for_serialization(core.read_namespaced_pod("p", "a"))


def test_containers_merge_by_name(core: k8s.CoreV1Api) -> None:
    # a running pod may change its containers' images only (ValidatePodUpdate)
    pod = patch(core, {"spec": {"containers": [{"name": "main", "image": "train:2"}]}})
    containers = pod["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "sidecar"]  # sidecar kept
    assert containers[0]["image"] == "train:2"
    assert containers[0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]


def test_env_merges_by_name_inside_a_merged_container(core: k8s.CoreV1Api) -> None:
    merged = strategic_merge_patch(
        "Pod",
        stored_pod(core),
        {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "20"}]}]}},
    )
    assert merged["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "20"},
    ]


def test_a_list_without_a_merge_key_is_replaced_whole(core: k8s.CoreV1Api) -> None:
    # tolerations have no merge key: the list sent is the list kept (order included); a
    # pod may only add tolerations, so the old one is sent again
    b, a = {"key": "b", "operator": "Exists"}, {"key": "a", "operator": "Exists"}
    pod = patch(core, {"spec": {"tolerations": [b, a]}})
    # the DefaultTolerationSeconds admission adds back the two it gives every pod
    assert pod["spec"]["tolerations"] == [b, a, *DEFAULT_TOLERATIONS]


DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]


def test_every_pod_tolerates_node_trouble_for_300_seconds_unless_it_says_otherwise(
    core: k8s.CoreV1Api,
) -> None:
    """DefaultTolerationSeconds: a pod tolerating neither taint gets both; one that
    tolerates every key with NoExecute (or every taint) gets none."""
    assert stored_pod(core)["spec"]["tolerations"] == [
        {"key": "a", "operator": "Exists"},
        *DEFAULT_TOLERATIONS,
    ]
    for tolerations in (
        [{"operator": "Exists", "effect": "NoExecute"}],  # every key
        [{"operator": "Exists"}],  # every taint
        [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}, DEFAULT_TOLERATIONS[1]],
    ):
        body: Any = copy.deepcopy(POD)  # the client sends a dict as it is
        body["metadata"] = {"name": f"t{len(str(tolerations))}", "namespace": "a"}
        body["spec"]["tolerations"] = tolerations
        created = core.api_client.sanitize_for_serialization(core.create_namespaced_pod("a", body))
        assert created["spec"]["tolerations"] == tolerations


def test_a_pod_update_the_api_server_forbids_is_a_422(core: k8s.CoreV1Api) -> None:
    with pytest.raises(k8s.ApiException) as refused:
        patch(core, {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}})
    assert refused.value.status == 422
    assert "pod updates may not add or remove containers" in (refused.value.body or "")


def test_patch_delete_removes_one_element(core: k8s.CoreV1Api) -> None:
    merged = strategic_merge_patch(
        "Pod", stored_pod(core), {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}
    )
    assert [c["name"] for c in merged["spec"]["containers"]] == ["main"]


def test_finalizers_are_a_set_and_can_lose_one(core: k8s.CoreV1Api) -> None:
    pod = patch(core, {"metadata": {"finalizers": ["y.io/also"]}})
    assert pod["metadata"]["finalizers"] == ["y.io/also", "x.io/keep"]  # the patch's first
    pod = patch(core, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x.io/keep"]}})
    assert pod["metadata"]["finalizers"] == ["y.io/also"]


def test_set_element_order_orders_the_merged_list(core: k8s.CoreV1Api) -> None:
    merged = strategic_merge_patch(
        "Pod",
        stored_pod(core),
        {"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "main"}]}},
    )
    assert [c["name"] for c in merged["spec"]["containers"]] == ["sidecar", "main"]


def test_an_element_without_its_merge_key_is_refused_as_a_500(core: k8s.CoreV1Api) -> None:
    with pytest.raises(k8s.ApiException) as refused:
        patch(core, {"spec": {"containers": [{"image": "x"}]}})
    assert refused.value.status == 500  # as a real API server answers it
    assert "merge key: name" in (refused.value.body or "")


def test_a_merge_patch_still_replaces_lists(core: k8s.CoreV1Api) -> None:
    body = {"spec": {"containers": [{"name": "main", "image": "train:2"}]}}
    assert [c["name"] for c in merge_patch(stored_pod(core), body)["spec"]["containers"]] == [
        "main"
    ]
    # sent to the API server, that replacement drops a container: refused
    with pytest.raises(k8s.ApiException) as refused:
        core.patch_namespaced_pod("p", "a", body, _content_type="application/merge-patch+json")
    assert refused.value.status == 422
