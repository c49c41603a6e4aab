"""Routes of the billing API, all under `billing/`; config.urls adds them to API v1."""

from rest_framework.routers import DefaultRouter

from billing.api import budgeting, charging, reporting, statements, usage
from billing.api.whatif import WhatIfRunViewSet

router = DefaultRouter()
router.register("billing/rate-cards", charging.RateCardViewSet, basename="billing-rate-card")
router.register(
    "billing/exchange-rates", charging.ExchangeRateViewSet, basename="billing-exchange-rate"
)
router.register("billing/policy", charging.BillingPolicyViewSet, basename="billing-policy")
router.register(
    "billing/tenant-settings",
    charging.TenantBillingSettingsViewSet,
    basename="billing-tenant-settings",
)
router.register("billing/usage", usage.UsageRecordViewSet, basename="billing-usage")
router.register("billing/periods", statements.BillingPeriodViewSet, basename="billing-period")
router.register("billing/statements", statements.StatementViewSet, basename="billing-statement")
router.register("billing/adjustments", statements.AdjustmentViewSet, basename="billing-adjustment")
router.register("billing/budgets", budgeting.BudgetViewSet, basename="billing-budget")
router.register(
    "billing/budget-alerts", budgeting.BudgetAlertViewSet, basename="billing-budget-alert"
)
router.register(
    "billing/reports/spend", reporting.SpendReportViewSet, basename="billing-report-spend"
)
router.register(
    "billing/reports/efficiency",
    reporting.EfficiencyReportViewSet,
    basename="billing-report-efficiency",
)
router.register("billing/reports/idle", reporting.IdleReportViewSet, basename="billing-report-idle")
router.register(
    "billing/reports/workloads",
    reporting.WorkloadReportViewSet,
    basename="billing-report-workloads",
)
router.register("billing/exports", statements.ExportViewSet, basename="billing-export")
router.register("billing/collections", usage.CollectionViewSet, basename="billing-collection")
router.register("allocation", reporting.AllocationViewSet, basename="allocation")
router.register("what-if", WhatIfRunViewSet, basename="what-if")
