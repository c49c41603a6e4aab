"""What was in force during a billing period, hour by hour, and the copy a close freezes.

Quotas, flavour capacities, each tenant's place in the tree and cost centre, and its billing
settings are recorded as they change
(:mod:`tenants.history`). :func:`resolve_period_settings` turns that history into the
effective-dated inputs of :mod:`billing.charging.pricing` for one period: per tenant the spans of
its attribution (path, cost centre, mode) and reserved charging, per flavour its capacity,
per tenant and flavour its net guarantee, and the reservations that follow from them.

A close stores the result as a :class:`billing.models.PricingSnapshot`; closing the period
again (after a re-open) prices with that frozen copy, so the statements only change when
the ledger or the adjustments did. How idle capacity is shown (the platform policy) is
the one in force at the first close. Usage is hourly, so a change inside an hour attributes
that hour's usage as it stood at the hour's start; reservations, capacity and guarantees
follow changes to the second.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from billing.charging import pricing
from billing.models import BillingPeriod, BillingPolicy, PricingSnapshot, TenantBillingSettings
from scheduler_bridge.history import quota_key
from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.quotas.models import Quota
from tenants.history import pieces_within, record_setting, settings_history, tenant_place
from tenants.models import Tenant

CHARGEBACK = TenantBillingSettings.Mode.CHARGEBACK.value


def billing_value(settings: TenantBillingSettings) -> dict[str, Any]:
    return {
        "mode": settings.mode,
        "charge_reserved": settings.charge_reserved,
        "currency": settings.currency,
    }


def track_billing_settings(sender: type, instance: Any, **kwargs: Any) -> None:
    if kwargs.get("raw"):
        return
    record_setting("billing", instance.tenant_id, billing_value(instance))


def track_billing_settings_deleted(sender: type, instance: Any, **kwargs: Any) -> None:
    record_setting("billing", instance.tenant_id, None)


@dataclass
class PeriodSettings:
    """The effective-dated pricing inputs of one period (see the module docstring)."""

    spans: dict[int, list[pricing.TenantSpan]] = field(default_factory=dict)
    capacity: list[pricing.Piece] = field(default_factory=list)
    guarantees: list[pricing.Piece] = field(default_factory=list)
    reservations: list[pricing.Reservation] = field(default_factory=list)
    idle_mode: str = BillingPolicy.IdleMode.LINE.value
    # Frozen with the close: the rate cards and priority multipliers it priced with
    # (None: today's, as loaded by the caller).
    cards: list[pricing.RateCard] | None = None
    multipliers: dict[str, Decimal] | None = None
    # Frozen with the close too: the exchange rates (None: today's table) and the platform
    # default currency (idle lines; None: today's policy).
    rates: dict[pricing.RateKey, Decimal] | None = None
    default_currency: str | None = None

    def tenant_cuts(self, start: datetime, end: datetime) -> dict[int, list[datetime]]:
        """Per tenant whose attribution or reserved charging changes within (start, end),
        the instants where it does: its usage is summed per piece between them."""
        cuts: dict[int, set[datetime]] = defaultdict(set)
        for tenant, spans in self.spans.items():
            cuts[tenant].update(s.start for s in spans if start < s.start < end)
        for r in self.reservations:
            cuts[r.tenant_id].update(
                at for at in (r.start, r.end) if at is not None and start < at < end
            )
        return {tenant: sorted(at) for tenant, at in cuts.items() if at}

    def attribution_at(self, tenant_id: int, at: datetime) -> pricing.Attribution:
        spans = self.spans.get(tenant_id) or []
        for span in spans:
            if span.start <= at < span.end:
                return span.attribution
        return spans[-1].attribution if spans else pricing.Attribution()

    def to_json(self) -> dict[str, Any]:
        return {
            "idle_mode": self.idle_mode,
            "cards": [_card_json(card) for card in self.cards or []],
            "multipliers": {k: str(v) for k, v in (self.multipliers or {}).items()},
            "rates": [
                [m, a, b, str(rate)] for (m, a, b), rate in sorted((self.rates or {}).items())
            ],
            "default_currency": self.default_currency,
            "spans": {
                str(tenant): [
                    [
                        s.start.isoformat(),
                        s.end.isoformat(),
                        s.attribution.path,
                        s.attribution.cost_center,
                        s.attribution.mode,
                        s.charge_reserved,
                        s.attribution.currency,
                    ]
                    for s in spans
                ]
                for tenant, spans in self.spans.items()
            },
            "capacity": [_piece_json(p) for p in self.capacity],
            "guarantees": [_piece_json(p) for p in self.guarantees],
            "reservations": [
                [r.tenant_id, r.flavour_id, r.devices, _iso(r.start), _iso(r.end)]
                for r in self.reservations
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PeriodSettings:
        return cls(
            idle_mode=data["idle_mode"],
            cards=[_card(card) for card in data.get("cards", [])],
            multipliers={k: Decimal(v) for k, v in data.get("multipliers", {}).items()},
            # copies frozen before currencies were recorded hold neither (None: today's)
            rates=(
                {(m, a, b): Decimal(rate) for m, a, b, rate in data["rates"]}
                if "rates" in data
                else None
            ),
            default_currency=data.get("default_currency"),
            spans={
                int(tenant): [
                    pricing.TenantSpan(
                        start=datetime.fromisoformat(lo),
                        end=datetime.fromisoformat(hi),
                        attribution=pricing.Attribution(
                            path, cost_center, mode, *(rest[:1] if rest else [""])
                        ),
                        charge_reserved=bool(reserved),
                    )
                    for lo, hi, path, cost_center, mode, reserved, *rest in spans
                ]
                for tenant, spans in data["spans"].items()
            },
            capacity=[_piece(p) for p in data["capacity"]],
            guarantees=[_piece(p) for p in data["guarantees"]],
            reservations=[
                pricing.Reservation(t, f, units, _dt(lo), _dt(hi))
                for t, f, units, lo, hi in data["reservations"]
            ],
        )


def _card_json(card: pricing.RateCard) -> dict[str, Any]:
    return {
        "id": card.id,
        "currency": card.currency,
        "reserved_price": str(card.reserved_price),
        "on_demand_price": str(card.on_demand_price),
        "valid_from": card.valid_from.isoformat(),
        "valid_to": _iso(card.valid_to),
        "cluster_id": card.cluster_id,
        "flavour_id": card.flavour_id,
        "product": card.product,
        "mig_profile": card.mig_profile,
        "multipliers": {k: str(v) for k, v in card.multipliers.items()},
    }


def _card(data: dict[str, Any]) -> pricing.RateCard:
    return pricing.RateCard(
        id=data["id"],
        currency=data["currency"],
        reserved_price=Decimal(data["reserved_price"]),
        on_demand_price=Decimal(data["on_demand_price"]),
        valid_from=datetime.fromisoformat(data["valid_from"]),
        valid_to=_dt(data["valid_to"]),
        cluster_id=data["cluster_id"],
        flavour_id=data["flavour_id"],
        product=data["product"],
        mig_profile=data["mig_profile"],
        multipliers={k: Decimal(v) for k, v in data["multipliers"].items()},
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _dt(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _piece_json(piece: pricing.Piece) -> list[Any]:
    return [
        piece.flavour_id,
        piece.units,
        piece.start.isoformat(),
        piece.end.isoformat(),
        piece.tenant_id,
    ]


def _piece(data: list[Any]) -> pricing.Piece:
    flavour, units, lo, hi, tenant = data
    return pricing.Piece(
        flavour, units, datetime.fromisoformat(lo), datetime.fromisoformat(hi), tenant
    )


@dataclass(frozen=True)
class _Place:
    """Where a tenant sat in the tree, and which cost centre paid (tenants.history)."""

    path: str
    cost_center: str

    @property
    def chain(self) -> list[int]:
        return _chain(self.path)


@dataclass(frozen=True)
class _Own:
    """A tenant's own billing settings (billing_value), inherited down its subtree."""

    mode: str
    charge_reserved: bool
    currency: str


