"""Pricing glue: load rate cards, flavours, tenants' billing settings and guarantees, sum
ledger rows in SQL (GROUP BY tenant x flavour x priority class x price segment x month),
and hand them to the pure :mod:`billing.charging.pricing` core.

The same path prices a period at close, an open period provisionally (reports, exports
marked provisional) and a budget window (spend so far).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, QuerySet

from billing.charging import pricing
from billing.charging.history import PeriodSettings, period_settings
from billing.models import (
    Adjustment,
    BillingPeriod,
    BillingPolicy,
    ExchangeRate,
    RateCard,
    TenantBillingSettings,
    UsageRecord,
)
from billing.months import month_name, to_datetime
from billing.usage.usage_sums import summed_usage
from i18n.wording import gettext_noop
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.models import PriorityClass
from tenants.models import Tenant


def pricing_card(card: RateCard) -> pricing.RateCard:
    return pricing.RateCard(
        id=card.pk,
        currency=card.currency,
        reserved_price=card.reserved_price,
        on_demand_price=card.on_demand_price,
        valid_from=to_datetime(card.valid_from),
        valid_to=to_datetime(card.valid_to) if card.valid_to else None,
        cluster_id=card.cluster_id,
        flavour_id=card.flavour_id,
        product=card.product,
        mig_profile=card.mig_profile,
        multipliers={k: Decimal(str(v)) for k, v in (card.priority_multipliers or {}).items()},
    )


def load_cards() -> list[pricing.RateCard]:
    return [pricing_card(card) for card in RateCard.objects.all()]


def load_rates() -> dict[pricing.RateKey, Decimal]:
    """The exchange rate table: (month, from, to) -> 1 from = rate to."""
    return {
        (month, source, target): rate
        for month, source, target, rate in ExchangeRate.objects.values_list(
            "month", "from_currency", "to_currency", "rate"
        )
    }


def load_flavours() -> dict[int, pricing.Flavour]:
    return {
        f.pk: pricing.Flavour(
            id=f.pk,
            name=f.name,
            product=f.product,
            mig_profile=f.mig_profile,
            gpu_equivalent=f.gpu_equivalent,
            capacity=f.capacity,
            cluster_id=f.cluster_id,
            shared=f.is_shared,
        )
        for f in Flavour.objects.all()
    }


def default_multipliers() -> dict[str, Decimal]:
    return dict(PriorityClass.objects.values_list("name", "price_multiplier"))


@dataclass(frozen=True)
class TenantBilling:
    mode: str
    charge_reserved: bool


def tenant_billing() -> dict[int, TenantBilling]:
    """Each tenant's billing mode: its own settings, else its nearest ancestor's."""
    own = {
        s.tenant_id: TenantBilling(s.mode, s.charge_reserved)
        for s in TenantBillingSettings.objects.all()
    }
    default = TenantBilling(TenantBillingSettings.Mode.CHARGEBACK, False)
    resolved: dict[int, TenantBilling] = {}
    for pk, path in Tenant.objects.values_list("pk", "path"):
        chain = [int(part) for part in path.strip("/").split("/") if part]
        resolved[pk] = next((own[a] for a in reversed(chain) if a in own), default)
    return resolved


def billing_currency(tenant: Tenant) -> str:
    """The currency ``tenant`` is billed in today: its own, else its nearest ancestor's
    that names one, else the platform's default."""
    chain = [int(part) for part in tenant.path.strip("/").split("/") if part] or [tenant.pk]
    named = dict(
        TenantBillingSettings.objects.filter(tenant_id__in=chain)
        .exclude(currency="")
        .values_list("tenant_id", "currency")
    )
    return next(
        (named[pk] for pk in reversed(chain) if pk in named),
        BillingPolicy.current().default_currency,
    )


