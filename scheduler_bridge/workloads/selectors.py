"""Reads about queue-admitted work that other parts of the bridge need."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import QuerySet

from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.workloads.models import Workload
from tenants import access


def borrowed_by_tenant(cluster: Cluster) -> dict[int, dict[str, int]]:
    """GPUs the admission queue currently lends each tenant on `cluster`, per resource
    name: what admitted workloads borrowed above their tenant's guarantee."""
    lent: dict[int, dict[str, int]] = defaultdict(dict)
    rows = Workload.objects.filter(cluster=cluster, state__in=Workload.ACTIVE_STATES).values_list(
        "tenant_id", "borrowed"
    )
    for tenant_id, borrowed in rows:
        for resource, amount in (borrowed or {}).items():
            lent[tenant_id][resource] = lent[tenant_id].get(resource, 0) + int(amount)
    return dict(lent)


def workloads_visible_to(user: Any) -> QuerySet[Workload]:
    return Workload.objects.filter(access.tenant_filter(user)).select_related(
        "tenant", "cluster", "flavour", "priority_class", "submitted_by"
    )
