"""Pricing: metered usage x rate cards -> charge lines. Pure Python: no Django, no float.

Arithmetic is exact (``fractions.Fraction``) until one final rounding per line, half-even to
cents; a statement's total is the exact sum of its rounded lines. A MIG instance counts as
its compute fraction of a GPU (``1g`` = 1/7; there is no public standard, so we say
what we do: docs/chargeback.md#mig-pricing), unless a rate card prices that profile itself, per
instance-hour.

Quantities on lines are GPU-hours in whole-GPU equivalents (a 1g.10gb instance held for
7 hours is one GPU-hour), so hours of different flavours add up. ``rate`` is the effective
price of one such GPU-hour on that line, after the priority multiplier.

Charge kinds:
* ``usage``: held GPUs within the tenant's quota, at the reserved price x multiplier;
* ``on_demand``: GPUs borrowed from other tenants' guarantees, at the on-demand price;
* ``reserved_capacity``: with reserved charging, the tenant's own guarantee (net of what
  it hands down to sub-tenants) for the whole period, used or not; its non-borrowed usage
  of that flavour is then covered and not charged again;
* ``idle`` / ``idle_share``: capacity nobody held (nor paid a reservation for), as one
  ``__idle__`` line or spread over tenants by their guarantee;
* ``late_usage`` / ``late_on_demand``: usage of an already closed period that arrived
  late, billed in this one and pointing at what it corrects;
* ``adjustment``: a correction finance entered by hand.

Currencies: each line is priced in its rate card's currency, then converted to the
currency its tenant is billed in (``Attribution.currency``; idle lines: the platform
default) with the exchange rate of the month the charge belongs to (a late line: its
usage month). The conversion is exact; the line is rounded once, in the billing currency,
and keeps the amount in the card's currency and the rate used. A rate that is needed and
not given raises :class:`MissingExchangeRates` (never 1:1).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction
from typing import Any

from billing.charging.money import round_half_even, split_exactly
from i18n.wording import gettext_noop
from scheduler_bridge.admission.devices import MILLI as SHARE_MILLI

HOUR_S = 3600
MIG_COMPUTE_SLICES = 7
IDLE_TENANT = "__idle__"
# The mode of idle capacity shown as a line: the platform's unrecovered cost, charged to
# nobody (never part of what is charged, never a bill without a payer).
PLATFORM_COST = "platform"


def charge_class(mode: str) -> str:
    """Which total an amount of a statement or line of ``mode`` belongs to: "chargeback"
    (charged to the cost centre), "showback" (shown only) or PLATFORM_COST."""
    return mode if mode in ("showback", PLATFORM_COST) else "chargeback"


HOURS_PLACES = 4
RATE_PLACES = 6


class Kind(StrEnum):
    USAGE = "usage"
    ON_DEMAND = "on_demand"
    RESERVED_CAPACITY = "reserved_capacity"
    IDLE = "idle"
    IDLE_SHARE = "idle_share"
    LATE_USAGE = "late_usage"
    LATE_ON_DEMAND = "late_on_demand"
    ADJUSTMENT = "adjustment"


@dataclass(frozen=True, slots=True)
class ChargeKindFacts:
    """What a charge kind is wherever a line of it is shown or summed: the one place to
    change when a kind is added (``tests/billing/test_charge_kinds.py`` fails on a kind
    without its facts)."""

    # the exports' ``line_type`` (CSV, XLSX, PDF, invoices): stable machine words; late
    # borrowed usage keeps its own type, so its on-demand rate is not read as in-quota
    export_type: str
    # the allocation view's ``line_type`` (late usage of either rate in one column)
    allocation_type: str
    # in words finance reads (English, translated where it is shown)
    label: str
    # GPU-hours a tenant held: a statement's usage figure sums these lines
    usage: bool = False
    # capacity nobody held, as the platform's line or spread over tenants
    idle: bool = False


# In statement order: the exports list their line types in this order.
KIND_FACTS: dict[Kind, ChargeKindFacts] = {
    Kind.USAGE: ChargeKindFacts("in_quota", "in_quota", gettext_noop("in quota"), usage=True),
    Kind.ON_DEMAND: ChargeKindFacts(
        "borrowed", "borrowed", gettext_noop("borrowed (on-demand rate)"), usage=True
    ),
    Kind.RESERVED_CAPACITY: ChargeKindFacts(
        "reserved", "reserved", gettext_noop("reserved capacity"), usage=True
    ),
    Kind.IDLE: ChargeKindFacts("idle", "idle", gettext_noop("idle capacity"), idle=True),
    Kind.IDLE_SHARE: ChargeKindFacts(
        "idle", "idle", gettext_noop("share of idle capacity"), idle=True
    ),
    Kind.LATE_USAGE: ChargeKindFacts(
        "late_usage", "late_usage", gettext_noop("late usage"), usage=True
    ),
    Kind.LATE_ON_DEMAND: ChargeKindFacts(
        "late_borrowed", "late_usage", gettext_noop("late borrowed usage"), usage=True
    ),
    Kind.ADJUSTMENT: ChargeKindFacts("adjustment", "adjustment", gettext_noop("adjustment")),
}


def charge_kind_facts(kind: str) -> ChargeKindFacts | None:
    """The facts of a charge kind; None for a code that is no kind (shown as it is)."""
    try:
        return KIND_FACTS[Kind(kind)]
    except ValueError:
        return None


class IdleMode(StrEnum):
    HIDDEN = "hidden"
    LINE = "line"
    SPREAD = "spread"


_PROFILE_SLICES = re.compile(r"^(\d+)g\.")


@dataclass(frozen=True, slots=True)
class Flavour:
    id: int
    name: str
    product: str
    mig_profile: str = ""
    gpu_equivalent: Decimal = Decimal(1)
    capacity: int = 0
    cluster_id: int | None = None
    # a shared flavour's device is a thousandth of a GPU (a 470-milli pod holds 0.47)
    shared: bool = False

    @property
    def fraction(self) -> Fraction:
        """Share of a whole GPU one device is: compute slices / 7 for MIG, a thousandth
        of the GPU equivalent for a shared flavour, else the GPU equivalent."""
        match = _PROFILE_SLICES.match(self.mig_profile)
        if match:
            return Fraction(int(match.group(1)), MIG_COMPUTE_SLICES)
        if self.shared:
            return Fraction(self.gpu_equivalent) / SHARE_MILLI
        return Fraction(self.gpu_equivalent)


@dataclass(frozen=True, slots=True)
class RateCard:
    """Prices of one GPU-hour (or one instance-hour, for a card that names a MIG profile or
    a MIG flavour) valid on [valid_from, valid_to)."""

    id: int
    currency: str
    reserved_price: Decimal
    on_demand_price: Decimal
    valid_from: datetime
    valid_to: datetime | None = None
    cluster_id: int | None = None
    flavour_id: int | None = None
    product: str = ""
    mig_profile: str = ""
    multipliers: Mapping[str, Decimal] = field(default_factory=dict)

    def covers(self, at: datetime) -> bool:
        return self.valid_from <= at and (self.valid_to is None or at < self.valid_to)

    def specificity(self, flavour: Flavour) -> int | None:
        """How closely this card matches ``flavour`` (higher wins), None: not at all."""
        if self.cluster_id is not None and self.cluster_id != flavour.cluster_id:
            return None
        scoped = 0 if self.cluster_id is None else 1
        if self.flavour_id is not None:
            return 30 + scoped if self.flavour_id == flavour.id else None
        if self.product and self.product.lower() != flavour.product.lower():
            return None
        if self.mig_profile:
            return 20 + scoped if self.mig_profile == flavour.mig_profile else None
        return (10 if self.product else 0) + scoped

    def per_instance(self, flavour: Flavour) -> bool:
        """A card naming a MIG profile prices whole instances, not compute fractions."""
        return bool(flavour.mig_profile) and (bool(self.mig_profile) or self.flavour_id is not None)


def resolve_card(cards: Iterable[RateCard], flavour: Flavour, at: datetime) -> RateCard | None:
    """The most specific card for ``flavour`` valid at ``at`` (ties: the newest card)."""
    best: tuple[int, datetime, int] | None = None
    chosen = None
    for card in cards:
        score = card.specificity(flavour)
        if score is None or not card.covers(at):
            continue
        key = (score, card.valid_from, card.id)
        if best is None or key > best:
            best, chosen = key, card
    return chosen


def boundaries(cards: Iterable[RateCard]) -> list[datetime]:
    """Instants where some card starts or ends: between two of them, prices are constant."""
    points = set()
    for card in cards:
        points.add(card.valid_from)
        if card.valid_to is not None:
            points.add(card.valid_to)
    return sorted(points)


def segment_of(at: datetime, bounds: Sequence[datetime]) -> int:
    return bisect_right(bounds, at)


def segments_within(
    start: datetime, end: datetime, bounds: Sequence[datetime]
) -> list[tuple[int, datetime, datetime]]:
    """(segment index, start, end) of the constant-price pieces of [start, end)."""
    pieces = []
    cuts = [start, *[b for b in bounds if start < b < end], end]
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        if hi > lo:
            pieces.append((segment_of(lo, bounds), lo, hi))
    return pieces


@dataclass(frozen=True, slots=True)
class Usage:
    """Ledger rows summed in SQL: one tenant, flavour, priority class, price segment."""

    tenant_id: int
    flavour_id: int
    segment_start: datetime  # any instant of the price segment the rows fall in
    device_seconds: int
    borrowed_device_seconds: int = 0
    busy_device_seconds: Decimal | None = None
    priority_class: str = ""
    usage_period: str | None = None  # set for late usage of another (closed) period


@dataclass(frozen=True, slots=True)
class Reservation:
    """Devices of a flavour a reserved-charged tenant pays for whether used or not, over
    [start, end) (None: the whole window priced)."""

    tenant_id: int
    flavour_id: int
    devices: int
    start: datetime | None = None
    end: datetime | None = None


@dataclass(frozen=True, slots=True)
class Attribution:
    """Who a line is charged to, as it was at the hour charged: the tenant's place in the
    tree (its materialised path), its cost centre and its billing mode."""

    path: str = ""
    cost_center: str = ""
    mode: str = "chargeback"
    currency: str = ""  # the billing currency; blank: the card's (no conversion)


@dataclass(frozen=True, slots=True)
class TenantSpan:
    """A tenant's attribution and whether its guarantee is charged as reserved capacity,
    over [start, end)."""

    start: datetime
    end: datetime
    attribution: Attribution
    charge_reserved: bool = False


@dataclass(frozen=True, slots=True)
class Piece:
    """A quantity constant over [start, end): a flavour's capacity, or one tenant's net
    guarantee of a flavour (``tenant_id`` set)."""

    flavour_id: int
    units: int
    start: datetime
    end: datetime
    tenant_id: int | None = None


@dataclass(frozen=True, slots=True)
class ManualAdjustment:
    id: int
    tenant_id: int
    amount: Decimal
    currency: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class ChargeLine:
    tenant_id: int | None  # None: the __idle__ line
    kind: Kind
    flavour_id: int | None
    currency: str
    gpu_hours: Decimal
    gpu_hours_busy: Decimal | None
    rate: Decimal
    multiplier: Decimal
    amount: Decimal
    priority_class: str = ""
    rate_card_id: int | None = None
    usage_period: str | None = None
    adjustment_id: int | None = None
    note: str = ""
    attribution: Attribution = Attribution()
    # Set when the line was priced in another currency and converted: that currency, the
    # amount in it, the rate (1 source = rate currency) and the month whose rate it is.
    source_currency: str = ""
    source_amount: Decimal | None = None
    exchange_rate: Decimal | None = None
    exchange_month: str = ""


RateKey = tuple[str, str, str]
"""(month "YYYY-MM", from currency, to currency) of an exchange rate."""


class MissingExchangeRates(ValueError):
    """Charges need converting and the rate of their month is not given."""

    def __init__(self, missing: Iterable[RateKey]) -> None:
        self.missing = sorted(set(missing))
        super().__init__(
            "no exchange rate for "
            + ", ".join(f"{src}->{dst} in {month}" for month, src, dst in self.missing)
        )


def month_of(moment: datetime) -> str:
    """The "YYYY-MM" of a (UTC) instant: whose exchange rate converts a charge then."""
    return f"{moment.year:04d}-{moment.month:02d}"


@dataclass
class PricingInput:
    """Everything needed to price one tenant set over [start, end) (``as_of`` <= end caps
    time-based charges: reservations and idle accrue only up to it)."""

    start: datetime
    end: datetime
    flavours: Mapping[int, Flavour]
    cards: Sequence[RateCard]
    usage: Sequence[Usage]
    reservations: Sequence[Reservation] = ()
    adjustments: Sequence[ManualAdjustment] = ()
    default_multipliers: Mapping[str, Decimal] = field(default_factory=dict)
    idle_mode: IdleMode = IdleMode.HIDDEN
    # Net guarantee per (tenant, flavour): the weights idle is spread by.
    guarantees: Mapping[tuple[int, int], int] = field(default_factory=dict)
    as_of: datetime | None = None
    default_currency: str = "USD"
    # Effective-dated inputs (empty: the constant values above hold throughout).
    # Per tenant, its attribution over time; usage is attributed by its segment_start.
    spans: Mapping[int, Sequence[TenantSpan]] = field(default_factory=dict)
    # Capacity of a flavour over time (flavours without pieces: Flavour.capacity).
    capacity: Sequence[Piece] = ()
    # Net guarantees over time (when given, they replace ``guarantees`` for spreading).
    guarantee_pieces: Sequence[Piece] = ()
    # 1 from-currency = rate to-currency, per (month, from, to).
    exchange_rates: Mapping[RateKey, Decimal] = field(default_factory=dict)
    # When set, every line is converted to it (e.g. a budget's currency), whatever the
    # tenant's billing currency.
    currency: str | None = None
    # The currency the __idle__ line is billed in (blank: its card's).
    idle_currency: str = ""
    # False (provisional figures): a line whose rate is missing stays in its card's
    # currency instead of raising MissingExchangeRates.
    strict_rates: bool = True


@dataclass
class PricedPeriod:
    lines: list[ChargeLine]
    warnings: list[str]

    def totals(self) -> dict[int | None, Decimal]:
        """Exact sum of line amounts per tenant (None: the __idle__ line)."""
        sums: dict[int | None, Decimal] = defaultdict(lambda: Decimal("0.00"))
        for line in self.lines:
            sums[line.tenant_id] += line.amount
        return dict(sums)


@dataclass
class _Acc:
    currency: str  # the card's
    gpu_hours: Fraction = Fraction(0)
    amount: Fraction = Fraction(0)
    busy_hours: Fraction | None = None
    multiplier: Fraction = Fraction(1)
    unit_price: Fraction = Fraction(0)  # per GPU-hour, before the multiplier

    def add(self, gpu_hours: Fraction, amount: Fraction, busy: Fraction | None) -> None:
        self.gpu_hours += gpu_hours
        self.amount += amount
        if busy is not None:
            self.busy_hours = (self.busy_hours or Fraction(0)) + busy


LineKey = tuple[int | None, Kind, int | None, str, int | None, str | None, Attribution]
Target = tuple[str, str]
"""(currency a line is billed in, month whose exchange rate converts it)."""


class _Rates:
    """Exchange rates looked up by month and pair; what is missing is remembered."""

    def __init__(self, rates: Mapping[RateKey, Decimal], strict: bool = True) -> None:
        self.rates = rates
        self.strict = strict
        self.missing: set[RateKey] = set()

    def get(self, month: str, source: str, target: str) -> Decimal | None:
        rate = self.rates.get((month, source, target))
        if rate is None or rate <= 0:
            self.missing.add((month, source, target))
            return None
        return rate


class _Lines:
    def __init__(self, rates: _Rates | None = None) -> None:
        self.acc: dict[tuple[LineKey, Target], _Acc] = {}
        self.rates = rates or _Rates({})

    def add(
        self,
        key: LineKey,
        currency: str,
        unit_price: Fraction,
        multiplier: Fraction,
        gpu_hours: Fraction,
        amount: Fraction,
        busy: Fraction | None,
        target: Target | None = None,
    ) -> None:
        """``target``: (billing currency, month of the charge); None: the card's currency."""
        full = (key, target or (currency, ""))
        acc = self.acc.get(full)
        if acc is None:
            acc = self.acc[full] = _Acc(currency, multiplier=multiplier, unit_price=unit_price)
        acc.add(gpu_hours, amount, busy)

    def lines(self) -> list[ChargeLine]:
        out = []
        for ((tenant, kind, flavour, priority, card, period, who), target), acc in self.acc.items():
            currency, month = target
            fx = Fraction(1)
            converted = currency != acc.currency
            if converted:
                found = self.rates.get(month, acc.currency, currency)
                fx = Fraction(found) if found is not None else Fraction(0)
                if found is None and not self.rates.strict:
                    currency, fx, converted = acc.currency, Fraction(1), False
            amount = acc.amount * fx
            if acc.gpu_hours > 0:
                rate = round_half_even(amount / acc.gpu_hours, RATE_PLACES)
            else:
                rate = round_half_even(acc.unit_price * acc.multiplier * fx, RATE_PLACES)
            out.append(
                ChargeLine(
                    tenant_id=tenant,
                    kind=kind,
                    flavour_id=flavour,
                    currency=currency,
                    gpu_hours=round_half_even(acc.gpu_hours, HOURS_PLACES),
                    gpu_hours_busy=(
                        round_half_even(acc.busy_hours, HOURS_PLACES)
                        if acc.busy_hours is not None
                        else None
                    ),
                    rate=rate,
                    multiplier=round_half_even(acc.multiplier, 3),
                    amount=round_half_even(amount),
                    priority_class=priority,
                    rate_card_id=card,
                    usage_period=period,
                    attribution=who,
                    **(_conversion(acc.currency, acc.amount, fx, month) if converted else {}),
                )
            )
        return out