_NO_SETTINGS = _Own(CHARGEBACK, False, "")
Pieces = list[tuple[datetime, datetime, Any]]


def _typed(pieces: Pieces, make: Any) -> Pieces:
    return [(lo, hi, None if value is None else make(value)) for lo, hi, value in pieces]


def _place(value: Mapping[str, Any]) -> _Place:
    return _Place(value["path"], value["cost_center"])


def _own(value: Mapping[str, Any]) -> _Own:
    return _Own(value["mode"], bool(value["charge_reserved"]), value.get("currency") or "")


def resolve_period_settings(start: datetime, end: datetime) -> PeriodSettings:
    """What was in force in [start, end), from the recorded history (current values where a
    setting has none)."""
    policy = BillingPolicy.current()
    tenants = list(Tenant.objects.values("pk", "path", "cost_center"))
    places_now = {t["pk"]: tenant_place(_Row(t)) for t in tenants}
    places = settings_history("tenant", until=end)
    place_pieces = {
        t["pk"]: _typed(
            pieces_within(places.get(str(t["pk"]), []), start, end, places_now[t["pk"]]), _place
        )
        for t in tenants
    }
    own_now = {
        s.tenant_id: billing_value(s) for s in TenantBillingSettings.objects.all().order_by()
    }
    own = settings_history("billing", until=end)
    own_pieces = {
        pk: _typed(pieces_within(own.get(str(pk), []), start, end, own_now.get(pk)), _own)
        for pk in set(own_now) | {int(k) for k in own}
    }
    quotas_now: dict[str, int] = {
        quota_key(t, f): g
        for t, f, g in Quota.objects.values_list("tenant_id", "flavour_id", "guaranteed")
    }
    quotas = settings_history("quota", until=end)
    quota_of: dict[int, dict[int, Pieces]] = defaultdict(dict)
    for key in set(quotas_now) | set(quotas):
        tenant, flavour = (int(part) for part in key.split(":"))
        quota_of[tenant][flavour] = pieces_within(
            quotas.get(key, []), start, end, quotas_now.get(key, 0)
        )
    spans = _tenant_spans(start, end, place_pieces, own_pieces, policy.default_currency)
    guarantees = _net_guarantees(start, end, place_pieces, quota_of)
    return PeriodSettings(
        spans=spans,
        capacity=capacity_pieces(start, end),
        guarantees=guarantees,
        reservations=_reservations(guarantees, spans),
        # how idle is shown is decided when the period is closed (and then frozen)
        idle_mode=policy.idle_mode,
        default_currency=policy.default_currency,
    )


