"""Billing periods, statements, adjustments and the period exports through the API."""

from __future__ import annotations

from typing import Any

import django_filters
from django.http import Http404, HttpResponse
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors
from billing.api.common import (
    PERIOD,
    TENANT,
    BillingTenantField,
    export_response,
    invoice_response,
    period_named,
    plain_row,
    require_billing_reader,
    tenant_of_slug,
)
from billing.errors import StatementFrozen
from billing.models import (
    Adjustment,
    BillingPeriod,
    Statement,
    StatementLine,
)
from billing.reporting import reports
from billing.selectors import statements_visible_to
from billing.statements import exports, invoices, periods
from tenants.api.contract import KeepsContract
from tenants.api.serializers import NoInput, RejectUnknownFields
from tenants.errors import ValidationFailed


class BillingPeriodSerializer(serializers.ModelSerializer[BillingPeriod]):
    class Meta:
        model = BillingPeriod
        fields = [
            "name",
            "start",
            "end",
            "state",
            "revision",
            "reprice",
            "closed_at",
            "created_at",
        ]
        read_only_fields = fields


class ReopenSerializer(RejectUnknownFields, serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=500)
    reprice = serializers.BooleanField(
        default=False,
        help_text=_(
            "Price the next close with the rate cards and settings recorded now (e.g. a "
            "corrected rate card). Without it, the next close uses the settings the last "
            "close froze, so only ledger changes and adjustments change the statements."
        ),
    )


class StatementLineSerializer(serializers.ModelSerializer[StatementLine]):
    corrects = serializers.SerializerMethodField()

    class Meta:
        model = StatementLine
        fields = [
            "id",
            "kind",
            "cluster_name",
            "flavour_name",
            "priority_class",
            "gpu_hours",
            "gpu_hours_busy",
            "rate",
            "multiplier",
            "amount",
            "currency",
            "source_currency",
            "source_amount",
            "exchange_rate",
            "exchange_month",
            "rate_card",
            "usage_period",
            "corrects",
            "adjustment",
            "note",
            "tenant_path",
            "cost_center",
            "mode",
        ]
        read_only_fields = fields

    def get_corrects(self, line: StatementLine) -> int | None:
        return line.corrects_id


class StatementSerializer(serializers.ModelSerializer[Statement]):
    period = serializers.CharField(source="period.name")
    tenant = serializers.CharField(source="tenant_slug")
    number = serializers.CharField()
    lines = StatementLineSerializer(many=True, read_only=True)

    class Meta:
        model = Statement
        fields = [
            "id",
            "number",
            "period",
            "revision",
            "tenant",
            "tenant_name",
            "cost_center",
            "mode",
            "currency",
            "total",
            "gpu_hours",
            "gpu_hours_busy",
            "warnings",
            "changes",
            "created_at",
            "lines",
        ]
        read_only_fields = fields


class StatementSummarySerializer(StatementSerializer):
    class Meta(StatementSerializer.Meta):
        fields = [f for f in StatementSerializer.Meta.fields if f != "lines"]
        read_only_fields = fields