def _conversion(source: str, amount: Fraction, fx: Fraction, month: str) -> dict[str, Any]:
    return {
        "source_currency": source,
        "source_amount": round_half_even(amount),
        "exchange_rate": round_half_even(fx, 8),
        "exchange_month": month,
    }


def _unit_price(card: RateCard, flavour: Flavour, price: Decimal) -> tuple[Fraction, Fraction]:
    """(price of one device-second, price of one GPU-hour) for ``card`` on ``flavour``."""
    if card.per_instance(flavour):
        per_device_second = Fraction(price) / HOUR_S
        per_gpu_hour = Fraction(price) / flavour.fraction if flavour.fraction else Fraction(0)
    else:
        per_device_second = Fraction(price) * flavour.fraction / HOUR_S
        per_gpu_hour = Fraction(price)
    return per_device_second, per_gpu_hour


def _gpu_hours(device_seconds: int | Fraction, flavour: Flavour) -> Fraction:
    return Fraction(device_seconds) * flavour.fraction / HOUR_S


def price(data: PricingInput) -> PricedPeriod:
    """Charge lines for ``data``: usage, reservations, idle capacity and adjustments.

    Raises MissingExchangeRates when a line needs converting and its month's rate is not
    in ``data.exchange_rates``; ValueError when usage names a flavour that is not in
    ``data.flavours``.
    """
    return _Pricing(data).run()


