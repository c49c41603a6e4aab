"""Budgets and their alerts through the API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, viewsets

from billing import selectors
from billing.api.common import BillingTenantField
from billing.budgeting import budgets as budget_services
from billing.models import (
    Budget,
    BudgetAlert,
    BudgetStatus,
)
from tenants.api.contract import KeepsContract
from tenants.api.serializers import RejectUnknownFields

MAX_THRESHOLDS = 20  # alert thresholds of one budget


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


class BudgetViewSet(KeepsContract, viewsets.ModelViewSet[Budget]):
    """Budgets per tenant subtree (monthly or quarterly, soft or hard) and their status."""

    queryset = Budget.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = BudgetSerializer
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


class BudgetAlertViewSet(KeepsContract, viewsets.ReadOnlyModelViewSet[BudgetAlert]):
    """Budget thresholds crossed, once each per budget period."""

    queryset = BudgetAlert.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = BudgetAlertSerializer
    filterset_fields = {"budget__tenant__slug": ["exact"], "period_name": ["exact"]}

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.budget_alerts_visible_to(self.request.user)
