"""Models of billing, defined per concern in this package."""

from billing.models.budgets import Budget, BudgetAlert, BudgetStatus
from billing.models.ledger import CollectorWatermark, UsageRecord
from billing.models.periods import (
    Adjustment,
    BillingPeriod,
    PricingSnapshot,
    Statement,
    StatementLine,
)
from billing.models.rates import BillingPolicy, ExchangeRate, RateCard, TenantBillingSettings
from billing.models.whatif import WhatIfRun

__all__ = [
    "Adjustment",
    "BillingPeriod",
    "BillingPolicy",
    "Budget",
    "BudgetAlert",
    "BudgetStatus",
    "CollectorWatermark",
    "ExchangeRate",
    "PricingSnapshot",
    "RateCard",
    "Statement",
    "StatementLine",
    "TenantBillingSettings",
    "UsageRecord",
    "WhatIfRun",
]
