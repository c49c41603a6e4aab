"""Spend per day of tenant subtrees, priced with the statements' code: what the budget
burn chart and the budget heat map draw. Reads only; callers scope the tenants."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.db.models.functions import TruncDay

from billing import pricing
from billing.charges import PricingContext, grouped_usage
from billing.ledger_cache import ledger_cached, ledger_mark
from billing.models import UsageRecord


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
    # Each (tenant, day) is priced as its own pseudo-tenant, then summed into the groups.
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
        return DailySpend(days, amounts)
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
    position = {day: i for i, day in enumerate(days)}
    for (tenant_id, day), index in keys.items():
        amount = totals.get(index, Decimal(0))
        for name, members in groups.items():
            if tenant_id in members and day in position:
                amounts[name][position[day]] += amount
    return DailySpend(days, amounts)
