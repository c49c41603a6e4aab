"""What every cluster gateway promises, checked against both implementations: the
Kubernetes gateway (real client, fake API server) and the simulated gateway."""

from __future__ import annotations

import json

import pytest

from scheduler_bridge.gateways import GatewayError, NamespaceMissing, ObjectConflict, ObjectMissing
from scheduler_bridge.gateways.base import ORIGINAL_SCHEDULING_ANNOTATION
from scheduler_bridge.gateways.manifests import managed_labels, quota_hard

from .conftest import Backend

LABELS = managed_labels("team-a")
HARD = quota_hard({"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 4})
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
def team_a(backend: Backend) -> Backend:
    backend.add_namespace("team-a")
    return backend


def apply_quota(b: Backend, hard: dict[str, str] = HARD, **kwargs: bool):
    return b.gateway.apply_resource_quota("team-a", "tidegate-gpu", hard, LABELS, **kwargs)


# --- ResourceQuota ---------------------------------------------------------------------


def test_first_apply_creates_the_quota(team_a: Backend) -> None:
    result = apply_quota(team_a)

    assert result.created and not result.drift_repaired
    quota = team_a.get("ResourceQuota", "team-a", "tidegate-gpu")
    assert quota["spec"]["hard"] == HARD
    assert quota["metadata"]["labels"] == LABELS


def test_second_apply_of_the_same_quota_makes_no_write_call(team_a: Backend) -> None:
    apply_quota(team_a)
    writes = team_a.writes()

    result = apply_quota(team_a)

    assert result.unchanged
    assert team_a.writes() == writes


def test_a_new_desired_quota_is_an_update_not_drift(team_a: Backend) -> None:
    apply_quota(team_a)

    result = apply_quota(team_a, quota_hard({"nvidia.com/gpu": 12}))

    assert result.updated and result.drift == ()
    assert team_a.get("ResourceQuota", "team-a", "tidegate-gpu")["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "12"
    }


def test_a_hand_edit_is_restored_and_reported(team_a: Backend) -> None:
    apply_quota(team_a)
    team_a.edit(
        "ResourceQuota",
        "team-a",
        "tidegate-gpu",
        lambda q: q["spec"]["hard"].update({"requests.nvidia.com/gpu": "99"}),
    )

    result = apply_quota(team_a)

    assert result.updated and result.drift_repaired
    assert "requests.nvidia.com/gpu" in result.drift[0] and "'99'" in result.drift[0]
    assert team_a.get("ResourceQuota", "team-a", "tidegate-gpu")["spec"]["hard"] == HARD
    assert apply_quota(team_a).unchanged


def test_a_key_added_by_hand_is_removed_and_reported(team_a: Backend) -> None:
    apply_quota(team_a)
    team_a.edit(
        "ResourceQuota",
        "team-a",
        "tidegate-gpu",
        lambda q: q["spec"]["hard"].update({"requests.nvidia.com/mig-7g.80gb": "3"}),
    )

    result = apply_quota(team_a)

    assert result.drift_repaired and "added outside Tidegate" in result.drift[0]
    assert team_a.get("ResourceQuota", "team-a", "tidegate-gpu")["spec"]["hard"] == HARD


def test_a_removed_label_is_restored_and_foreign_labels_are_kept(team_a: Backend) -> None:
    apply_quota(team_a)

    def tamper(quota: dict) -> None:
        del quota["metadata"]["labels"]["tidegate.io/tenant"]
        quota["metadata"]["labels"]["owner"] = "platform-team"

    team_a.edit("ResourceQuota", "team-a", "tidegate-gpu", tamper)

    result = apply_quota(team_a)

    assert result.drift_repaired and "label tidegate.io/tenant was removed" in result.drift[0]
    labels = team_a.get("ResourceQuota", "team-a", "tidegate-gpu")["metadata"]["labels"]
    assert labels == {**LABELS, "owner": "platform-team"}


def test_a_deleted_quota_is_recreated_and_reported_when_expected(team_a: Backend) -> None:
    apply_quota(team_a)
    team_a.delete("ResourceQuota", "team-a", "tidegate-gpu")

    result = apply_quota(team_a, expect_existing=True)

    assert result.created and result.drift_repaired
    assert "deleted outside Tidegate" in result.drift[0]
    assert team_a.get("ResourceQuota", "team-a", "tidegate-gpu")["spec"]["hard"] == HARD


def test_quota_in_a_missing_namespace_raises_namespace_missing(backend: Backend) -> None:
    with pytest.raises(NamespaceMissing) as caught:
        backend.gateway.apply_resource_quota("ghost", "tidegate-gpu", HARD, LABELS)

    assert caught.value.namespace == "ghost"
    assert "ghost" in str(caught.value)


def test_a_quota_value_that_is_not_a_quantity_is_rejected(team_a: Backend) -> None:
    with pytest.raises(GatewayError, match="lots"):
        apply_quota(team_a, {"requests.nvidia.com/gpu": "lots"})

    assert team_a.get("ResourceQuota", "team-a", "tidegate-gpu") is None


def test_delete_quota_reports_whether_there_was_one(team_a: Backend) -> None:
    apply_quota(team_a)

    assert team_a.gateway.delete_resource_quota("team-a", "tidegate-gpu") is True
    assert team_a.gateway.delete_resource_quota("team-a", "tidegate-gpu") is False
    assert team_a.get("ResourceQuota", "team-a", "tidegate-gpu") is None


# --- ConfigMap ------------------------------------------------------------------------


def test_config_map_apply_is_idempotent_and_repairs_drift(backend: Backend) -> None:
    backend.add_namespace("gpu-operator")
    data = {"config.yaml": "version: v1\nmig-configs: {}\n"}
    gateway = backend.gateway

    assert gateway.apply_config_map("gpu-operator", "tidegate-mig-config", data, LABELS).created
    writes = backend.writes()
    assert gateway.apply_config_map("gpu-operator", "tidegate-mig-config", data, LABELS).unchanged
    assert backend.writes() == writes

    backend.edit(
        "ConfigMap",
        "gpu-operator",
        "tidegate-mig-config",
        lambda cm: cm["data"].update({"config.yaml": "garbage"}),
    )
    result = gateway.apply_config_map("gpu-operator", "tidegate-mig-config", data, LABELS)

    assert result.drift_repaired and "data[config.yaml] was changed" in result.drift[0]
    assert backend.get("ConfigMap", "gpu-operator", "tidegate-mig-config")["data"] == data


# --- nodes and namespaces ---------------------------------------------------------------


def test_lists_nodes_namespaces_and_gpu_pods(backend: Backend) -> None:
    backend.add_namespace("team-a")
    backend.add_namespace("team-b")
    backend.add_gpu_node("gpu-2", H100)
    backend.add_gpu_node("gpu-1", H100)

    nodes = backend.gateway.list_nodes()

    assert [n.name for n in nodes] == ["gpu-1", "gpu-2"]
    assert nodes[0].allocatable["nvidia.com/gpu"] == 8
    assert nodes[0].labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert {"team-a", "team-b"} <= set(backend.gateway.list_namespaces())


def test_node_labels_are_written_only_when_they_differ(backend: Backend) -> None:
    backend.add_gpu_node("gpu-1", {**H100, "nvidia.com/mig.config": "all-disabled"})
    gateway = backend.gateway

    assert gateway.set_node_labels("gpu-1", {"nvidia.com/mig.config": "all-balanced"}) is True
    writes = backend.writes()
    assert gateway.set_node_labels("gpu-1", {"nvidia.com/mig.config": "all-balanced"}) is False
    assert backend.writes() == writes

    assert gateway.set_node_labels("gpu-1", {"nvidia.com/mig.config": None}) is True
    labels = backend.get("Node", None, "gpu-1")["metadata"]["labels"]
    assert "nvidia.com/mig.config" not in labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_labelling_an_unknown_node_raises_object_missing(backend: Backend) -> None:
    with pytest.raises(ObjectMissing, match="Node ghost"):
        backend.gateway.set_node_labels("ghost", {"a": "b"})


# --- Jobs -------------------------------------------------------------------------------


@pytest.fixture
def queued_job(team_a: Backend) -> Backend:
    for name in ("h100-a", "h100-b"):
        team_a.add_gpu_node(name, {**H100, "team": "a"})
    team_a.add_job(
        "team-a",
        "train",
        requests={"nvidia.com/gpu": 4},
        parallelism=2,
        node_selector={"team": "a"},
        labels={"kueue.x-k8s.io/queue-name": "gpu"},
    )
    return team_a


def test_list_jobs_filters_by_label_selector(queued_job: Backend) -> None:
    queued_job.add_job("team-a", "other", requests={"nvidia.com/gpu": 1})

    jobs = queued_job.gateway.list_jobs("kueue.x-k8s.io/queue-name=gpu")

    assert [j.name for j in jobs] == ["train"]
    job = jobs[0]
    assert job.suspended and not job.admitted
    assert job.requests_per_pod == {"nvidia.com/gpu": 4} and job.parallelism == 2
    assert job.node_selector == {"team": "a"}
    assert [j.name for j in queued_job.gateway.list_jobs(namespace="team-a")] == ["other", "train"]


def test_admit_then_suspend_restores_the_original_template(queued_job: Backend) -> None:
    gateway = queued_job.gateway
    before = queued_job.get("Job", "team-a", "train")["spec"]["template"]["spec"]
    flavour = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}

    admitted = gateway.admit_job("team-a", "train", flavour, [GPU_TOLERATION], ["h100-a", "h100-b"])

    assert not admitted.suspended and admitted.admitted
    assert admitted.node_selector == {"team": "a", **flavour}
    assert admitted.tolerations == (GPU_TOLERATION,)
    live = queued_job.get("Job", "team-a", "train")
    terms = live["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h100-a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h100-b"]}]},
    ]
    assert json.loads(live["metadata"]["annotations"][ORIGINAL_SCHEDULING_ANNOTATION]) == {
        "nodeSelector": {"team": "a"}
    }
    assert {p["spec"]["nodeName"] for p in queued_job.pods_of("team-a", "train")} <= {
        "h100-a",
        "h100-b",
    }

    suspended = gateway.suspend_job("team-a", "train")

    assert suspended.suspended and not suspended.admitted
    assert queued_job.get("Job", "team-a", "train")["spec"]["template"]["spec"] == before
    assert queued_job.pods_of("team-a", "train") == []


