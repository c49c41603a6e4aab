"""Quotas and quota requests through the API: rules with numbers, roles, the workflow."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from scheduler_bridge.quotas.services import quota_request_approve, quota_request_create
from tenants.models import AuditEvent, Role
from tests.bridge.conftest import FakeCluster
from tests.conftest import ROLE_NAMES, Cast, client_for
from tests.factories import MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db

H100 = "gpu-east/h100-80gb"


def set_quota(cast: Cast, who: str, tenant: str, guaranteed: int, **extra: object) -> Any:
    return client_for(cast.user(who)).post(
        "/api/v1/quotas/",
        {"tenant": tenant, "flavour": H100, "guaranteed": guaranteed, **extra},
        format="json",
    )


SET_TEAM_QUOTA = {  # vision's quota is set by research's admins (its parent)
    "platform_admin": 200,
    "dept_admin": 200,
    "finance": 403,
    "lead": 403,
    "member": 403,
    "outsider": 404,  # vision is not a tenant they can see
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_teams_quota_is_set_by_its_parents_admins(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    response = set_quota(cast, role, "vision", 7)
    assert response.status_code == SET_TEAM_QUOTA[role], response.content
    guaranteed = Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100).guaranteed
    assert guaranteed == (7 if SET_TEAM_QUOTA[role] == 200 else 6)


READ_QUOTA = dict.fromkeys(ROLE_NAMES, 200) | {"outsider": 404}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_quotas_are_visible_in_the_subtree_only(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    quota = Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100)
    client = client_for(cast.user(role))
    assert client.get(f"/api/v1/quotas/{quota.pk}/").status_code == READ_QUOTA[role]
    tenants = {q["tenant"] for q in client.get("/api/v1/quotas/").json()["results"]}
    assert ("globex" in tenants) == (role in ("platform_admin", "outsider"))
    assert ("vision" in tenants) == (role != "outsider")


def test_a_quota_above_what_the_parent_has_left_is_a_422_with_the_numbers(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    response = set_quota(cast, "dept_admin", "vision", 9)
    assert response.status_code == 422
    assert response.json()["guaranteed"] == [
        "vision asks 9 h100-80gb, parent research has 8 unassigned "
        "(guaranteed 10, 2 given to other sub-tenants)."
    ]
    assert Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100).guaranteed == 6


def test_a_parent_cannot_drop_below_its_childrens_guarantees(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    response = set_quota(cast, "platform_admin", "research", 7)
    assert response.status_code == 422
    assert "sub-tenants already hold 8 h100-80gb" in response.json()["guaranteed"][0]


@pytest.mark.parametrize(
    ("extra", "field", "words", "status"),
    [
        ({"guaranteed": -1}, "guaranteed", "greater than or equal to 0", 400),
        ({"guaranteed": 1.5}, "guaranteed", "valid integer", 400),
        ({"guaranteed": 2, "lend_limit": 3}, "lend_limit", "exceeds guaranteed 2", 422),
        ({"flavour": "gpu-east/b200"}, "flavour", "h100-80gb", 404),  # names no flavour
        ({"flavour": "h100-80gb"}, "flavour", "<cluster>/<flavour>", 400),
    ],
)
def test_bad_quota_input_is_refused_naming_the_field(
    fake_cluster: FakeCluster,
    cast: Cast,
    extra: dict[str, object],
    field: str,
    words: str,
    status: int,
) -> None:
    payload = {"tenant": "vision", "flavour": H100, "guaranteed": 1} | extra
    response = client_for(cast.dept_admin).post("/api/v1/quotas/", payload, format="json")
    assert response.status_code == status
    assert words in " ".join(response.json()[field])


def test_top_level_guarantees_cannot_pass_capacity_without_an_explicit_overcommit(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    response = set_quota(cast, "platform_admin", "acme", 13)
    assert response.status_code == 422
    assert (
        "top-level guarantees would total 17 h100-80gb but the cluster has 16"
        in (response.json()["guaranteed"][0])
    )
    assert set_quota(cast, "dept_admin", "research", 10, overcommit_allowed=True).status_code == 403
    response = set_quota(cast, "platform_admin", "acme", 13, overcommit_allowed=True)
    assert response.status_code == 200 and response.json()["overcommitted"] is True
    flavour = client_for(cast.dept_admin).get(f"/api/v1/flavours/{fake_cluster.h100.pk}/").json()
    assert flavour["overcommitted"] is True


def test_every_quota_change_is_audited(fake_cluster: FakeCluster, cast: Cast) -> None:
    set_quota(cast, "dept_admin", "vision", 5)
    event = AuditEvent.objects.get(object_type="scheduler_bridge.quota")
    assert event.before is not None and event.after is not None
    assert (event.before["guaranteed"], event.after["guaranteed"]) == (6, 5)
    assert event.tenant == cast.team_a


def test_lead_asks_admin_approves_and_the_quota_applies_in_one_go(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    lead = client_for(cast.lead)
    response = lead.post(
        "/api/v1/quota-requests/",
        {"tenant": "vision", "flavour": H100, "guaranteed": 8, "justification": "new model"},
        format="json",
    )
    assert response.status_code == 201, response.content
    request_id = response.json()["id"]
    assert lead.post(f"/api/v1/quota-requests/{request_id}/approve/").status_code == 403
    response = client_for(cast.dept_admin).post(
        f"/api/v1/quota-requests/{request_id}/approve/", {"comment": "ok"}, format="json"
    )
    assert response.status_code == 200 and response.json()["state"] == "approved"
    assert Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100).guaranteed == 8
    events = AuditEvent.objects.filter(tenant=cast.team_a).values_list("object_type", "action")
    assert ("scheduler_bridge.quotarequest", "update") in set(events)
    assert ("scheduler_bridge.quota", "update") in set(events)
    again = client_for(cast.dept_admin).post(f"/api/v1/quota-requests/{request_id}/approve/")
    assert again.status_code == 409 and "already approved" in again.json()["detail"]


def test_an_approval_that_no_longer_fits_is_refused_and_stays_pending(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    request = quota_request_create(
        actor=cast.lead,
        tenant=cast.team_a,
        flavour=fake_cluster.h100,
        guaranteed=8,  # all that research has left for it now
        justification="bigger runs",
    )
    # meanwhile its sibling is given one more
    from scheduler_bridge.quotas.services import quota_set

    quota_set(actor=cast.dept_admin, tenant=cast.team_b, flavour=fake_cluster.h100, guaranteed=3)
    response = client_for(cast.dept_admin).post(f"/api/v1/quota-requests/{request.pk}/approve/")
    assert response.status_code == 422 and "7 unassigned" in response.json()["guaranteed"][0]
    request.refresh_from_db()
    assert request.state == "pending"
    assert Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100).guaranteed == 6


def test_a_request_that_cannot_fit_now_is_a_422_with_the_largest_ask(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    response = client_for(cast.lead).post(
        "/api/v1/quota-requests/",
        {
            "tenant": "vision",
            "flavour": H100,
            "guaranteed": 500,
            "justification": "x",
        },
        format="json",
    )
    assert response.status_code == 422
    assert "The most vision can ask for now is 8 h100-80gb." in response.json()["guaranteed"][0]
    assert not QuotaRequest.objects.exists()


def test_rejecting_needs_a_comment(fake_cluster: FakeCluster, cast: Cast) -> None:
    request = quota_request_create(
        actor=cast.lead,
        tenant=cast.team_a,
        flavour=fake_cluster.h100,
        guaranteed=7,
        justification="x",
    )
    client = client_for(cast.dept_admin)
    response = client.post(f"/api/v1/quota-requests/{request.pk}/reject/")
    assert response.status_code == 422 and "comment" in response.json()
    response = client.post(
        f"/api/v1/quota-requests/{request.pk}/reject/", {"comment": "next quarter"}, format="json"
    )
    assert response.json()["state"] == "rejected"


def test_a_request_for_a_flavour_the_cluster_lacks_is_a_422(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    gone = Flavour.objects.create(
        cluster=fake_cluster.cluster,
        name="l4",
        product="L4",
        resource_name="nvidia.com/gpu",
        capacity=0,
    )
    response = client_for(cast.lead).post(
        "/api/v1/quota-requests/",
        {
            "tenant": "vision",
            "flavour": f"gpu-east/{gone.name}",
            "guaranteed": 1,
            "justification": "inference",
        },
        format="json",
    )
    assert response.status_code == 422
    assert "currently has no l4" in response.json()["flavour"][0]


REQUEST_VISIBLE = dict.fromkeys(ROLE_NAMES, 200) | {"outsider": 404}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_quota_requests_are_scoped_like_everything_else(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    request = quota_request_create(
        actor=cast.lead,
        tenant=cast.team_a,
        flavour=fake_cluster.h100,
        guaranteed=7,
        justification="x",
    )
    client = client_for(cast.user(role))
    assert client.get(f"/api/v1/quota-requests/{request.pk}/").status_code == REQUEST_VISIBLE[role]
    status = client.post(f"/api/v1/quota-requests/{request.pk}/approve/").status_code
    assert status == {"platform_admin": 200, "dept_admin": 200, "outsider": 404}.get(role, 403)


CLUSTER_VISIBLE = dict.fromkeys(ROLE_NAMES, 200)


@pytest.mark.parametrize("role", [*ROLE_NAMES, "stranger"])
def test_clusters_nodes_and_flavours_are_visible_to_tenants_that_use_them(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    # "stranger": a lead of a tenant with nothing on gpu-east
    if role == "stranger":
        initech = TenantFactory(slug="initech")
        user = UserFactory(username="initech-lead")
        MembershipFactory(user=user, tenant=initech, role=Role.LEAD)
    else:
        user = cast.user(role)
    client = client_for(user)
    expected = 404 if role == "stranger" else 200
    assert client.get("/api/v1/clusters/gpu-east/").status_code == expected
    node = fake_cluster.cluster.nodes.first()
    assert node is not None
    assert client.get(f"/api/v1/nodes/{node.pk}/").status_code == expected
    assert client.get(f"/api/v1/flavours/{fake_cluster.h100.pk}/").status_code == expected
    body = client.get("/api/v1/clusters/gpu-east/").json() if expected == 200 else {}
    assert ("kubeconfig_path" in body) == (role == "platform_admin")


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_only_platform_admins_register_clusters(cast: Cast, role: str) -> None:
    response = client_for(cast.user(role)).post(
        "/api/v1/clusters/",
        {"name": "gpu-west", "gateway": "kubernetes", "kubeconfig_path": "/etc/tidegate/west"},
        format="json",
    )
    assert response.status_code == (201 if role == "platform_admin" else 403)
    assert Cluster.objects.filter(name="gpu-west").exists() == (role == "platform_admin")


def test_a_kubernetes_cluster_needs_exactly_one_way_to_connect(cast: Cast) -> None:
    response = client_for(cast.platform_admin).post(
        "/api/v1/clusters/", {"name": "gpu-west", "gateway": "kubernetes"}, format="json"
    )
    assert response.status_code == 422
    assert "exactly one of" in response.json()["kubeconfig_path"][0]


@pytest.mark.django_db(transaction=True)
def test_two_approvals_at_once_never_hand_out_more_than_the_parent_has() -> None:
    """vision and speech each ask for 6 of research's 8 unassigned: only one can win."""
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    org = TenantFactory(slug="org")
    teams = [TenantFactory(slug=s, parent=org) for s in ("vision", "speech")]
    cluster = Cluster.objects.create(name="c1", gateway="simulated")
    flavour = Flavour.objects.create(
        cluster=cluster,
        name="h100-80gb",
        product="H100-80GB",
        resource_name="nvidia.com/gpu",
        capacity=8,
    )
    Quota.objects.create(tenant=org, flavour=flavour, guaranteed=8)
    requests = [
        QuotaRequest.objects.create(
            tenant=t, flavour=flavour, guaranteed=6, justification="x", requested_by=root
        )
        for t in teams
    ]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def approve(request: QuotaRequest) -> None:
        try:
            barrier.wait()
            quota_request_approve(actor=root, request=request)
            outcomes.append("approved")
        except Exception as error:  # noqa: BLE001 - the loser's error is the point
            outcomes.append(type(error).__name__)
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(r,)) for r in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["ValidationFailed", "approved"]
    assert sum(Quota.objects.filter(tenant__in=teams).values_list("guaranteed", flat=True)) == 6
    assert QuotaRequest.objects.filter(state="pending").count() == 1


def test_an_admin_maps_dra_drivers_to_flavours_and_a_bad_map_says_what_is_wrong(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    url = "/api/v1/clusters/gpu-east/"
    admin = client_for(cast.platform_admin)
    mapped = {"gpu.amd.com": "mi300x"}
    answer = admin.patch(url, {"dra_flavours": mapped}, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["dra_flavours"] == mapped
    for bad, says, status in [  # 400: not an object, as the schema says; 422: a rule
        (["gpu.amd.com"], "Give an object of driver name to flavour name", 400),
        ({"Not A Driver": "mi300x"}, "is not a DRA driver name", 422),
        ({"gpu.nvidia.com": "h100"}, "named from their own attributes", 422),
        ({"gpu.amd.com": "MI 300X"}, "is not a flavour name", 422),
    ]:
        refused = admin.patch(url, {"dra_flavours": bad}, format="json")
        assert refused.status_code == status, refused.json()
        assert says in str(refused.json()["dra_flavours"])
    lead = client_for(cast.user("lead")).patch(url, {"dra_flavours": {}}, format="json")
    assert lead.status_code in (403, 404)
    fake_cluster.cluster.refresh_from_db()
    assert fake_cluster.cluster.dra_flavours == mapped