class _Pricing:
    """One pricing run. Usage goes first: reservations need to know how much of them was
    used, and idle capacity how much was held or reserved."""

    def __init__(self, data: PricingInput) -> None:
        self.data = data
        self.end = min(data.as_of, data.end) if data.as_of is not None else data.end
        self.bounds = boundaries(data.cards)
        self.segments = (
            segments_within(data.start, self.end, self.bounds) if self.end > data.start else []
        )
        self.reservations = [
            r
            for r in data.reservations
            if r.devices > 0 and (r.start or data.start) < (r.end or data.end)
        ]
        self.reserved_at: dict[tuple[int, int], list[Reservation]] = defaultdict(list)
        for r in self.reservations:
            self.reserved_at[(r.tenant_id, r.flavour_id)].append(r)
        self.capacity: dict[int, list[Piece]] = defaultdict(list)
        for piece in data.capacity:
            self.capacity[piece.flavour_id].append(piece)
        self.rates = _Rates(data.exchange_rates, data.strict_rates)
        self.lines = _Lines(self.rates)
        self.unpriced: set[str] = set()
        # Device-seconds held per (flavour, price segment) in this period's own hours;
        # non-borrowed use of reserved capacity per (tenant, flavour, segment).
        self.held: dict[tuple[int, int], int] = defaultdict(int)
        self.covered: dict[tuple[int, int, int], int] = defaultdict(int)
        self.covered_busy: dict[tuple[int, int, int], Fraction] = {}
        self.reserved_seconds: dict[tuple[int, int, int], int] = defaultdict(int)
        self.unused_reserved: dict[tuple[int, int], int] = defaultdict(int)

    def run(self) -> PricedPeriod:
        for usage in self.data.usage:
            self._usage(usage)
        busy_given: set[tuple[int, int, int]] = set()
        for reservation in self.reservations:
            self._reservation(reservation, busy_given)
        for (tenant, flavour, index), seconds in self.reserved_seconds.items():
            used = self.covered.get((tenant, flavour, index), 0)
            self.unused_reserved[(flavour, index)] += max(0, seconds - used)
        idle = self._idle() if self.data.idle_mode != IdleMode.HIDDEN else []
        adjustments = [self._adjustment(a) for a in self.data.adjustments]
        out = self.lines.lines() + idle + adjustments
        if self.rates.missing and self.rates.strict:
            raise MissingExchangeRates(self.rates.missing)
        out.sort(key=_line_order)
        warnings = [
            f"no rate card covers {name}; its usage is shown at a rate of 0"
            for name in sorted(self.unpriced)
        ]
        return PricedPeriod(lines=out, warnings=warnings)

    def _target(
        self, who: Attribution | None, at: datetime, month: str | None = None
    ) -> Target | None:
        """The currency a line of ``who`` (None: the idle line) is billed in, and the month
        whose rate converts a charge at ``at`` (``month``: a late line's usage month);
        None: the line stays in its card's currency."""
        currency = self.data.currency or (who.currency if who else self.data.idle_currency)
        return (currency, month or month_of(at)) if currency else None

    def _adjustment(self, adjustment: ManualAdjustment) -> ChargeLine:
        who = self._attribution(adjustment.tenant_id, self.end)
        line = _adjustment_line(adjustment, who)
        target = self._target(who, self.data.start)
        if target is None or target[0] == adjustment.currency:
            return line
        currency, month = target
        found = self.rates.get(month, adjustment.currency, currency)
        if found is None and not self.rates.strict:
            return line
        fx = Fraction(found) if found is not None else Fraction(0)
        exact = Fraction(adjustment.amount)
        return replace(
            line,
            currency=currency,
            amount=round_half_even(exact * fx),
            **_conversion(adjustment.currency, exact, fx, month),
        )

    def _span(self, tenant_id: int, at: datetime) -> TenantSpan | None:
        spans = self.data.spans.get(tenant_id)
        if not spans:
            return None
        for span in spans:
            if span.start <= at < span.end:
                return span
        return spans[-1] if at >= spans[-1].end else spans[0]

    def _attribution(self, tenant_id: int, at: datetime) -> Attribution:
        span = self._span(tenant_id, at)
        return span.attribution if span is not None else Attribution()

    def _pieces_by_span(
        self, tenant_id: int, lo: datetime, hi: datetime
    ) -> list[tuple[datetime, datetime, Attribution]]:
        """[lo, hi) cut where the tenant's attribution changes."""
        spans = self.data.spans.get(tenant_id)
        if not spans:
            return [(lo, hi, Attribution())]
        out = []
        for span in spans:
            a, b = max(lo, span.start), min(hi, span.end)
            if b > a:
                out.append((a, b, span.attribution))
        return out or [(lo, hi, self._attribution(tenant_id, lo))]

    def _is_reserved(self, tenant_id: int, flavour_id: int, at: datetime) -> bool:
        return any(
            (r.start or self.data.start) <= at < (r.end or self.data.end)
            for r in self.reserved_at.get((tenant_id, flavour_id), ())
        )

    def _card(self, flavour: Flavour, at: datetime) -> RateCard | None:
        card = resolve_card(self.data.cards, flavour, at)
        if card is None:
            self.unpriced.add(flavour.name)
        return card

    def _usage(self, usage: Usage) -> None:
        flavour = self.data.flavours.get(usage.flavour_id)
        if flavour is None:
            raise ValueError(f"usage names flavour {usage.flavour_id}, which is not loaded")
        card = self._card(flavour, usage.segment_start)
        segment = segment_of(usage.segment_start, self.bounds)
        late = usage.usage_period is not None
        if not late:
            self.held[(flavour.id, segment)] += usage.device_seconds
        who = self._attribution(usage.tenant_id, usage.segment_start)
        reserved = not late and self._is_reserved(usage.tenant_id, flavour.id, usage.segment_start)
        borrowed = min(usage.borrowed_device_seconds, usage.device_seconds)
        for is_borrowed, seconds in ((False, usage.device_seconds - borrowed), (True, borrowed)):
            if seconds <= 0:
                continue
            busy = _busy_share(usage, seconds, flavour)
            if not is_borrowed and reserved:
                # Covered by the tenant's reserved capacity (already paid for).
                key = (usage.tenant_id, flavour.id, segment)
                self.covered[key] += seconds
                if busy is not None:
                    self.covered_busy[key] = self.covered_busy.get(key, Fraction(0)) + busy
                continue
            key6: LineKey = (
                usage.tenant_id,
                _usage_kind(is_borrowed, late),
                flavour.id,
                usage.priority_class,
                card.id if card else None,
                usage.usage_period,
                who,
            )
            target = self._target(who, usage.segment_start, usage.usage_period)
            if card is None:
                # nothing to convert: shown at 0 in the billing currency
                self.lines.add(
                    key6,
                    target[0] if target else self.data.default_currency,
                    Fraction(0),
                    Fraction(1),
                    _gpu_hours(seconds, flavour),
                    Fraction(0),
                    busy,
                    target,
                )
                continue
            base = card.on_demand_price if is_borrowed else card.reserved_price
            per_second, per_gpu_hour = _unit_price(card, flavour, base)
            multiplier = _multiplier(card, usage.priority_class, self.data.default_multipliers)
            amount = per_second * seconds * multiplier
            self.lines.add(
                key6,
                card.currency,
                per_gpu_hour,
                multiplier,
                _gpu_hours(seconds, flavour),
                amount,
                busy,
                target,
            )

    def _reservation(self, reservation: Reservation, busy_given: set[tuple[int, int, int]]) -> None:
        flavour = self.data.flavours.get(reservation.flavour_id)
        if flavour is None:
            return
        r_start = max(reservation.start or self.data.start, self.data.start)
        r_end = min(reservation.end or self.end, self.end)
        for index, seg_lo, seg_hi in self.segments:
            lo, hi = max(seg_lo, r_start), min(seg_hi, r_end)
            if hi <= lo:
                continue
            key = (reservation.tenant_id, flavour.id, index)
            card = self._card(flavour, lo)
            for a, b, who in self._pieces_by_span(reservation.tenant_id, lo, hi):
                seconds = reservation.devices * int((b - a).total_seconds())
                self.reserved_seconds[key] += seconds
                if card is None:
                    continue
                per_second, per_gpu_hour = _unit_price(card, flavour, card.reserved_price)
                busy = None
                if key not in busy_given:
                    busy_given.add(key)
                    busy = self.covered_busy.get(key)
                self.lines.add(
                    (
                        reservation.tenant_id,
                        Kind.RESERVED_CAPACITY,
                        flavour.id,
                        "",
                        card.id,
                        None,
                        who,
                    ),
                    card.currency,
                    per_gpu_hour,
                    Fraction(1),
                    _gpu_hours(seconds, flavour),
                    per_second * seconds,
                    busy,
                    self._target(who, a),
                )

    def _capacity_seconds(self, flavour: Flavour, lo: datetime, hi: datetime) -> int:
        pieces = self.capacity.get(flavour.id)
        if not pieces:
            return flavour.capacity * int((hi - lo).total_seconds())
        total = 0
        for piece in pieces:
            a, b = max(lo, piece.start), min(hi, piece.end)
            if b > a:
                total += piece.units * int((b - a).total_seconds())
        return total

    def _idle(self) -> list[ChargeLine]:
        """Idle capacity per flavour and card: what nobody held nor paid a reservation for."""
        spread = self.data.idle_mode == IdleMode.SPREAD
        # Spread idle is split in the card's currency first; each share is converted to
        # its tenant's billing currency (see _spread_converted).
        idle = _Lines(self.rates)
        # the segments each idle line covers, to weigh guarantees over the same hours
        covers: dict[tuple[int, int], list[tuple[datetime, datetime]]] = defaultdict(list)
        with_capacity = {f for f, pieces in self.capacity.items() if any(p.units for p in pieces)}
        for flavour in sorted(self.data.flavours.values(), key=lambda f: f.id):
            if flavour.capacity <= 0 and flavour.id not in with_capacity:
                continue
            for index, lo, hi in self.segments:
                capacity = self._capacity_seconds(flavour, lo, hi)
                key = (flavour.id, index)
                seconds = capacity - self.held.get(key, 0) - self.unused_reserved.get(key, 0)
                card = self._card(flavour, lo) if seconds > 0 else None
                if card is None:
                    continue
                per_second, per_gpu_hour = _unit_price(card, flavour, card.reserved_price)
                idle.add(
                    (
                        None,
                        Kind.IDLE,
                        flavour.id,
                        "",
                        card.id,
                        None,
                        Attribution(mode=PLATFORM_COST),
                    ),
                    card.currency,
                    per_gpu_hour,
                    Fraction(1),
                    _gpu_hours(seconds, flavour),
                    per_second * seconds,
                    None,
                    None if spread else self._target(None, lo),
                )
                covers[(flavour.id, card.id)].append((lo, hi))
        lines = idle.lines()
        if not spread:
            return lines
        return [
            self._converted_share(share, covers[(line.flavour_id or 0, line.rate_card_id or 0)])
            for line in lines
            for share in _spread(
                line,
                self._guarantee_weights(
                    line, covers[(line.flavour_id or 0, line.rate_card_id or 0)]
                ),
            )
        ]

    def _converted_share(
        self, share: ChargeLine, hours: list[tuple[datetime, datetime]]
    ) -> ChargeLine:
        """An idle line or share, split to the cent in the card's currency, converted to
        the currency its holder is billed in (the whole line kept: the platform default)."""
        who = share.attribution if share.tenant_id is not None else None
        target = self._target(who, hours[0][0] if hours else self.data.start)
        if target is None or target[0] == share.currency:
            return share
        currency, month = target
        found = self.rates.get(month, share.currency, currency)
        if found is None and not self.rates.strict:
            return share
        fx = Fraction(found) if found is not None else Fraction(0)
        return replace(
            share,
            currency=currency,
            amount=round_half_even(Fraction(share.amount) * fx),
            rate=round_half_even(Fraction(share.rate) * fx, RATE_PLACES),
            **_conversion(share.currency, Fraction(share.amount), fx, month),
        )

    def _guarantee_weights(
        self, line: ChargeLine, hours: list[tuple[datetime, datetime]]
    ) -> list[tuple[int, Attribution, int]]:
        """(tenant, attribution, guarantee-seconds) of the line's flavour over ``hours``:
        idle is shared by the guarantee each tenant held while it was idle."""
        weights: dict[tuple[int, Attribution], int] = defaultdict(int)
        pieces = self.data.guarantee_pieces or [
            Piece(flavour, units, self.data.start, self.data.end, tenant)
            for (tenant, flavour), units in self.data.guarantees.items()
        ]
        for piece in pieces:
            if piece.flavour_id != line.flavour_id or piece.units <= 0 or piece.tenant_id is None:
                continue
            for lo, hi in hours:
                a, b = max(lo, piece.start), min(hi, piece.end)
                if b <= a:
                    continue
                for x, y, who in self._pieces_by_span(piece.tenant_id, a, b):
                    weights[(piece.tenant_id, who)] += piece.units * int((y - x).total_seconds())
        return sorted(
            ((tenant, who, units) for (tenant, who), units in weights.items() if units > 0),
            key=lambda w: (w[0], w[1].path, w[1].cost_center, w[1].mode),
        )


