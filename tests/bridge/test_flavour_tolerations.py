"""A flavour's tolerations are an admin's choice: inventory shows the nodes' taints and
never tolerates node-condition taints or other teams' dedicated nodes on its own."""

from __future__ import annotations

import pytest

from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.workloads.selectors import admitted_jobs
from tenants.models import AuditEvent, Role
from tests.bridge.conftest import FakeCluster
from tests.conftest import ROLE_NAMES, Cast, client_for
from tests.factories import MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
CORDONED = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
DEDICATED = {"key": "dedicated", "value": "speech", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def taint_h100_nodes(fake_cluster: FakeCluster, *taints: dict[str, str]) -> Flavour:
    for name in ("h100-1", "h100-2"):
        fake_cluster.api.edit_object(
            "Node", None, name, lambda n: n["spec"].update(taints=[dict(t) for t in taints])
        )
    inventory_sync(fake_cluster.cluster, fake_cluster.gateway, admitted=admitted_jobs)
    return Flavour.objects.get(pk=fake_cluster.h100.pk)


def test_inventory_records_taints_and_tolerates_none_of_them(fake_cluster: FakeCluster) -> None:
    flavour = taint_h100_nodes(fake_cluster, GPU_TAINT, CORDONED, UNREACHABLE, DEDICATED)

    assert flavour.tolerations == []
    # node-condition taints come and go with the node's health: not even shown
    assert flavour.node_taints == [
        {"key": "dedicated", "value": "speech", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    ]
    fake_cluster.cluster.refresh_from_db()
    assert "h100-80gb (dedicated, nvidia.com/gpu)" in fake_cluster.cluster.status_message
    assert "set its tolerations" in fake_cluster.cluster.status_message


def test_an_admin_sets_tolerations_and_inventory_keeps_them(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    taint_h100_nodes(fake_cluster, GPU_TAINT, DEDICATED)
    url = f"/api/v1/flavours/{fake_cluster.h100.pk}/"

    response = client_for(cast.platform_admin).patch(
        url, {"tolerations": [GPU_TOLERATION]}, format="json"
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["tolerations"] == [GPU_TOLERATION]
    assert body["untolerated_taints"] == [DEDICATED]
    inventory_sync(fake_cluster.cluster, fake_cluster.gateway, admitted=admitted_jobs)
    assert Flavour.objects.get(pk=fake_cluster.h100.pk).tolerations == [GPU_TOLERATION]
    event = AuditEvent.objects.filter(message="tolerations set").get()
    assert (event.after or {}).get("tolerations") == [GPU_TOLERATION]


@pytest.mark.parametrize(
    ("toleration", "words"),
    [
        ({"key": "node.kubernetes.io/unreachable", "operator": "Exists"}, "node-condition taint"),
        ({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}, "cordoned"),
        ({"operator": "Exists"}, "without a key would tolerate every taint"),
        (
            {"key": "gpu", "operator": "Exists", "value": "x"},
            'value must be empty when operator is "Exists"',
        ),
        ({"key": "gpu", "operator": "Maybe"}, 'operator must be "Equal" or "Exists"'),
        ({"key": "gpu", "effect": "NoRun"}, "effect must be one of"),
        (
            {"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 30},
            'needs effect "NoExecute"',
        ),
        ({"key": "gpu", "colour": "red"}, "unknown field(s) colour"),
        ({"key": "bad key!"}, "is not a valid taint key"),
    ],
)
def test_a_bad_toleration_is_422_naming_the_entry_and_nothing_is_saved(
    fake_cluster: FakeCluster, cast: Cast, toleration: dict[str, object], words: str
) -> None:
    url = f"/api/v1/flavours/{fake_cluster.h100.pk}/"
    response = client_for(cast.platform_admin).patch(
        url, {"tolerations": [GPU_TOLERATION, toleration]}, format="json"
    )
    assert response.status_code == 422
    errors = response.json()["tolerations"]
    assert any(e.startswith("toleration 1:") and words in e for e in errors), errors
    assert Flavour.objects.get(pk=fake_cluster.h100.pk).tolerations == []


SET_TOLERATIONS = dict.fromkeys(ROLE_NAMES, 403) | {"platform_admin": 200, "stranger": 404}


@pytest.mark.parametrize("role", [*ROLE_NAMES, "stranger"])
def test_only_platform_admins_set_tolerations_and_strangers_get_404(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    """Everyone whose tenants use the cluster sees the flavour (403 to change it); a
    lead of a tenant with nothing on the cluster does not (404)."""
    if role == "stranger":
        user = UserFactory(username="initech-lead")
        MembershipFactory(user=user, tenant=TenantFactory(slug="initech"), role=Role.LEAD)
    else:
        user = cast.user(role)
    response = client_for(user).patch(
        f"/api/v1/flavours/{fake_cluster.h100.pk}/",
        {"tolerations": [GPU_TOLERATION]},
        format="json",
    )
    assert response.status_code == SET_TOLERATIONS[role], response.content
    saved = Flavour.objects.get(pk=fake_cluster.h100.pk).tolerations
    assert saved == ([GPU_TOLERATION] if role == "platform_admin" else [])


def test_other_flavour_fields_stay_read_only(fake_cluster: FakeCluster, cast: Cast) -> None:
    response = client_for(cast.platform_admin).patch(
        f"/api/v1/flavours/{fake_cluster.h100.pk}/", {"capacity": 999}, format="json"
    )
    # refused, naming the field and the one a flavour takes, rather than silently dropped
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "capacity": ["Unknown field. Known fields: sharing, tolerations."]
    }
    assert Flavour.objects.get(pk=fake_cluster.h100.pk).capacity == 16
