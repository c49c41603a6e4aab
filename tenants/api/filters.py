"""Query filters shared by the API's views."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _
from django_filters.fields import IsoDateTimeField


def in_utc(moment: datetime) -> datetime | None:
    """``moment`` in UTC, or None when UTC cannot hold it (a date at the edge of the
    calendar with an offset that pushes it past year 1 or 9999)."""
    try:
        return moment.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 moment, handed to the database in UTC: PostgreSQL refuses offsets
    beyond about 16 hours, which ISO 8601 and Python allow."""

    default_error_messages = {
        "invalid": _("Enter an ISO 8601 date-time, e.g. 2026-05-01T00:00:00Z."),
    }

    def to_python(self, value: Any) -> datetime | None:
        moment = super().to_python(value)
        if moment is None:
            return None
        utc = in_utc(moment)
        if utc is None:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return utc


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField
