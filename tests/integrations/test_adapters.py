"""The workload integrations on their own: what each kind's adapter reads from an
object, what it refuses, and that every object it builds (admitted, stopped, restored,
scaled) is one the kind's published schema accepts (the vendored CRDs in
tests/data/crds, Kubernetes' own schema for Jobs and pod templates)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler_bridge.integrations import BY_KIND, integration_for
from tests.integrations import objects
from tests.kube_fake import crds
from tests.kube_fake.schema import assert_valid_kubernetes

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SELECTOR = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def assert_schema_accepts(obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    kind = obj["kind"]
    if kind == "Job":
        assert_valid_kubernetes(obj)
        return
    custom = crds.load_crd(objects.CRD_OF[kind])
    _, unknown, problems = crds.prepare(custom, obj, old, strict=True)
    assert unknown == [], f"{kind}: fields its schema does not declare: {unknown}"
    assert problems == [], f"{kind}: its schema refuses: {problems}"


def named(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid="u-1", resourceVersion="1")
    return obj


ALL_KINDS = ["Job", "JobSet", "PyTorchJob", "RayCluster", "RayJob"]


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_kind_reads_its_gpu_pod_sets_and_round_trips_admission(kind: str) -> None:
    integration = integration_for(kind)
    original = named(objects.eight_gpus(kind, "ml", "train", "vision"))
    assert_schema_accepts(original)
    read = integration.read(original)
    assert read.problem is None
    assert (read.kind, read.namespace, read.name, read.uid) == (kind, "ml", "train", "u-1")
    assert read.suspended and not read.admitted and not read.finished
    assert sum(ps.count * ps.gpus_per_pod for ps in read.pod_sets) == 8
    assert {ps.resource for ps in read.pod_sets} == {"nvidia.com/gpu"}

    nodes = ["h100-1"] if integration.pins_nodes else None
    admitted = integration.admitted(original, SELECTOR, [TOLERATION], nodes)
    assert_schema_accepts(admitted, original)
    after = integration.read(admitted)
    assert not after.suspended and after.admitted
    for name, template in integration.templates(copy.deepcopy(admitted)):
        spec = template["spec"]
        assert spec["nodeSelector"] == SELECTOR, name
        assert spec["tolerations"] == [TOLERATION], name
        if integration.pins_nodes:
            terms = spec["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            assert terms == [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h100-1"]}]}
            ]
    # admitting again the same way changes nothing
    assert integration.admitted(admitted, SELECTOR, [TOLERATION], nodes) == admitted

    stopped = integration.stopped(admitted)
    if not integration.restore_with_stop:
        stopped = integration.restored(stopped)
    assert_schema_accepts(stopped, admitted)
    assert stopped == original  # suspended, templates as their owner wrote them


def test_a_jobset_is_never_pinned_to_nodes_but_gets_the_flavour() -> None:
    integration = integration_for("JobSet")
    original = named(objects.jobset("ml", "js", "vision"))
    admitted = integration.admitted(original, SELECTOR, [], None)
    template = admitted["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["spec"]["nodeSelector"] == SELECTOR
    assert "affinity" not in template["spec"]
    with pytest.raises(ValueError, match="cannot be pinned to nodes"):
        integration.admitted(original, SELECTOR, [], ["h100-1"])


def test_a_jobset_pod_set_counts_every_pod_of_every_replicated_job() -> None:
    read = integration_for("JobSet").read(
        named(objects.jobset("ml", "js", "a", replicas=3, parallelism=2, gpus=1))
    )
    assert [(ps.name, ps.count, ps.gpus_per_pod) for ps in read.pod_sets] == [("workers", 6, 1)]


def test_pytorchjob_elastic_policy_makes_its_workers_elastic_and_scales_them() -> None:
    integration = integration_for("PyTorchJob")
    original = named(objects.pytorchjob("ml", "pt", "a", workers=8, gpus=1, elastic=(4, 8)))
    assert_schema_accepts(original)
    (workers,) = integration.read(original).pod_sets
    assert (workers.name, workers.count, workers.min_count) == ("Worker", 8, 4)
    admitted = integration.admitted(original, SELECTOR, [], None, {"Worker": 4})
    assert admitted["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    assert_schema_accepts(admitted, original)
    grown = integration.scaled(admitted, {"Worker": 6})
    assert grown["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 6
    assert_schema_accepts(grown, admitted)


def test_raycluster_worker_groups_are_elastic_down_to_min_replicas() -> None:
    integration = integration_for("RayCluster")
    original = named(objects.raycluster("ml", "rc", "a", workers=4, gpus=2, minimum=1))
    (gpu_workers,) = integration.read(original).pod_sets  # the head asks for no GPU
    assert (gpu_workers.name, gpu_workers.count, gpu_workers.min_count) == ("gpu", 4, 1)
    scaled = integration.scaled(original, {"gpu": 2})
    assert scaled["spec"]["workerGroupSpecs"][0]["replicas"] == 2
    assert_schema_accepts(scaled, original)


def test_the_min_pods_annotation_makes_a_job_elastic_through_its_parallelism() -> None:
    integration = integration_for("Job")
    job = named(objects.batch_job("ml", "j", "a", parallelism=8, gpus=1))
    job["metadata"]["annotations"] = {"tidegate.io/min-pods": "2"}
    (main,) = integration.read(job).pod_sets
    assert (main.count, main.min_count) == (8, 2)
    assert integration.scaled(job, {"main": 5})["spec"]["parallelism"] == 5


@pytest.mark.parametrize(
    ("kind", "edit", "problem"),
    [
        (
            "Job",
            lambda o: o["metadata"].update(annotations={"tidegate.io/min-pods": "3"}),
            "at least 3 of 2 pods",
        ),
        (
            "Job",
            lambda o: o["metadata"].update(annotations={"tidegate.io/min-pods": "-1"}),
            "must be a whole number of pods, 1 or more",
        ),
        (
            "JobSet",
            lambda o: o["metadata"].update(annotations={"tidegate.io/min-pods": "1"}),
            "cannot change how many pods it runs",
        ),
        (
            "RayCluster",
            lambda o: o["spec"]["workerGroupSpecs"][0]["template"].update(
                objects.pod_template(None)
            ),
            "no pod of this RayCluster requests a GPU",
        ),
        (
            "PyTorchJob",
            lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][
                0
            ]["resources"]["limits"].update({"nvidia.com/mig-1g.10gb": 1}),
            "exactly one GPU resource",
        ),
        (
            "RayJob",
            lambda o: o["spec"].pop("rayClusterSpec"),
            "queue that RayCluster instead",
        ),
    ],
)
def test_objects_tidegate_cannot_queue_say_why(kind: str, edit: Any, problem: str) -> None:
    obj = named(objects.eight_gpus(kind, "ml", "bad", "a"))
    edit(obj)
    read = BY_KIND[kind].read(obj)
    assert read.problem is not None and problem in read.problem
    assert read.pod_sets == ()


def test_finished_and_failed_are_read_from_each_kinds_status() -> None:
    for kind in ("JobSet", "PyTorchJob", "RayJob"):
        obj = named(objects.eight_gpus(kind, "ml", "x", "a"))
        obj["status"] = objects.finished(kind)
        assert (BY_KIND[kind].read(obj).finished, BY_KIND[kind].read(obj).failed) == (True, False)
        obj["status"] = objects.finished(kind, failed=True)
        assert (BY_KIND[kind].read(obj).finished, BY_KIND[kind].read(obj).failed) == (True, True)
    # a RayCluster runs until it is deleted
    rc = named(objects.raycluster("ml", "rc", "a"))
    assert not BY_KIND["RayCluster"].read(rc).finished


def test_a_contradicting_own_selector_is_refused_not_overridden() -> None:
    integration = integration_for("PyTorchJob")
    obj = named(objects.pytorchjob("ml", "pt", "a"))
    own = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = own
    with pytest.raises(ValueError, match="contradicts the chosen flavour"):
        integration.admitted(obj, SELECTOR, [], None)


def test_the_fake_server_refuses_what_the_published_schemas_refuse() -> None:
    """The vendored schemas are not a formality: a misspelt field, a wrong type and a
    changed immutable field are all refused."""
    custom = crds.load_crd("jobsets.jobset.x-k8s.io")
    good = named(objects.jobset("ml", "js", "a"))
    typo = copy.deepcopy(good)
    typo["spec"]["replicatedJob"] = typo["spec"].pop("replicatedJobs")
    _, unknown, _ = crds.prepare(custom, typo, None, strict=True)
    assert unknown == ["spec.replicatedJob"]
    wrong = copy.deepcopy(good)
    wrong["spec"]["replicatedJobs"][0]["replicas"] = "two"
    _, _, problems = crds.prepare(custom, wrong, None, strict=True)
    assert any("replicas" in field for field, _ in problems)
    running = copy.deepcopy(good)
    running["spec"]["suspend"] = False
    resized = copy.deepcopy(running)
    resized["spec"]["replicatedJobs"][0]["replicas"] = 3
    _, _, problems = crds.prepare(custom, resized, running, strict=True)
    assert ("spec.replicatedJobs", 'Invalid value: "array": field is immutable') in problems
    bad_template = copy.deepcopy(good)
    bad_template["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][
        0
    ]["resourcez"] = {}
    _, unknown, _ = crds.prepare(custom, bad_template, None, strict=True)
    assert unknown and "resourcez" in unknown[0]


def gated_pod(
    name: str, *, owner: str | None = None, labels: dict[str, str] | None = None, gpus: int = 1
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ml",
        "creationTimestamp": f"2026-12-02T00:00:{len(name):02d}Z",
        "labels": {"tidegate.io/queue": "a", **(labels or {})},
    }
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": owner,
                "uid": owner,
                "controller": True,
            }
        ]
    return {
        "metadata": meta,
        "spec": {
            "schedulingGates": [{"name": "tidegate.io/admission"}],
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
            ],
        },
        "status": {"phase": "Pending"},
    }


def test_pods_group_by_label_then_leaderworkerset_then_owner_then_alone() -> None:
    from scheduler_bridge.integrations.pods import pod_groups

    lws = {"leaderworkerset.sigs.k8s.io/name": "llm"}
    pods = [
        gated_pod("llm-0", owner="llm", labels=lws),
        gated_pod("llm-0-1", owner="llm-0", labels=lws),  # a worker StatefulSet of group 0
        gated_pod("web-a", owner="web-7f", labels={"tidegate.io/pod-group": "web"}),
        gated_pod("web-b", owner="web-8c", labels={"tidegate.io/pod-group": "web"}),
        gated_pod("db-0", owner="db"),
        gated_pod("lonely"),
    ]
    groups = {g.name: g for g in pod_groups(pods)}
    assert {n: len(g.pods) for n, g in groups.items()} == {"llm": 2, "web": 2, "db": 1, "lonely": 1}
    assert all(g.read.kind == "PodGroup" and g.read.suspended for g in groups.values())
    (main,) = groups["llm"].read.pod_sets
    assert (main.count, main.gpus_per_pod) == (2, 1)


def test_a_pod_group_mixing_gpu_requests_is_refused() -> None:
    from scheduler_bridge.integrations.pods import pod_groups

    mixed = [gated_pod("a", owner="rs"), gated_pod("b", owner="rs", gpus=2)]
    (group,) = pod_groups(mixed)
    assert group.read.problem is not None and "different GPUs" in group.read.problem


def controller(
    kind: str, name: str, replicas: int, *, labels: dict[str, str] | None = None, gpus: int = 1
) -> dict[str, Any]:
    """A ReplicaSet or StatefulSet whose template makes pods like gated_pod's."""
    template_labels = {"tidegate.io/queue": "a", **(labels or {})}
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ml", "labels": template_labels},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {
                    "labels": template_labels,
                    "annotations": {"tidegate.io/min-pods": "1"},
                },
                "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]},
            },
        },
    }


