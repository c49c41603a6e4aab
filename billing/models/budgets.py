"""Budgets per tenant subtree, their evaluated state, and the alerts they fire."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from billing.models.common import CURRENCY
from tenants.models import Tenant

MONEY: dict[str, Any] = {"max_digits": 14, "decimal_places": 2}


def default_thresholds() -> list[int]:
    return [50, 80, 100]


class Budget(models.Model):
    """A spending limit for a tenant's whole subtree, renewed every month or quarter.

    Alerts fire once per threshold (percent of ``amount``) per budget period. A ``hard``
    budget also stops admission of new work in the subtree once it is spent (or once a
    workload would cost more than what is left); a ``soft`` one only warns. What a spent
    hard budget does to work already running is ``on_exhausted``: nothing (``hold``) or
    suspend the subtree's preemptible work (``suspend``).
    """

    class Cadence(models.TextChoices):
        MONTH = "month", _("Monthly")
        QUARTER = "quarter", _("Quarterly")

    class Enforcement(models.TextChoices):
        SOFT = "soft", _("Soft (alerts only)")
        HARD = "hard", _("Hard (stops admission)")

    class OnExhausted(models.TextChoices):
        HOLD = "hold", _("Hold new work")
        SUSPEND = "suspend", _("Suspend preemptible running work")

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    cadence = models.CharField(max_length=8, choices=Cadence.choices, default=Cadence.MONTH)
    amount = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3, validators=[CURRENCY])
    thresholds = models.JSONField(default=default_thresholds)
    enforcement = models.CharField(
        max_length=4, choices=Enforcement.choices, default=Enforcement.SOFT
    )
    on_exhausted = models.CharField(
        _("when spent"),
        max_length=8,
        choices=OnExhausted.choices,
        default=OnExhausted.HOLD,
        help_text=_(
            "What a spent hard budget does: hold new work back (running work goes on), or "
            "also suspend the running work of the subtree that may be preempted. Suspended "
            "work goes back to the queue and its leads are told."
        ),
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__path", "cadence"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "cadence"], name="budget_tenant_cadence"),
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="budget_positive"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.tenant.slug} {self.cadence} {self.amount} {self.currency} ({self.enforcement})"
        )

    @property
    def is_hard(self) -> bool:
        return self.enforcement == self.Enforcement.HARD

    @property
    def suspends_when_spent(self) -> bool:
        """A hard budget that also suspends running preemptible work once spent."""
        return self.is_hard and self.on_exhausted == self.OnExhausted.SUSPEND


class BudgetStatus(models.Model):
    """The budget as last evaluated: spend so far in the current budget period, burn and
    the forecast date of exhaustion. The admission gate reads this, never the ledger."""

    budget = models.OneToOneField(Budget, on_delete=models.CASCADE, related_name="status")
    period_name = models.CharField(max_length=7)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    spent = models.DecimalField(**MONEY)
    burn_per_hour = models.DecimalField(max_digits=14, decimal_places=4, default=0)
    running_per_hour = models.DecimalField(max_digits=14, decimal_places=4, default=0)
    forecast_exhausted_at = models.DateTimeField(null=True, blank=True)
    evaluated_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = _("budget statuses")

    def __str__(self) -> str:
        return f"{self.budget}: {self.spent} spent in {self.period_name}"

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.budget.amount


class BudgetAlert(models.Model):
    """A threshold crossed in one budget period. Unique, so two workers evaluating at once
    fire it once."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period_name = models.CharField(max_length=7)
    threshold = models.PositiveSmallIntegerField()
    spent = models.DecimalField(**MONEY)
    amount = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3)
    fired_at = models.DateTimeField(auto_now_add=True)
    emailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-fired_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_name", "threshold"], name="budget_alert_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.budget.tenant.slug} {self.period_name}: {self.threshold} %"
