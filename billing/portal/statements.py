"""Statements with their drill-down: a tenant's statement -> its flavours -> the
workloads that used them (linked to their pages); and a cost centre's statements."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext_lazy

from billing import selectors
from billing.charging.pricing import IDLE_TENANT
from billing.models import Statement, StatementLine
from billing.permissions import can_manage_platform_billing
from billing.portal.common import (
    IDLE_COST_CENTRE,
    line_kind,
    period_or_404,
    require_billing_reader,
)
from billing.reporting import reports
from billing.statements import exports, invoices
from scheduler_bridge.workloads.models import Workload
from tenants.models import Tenant


def _flavour_totals(lines: list[Any]) -> list[dict[str, Any]]:
    totals: dict[str, dict[str, Any]] = {}
    for line in lines:
        name = line.flavour_name or ""
        group = totals.setdefault(
            name, {"flavour": name, "gpu_hours": Decimal(0), "amount": Decimal("0.00")}
        )
        group["gpu_hours"] += line.gpu_hours
        group["amount"] += line.amount
    return sorted(totals.values(), key=lambda g: (-g["amount"], g["flavour"]))


def _link_workloads(workloads: list[dict[str, Any]]) -> None:
    """Give each metered workload still known to the queue a link to its page."""
    ids = {w["workload_id"] for w in workloads if w["workload_id"]}
    known = set(Workload.objects.filter(pk__in=ids).values_list("pk", flat=True))
    for w in workloads:
        w["url"] = (
            reverse("portal-workload", args=[w["workload_id"]]) if w["workload_id"] in known else ""
        )


@login_required
def statement_detail(request: HttpRequest, pk: int) -> HttpResponse:
    statement = get_object_or_404(selectors.statements_visible_to(request.user), pk=pk)
    flavour = request.GET.get("flavour", "")
    workloads: list[dict[str, Any]] = []
    if statement.tenant is not None:
        workloads = reports.workload_breakdown(
            request.user, statement.period, tenant=statement.tenant, subtree=False
        )
        if flavour:
            workloads = [w for w in workloads if w["flavor"] == flavour]
        _link_workloads(workloads)
    lines = list(statement.lines.order_by("flavour_name", "kind", "id"))
    corrected_by = list(statement.corrected_by.select_related("statement", "statement__period"))
    for line in [*lines, *corrected_by]:
        line.kind_label = line_kind(line.kind)  # type: ignore[attr-defined]
    for line in lines:
        line.fx_text = fx_text(line)  # type: ignore[attr-defined]
    context = {
        "statement": statement,
        "is_idle": statement.tenant_slug == IDLE_TENANT,
        "lines": lines,
        "flavours": _flavour_totals(lines),
        "flavour": flavour,
        "corrected_by": corrected_by,
        "workloads": workloads,
        "changes": _changes(statement),
        "previous": _previous_revision(request, statement),
        "charged_to": _charged_to(lines, statement),
        "rates_used": sorted({line.fx_text for line in lines if line.fx_text}),  # type: ignore[attr-defined]
    }
    return render(request, "billing/statement_detail.html", context)


CHANGE_FIELDS = {
    "added": gettext_lazy("new line"),
    "removed": gettext_lazy("line removed"),
    "gpu_hours": gettext_lazy("GPU-hours"),
    "rate": gettext_lazy("Rate"),
    "amount": gettext_lazy("Amount"),
}


def _changes(statement: Statement) -> list[dict[str, Any]]:
    """What this revision changed against the previous one, for people to read."""
    out = []
    for change in statement.changes or []:
        kind, _sep, rest = change["line"].partition(" ")
        label = gettext_lazy("Total") if kind == "total" else f"{line_kind(kind)} {rest}".strip()
        out.append(
            {
                "line": label,
                "field": CHANGE_FIELDS.get(change["field"], change["field"]),
                "before": change["before"] or "—",
                "after": change["after"] or "—",
            }
        )
    return out


def _previous_revision(request: HttpRequest, statement: Statement) -> Statement | None:
    if statement.revision <= 1:
        return None
    return (
        selectors.statements_visible_to(request.user, current_only=False)
        .filter(period=statement.period, tenant=statement.tenant, revision__lt=statement.revision)
        .order_by("-revision")
        .first()
    )


def _charged_to(lines: list[StatementLine], statement: Statement) -> list[dict[str, Any]]:
    """Totals per cost centre and place in the tree the lines were charged to, when a
    tenant moved or changed cost centre during the period (else empty)."""
    places: dict[tuple[str, str], Decimal] = {}
    for line in lines:
        key = (line.cost_center, line.tenant_path)
        places[key] = places.get(key, Decimal("0.00")) + line.amount
    if len(places) <= 1:
        return []
    ids = {int(part) for _cost, path in places for part in path.strip("/").split("/") if part}
    slugs = dict(Tenant.objects.filter(pk__in=ids).values_list("pk", "slug"))
    return [
        {
            "cost_center": cost or "—",
            "path": " › ".join(
                slugs.get(int(part), part) for part in path.strip("/").split("/") if part
            ),
            "amount": amount,
        }
        for (cost, path), amount in sorted(places.items())
    ]


def fx_text(line: StatementLine) -> str:
    """The rate a converted line used, as finance quotes it: "1 USD = 7.1234 CNY (2026-02)"
    (empty for a line priced in the statement's currency)."""
    return reports.exchange_text(
        line.source_currency, line.exchange_rate, line.currency, line.exchange_month
    )


@login_required
def cost_centre_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One cost centre in one period: its tenants' statements, per flavour and per kind."""
    require_billing_reader(request)
    period = period_or_404(name)
    code = request.GET.get("code", "")
    if code == IDLE_TENANT and not can_manage_platform_billing(request.user):
        raise Http404  # idle capacity is the platform's: only its billing managers read it
    report = reports.period_report(request.user, period)
    if code == IDLE_TENANT:
        rows = [r for r in report.rows if r.tenant == IDLE_TENANT]
    else:
        rows = [r for r in report.rows if r.tenant != IDLE_TENANT and r.cost_center == code]
    if not rows and code and code != IDLE_TENANT:
        known = selectors.billing_tenants(request.user).filter(cost_center=code).exists()
        if not known:
            raise Http404
    statement_of = dict(
        selectors.statements_visible_to(request.user)
        .filter(period=period)
        .values_list("tenant_slug", "pk")
    )
    # amounts are summed per currency: tenants billed in different ones are never added
    tenants: dict[tuple[str, str], dict[str, Any]] = {}
    flavours: dict[tuple[str, str], Decimal] = defaultdict(lambda: Decimal("0.00"))
    kinds: dict[tuple[str, str], Decimal] = defaultdict(lambda: Decimal("0.00"))
    totals: dict[str, Decimal] = defaultdict(lambda: Decimal("0.00"))
    for row in rows:
        tenant = tenants.setdefault(
            (row.tenant, row.currency),
            {
                "slug": row.tenant,
                "name": row.tenant_name,
                "mode": row.mode,
                "amount": Decimal("0.00"),
                "currency": row.currency,
                "gpu_hours": Decimal(0),
                "statement": statement_of.get(row.tenant),
            },
        )
        tenant["amount"] += row.amount
        tenant["gpu_hours"] += row.gpu_hours_allocated
        flavours[(row.flavor, row.currency)] += row.amount
        kinds[(str(line_kind(row.kind)), row.currency)] += row.amount
        totals[row.currency] += row.amount
    title = str(IDLE_COST_CENTRE) if code == IDLE_TENANT else code
    # a reader who does not read every tenant of the cost centre sees its share only,
    # and is told so (the total is not the cost centre's)
    readable = set(selectors.billing_tenants(request.user).values_list("pk", flat=True))
    partial = (
        code not in ("", IDLE_TENANT)
        and Tenant.objects.filter(cost_center=code).exclude(pk__in=readable).exists()
    )
    context = {
        "partial": partial,
        "period": period,
        "code": code,
        "title": title,
        "report": report,
        "tenants": sorted(tenants.values(), key=lambda t: (t["currency"], -t["amount"], t["slug"])),
        "flavours": [
            (name, amount, currency)
            for (name, currency), amount in sorted(flavours.items(), key=lambda kv: -kv[1])
        ],
        "kinds": [
            (name, amount, currency)
            for (name, currency), amount in sorted(kinds.items(), key=lambda kv: -kv[1])
        ],
        "total": totals.get(report.currency, Decimal("0.00")),
        "totals": sorted(totals.items(), key=lambda kv: kv[0] != report.currency),
    }
    return render(request, "billing/cost_centre.html", context)


def _pdf_response(invoice: invoices.Invoice) -> HttpResponse:
    response = HttpResponse(invoices.render(invoice), content_type=exports.CONTENT_TYPES["pdf"])
    response["Content-Disposition"] = f'attachment; filename="{invoices.filename(invoice)}"'
    response["X-Tidegate-Provisional"] = "true" if invoice.provisional else "false"
    return response


@login_required
def statement_pdf(request: HttpRequest, pk: int) -> HttpResponse:
    """One statement as an invoice-grade PDF, in the reader's language."""
    statement = get_object_or_404(selectors.statements_visible_to(request.user), pk=pk)
    return _pdf_response(invoices.statement_invoice(statement))


@login_required
def cost_centre_pdf(request: HttpRequest, name: str) -> HttpResponse:
    """One cost centre's lines of a period (``?code=``) as an invoice-grade PDF."""
    require_billing_reader(request)
    period = period_or_404(name)
    code = request.GET.get("code", "")
    report = reports.period_report(request.user, period)
    rows = invoices.cost_centre_rows(report, code)
    if not invoices.cost_centre_visible(request.user, code, rows):
        raise Http404
    return _pdf_response(invoices.cost_centre_invoice(report, code, rows))
