"""What the billing API's concerns share: tenants, clusters and flavours a user may
name, the period a request is about, who may read billing, and answers as files."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import Http404, HttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request

from billing.errors import PeriodNotFound
from billing.models import BillingPeriod
from billing.months import parse_month
from billing.permissions import can_read_any_billing
from billing.reporting import reports
from billing.selectors import billing_tenants
from billing.statements import exports, invoices
from scheduler_bridge import selectors as bridge_selectors
from tenants.api.filters import in_utc
from tenants.errors import ValidationFailed
from tenants.models import Tenant

# a billing period's name, as /api/schema/ states it
MONTH = r"^\d{4}-(0[1-9]|1[0-2])$"
MONTH_MESSAGE = _("Use a month written YYYY-MM, e.g. 2026-02.")
PERIOD = OpenApiParameter(
    "period", OpenApiTypes.STR, description="YYYY-MM", pattern=MONTH, required=True
)
TENANT = OpenApiParameter("tenant", OpenApiTypes.STR, description="A tenant's slug: its subtree")


@extend_schema_field(OpenApiTypes.STR)
class BillingTenantField(serializers.SlugRelatedField):  # type: ignore[type-arg]
    """A tenant named by slug, among those whose money the caller reads."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("slug_field", "slug")
        super().__init__(**kwargs)

    def get_queryset(self) -> Any:
        request = self.context.get("request")
        return billing_tenants(request.user if request else None)


@extend_schema_field(OpenApiTypes.STR)
class VisibleClusterField(serializers.SlugRelatedField):  # type: ignore[type-arg]
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("slug_field", "name")
        super().__init__(**kwargs)

    def get_queryset(self) -> Any:
        request = self.context.get("request")
        return bridge_selectors.clusters_visible_to(request.user if request else None)


class VisibleFlavourField(serializers.PrimaryKeyRelatedField):  # type: ignore[type-arg]
    def get_queryset(self) -> Any:
        request = self.context.get("request")
        return bridge_selectors.flavours_visible_to(request.user if request else None)


def tenant_of_slug(user: Any, slug: str | None) -> Tenant | None:
    """The visible (money-reading) tenant called ``slug``; None for no slug."""
    if not slug:
        return None
    tenant = billing_tenants(user).filter(slug=slug).first()
    if tenant is None:
        raise Http404
    return tenant


def period_named(name: str | None) -> BillingPeriod:
    """The period called ``name``, or a 400 that says what periods look like."""
    if not name:
        raise PeriodNotFound(_("Name the period, e.g. period=2026-02."), field="period")
    if parse_month(name) is None:
        raise PeriodNotFound(
            _("'%(name)s' is not a period; periods are months named YYYY-MM."),
            params={"name": name},
        )
    period = BillingPeriod.objects.filter(name=name).first()
    if period is None:
        raise PeriodNotFound(
            _(
                "There is no billing period %(name)s: nothing was metered in it yet. Periods "
                "exist from the first usage of their month."
            ),
            params={"name": name},
        )
    return period


def require_billing_reader(request: Request) -> None:
    if not can_read_any_billing(request.user):
        raise Http404


def time_param(request: Request, name: str, default: datetime) -> datetime:
    raw = request.query_params.get(name)
    if not raw:
        return default
    try:
        moment = parse_datetime(raw)
    except ValueError:  # well-formed, but impossible: month 13, an offset of 25 hours
        moment = None
    if moment is not None:
        moment = in_utc(moment if timezone.is_aware(moment) else timezone.make_aware(moment))
    if moment is None:
        raise ValidationFailed(
            _("%(name)s must be an ISO 8601 date-time."), params={"name": name}, field=name
        )
    return moment


def invoice_response(invoice: invoices.Invoice) -> HttpResponse:
    response = HttpResponse(invoices.render(invoice), content_type=exports.CONTENT_TYPES["pdf"])
    response["Content-Disposition"] = f'attachment; filename="{invoices.filename(invoice)}"'
    response["X-Tidegate-Provisional"] = "true" if invoice.provisional else "false"
    return response


def plain_row(row: dict[str, Any]) -> dict[str, Any]:
    """JSON-friendly values: Decimals as strings (money never goes through float)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, datetime):
            out[key] = value.isoformat()
        elif value is None or isinstance(value, bool | int | str):
            out[key] = value
        else:
            out[key] = str(value)
    return out


def export_response(report: reports.PeriodReport, fmt: str) -> HttpResponse:
    response = HttpResponse(exports.export(report, fmt), content_type=exports.CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{exports.filename(report, fmt)}"'
    response["X-Tidegate-Provisional"] = "true" if report.provisional else "false"
    return response
