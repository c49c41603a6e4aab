"""Domain errors of billing; the API's exception handler maps them to HTTP once."""

from __future__ import annotations

from typing import Any

from tenants.errors import Conflict, ValidationFailed


class RateCardOverlap(ValidationFailed):
    """Two rate cards for the same scope would both be valid on some day."""

    field = "valid_from"
    other: Any = None  # the rate card it overlaps


class CurrencyMismatch(ValidationFailed):
    field = "currency"
    other: Any = None  # the rate card in another currency, when one is the reason


class PeriodNotFound(ValidationFailed):
    field = "period"


class PeriodClosed(Conflict):
    """The period is closed (or closing); its statements are frozen."""


class PeriodBusy(Conflict):
    """Another worker is closing this period right now."""


class StatementFrozen(Conflict):
    """Statements and their lines are never changed or deleted once written."""


class ExchangeRateMissing(Conflict):
    """A close needs converting charges of a month whose exchange rate is not recorded."""