def net_guarantees() -> dict[tuple[int, int], int]:
    """Per (tenant, flavour): the guarantee a tenant keeps for itself, i.e. its own minus
    what its children hold (a parent's guarantee contains its children's)."""
    parents = dict(Tenant.objects.values_list("pk", "parent_id"))
    own: dict[tuple[int, int], int] = defaultdict(int)
    for tenant_id, flavour_id, guaranteed in Quota.objects.values_list(
        "tenant_id", "flavour_id", "guaranteed"
    ):
        own[(tenant_id, flavour_id)] += guaranteed
        parent = parents.get(tenant_id)
        if parent is not None:
            own[(parent, flavour_id)] -= guaranteed
    return {key: units for key, units in own.items() if units > 0}


def usage_aggregates(
    rows: QuerySet[UsageRecord], bounds: list[datetime], own_month: str | None
) -> list[pricing.Usage]:
    """Ledger rows summed in SQL per tenant, flavour, priority class, price segment and
    month; months other than ``own_month`` are late usage (None: no month is late)."""
    return [usage for _extra, usage in grouped_usage(rows, bounds, own_month)]


def grouped_usage(
    rows: QuerySet[UsageRecord],
    bounds: list[datetime],
    own_month: str | None,
    by: tuple[str, ...] = (),
    cuts: Mapping[int, Sequence[datetime]] | None = None,
) -> list[tuple[dict[str, Any], pricing.Usage]]:
    """Like :func:`usage_aggregates`, also grouped by the ``by`` fields (returned as a dict
    next to each sum), in one GROUP BY query (two when ``cuts`` has tenants).

    ``cuts``: per tenant whose attribution or reserved charging changes within the window,
    the instants where it does; its rows are also summed per piece between them, and each
    sum's ``segment_start`` lies in its piece (see :mod:`billing.usage.usage_sums`)."""
    cuts = {tenant: sorted(at) for tenant, at in (cuts or {}).items() if at}
    sums: dict[tuple[Any, ...], list[Any]] = {}
    for row in summed_usage(rows, bounds, by, cuts):
        month = row["month"]
        index = row["segment"]
        start = max(bounds[index - 1] if index > 0 else month, month)
        tenant = row["tenant_id"]
        if row["piece"]:
            # the row's hour is in the tenant's piece starting at its n-th cut
            start = max(start, cuts[tenant][row["piece"] - 1])
        key = (tenant, row["flavour_id"], row["priority_class"], start, month) + tuple(
            row[field] for field in by
        )
        acc = sums.get(key)
        if acc is None:
            sums[key] = [
                int(row["allocated"] or 0),
                int(row["borrowed"] or 0),
                row["busy"] or Decimal(0),
                row["with_busy"],
            ]
        else:
            acc[0] += int(row["allocated"] or 0)
            acc[1] += int(row["borrowed"] or 0)
            acc[2] += row["busy"] or Decimal(0)
            acc[3] += row["with_busy"]
    out = []
    for key, (allocated, borrowed, busy, with_busy) in sums.items():
        tenant, flavour, priority, start, month, *extra = key
        name = month_name(month)
        usage = pricing.Usage(
            tenant_id=tenant,
            flavour_id=flavour,
            segment_start=start,
            device_seconds=allocated,
            borrowed_device_seconds=borrowed,
            busy_device_seconds=busy if with_busy else None,
            priority_class=priority,
            usage_period=None if own_month is None or name == own_month else name,
        )
        out.append((dict(zip(by, extra, strict=True)), usage))
    return out


# Statement warnings are stored in English, like the rate-card one; the templates are
# marked for the catalogue.
BUSY_PARTIAL_WARNING = gettext_noop(
    "busy time partial for %(flavour)s: %(count)s of %(rows)s pod-hours had GPU series "
    "missing; their busy time is scaled from the GPUs that reported"
)
BUSY_ESTIMATED_WARNING = gettext_noop(
    "busy time estimated for %(flavour)s: %(count)s of %(rows)s pod-hours are MIG "
    "instances without profiling metrics, taken as busy as their parent GPU"
)


