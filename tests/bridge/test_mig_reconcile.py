"""MIG reconcile on the simulated cluster and through the real client: plan, ConfigMap,
node label, then success or a reported failure."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core import mail
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler_bridge.gateways import simulated
from scheduler_bridge.gateways.manifests import MIG_CONFIG_MAP_NAME, parse_mig_parted_yaml
from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.mig.services import mig_plan, mig_reconcile
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.selectors import admitted_jobs
from tenants.models import AuditEvent
from tests.bridge.conftest import FakeCluster
from tests.conftest import Cast, client_for
from tests.kube_fake.schema import assert_valid_kubernetes

pytestmark = pytest.mark.django_db


@pytest.fixture
def sim(cast: Cast) -> Iterator[Cluster]:
    simulated.reset()
    cluster = Cluster.objects.create(name="sim", gateway="simulated")
    inventory_sync(cluster, admitted=admitted_jobs)
    yield cluster
    simulated.reset()


def guarantee(cast: Cast, cluster: Cluster, flavour_name: str, amount: int) -> Flavour:
    flavour, _ = Flavour.objects.get_or_create(
        cluster=cluster,
        name=flavour_name,
        defaults={
            "product": "H100-80GB",
            "resource_name": "nvidia.com/mig-3g.40gb",
            "mig_profile": "3g.40gb",
        },
    )
    Quota.objects.update_or_create(
        tenant=cast.org,
        flavour=flavour,
        defaults={"guaranteed": amount, "overcommit_allowed": True},
    )
    return flavour


def test_demand_for_more_mig_slices_repartitions_idle_gpus_only(sim: Cluster, cast: Cast) -> None:
    h100_full = Flavour.objects.get(cluster=sim, name="h100-80gb")
    Quota.objects.create(tenant=cast.org, flavour=h100_full, guaranteed=24)
    guarantee(cast, sim, "h100-80gb-mig-3g.40gb", 32)  # 16 exist; 16 more = 8 more GPUs
    gateway = simulated.SimulatedGateway.for_cluster("sim")
    gateway.cluster.add_pod("default", "busy", requests={"nvidia.com/gpu": 1}, node_name="h100-01")
    result = mig_reconcile(sim, gateway, admitted=admitted_jobs)
    assert result.plan is not None and result.requested >= 1
    assert "h100-01" not in result.plan.nodes_to_reconfigure  # a pod runs there
    config_map = gateway.cluster.get_object("ConfigMap", "gpu-operator", MIG_CONFIG_MAP_NAME)
    assert config_map is not None
    configs = parse_mig_parted_yaml(config_map["data"]["config.yaml"])
    for name in result.plan.nodes_to_reconfigure:
        node = Node.objects.get(cluster=sim, name=name)
        assert node.mig_requested_config in configs
        live = gateway.cluster.get_object("Node", None, name)
        assert live is not None
        assert live["metadata"]["labels"]["nvidia.com/mig.config"] == node.mig_requested_config
    # MIG Manager applies; the next run adopts the layouts and the capacity follows
    gateway.cluster.tick()
    follow_up = mig_reconcile(sim, gateway, admitted=admitted_jobs)
    assert follow_up.succeeded == result.requested and follow_up.requested == 0
    assert Flavour.objects.get(cluster=sim, name="h100-80gb-mig-3g.40gb").capacity == 32


def test_a_failed_reconfiguration_is_reported_to_admins_once(sim: Cluster, cast: Cast) -> None:
    cast.platform_admin.email = "root@example.com"
    cast.platform_admin.save()
    guarantee(cast, sim, "h100-80gb-mig-3g.40gb", 18)
    gateway = simulated.SimulatedGateway.for_cluster("sim")
    first = mig_reconcile(sim, gateway, admitted=admitted_jobs)
    assert first.plan is not None and first.requested == 1
    (node_name,) = first.plan.nodes_to_reconfigure
    gateway.cluster.fail_next_mig_config(node_name)
    gateway.cluster.tick()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("django.db.transaction.on_commit", lambda fn, using=None: fn())
        second = mig_reconcile(sim, gateway, admitted=admitted_jobs)
        third = mig_reconcile(sim, gateway, admitted=admitted_jobs)
    assert (second.failed, third.failed) == (1, 0)
    assert len(mail.outbox) == 1 and node_name in mail.outbox[0].subject
    assert (
        AuditEvent.objects.filter(object_type="scheduler_bridge.node", action="action").count() == 1
    )


def test_a_pinned_node_keeps_its_layout(sim: Cluster, cast: Cast) -> None:
    node = Node.objects.get(cluster=sim, name="h100-01")
    response = client_for(cast.platform_admin).post(
        f"/api/v1/nodes/{node.pk}/pin/", {"pinned_layout": [None] * 8}, format="json"
    )
    assert response.status_code == 200
    guarantee(cast, sim, "h100-80gb-mig-3g.40gb", 80)  # wants every GPU split
    assert "h100-01" not in mig_plan(sim).nodes_to_reconfigure


def test_pinning_an_unknown_profile_lists_the_valid_ones(sim: Cluster, cast: Cast) -> None:
    node = Node.objects.get(cluster=sim, name="h100-01")
    layout = [["3g.40gb", "3g.40gb"]] + [None] * 7
    client = client_for(cast.platform_admin)
    assert (
        client.post(
            f"/api/v1/nodes/{node.pk}/pin/", {"pinned_layout": layout}, format="json"
        ).status_code
        == 200
    )
    response = client.post(
        f"/api/v1/nodes/{node.pk}/pin/",
        {"pinned_layout": [["5g.50gb"]] + [None] * 7},
        format="json",
    )
    assert response.status_code == 422
    message = response.json()["pinned_layout"][0]
    assert "5g.50gb" in message and "1g.10gb" in message and "7g.80gb" in message
    too_much = [["4g.40gb", "4g.40gb"]] + [None] * 7
    response = client.post(
        f"/api/v1/nodes/{node.pk}/pin/", {"pinned_layout": too_much}, format="json"
    )
    assert response.status_code == 422 and "GPU 0" in response.json()["pinned_layout"][0]
    assert client_for(cast.dept_admin).post(
        f"/api/v1/nodes/{node.pk}/pin/", {"pinned_layout": None}, format="json"
    ).status_code in (403, 404)


def test_the_mig_plan_dry_run_changes_nothing(sim: Cluster, cast: Cast) -> None:
    guarantee(cast, sim, "h100-80gb-mig-3g.40gb", 18)
    gateway = simulated.SimulatedGateway.for_cluster("sim")
    before = {
        n["metadata"]["name"]: dict(n["metadata"]["labels"])
        for n in gateway.cluster.objects("Node")
    }
    body = client_for(cast.platform_admin).get("/api/v1/clusters/sim/mig-plan/").json()
    assert len(body["nodes_to_reconfigure"]) == 1 and body["changed"]
    out = StringIO()
    call_command("mig_plan", "--cluster", "sim", stdout=out)
    assert "GPUs to reconfigure" in out.getvalue()
    after = {
        n["metadata"]["name"]: dict(n["metadata"]["labels"])
        for n in gateway.cluster.objects("Node")
    }
    assert before == after
    assert not Node.objects.exclude(mig_requested_config="").exists()
    with pytest.raises(CommandError, match="known clusters: sim"):
        call_command("mig_plan", "--cluster", "nope")


def test_export_manifests_writes_valid_objects_for_review(
    fake_cluster: FakeCluster, tmp_path: Path
) -> None:
    call_command(
        "export_manifests", "--cluster", "gpu-east", "--out", str(tmp_path), stdout=StringIO()
    )
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.yaml"))
    assert files == [
        "resourcequotas/globex-train.yaml",
        "resourcequotas/speech-train.yaml",
        "resourcequotas/vision-dev.yaml",
        "resourcequotas/vision-train.yaml",
    ]
    for path in tmp_path.rglob("*.yaml"):
        assert_valid_kubernetes(yaml.safe_load(path.read_text()))
    assert fake_cluster.api.write_count() == 0  # exporting applies nothing


def test_config_names_are_valid_label_values_shared_by_nodes_planned_alike() -> None:
    from scheduler_bridge.gateways.validation import is_label_value
    from scheduler_bridge.mig.services import config_name

    one = [{"mig_enabled": True, "instances": [["3g.40gb", 0], ["3g.40gb", 4]]}] * 8
    other = [{"mig_enabled": False, "instances": []}] * 8
    assert config_name(one) == config_name(list(one))  # content, not node, names it
    assert config_name(one) != config_name(other)
    for layouts in (one, other):
        name = config_name(layouts)
        assert is_label_value(name) and len(name) <= 63 and name.startswith("tidegate-")


def test_the_configmap_keeps_the_operators_standard_configs(sim: Cluster, cast: Cast) -> None:
    """With ClusterPolicy pointing MIG Manager at Tidegate's ConfigMap, a node still on
    all-disabled (or any other standard config) is reconfigured, not failed."""
    guarantee(cast, sim, "h100-80gb-mig-3g.40gb", 18)
    gateway = simulated.SimulatedGateway.for_cluster("sim")
    mig_reconcile(sim, gateway, admitted=admitted_jobs)
    config_map = gateway.cluster.get_object("ConfigMap", "gpu-operator", MIG_CONFIG_MAP_NAME)
    assert config_map is not None
    configs = parse_mig_parted_yaml(config_map["data"]["config.yaml"])
    assert {"all-disabled", "all-enabled", "all-1g.10gb", "all-3g.40gb", "all-balanced"} <= set(
        configs
    )
    h100 = [g for g in configs["all-1g.10gb"] if "0x233010DE" in g.device_filter]
    assert [dict(g.mig_devices) for g in h100] == [{"1g.10gb": 7}]
    # a node Tidegate never planned goes back to all-disabled: MIG Manager finds it
    untouched = next(
        n
        for n in Node.objects.filter(cluster=sim, product="H100-80GB")
        if not n.mig_requested_config
    )
    gateway.set_node_labels(untouched.name, {"nvidia.com/mig.config": "all-balanced"})
    gateway.cluster.tick()
    live = gateway.cluster.get_object("Node", None, untouched.name)
    assert live is not None
    assert live["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"


def test_success_counts_only_when_seen_after_the_label_change(sim: Cluster, cast: Cast) -> None:
    """A node's state still says success from its previous config: Tidegate removes the
    state with its label change, so the request stays in flight until MIG Manager
    answers it."""
    guarantee(cast, sim, "h100-80gb-mig-3g.40gb", 18)
    gateway = simulated.SimulatedGateway.for_cluster("sim")
    first = mig_reconcile(sim, gateway, admitted=admitted_jobs)
    assert first.plan is not None
    (name,) = first.plan.nodes_to_reconfigure
    # MIG Manager has not seen the change yet: put back the stale "success"
    gateway.cluster.edit_object(
        "Node",
        None,
        name,
        lambda n: n["metadata"]["labels"].update({"nvidia.com/mig.config.state": "success"}),
    )
    live = gateway.cluster.get_object("Node", None, name)
    assert live is not None
    labels = live["metadata"]["labels"]
    assert (
        labels["nvidia.com/mig.config"]
        == Node.objects.get(cluster=sim, name=name).mig_requested_config
    )
    gateway.cluster.edit_object(
        "Node", None, name, lambda n: n["metadata"]["labels"].pop("nvidia.com/mig.config.state")
    )
    waiting = mig_reconcile(sim, gateway, admitted=admitted_jobs)
    assert (waiting.succeeded, waiting.in_flight, waiting.requested) == (0, 1, 0)
    gateway.cluster.edit_object(
        "Node",
        None,
        name,
        lambda n: n["metadata"]["labels"].update({"nvidia.com/mig.config.state": "pending"}),
    )
    gateway.cluster.tick()
    assert mig_reconcile(sim, gateway, admitted=admitted_jobs).succeeded == 1


def test_a_configmap_past_the_api_servers_size_limit_is_refused_before_any_label(
    sim: Cluster, cast: Cast, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler_bridge.mig import services

    guarantee(cast, sim, "h100-80gb-mig-3g.40gb", 18)
    gateway = simulated.SimulatedGateway.for_cluster("sim")
    monkeypatch.setattr(services, "MAX_CONFIG_MAP_BYTES", 2000)
    with pytest.raises(services.MigConfigTooLarge, match="at most 2,000"):
        mig_reconcile(sim, gateway, admitted=admitted_jobs)
    assert gateway.cluster.get_object("ConfigMap", "gpu-operator", MIG_CONFIG_MAP_NAME) is None
    labels = [
        n["metadata"]["labels"]["nvidia.com/mig.config"] for n in gateway.cluster.objects("Node")
    ]
    assert not any(label.startswith("tidegate-") for label in labels)


def test_five_thousand_nodes_planned_alike_fit_one_configmap() -> None:
    """Configs are named by content, so 5,000 nodes on a handful of layouts make a
    ConfigMap far below Kubernetes' 1 MiB (one config per node came to 1.67 MB)."""
    import json

    from scheduler_bridge.gateways.manifests import mig_config_map
    from scheduler_bridge.inventory.layouts import layout_to_json
    from scheduler_bridge.mig.layouts import MigLayout
    from scheduler_bridge.mig.services import MAX_CONFIG_MAP_BYTES, config_name, device_groups
    from scheduler_bridge.mig.standard import standard_mig_configs

    kinds = [
        [MigLayout.of(("3g.40gb", 0), ("3g.40gb", 4))] * 4 + [MigLayout.disabled()] * 4,
        [MigLayout.of(*[("1g.10gb", i) for i in range(7)])] * 8,
        [MigLayout.disabled()] * 8,
    ]
    configs = dict(standard_mig_configs())
    for node in range(5000):
        layouts = kinds[node % len(kinds)]
        stored = [layout_to_json(x) for x in layouts]
        configs[config_name(stored)] = device_groups(layouts)  # type: ignore[assignment]
    size = len(json.dumps(mig_config_map("gpu-operator", configs)).encode())
    assert len(configs) == len(standard_mig_configs()) + 3
    assert size < MAX_CONFIG_MAP_BYTES / 20
