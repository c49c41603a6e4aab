"""Writes to rate cards, tenant billing settings and the billing policy.

Rate card rules: prices are not negative; two cards for the same scope are never valid on
the same day; all cards valid on the same day share one currency (a period is priced in
one currency, and budgets must match it).
"""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import ProtectedError, Q

from billing.errors import CurrencyMismatch, RateCardOverlap
from billing.models import BillingPolicy, RateCard, TenantBillingSettings
from billing.permissions import can_manage_platform_billing, can_write_billing
from scheduler_bridge.inventory.models import Cluster
from tenants.audit import audit_record, snapshot
from tenants.errors import Conflict, PermissionDenied, ValidationFailed
from tenants.models import Tenant

RATE_CARD_FIELDS = (
    "name",
    "cluster",
    "flavour",
    "product",
    "mig_profile",
    "currency",
    "reserved_price",
    "on_demand_price",
    "priority_multipliers",
    "valid_from",
    "valid_to",
)


def _require_platform_billing(actor: Any) -> None:
    if not can_manage_platform_billing(actor):
        raise PermissionDenied(
            "Rate cards and the billing policy are platform-wide: they need the platform admin "
            "role, or finance on every top-level tenant."
        )


def _lock_rate_cards() -> None:
    """Serialise rate card writes: overlap and currency checks read all cards first.

    Locking the policy row (always present) works on every database and costs nothing:
    rate cards change a few times a year.
    """
    BillingPolicy.current()
    list(BillingPolicy.objects.select_for_update().filter(pk=1))


def _overlaps(a_from: date, a_to: date | None, b_from: date, b_to: date | None) -> bool:
    return (b_to is None or a_from < b_to) and (a_to is None or b_from < a_to)


def _validate(card: RateCard) -> None:
    for field in ("reserved_price", "on_demand_price"):
        value = getattr(card, field)
        try:
            value = Decimal(value)
        except (InvalidOperation, TypeError) as error:
            raise ValidationFailed(f"{field} must be a decimal number.", field=field) from error
        if value < 0:
            raise ValidationFailed(
                f"{field.replace('_', ' ')} may not be negative (got {value}); use 0 for free.",
                field=field,
            )
        setattr(card, field, value)
    if card.valid_to is not None and card.valid_to <= card.valid_from:
        raise ValidationFailed(
            f"valid_to ({card.valid_to}) must be after valid_from ({card.valid_from}); it is "
            "the first day the card no longer applies.",
            field="valid_to",
        )
    if card.flavour is not None:
        flavour = card.flavour
        if card.cluster_id is not None and card.cluster_id != flavour.cluster_id:
            raise ValidationFailed(
                f"Flavour {flavour} is not on cluster {card.cluster}.", field="cluster"
            )
        if card.product or card.mig_profile:
            raise ValidationFailed(
                "A card for a flavour takes its product and MIG profile from the flavour; leave "
                "product and mig_profile empty.",
                field="product",
            )
    if card.mig_profile and not card.product:
        raise ValidationFailed(
            "A MIG profile price needs the product it belongs to (e.g. H100-80GB).",
            field="product",
        )
    multipliers = card.priority_multipliers or {}
    if not isinstance(multipliers, dict):
        raise ValidationFailed(
            'priority_multipliers maps priority class names to multipliers, e.g. {"spot": "0.6"}.',
            field="priority_multipliers",
        )
    cleaned = {}
    for name, raw in multipliers.items():
        try:
            value = Decimal(str(raw))
        except InvalidOperation as error:
            raise ValidationFailed(
                f"Multiplier of {name} is not a number: {raw!r}.", field="priority_multipliers"
            ) from error
        if not value.is_finite() or value < 0:
            raise ValidationFailed(
                f"Multiplier of {name} may not be negative (got {value}).",
                field="priority_multipliers",
            )
        cleaned[str(name)] = str(value)
    card.priority_multipliers = cleaned
    try:
        card.full_clean(validate_unique=False, validate_constraints=False)
    except DjangoValidationError as error:
        messages = error.message_dict
        field, texts = next(iter(messages.items()))
        raise ValidationFailed(
            f"{field}: {texts[0]}",
            field=field,
            field_errors={k: list(v) for k, v in messages.items()},
        ) from error


def _check_against_others(card: RateCard) -> None:
    others = RateCard.objects.exclude(pk=card.pk).select_related("flavour", "cluster")
    for other in others:
        if not _overlaps(card.valid_from, card.valid_to, other.valid_from, other.valid_to):
            continue
        if other.scope_key() == card.scope_key():
            until = other.valid_to or "open end"
            overlap = RateCardOverlap(
                f"Rate card '{other.name}' ({other.scope_label()}) is already valid from "
                f"{other.valid_from} to {until}; end it before {card.valid_from} or start this "
                "one after it."
            )
            overlap.other = other  # the portal names it in the user's language
            raise overlap
    # A statement prices a whole month in one currency: cards valid in the same calendar
    # month must agree on it, even when their days do not overlap.
    first, last = _month_span(card.valid_from, card.valid_to)
    for other in others:
        if other.currency == card.currency:
            continue
        if _overlaps(first, last, other.valid_from, other.valid_to):
            mismatch = CurrencyMismatch(
                f"Rate card '{other.name}' is in {other.currency} in the same month; one month "
                f"is billed in one currency (this one is {card.currency}). Start the new "
                "currency on the first day of a month."
            )
            mismatch.other = other
            raise mismatch


def _month_span(valid_from: Any, valid_to: Any) -> tuple[Any, Any]:
    """The calendar months a card touches, as [first day, first day after)."""
    first = valid_from.replace(day=1)
    if valid_to is None:
        return first, None
    last_day = valid_to - timedelta(days=1)
    next_month = (last_day.replace(day=28) + timedelta(days=4)).replace(day=1)
    return first, next_month


