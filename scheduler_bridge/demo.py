"""Demo data of the scheduler bridge: the simulated cluster `demo` and its quotas."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.quotas.services import quota_set
from scheduler_bridge.quotas.sync import quota_sync
from tenants.demo import DEMO_CLUSTER, DemoResult
from tenants.models import Tenant

# Share of the parent's guarantee each department gets (the rest stays with the parent,
# shared by its subtree); teams split their department's share evenly.
DEPARTMENT_SHARES = {"research": 0.5, "product": 0.3, "platform": 0.15}


def seed_demo_cluster(result: DemoResult) -> None:
    cluster, created = Cluster.objects.get_or_create(
        name=DEMO_CLUSTER,
        defaults={
            "display_name": "Demo cluster (simulated: 6 x H100, 6 x A100, some with MIG)",
            "gateway": Cluster.Gateway.SIMULATED,
        },
    )
    inventory_sync(cluster)
    if Quota.objects.filter(flavour__cluster=cluster).exists():
        quota_sync(cluster)
        return
    admin = get_user_model().objects.get(username="admin")
    org = Tenant.objects.get(slug="acme")
    for flavour in Flavour.objects.filter(cluster=cluster, capacity__gt=0).order_by("name"):
        quota_set(
            actor=admin,
            tenant=org,
            flavour=flavour,
            guaranteed=flavour.capacity,
            source="system",
            message="demo data",
        )
        for department in org.children.order_by("slug"):
            share = int(flavour.capacity * DEPARTMENT_SHARES.get(department.slug, 0))
            quota_set(
                actor=admin,
                tenant=department,
                flavour=flavour,
                guaranteed=share,
                lend_limit=share,
                source="system",
                message="demo data",
            )
            teams = list(department.children.order_by("slug"))
            for team in teams:
                quota_set(
                    actor=admin,
                    tenant=team,
                    flavour=flavour,
                    guaranteed=share // len(teams),
                    borrow_limit=share,
                    source="system",
                    message="demo data",
                )
    quota_sync(cluster)
    result.created += int(created)
