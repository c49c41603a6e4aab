"""REST API v1 of billing: rate cards, the ledger, periods and statements, adjustments,
budgets and alerts, finance reports and exports.

Scoping happens once, in `get_queryset`, through `billing.selectors` (which ask
`tenants.access`): what the caller may not read is a 404. Writes go through services,
whose domain errors the API's exception handler maps to 400/403/409.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import django_filters
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors
from billing.api import serializers as s
from billing.budgeting import budgets as budget_services
from billing.charging import exchange_rates, rates
from billing.errors import PeriodNotFound, StatementFrozen
from billing.models import (
    Adjustment,
    BillingPeriod,
    BillingPolicy,
    Budget,
    BudgetAlert,
    ExchangeRate,
    RateCard,
    Statement,
    TenantBillingSettings,
    UsageRecord,
)
from billing.months import parse_month
from billing.permissions import can_read_any_billing, can_read_platform_rates
from billing.reporting import allocation, reports
from billing.statements import exports, invoices, periods
from tenants.api.filters import UtcIsoDateTimeFilter, in_utc
from tenants.api.serializers import NoInput, QueuedSerializer
from tenants.errors import ValidationFailed
from tenants.transactions import queue_after_commit


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


def _require_billing_reader(request: Request) -> None:
    if not can_read_any_billing(request.user):
        raise Http404


def _since(request: Request, name: str, default: datetime) -> datetime:
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


class RateCardViewSet(viewsets.ModelViewSet[RateCard]):
    """Prices per GPU-hour. Everyone who reads money reads them; platform billing writes."""

    queryset = RateCard.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = s.RateCardSerializer
    filterset_fields = {"currency": ["exact"], "product": ["exact"], "cluster__name": ["exact"]}
    ordering_fields = ["valid_from", "name"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.rate_cards_visible_to(self.request.user)

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = rates.rate_card_create(
            actor=self.request.user, source="api", **serializer.validated_data
        )

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = rates.rate_card_update(
            actor=self.request.user,
            card=serializer.instance,
            source="api",
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: RateCard) -> None:
        rates.rate_card_delete(actor=self.request.user, card=instance, source="api")


class BillingPolicyViewSet(viewsets.GenericViewSet[BillingPolicy]):
    """The platform-wide billing policy: GET reads it, POST changes it."""

    queryset = BillingPolicy.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = s.BillingPolicySerializer
    pagination_class = None  # one policy: no pages, filters or ordering
    filter_backends: list[Any] = []

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return BillingPolicy.objects.all()

    @extend_schema(responses=s.BillingPolicySerializer)
    def list(self, request: Request) -> Response:
        _require_billing_reader(request)
        return Response(s.BillingPolicySerializer(BillingPolicy.current()).data)

    @extend_schema(responses={200: s.BillingPolicySerializer})
    def create(self, request: Request) -> Response:
        _require_billing_reader(request)
        body = s.BillingPolicySerializer(BillingPolicy.current(), data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        policy = rates.policy_update(actor=request.user, source="api", **body.validated_data)
        return Response(s.BillingPolicySerializer(policy).data)


class ExchangeRateViewSet(viewsets.ModelViewSet[ExchangeRate]):
    """Exchange rates per month and currency pair: finance and platform billing read them,
    platform billing writes (everyone else: 404)."""

    queryset = ExchangeRate.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = s.ExchangeRateSerializer
    filterset_fields = {"month": ["exact"], "from_currency": ["exact"], "to_currency": ["exact"]}
    ordering_fields = ["month"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.exchange_rates_visible_to(self.request.user).select_related("created_by")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if not can_read_platform_rates(request.user):
            raise Http404
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = exchange_rates.exchange_rate_create(
            actor=self.request.user, fields=serializer.validated_data, origin="api"
        )

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = exchange_rates.exchange_rate_update(
            actor=self.request.user,
            exchange_rate=serializer.instance,
            changes=serializer.validated_data,
            origin="api",
        )

    def perform_destroy(self, instance: ExchangeRate) -> None:
        exchange_rates.exchange_rate_delete(
            actor=self.request.user, exchange_rate=instance, origin="api"
        )


class TenantBillingSettingsViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet[TenantBillingSettings],
):
    """Chargeback or showback, and reserved charging, per tenant (inherited down the tree).
    POST sets a tenant's settings (creating or replacing them)."""

    queryset = TenantBillingSettings.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = s.TenantBillingSettingsSerializer
    lookup_field = "tenant__slug"
    lookup_url_kwarg = "tenant"

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.tenant_settings_visible_to(self.request.user)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = rates.tenant_settings_set(
            actor=request.user,
            tenant=body.validated_data["tenant"],
            mode=body.validated_data.get("mode", TenantBillingSettings.Mode.CHARGEBACK),
            charge_reserved=body.validated_data.get("charge_reserved", False),
            currency=body.validated_data.get("currency", ""),
            source="api",
        )
        return Response(self.get_serializer(row).data, status=status.HTTP_201_CREATED)