class AdjustmentSerializer(RejectUnknownFields, serializers.ModelSerializer[Adjustment]):
    tenant = BillingTenantField()
    period = serializers.SlugRelatedField(slug_field="name", queryset=BillingPeriod.objects.all())
    corrects: serializers.PrimaryKeyRelatedField[Statement] = serializers.PrimaryKeyRelatedField(
        queryset=Statement.objects.none(), required=False, allow_null=True
    )
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, default=None, allow_null=True
    )

    class Meta:
        model = Adjustment
        fields = [
            "id",
            "tenant",
            "period",
            "amount",
            "currency",
            "reason",
            "corrects",
            "created_by",
            "created_at",
        ]
        read_only_fields = ["id", "created_by", "created_at"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        field = self.fields["corrects"]
        assert isinstance(field, serializers.PrimaryKeyRelatedField)
        field.queryset = statements_visible_to(request.user if request else None)


class BillingPeriodViewSet(KeepsContract, viewsets.ReadOnlyModelViewSet[BillingPeriod]):
    """Monthly billing periods. `close` freezes statements; `reopen` is an audited admin
    action."""

    queryset = BillingPeriod.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = BillingPeriodSerializer
    lookup_field = "name"
    lookup_value_regex = r"\d{4}-\d{2}"
    filterset_fields = ["state"]
    ordering = ["-start"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.periods_visible_to(self.request.user)

    @extend_schema(request=None, responses=BillingPeriodSerializer)
    @action(detail=True, methods=["post"])
    def close(self, request: Request, name: str | None = None) -> Response:
        """Close the period now (409 if already closed, not ended or being closed)."""
        NoInput.check(request.data)
        period = periods.period_close(actor=request.user, period=self.get_object(), source="api")
        return Response(BillingPeriodSerializer(period).data)

    @extend_schema(request=ReopenSerializer, responses=BillingPeriodSerializer)
    @action(detail=True, methods=["post"])
    def reopen(self, request: Request, name: str | None = None) -> Response:
        """Re-open the latest closed period (platform admins), saying why."""
        body = ReopenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        period = periods.period_reopen(
            actor=request.user,
            period=self.get_object(),
            reason=body.validated_data["reason"],
            reprice=body.validated_data["reprice"],
            source="api",
        )
        return Response(BillingPeriodSerializer(period).data)


class StatementFilter(django_filters.FilterSet):
    period = django_filters.CharFilter(field_name="period__name")
    tenant = django_filters.CharFilter(field_name="tenant_slug")

    class Meta:
        model = Statement
        fields = ["period", "tenant", "mode", "cost_center"]


class StatementViewSet(KeepsContract, viewsets.ModelViewSet[Statement]):
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
        return StatementSerializer if self.action == "retrieve" else StatementSummarySerializer

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

    def refuse_outright(self, request: Request) -> None:
        if self.action in {"update", "partial_update"}:  # whatever the body says
            raise self._frozen()

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
        return Response([plain_row(row) for row in rows])

    @extend_schema(responses=None)
    @action(detail=True, methods=["get"])
    def pdf(self, request: Request, pk: str | None = None) -> HttpResponse:
        """The statement as an invoice-grade PDF, in the reader's language."""
        return invoice_response(invoices.statement_invoice(self.get_object()))


class AdjustmentViewSet(
    KeepsContract,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[Adjustment],
):
    """Hand-made corrections, billed when their (open) period closes."""

    queryset = Adjustment.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = AdjustmentSerializer
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


class ExportViewSet(KeepsContract, viewsets.ViewSet):
    """Chargeback export of a period: `?period=YYYY-MM&as=csv|xlsx|pdf[&tenant=slug]`.
    An open period's export is provisional (file name and `X-Tidegate-Provisional`)."""

    @extend_schema(
        parameters=[
            PERIOD,
            OpenApiParameter("as", OpenApiTypes.STR, enum=["csv", "xlsx", "pdf"], default="csv"),
            TENANT,
        ],
        responses=None,
    )
    def list(self, request: Request) -> HttpResponse:
        require_billing_reader(request)
        fmt = request.query_params.get("as", "csv")
        if fmt not in exports.CONTENT_TYPES:
            raise ValidationFailed(
                _("Unknown export type '%(type)s'; use as=csv, as=xlsx or as=pdf."),
                params={"type": fmt},
                field="as",
            )
        period = period_named(request.query_params.get("period"))
        tenant = tenant_of_slug(request.user, request.query_params.get("tenant"))
        report = reports.period_report(request.user, period, subtree=tenant)
        return export_response(report, fmt)

    @extend_schema(
        parameters=[
            PERIOD,
            OpenApiParameter(
                "code",
                OpenApiTypes.STR,
                required=True,
                description="A cost centre; empty: tenants without one; __idle__: idle capacity",
            ),
        ],
        responses=None,
    )
    @action(detail=False, methods=["get"], url_path="cost-centre")
    def cost_centre(self, request: Request) -> HttpResponse:
        """One cost centre's lines of a period as an invoice-grade PDF:
        `?period=YYYY-MM&code=<cost centre>` (`code=__idle__`: idle capacity)."""
        require_billing_reader(request)
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
