"""Template filters that say stored values in the reader's language and format:
``{{ workload|reason }}``, ``{{ amount|money }}`` / ``{{ amount|money:currency }}``,
``{{ hours|gpu_hours }}``, ``{{ event|audit_message }}``. Load with ``{% load tidegate %}``."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django import template
from django.utils.formats import number_format
from django.utils.translation import gettext

from i18n.said import say
from i18n.wording import Wording

register = template.Library()

CENT = Decimal("0.01")


@register.filter
def reason(workload: Any) -> str:
    """A workload's reason in the reader's language; the stored English text when it was
    not worded by the engine (older rows, reasons written elsewhere)."""
    wording = getattr(workload, "reason_wording", None)
    if wording is not None:
        return say(wording)
    return str(getattr(workload, "reason", "") or "")


def _decimal(value: Any) -> Decimal | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def _grouped(number: Decimal) -> str:
    return number_format(
        number.quantize(CENT, rounding=ROUND_HALF_UP),
        decimal_pos=2,
        use_l10n=True,
        force_grouping=True,
    )


@register.filter
def money(amount: Any, currency: str = "") -> str:
    """An amount with two decimals, grouped as the locale groups numbers (12,345.60),
    followed by its currency when given. Anything that is not a number is shown as is."""
    number = _decimal(amount)
    if number is None:
        return "" if amount is None else str(amount)
    text = _grouped(number)
    return f"{text} {currency}" if currency else text


@register.filter
def gpu_hours(hours: Any) -> str:
    """GPU-hours with two decimals, grouped as the locale groups numbers (1,234.50)."""
    number = _decimal(hours)
    if number is None:
        return "" if hours is None else str(hours)
    return _grouped(number)


@register.filter
def audit_message(event: Any) -> str:
    """An audit event's message in the reader's language (``{{ event|audit_message }}``);
    the stored English text when it was not worded (older rows, plain text) or its words
    no longer make that text."""
    text = str(getattr(event, "message", "") or "")
    words = getattr(event, "message_args", None)
    wording = Wording.parse(words) if isinstance(words, dict) and words else None
    if wording is None or wording != text:
        return text
    return say(wording)


# How the models name themselves in the audit trail's Object column (their __str__,
# stored in English when the event was written), read back and said in the reader's
# language; a name in another shape is shown as stored.
_QUOTA_REQUEST = re.compile(
    r"^(?P<tenant>\S+) asks (?P<n>\d+) (?P<flavour>\S+) \((?P<state>\w+)\)$"
)
_WORKLOAD = re.compile(r"^(?P<name>\S+/\S+) \((?P<state>\w+)\)$")


@register.filter
def audit_object(event: Any) -> str:
    """An audit event's object as its model names itself, in the reader's language
    (``{{ event|audit_object }}``)."""
    from scheduler_bridge.quotas.models import QuotaRequest
    from scheduler_bridge.workloads.models import Workload

    text = str(getattr(event, "object_repr", "") or "")
    kind = str(getattr(event, "object_type", "") or "")
    if kind.endswith("quotarequest") and (found := _QUOTA_REQUEST.match(text)):
        states = dict(QuotaRequest.State.choices)
        return gettext("%(tenant)s asks %(n)s %(flavour)s (%(state)s)") % {
            **found.groupdict(),
            "state": str(states.get(found["state"], found["state"])).lower(),
        }
    if kind.endswith("workload") and (found := _WORKLOAD.match(text)):
        states = dict(Workload.State.choices)
        state = str(states.get(found["state"], found["state"])).lower()
        return f"{found['name']} ({state})"
    return text