def test_a_pod_group_asks_for_the_replicas_its_controller_wants() -> None:
    """The quota admission refuses a controller's pods beyond its namespace's limit, so
    the group asks for its controller's replicas, not only for the pods that exist."""
    from scheduler_bridge.integrations.pods import pod_groups

    pods = [gated_pod("db-0", owner="db"), gated_pod("db-1", owner="db")]
    for pod in pods:  # as the template makes them
        pod["metadata"]["annotations"] = {"tidegate.io/min-pods": "1"}
    (group,) = pod_groups(pods, [controller("StatefulSet", "db", 5)])
    (main,) = group.read.pod_sets
    assert (len(group.pods), main.count, main.min_count) == (2, 5, 1)

    # scaled in: the pods still there count until their controller deletes them
    (group,) = pod_groups(pods, [controller("StatefulSet", "db", 1)])
    assert group.read.pod_sets[0].count == 2


def test_a_controller_none_of_whose_pods_could_be_created_is_a_group_of_its_own() -> None:
    from scheduler_bridge.integrations.pods import group_uid, pod_groups

    (group,) = pod_groups([], [controller("ReplicaSet", "web-7f", 3, gpus=2)])
    assert (group.name, group.pods, group.read.uid) == ("web-7f", (), group_uid("ml", "web-7f"))
    assert group.read.suspended and not group.read.admitted
    (main,) = group.read.pod_sets
    assert (main.count, main.gpus_per_pod, main.resource) == (3, 2, "nvidia.com/gpu")