def _spread(line: ChargeLine, holders: list[tuple[int, Attribution, int]]) -> list[ChargeLine]:
    """An idle line split over the tenants holding a guarantee of its flavour (weighed by
    guarantee-seconds), to the cent; kept whole (the platform's) when nobody holds one."""
    if not holders:
        return [line]
    weights = [Fraction(units) for _tenant, _who, units in holders]
    amounts = split_exactly(line.amount, weights)
    hours = split_exactly(line.gpu_hours, weights, HOURS_PLACES)
    total = sum(weights, Fraction(0))
    return [
        ChargeLine(
            tenant_id=tenant,
            kind=Kind.IDLE_SHARE,
            flavour_id=line.flavour_id,
            currency=line.currency,
            gpu_hours=share_hours,
            gpu_hours_busy=None,
            rate=line.rate,
            multiplier=line.multiplier,
            amount=amount,
            rate_card_id=line.rate_card_id,
            note=f"idle capacity shared by guarantee ({_share_text(weight, total)})",
            attribution=who,
        )
        for (tenant, who, _units), weight, amount, share_hours in zip(
            holders, weights, amounts, hours, strict=True
        )
    ]


def _share_text(weight: Fraction, total: Fraction) -> str:
    percent = round_half_even(weight * 100 / total, 2) if total else Decimal(0)
    return f"{percent} %"


