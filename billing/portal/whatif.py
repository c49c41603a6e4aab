"""The what-if page (platform admins; everyone else gets 404): choose a cluster and a
window, propose guarantees per tenant and flavour, weights, a reclaim minimum run and a
reclaim wait, and see the replay of the cluster's own history under today's quotas and
settings and under the proposal side by side; or ask what static slices would cost for
the same p95 wait.

A run is a Celery task; its page polls its progress (htmx) and reloads when it is done.
With tasks run eagerly (the demo) the result is there when the POST returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from billing.whatif import charts, services
from billing.whatif.records import DEFAULT_POLICY, Proposal, QuotaEntry
from billing.whatif.tables import figure_rows, savings_rows, settings_rows, tenant_wait_rows
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.replay.policies import POLICIES
from tenants.errors import TidegateError

POLICY_LABELS: dict[str, Any] = {
    "static": gettext_lazy("Static slices (no borrowing)"),
    "fifo": gettext_lazy("One shared queue (FIFO)"),
    "fair-share": gettext_lazy("Fair share (Tidegate)"),
    "fair-share-elastic": gettext_lazy("Fair share with elastic jobs"),
}
POLL_EVERY_S = 2


@dataclass(frozen=True)
class Grid:
    """The proposal form's cells: tenants by row, flavours by column."""

    tenants: list[str]
    flavours: list[str]
    weights: dict[str, float]

    def cell(self, row: int, column: int) -> str:
        return f"g_{row}_{column}"


class WhatIfForm(forms.Form):
    kind = forms.ChoiceField(
        label=gettext_lazy("What to run"),
        choices=[
            ("whatif", gettext_lazy("What-if: today's quotas against the proposal")),
            ("savings", gettext_lazy("Savings: the GPUs static slices would need")),
        ],
        initial="whatif",
        widget=forms.RadioSelect,
    )
    policy = forms.ChoiceField(
        label=gettext_lazy("Policy"),
        choices=[(p, POLICY_LABELS[p]) for p in POLICIES],
        initial=DEFAULT_POLICY,
    )
    reclaim_min_run_s = forms.FloatField(
        label=gettext_lazy("Reclaim minimum run (seconds)"),
        min_value=0,
        max_value=30 * 86_400,
        help_text=gettext_lazy("Borrowed work runs this long before its owner may reclaim it."),
    )
    reclaim_wait_s = forms.FloatField(
        label=gettext_lazy("Reclaim wait (seconds)"),
        min_value=0,
        max_value=services.MAX_RECLAIM_WAIT_S,
        required=False,  # left empty (as the page offers it): today's
        help_text=gettext_lazy(
            "Work inside its guarantee waits this long for GPUs to free before it "
            "preempts. Left empty: today's, shown in the field."
        ),
    )

    def __init__(
        self,
        *args: Any,
        grid: Grid,
        today: dict[tuple[str, str], int],
        today_reclaim_wait_s: float = 0.0,
        **kw: Any,
    ):
        super().__init__(*args, **kw)
        self.grid = grid
        # empty unless changed: today's wait shows in the field without being proposed
        self.fields["reclaim_wait_s"].widget.attrs["placeholder"] = f"{today_reclaim_wait_s:g}"
        for row, tenant in enumerate(grid.tenants):
            for column, flavour in enumerate(grid.flavours):
                self.fields[grid.cell(row, column)] = forms.IntegerField(
                    label=_("Guarantee of %(tenant)s on %(flavour)s (GPUs)")
                    % {"tenant": tenant, "flavour": flavour},
                    min_value=0,
                    max_value=1_000_000,
                    initial=today.get((tenant, flavour), 0),
                )
            self.fields[f"w_{row}"] = forms.FloatField(
                label=_("Fair-share weight of %(tenant)s") % {"tenant": tenant},
                min_value=0.001,
                max_value=999_999,
                initial=grid.weights.get(tenant, 1.0),
            )

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "tenant": tenant,
                "cells": [self[self.grid.cell(r, c)] for c in range(len(self.grid.flavours))],
                "weight": self[f"w_{r}"],
            }
            for r, tenant in enumerate(self.grid.tenants)
        ]

    def proposal(self) -> Proposal:
        data = self.cleaned_data
        return Proposal(
            quotas=tuple(
                QuotaEntry(tenant, flavour, data[self.grid.cell(r, c)])
                for r, tenant in enumerate(self.grid.tenants)
                for c, flavour in enumerate(self.grid.flavours)
            ),
            weights={tenant: data[f"w_{r}"] for r, tenant in enumerate(self.grid.tenants)},
            reclaim_min_run_s=data["reclaim_min_run_s"],
            policy=data["policy"],
            reclaim_wait_s=data["reclaim_wait_s"],
        )


def _require_admin(request: HttpRequest) -> None:
    if not services.can_run_what_if(request.user):
        raise Http404


def _days(request: HttpRequest) -> int:
    try:
        days = int(request.GET.get("days") or request.POST.get("days") or 30)
    except ValueError:
        return 30
    return min(max(days, 1), services.MAX_DAYS)


