"""What a re-close changed: a tenant's statement lines of the previous revision against
the lines the new close prices, as the {"line", "field", "before", "after"} list a
statement keeps in ``changes``."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from billing.charging import pricing
from billing.charging.charges import PricingContext
from billing.models import BillingPeriod, StatementLine

LineIdentity = tuple[str, str, str, str, str, str]
"""(kind, flavour, priority class, usage period, cost centre, path) of a statement line."""
LineFigures = tuple[Decimal, Decimal, Decimal]
"""(GPU-hours, rate, amount) of the lines of one identity, summed."""


def line_identities(
    lines: list[pricing.ChargeLine], context: PricingContext
) -> dict[LineIdentity, LineFigures]:
    out: dict[LineIdentity, LineFigures] = {}
    for line in lines:
        flavour = context.flavours.get(line.flavour_id or 0)
        key = (
            line.kind.value,
            flavour.name if flavour else "",
            line.priority_class,
            line.usage_period or "",
            line.attribution.cost_center,
            line.attribution.path,
        )
        hours, _rate, amount = out.get(key, (Decimal(0), Decimal(0), Decimal("0.00")))
        out[key] = (hours + line.gpu_hours, line.rate, amount + line.amount)
    return out


def previous_lines(period: BillingPeriod) -> dict[int | None, dict[LineIdentity, LineFigures]]:
    """The lines of the revision before this one, per tenant, to say what a re-close
    changed."""
    if period.revision <= 1:
        return {}
    out: dict[int | None, dict[LineIdentity, LineFigures]] = defaultdict(dict)
    rows = StatementLine.objects.filter(
        statement__period=period, statement__revision=period.revision - 1
    ).values_list(
        "statement__tenant_id",
        "kind",
        "flavour_name",
        "priority_class",
        "usage_period",
        "cost_center",
        "tenant_path",
        "gpu_hours",
        "rate",
        "amount",
    )
    for tenant, kind, flavour, priority, usage_period, cost, path, hours, rate, amount in rows:
        key = (kind, flavour, priority, usage_period, cost, path)
        had = out[tenant].get(key, (Decimal(0), Decimal(0), Decimal("0.00")))
        out[tenant][key] = (had[0] + hours, rate, had[2] + amount)
    return dict(out)


def statement_changes(
    before: dict[LineIdentity, LineFigures], after: dict[LineIdentity, LineFigures]
) -> list[dict[str, str]]:
    """What changed between two revisions of a tenant's statement, line by line: a list of
    {"line", "field", "before", "after"}; empty when they are the same."""
    changes = []
    for key in sorted(set(before) | set(after)):
        kind, flavour, priority, usage_period, _cost, _path = key
        label = " ".join(part for part in (kind, flavour, priority, usage_period) if part)
        old, new = before.get(key), after.get(key)
        if old is None or new is None:
            changes.append(
                {
                    "line": label,
                    "field": "added" if old is None else "removed",
                    "before": "" if old is None else str(old[2]),
                    "after": "" if new is None else str(new[2]),
                }
            )
            continue
        for field, index in (("gpu_hours", 0), ("rate", 1), ("amount", 2)):
            if old[index] != new[index]:
                changes.append(
                    {
                        "line": label,
                        "field": field,
                        "before": str(old[index]),
                        "after": str(new[index]),
                    }
                )
    old_total = sum((f[2] for f in before.values()), Decimal("0.00"))
    new_total = sum((f[2] for f in after.values()), Decimal("0.00"))
    if old_total != new_total:
        changes.append(
            {"line": "total", "field": "amount", "before": str(old_total), "after": str(new_total)}
        )
    return changes
