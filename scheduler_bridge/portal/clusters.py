"""Cluster pages: the clusters a reader's tenants use, each with capacity vs guarantees,
its nodes with every GPU drawn (MIG slices and what runs on them), sync health for
platform admins; and the priority classes work can run at."""

from __future__ import annotations

import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.db.models import Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.translation import gettext as _

from scheduler_bridge import selectors
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.portal.gpu_map import node_maps
from scheduler_bridge.portal.health import cluster_health
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.models import PriorityClass, Workload
from scheduler_bridge.workloads.selectors import held_by_node
from tenants import access
from tenants.plotly_div import plotly_div


def capacity_chart(cluster: Cluster, flavours: list[Flavour]) -> str:
    """Capacity vs top-level guarantee per flavour, as an embeddable plotly div."""
    guaranteed = dict(
        Quota.objects.filter(flavour__cluster=cluster, tenant__parent__isnull=True)
        .values_list("flavour_id")
        .annotate(total=Sum("guaranteed"))
    )
    names = [f.name for f in flavours]
    figure = go.Figure(
        data=[
            go.Bar(name=_("Capacity"), x=names, y=[f.capacity for f in flavours]),
            go.Bar(
                name=_("Guaranteed (top level)"),
                x=names,
                y=[guaranteed.get(f.pk, 0) for f in flavours],
            ),
        ]
    )
    figure.update_layout(
        barmode="group",
        height=320,
        margin={"l": 40, "r": 10, "t": 30, "b": 80},
        title=_("Capacity and guarantees per flavour"),
    )
    return str(plotly_div(figure, "capacity-chart"))


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    clusters = selectors.clusters_visible_to(request.user).order_by("name")
    context = {"clusters": clusters, "is_platform_admin": access.is_platform_admin(request.user)}
    return render(request, "scheduler_bridge/cluster_list.html", context)


@login_required
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(selectors.clusters_visible_to(request.user), name=name)
    nodes = list(cluster.nodes.filter(present=True).order_by("name"))
    flavours = list(Flavour.objects.filter(cluster=cluster).order_by("name"))
    held = held_by_node(cluster)
    for node in nodes:
        node.held = held.get(node.name, {})  # type: ignore[attr-defined]
    active = Workload.objects.filter(
        cluster=cluster, state__in=Workload.ACTIVE_STATES
    ).select_related("tenant")
    readable = set(access.tenants_visible_to(request.user).values_list("pk", flat=True))
    is_platform_admin = access.is_platform_admin(request.user)
    context = {
        "cluster": cluster,
        "flavours": flavours,
        "nodes": nodes,
        "maps": node_maps(nodes, flavours, active, readable),
        "chart": capacity_chart(cluster, flavours),
        "is_platform_admin": is_platform_admin,
        "health": cluster_health(cluster) if is_platform_admin else [],
        "overcommitted": selectors.overcommitted_flavour_ids(),
    }
    return render(request, "scheduler_bridge/cluster_detail.html", context)


@login_required
def priority_classes(request: HttpRequest) -> HttpResponse:
    """Read-only: what each priority class means, for whoever sees a cluster."""
    if not selectors.clusters_visible_to(request.user).exists():
        raise Http404
    context = {
        "classes": PriorityClass.objects.order_by("-value", "name"),
        "is_platform_admin": access.is_platform_admin(request.user),
    }
    return render(request, "scheduler_bridge/priority_classes.html", context)
