"""Routes of the billing API, all under `billing/`; config.urls adds them to API v1."""

from rest_framework.routers import DefaultRouter

from billing.api import views
from billing.api.whatif import WhatIfRunViewSet

router = DefaultRouter()
router.register("billing/rate-cards", views.RateCardViewSet, basename="billing-rate-card")
router.register(
    "billing/exchange-rates", views.ExchangeRateViewSet, basename="billing-exchange-rate"
)
router.register("billing/policy", views.BillingPolicyViewSet, basename="billing-policy")
router.register(
    "billing/tenant-settings",
    views.TenantBillingSettingsViewSet,
    basename="billing-tenant-settings",
)
router.register("billing/usage", views.UsageRecordViewSet, basename="billing-usage")
router.register("billing/periods", views.BillingPeriodViewSet, basename="billing-period")
router.register("billing/statements", views.StatementViewSet, basename="billing-statement")
router.register("billing/adjustments", views.AdjustmentViewSet, basename="billing-adjustment")
router.register("billing/budgets", views.BudgetViewSet, basename="billing-budget")
router.register("billing/budget-alerts", views.BudgetAlertViewSet, basename="billing-budget-alert")
router.register("billing/reports/spend", views.SpendReportViewSet, basename="billing-report-spend")
router.register(
    "billing/reports/efficiency",
    views.EfficiencyReportViewSet,
    basename="billing-report-efficiency",
)
router.register("billing/reports/idle", views.IdleReportViewSet, basename="billing-report-idle")
router.register(
    "billing/reports/workloads", views.WorkloadReportViewSet, basename="billing-report-workloads"
)
router.register("billing/exports", views.ExportViewSet, basename="billing-export")
router.register("billing/collections", views.CollectionViewSet, basename="billing-collection")
router.register("allocation", views.AllocationViewSet, basename="allocation")
router.register("what-if", WhatIfRunViewSet, basename="what-if")