def _tenant_spans(
    start: datetime,
    end: datetime,
    place_pieces: Mapping[int, Pieces],
    own_pieces: Mapping[int, Pieces],
    default_currency: str,
) -> dict[int, list[pricing.TenantSpan]]:
    """Each tenant's attribution (path, cost centre, mode, currency) and reserved
    charging over the window, evaluated only where its own inputs change: its place, or
    the billing settings of a tenant that was ever its ancestor during the window."""
    ancestors_ever: dict[int, set[int]] = {}
    for pk, pieces in place_pieces.items():
        ancestors_ever[pk] = {pk}
        for _lo, _hi, place in pieces:
            ancestors_ever[pk].update(place.chain)
    spans: dict[int, list[pricing.TenantSpan]] = defaultdict(list)
    for pk, pieces in place_pieces.items():
        instants = {lo for lo, _hi, _v in pieces}
        for ancestor in ancestors_ever[pk]:
            instants.update(lo for lo, _hi, _v in own_pieces.get(ancestor, ()))
        times = sorted(instants | {start, end})
        # A statement is written in one currency: the billing currency in force when the
        # period starts holds all month (a change applies from the next period). It is
        # inherited on its own: the nearest tenant up the tree that names one.
        currency = next(
            (
                value.currency
                for a in reversed(_value_at(pieces, start).chain or [pk])
                if a in own_pieces and (value := _value_at(own_pieces[a], start)) and value.currency
            ),
            default_currency,
        )
        for lo, hi in zip(times, times[1:], strict=False):
            place = _value_at(pieces, lo)
            setting = (
                next(
                    (
                        value
                        for a in reversed(place.chain or [pk])
                        if a in own_pieces and (value := _value_at(own_pieces[a], lo))
                    ),
                    None,
                )
                or _NO_SETTINGS
            )
            _extend_span(
                spans[pk],
                pricing.TenantSpan(
                    lo,
                    hi,
                    pricing.Attribution(place.path, place.cost_center, setting.mode, currency),
                    setting.charge_reserved,
                ),
            )
    return dict(spans)


def _net_guarantees(
    start: datetime,
    end: datetime,
    place_pieces: Mapping[int, Pieces],
    quota_of: Mapping[int, Mapping[int, Pieces]],
) -> list[pricing.Piece]:
    """Each tenant's net guarantee per flavour (its own minus what its children hold),
    which changes where the tenant's quota, a (past or present) child's quota, or that
    child's place changes."""
    children_ever: dict[int, set[int]] = defaultdict(set)
    for pk, pieces in place_pieces.items():
        for _lo, _hi, place in pieces:
            chain = place.chain
            if len(chain) > 1:
                children_ever[chain[-2]].add(pk)
    net: dict[tuple[int, int], list[pricing.Piece]] = defaultdict(list)
    for tenant in set(quota_of) | set(children_ever):
        children = children_ever.get(tenant, set())
        own = quota_of.get(tenant, {})
        flavours = set(own)
        for child in children:
            flavours.update(quota_of.get(child, {}))
        for flavour in flavours:
            instants = {start, end}
            instants.update(lo for lo, _hi, _v in own.get(flavour, ()))
            for child in children:
                instants.update(lo for lo, _hi, _v in quota_of.get(child, {}).get(flavour, ()))
                instants.update(lo for lo, _hi, _v in place_pieces.get(child, ()))
            times = sorted(instants)
            for lo, hi in zip(times, times[1:], strict=False):
                amount = int(_value_at(own.get(flavour, []), lo) or 0)
                for child in children:
                    place = _value_at(place_pieces.get(child, []), lo)
                    if place is None or _parent(place.path) != tenant:
                        continue
                    amount -= int(_value_at(quota_of.get(child, {}).get(flavour, []), lo) or 0)
                if amount > 0:
                    _extend_piece(
                        net[(tenant, flavour)], pricing.Piece(flavour, amount, lo, hi, tenant)
                    )
    return [p for pieces in net.values() for p in pieces]


