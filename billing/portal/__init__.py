"""Portal pages of billing: the finance overview, billing periods (with downloads and the
close), statements per tenant and per cost centre with drill-down to workloads, the rate
cards page, budgets across tenants with a burn heat map, idle capacity explained, the
month-over-month trend, the what-if page on a cluster's history (platform admins), and
the budget panel on tenant pages (live through htmx).

Pages read through `billing.selectors`; a user without a billing role sees 404 (plain
members see no money), and so does anyone on a page their role does not read.
"""

from __future__ import annotations

from django.urls import path

from billing.portal.allocation import allocation_page
from billing.portal.budgets import (
    budget_edit,
    budget_new,
    budget_overview,
    budget_panel,
    budget_panel_partial,
)
from billing.portal.common import line_kind
from billing.portal.exchange_rates import exchange_rate_list
from billing.portal.idle import idle_capacity
from billing.portal.overview import billing_home, spend_trend
from billing.portal.periods import period_close, period_export, period_list
from billing.portal.rates import rate_card_edit, rate_cards
from billing.portal.statements import (
    cost_centre_detail,
    cost_centre_pdf,
    statement_detail,
    statement_pdf,
)
from billing.portal.whatif import (
    whatif_page,
    whatif_run_again,
    whatif_run_page,
    whatif_run_progress,
)

__all__ = ["budget_panel", "line_kind", "urlpatterns"]

urlpatterns = [
    path("billing/", billing_home, name="billing-home"),
    path("billing/periods/", period_list, name="billing-periods"),
    path("billing/statements/<int:pk>/", statement_detail, name="billing-statement"),
    path("billing/statements/<int:pk>/pdf/", statement_pdf, name="portal-billing-statement-pdf"),
    path("billing/periods/<str:name>/cost-centre/", cost_centre_detail, name="billing-cost-centre"),
    path(
        "billing/periods/<str:name>/cost-centre/pdf/",
        cost_centre_pdf,
        name="billing-cost-centre-pdf",
    ),
    path(
        "billing/periods/<str:name>/export/<str:fmt>/", period_export, name="billing-period-export"
    ),
    path("billing/periods/<str:name>/close/", period_close, name="portal-billing-period-close"),
    path("billing/rate-cards/", rate_cards, name="billing-rate-cards"),
    path("billing/rate-cards/<int:pk>/edit/", rate_card_edit, name="billing-rate-card-edit"),
    path("billing/exchange-rates/", exchange_rate_list, name="billing-exchange-rates"),
    path("billing/budgets/", budget_overview, name="billing-budgets"),
    path("billing/budgets/<int:pk>/edit/", budget_edit, name="billing-budget-edit"),
    path("billing/budgets/new/", budget_new, name="billing-budget-new"),
    path(
        "billing/budgets/panel/<slug:slug>/",
        budget_panel_partial,
        name="billing-budget-panel",
    ),
    path("billing/idle/", idle_capacity, name="billing-idle"),
    path("billing/trend/", spend_trend, name="billing-trend"),
    path("billing/allocation/", allocation_page, name="billing-allocation"),
    path("billing/what-if/", whatif_page, name="billing-whatif"),
    path("billing/what-if/<int:pk>/", whatif_run_page, name="billing-whatif-run"),
    path("billing/what-if/<int:pk>/progress/", whatif_run_progress, name="billing-whatif-progress"),
    path("billing/what-if/<int:pk>/again/", whatif_run_again, name="billing-whatif-again"),
]
