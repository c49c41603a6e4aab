"""The Kubernetes gateway's own concerns: connection settings, timeouts, retries,
conflicts, ownership, pagination; the real client against the fake API server."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from scheduler_bridge.gateways import (
    ClusterUnreachable,
    GatewayConfigError,
    GatewayError,
    NamespaceMissing,
    ObjectConflict,
    gateway_for,
)
from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
from scheduler_bridge.gateways.manifests import managed_labels, quota_hard
from tests.kube_fake import FakeKubeApi
from tests.kube_fake.fixtures import write_kubeconfig
from tests.kube_fake.schema import assert_valid_kubernetes

from .conftest import FAST_RETRY, kubernetes_gateway

HARD = quota_hard({"nvidia.com/gpu": 8})
LABELS = managed_labels("team-a")
QUOTA_PATH = "/api/v1/namespaces/team-a/resourcequotas"


@pytest.fixture
def gateway(kube_api: FakeKubeApi, tmp_path: Path):
    kube_api.add_namespace("team-a")
    with kubernetes_gateway(kube_api, tmp_path) as gw:
        yield gw


# --- connection settings ----------------------------------------------------------------


def test_a_missing_kubeconfig_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "config"

    with pytest.raises(GatewayConfigError, match=str(missing)):
        KubernetesGateway.from_kubeconfig(missing, "prod")


def test_an_unknown_context_names_the_context_and_the_ones_there_are(kubeconfig) -> None:
    path, context = kubeconfig

    with pytest.raises(GatewayConfigError) as caught:
        KubernetesGateway.from_kubeconfig(path, "staging")

    assert "'staging'" in str(caught.value) and str(path) in str(caught.value)
    assert context in str(caught.value)


def test_an_unreadable_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("clusters: [unclosed\n")

    with pytest.raises(GatewayConfigError, match="cannot be read"):
        KubernetesGateway.from_kubeconfig(path)


def test_kubeconfig_from_an_environment_variable(kube_api, kubeconfig, monkeypatch) -> None:
    path, context = kubeconfig
    monkeypatch.setenv("TIDEGATE_TEST_KUBECONFIG", str(path))
    kube_api.add_namespace("team-a")

    with gateway_for("kubernetes", kubeconfig_env="TIDEGATE_TEST_KUBECONFIG") as gw:
        assert gw.list_namespaces() == ["team-a"]

    monkeypatch.delenv("TIDEGATE_TEST_KUBECONFIG")
    with pytest.raises(GatewayConfigError, match="TIDEGATE_TEST_KUBECONFIG"):
        gateway_for("kubernetes", kubeconfig_env="TIDEGATE_TEST_KUBECONFIG")


def test_in_cluster_without_a_service_account_is_a_config_error(monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    with pytest.raises(GatewayConfigError, match="in-cluster"):
        gateway_for("kubernetes", in_cluster=True)


def test_gateway_for_rejects_unknown_kinds_and_ambiguous_settings(kubeconfig) -> None:
    with pytest.raises(GatewayConfigError, match="unknown cluster kind 'openshift'"):
        gateway_for("openshift")
    with pytest.raises(GatewayConfigError, match="exactly one"):
        gateway_for("kubernetes", kubeconfig=str(kubeconfig[0]), in_cluster=True)
    with pytest.raises(GatewayConfigError, match="settings"):
        gateway_for("kubernetes", kubeconfig=str(kubeconfig[0]), read_timout=3)


def test_the_gateway_does_not_touch_the_clients_global_configuration(kubeconfig) -> None:
    from kubernetes import client

    before = client.Configuration.get_default_copy().host
    with gateway_for("kubernetes", kubeconfig=str(kubeconfig[0]), context=kubeconfig[1]):
        pass

    assert client.Configuration.get_default_copy().host == before


def test_a_wrong_token_is_refused_with_an_actionable_message(kube_api, tmp_path) -> None:
    path, context = write_kubeconfig(tmp_path, kube_api.url, token="stale")

    gw = KubernetesGateway.from_kubeconfig(path, context, retry=FAST_RETRY)

    with gw, pytest.raises(GatewayError, match="refused access.*RBAC"):
        gw.list_nodes()


# --- transient failures -----------------------------------------------------------------


def test_two_injected_500s_are_retried_then_succeed(kube_api, gateway) -> None:
    kube_api.fail_next(2, QUOTA_PATH, status=500)

    assert gateway.apply_resource_quota("team-a", "tidegate-gpu", HARD, LABELS).created

    served = [r.status for r in kube_api.requests if r.path.startswith(QUOTA_PATH)]
    assert served[:2] == [500, 500] and served[-1] == 201


def test_persistent_500s_give_up_after_the_bounded_attempts(kube_api, gateway) -> None:
    kube_api.fail_next(100, "/api/v1/nodes")

    with pytest.raises(ClusterUnreachable, match="answered 500.*3 times") as caught:
        gateway.list_nodes()

    assert caught.value.retryable
    assert kube_api.count("list") == FAST_RETRY.attempts


def test_429_is_retried(kube_api, gateway) -> None:
    kube_api.fail_next(1, "/api/v1/namespaces", status=429, retry_after=0)

    assert gateway.list_namespaces() == ["team-a"]


def test_slow_answers_time_out_after_bounded_retries(kube_api, tmp_path) -> None:
    kube_api.delay(2.0, "/api/v1/nodes")
    gw = kubernetes_gateway(kube_api, tmp_path, read_timeout=0.2)

    # Every answer would come after 2 s and succeed: raising proves each attempt gave up
    # at its 0.2 s read timeout (how long that takes is benchmarks' business, not a test's).
    with gw, pytest.raises(ClusterUnreachable, match="did not answer after 3 attempts"):
        gw.list_nodes()

    assert kube_api.count("list") == 3


def test_one_slow_answer_is_retried(kube_api, tmp_path) -> None:
    kube_api.add_node("gpu-1")
    kube_api.delay(1.0, "/api/v1/nodes", count=1)

    with kubernetes_gateway(kube_api, tmp_path, read_timeout=0.2) as gw:
        assert [n.name for n in gw.list_nodes()] == ["gpu-1"]


def test_a_server_that_is_not_there_is_unreachable(tmp_path) -> None:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path, context = write_kubeconfig(tmp_path, f"http://127.0.0.1:{port}")

    gw = KubernetesGateway.from_kubeconfig(path, context, retry=FAST_RETRY)

    with gw, pytest.raises(ClusterUnreachable, match=f"127.0.0.1:{port}"):
        gw.list_namespaces()


def test_retry_delays_grow_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(attempts=6, base_delay=1.0, max_delay=5.0)

    delays = [policy.delay(n) for n in range(1, 6)]

    assert [round(d) for d in delays[:3]] == [1, 2, 4]
    assert all(5.0 <= d <= 5.5 for d in delays[3:])


# --- conflicts ------------------------------------------------------------------------


def _make_job(kube_api: FakeKubeApi) -> None:
    kube_api.create_object(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
                },
            },
        }
    )


def test_a_stale_resource_version_is_re_read_and_retried(kube_api, gateway) -> None:
    _make_job(kube_api)
    # Somebody else changes the Job between the gateway's read and its write.
    kube_api.after_request(
        lambda api: api.edit_object(
            "Job", "team-a", "train", lambda j: j["metadata"].setdefault("labels", {}).update(x="y")
        ),
        "/apis/batch/v1/namespaces/team-a/jobs/train",
        method="GET",
    )

    job = gateway.admit_job("team-a", "train", {"pool": "h100"}, [])

    assert not job.suspended and job.labels == {"x": "y"}
    statuses = [r.status for r in kube_api.requests if r.method == "PATCH"]
    assert statuses == [409, 200]


def test_endless_conflicts_end_in_object_conflict(kube_api, gateway) -> None:
    _make_job(kube_api)
    kube_api.fail_next(100, "/jobs/train", status=409, method="PATCH")

    with pytest.raises(ObjectConflict, match="3 attempts"):
        gateway.admit_job("team-a", "train", {"pool": "h100"}, [])


# --- ownership and pagination ------------------------------------------------------------


def test_apply_takes_fields_back_from_another_field_manager(kube_api, gateway) -> None:
    from kubernetes import client

    gateway.apply_resource_quota("team-a", "tidegate-gpu", HARD, LABELS)
    # A person runs `kubectl edit`: a merge patch by another field manager.
    core = client.CoreV1Api(gateway._api)
    core.patch_namespaced_resource_quota(
        "tidegate-gpu",
        "team-a",
        {"spec": {"hard": {"requests.nvidia.com/gpu": "64"}}},
        field_manager="kubectl-edit",
        _content_type="application/merge-patch+json",
    )
    owners = _owners(kube_api)
    assert owners["kubectl-edit"] == {"requests.nvidia.com/gpu"}

    result = gateway.apply_resource_quota("team-a", "tidegate-gpu", HARD, LABELS)

    assert result.drift_repaired and "'64'" in result.drift[0]
    assert _owners(kube_api) == {"tidegate": {"requests.nvidia.com/gpu"}}
    apply = [r for r in kube_api.requests if r.verb == "apply"][-1]
    assert apply.status == 200


def _owners(api: FakeKubeApi) -> dict[str, set[str]]:
    quota = api.get_object("ResourceQuota", "team-a", "tidegate-gpu")
    assert quota is not None
    return {
        e["manager"]: {k[2:] for k in e["fieldsV1"].get("f:spec", {}).get("f:hard", {})}
        for e in quota["metadata"]["managedFields"]
        if e["fieldsV1"].get("f:spec")
    }


def test_missing_namespace_message_names_the_cluster(kube_api, gateway) -> None:
    with pytest.raises(NamespaceMissing, match=kube_api.url):
        gateway.apply_config_map("ghost", "cfg", {"a": "b"}, LABELS)


def test_big_pod_lists_are_read_in_pages(kube_api, gateway) -> None:
    for i in range(620):
        gpu = {"nvidia.com/gpu": 1} if i % 2 else {}
        kube_api.add_pod("team-a", f"pod-{i:04d}", requests=gpu, node_name="gpu-1")

    pods = gateway.list_gpu_pods()

    assert len(pods) == 310 and all(p.gpu_requests == {"nvidia.com/gpu": 1} for p in pods)
    assert kube_api.count("list") == 2


def _many_pods(kube_api) -> None:  # type: ignore[no-untyped-def]
    for i in range(620):
        kube_api.add_pod(
            "team-a", f"pod-{i:04d}", requests={"nvidia.com/gpu": 1}, node_name="gpu-1"
        )


def _meanwhile(api) -> None:  # type: ignore[no-untyped-def]
    api.add_pod("team-a", "pod-0000a", requests={"nvidia.com/gpu": 1})
    api.delete_object("Pod", "team-a", "pod-0001")


def test_a_paged_list_is_one_snapshot(kube_api, gateway) -> None:
    """Pages after the first come from the first page's snapshot: pods created or
    deleted meanwhile neither repeat nor vanish from this list."""
    _many_pods(kube_api)
    kube_api.after_request(
        lambda api: api.add_pod("team-a", "pod-0000a", requests={"nvidia.com/gpu": 1}),
        r"/pods",
    )

    names = [p.name for p in gateway.list_gpu_pods()]

    # an offset into the live list would repeat pod-0499 on the second page
    assert len(names) == len(set(names)) == 620
    assert "pod-0000a" not in names


def test_an_expired_continue_token_lists_again_from_the_start(kube_api, gateway) -> None:
    """Once etcd has compacted the first page's revision the continue token is 410 Gone;
    the gateway lists again and gets the state after the changes."""
    _many_pods(kube_api)

    def meanwhile_and_compact(api) -> None:  # type: ignore[no-untyped-def]
        _meanwhile(api)
        api.store.forget_history()

    kube_api.after_request(meanwhile_and_compact, r"/pods")

    names = [p.name for p in gateway.list_gpu_pods()]

    assert len(names) == len(set(names)) == 620
    assert "pod-0000a" in names and "pod-0001" not in names
    assert [r.status for r in kube_api.requests if r.verb == "list"] == [200, 410, 200, 200]


def test_objects_written_by_the_gateway_are_schema_valid(kube_api, gateway) -> None:
    kube_api.store.suspended_jobs_mutable = False  # 1.35: the gateway clears startTime
    kube_api.add_node("gpu-1", labels={"nvidia.com/mig.config": "all-disabled"})
    kube_api.add_namespace("gpu-operator")
    _make_job(kube_api)
    gateway.apply_resource_quota("team-a", "tidegate-gpu", HARD, LABELS)
    gateway.apply_config_map("gpu-operator", "tidegate-mig-config", {"config.yaml": "x"}, LABELS)
    gateway.set_node_labels("gpu-1", {"nvidia.com/mig.config": "all-balanced"})
    gateway.admit_job(
        "team-a", "train", {"pool": "h100"}, [{"key": "gpu", "operator": "Exists"}], ["gpu-1"]
    )
    kube_api.run_job("team-a", "train")
    gateway.suspend_job("team-a", "train")

    written = {(r.path, r.verb) for r in kube_api.requests if r.verb in ("apply", "patch")}
    # quota, ConfigMap, node labels, the Job, and the Job's status (startTime cleared
    # before the template is restored)
    assert len(written) == 5
    for kind in ("ResourceQuota", "ConfigMap", "Node", "Job", "Namespace", "Pod"):
        for obj in kube_api.objects(kind):
            assert_valid_kubernetes(obj)


def test_a_job_whose_pods_do_not_stop_is_suspended_and_keeps_its_placement(
    kube_api, tmp_path
) -> None:
    """Kubernetes keeps a suspended Job's template fixed while its controller still counts
    active pods: suspension holds all the same (pods go), the placement stays until the
    next admission writes one from the original."""
    kube_api.add_namespace("team-a")
    kube_api.add_node("gpu-1", labels={"pool": "h100"})
    _make_job(kube_api)
    gateway = kubernetes_gateway(kube_api, tmp_path, job_settle_timeout_s=0.3)
    with gateway:
        gateway.admit_job("team-a", "train", {"pool": "h100"}, [])
        kube_api.run_job("team-a", "train")
        original_react = kube_api.store._react

        def lagging(resource, old, obj):  # the controller has not counted the pods yet
            original_react(resource, old, obj)
            if resource.kind == "Job" and obj["spec"].get("suspend"):
                obj["status"]["active"] = 1

        kube_api.store._react = lagging  # type: ignore[method-assign]
        job = gateway.suspend_job("team-a", "train")
        kube_api.store._react = original_react  # type: ignore[method-assign]

        assert job.suspended
        live = kube_api.get_object("Job", "team-a", "train")
        assert live["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "h100"}
        kube_api.edit_object("Job", "team-a", "train", lambda j: j["status"].update(active=0))
        again = gateway.admit_job("team-a", "train", {"pool": "a100"}, [])
        assert again.node_selector == {"pool": "a100"}
