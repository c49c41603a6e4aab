"""Portal parts of the queue: the tenant page's queue panel, a cluster's queue page with a
chart of what each tenant holds against its guarantee, and a page per workload (where it
stands, why it waits, every run it had) with its cancel button."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from functools import wraps
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.paginator import Paginator
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from scheduler_bridge import selectors
from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.quotas.services import quota_offer
from scheduler_bridge.workloads import services
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.records import parse_borrowed
from scheduler_bridge.workloads.runs import PREEMPTED, past_runs
from scheduler_bridge.workloads.selectors import workloads_visible_to
from tenants import access
from tenants.deletion import Description, said
from tenants.errors import TidegateError
from tenants.models import AuditEvent, Tenant
from tenants.plotly_div import plotly_div
from tenants.portal.views import visible_tenant_or_404


def workload_deletion_blocker(tenant: Tenant) -> Description | None:
    count = Workload.objects.filter(tenant=tenant).count()
    if not count:
        return None
    return said(lambda: _("%(count)s workload(s) in its history") % {"count": count})


def live_login_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """``login_required`` for views a page polls: when the session has ended, an htmx
    request gets the browser sent to the login page (HX-Redirect) instead of the login
    form swapped into the polled section."""
    guarded = login_required(view)

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.htmx and not request.user.is_authenticated:  # type: ignore[attr-defined]
            return HttpResponseClientRedirect(redirect_to_login(request.get_full_path()).url)
        return guarded(request, *args, **kwargs)

    return wrapper


PANEL_SIZE = 50
# how often an open page asks for its queue again (seconds)
LIVE_EVERY_S = 5


def queue_panel(request: HttpRequest, tenant: Tenant) -> dict[str, Any] | None:
    """The open work of the tenant's subtree in queue order (the first PANEL_SIZE, with
    the count of the rest), refreshed by the page through ``tenant_queue_part``."""
    open_work = workloads_visible_to(request.user).filter(
        tenant__path__startswith=tenant.path, state__in=Workload.OPEN_STATES
    )
    workloads = list(open_work.order_by(*Workload.QUEUE_ORDER)[:PANEL_SIZE])
    total = len(workloads) if len(workloads) < PANEL_SIZE else open_work.count()
    return {
        "template": "scheduler_bridge/queue_panel.html",
        "tenant": tenant,
        "workloads": workloads,
        "total": total,
        "every_s": LIVE_EVERY_S,
    }


@live_login_required
def tenant_queue_part(request: HttpRequest, slug: str) -> HttpResponse:
    """The tenant page's queue panel alone, for htmx to swap in; a plain visit goes to
    the panel on the tenant page."""
    tenant = visible_tenant_or_404(request, slug)
    if not request.htmx:  # type: ignore[attr-defined]
        return redirect(reverse("portal-tenant", args=[tenant.slug]) + "#queue")
    return render(
        request, "scheduler_bridge/queue_panel.html", {"panel": queue_panel(request, tenant)}
    )


def holdings_chart(cluster: Any, visible_slugs: set[str]) -> str:
    """GPU-equivalents each visible tenant holds now, split into within-guarantee and
    borrowed, next to its guarantee."""
    held: dict[str, float] = defaultdict(float)
    borrowed: dict[str, float] = defaultdict(float)
    rows = Workload.objects.filter(cluster=cluster, state__in=Workload.ACTIVE_STATES).values_list(
        "tenant__slug", "flavour__gpu_equivalent", "gpus", "borrowed"
    )
    for slug, gpu_equivalent, gpus, lent_raw in rows:
        weight = float(gpu_equivalent) if gpu_equivalent is not None else 1.0
        lent = sum(parse_borrowed(lent_raw).values())
        held[slug] += (gpus - lent) * weight
        borrowed[slug] += lent * weight
    guaranteed: dict[str, float] = defaultdict(float)
    quotas = (
        Quota.objects.filter(flavour__cluster=cluster)
        .values("tenant__slug", "flavour__gpu_equivalent")
        .annotate(total=Sum("guaranteed"))
    )
    for row in quotas:
        guaranteed[row["tenant__slug"]] += row["total"] * float(row["flavour__gpu_equivalent"])
    parents = set(Tenant.objects.filter(children__isnull=False).values_list("slug", flat=True))
    shown = set(held) | set(borrowed) | (set(guaranteed) - parents)
    leaves = sorted(shown & visible_slugs)
    # a plain figure written without plotly.py's validation (which costs more than the
    # chart), with plotly's default template as a validated figure would carry
    figure = {
        "data": [
            {
                "type": "bar",
                "name": _("Held within guarantee"),
                "x": leaves,
                "y": [held[s] for s in leaves],
            },
            {"type": "bar", "name": _("Borrowed"), "x": leaves, "y": [borrowed[s] for s in leaves]},
            {
                "type": "scatter",
                "name": _("Guaranteed"),
                "x": leaves,
                "y": [guaranteed[s] for s in leaves],
                "mode": "markers",
                "marker": {"symbol": "line-ew-open", "size": 28, "line": {"width": 3}},
            },
        ],
        "layout": {
            "template": _plotly_template(),
            "barmode": "stack",
            "height": 320,
            "margin": {"l": 40, "r": 10, "t": 30, "b": 60},
            "title": {"text": _("GPU-equivalents held per team")},
            "yaxis": {"title": {"text": _("GPU-equivalents")}},
        },
    }
    return str(plotly_div(figure, "holdings-chart"))


_TEMPLATE: dict[str, Any] = {}


def _plotly_template() -> dict[str, Any]:
    if not _TEMPLATE:
        _TEMPLATE.update(pio.templates[pio.templates.default].to_plotly_json())
    return _TEMPLATE


QUEUE_PAGE_SIZE = 100
QUEUE_STATES = {"pending": [Workload.State.PENDING], "running": list(Workload.ACTIVE_STATES)}
# columns the queue table never reads (workload_table.html)
QUEUE_UNSHOWN = (
    "job_events",
    "held_placements",
    "past_runs",
    "topology",
    "apply_error",
    "elastic_pods",
)


@live_login_required
def cluster_queue(request: HttpRequest, name: str) -> HttpResponse:
    """The cluster's open work in queue order, a page at a time (a deep queue holds tens
    of thousands), optionally one team's only or one state only."""
    cluster = get_object_or_404(selectors.clusters_visible_to(request.user), name=name)
    workloads = workloads_visible_to(request.user).filter(cluster=cluster)
    team = request.GET.get("tenant", "")
    if team:  # the team and its sub-teams, as the queue command does
        chosen = access.tenants_visible_to(request.user).filter(slug=team).first()
        if chosen is None:
            workloads = workloads.none()
        else:
            workloads = workloads.filter(tenant__path__startswith=chosen.path)
    counts = dict(
        workloads.filter(state__in=Workload.OPEN_STATES)
        .order_by()
        .values_list("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
    )
    state = request.GET.get("state", "")
    shown_states = QUEUE_STATES.get(state, Workload.OPEN_STATES)
    workloads = workloads.filter(state__in=shown_states)
    # the table's rows only: no joins it does not show, no history columns
    rows = (
        workloads.select_related(None)
        .select_related("tenant", "flavour")
        .defer(*QUEUE_UNSHOWN)
        .order_by(*Workload.QUEUE_ORDER)
    )
    paginator = Paginator(rows, QUEUE_PAGE_SIZE)
    # the count per state is known already: the paginator need not count again
    paginator.count = sum(counts.get(s, 0) for s in shown_states)  # type: ignore[misc]
    page = paginator.get_page(request.GET.get("page"))
    context = {
        "cluster": cluster,
        "workloads": page.object_list,
        "page": page,
        "state": state if state in QUEUE_STATES else "",
        "tenant": team,
        "pending_count": counts.get(Workload.State.PENDING, 0),
        "running_count": sum(counts.get(s, 0) for s in Workload.ACTIVE_STATES),
        "every_s": LIVE_EVERY_S,
    }
    visible = set(access.tenants_visible_to(request.user).values_list("slug", flat=True))
    context["chart"] = holdings_chart(cluster, visible)
    if request.htmx:  # type: ignore[attr-defined]
        # the page polls its live part: chart, counts and table together, with the same
        # filters and page, so no part of the page says something another part does not
        return render(request, "scheduler_bridge/cluster_queue_live.html", context)
    return render(request, "scheduler_bridge/cluster_queue.html", context)


def runs_chart(workload: Workload) -> str:
    """Each run of the workload as a bar from admission to its end (or now)."""
    runs = [
        (r.admitted_at, r.ended_at, r.ended_by == PREEMPTED) for r in past_runs(workload.past_runs)
    ]
    if workload.admitted_at is not None:
        runs.append((workload.admitted_at, workload.finished_at or timezone.now(), False))
    figure = go.Figure()
    for number, (start, end, preempted) in enumerate(runs, start=1):
        label = _("Run %(number)s") % {"number": number}
        figure.add_trace(
            go.Scatter(
                x=[start, end],
                y=[label, label],
                mode="lines+markers",
                line={"width": 14, "color": "#c0392b" if preempted else "#2e86c1"},
                name=_("preempted") if preempted else label,
                showlegend=False,
                hovertemplate="%{x}<extra></extra>",
            )
        )
    figure.update_layout(
        height=80 + 40 * len(runs),
        margin={"l": 60, "r": 10, "t": 30, "b": 30},
        title=_("Runs (red: ended by preemption)"),
    )
    return str(plotly_div(figure, "runs-chart"))


# How the history names each life-cycle transition (lifecycle.TRANSITIONS).
TRANSITION_LABELS = {
    "submit": gettext_lazy("submitted"),
    "reject": gettext_lazy("rejected"),
    "admit": gettext_lazy("admitted"),
    "start": gettext_lazy("started"),
    "requeue": gettext_lazy("back in the queue"),
    "preempt": gettext_lazy("preempted"),
    "finish": gettext_lazy("finished"),
    "fail": gettext_lazy("failed"),
    "time_out": gettext_lazy("stopped at its time limit"),
    "cancel": gettext_lazy("cancelled"),
    "release": gettext_lazy("completed pods gave their GPUs back"),
    "resize": gettext_lazy("grew or shrank (elastic pods)"),
    "announce": gettext_lazy("preemption announced"),
}


@login_required
def workload_detail(request: HttpRequest, pk: int) -> HttpResponse:
    workload = get_object_or_404(workloads_visible_to(request.user), pk=pk)
    # whoever may see the workload sees what happened to it (preempted by whom, stopped)
    history = list(
        AuditEvent.objects.filter(
            object_type=Workload._meta.label_lower, object_id=str(workload.pk)
        ).order_by("-created_at", "-id")[:50]
    )
    for event in history:
        after = event.after if isinstance(event.after, dict) else {}
        label = TRANSITION_LABELS.get(str(after.get("transition", "")))
        event.label = label or event.get_action_display()  # type: ignore[attr-defined]
    has_runs = workload.admitted_at is not None or bool(workload.past_runs)
    context = _standing(request, workload) | {
        "history": history,
        "past_runs": past_runs(workload.past_runs, workload.pk),
        "chart": runs_chart(workload) if has_runs else "",
    }
    return render(request, "scheduler_bridge/workload_detail.html", context)


def _standing(request: HttpRequest, workload: Workload) -> dict[str, Any]:
    """Where the workload stands: its state, why it waits or where it runs, its pods and
    the cancel button; open work's page polls it (closed work changes no more)."""
    is_open = workload.state in Workload.OPEN_STATES
    offer = None
    ask = workload.quota_ask() if workload.state == "pending" and workload.inadmissible else None
    if ask is not None:
        flavour = Flavour.objects.get(pk=ask["flavour"])
        offer = quota_offer(request.user, workload.tenant, flavour, ask["guaranteed"])
    return {
        "offer": offer,
        "workload": workload,
        "may_cancel": is_open and services.may_manage(request.user, workload),
        "pods": workload.pods_report(),
        "live": is_open,
        "live_every_s": LIVE_EVERY_S,
    }


@live_login_required
def workload_standing(request: HttpRequest, pk: int) -> HttpResponse:
    """The workload page's standing section alone, for htmx to swap in."""
    workload = get_object_or_404(workloads_visible_to(request.user), pk=pk)
    if not request.htmx:  # type: ignore[attr-defined]
        return redirect("portal-workload", pk=workload.pk)
    # the state badge in the page's heading changes with it (an out-of-band swap)
    context = _standing(request, workload) | {"oob": True}
    return render(request, "scheduler_bridge/workload_standing.html", context)


@login_required
@require_POST
def workload_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    workload = get_object_or_404(workloads_visible_to(request.user), pk=pk)
    was_running = workload.state in Workload.ACTIVE_STATES
    try:
        services.workload_cancel(actor=request.user, workload=workload, source="portal")
    except TidegateError as error:
        messages.error(request, error.message)
    else:
        messages.success(
            request,
            _("Workload cancelled; its GPUs are free for the queue.")
            if was_running
            else _("Workload cancelled."),
        )
    return redirect("portal-workload", pk=workload.pk)


urlpatterns = [
    path("tenants/<slug:slug>/queue/", tenant_queue_part, name="portal-tenant-queue"),
    path("clusters/<slug:name>/queue/", cluster_queue, name="portal-cluster-queue"),
    path("workloads/<int:pk>/", workload_detail, name="portal-workload"),
    path("workloads/<int:pk>/cancel/", workload_cancel, name="portal-workload-cancel"),
    path("workloads/<int:pk>/standing/", workload_standing, name="portal-workload-standing"),
]