class UsageFilter(django_filters.FilterSet):
    period = django_filters.CharFilter(field_name="period__name")
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    cluster = django_filters.CharFilter(field_name="cluster__name")
    flavour = django_filters.CharFilter(field_name="flavour__name")
    since = UtcIsoDateTimeFilter(field_name="interval_start", lookup_expr="gte")
    until = UtcIsoDateTimeFilter(field_name="interval_start", lookup_expr="lt")

    class Meta:
        model = UsageRecord
        fields = ["period", "tenant", "cluster", "flavour", "namespace", "workload", "source"]


class UsageRecordViewSet(viewsets.ReadOnlyModelViewSet[UsageRecord]):
    """The append-only usage ledger (hourly rows), for the caller's subtrees."""

    queryset = UsageRecord.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = s.UsageRecordSerializer
    filterset_class = UsageFilter
    ordering_fields = ["interval_start", "gpu_seconds_allocated"]
    ordering = ["-interval_start", "id"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.usage_visible_to(self.request.user).select_related(
            "tenant", "cluster", "flavour", "period"
        )


class BillingPeriodViewSet(viewsets.ReadOnlyModelViewSet[BillingPeriod]):
    """Monthly billing periods. `close` freezes statements; `reopen` is an audited admin
    action."""

    queryset = BillingPeriod.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = s.BillingPeriodSerializer
    lookup_field = "name"
    lookup_value_regex = r"\d{4}-\d{2}"
    filterset_fields = ["state"]
    ordering = ["-start"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.periods_visible_to(self.request.user)

    @extend_schema(request=None, responses=s.BillingPeriodSerializer)
    @action(detail=True, methods=["post"])
    def close(self, request: Request, name: str | None = None) -> Response:
        """Close the period now (409 if already closed, not ended or being closed)."""
        NoInput.check(request.data)
        period = periods.period_close(actor=request.user, period=self.get_object(), source="api")
        return Response(s.BillingPeriodSerializer(period).data)

    @extend_schema(request=s.ReopenSerializer, responses=s.BillingPeriodSerializer)
    @action(detail=True, methods=["post"])
    def reopen(self, request: Request, name: str | None = None) -> Response:
        """Re-open the latest closed period (platform admins), saying why."""
        body = s.ReopenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        period = periods.period_reopen(
            actor=request.user,
            period=self.get_object(),
            reason=body.validated_data["reason"],
            reprice=body.validated_data["reprice"],
            source="api",
        )
        return Response(s.BillingPeriodSerializer(period).data)


class StatementFilter(django_filters.FilterSet):
    period = django_filters.CharFilter(field_name="period__name")
    tenant = django_filters.CharFilter(field_name="tenant_slug")

    class Meta:
        model = Statement
        fields = ["period", "tenant", "mode", "cost_center"]


class StatementViewSet(viewsets.ModelViewSet[Statement]):
    """Statements of closed periods, with their lines. They are frozen: PATCH, PUT and
    DELETE answer 409 (corrections are adjustments in an open period)."""

    queryset = Statement.objects.none()  # the model, for the schema; rows: get_queryset
    filterset_class = StatementFilter
    ordering_fields = ["total", "tenant_slug", "created_at"]
    ordering = ["-period__start", "tenant_slug"]
    http_method_names = ["get", "put", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        statements = selectors.statements_visible_to(
            self.request.user,
            current_only=self.request.query_params.get("superseded") != "true",
        )
        if self.action == "retrieve":
            statements = statements.prefetch_related("lines")
        return statements

    def get_serializer_class(self) -> Any:
        return s.StatementSerializer if self.action == "retrieve" else s.StatementSummarySerializer

    def _frozen(self) -> StatementFrozen:
        statement = self.get_object()
        return StatementFrozen(
            _(
                "Statement %(number)s is frozen (%(period)s is %(state)s); record an "
                "adjustment in an open period instead."
            ),
            params={
                "number": statement.number,
                "period": statement.period.name,
                "state": statement.period.state,
            },
        )

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise self._frozen()

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise self._frozen()

    @extend_schema(responses=None)
    @action(detail=True, methods=["get"])
    def workloads(self, request: Request, pk: str | None = None) -> Response:
        """Drill-down: the statement's usage per workload, with estimated cost."""
        statement = self.get_object()
        if statement.tenant is None:
            return Response([])
        rows = reports.workload_breakdown(
            request.user, statement.period, tenant=statement.tenant, subtree=False
        )
        return Response([_plain(row) for row in rows])

    @extend_schema(responses=None)
    @action(detail=True, methods=["get"])
    def pdf(self, request: Request, pk: str | None = None) -> HttpResponse:
        """The statement as an invoice-grade PDF, in the reader's language."""
        return invoice_response(invoices.statement_invoice(self.get_object()))


def invoice_response(invoice: invoices.Invoice) -> HttpResponse:
    response = HttpResponse(invoices.render(invoice), content_type=exports.CONTENT_TYPES["pdf"])
    response["Content-Disposition"] = f'attachment; filename="{invoices.filename(invoice)}"'
    response["X-Tidegate-Provisional"] = "true" if invoice.provisional else "false"
    return response


class AdjustmentViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[Adjustment],
):
    """Hand-made corrections, billed when their (open) period closes."""

    queryset = Adjustment.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = s.AdjustmentSerializer
    filterset_fields = {"tenant__slug": ["exact"], "period__name": ["exact"]}

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.adjustments_visible_to(self.request.user)

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = periods.adjustment_create(
            actor=self.request.user, source="api", **serializer.validated_data
        )

    def perform_destroy(self, instance: Adjustment) -> None:
        periods.adjustment_delete(actor=self.request.user, adjustment=instance, source="api")


class BudgetViewSet(viewsets.ModelViewSet[Budget]):
    """Budgets per tenant subtree (monthly or quarterly, soft or hard) and their status."""

    queryset = Budget.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = s.BudgetSerializer
    filterset_fields = {"tenant__slug": ["exact"], "cadence": ["exact"], "enforcement": ["exact"]}
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.budgets_visible_to(self.request.user)

    def perform_create(self, serializer: Any) -> None:
        data = dict(serializer.validated_data)
        serializer.instance = budget_services.budget_create(
            actor=self.request.user, tenant=data.pop("tenant"), source="api", **data
        )

    def perform_update(self, serializer: Any) -> None:
        data = dict(serializer.validated_data)
        data.pop("tenant", None)
        serializer.instance = budget_services.budget_update(
            actor=self.request.user, budget=serializer.instance, source="api", **data
        )

    def perform_destroy(self, instance: Budget) -> None:
        budget_services.budget_delete(actor=self.request.user, budget=instance, source="api")


class BudgetAlertViewSet(viewsets.ReadOnlyModelViewSet[BudgetAlert]):
    """Budget thresholds crossed, once each per budget period."""

    queryset = BudgetAlert.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = s.BudgetAlertSerializer
    filterset_fields = {"budget__tenant__slug": ["exact"], "period_name": ["exact"]}

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.budget_alerts_visible_to(self.request.user)


def _plain(row: dict[str, Any]) -> dict[str, Any]:
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


class SpendReportViewSet(viewsets.ViewSet):
    """Charges of a period by line, tenant, cost centre, flavour, kind, or the children of
    `tenant`. An open period is priced on the fly (`provisional: true`)."""

    @extend_schema(parameters=[s.ReportQuerySerializer], responses=s.SpendReportSerializer)
    def list(self, request: Request) -> Response:
        _require_billing_reader(request)
        query = s.ReportQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        period = period_named(query.validated_data.get("period"))
        tenant = s.tenant_of_slug(request.user, query.validated_data.get("tenant"))
        report = reports.period_report(request.user, period, subtree=tenant)
        group_by = query.validated_data["group_by"]
        if group_by == "line":
            rows = [_plain(row.__dict__) for row in report.rows]
        elif group_by == "child":
            if tenant is None:
                raise ValidationFailed(_("group_by=child needs tenant=<slug>."), field="tenant")
            rows = [_plain(row) for row in reports.roll_up_to_children(report, tenant)]
        else:
            rows = [_plain(row) for row in report.grouped(group_by)]
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
TENANT = OpenApiParameter("tenant", OpenApiTypes.STR, description="A tenant's slug: its subtree")
PERIOD = OpenApiParameter("period", OpenApiTypes.STR, description="YYYY-MM (default: the last)")


class EfficiencyReportViewSet(viewsets.ViewSet):
    """Busy / allocated GPU time per tenant (`since`, `until`, `tenant`; default 30 days)."""

    @extend_schema(parameters=[SINCE, UNTIL, TENANT], responses=s.EfficiencyReportSerializer)
    def list(self, request: Request) -> Response:
        _require_billing_reader(request)
        now = timezone.now()
        start = _since(request, "since", now - timedelta(days=30))
        end = _since(request, "until", now)
        tenant = s.tenant_of_slug(request.user, request.query_params.get("tenant"))
        rows = reports.efficiency_by_tenant(request.user, start=start, end=end, subtree=tenant)
        return Response(
            {
                "since": start.isoformat(),
                "until": end.isoformat(),
                "rows": [_plain(r) for r in rows],
            }
        )


class IdleReportViewSet(viewsets.ViewSet):
    """Idle-GPU findings: allocations under the activity threshold for an hour or more."""

    @extend_schema(parameters=[SINCE, TENANT], responses=s.IdleReportSerializer)
    def list(self, request: Request) -> Response:
        _require_billing_reader(request)
        since = _since(request, "since", timezone.now() - timedelta(days=7))
        tenant = s.tenant_of_slug(request.user, request.query_params.get("tenant"))
        rows = reports.idle_findings(request.user, since=since, subtree=tenant)
        return Response({"since": since.isoformat(), "rows": [_plain(r) for r in rows]})


class WorkloadReportViewSet(viewsets.ViewSet):
    """Drill-down: a period's usage per workload with estimated cost (`period`, `tenant`)."""

    @extend_schema(parameters=[PERIOD, TENANT], responses=s.WorkloadReportSerializer)
    def list(self, request: Request) -> Response:
        _require_billing_reader(request)
        period = period_named(request.query_params.get("period"))
        tenant = s.tenant_of_slug(request.user, request.query_params.get("tenant"))
        rows = reports.workload_breakdown(request.user, period, tenant=tenant)
        return Response({"period": period.name, "rows": [_plain(r) for r in rows]})


class ExportViewSet(viewsets.ViewSet):
    """Chargeback export of a period: `?period=YYYY-MM&as=csv|xlsx|pdf[&tenant=slug]`.
    An open period's export is provisional (file name and `X-Tidegate-Provisional`)."""

    @extend_schema(responses=None)
    def list(self, request: Request) -> HttpResponse:
        _require_billing_reader(request)
        fmt = request.query_params.get("as", "csv")
        if fmt not in exports.CONTENT_TYPES:
            raise ValidationFailed(
                _("Unknown export type '%(type)s'; use as=csv, as=xlsx or as=pdf."),
                params={"type": fmt},
                field="as",
            )
        period = period_named(request.query_params.get("period"))
        tenant = s.tenant_of_slug(request.user, request.query_params.get("tenant"))
        report = reports.period_report(request.user, period, subtree=tenant)
        return export_response(report, fmt)

    @extend_schema(responses=None)
    @action(detail=False, methods=["get"], url_path="cost-centre")
    def cost_centre(self, request: Request) -> HttpResponse:
        """One cost centre's lines of a period as an invoice-grade PDF:
        `?period=YYYY-MM&code=<cost centre>` (`code=__idle__`: idle capacity)."""
        _require_billing_reader(request)
        code = request.query_params.get("code")
        if code is None:
            raise ValidationFailed(
                _("Name the cost centre, e.g. code=CC-1001 (empty: tenants without one)."),
                field="code",
            )
        period = period_named(request.query_params.get("period"))
        report = reports.period_report(request.user, period)
        rows = invoices.cost_centre_rows(report, code)
        if not invoices.cost_centre_visible(request.user, code, rows):
            raise Http404
        return invoice_response(invoices.cost_centre_invoice(report, code, rows))


def export_response(report: reports.PeriodReport, fmt: str) -> HttpResponse:
    response = HttpResponse(exports.export(report, fmt), content_type=exports.CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{exports.filename(report, fmt)}"'
    response["X-Tidegate-Provisional"] = "true" if report.provisional else "false"
    return response


class AllocationViewSet(viewsets.ViewSet):
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
            OpenApiParameter("window", OpenApiTypes.STR, description="YYYY-MM"),
            OpenApiParameter("start", OpenApiTypes.STR, description="ISO 8601 date or date-time"),
            OpenApiParameter("end", OpenApiTypes.STR, description="ISO 8601, exclusive"),
            OpenApiParameter(
                "aggregate", OpenApiTypes.STR, description="e.g. namespace,label:team"
            ),
            OpenApiParameter("idle", OpenApiTypes.STR, enum=["even", "guarantee", "usage"]),
            TENANT,
            OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"]),
        ],
        responses={
            (200, "application/json"): s.AllocationReportSerializer,
            (200, "text/csv"): OpenApiTypes.BINARY,
        },
    )
    def list(self, request: Request) -> HttpResponse:
        _require_billing_reader(request)
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
            subtree=s.tenant_of_slug(request.user, params.get("tenant")),
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


class CollectionViewSet(viewsets.ViewSet):
    """Usage collection per cluster: watermarks (platform admins); POST {"cluster": name}
    queues a collection now."""

    @extend_schema(responses=s.CollectionStateSerializer(many=True))
    def list(self, request: Request) -> Response:
        from billing.models import CollectorWatermark
        from tenants import access

        if not access.is_platform_admin(request.user):
            raise Http404
        rows = [
            {
                "cluster": mark.cluster.name,
                "collected_until": mark.collected_until.isoformat(),
                "last_run_at": mark.last_run_at.isoformat() if mark.last_run_at else None,
                "last_rows": mark.last_rows,
                "last_error": mark.last_error,
                "dcgm_pod_labels": mark.dcgm_pod_labels,
                "dcgm_pod_labels_note": _dcgm_note(mark.dcgm_pod_labels),
            }
            for mark in CollectorWatermark.objects.select_related("cluster")
        ]
        return Response(rows)

    @extend_schema(request=s.CollectionRequestSerializer, responses={202: QueuedSerializer})
    def create(self, request: Request) -> Response:

        from scheduler_bridge.inventory.models import Cluster
        from tenants import access

        if not access.is_platform_admin(request.user):
            raise Http404
        body = s.CollectionRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        cluster = get_object_or_404(Cluster, name=body.validated_data["cluster"])
        queue_after_commit("billing.tasks.usage_collect", cluster.pk)
        return Response(
            {"detail": f"usage collection of {cluster.name} queued"},
            status=status.HTTP_202_ACCEPTED,
        )


def _dcgm_note(pair: str) -> str:
    if pair.startswith("exported_"):
        return (
            "DCGM series carry exported_pod/exported_namespace (ServiceMonitor with "
            "honorLabels: false); Tidegate reads those."
        )
    if pair:
        return "DCGM series carry pod/namespace."
    return "No DCGM series named a pod at the last collection: no busy time was found."
