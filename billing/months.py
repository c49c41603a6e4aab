"""Billing calendar: UTC months ("2026-02") and quarters ("2026-Q1"). Pure Python."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

_MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


def month_start(moment: datetime | date) -> datetime:
    """The first instant (UTC) of the month containing ``moment``."""
    if isinstance(moment, datetime):
        moment = moment.astimezone(UTC)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def add_months(start: datetime, months: int) -> datetime:
    index = start.year * 12 + (start.month - 1) + months
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def month_name(moment: datetime | date) -> str:
    start = month_start(moment)
    return f"{start.year:04d}-{start.month:02d}"


def parse_month(name: str) -> datetime | None:
    """The start of the month called ``name`` ("YYYY-MM"), or None if it is not one."""
    match = _MONTH.match(name or "")
    if not match:
        return None
    year, month = int(match.group(1)), int(match.group(2))
    # far enough from year 1 and 9999 that the months around it exist too
    if not 1900 <= year <= 9000 or not 1 <= month <= 12:
        return None
    return datetime(year, month, 1, tzinfo=UTC)


def month_window(moment: datetime) -> tuple[str, datetime, datetime]:
    start = month_start(moment)
    return month_name(start), start, add_months(start, 1)


def quarter_window(moment: datetime) -> tuple[str, datetime, datetime]:
    """("2026-Q1", start, end) of the calendar quarter containing ``moment``."""
    start = month_start(moment)
    first = add_months(start, -((start.month - 1) % 3))
    return f"{first.year:04d}-Q{(first.month - 1) // 3 + 1}", first, add_months(first, 3)


def to_datetime(day: date) -> datetime:
    """Midnight UTC at the start of ``day`` (rate cards are valid by whole days)."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC)
