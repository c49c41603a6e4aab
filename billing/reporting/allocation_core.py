"""Cost allocation (like OpenCost's): priced charge lines spread over the usage behind
them, summed by any grouping, with idle capacity shared out and a month-over-month trend.
Pure Python: no Django, no float.

How a cent finds its group:

* every charge line (in quota, borrowed, reserved, late usage) is split over the pieces of
  usage that make it up, in proportion to their device-seconds (within one line the flavour,
  rate card and priority class are fixed, so that is the line's own arithmetic), with
  :func:`billing.charging.money.split_exactly`: the parts add up to the line to the cent;
* a line no usage makes up (an adjustment, a reservation nobody used) stays with its tenant
  under ``__unallocated__`` for the other keys; usage whose workload has no value for a
  key (no namespace, no such label) is grouped under ``__none__``, apart from it;
* idle capacity (the ``idle`` and ``idle_share`` lines of a flavour, pooled) is shared over
  the groups evenly, by guarantee or by usage, again to the cent, and shown apart
  (``idle_cost``); when no group can take it, it stays on an ``__idle__`` row.

So the rows of any grouping add up to the statements they come from.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction

from billing.charging.money import round_half_even, split_exactly
from billing.charging.pricing import KIND_FACTS, Kind

HOUR_S = 3600
HOURS_PLACES = 4
ZERO = Decimal("0.00")
UNALLOCATED = "__unallocated__"
# usage whose workload has no value for the dimension (no namespace: submitted through
# the API; no such label): not unallocated money, which is a line no usage makes up
NO_VALUE = "__none__"
IDLE = "__idle__"

# Dimensions a view groups by; label:<key> and annotation:<key> name the workload's own.
DIMENSIONS = ("tenant", "namespace", "workload", "flavour", "line_type")
KEYED_PREFIXES = ("label:", "annotation:")
# Charge kinds as the allocation view names them (billing.charging.pricing.KIND_FACTS).
LINE_TYPES: dict[str, str] = {kind.value: f.allocation_type for kind, f in KIND_FACTS.items()}
IDLE_KINDS = frozenset(kind.value for kind, f in KIND_FACTS.items() if f.idle)


class IdlePolicy(StrEnum):
    EVEN = "even"
    GUARANTEE = "guarantee"
    USAGE = "usage"


def unknown_dimension(key: str) -> bool:
    """Whether ``key`` is not something a view can group by."""
    if key in DIMENSIONS:
        return False
    for prefix in KEYED_PREFIXES:
        if key.startswith(prefix) and key[len(prefix) :].strip():
            return False
    return True


MatchKey = tuple[int | None, str, int | None, str, int | None, str]


@dataclass(frozen=True, slots=True)
class Line:
    """One priced charge line (a statement line, or one priced on the fly)."""

    tenant_id: int | None
    kind: str
    flavour_id: int | None
    priority_class: str
    card_id: int | None
    usage_period: str
    amount: Decimal

    @property
    def key(self) -> MatchKey:
        return (
            self.tenant_id,
            self.kind,
            self.flavour_id,
            self.priority_class,
            self.card_id,
            self.usage_period,
        )


@dataclass(frozen=True, slots=True)
class Piece:
    """Usage of one tenant, flavour, priority class, rate card and charge kind, with its
    values of the grouping keys (namespace, workload, label:<k>, ...)."""

    tenant_id: int
    flavour_id: int
    kind: str
    priority_class: str
    card_id: int | None
    usage_period: str
    device_seconds: int
    busy_device_seconds: Fraction | None
    gpu_fraction: Fraction
    values: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> MatchKey:
        # reserved capacity is one line per tenant, flavour and card, whatever the class
        priority = "" if self.kind == Kind.RESERVED_CAPACITY else self.priority_class
        return (
            self.tenant_id,
            self.kind,
            self.flavour_id,
            priority,
            self.card_id,
            self.usage_period,
        )

    @property
    def gpu_hours(self) -> Fraction:
        return Fraction(self.device_seconds) * self.gpu_fraction / HOUR_S

    @property
    def busy_hours(self) -> Fraction | None:
        if self.busy_device_seconds is None:
            return None
        return self.busy_device_seconds * self.gpu_fraction / HOUR_S


@dataclass
class AllocationInput:
    lines: Sequence[Line]
    pieces: Sequence[Piece]
    aggregate: Sequence[str]
    idle_policy: IdlePolicy
    tenant_slugs: Mapping[int, str]
    flavour_names: Mapping[int, str]
    # net guarantee per (tenant, flavour): the weights of the guarantee policy
    guarantees: Mapping[tuple[int, int], int] = field(default_factory=dict)
    visible: frozenset[int] | None = None  # tenants shown; None: all
    show_idle: bool = True


@dataclass(frozen=True, slots=True)
class Row:
    keys: tuple[str, ...]
    gpu_hours_allocated: Decimal
    gpu_hours_busy: Decimal | None
    efficiency: Decimal | None
    cost: Decimal
    idle_cost: Decimal | None
    total: Decimal
    previous_total: Decimal | None = None
    change: Decimal | None = None


@dataclass
class _Share:
    """A piece (or a line no usage makes up) with the cost it carries."""

    tenant_id: int | None
    flavour_id: int | None
    kind: str
    values: Mapping[str, str]
    gpu_hours: Fraction = Fraction(0)
    busy_hours: Fraction | None = None
    measured_hours: Fraction = Fraction(0)
    cost: Decimal = ZERO


@dataclass
class _Group:
    gpu_hours: Fraction = Fraction(0)
    busy_hours: Fraction | None = None
    measured_hours: Fraction = Fraction(0)
    cost: Decimal = ZERO
    idle_cost: Decimal = ZERO


def allocate(data: AllocationInput) -> list[Row]:
    """The rows of ``data.aggregate`` (largest total first): hours, efficiency, cost and
    the share of idle capacity. Raises ValueError for a dimension it does not know."""
    for key in data.aggregate:
        if unknown_dimension(key):
            raise ValueError(f"unknown aggregate key {key!r}")
    shares, idle_pools = _costed_shares(data.lines, data.pieces, data.show_idle)
    if data.visible is not None:
        shares = [s for s in shares if s.tenant_id in data.visible]
    groups: dict[tuple[str, ...], _Group] = {}
    for share in shares:
        group = groups.setdefault(_group_key(share, data), _Group())
        group.gpu_hours += share.gpu_hours
        group.measured_hours += share.measured_hours
        group.cost += share.cost
        if share.busy_hours is not None:
            group.busy_hours = (group.busy_hours or Fraction(0)) + share.busy_hours
    if data.show_idle:
        for flavour_id in sorted(idle_pools, key=lambda f: (f is None, f or 0)):
            amount = idle_pools[flavour_id]
            if amount:
                _share_idle(flavour_id, amount, shares, groups, data)
    rows = [_row(keys, group, data.show_idle) for keys, group in groups.items()]
    rows.sort(key=lambda r: (-r.total, r.keys))
    return rows


def _costed_shares(
    lines: Sequence[Line], pieces: Sequence[Piece], pool_idle: bool
) -> tuple[list[_Share], dict[int | None, Decimal]]:
    """Pieces with the cost of their lines, and idle capacity per flavour. Without
    ``pool_idle`` a tenant's share of idle on its own statement stays its cost."""
    by_key: dict[MatchKey, list[int]] = defaultdict(list)
    shares: list[_Share] = []
    for index, piece in enumerate(pieces):
        busy = piece.busy_hours
        shares.append(
            _Share(
                tenant_id=piece.tenant_id,
                flavour_id=piece.flavour_id,
                kind=piece.kind,
                values=piece.values,
                gpu_hours=piece.gpu_hours,
                busy_hours=busy,
                measured_hours=piece.gpu_hours if busy is not None else Fraction(0),
            )
        )
        if piece.device_seconds > 0:
            by_key[piece.key].append(index)
    idle: dict[int | None, Decimal] = defaultdict(lambda: ZERO)
    for line in lines:
        if line.kind in IDLE_KINDS and (pool_idle or line.tenant_id is None):
            idle[line.flavour_id] += line.amount
            continue
        matched = by_key.get(line.key, [])
        if not matched:
            shares.append(_Share(line.tenant_id, line.flavour_id, line.kind, {}, cost=line.amount))
            continue
        weights = [Fraction(pieces[i].device_seconds) for i in matched]
        for i, amount in zip(matched, split_exactly(line.amount, weights), strict=True):
            shares[i].cost += amount
    return shares, dict(idle)