def rate_card_create(*, actor: Any, source: str = "api", **fields: Any) -> RateCard:
    """Create a rate card. Raises PermissionDenied, ValidationFailed (negative price, bad
    dates or scope), RateCardOverlap or CurrencyMismatch (400); nothing is written then."""
    _require_platform_billing(actor)
    unknown = set(fields) - set(RATE_CARD_FIELDS)
    if unknown:
        raise ValidationFailed(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    card = RateCard(**fields)
    card.created_by = actor if getattr(actor, "is_authenticated", False) else None
    _validate(card)
    with transaction.atomic():
        _lock_rate_cards()
        _check_against_others(card)
        card.save()
        audit_record(
            actor=actor,
            action="create",
            instance=card,
            before=None,
            after=snapshot(card),
            source=source,
        )
    return card


def rate_card_update(
    *, actor: Any, card: RateCard, source: str = "api", **changes: Any
) -> RateCard:
    """Change a rate card (same rules as creating one). Statements already closed keep the
    prices they were priced with; a change only affects periods still open."""
    _require_platform_billing(actor)
    unknown = set(changes) - set(RATE_CARD_FIELDS)
    if unknown:
        raise ValidationFailed(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        _lock_rate_cards()
        card = RateCard.objects.select_for_update().get(pk=card.pk)
        before = snapshot(card)
        for field, value in changes.items():
            setattr(card, field, value)
        _validate(card)
        _check_against_others(card)
        card.save()
        audit_record(
            actor=actor,
            action="update",
            instance=card,
            before=before,
            after=snapshot(card),
            source=source,
        )
    return card


def rate_card_delete(*, actor: Any, card: RateCard, source: str = "api") -> None:
    """Delete a rate card no closed statement used; else Conflict (409): end it instead."""
    _require_platform_billing(actor)
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="delete",
            instance=card,
            before=snapshot(card),
            after=None,
            source=source,
        )
        try:
            with transaction.atomic():
                card.delete()
        except ProtectedError as error:
            raise Conflict(
                f"Rate card '{card.name}' priced closed statements; set valid_to to end it "
                "instead of deleting it."
            ) from error


def rate_card_currency_on(day: date, cluster: Cluster | None = None) -> str | None:
    """The currency of the cards valid on ``day`` (None when no card is)."""
    cards = RateCard.objects.filter(valid_from__lte=day).filter(
        Q(valid_to__isnull=True) | Q(valid_to__gt=day)
    )
    if cluster is not None:
        cards = cards.filter(Q(cluster__isnull=True) | Q(cluster=cluster))
    return cards.values_list("currency", flat=True).first()


def tenant_settings_set(
    *,
    actor: Any,
    tenant: Tenant,
    mode: str,
    charge_reserved: bool,
    currency: str = "",
    source: str = "api",
) -> TenantBillingSettings:
    """How ``tenant`` (and its subtree, unless overridden below) is billed; ``currency``
    its billing currency (blank: inherited, at the top the platform default). A change of
    currency applies from the next billing period."""
    if not can_write_billing(actor, tenant):
        raise PermissionDenied(f"Billing settings of {tenant.slug} need admin or finance on it.")
    if mode not in TenantBillingSettings.Mode.values:
        raise ValidationFailed(f"Unknown mode '{mode}'; use chargeback or showback.", field="mode")
    currency = (currency or "").strip()
    if currency and not (len(currency) == 3 and currency.isascii() and currency.isupper()):
        raise ValidationFailed(
            "currency: use a three-letter ISO 4217 code in capitals (or leave it blank to "
            "inherit).",
            field="currency",
        )
    with transaction.atomic():
        current = TenantBillingSettings.objects.select_for_update().filter(tenant=tenant).first()
        before = snapshot(current) if current else None
        settings_row = current or TenantBillingSettings(tenant=tenant)
        settings_row.mode = mode
        settings_row.charge_reserved = bool(charge_reserved)
        settings_row.currency = currency
        settings_row.save()
        audit_record(
            actor=actor,
            action="update" if current else "create",
            instance=settings_row,
            before=before,
            after=snapshot(settings_row),
            source=source,
        )
    return settings_row


def policy_update(*, actor: Any, source: str = "api", **changes: Any) -> BillingPolicy:
    """Change the platform-wide idle mode, the allocation view's idle sharing or the
    default currency."""
    _require_platform_billing(actor)
    unknown = set(changes) - {"idle_mode", "allocation_idle", "default_currency"}
    if unknown:
        raise ValidationFailed(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    if "idle_mode" in changes and changes["idle_mode"] not in BillingPolicy.IdleMode.values:
        raise ValidationFailed(
            f"Unknown idle mode; use one of {', '.join(BillingPolicy.IdleMode.values)}.",
            field="idle_mode",
        )
    with transaction.atomic():
        policy = BillingPolicy.current()
        policy = BillingPolicy.objects.select_for_update().get(pk=policy.pk)
        before = snapshot(policy)
        for field, value in changes.items():
            setattr(policy, field, value)
        _validate_policy(policy)
        policy.save()
        audit_record(
            actor=actor,
            action="update",
            instance=policy,
            before=before,
            after=snapshot(policy),
            source=source,
        )
    return policy


def _validate_policy(policy: BillingPolicy) -> None:
    try:
        policy.full_clean()
    except DjangoValidationError as error:
        raise ValidationFailed(
            "default_currency: use a three-letter ISO 4217 code in capitals.",
            field="default_currency",
        ) from error
