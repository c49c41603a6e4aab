"""Spend per day of tenant subtrees, priced with the statements' code: what the budget
burn chart and the budget heat map draw. Reads only; callers scope the tenants."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.cache import cache
from django.db.models import Count, Max, QuerySet
from django.db.models.functions import TruncDay

from billing.charging import pricing
from billing.charging.charges import PricingContext, grouped_usage
from billing.models import UsageRecord
from billing.usage.ledger_cache import LEDGER_CACHE_S, ledger_cached, ledger_mark


@dataclass(frozen=True)
class DailySpend:
    """Spend per day of each group over [start, end): ``amounts[group][i]`` is day ``i``."""

    days: list[date]
    amounts: dict[str, list[Decimal]]

    def cumulative(self, group: str) -> list[Decimal]:
        running = Decimal(0)
        out = []
        for amount in self.amounts.get(group, []):
            running += amount
            out.append(running)
        return out


def days_between(start: datetime, end: datetime) -> list[date]:
    days = []
    moment = start
    while moment < end:
        days.append(moment.date())
        moment += timedelta(days=1)
    return days


def daily_spend(
    groups: Mapping[str, set[int]],
    start: datetime,
    end: datetime,
    context: PricingContext | None = None,
) -> DailySpend:
    """Usage charges per day of each group of tenant ids (a subtree each) in [start, end).

    One GROUP BY query over the ledger (tenant x flavour x day), priced once; a tenant in
    several groups (nested budgets) counts in each. Kept in the cache while the ledger,
    the rate cards, the flavours and the priority multipliers stay as they are (a year's
    subtree prices thousands of tenant-days; the ledger grows once an hour).
    """
    context = context or PricingContext.load()
    mark = ledger_mark()
    parts = (
        sorted((name, sorted(members)) for name, members in groups.items()),
        start,
        mark.bound(end),
        days_between(start, end),
        context.cards,
        sorted(context.flavours.items()),
        sorted(context.multipliers.items()),
    )
    return ledger_cached(
        "daily-spend", mark, parts, lambda: _daily_spend(groups, start, end, context)
    )


def _daily_spend(
    groups: Mapping[str, set[int]], start: datetime, end: datetime, context: PricingContext
) -> DailySpend:
    days = days_between(start, end)
    everyone = set().union(*groups.values()) if groups else set()
    amounts = {name: [Decimal(0)] * len(days) for name in groups}
    if not everyone or not days:
        return DailySpend(days, amounts)
    rows = UsageRecord.objects.filter(
        tenant_id__in=everyone, interval_start__gte=start, interval_start__lt=end
    ).annotate(day=TruncDay("interval_start"))
    priced = _spend_per_tenant_day(rows, sorted(everyone), context)
    position = {day: i for i, day in enumerate(days)}
    for (tenant_id, day), amount in priced.items():
        for name, members in groups.items():
            if tenant_id in members and day in position:
                amounts[name][position[day]] += amount
    return DailySpend(days, amounts)


def _spend_per_tenant_day(
    rows: QuerySet[Any], tenant_ids: list[int], context: PricingContext
) -> dict[tuple[int, date], Decimal]:
    """Charges per (tenant, day) of ``rows``. A day's charges are kept in the cache by
    how many rows it has and its newest one (the ledger is write-once: a day changes
    only by new rows), so when the ledger grows by an hour only that hour's day is
    priced again. One query, and one more for the days not kept."""
    context_parts = (
        context.cards,
        sorted(context.flavours.items()),
        sorted(context.multipliers.items()),
    )
    keys = {}
    for row in rows.order_by().values("day").annotate(newest=Max("id"), n=Count("id")):
        day = row["day"].date()
        digest = hashlib.sha256(
            repr((tenant_ids, day, row["newest"], row["n"], context_parts)).encode()
        ).hexdigest()
        keys[day] = f"billing:ledger:spend-day:{digest}"
    kept = cache.get_many(list(keys.values()))
    out: dict[tuple[int, date], Decimal] = {}
    for day, key in keys.items():
        for tenant_id, amount in kept.get(key, {}).items():
            out[(tenant_id, day)] = amount
    missing = [day for day, key in keys.items() if key not in kept]
    if not missing:
        return out
    # one range from the first day not kept to the last (usually just today); kept days
    # inside it are priced again too, which changes nothing
    first, last = min(missing), max(missing)
    fresh = _price_per_tenant_day(
        rows.filter(
            interval_start__gte=datetime(first.year, first.month, first.day, tzinfo=UTC),
            interval_start__lt=datetime(last.year, last.month, last.day, tzinfo=UTC)
            + timedelta(days=1),
        ),
        context,
    )
    per_day: dict[date, dict[int, Decimal]] = {day: {} for day in missing}
    for (tenant_id, day), amount in fresh.items():
        if day in per_day:
            per_day[day][tenant_id] = amount
            out[(tenant_id, day)] = amount
    cache.set_many({keys[day]: found for day, found in per_day.items()}, LEDGER_CACHE_S)
    return out


def _price_per_tenant_day(
    rows: QuerySet[Any], context: PricingContext
) -> dict[tuple[int, date], Decimal]:
    """Each (tenant, day) of ``rows`` priced as its own pseudo-tenant (one query)."""
    keys: dict[tuple[int, date], int] = {}
    usage = []
    for extra, item in grouped_usage(rows, pricing.boundaries(context.cards), None, ("day",)):
        index = keys.setdefault((item.tenant_id or 0, extra["day"].date()), len(keys))
        usage.append(
            pricing.Usage(
                tenant_id=index,
                flavour_id=item.flavour_id,
                segment_start=item.segment_start,
                device_seconds=item.device_seconds,
                borrowed_device_seconds=item.borrowed_device_seconds,
                priority_class=item.priority_class,
            )
        )
    if not usage:
        return {}
    start = min(item.segment_start for item in usage)
    end = max(item.segment_start for item in usage) + timedelta(days=1)
    totals = pricing.price(
        pricing.PricingInput(
            start=start,
            end=end,
            flavours=context.flavours,
            cards=context.cards,
            usage=usage,
            default_multipliers=context.multipliers,
        )
    ).totals()
    return {key: totals.get(index, Decimal(0)) for key, index in keys.items()}