def _value(share: _Share, dimension: str, data: AllocationInput) -> str:
    if dimension == "tenant":
        if share.tenant_id is None:
            return IDLE
        return data.tenant_slugs.get(share.tenant_id, str(share.tenant_id))
    if dimension == "flavour":
        if share.flavour_id is None:
            return UNALLOCATED
        return data.flavour_names.get(share.flavour_id, str(share.flavour_id))
    if dimension == "line_type":
        return LINE_TYPES.get(share.kind, share.kind)
    if share.tenant_id is None:
        return IDLE
    if not share.values:  # a line no usage makes up
        return UNALLOCATED
    return share.values.get(dimension) or NO_VALUE


def _group_key(share: _Share, data: AllocationInput) -> tuple[str, ...]:
    return tuple(_value(share, d, data) for d in data.aggregate)


def _share_idle(
    flavour_id: int | None,
    amount: Decimal,
    shares: list[_Share],
    groups: dict[tuple[str, ...], _Group],
    data: AllocationInput,
) -> None:
    """Spread one flavour's idle ``amount`` over the groups by the policy, to the cent."""
    weights = _idle_weights(flavour_id, shares, data)
    if not weights:
        keys = _group_key(_Share(None, flavour_id, "idle", {}), data)
        groups.setdefault(keys, _Group()).idle_cost += amount
        return
    ordered = sorted(weights)
    parts = split_exactly(amount, [weights[k] for k in ordered])
    for keys, part in zip(ordered, parts, strict=True):
        groups.setdefault(keys, _Group()).idle_cost += part