def test_controllers_of_pods_the_queue_does_not_hold_ask_for_nothing() -> None:
    from scheduler_bridge.integrations.pods import pod_groups

    unlabelled = controller("ReplicaSet", "api-1", 3)
    for place in (unlabelled["metadata"], unlabelled["spec"]["template"]["metadata"]):
        place["labels"] = {"app": "api"}
    no_gpu = controller("ReplicaSet", "web-2", 3, gpus=0)
    scaled_to_zero = controller("StatefulSet", "db", 0)
    assert pod_groups([], [unlabelled, no_gpu, scaled_to_zero]) == []


def test_controllers_sharing_a_group_label_add_up() -> None:
    from scheduler_bridge.integrations.pods import pod_groups

    group_label = {"tidegate.io/pod-group": "web"}
    pods = [gated_pod("web-a", owner="web-7f", labels=group_label)]
    controllers = [
        controller("ReplicaSet", "web-7f", 2, labels=group_label),
        controller("ReplicaSet", "web-8c", 3, labels=group_label),
    ]
    (group,) = pod_groups(pods, controllers)
    assert (group.name, group.read.pod_sets[0].count) == ("web", 5)


def _claiming(kind: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """``kind``'s eight-GPU object with its pods asking through claims instead."""
    obj = named(objects.eight_gpus(kind, "ml", "train", "vision"))
    for _, template in integration_for(kind).templates(obj):
        spec = template["spec"]
        spec["resourceClaims"] = entries
        for container in spec["containers"]:
            container["resources"] = {"claims": [{"name": e["name"]} for e in entries]}
    return obj


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_kind_reads_pods_that_ask_through_claim_templates(kind: str) -> None:
    obj = _claiming(kind, [{"name": "gpus", "resourceClaimTemplateName": "two-h100"}])
    assert_schema_accepts(obj)
    read = integration_for(kind).read(obj)
    assert read.problem is None
    assert read.pod_sets and all(ps.claims == (("gpus", "two-h100"),) for ps in read.pod_sets)
    assert {ps.resource for ps in read.pod_sets} == {""}


def test_a_claim_shared_by_several_pods_is_read_apart_from_their_own() -> None:
    obj = _claiming(
        "Job",
        [
            {"name": "gpus", "resourceClaimName": "team-gpus"},
            {"name": "scratch", "resourceClaimTemplateName": "one-slice"},
        ],
    )
    read = integration_for("Job").read(obj)
    assert read.problem is None
    (pod_set,) = read.pod_sets
    assert pod_set.shared_claims == (("gpus", "team-gpus"),)
    assert pod_set.claims == (("scratch", "one-slice"),)


def test_a_malformed_claim_entry_says_what_is_wrong() -> None:
    obj = _claiming("Job", [{"name": "gpus"}])
    read = integration_for("Job").read(obj)
    assert read.problem is not None
    assert "exactly one of resourceClaimTemplateName and resourceClaimName" in read.problem


def test_a_pod_group_asking_through_claims_is_one_pod_set_of_them() -> None:
    """Pods of one controller name the same claims: one pod set asking through them;
    pods that name other claims, or GPUs both ways, are refused with what to change."""
    from scheduler_bridge.integrations.pods import pod_groups, released

    def claiming(name: str, template: str = "two-h100", gpus: int = 0) -> dict[str, Any]:
        pod = gated_pod(name, owner="web", gpus=gpus)
        pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
        if not gpus:
            pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
        return pod

    (group,) = pod_groups([claiming("web-0"), claiming("web-1")])
    (pod_set,) = group.read.pod_sets
    assert (pod_set.count, pod_set.resource, pod_set.claims) == (2, "", (("gpus", "two-h100"),))
    (mixed,) = pod_groups([claiming("web-0"), claiming("web-1", template="one-slice")])
    assert mixed.read.problem is not None and "name different ResourceClaims" in mixed.read.problem
    # a pod asking for its GPU as a resource keeps its claims for other devices (a NIC),
    # as every other kind does
    (nic,) = pod_groups([claiming("web-0", gpus=1)])
    assert nic.read.problem is None
    (resource_set,) = nic.read.pod_sets
    assert (resource_set.resource, resource_set.claims) == ("nvidia.com/gpu", ())
    (both,) = pod_groups([claiming("web-0"), claiming("web-1", gpus=1)])
    assert both.read.problem is not None and "both as resources and through" in both.read.problem

    # released pinned to the nodes admission placed it on (a flavour only DRA describes)
    pinned = released(claiming("web-0"), {}, [], ["dra-h100"])
    assert "schedulingGates" not in pinned["spec"]
    assert pinned["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["dra-h100"]}]}
        ]
    }
    own = claiming("web-1")
    own["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    with pytest.raises(ValueError, match="required node affinity of its own"):
        released(own, {}, [], ["dra-h100"])
