"""The spend, efficiency, idle, workload and allocation reports through the API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from billing.api.common import (
    MONTH,
    PERIOD,
    TENANT,
    period_named,
    plain_row,
    require_billing_reader,
    tenant_of_slug,
    time_param,
)
from billing.reporting import allocation, reports
from tenants.api.contract import KeepsContract
from tenants.errors import ValidationFailed


# Shapes of the reports' answers, for /api/schema/; rows are objects whose keys depend on
# the report and its grouping.
@extend_schema_serializer(many=False)  # one report, not a list of them
class SpendReportSerializer(serializers.Serializer[Any]):
    period = serializers.CharField()
    state = serializers.CharField()
    provisional = serializers.BooleanField()
    currency = serializers.CharField()
    total = serializers.CharField()
    totals = serializers.DictField(child=serializers.CharField())
    group_by = serializers.CharField()
    rows = serializers.ListField(child=serializers.DictField())


@extend_schema_serializer(many=False)  # one report, not a list of them
class EfficiencyReportSerializer(serializers.Serializer[Any]):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    rows = serializers.ListField(child=serializers.DictField())


@extend_schema_serializer(many=False)  # one report, not a list of them
class IdleReportSerializer(serializers.Serializer[Any]):
    since = serializers.DateTimeField()
    rows = serializers.ListField(child=serializers.DictField())


@extend_schema_serializer(many=False)  # one report, not a list of them
class WorkloadReportSerializer(serializers.Serializer[Any]):
    period = serializers.CharField()
    rows = serializers.ListField(child=serializers.DictField())


@extend_schema_serializer(many=False)  # one report, not a list of them
class AllocationReportSerializer(serializers.Serializer[Any]):
    window = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    previous_window = serializers.CharField()
    aggregate = serializers.ListField(child=serializers.CharField())
    idle = serializers.CharField(allow_null=True)
    provisional = serializers.BooleanField()
    currency = serializers.CharField()
    totals = serializers.DictField()
    rows = serializers.ListField(child=serializers.DictField())


GROUPS = ["line", "tenant", "cost_center", "flavor", "kind", "child"]


class ReportQuerySerializer(serializers.Serializer[Any]):
    period = serializers.CharField(required=False)  # period_named says what is wrong
    tenant = serializers.CharField(required=False)
    group_by = serializers.ChoiceField(
        choices=GROUPS,
        required=False,
        default="line",
    )


class SpendReportViewSet(KeepsContract, viewsets.ViewSet):
    """Charges of a period by line, tenant, cost centre, flavour, kind, or the children of
    `tenant`. An open period is priced on the fly (`provisional: true`)."""

    @extend_schema(
        parameters=[
            PERIOD,
            TENANT,
            OpenApiParameter("group_by", OpenApiTypes.STR, enum=GROUPS, default="line"),
        ],
        responses=SpendReportSerializer,
    )
    def list(self, request: Request) -> Response:
        require_billing_reader(request)
        query = ReportQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        period = period_named(query.validated_data.get("period"))
        tenant = tenant_of_slug(request.user, query.validated_data.get("tenant"))
        report = reports.period_report(request.user, period, subtree=tenant)
        group_by = query.validated_data["group_by"]
        if group_by == "line":
            rows = [plain_row(row.__dict__) for row in report.rows]
        elif group_by == "child":
            if tenant is None:
                raise ValidationFailed(_("group_by=child needs tenant=<slug>."), field="tenant")
            rows = [plain_row(row) for row in reports.roll_up_to_children(report, tenant)]
        else:
            rows = [plain_row(row) for row in report.grouped(group_by)]
        return Response(
            {
                "period": period.name,
                "state": period.state,
                "provisional": report.provisional,
                "currency": report.currency,
                "total": str(report.total),
                # per currency: tenants billed in different currencies are never added up
                "totals": {c: str(t) for c, t in report.totals_by_currency().items()},
                "group_by": group_by,
                "rows": rows,
            }
        )


SINCE = OpenApiParameter("since", OpenApiTypes.DATETIME, description="ISO 8601")
UNTIL = OpenApiParameter("until", OpenApiTypes.DATETIME, description="ISO 8601")

# a date, or a date and a time: the day's shape is checked here, the rest by the view
DAY = r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])([T ].*)?$"


class EfficiencyReportViewSet(KeepsContract, viewsets.ViewSet):
    """Busy / allocated GPU time per tenant (`since`, `until`, `tenant`; default 30 days)."""

    @extend_schema(parameters=[SINCE, UNTIL, TENANT], responses=EfficiencyReportSerializer)
    def list(self, request: Request) -> Response:
        require_billing_reader(request)
        now = timezone.now()
        start = time_param(request, "since", now - timedelta(days=30))
        end = time_param(request, "until", now)
        tenant = tenant_of_slug(request.user, request.query_params.get("tenant"))
        rows = reports.efficiency_by_tenant(request.user, start=start, end=end, subtree=tenant)
        return Response(
            {
                "since": start.isoformat(),
                "until": end.isoformat(),
                "rows": [plain_row(r) for r in rows],
            }
        )


class IdleReportViewSet(KeepsContract, viewsets.ViewSet):
    """Idle-GPU findings: allocations under the activity threshold for an hour or more."""

    @extend_schema(parameters=[SINCE, TENANT], responses=IdleReportSerializer)
    def list(self, request: Request) -> Response:
        require_billing_reader(request)
        since = time_param(request, "since", timezone.now() - timedelta(days=7))
        tenant = tenant_of_slug(request.user, request.query_params.get("tenant"))
        rows = reports.idle_findings(request.user, since=since, subtree=tenant)
        return Response({"since": since.isoformat(), "rows": [plain_row(r) for r in rows]})


class WorkloadReportViewSet(KeepsContract, viewsets.ViewSet):
    """Drill-down: a period's usage per workload with estimated cost (`period`, `tenant`)."""

    @extend_schema(parameters=[PERIOD, TENANT], responses=WorkloadReportSerializer)
    def list(self, request: Request) -> Response:
        require_billing_reader(request)
        period = period_named(request.query_params.get("period"))
        tenant = tenant_of_slug(request.user, request.query_params.get("tenant"))
        rows = reports.workload_breakdown(request.user, period, tenant=tenant)
        return Response({"period": period.name, "rows": [plain_row(r) for r in rows]})