def busy_warnings(
    rows: QuerySet[UsageRecord], flavours: dict[int, pricing.Flavour]
) -> dict[int, set[str]]:
    """Per tenant, the statement warnings for busy time that is partial or estimated
    (:data:`BUSY_PARTIAL_WARNING`, :data:`BUSY_ESTIMATED_WARNING`), per flavour. One
    GROUP BY over the rows so flagged (a partial index holds them: most ledgers have none),
    then the row counts of the tenants concerned."""
    flagged = (
        rows.filter(Q(busy_partial=True) | Q(busy_estimated=True))
        .order_by()
        .values("tenant_id", "flavour_id")
        .annotate(
            partial=Count("pk", filter=Q(busy_partial=True)),
            estimated=Count("pk", filter=Q(busy_estimated=True)),
        )
    )
    found = {(row["tenant_id"], row["flavour_id"]): row for row in flagged}
    if not found:
        return {}
    totals = (
        rows.filter(tenant_id__in={t for t, _f in found})
        .order_by()
        .values("tenant_id", "flavour_id")
        .annotate(total=Count("pk"))
    )
    counts = [
        found[key] | {"total": row["total"]}
        for row in totals
        if (key := (row["tenant_id"], row["flavour_id"])) in found
    ]
    out: dict[int, set[str]] = defaultdict(set)
    for row in counts:
        flavour_id = row["flavour_id"]
        flavour = flavours[flavour_id].name if flavour_id in flavours else str(flavour_id)
        for template, count in (
            (BUSY_PARTIAL_WARNING, row["partial"]),
            (BUSY_ESTIMATED_WARNING, row["estimated"]),
        ):
            if count:
                out[row["tenant_id"]].add(
                    template % {"flavour": flavour, "count": count, "rows": row["total"]}
                )
    return dict(out)


def _reservations(
    billing: dict[int, TenantBilling],
    guarantees: dict[tuple[int, int], int],
    tenant_ids: set[int] | None,
) -> list[pricing.Reservation]:
    return [
        pricing.Reservation(tenant_id=tenant, flavour_id=flavour, devices=units)
        for (tenant, flavour), units in sorted(guarantees.items())
        if billing.get(tenant)
        and billing[tenant].charge_reserved
        and (tenant_ids is None or tenant in tenant_ids)
    ]


@dataclass
class PricingContext:
    """Everything the pricing of any window needs, loaded once."""

    cards: list[pricing.RateCard]
    flavours: dict[int, pricing.Flavour]
    multipliers: dict[str, Decimal]
    billing: dict[int, TenantBilling]
    guarantees: dict[tuple[int, int], int]
    policy: BillingPolicy
    cluster_names: dict[int, str]
    rates: dict[pricing.RateKey, Decimal]

    @classmethod
    def load(cls) -> PricingContext:
        return cls(
            cards=load_cards(),
            flavours=load_flavours(),
            multipliers=default_multipliers(),
            billing=tenant_billing(),
            guarantees=net_guarantees(),
            policy=BillingPolicy.current(),
            cluster_names=dict(Cluster.objects.values_list("pk", "name")),
            rates=load_rates(),
        )

    @property
    def currency(self) -> str:
        return self.policy.default_currency

    def currency_at(self, moment: datetime) -> str:
        """The currency of the cards valid at ``moment`` (the policy's if none are)."""
        for card in self.cards:
            if card.covers(moment):
                return card.currency
        return self.policy.default_currency


