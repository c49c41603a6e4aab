"""Portal parts of the scheduler bridge: the quota panel of a tenant page, quota requests
from leads, and the cluster pages (capacity vs guarantees, nodes and MIG layouts)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from scheduler_bridge import selectors
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.quotas import services as quota_services
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from scheduler_bridge.workloads.selectors import held_by_node, holdings_by_tenant_and_flavour
from tenants import access
from tenants.errors import TidegateError
from tenants.models import Role, Tenant
from tenants.portal.views import visible_tenant_or_404


def quota_deletion_blocker(tenant: Tenant) -> str | None:
    count = Quota.objects.filter(tenant=tenant).count()
    return f"{count} quota(s)" if count else None


class QuotaRequestForm(forms.Form):
    flavour = forms.ModelChoiceField(queryset=Flavour.objects.none(), label=gettext_lazy("Flavour"))
    guaranteed = forms.IntegerField(min_value=0, label=gettext_lazy("Guaranteed GPUs"))
    borrow_limit = forms.IntegerField(
        min_value=0, required=False, label=gettext_lazy("Borrow limit")
    )
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), label=gettext_lazy("Why")
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["flavour"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = selectors.flavours_visible_to(user).filter(capacity__gt=0)


def _asked(request: HttpRequest) -> dict[str, Any]:
    """A quota request form prefilled from a link (``?flavour=<id>&guaranteed=<n>``, as
    the page of work that cannot run as asked links here); unreadable values are left out."""
    initial: dict[str, Any] = {}
    for key in ("flavour", "guaranteed"):
        value = request.GET.get(key, "")
        if value.isdigit():
            initial[key] = int(value)
    return initial


def quota_panel(request: HttpRequest, tenant: Tenant) -> dict[str, Any] | None:
    quotas = list(Quota.objects.filter(tenant=tenant).select_related("flavour", "flavour__cluster"))
    requests = QuotaRequest.objects.filter(tenant=tenant).select_related("flavour", "requested_by")[
        :10
    ]
    may_ask = access.has_role(request.user, tenant, [Role.LEAD, Role.ADMIN])
    overcommitted = selectors.overcommitted_flavour_ids([q.flavour_id for q in quotas])
    held = holdings_by_tenant_and_flavour()
    for quota in quotas:
        core, elastic = held.get((tenant.pk, quota.flavour_id), (0, 0))
        quota.held_core, quota.held_elastic = core, elastic  # type: ignore[attr-defined]
    return {
        "template": "scheduler_bridge/quota_panel.html",
        "quotas": quotas,
        "requests": requests,
        "overcommitted": overcommitted if tenant.parent_id is None else set(),
        "may_ask": may_ask,
        "may_decide": quota_services.can_set_quota(request.user, tenant),
        "form": QuotaRequestForm(user=request.user, initial=_asked(request)) if may_ask else None,
        "tenant": tenant,
    }


@login_required
@require_POST
def quota_request_add(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = visible_tenant_or_404(request, slug)
    if not access.has_role(request.user, tenant, [Role.LEAD, Role.ADMIN]):
        raise PermissionDenied
    form = QuotaRequestForm(request.POST, user=request.user)
    if form.is_valid():
        try:
            quota_services.quota_request_create(
                actor=request.user, tenant=tenant, source="portal", **form.cleaned_data
            )
        except TidegateError as error:
            messages.error(request, error.message)
        else:
            messages.success(request, _("Quota request sent."))
    else:
        messages.error(
            request,
            "; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items()),
        )
    return redirect("portal-tenant", slug=tenant.slug)


DECIDED = {
    "approve": gettext_lazy("Quota request approved."),
    "reject": gettext_lazy("Quota request rejected."),
}


@login_required
@require_POST
def quota_request_decide(request: HttpRequest, request_id: int, decision: str) -> HttpResponse:
    quota_request = get_object_or_404(
        selectors.quota_requests_visible_to(request.user), pk=request_id
    )
    decide = {
        "approve": quota_services.quota_request_approve,
        "reject": quota_services.quota_request_reject,
    }.get(decision)
    if decide is None:
        raise PermissionDenied
    try:
        decide(
            actor=request.user,
            request=quota_request,
            comment=request.POST.get("comment", ""),
            source="portal",
        )
    except TidegateError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, DECIDED[decision])
    return redirect("portal-tenant", slug=quota_request.tenant.slug)


def capacity_chart(cluster: Cluster) -> str:
    """Capacity vs top-level guarantee per flavour, as an embeddable plotly div."""
    flavours = list(Flavour.objects.filter(cluster=cluster).order_by("name"))
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
    return str(figure.to_html(full_html=False, include_plotlyjs=False, div_id="capacity-chart"))


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    clusters = selectors.clusters_visible_to(request.user).order_by("name")
    return render(request, "scheduler_bridge/cluster_list.html", {"clusters": clusters})


@login_required
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(selectors.clusters_visible_to(request.user), name=name)
    nodes = list(cluster.nodes.filter(present=True).order_by("name"))
    held = held_by_node(cluster)
    for node in nodes:
        node.held = held.get(node.name, {})  # type: ignore[attr-defined]
    context = {
        "cluster": cluster,
        "flavours": Flavour.objects.filter(cluster=cluster).order_by("name"),
        "nodes": nodes,
        "chart": capacity_chart(cluster),
        "is_platform_admin": access.is_platform_admin(request.user),
        "overcommitted": selectors.overcommitted_flavour_ids(),
    }
    return render(request, "scheduler_bridge/cluster_detail.html", context)


urlpatterns = [
    path("clusters/", cluster_list, name="portal-clusters"),
    path("clusters/<slug:name>/", cluster_detail, name="portal-cluster"),
    path(
        "tenants/<slug:slug>/quota-requests/add/",
        quota_request_add,
        name="portal-quota-request-add",
    ),
    path(
        "quota-requests/<int:request_id>/<str:decision>/",
        quota_request_decide,
        name="portal-quota-request-decide",
    ),
]
