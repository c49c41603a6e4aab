"""The manifest builders: schema-valid objects, and admission that preemption undoes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from scheduler_bridge.gateways import manifests
from scheduler_bridge.gateways.base import ORIGINAL_SCHEDULING_ANNOTATION
from scheduler_bridge.gateways.manifests import MigDeviceGroup
from scheduler_bridge.gateways.patches import apply_merge_patch, merge_diff
from tests.kube_fake.schema import assert_valid_kubernetes

MIG_CONFIGS = {
    "all-disabled": [MigDeviceGroup(devices="all", mig_enabled=False)],
    "all-balanced": [
        MigDeviceGroup(
            device_filter=("0x233010DE",),
            mig_enabled=True,
            mig_devices={"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        )
    ],
    "custom-node-a": [
        MigDeviceGroup(devices=(0, 1), mig_enabled=True, mig_devices={"3g.40gb": 2}),
        MigDeviceGroup(devices=(2, 3, 4, 5, 6, 7), mig_enabled=False),
    ],
}


def job(pod_spec_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a", "resourceVersion": "41"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "i"}],
                    **(pod_spec_extra or {}),
                }
            },
        },
    }


def test_tenant_quota_limits_gpus_through_the_requests_prefix() -> None:
    quota = manifests.tenant_gpu_quota(
        "team-a", "team-a", {"nvidia.com/gpu": 8, "requests.nvidia.com/mig-1g.10gb": 4}
    )

    assert quota["metadata"]["name"] == "tidegate-gpu"
    assert quota["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "tidegate",
        "tidegate.io/tenant": "team-a",
    }
    assert quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "8",
        "requests.nvidia.com/mig-1g.10gb": "4",
    }
    with pytest.raises(ValueError, match="negative"):
        manifests.quota_hard({"nvidia.com/gpu": -1})


def test_every_built_object_is_schema_valid() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {}}}
    label_patch = manifests.node_label_patch(manifests.node_mig_config_labels("all-balanced"))
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    admitted = manifests.admitted_job(job(), {"pool": "h100"}, tolerations, ["gpu-1"])

    for obj in (
        manifests.tenant_gpu_quota("team-a", "team-a", {"nvidia.com/gpu": 8}),
        manifests.mig_config_map("gpu-operator", MIG_CONFIGS),
        apply_merge_patch(node, label_patch),
        admitted,
        manifests.restored_job(admitted),
        apply_merge_patch(job(), manifests.job_suspend_patch(job())),
    ):
        assert_valid_kubernetes(obj)


def test_mig_config_map_holds_a_mig_parted_v1_document() -> None:
    config_map = manifests.mig_config_map("gpu-operator", MIG_CONFIGS)

    text = config_map["data"]["config.yaml"]
    assert config_map["metadata"]["name"] == "tidegate-mig-config"
    assert text.startswith("version: v1\nmig-configs:\n")
    assert manifests.parse_mig_parted_yaml(text) == MIG_CONFIGS


@pytest.mark.parametrize(
    "text",
    [
        "version: v2\nmig-configs: {}\n",
        "[1, 2",
        "version: v1\n",
        "version: v1\nmig-configs:\n  x:\n    - devices: some\n",
    ],
)
def test_a_document_that_is_not_a_mig_parted_config_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        manifests.parse_mig_parted_yaml(text)


def test_pinning_to_nodes_is_added_to_every_existing_affinity_term_one_node_each() -> None:
    """A `metadata.name` field requirement takes one value (the API server refuses more),
    so each term becomes one term per node."""
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    original = job(
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [zone]},
                            {"matchExpressions": []},
                        ]
                    }
                }
            }
        }
    )

    admitted = manifests.admitted_job(original, {}, [], ["n2", "n1"])

    terms = admitted["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    n1 = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    n2 = {"key": "metadata.name", "operator": "In", "values": ["n2"]}
    assert terms == [
        {"matchExpressions": [zone], "matchFields": [n1]},
        {"matchExpressions": [zone], "matchFields": [n2]},
        {"matchExpressions": [], "matchFields": [n1]},
        {"matchExpressions": [], "matchFields": [n2]},
    ]


def test_admission_patch_changes_only_scheduling_and_is_guarded() -> None:
    original = job({"nodeSelector": {"team": "a"}})

    patch = manifests.job_admission_patch(original, {"pool": "h100"}, [], None)

    assert patch == {
        "metadata": {
            "resourceVersion": "41",
            "annotations": {ORIGINAL_SCHEDULING_ANNOTATION: '{"nodeSelector":{"team":"a"}}'},
        },
        "spec": {"suspend": False, "template": {"spec": {"nodeSelector": {"pool": "h100"}}}},
    }


# --- properties ---------------------------------------------------------------------------

label = st.text("abcxyz", min_size=1, max_size=4)
selectors = st.dictionaries(label, label, max_size=3)
toleration = st.fixed_dictionaries(
    {"key": label, "operator": st.sampled_from(["Exists", "Equal"])},
    optional={"effect": st.sampled_from(["NoSchedule", "NoExecute"])},
)
tolerations = st.lists(toleration, max_size=3, unique_by=json.dumps)
expression = st.fixed_dictionaries(
    {"key": label, "operator": st.just("In"), "values": st.lists(label, min_size=1, max_size=2)}
)
node_affinity = st.fixed_dictionaries(
    {
        "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries(
            {
                "nodeSelectorTerms": st.lists(
                    st.fixed_dictionaries({"matchExpressions": st.lists(expression, max_size=2)}),
                    min_size=1,
                    max_size=2,
                )
            }
        )
    }
)
pod_anti_affinity = st.just(
    {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
            ]
        }
    }
)


@st.composite
def templates(draw: st.DrawFn) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if selector := draw(selectors):
        extra["nodeSelector"] = selector
    if tols := draw(tolerations):
        extra["tolerations"] = tols
    affinity: dict[str, Any] = {}
    if draw(st.booleans()):
        affinity["nodeAffinity"] = draw(node_affinity)
    if draw(st.booleans()):
        affinity.update(draw(pod_anti_affinity))
    if affinity:
        extra["affinity"] = affinity
    return job(extra)


placements = st.tuples(
    selectors, tolerations, st.none() | st.lists(label, min_size=1, max_size=3, unique=True)
)


def _compatible(original: dict[str, Any], *chosen: tuple[Any, ...]) -> bool:
    """No chosen flavour selector contradicts the Job's own (that is refused)."""
    own = original["spec"]["template"]["spec"].get("nodeSelector") or {}
    return all(own.get(k, v) == v for placement in chosen for k, v in placement[0].items())


