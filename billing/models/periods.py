"""Billing periods, the statements their close freezes, and hand-made adjustments."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from billing.errors import StatementFrozen
from billing.models.common import CURRENCY, WriteOnceModel, WriteOnceQuerySet
from scheduler_bridge.inventory.models import Flavour
from tenants.models import Tenant

MONEY: dict[str, Any] = {"max_digits": 14, "decimal_places": 2}
HOURS: dict[str, Any] = {"max_digits": 18, "decimal_places": 4}


class BillingPeriod(models.Model):
    """A calendar month (UTC), named "YYYY-MM": open, closing (statements being written,
    resumable), closed (statements frozen). Re-opening bumps ``revision``: the next close
    writes a new set of statements and the old set stays, superseded, for the record."""

    class State(models.TextChoices):
        OPEN = "open", _("Open")
        CLOSING = "closing", _("Closing")
        CLOSED = "closed", _("Closed")

    name = models.CharField(max_length=7, unique=True)
    start = models.DateTimeField()
    end = models.DateTimeField()
    state = models.CharField(max_length=8, choices=State.choices, default=State.OPEN)
    revision = models.PositiveIntegerField(default=1)
    # Set by a re-open that asks for it: the next close prices with the settings the
    # history holds now (e.g. a corrected rate card) instead of the copy the last close froze.
    reprice = models.BooleanField(default=False)
    # The worker closing the period holds a lease: a token, who holds it (host/pid), and
    # until when (renewed as it works). Another close may take over once it expired.
    close_token = models.CharField(max_length=36, blank=True)
    close_owner = models.CharField(max_length=200, blank=True)
    close_heartbeat_at = models.DateTimeField(null=True, blank=True)
    close_lease_expires_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-start"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(end__gt=models.F("start")), name="period_ordered"
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_open(self) -> bool:
        return self.state == self.State.OPEN


class StatementQuerySet(WriteOnceQuerySet["Statement"]):
    pass


class StatementLineQuerySet(WriteOnceQuerySet["StatementLine"]):
    pass


class Statement(WriteOnceModel):
    """What one tenant owes (or is shown, in showback) for one period, frozen at close.

    Tenant name, slug and cost centre are copied so a later rename never changes a closed
    statement. ``tenant`` None is the platform's ``__idle__`` statement.
    """

    class Mode(models.TextChoices):
        CHARGEBACK = "chargeback", _("Chargeback")
        SHOWBACK = "showback", _("Showback")
        # idle capacity: the platform's unrecovered cost, charged to nobody
        PLATFORM = "platform", _("Platform cost (not charged)")

    write_once_error = StatementFrozen

    period = models.ForeignKey(BillingPeriod, on_delete=models.PROTECT, related_name="statements")
    revision = models.PositiveIntegerField(default=1)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    tenant_slug = models.CharField(max_length=63)
    tenant_name = models.CharField(max_length=200)
    cost_center = models.CharField(max_length=64, blank=True)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.CHARGEBACK)
    currency = models.CharField(max_length=3, validators=[CURRENCY])
    total = models.DecimalField(**MONEY)
    gpu_hours = models.DecimalField(**HOURS, default=0)
    gpu_hours_busy = models.DecimalField(**HOURS, default=0)
    warnings = models.JSONField(default=list, blank=True)
    # After a re-open: what changed against the same tenant's statement of the previous
    # revision (a list of {"line", "field", "before", "after"}; empty: nothing changed).
    changes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = StatementQuerySet.as_manager()

    class Meta:
        ordering = ["period__start", "tenant_slug"]
        verbose_name = _("statement")
        verbose_name_plural = _("statements")
        constraints = [
            models.UniqueConstraint(
                fields=["period", "revision", "tenant"], name="statement_one_per_tenant"
            ),
            models.UniqueConstraint(
                fields=["period", "revision"],
                condition=models.Q(tenant__isnull=True),
                name="statement_one_idle_per_period",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "period"], name="statement_tenant_period")]

    def __str__(self) -> str:
        return f"{self.number}: {self.total} {self.currency}"

    @property
    def number(self) -> str:
        """A reference finance can quote: "2026-02-vision" (+ "-r2" after a re-open)."""
        suffix = f"-r{self.revision}" if self.revision > 1 else ""
        return f"{self.period.name}-{self.tenant_slug}{suffix}"


class StatementLine(WriteOnceModel):
    """One priced line of a statement: a flavour x kind (x priority class x rate card)."""

    write_once_error = StatementFrozen

    statement = models.ForeignKey(Statement, on_delete=models.PROTECT, related_name="lines")
    kind = models.CharField(max_length=20)
    flavour = models.ForeignKey(
        Flavour, null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    flavour_name = models.CharField(max_length=120, blank=True)
    cluster_name = models.CharField(max_length=63, blank=True)
    priority_class = models.CharField(max_length=63, blank=True)
    gpu_hours = models.DecimalField(**HOURS)
    gpu_hours_busy = models.DecimalField(**HOURS, null=True, blank=True)
    rate = models.DecimalField(max_digits=16, decimal_places=6)
    multiplier = models.DecimalField(max_digits=8, decimal_places=3, default=1)
    amount = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3, validators=[CURRENCY])
    # Priced in another currency and converted: that currency, the amount in it, and the
    # rate of the month used (1 source_currency = exchange_rate currency). Blank: not converted.
    source_currency = models.CharField(max_length=3, blank=True)
    source_amount = models.DecimalField(**MONEY, null=True, blank=True)
    exchange_rate = models.DecimalField(max_digits=18, decimal_places=8, null=True, blank=True)
    exchange_month = models.CharField(max_length=7, blank=True)
    rate_card = models.ForeignKey(
        "billing.RateCard",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
    )
    # Late usage and adjustments: which period they belong to and what they correct.
    usage_period = models.CharField(max_length=7, blank=True)
    corrects = models.ForeignKey(
        Statement,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="corrected_by",
        db_index=False,
    )
    adjustment = models.ForeignKey(
        "billing.Adjustment",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
    )
    note = models.CharField(max_length=300, blank=True)
    # Whom the line was charged to during the hours it covers (a tenant that moved or
    # changed cost centre mid-period has one line per place): its path in the tree then,
    # its cost centre then, chargeback or showback then.
    tenant_path = models.CharField(max_length=512, blank=True)
    cost_center = models.CharField(max_length=64, blank=True)
    mode = models.CharField(max_length=10, blank=True)

    objects = StatementLineQuerySet.as_manager()

    class Meta:
        ordering = ["statement", "id"]
        verbose_name = _("statement line")
        verbose_name_plural = _("statement lines")

    def __str__(self) -> str:
        return f"{self.kind} {self.flavour_name}: {self.amount} {self.currency}"


class Adjustment(models.Model):
    """A correction finance enters by hand: billed in ``period`` (open) as an adjustment
    line, pointing at the closed statement it corrects. Positive amounts charge more."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    period = models.ForeignKey(BillingPeriod, on_delete=models.PROTECT, related_name="+")
    amount = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3, validators=[CURRENCY])
    reason = models.CharField(max_length=300)
    corrects = models.ForeignKey(
        Statement, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=~models.Q(amount=0), name="adjustment_not_zero")
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug} {self.period.name}: {self.amount} {self.currency}"


class PricingSnapshotQuerySet(WriteOnceQuerySet["PricingSnapshot"]):
    pass


class PricingSnapshot(WriteOnceModel):
    """The effective-dated settings a close priced a period with (billing.charging.history), frozen:
    closing the period again after a re-open prices with this copy, not with today's
    settings."""

    write_once_error = StatementFrozen

    period = models.ForeignKey(BillingPeriod, on_delete=models.PROTECT, related_name="+")
    revision = models.PositiveIntegerField()
    data = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects = PricingSnapshotQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["period", "revision"], name="pricing_snapshot_once")
        ]

    def __str__(self) -> str:
        return f"settings of {self.period.name} r{self.revision}"