def _reservations(
    guarantees: list[pricing.Piece], spans: Mapping[int, list[pricing.TenantSpan]]
) -> list[pricing.Reservation]:
    """The net guarantees of tenants while they are charged for reserved capacity."""
    return [
        pricing.Reservation(piece.tenant_id, piece.flavour_id, piece.units, a, b)
        for piece in guarantees
        if piece.tenant_id is not None
        for span in spans.get(piece.tenant_id, [])
        if span.charge_reserved
        for a, b in [(max(piece.start, span.start), min(piece.end, span.end))]
        if b > a
    ]


class _Row:
    """A values() row read like a Tenant by :func:`tenant_place`."""

    def __init__(self, row: Mapping[str, Any]) -> None:
        self.path = row["path"]
        self.cost_center = row["cost_center"]


def capacity_pieces(start: datetime, end: datetime) -> list[pricing.Piece]:
    history = settings_history("capacity", until=end)
    out = []
    for pk, capacity in Flavour.objects.values_list("pk", "capacity"):
        for lo, hi, units in pieces_within(history.get(str(pk), []), start, end, capacity):
            if units:
                out.append(pricing.Piece(pk, int(units), lo, hi))
    return out


def _value_at(pieces: list[tuple[datetime, datetime, Any]], at: datetime) -> Any:
    for lo, hi, value in pieces:
        if lo <= at < hi:
            return value
    return pieces[-1][2] if pieces else None


def _chain(path: str) -> list[int]:
    """Primary keys from the root down to the tenant of a materialised path."""
    return [int(part) for part in path.strip("/").split("/") if part]


def _parent(path: str) -> int | None:
    parts = _chain(path)
    return parts[-2] if len(parts) > 1 else None


def _extend_span(spans: list[pricing.TenantSpan], span: pricing.TenantSpan) -> None:
    last = spans[-1] if spans else None
    if (
        last is not None
        and last.end == span.start
        and last.attribution == span.attribution
        and last.charge_reserved == span.charge_reserved
    ):
        spans[-1] = pricing.TenantSpan(last.start, span.end, last.attribution, last.charge_reserved)
    else:
        spans.append(span)


def _extend_piece(pieces: list[pricing.Piece], piece: pricing.Piece) -> None:
    last = pieces[-1] if pieces else None
    if last is not None and last.end == piece.start and last.units == piece.units:
        pieces[-1] = pricing.Piece(
            last.flavour_id, last.units, last.start, piece.end, last.tenant_id
        )
    else:
        pieces.append(piece)


def period_settings(
    period: BillingPeriod,
    *,
    freeze: bool = False,
    cards: list[pricing.RateCard] | None = None,
    multipliers: dict[str, Decimal] | None = None,
    rates: dict[pricing.RateKey, Decimal] | None = None,
    fresh: bool = False,
) -> PeriodSettings:
    """The settings ``period`` is priced with: the copy its first close froze, else what
    the history says. With ``freeze`` (a close), the history's answer is stored as this
    revision's copy together with ``cards``, ``multipliers`` and ``rates``, today's rate
    cards, priority multipliers and exchange rates. ``fresh`` (a re-open that asked to re-price) skips the copies of
    earlier revisions."""
    snapshots = PricingSnapshot.objects.filter(period=period)
    if fresh:
        snapshots = snapshots.filter(revision=period.revision)
    frozen = snapshots.order_by("-revision").only("data", "revision").first()
    if frozen is not None:
        settings = PeriodSettings.from_json(frozen.data)
        live = None
        for tenant in Tenant.objects.exclude(pk__in=list(settings.spans)).values_list(
            "pk", flat=True
        ):
            # a tenant created after the close that has late usage in this period
            live = live or resolve_period_settings(period.start, period.end)
            if tenant in live.spans:
                settings.spans[tenant] = live.spans[tenant]
        if freeze and frozen.revision != period.revision:
            PricingSnapshot.objects.get_or_create(
                period=period, revision=period.revision, defaults={"data": frozen.data}
            )
        return settings
    settings = resolve_period_settings(period.start, period.end)
    if freeze:
        settings.cards, settings.multipliers, settings.rates = cards, multipliers, rates
        PricingSnapshot.objects.get_or_create(
            period=period, revision=period.revision, defaults={"data": settings.to_json()}
        )
    return settings
