"""The team lead dashboard: one page per tenant subtree (holdings, usage over time, the
queue, running work, budget and idle GPUs, efficiency per team), each section also served
alone as an htmx partial that the page polls, so it stays current without a reload.

Tenants load only through ``dashboard.selectors.dashboard_tenant_or_404``: a tenant outside
the user's subtrees is a 404, for the page and every partial alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.portal import budget_panel
from dashboard import charts, selectors
from scheduler_bridge.portal.queue import live_login_required
from tenants.models import Tenant


@dataclass(frozen=True)
class Part:
    template: str
    build: Callable[[HttpRequest, Tenant], dict[str, Any]]
    every_s: int  # how often the page asks for it again


def _holdings(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    return {"groups": selectors.subtree_holdings(tenant)}


def _queue(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    return {"queue": selectors.subtree_queue(request.user, tenant)}


def _running(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    return {"running": selectors.subtree_running(request.user, tenant)}


def _usage(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    now = timezone.now()
    points = selectors.usage_series(tenant, now)
    title = _("GPUs allocated and really busy, %(tenant)s") % {"tenant": tenant.name}
    return {"chart": charts.allocated_vs_busy(points, now, title) if points else ""}


def _efficiency(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    rows = selectors.team_efficiency(tenant, timezone.now())
    measured = any(r["efficiency"] is not None for r in rows)
    title = _("Busy / allocated, last %(days)s days") % {"days": selectors.EFFICIENCY_DAYS}
    return {
        "rows": rows,
        "days": selectors.EFFICIENCY_DAYS,
        "chart": charts.efficiency_bars(rows, title) if measured else "",
    }


def _budget(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    panel = budget_panel(request, tenant)
    if panel is None:  # who reads no money sees no budget
        return {"budget": None, "idle": []}
    findings = list(panel.get("findings") or [])
    return {"budget": panel, "idle": selectors.idle_workloads(request.user, tenant, findings)}


# What the queue decides changes by the second; what the ledger says, by the hour (a
# redrawn chart also forgets the range its reader picked, so charts are redrawn rarely).
PARTS: dict[str, Part] = {
    "holdings": Part("dashboard/holdings.html", _holdings, 5),
    "queue": Part("dashboard/queue.html", _queue, 5),
    "running": Part("dashboard/running.html", _running, 5),
    "usage": Part("dashboard/usage.html", _usage, 900),
    "efficiency": Part("dashboard/efficiency.html", _efficiency, 900),
    "budget": Part("dashboard/budget.html", _budget, 300),
}


@login_required
def dashboard_home(request: HttpRequest) -> HttpResponse:
    """The switcher submits here (``?tenant=<slug>``); without one, the first tenant the
    user leads (else the first they see)."""
    slug = request.GET.get("tenant", "")
    if slug:
        tenant = selectors.dashboard_tenant_or_404(request.user, slug)
    else:
        found = selectors.default_tenant(request.user)
        if found is None:  # nobody added them to a tenant yet: say what to do
            return render(request, "dashboard/no_tenant.html")
        tenant = found
    return redirect("dashboard", slug=tenant.slug)


@login_required
def dashboard(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = selectors.dashboard_tenant_or_404(request.user, slug)
    context: dict[str, Any] = {
        "tenant": tenant,
        "tenants": selectors.dashboard_tenants(request.user).only("slug", "name", "depth"),
        "parts": PARTS,
    }
    for name, part in PARTS.items():
        context[name] = part.build(request, tenant) | {"every_s": part.every_s}
    return render(request, "dashboard/dashboard.html", context)


@live_login_required
def dashboard_part(request: HttpRequest, slug: str, part: str) -> HttpResponse:
    """One section of the dashboard alone, for htmx to swap in; a plain visit goes to
    the section on the whole page."""
    tenant = selectors.dashboard_tenant_or_404(request.user, slug)
    found = PARTS.get(part)
    if found is None:
        raise Http404
    if not getattr(request, "htmx", False):
        return redirect(reverse("dashboard", args=[tenant.slug]) + f"#{part}")
    context = {"tenant": tenant, part: found.build(request, tenant) | {"every_s": found.every_s}}
    return render(request, found.template, context)