def price_period(
    period: BillingPeriod,
    *,
    as_of: datetime | None = None,
    context: PricingContext | None = None,
    usage: list[pricing.Usage] | None = None,
    settings: PeriodSettings | None = None,
    idle_mode: str | None = None,
    strict_rates: bool = True,
    convert: bool = True,
) -> pricing.PricedPeriod:
    """Every tenant's charges for ``period``: its ledger rows (late ones included),
    reservations, idle capacity per the policy, and its adjustments, each hour with the
    quotas, capacity, tree and billing settings in force then (``settings``: what
    :func:`billing.charging.history.period_settings` gives). ``usage``: the period's ledger rows as
    :func:`period_usage` sums them with the same settings, when the caller has them.
    ``idle_mode`` overrides the policy's. A needed exchange rate that is missing raises
    pricing.MissingExchangeRates, unless ``strict_rates`` is off (provisional figures: the
    line stays in its card's currency). ``convert`` off leaves every line in its card's
    currency (pages that explain prices, not bills)."""
    context = context or PricingContext.load()
    settings = settings or period_settings(period)
    cards = settings.cards if settings.cards is not None else context.cards
    multipliers = settings.multipliers if settings.multipliers is not None else context.multipliers
    # the rates the first close froze win; a pair it did not need then comes from today's table
    rates = {**context.rates, **(settings.rates or {})} if convert else {}
    bounds = pricing.boundaries(cards)
    if usage is None:
        usage = period_usage(period, bounds, settings)
    adjustments = [
        pricing.ManualAdjustment(
            id=a.pk, tenant_id=a.tenant_id, amount=a.amount, currency=a.currency, note=a.reason
        )
        for a in Adjustment.objects.filter(period=period).order_by("pk")
    ]
    return pricing.price(
        pricing.PricingInput(
            start=period.start,
            end=period.end,
            flavours=context.flavours,
            cards=cards,
            usage=usage,
            reservations=settings.reservations,
            adjustments=adjustments,
            default_multipliers=multipliers,
            idle_mode=pricing.IdleMode(idle_mode or settings.idle_mode),
            as_of=as_of,
            default_currency=_currency_at(cards, period.start, context.currency),
            spans=settings.spans,
            capacity=settings.capacity,
            guarantee_pieces=settings.guarantees,
            exchange_rates=rates,
            idle_currency=settings.default_currency or context.currency,
            strict_rates=strict_rates and convert,
        )
    )


def _currency_at(cards: list[pricing.RateCard], moment: datetime, default: str) -> str:
    return next((card.currency for card in cards if card.covers(moment)), default)


def period_usage(
    period: BillingPeriod, bounds: list[datetime], settings: PeriodSettings | None = None
) -> list[pricing.Usage]:
    """The ledger rows of ``period`` summed for pricing (one GROUP BY query); tenants whose
    attribution changes within it (per ``settings``) are summed per piece between changes."""
    cuts = settings.tenant_cuts(period.start, period.end) if settings else {}
    rows = UsageRecord.objects.filter(period=period)
    return [usage for _extra, usage in grouped_usage(rows, bounds, period.name, (), cuts)]


def price_window(
    *,
    tenant_ids: Iterable[int],
    start: datetime,
    end: datetime,
    as_of: datetime,
    context: PricingContext | None = None,
    currency: str | None = None,
) -> pricing.PricedPeriod:
    """Charges of ``tenant_ids`` for usage in [start, as_of): what a budget has spent,
    converted to ``currency`` (None: each card's) with each usage month's rate (a line
    whose rate is missing stays in its card's currency: callers sum only their currency).
    Idle capacity and adjustments are left out (they are settled at close)."""
    context = context or PricingContext.load()
    ids = set(tenant_ids)
    bounds = pricing.boundaries(context.cards)
    rows = UsageRecord.objects.filter(
        tenant_id__in=ids, interval_start__gte=start, interval_start__lt=min(end, as_of)
    )
    return pricing.price(
        pricing.PricingInput(
            start=start,
            end=end,
            flavours=context.flavours,
            cards=context.cards,
            usage=usage_aggregates(rows, bounds, None),
            reservations=_reservations(context.billing, context.guarantees, ids),
            default_multipliers=context.multipliers,
            as_of=as_of,
            default_currency=currency or context.currency_at(start),
            exchange_rates=context.rates,
            currency=currency,
            strict_rates=False,
        )
    )
