"""Django admin for billing. Money rules (overlapping rate cards, currencies, frozen
statements) live in the services, so the admin shows billing records read-only and
changes go through the API or the portal; simple settings are editable and audited."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from billing.models import (
    Adjustment,
    BillingPeriod,
    BillingPolicy,
    Budget,
    BudgetAlert,
    CollectorWatermark,
    ExchangeRate,
    RateCard,
    Statement,
    StatementLine,
    TenantBillingSettings,
    UsageRecord,
)
from tenants.admin import AuditedAdmin


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = [
        "interval_start",
        "tenant",
        "namespace",
        "pod_name",
        "flavour",
        "devices",
        "gpu_seconds_allocated",
        "gpu_seconds_busy",
        "period",
    ]
    list_filter = ["period", "cluster", "source"]
    search_fields = ["namespace", "pod_name", "job_name", "pod_uid"]


@admin.register(RateCard)
class RateCardAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "product",
        "mig_profile",
        "flavour",
        "cluster",
        "currency",
        "reserved_price",
        "on_demand_price",
        "valid_from",
        "valid_to",
    ]


@admin.register(BillingPeriod)
class BillingPeriodAdmin(ReadOnlyAdmin):
    list_display = ["name", "state", "revision", "closed_at"]


class StatementLineInline(admin.TabularInline):  # type: ignore[type-arg]
    model = StatementLine
    fk_name = "statement"
    extra = 0
    can_delete = False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Statement)
class StatementAdmin(ReadOnlyAdmin):
    list_display = ["period", "revision", "tenant_slug", "cost_center", "mode", "total", "currency"]
    list_filter = ["period", "mode"]
    inlines = [StatementLineInline]


@admin.register(Adjustment)
class AdjustmentAdmin(ReadOnlyAdmin):
    list_display = ["tenant", "period", "amount", "currency", "reason", "created_by"]


@admin.register(Budget)
class BudgetAdmin(ReadOnlyAdmin):
    list_display = ["tenant", "cadence", "amount", "currency", "enforcement", "is_active"]


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdmin):
    list_display = ["budget", "period_name", "threshold", "spent", "fired_at", "emailed_at"]


@admin.register(CollectorWatermark)
class CollectorWatermarkAdmin(ReadOnlyAdmin):
    list_display = ["cluster", "collected_until", "last_run_at", "last_rows", "last_error"]


@admin.register(TenantBillingSettings)
class TenantBillingSettingsAdmin(AuditedAdmin):
    list_display = ["tenant", "mode", "charge_reserved", "currency"]


@admin.register(ExchangeRate)
class ExchangeRateAdmin(AuditedAdmin):
    list_display = ["month", "from_currency", "to_currency", "rate", "source"]
    list_filter = ["from_currency", "to_currency"]


@admin.register(BillingPolicy)
class BillingPolicyAdmin(AuditedAdmin):
    list_display = ["idle_mode", "allocation_idle", "default_currency"]