def _idle_weights(
    flavour_id: int | None, shares: list[_Share], data: AllocationInput
) -> dict[tuple[str, ...], Fraction]:
    """Weight of each group in one flavour's idle capacity; {}: nobody takes it."""
    used = [
        s
        for s in shares
        if s.tenant_id is not None and s.flavour_id == flavour_id and s.gpu_hours > 0
    ]
    weights: dict[tuple[str, ...], Fraction] = defaultdict(Fraction)
    if data.idle_policy == IdlePolicy.EVEN:
        for share in used:
            weights[_group_key(share, data)] = Fraction(1)
    elif data.idle_policy == IdlePolicy.USAGE:
        for share in used:
            weights[_group_key(share, data)] += share.gpu_hours
    else:
        # A tenant's guarantee, split over its groups by what they used of it; a tenant
        # that used none keeps its share under __unallocated__.
        per_tenant: dict[int, list[_Share]] = defaultdict(list)
        for share in used:
            if share.tenant_id is not None:
                per_tenant[share.tenant_id].append(share)
        for (tenant_id, held_flavour), units in sorted(data.guarantees.items()):
            if held_flavour != flavour_id or units <= 0:
                continue
            if data.visible is not None and tenant_id not in data.visible:
                continue
            own = per_tenant.get(tenant_id, [])
            total = sum((s.gpu_hours for s in own), Fraction(0))
            if total <= 0:
                weights[_group_key(_Share(tenant_id, flavour_id, "idle", {}), data)] += units
                continue
            for share in own:
                weights[_group_key(share, data)] += units * share.gpu_hours / total
    return {k: w for k, w in weights.items() if w > 0}


def _row(keys: tuple[str, ...], group: _Group, show_idle: bool) -> Row:
    busy = group.busy_hours
    efficiency = None
    if busy is not None and group.measured_hours > 0:
        efficiency = round_half_even(busy / group.measured_hours, 4)
    idle_cost = group.idle_cost if show_idle else None
    return Row(
        keys=keys,
        gpu_hours_allocated=round_half_even(group.gpu_hours, HOURS_PLACES),
        gpu_hours_busy=round_half_even(busy, HOURS_PLACES) if busy is not None else None,
        efficiency=efficiency,
        cost=group.cost,
        idle_cost=idle_cost,
        total=group.cost + (idle_cost or ZERO),
    )


def with_trend(current: Sequence[Row], previous: Sequence[Row]) -> list[Row]:
    """``current`` with each group's total of the previous window and the change; groups
    only the previous window had are added with nothing now."""
    before = {row.keys: row.total for row in previous}
    out = [
        replace(
            row,
            previous_total=before.get(row.keys, ZERO),
            change=row.total - before.get(row.keys, ZERO),
        )
        for row in current
    ]
    now = {row.keys for row in current}
    for row in previous:
        if row.keys not in now:
            out.append(
                Row(
                    keys=row.keys,
                    gpu_hours_allocated=Decimal("0.0000"),
                    gpu_hours_busy=None,
                    efficiency=None,
                    cost=ZERO,
                    idle_cost=ZERO if row.idle_cost is not None else None,
                    total=ZERO,
                    previous_total=row.total,
                    change=-row.total,
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class Totals:
    cost: Decimal
    idle_cost: Decimal | None
    total: Decimal
    previous_total: Decimal | None


def totals(rows: Sequence[Row]) -> Totals:
    idle = [r.idle_cost for r in rows if r.idle_cost is not None]
    previous = [r.previous_total for r in rows if r.previous_total is not None]
    return Totals(
        cost=sum((r.cost for r in rows), ZERO),
        idle_cost=sum(idle, ZERO) if idle else None,
        total=sum((r.total for r in rows), ZERO),
        previous_total=sum(previous, ZERO) if previous else None,
    )
