"""Reads of the scheduler bridge, all scoped through `tenants.access`."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet, Sum

from scheduler_bridge.inventory.models import Cluster, Flavour, FlavourQuerySet, Node
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from scheduler_bridge.quotas.rules import is_overcommitted
from tenants import access
from tenants.models import NamespaceBinding


def clusters_visible_to(user: Any) -> QuerySet[Cluster]:
    """Platform admins see every cluster; others the clusters their tenants use
    (a namespace bound there, or a quota on one of its flavours)."""
    if access.is_platform_admin(user):
        return Cluster.objects.all()
    bound = NamespaceBinding.objects.filter(access.tenant_filter(user)).values("cluster_name")
    with_quota = Quota.objects.filter(access.tenant_filter(user)).values("flavour__cluster_id")
    return Cluster.objects.filter(Q(name__in=bound) | Q(pk__in=with_quota))


def nodes_visible_to(user: Any) -> QuerySet[Node]:
    return Node.objects.filter(cluster__in=clusters_visible_to(user)).select_related("cluster")


def flavours_visible_to(user: Any) -> FlavourQuerySet:
    found: FlavourQuerySet = Flavour.objects.filter(
        cluster__in=clusters_visible_to(user)
    ).select_related("cluster")
    return found


def quotas_visible_to(user: Any) -> QuerySet[Quota]:
    return Quota.objects.filter(access.tenant_filter(user)).select_related(
        "tenant", "flavour", "flavour__cluster"
    )


def quota_requests_visible_to(user: Any) -> QuerySet[QuotaRequest]:
    return QuotaRequest.objects.filter(access.tenant_filter(user)).select_related(
        "tenant", "flavour", "flavour__cluster", "requested_by", "decided_by"
    )


def top_level_guaranteed(flavour: Flavour) -> int:
    total = Quota.objects.filter(flavour=flavour, tenant__parent__isnull=True).aggregate(
        total=Sum("guaranteed")
    )["total"]
    return int(total or 0)


def overcommitted_flavour_ids(flavour_ids: list[int] | None = None) -> set[int]:
    """Flavours whose top-level guarantees exceed what the cluster can give them (GPUs
    split on claim counted as if laid out for each: Flavour.guarantee_ceiling)."""
    rows = Quota.objects.filter(tenant__parent__isnull=True)
    if flavour_ids is not None:
        rows = rows.filter(flavour_id__in=flavour_ids)
    totals = rows.values("flavour_id", "flavour__capacity", "flavour__most_capacity").annotate(
        total=Sum("guaranteed")
    )
    return {
        row["flavour_id"]
        for row in totals
        if is_overcommitted(
            top_level_guaranteed=row["total"],
            capacity=max(row["flavour__capacity"], row["flavour__most_capacity"]),
        )
    }
