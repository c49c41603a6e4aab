"""The cost allocation page: a month grouped by the keys finance picks, with idle capacity
shared out (platform billing only), the month before beside it, a chart and a CSV."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from billing import selectors
from billing.months import month_name
from billing.permissions import can_manage_platform_billing
from billing.portal.common import require_billing_reader, subtree_from_query
from billing.reporting import allocation, charts
from billing.reporting.allocation_core import IDLE, NO_VALUE, UNALLOCATED, ZERO, IdlePolicy
from tenants.errors import ValidationFailed

CHART_GROUPS = 25
IDLE_POLICIES: dict[str, Any] = {
    IdlePolicy.EVEN: gettext_lazy("evenly over the groups that used the flavour"),
    IdlePolicy.GUARANTEE: gettext_lazy("by guarantee"),
    IdlePolicy.USAGE: gettext_lazy("by usage"),
}
KEY_NAMES: dict[str, Any] = {
    "tenant": gettext_lazy("Tenant"),
    "namespace": gettext_lazy("Namespace"),
    "workload": gettext_lazy("Workload"),
    "flavour": gettext_lazy("Flavour"),
    "line_type": gettext_lazy("Line type"),
}
LINE_TYPE_NAMES: dict[str, Any] = {
    "in_quota": gettext_lazy("in quota"),
    "borrowed": gettext_lazy("borrowed (on-demand rate)"),
    "reserved": gettext_lazy("reserved capacity"),
    "idle": gettext_lazy("idle capacity"),
    "late_usage": gettext_lazy("late usage"),
    "adjustment": gettext_lazy("adjustment"),
}


def _key_name(key: str) -> str:
    if key in KEY_NAMES:
        return str(KEY_NAMES[key])
    kind, _sep, name = key.partition(":")
    if kind == "label":
        return _("Label %(name)s") % {"name": name}
    return _("Annotation %(name)s") % {"name": name}


def _value_name(key: str, value: str) -> str:
    if value == UNALLOCATED:
        return _("(unallocated)")
    if value == NO_VALUE:
        if key == "namespace":
            return _("(no namespace: submitted through the API)")
        if key == "workload":
            return _("(no workload: pods outside the queue)")
        return _("(none)")
    if value == IDLE:
        return _("(idle capacity)")
    if key == "line_type" and value in LINE_TYPE_NAMES:
        return str(LINE_TYPE_NAMES[value])
    return value


@login_required
def allocation_page(request: HttpRequest) -> HttpResponse:
    """Any billing reader (their tenants' rows); idle capacity to platform billing only.
    ``as=csv`` downloads the table. Bad parameters: the form again, with the error, 400."""
    require_billing_reader(request)
    subtree = subtree_from_query(request)
    window_name = request.GET.get("window") or month_name(timezone.now())
    raw_aggregate = request.GET.get("aggregate") or "namespace"
    raw_idle = request.GET.get("idle") or ""
    manager = can_manage_platform_billing(request.user)
    page: dict[str, Any] = {
        "window": window_name,
        "aggregate": raw_aggregate,
        "idle": raw_idle,
        "manager": manager,
        "idle_policies": list(IDLE_POLICIES.items()),
        "months": selectors.periods_visible_to(request.user).order_by("-start")[:24],
        "tenant": subtree.slug if subtree else "",
        "report": None,
    }
    try:
        report = allocation.allocation_report(
            request.user,
            allocation.month_window(window_name),
            aggregate=allocation.parse_aggregate(raw_aggregate),
            idle=allocation.parse_idle(raw_idle),
            subtree=subtree,
        )
    except ValidationFailed as error:
        page["error"] = error.message
        page["error_field"] = error.field
        return render(request, "billing/allocation.html", page, status=400)
    if request.GET.get("as") == "csv":
        response = HttpResponse(allocation.to_csv(report), content_type="text/csv")
        filename = allocation.csv_filename(report)
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response
    names = [
        [_value_name(k, v) for k, v in zip(report.aggregate, row.keys, strict=True)]
        for row in report.rows
    ]
    rows = [{"keys": keys, "row": row} for keys, row in zip(names, report.rows, strict=True)]
    shown = report.rows[:CHART_GROUPS]
    labels = [" · ".join(keys) for keys in names[:CHART_GROUPS]]
    columns = [_key_name(k) for k in report.aggregate]
    query = {"window": window_name, "aggregate": raw_aggregate, "as": "csv"}
    if raw_idle:
        query["idle"] = raw_idle
    if subtree is not None:
        query["tenant"] = subtree.slug
    page.update(
        columns=columns,
        report=report,
        rows=rows,
        totals=report.totals,
        idle_label=IDLE_POLICIES.get(report.idle_policy, report.idle_policy),
        csv_url=f"{request.path}?{urlencode(query)}",
        chart=charts.allocation_bars(
            labels,
            [row.cost for row in shown],
            [row.idle_cost or ZERO for row in shown] if report.show_idle else None,
            currency=report.currency,
            title=_("Cost of %(window)s by %(keys)s")
            % {"window": window_name, "keys": ", ".join(columns)},
        )
        if rows
        else "",
    )
    return render(request, "billing/allocation.html", page)
