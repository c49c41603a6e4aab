"""Each workload kind's facts live in its adapter (scheduler_bridge/integrations): the
sets other modules read are built from INTEGRATIONS, and the service account's rules in
platform/rbac.yaml (the chart's are the same: tests/test_deployment.py) grant each kind
exactly what its adapter declares."""

from __future__ import annotations

from pathlib import Path

import yaml

from scheduler_bridge.gateways.admission_webhook import gate_patch
from scheduler_bridge.integrations import INTEGRATIONS, SUSPENDED_AS_A_WHOLE, integration_for
from scheduler_bridge.integrations.naming import WORKLOAD_NAME_LABELS, workload_name

RBAC = Path(__file__).resolve().parents[2] / "platform" / "rbac.yaml"


def _granted() -> dict[tuple[str, str], set[str]]:
    documents = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def test_the_cluster_role_grants_each_kind_exactly_what_its_adapter_declares() -> None:
    granted = _granted()
    for integration in INTEGRATIONS:
        for group, resource, verbs in integration.rbac_rules():
            assert granted.get((group, resource)) == set(verbs), (integration.kind, resource)


def test_the_rbac_files_hold_the_rules_make_rbac_writes_from_the_adapters() -> None:
    from scheduler_bridge.integrations import rbac

    root = RBAC.parents[1]
    for name in rbac.FILES:
        text = (root / name).read_text()
        assert rbac.rewritten(text) == text, f"{name} is out of date: run make rbac"
    assert rbac.main(["--check", *(str(root / name) for name in rbac.FILES)]) == 0


def test_every_kind_and_the_kinds_it_makes_are_held_by_their_own_suspend() -> None:
    assert {i.kind for i in INTEGRATIONS} <= SUSPENDED_AS_A_WHOLE
    assert {k for i in INTEGRATIONS for k in (i.kind, *i.makes)} == SUSPENDED_AS_A_WHOLE
    for kind in sorted(SUSPENDED_AS_A_WHOLE):
        pod = {
            "metadata": {
                "labels": {"tidegate.io/queue": "team"},
                "ownerReferences": [{"kind": kind, "name": "x", "controller": True}],
            },
            "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        }
        request = {"kind": {"group": "", "kind": "Pod"}, "operation": "CREATE", "object": pod}
        assert gate_patch(request) == [], kind


def test_a_pod_is_named_by_the_outermost_object_that_made_it() -> None:
    for integration in INTEGRATIONS:
        if integration.pod_name_label is not None:
            assert integration.pod_name_label in WORKLOAD_NAME_LABELS
    ray_job_pod = {
        "labels": {
            "ray.io/cluster": "trainer-raycluster-x",
            "ray.io/originated-from-cr-name": "trainer",
        }
    }
    assert workload_name(ray_job_pod) == "trainer"
    job_set_pod = {
        "labels": {"jobset.sigs.k8s.io/jobset-name": "sweep"},
        "ownerReferences": [{"kind": "Job", "name": "sweep-workers-0", "controller": True}],
    }
    assert workload_name(job_set_pod) == "sweep"


def test_each_kind_names_where_its_owner_sets_suspend() -> None:
    assert integration_for("PyTorchJob").suspend_field == "spec.runPolicy.suspend"
    assert integration_for("").suspend_field == "spec.suspend"


def test_every_kind_the_sync_serves_answers_the_same_facts() -> None:
    from scheduler_bridge.integrations.kinds import kind_facts
    from scheduler_bridge.integrations.pods import KIND as POD_GROUP

    for integration in INTEGRATIONS:
        facts = kind_facts(integration.kind)
        assert (facts.held_by_gate, facts.follows_pod_count, facts.has_one_object) == (
            False,
            False,
            True,
        )
    pod_group = kind_facts(POD_GROUP)
    assert (pod_group.held_by_gate, pod_group.follows_pod_count, pod_group.has_one_object) == (
        True,
        True,
        False,
    )
    assert kind_facts("").kind == "Job"  # workloads queued before other kinds were integrated
