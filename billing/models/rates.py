"""Rate cards, per-tenant billing settings, and the platform-wide billing policy."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from billing.models.common import CURRENCY
from scheduler_bridge.inventory.models import Cluster, Flavour
from tenants.models import Tenant

PRICE: dict[str, Any] = {
    "max_digits": 12,
    "decimal_places": 4,
    "validators": [MinValueValidator(Decimal(0))],
}


class RateCard(models.Model):
    """Prices per GPU-hour valid on [valid_from, valid_to) for a flavour, a product, a MIG
    profile of a product, or every GPU (most specific wins; a cluster-bound card beats an
    unbound one). A card naming a MIG profile (or a MIG flavour) prices one instance-hour;
    otherwise MIG instances pay their compute fraction of the GPU price.

    ``reserved_price`` applies within the tenant's quota (and to reserved capacity);
    ``on_demand_price`` to borrowed GPUs. ``priority_multipliers`` maps priority class
    names to a multiplier ("0.6" = a 40 % preemptible discount) and overrides the
    classes' own multipliers.
    """

    name = models.CharField(_("name"), max_length=120)
    cluster = models.ForeignKey(
        Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    flavour = models.ForeignKey(
        Flavour, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    product = models.CharField(_("GPU product"), max_length=120, blank=True)
    mig_profile = models.CharField(_("MIG profile"), max_length=40, blank=True)
    currency = models.CharField(_("currency"), max_length=3, validators=[CURRENCY])
    reserved_price = models.DecimalField(_("reserved price per GPU-hour"), **PRICE)
    on_demand_price = models.DecimalField(_("on-demand price per GPU-hour"), **PRICE)
    priority_multipliers = models.JSONField(_("priority multipliers"), default=dict, blank=True)
    valid_from = models.DateField(_("valid from"))
    valid_to = models.DateField(_("valid until (exclusive)"), null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-valid_from", "name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(reserved_price__gte=0) & models.Q(on_demand_price__gte=0),
                name="ratecard_prices_not_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(valid_to__isnull=True)
                | models.Q(valid_to__gt=models.F("valid_from")),
                name="ratecard_validity_ordered",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.scope_label()}, {self.currency}, from {self.valid_from})"

    def scope_label(self) -> str:
        if self.flavour_id:
            return f"flavour {self.flavour}"
        parts = [self.product or "any GPU"]
        if self.mig_profile:
            parts.append(self.mig_profile)
        if self.cluster_id:
            parts.append(f"on {self.cluster}")
        return " ".join(parts)

    def scope_key(self) -> tuple[Any, ...]:
        """Cards with equal keys compete for the same usage and may not overlap in time."""
        return (self.cluster_id, self.flavour_id, self.product.lower(), self.mig_profile)


class TenantBillingSettings(models.Model):
    """How a tenant is billed; applies to its subtree unless a descendant has its own.

    ``chargeback`` statements are invoices charged to the cost centre; ``showback`` shows
    the same amounts without charging. ``charge_reserved`` bills the tenant's own
    guarantee as reserved capacity whether used or not.
    """

    class Mode(models.TextChoices):
        CHARGEBACK = "chargeback", _("Chargeback")
        SHOWBACK = "showback", _("Showback")

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="+")
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.CHARGEBACK)
    charge_reserved = models.BooleanField(default=False)
    # The currency its statements are written in (blank: inherited, at the top the
    # platform's default currency); lines priced in another are converted.
    currency = models.CharField(
        _("billing currency"), max_length=3, blank=True, default="", validators=[CURRENCY]
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__path"]
        verbose_name_plural = _("tenant billing settings")

    def __str__(self) -> str:
        return f"{self.tenant.slug}: {self.mode}{' + reserved' if self.charge_reserved else ''}"


MONTH = RegexValidator(
    regex=r"^\d{4}-(0[1-9]|1[0-2])$",
    message=_("Use a month written YYYY-MM, e.g. 2026-02."),
    code="month",
)


class ExchangeRate(models.Model):
    """How many ``to_currency`` one ``from_currency`` was worth in ``month`` ("YYYY-MM"),
    as finance fixed it: charges of that month priced in ``from_currency`` are converted
    with it. One rate per month and pair; the reverse pair is a rate of its own."""

    month = models.CharField(_("month"), max_length=7, validators=[MONTH])
    from_currency = models.CharField(_("from currency"), max_length=3, validators=[CURRENCY])
    to_currency = models.CharField(_("to currency"), max_length=3, validators=[CURRENCY])
    rate = models.DecimalField(_("rate"), max_digits=18, decimal_places=8)
    source = models.CharField(_("source"), max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-month", "from_currency", "to_currency"]
        verbose_name = _("exchange rate")
        verbose_name_plural = _("exchange rates")
        constraints = [
            models.UniqueConstraint(
                fields=["month", "from_currency", "to_currency"], name="exchange_rate_one_per_pair"
            ),
            models.CheckConstraint(condition=models.Q(rate__gt=0), name="exchange_rate_positive"),
            models.CheckConstraint(
                condition=~models.Q(from_currency=models.F("to_currency")),
                name="exchange_rate_two_currencies",
            ),
        ]

    def __str__(self) -> str:
        return f"1 {self.from_currency} = {self.rate} {self.to_currency} ({self.month})"


class BillingPolicy(models.Model):
    """Platform-wide billing choices; a single row (pk 1)."""

    class IdleMode(models.TextChoices):
        HIDDEN = "hidden", _("Not shown")
        LINE = "line", _("Shown as an __idle__ line")
        SPREAD = "spread", _("Spread over tenants by guarantee")

    class AllocationIdle(models.TextChoices):
        EVEN = "even", _("Evenly over the groups that used the flavour")
        GUARANTEE = "guarantee", _("By guarantee")
        USAGE = "usage", _("By usage")

    idle_mode = models.CharField(max_length=8, choices=IdleMode.choices, default=IdleMode.LINE)
    # How the cost allocation view shares idle capacity out (statements follow idle_mode).
    allocation_idle = models.CharField(
        max_length=9, choices=AllocationIdle.choices, default=AllocationIdle.USAGE
    )
    default_currency = models.CharField(max_length=3, default="USD", validators=[CURRENCY])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = _("billing policy")

    def __str__(self) -> str:
        return f"idle {self.idle_mode}, {self.default_currency}"

    @classmethod
    def current(cls) -> BillingPolicy:
        policy, _created = cls.objects.get_or_create(pk=1)
        return policy