def test_a_preempted_job_is_admitted_again_on_another_flavour(queued_job: Backend) -> None:
    """A Job that ran has status.startTime, and Kubernetes freezes its scheduling
    directives while it is set, until the Job controller has counted the pods of the
    suspended Job stopped (1.36 and later also clear it then): the gateway waits for the
    pods to stop and clears startTime through jobs/status before restoring and admitting."""
    gateway = queued_job.gateway
    h100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    a100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    queued_job.add_gpu_node("a100-a", {**a100, "team": "a"})
    gateway.admit_job("team-a", "train", h100, [GPU_TOLERATION], ["h100-a"])
    queued_job.eventually(
        lambda: queued_job.get("Job", "team-a", "train")["status"].get("startTime"),
        "the Job controller to set startTime",
    )

    preempted = gateway.suspend_job("team-a", "train")
    assert preempted.suspended and not preempted.admitted

    again = gateway.admit_job("team-a", "train", a100, [], ["a100-a"])

    assert not again.suspended and again.node_selector == {"team": "a", **a100}
    queued_job.eventually(
        lambda: queued_job.get("Job", "team-a", "train")["status"].get("startTime"),
        "the resume to set startTime again",
    )
    assert {p["spec"]["nodeName"] for p in queued_job.pods_of("team-a", "train")} <= {"a100-a"}


