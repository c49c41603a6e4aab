"""Input and output shapes of the billing API. Field checks live here; rules that span
rows (overlaps, currencies, frozen periods) live in the services."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from billing.models import (
    Adjustment,
    BillingPeriod,
    BillingPolicy,
    Budget,
    BudgetAlert,
    BudgetStatus,
    ExchangeRate,
    RateCard,
    Statement,
    StatementLine,
    TenantBillingSettings,
    UsageRecord,
)
from billing.selectors import billing_tenants, statements_visible_to
from scheduler_bridge import selectors as bridge_selectors
from tenants.api.serializers import RejectUnknownFields, at_most
from tenants.models import Tenant

MAX_THRESHOLDS = 20  # alert thresholds of one budget
MAX_MULTIPLIERS = 100  # priority classes a rate card prices apart


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


class RateCardSerializer(RejectUnknownFields, serializers.ModelSerializer[RateCard]):
    cluster = VisibleClusterField(required=False, allow_null=True)
    flavour = VisibleFlavourField(required=False, allow_null=True)
    flavour_name = serializers.CharField(
        source="flavour.name", read_only=True, default=None, allow_null=True
    )
    scope = serializers.CharField(source="scope_label", read_only=True)
    # Negative prices are the service's to refuse, with a message naming the field.
    reserved_price = serializers.DecimalField(max_digits=12, decimal_places=4)
    on_demand_price = serializers.DecimalField(max_digits=12, decimal_places=4)

    class Meta:
        model = RateCard
        fields = [
            "id",
            "name",
            "scope",
            "cluster",
            "flavour",
            "flavour_name",
            "product",
            "mig_profile",
            "currency",
            "reserved_price",
            "on_demand_price",
            "priority_multipliers",
            "valid_from",
            "valid_to",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "scope", "flavour_name", "created_at", "updated_at"]

    def validate_priority_multipliers(self, value: Any) -> Any:
        return at_most(value, MAX_MULTIPLIERS)


@extend_schema_serializer(many=False)  # one policy: GET /billing/policy/ is not a page
class BillingPolicySerializer(RejectUnknownFields, serializers.ModelSerializer[BillingPolicy]):
    class Meta:
        model = BillingPolicy
        fields = ["idle_mode", "allocation_idle", "default_currency", "updated_at"]
        read_only_fields = ["updated_at"]


class ExchangeRateSerializer(RejectUnknownFields, serializers.ModelSerializer[ExchangeRate]):
    """An exchange rate for one month: 1 `from_currency` = `rate` `to_currency` in `month`.
    A rate that breaks the rules is refused with a 400 naming the field."""

    created_by = serializers.CharField(source="created_by.username", read_only=True, default="")

    class Meta:
        model = ExchangeRate
        fields = [
            "id",
            "month",
            "from_currency",
            "to_currency",
            "rate",
            "source",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_by", "created_at", "updated_at"]
        validators: list[Any] = []  # the service reports a taken month and pair as a field error
        extra_kwargs: dict[str, Any] = {
            "month": {"validators": []},
            "from_currency": {"validators": []},
            "to_currency": {"validators": []},
        }


class TenantBillingSettingsSerializer(
    RejectUnknownFields, serializers.ModelSerializer[TenantBillingSettings]
):
    tenant = BillingTenantField()

    class Meta:
        model = TenantBillingSettings
        fields = ["tenant", "mode", "charge_reserved", "currency", "updated_at"]
        read_only_fields = ["updated_at"]
        validators: list[Any] = []


class UsageRecordSerializer(serializers.ModelSerializer[UsageRecord]):
    tenant = serializers.CharField(source="tenant.slug")
    cluster = serializers.CharField(source="cluster.name")
    flavour = serializers.CharField(source="flavour.name")
    period = serializers.CharField(source="period.name")

    class Meta:
        model = UsageRecord
        fields = [
            "id",
            "tenant",
            "cluster",
            "flavour",
            "period",
            "namespace",
            "pod_uid",
            "pod_name",
            "workload",
            "job_name",
            "priority_class",
            "source",
            "interval_start",
            "interval_end",
            "devices",
            "gpu_seconds_allocated",
            "gpu_seconds_busy",
            "gpu_seconds_borrowed",
            "busy_partial",
            "busy_estimated",
            "created_at",
        ]
        read_only_fields = fields


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


class BudgetStatusSerializer(serializers.ModelSerializer[BudgetStatus]):
    exhausted = serializers.BooleanField(read_only=True)

    class Meta:
        model = BudgetStatus
        fields = [
            "period_name",
            "window_start",
            "window_end",
            "spent",
            "burn_per_hour",
            "running_per_hour",
            "forecast_exhausted_at",
            "exhausted",
            "evaluated_at",
        ]
        read_only_fields = fields


class BudgetSerializer(RejectUnknownFields, serializers.ModelSerializer[Budget]):
    tenant = BillingTenantField()
    amount = serializers.DecimalField(max_digits=14, decimal_places=2)
    thresholds = serializers.ListField(
        child=serializers.IntegerField(), required=False, max_length=MAX_THRESHOLDS
    )
    status = BudgetStatusSerializer(read_only=True, allow_null=True)

    class Meta:
        model = Budget
        fields = [
            "id",
            "tenant",
            "cadence",
            "amount",
            "currency",
            "thresholds",
            "enforcement",
            "on_exhausted",
            "is_active",
            "status",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "status", "created_at", "updated_at"]
        validators: list[Any] = []  # one budget per tenant and cadence: the service says so

    def to_representation(self, instance: Budget) -> dict[str, Any]:
        data = super().to_representation(instance)
        if not hasattr(instance, "status"):
            data["status"] = None
        return data


class BudgetAlertSerializer(serializers.ModelSerializer[BudgetAlert]):
    tenant = serializers.CharField(source="budget.tenant.slug")
    cadence = serializers.CharField(source="budget.cadence")
    enforcement = serializers.CharField(source="budget.enforcement")

    class Meta:
        model = BudgetAlert
        fields = [
            "id",
            "tenant",
            "cadence",
            "enforcement",
            "period_name",
            "threshold",
            "spent",
            "amount",
            "currency",
            "fired_at",
            "emailed_at",
        ]
        read_only_fields = fields


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


class CollectionStateSerializer(serializers.Serializer[Any]):
    cluster = serializers.CharField()
    collected_until = serializers.DateTimeField()
    last_run_at = serializers.DateTimeField(allow_null=True)
    last_rows = serializers.IntegerField()
    last_error = serializers.CharField()
    dcgm_pod_labels = serializers.CharField()
    dcgm_pod_labels_note = serializers.CharField()


class CollectionRequestSerializer(RejectUnknownFields, serializers.Serializer[Any]):
    cluster = serializers.CharField(max_length=63, help_text=_("The cluster to collect now."))


class ReportQuerySerializer(serializers.Serializer[Any]):
    period = serializers.CharField(required=False)
    tenant = serializers.CharField(required=False)
    group_by = serializers.ChoiceField(
        choices=["line", "tenant", "cost_center", "flavor", "kind", "child"],
        required=False,
        default="line",
    )


def tenant_of_slug(user: Any, slug: str | None) -> Tenant | None:
    """The visible (money-reading) tenant called ``slug``; None for no slug."""
    if not slug:
        return None
    from django.http import Http404

    tenant = billing_tenants(user).filter(slug=slug).first()
    if tenant is None:
        raise Http404
    return tenant