def _adjustment_line(adjustment: ManualAdjustment, who: Attribution) -> ChargeLine:
    return ChargeLine(
        tenant_id=adjustment.tenant_id,
        kind=Kind.ADJUSTMENT,
        flavour_id=None,
        currency=adjustment.currency,
        gpu_hours=Decimal("0.0000"),
        gpu_hours_busy=None,
        rate=Decimal("0.000000"),
        multiplier=Decimal("1.000"),
        amount=round_half_even(Fraction(adjustment.amount)),
        adjustment_id=adjustment.id,
        note=adjustment.note,
        attribution=who,
    )


def _usage_kind(borrowed: bool, late: bool) -> Kind:
    if late:
        return Kind.LATE_ON_DEMAND if borrowed else Kind.LATE_USAGE
    return Kind.ON_DEMAND if borrowed else Kind.USAGE


def _busy_share(usage: Usage, seconds: int, flavour: Flavour) -> Fraction | None:
    if usage.busy_device_seconds is None or usage.device_seconds <= 0:
        return None
    share = Fraction(usage.busy_device_seconds) * seconds / usage.device_seconds
    return _gpu_hours(share, flavour)


def _multiplier(card: RateCard, priority_class: str, defaults: Mapping[str, Decimal]) -> Fraction:
    if priority_class in card.multipliers:
        return Fraction(card.multipliers[priority_class])
    if priority_class in defaults:
        return Fraction(defaults[priority_class])
    return Fraction(1)


def _line_order(line: ChargeLine) -> tuple[int, int, str, int, str, str, str, str]:
    return (
        line.tenant_id if line.tenant_id is not None else -1,
        line.flavour_id if line.flavour_id is not None else 1 << 62,
        line.kind.value,
        line.rate_card_id or 0,
        line.priority_class,
        line.usage_period or "",
        line.attribution.path,
        line.attribution.cost_center,
    )
