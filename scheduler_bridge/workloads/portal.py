"""Portal parts of the queue: the tenant page's queue panel and a cluster's queue page
with a chart of what each tenant holds against its guarantee."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import path
from django.utils.translation import gettext as _

from scheduler_bridge import selectors
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.selectors import workloads_visible_to
from tenants.models import Tenant


def workload_deletion_blocker(tenant: Tenant) -> str | None:
    count = Workload.objects.filter(tenant=tenant).count()
    return f"{count} workload(s) in its history" if count else None


def queue_panel(request: HttpRequest, tenant: Tenant) -> dict[str, Any] | None:
    workloads = (
        workloads_visible_to(request.user)
        .filter(tenant__path__startswith=tenant.path, state__in=Workload.OPEN_STATES)
        .order_by("state", "queue_position", "submitted_at")[:50]
    )
    return {"template": "scheduler_bridge/queue_panel.html", "workloads": list(workloads)}


def holdings_chart(cluster: Any, visible_slugs: set[str]) -> str:
    """GPU-equivalents each visible tenant holds now, split into within-guarantee and
    borrowed, next to its guarantee."""
    held: dict[str, float] = defaultdict(float)
    borrowed: dict[str, float] = defaultdict(float)
    for workload in Workload.objects.filter(
        cluster=cluster, state__in=Workload.ACTIVE_STATES
    ).select_related("tenant", "flavour"):
        weight = float(workload.flavour.gpu_equivalent) if workload.flavour else 1.0
        lent = sum(int(v) for v in (workload.borrowed or {}).values())
        held[workload.tenant.slug] += (workload.gpus - lent) * weight
        borrowed[workload.tenant.slug] += lent * weight
    guaranteed: dict[str, float] = defaultdict(float)
    rows = (
        Quota.objects.filter(flavour__cluster=cluster)
        .values("tenant__slug", "flavour__gpu_equivalent")
        .annotate(total=Sum("guaranteed"))
    )
    for row in rows:
        guaranteed[row["tenant__slug"]] += row["total"] * float(row["flavour__gpu_equivalent"])
    parents = set(Tenant.objects.filter(children__isnull=False).values_list("slug", flat=True))
    shown = set(held) | set(borrowed) | (set(guaranteed) - parents)
    leaves = sorted(shown & visible_slugs)
    figure = go.Figure(
        data=[
            go.Bar(name=_("Held within guarantee"), x=leaves, y=[held[s] for s in leaves]),
            go.Bar(name=_("Borrowed"), x=leaves, y=[borrowed[s] for s in leaves]),
            go.Scatter(
                name=_("Guaranteed"),
                x=leaves,
                y=[guaranteed[s] for s in leaves],
                mode="markers",
                marker={"symbol": "line-ew-open", "size": 28, "line": {"width": 3}},
            ),
        ]
    )
    figure.update_layout(
        barmode="stack",
        height=320,
        margin={"l": 40, "r": 10, "t": 30, "b": 60},
        title=_("GPU-equivalents held per team"),
        yaxis_title=_("GPU-equivalents"),
    )
    return str(figure.to_html(full_html=False, include_plotlyjs=False, div_id="holdings-chart"))


@login_required
def cluster_queue(request: HttpRequest, name: str) -> HttpResponse:
    from tenants import access

    cluster = get_object_or_404(selectors.clusters_visible_to(request.user), name=name)
    workloads = (
        workloads_visible_to(request.user)
        .filter(cluster=cluster, state__in=Workload.OPEN_STATES)
        .order_by("state", "queue_position", "submitted_at")
    )
    visible = set(access.tenants_visible_to(request.user).values_list("slug", flat=True))
    context = {
        "cluster": cluster,
        "workloads": workloads,
        "chart": holdings_chart(cluster, visible),
    }
    return render(request, "scheduler_bridge/cluster_queue.html", context)


urlpatterns = [path("clusters/<slug:name>/queue/", cluster_queue, name="portal-cluster-queue")]