def _grid(cluster: Cluster, days: int) -> tuple[Grid, dict[tuple[str, str], int]]:
    tenants = services.history_tenants(cluster=cluster, days=days)
    flavours = list(
        Flavour.objects.filter(cluster=cluster, capacity__gt=0)
        .order_by("name")
        .values_list("name", flat=True)
    )
    weights = services.tenant_weights(tenants)
    return Grid(tenants, flavours, weights), services.today_guarantees(
        cluster=cluster, tenants=tenants
    )


@login_required
def whatif_page(request: HttpRequest) -> HttpResponse:
    """GET: the form for ?cluster=&days= (default: the first cluster, 30 days) and the
    recent runs. POST: queue a run and go to its page; bad input re-renders with errors."""
    _require_admin(request)
    clusters = list(Cluster.objects.order_by("name"))
    name = request.GET.get("cluster") or request.POST.get("cluster")
    cluster = next((c for c in clusters if c.name == name), clusters[0] if clusters else None)
    if name and (cluster is None or cluster.name != name):
        raise Http404
    days = _days(request)
    form: WhatIfForm | None = None
    status = 200
    if cluster is not None:
        grid, today = _grid(cluster, days)
        options = services.today_options()
        initial = {"reclaim_min_run_s": options.reclaim_min_run_s}
        if request.method == "POST":
            form = WhatIfForm(
                request.POST,
                grid=grid,
                today=today,
                today_reclaim_wait_s=options.reclaim_wait_s,
                initial=initial,
            )
            if form.is_valid() and grid.tenants:
                try:
                    run = services.whatif_run_create(
                        actor=request.user,
                        cluster=cluster,
                        kind=form.cleaned_data["kind"],
                        days=days,
                        proposal=form.proposal(),
                    )
                except TidegateError as error:
                    _add_errors(form, error)
                else:
                    return redirect("billing-whatif-run", pk=run.pk)
            status = 400
        else:
            form = WhatIfForm(
                grid=grid,
                today=today,
                today_reclaim_wait_s=options.reclaim_wait_s,
                initial=initial,
            )
    context = {
        "clusters": clusters,
        "cluster": cluster,
        "days": days,
        "form": form,
        "has_history": bool(form and form.grid.tenants),
        "runs": services.whatif_runs_visible_to(request.user)[:20],
    }
    return render(request, "billing/whatif.html", context, status=status)


def _add_errors(form: WhatIfForm, error: TidegateError) -> None:
    found = error.field_errors or {error.field or "__all__": [error.message]}
    for field, texts in found.items():
        for text in texts:
            form.add_error(field if field in form.fields else None, text)


@login_required
def whatif_run_page(request: HttpRequest, pk: int) -> HttpResponse:
    """One run: its request, its progress while it runs, its results when done."""
    _require_admin(request)
    run = get_object_or_404(services.whatif_runs_visible_to(request.user), pk=pk)
    params = run.params_record()
    context: dict[str, Any] = {
        "run": run,
        "params": params,
        "policy_label": POLICY_LABELS.get(params.proposal.policy, params.proposal.policy),
        "every_s": POLL_EVERY_S,
    }
    if (result := run.whatif_result()) is not None:
        context |= {
            "whatif": result,
            "figures": figure_rows(result.today, result.proposed),
            "settings_replayed": settings_rows(result.today_settings, result.proposed_settings),
            "tenant_waits": tenant_wait_rows(result.today, result.proposed),
            "chart": charts.tenant_waits_chart(result.today, result.proposed),
            "quota_changes": [
                (t, p) for t, p in _quota_pairs(result.today_quotas, result.proposed_quotas)
            ],
        }
    if (savings := run.savings_result()) is not None:
        context |= {
            "savings": savings,
            "savings_rows": savings_rows(savings),
            "chart": charts.savings_chart(savings),
        }
    return render(request, "billing/whatif_run.html", context)


def _quota_pairs(
    today: tuple[QuotaEntry, ...], proposed: tuple[QuotaEntry, ...]
) -> list[tuple[QuotaEntry, int]]:
    """Each proposed guarantee that differs from today's, with today's GPUs."""
    before = {(q.tenant, q.flavour): q.guaranteed for q in today}
    return [
        (q, before.get((q.tenant, q.flavour), 0))
        for q in proposed
        if before.get((q.tenant, q.flavour), 0) != q.guaranteed
    ]


@login_required
def whatif_run_progress(request: HttpRequest, pk: int) -> HttpResponse:
    """The progress part of a run's page (htmx); once the run is over, the page reloads."""
    _require_admin(request)
    run = get_object_or_404(services.whatif_runs_visible_to(request.user), pk=pk)
    response = render(
        request, "billing/_whatif_progress.html", {"run": run, "every_s": POLL_EVERY_S}
    )
    if run.finished and request.headers.get("HX-Request"):
        response["HX-Refresh"] = "true"
    return response


@login_required
@require_POST
def whatif_run_again(request: HttpRequest, pk: int) -> HttpResponse:
    """Queue a new run with the same request (a failed run, or one to repeat on today's
    history)."""
    _require_admin(request)
    run = get_object_or_404(services.whatif_runs_visible_to(request.user), pk=pk)
    try:
        again = services.whatif_run_repeat(actor=request.user, run=run)
    except TidegateError as error:
        messages.error(request, error.message)
        return redirect("billing-whatif-run", pk=run.pk)
    return redirect("billing-whatif-run", pk=again.pk)
