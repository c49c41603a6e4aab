"""Writes to the exchange rate table: one rate per month and currency pair, kept by
platform billing (platform admins, or finance on every top-level tenant).

A rate says how many ``to_currency`` one ``from_currency`` was worth in ``month``; a close
converts the charges of that month with it and freezes the rates it used, so changing a
rate later only reprices periods still open (or re-opened to re-price).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction
from django.utils.translation import gettext_lazy as _

from billing.models import ExchangeRate
from billing.months import parse_month
from billing.permissions import can_manage_platform_billing
from tenants.audit import audit_record, snapshot
from tenants.errors import Message, PermissionDenied, ValidationFailed

FIELDS = ("month", "from_currency", "to_currency", "rate", "source")


def _require_platform_billing(actor: Any) -> None:
    if not can_manage_platform_billing(actor):
        raise PermissionDenied(
            _(
                "Exchange rates convert every tenant's charges: they need the platform admin "
                "role, or finance on every top-level tenant."
            )
        )


def _currency_ok(code: Any) -> bool:
    return isinstance(code, str) and len(code) == 3 and code.isascii() and code.isupper()


def _validate(rate: ExchangeRate) -> None:
    """Every rule at once, as field errors (400); nothing is written when one fails."""
    errors: dict[str, list[Message]] = {}
    if not isinstance(rate.month, str) or parse_month(rate.month) is None:
        errors["month"] = [_("Use a month written YYYY-MM, e.g. 2026-02.")]
    for field in ("from_currency", "to_currency"):
        if not _currency_ok(getattr(rate, field)):
            errors[field] = [
                _("Use a three-letter ISO 4217 currency code in capitals, e.g. 'USD' or 'EUR'.")
            ]
    if "to_currency" not in errors and rate.from_currency == rate.to_currency:
        errors["to_currency"] = [
            _("Both sides are %(currency)s: a rate converts one currency into another.")
            % {"currency": rate.to_currency}
        ]
    try:
        value = Decimal(str(rate.rate))
    except (InvalidOperation, TypeError):
        value = Decimal("NaN")
    if not value.is_finite() or value <= 0:
        errors["rate"] = [
            _("The rate must be a number above 0 (1 from-currency = rate to-currency).")
        ]
    elif value != value.quantize(Decimal("1e-8")) or value >= Decimal("1e10"):
        errors["rate"] = [_("Give the rate with at most 8 decimals and below 10,000,000,000.")]
    else:
        rate.rate = value
    rate.source = str(rate.source or "")[:200]
    if errors:
        field, texts = next(iter(errors.items()))
        raise ValidationFailed(texts[0], field=field, field_errors=errors)


def _taken(rate: ExchangeRate) -> ValidationFailed:
    text = _("%(month)s already has a rate for %(pair)s; change that one instead.") % {
        "month": rate.month,
        "pair": f"{rate.from_currency} → {rate.to_currency}",
    }
    return ValidationFailed(text, field="month", field_errors={"month": [text]})


def exchange_rate_create(
    *, actor: Any, fields: Mapping[str, Any], origin: str = "api"
) -> ExchangeRate:
    """Record the rate of a month and pair. Raises PermissionDenied, ValidationFailed (bad
    month or currency, the same currency twice, a rate not above 0, a pair the month
    already has): nothing is written then."""
    _require_platform_billing(actor)
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValidationFailed(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    rate = ExchangeRate(**fields)
    rate.created_by = actor if getattr(actor, "is_authenticated", False) else None
    _validate(rate)
    try:
        with transaction.atomic():
            rate.save()
            audit_record(
                actor=actor,
                action="create",
                instance=rate,
                before=None,
                after=snapshot(rate),
                source=origin,
            )
    except IntegrityError as error:
        raise _taken(rate) from error
    return rate


def exchange_rate_update(
    *, actor: Any, exchange_rate: ExchangeRate, changes: Mapping[str, Any], origin: str = "api"
) -> ExchangeRate:
    """Change a rate (same rules as recording one). Closed periods keep the rate their
    close froze."""
    _require_platform_billing(actor)
    unknown = set(changes) - set(FIELDS)
    if unknown:
        raise ValidationFailed(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    try:
        with transaction.atomic():
            rate = ExchangeRate.objects.select_for_update().get(pk=exchange_rate.pk)
            before = snapshot(rate)
            for field, value in changes.items():
                setattr(rate, field, value)
            _validate(rate)
            rate.save()
            audit_record(
                actor=actor,
                action="update",
                instance=rate,
                before=before,
                after=snapshot(rate),
                source=origin,
            )
    except IntegrityError as error:
        raise _taken(rate) from error
    return rate


def exchange_rate_delete(*, actor: Any, exchange_rate: ExchangeRate, origin: str = "api") -> None:
    """Remove a rate (closed periods keep the copy their close froze)."""
    _require_platform_billing(actor)
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="delete",
            instance=exchange_rate,
            before=snapshot(exchange_rate),
            after=None,
            source=origin,
        )
        exchange_rate.delete()