@given(templates(), placements)
def test_suspending_restores_exactly_what_admission_changed(original, placement) -> None:
    assume(_compatible(original, placement))
    admitted = manifests.admitted_job(original, *placement)
    suspended = apply_merge_patch(admitted, manifests.job_suspend_patch(admitted))

    restored = apply_merge_patch(suspended, manifests.job_restore_patch(suspended))

    assert restored["spec"]["template"] == original["spec"]["template"]
    assert restored["metadata"] == original["metadata"]


@given(templates(), placements, placements)
def test_readmission_starts_from_the_original_template(original, first, second) -> None:
    # A preemption that suspended the Job but failed before restoring the template must
    # not let the next admission stack its placement on top of the previous one.
    assume(_compatible(original, first, second))
    half_restored = manifests.admitted_job(original, *first)
    half_restored["spec"]["suspend"] = True

    assert manifests.admitted_job(half_restored, *second) == manifests.admitted_job(
        original, *second
    )


@given(templates(), placements)
def test_the_admission_patch_produces_the_admitted_job(original, placement) -> None:
    if not _compatible(original, placement):
        with pytest.raises(ValueError, match="contradicts the chosen flavour"):
            manifests.job_admission_patch(original, *placement)
        return
    patch = manifests.job_admission_patch(original, *placement)
    patched = apply_merge_patch(original, patch)
    patched["metadata"]["resourceVersion"] = original["metadata"]["resourceVersion"]

    assert patched == manifests.admitted_job(original, *placement)
    assert merge_diff(patched, manifests.admitted_job(original, *placement)) == {}
