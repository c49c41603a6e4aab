"""Quotas (tenant x flavour) and the requests that change them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from scheduler_bridge.inventory.models import Flavour
from tenants.models import Tenant

# the longest justification or decision comment (characters); longer is a 400
TEXT_MAX_LENGTH = 2000


class Quota(models.Model):
    """How much of a flavour a tenant is guaranteed, may borrow and may lend.

    `borrow_limit` empty: as far as the cohort allows. `lend_limit` empty: all of the
    unused guarantee may be lent.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quotas")
    flavour = models.ForeignKey(Flavour, on_delete=models.PROTECT, related_name="quotas")
    guaranteed = models.PositiveIntegerField(default=0)
    borrow_limit = models.PositiveIntegerField(null=True, blank=True)
    lend_limit = models.PositiveIntegerField(null=True, blank=True)
    overcommit_allowed = models.BooleanField(
        default=False,
        help_text=_("Set by a platform admin: top-level guarantee may exceed capacity."),
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__path", "flavour__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "flavour"], name="quota_tenant_flavour_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug} {self.flavour.name}: {self.guaranteed}"


class QuotaRequest(models.Model):
    """A lead asks for a quota change; an admin approves (applied at once) or rejects."""

    class State(models.TextChoices):
        PENDING = "pending", _("Pending")
        APPROVED = "approved", _("Approved")
        REJECTED = "rejected", _("Rejected")
        CANCELLED = "cancelled", _("Cancelled")

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quota_requests")
    flavour = models.ForeignKey(Flavour, on_delete=models.PROTECT, related_name="+")
    guaranteed = models.PositiveIntegerField()
    borrow_limit = models.PositiveIntegerField(null=True, blank=True)
    lend_limit = models.PositiveIntegerField(null=True, blank=True)
    justification = models.TextField(max_length=TEXT_MAX_LENGTH)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    decision_comment = models.TextField(blank=True, max_length=TEXT_MAX_LENGTH)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.tenant.slug} asks {self.guaranteed} {self.flavour.name} ({self.state})"