class AllocationViewSet(KeepsContract, viewsets.ViewSet):
    """Cost allocation: `window=YYYY-MM` or `start=...&end=...` (ISO 8601, end exclusive),
    `aggregate=namespace,label:team` (tenant, namespace, workload, flavour, line_type,
    label:<key>, annotation:<key>), `idle=even|guarantee|usage` (default: the billing
    policy's), `tenant=<slug>` (one subtree), `format=json|csv`. Each row has the previous
    window's total beside it; idle capacity is shown to platform billing only."""

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # ?format= is ours (json or csv, checked below with a 400), not DRF's renderer pick
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        parameters=[
            OpenApiParameter("window", OpenApiTypes.STR, description="YYYY-MM", pattern=MONTH),
            OpenApiParameter(
                "start", OpenApiTypes.STR, description="ISO 8601 date or date-time", pattern=DAY
            ),
            OpenApiParameter(
                "end", OpenApiTypes.STR, description="ISO 8601, exclusive", pattern=DAY
            ),
            OpenApiParameter(
                "aggregate", OpenApiTypes.STR, description="e.g. namespace,label:team"
            ),
            OpenApiParameter("idle", OpenApiTypes.STR, enum=["even", "guarantee", "usage"]),
            TENANT,
            OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"]),
        ],
        responses={
            (200, "application/json"): AllocationReportSerializer,
            (200, "text/csv"): OpenApiTypes.BINARY,
        },
    )
    def list(self, request: Request) -> HttpResponse:
        require_billing_reader(request)
        params = request.query_params
        fmt = params.get("format") or "json"
        if fmt not in ("json", "csv"):
            raise ValidationFailed(
                _("Unknown format '%(format)s'; use format=json or format=csv."),
                params={"format": fmt},
                field="format",
            )
        report = allocation.allocation_report(
            request.user,
            _allocation_window(request),
            aggregate=allocation.parse_aggregate(params.get("aggregate")),
            idle=allocation.parse_idle(params.get("idle")),
            subtree=tenant_of_slug(request.user, params.get("tenant")),
        )
        if fmt == "csv":
            response = HttpResponse(allocation.to_csv(report), content_type="text/csv")
            filename = allocation.csv_filename(report)
            response["Content-Disposition"] = f'attachment; filename="{filename}"'
            return response
        totals = report.totals
        return Response(
            {
                "window": report.window.label,
                "start": report.window.start.isoformat(),
                "end": report.window.end.isoformat(),
                "previous_window": report.previous.label,
                "aggregate": report.aggregate,
                "idle": report.idle_policy.value if report.show_idle else None,
                "provisional": report.provisional,
                "currency": report.currency,
                "totals": allocation.plain([_allocation_totals(totals, report.show_idle)])[0],
                "rows": allocation.plain(report.records()),
            }
        )


def _allocation_window(request: Request) -> allocation.Window:
    params = request.query_params
    window, start, end = params.get("window"), params.get("start"), params.get("end")
    if window and (start or end):
        raise ValidationFailed(
            _("Give either window=YYYY-MM or start and end, not both."), field="window"
        )
    if window:
        return allocation.month_window(window)
    if start or end:
        if not (start and end):
            raise ValidationFailed(
                _("Give both start and end (ISO 8601), e.g. start=2026-02-01&end=2026-02-08."),
                field="end" if start else "start",
            )
        return allocation.range_window(start, end)
    raise ValidationFailed(
        _("Name the window: window=YYYY-MM, or start=...&end=... (ISO 8601)."), field="window"
    )


def _allocation_totals(totals: Any, show_idle: bool) -> dict[str, Any]:
    out = {"cost": totals.cost, "total": totals.total, "previous_total": totals.previous_total}
    if show_idle:
        out["idle_cost"] = totals.idle_cost
    return out