def test_an_indexed_job_keeps_its_indexes_through_preemption(team_a: Backend) -> None:
    """Admission and preemption change only scheduling directives: an Indexed Job keeps
    its completion mode and completions, so its pods keep their indexes."""
    team_a.add_gpu_node("h100-a", {**H100, "team": "a"})
    team_a.add_job(
        "team-a", "ranks", requests={"nvidia.com/gpu": 1}, parallelism=2, completion_mode="Indexed"
    )
    gateway = team_a.gateway
    gateway.admit_job("team-a", "ranks", H100, [GPU_TOLERATION])
    gateway.suspend_job("team-a", "ranks")
    gateway.admit_job("team-a", "ranks", H100, [])

    spec = team_a.get("Job", "team-a", "ranks")["spec"]
    assert (spec["completionMode"], spec["completions"], spec["suspend"]) == ("Indexed", 2, False)


def test_admitting_an_admitted_job_again_writes_nothing(queued_job: Backend) -> None:
    flavour = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    queued_job.gateway.admit_job("team-a", "train", flavour, [])
    writes = queued_job.writes()

    again = queued_job.gateway.admit_job("team-a", "train", flavour, [])

    assert again.admitted and queued_job.writes() == writes
    with pytest.raises(ObjectConflict, match="another placement") as caught:
        queued_job.gateway.admit_job("team-a", "train", {"pool": "other"}, [])
    assert caught.value.retryable is False


def test_suspending_twice_is_harmless(queued_job: Backend) -> None:
    queued_job.gateway.admit_job("team-a", "train", {"pool": "h100"}, [])
    queued_job.gateway.suspend_job("team-a", "train")
    writes = queued_job.writes()

    job = queued_job.gateway.suspend_job("team-a", "train")

    assert job.suspended and queued_job.writes() == writes


def test_a_running_job_tidegate_did_not_hold_cannot_be_admitted(team_a: Backend) -> None:
    team_a.add_job("team-a", "free-runner", requests={"nvidia.com/gpu": 1}, suspended=False)

    with pytest.raises(ObjectConflict, match="already running"):
        team_a.gateway.admit_job("team-a", "free-runner", {"pool": "h100"}, [])


def test_admitting_a_missing_job_raises_object_missing(team_a: Backend) -> None:
    with pytest.raises(ObjectMissing, match="Job team-a/ghost"):
        team_a.gateway.admit_job("team-a", "ghost", {}, [])
