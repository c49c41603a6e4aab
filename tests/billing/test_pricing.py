"""The pure pricing core: hand-computed scenarios to the cent, and properties (hypothesis)
that hold for any input: totals are exact sums of lines, no float anywhere, half-even
rounding."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from billing.charging import pricing
from billing.charging.pricing import IdleMode, Kind

FEB = datetime(2026, 2, 1, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)
H = 3600

H100 = pricing.Flavour(id=1, name="h100", product="H100-80GB", capacity=8, cluster_id=1)
MIG_1G = pricing.Flavour(
    id=2,
    name="h100-1g",
    product="H100-80GB",
    mig_profile="1g.10gb",
    gpu_equivalent=Decimal("0.1429"),
    capacity=14,
    cluster_id=1,
)
MIG_3G = pricing.Flavour(
    id=3,
    name="h100-3g",
    product="H100-80GB",
    mig_profile="3g.40gb",
    gpu_equivalent=Decimal("0.4286"),
    capacity=2,
    cluster_id=1,
)
FLAVOURS = {f.id: f for f in (H100, MIG_1G, MIG_3G)}
CARD = pricing.RateCard(
    id=10,
    currency="EUR",
    reserved_price=Decimal("2.10"),
    on_demand_price=Decimal("3.50"),
    valid_from=FEB - timedelta(days=30),
    product="H100-80GB",
    multipliers={"spot": Decimal("0.6")},
)


def usage(tenant: int, flavour: pricing.Flavour, hours: Fraction | int, **kw: Any) -> pricing.Usage:
    seconds = int(hours * H)
    borrowed = int(kw.pop("borrowed_hours", 0) * H)
    return pricing.Usage(
        tenant_id=tenant,
        flavour_id=flavour.id,
        segment_start=kw.pop("at", FEB),
        device_seconds=seconds,
        borrowed_device_seconds=borrowed,
        **kw,
    )


def price(*items: pricing.Usage, **kw: Any) -> pricing.PricedPeriod:
    return pricing.price(
        pricing.PricingInput(
            start=FEB,
            end=MAR,
            flavours=kw.pop("flavours", FLAVOURS),
            cards=kw.pop("cards", [CARD]),
            usage=list(items),
            **kw,
        )
    )


def amounts(priced: pricing.PricedPeriod) -> dict[tuple[int | None, str, int | None], Decimal]:
    return {
        (line.tenant_id, line.kind.value, line.flavour_id): line.amount for line in priced.lines
    }


def test_whole_gpus_pay_the_reserved_price_per_gpu_hour() -> None:
    priced = price(usage(1, H100, 10))
    assert amounts(priced) == {(1, "usage", 1): Decimal("21.00")}
    assert priced.lines[0].gpu_hours == Decimal("10.0000")


def test_mig_slices_pay_their_compute_fraction_not_the_rounded_equivalent() -> None:
    # 7 instance-hours of 1g = one GPU-hour exactly (2.10), although gpu_equivalent says
    # 0.1429; 1 instance-hour of 3g = 3/7 x 2.10 = 0.90 exactly.
    priced = price(usage(1, MIG_1G, 7), usage(1, MIG_3G, 1))
    assert amounts(priced) == {(1, "usage", 2): Decimal("2.10"), (1, "usage", 3): Decimal("0.90")}
    line = next(line for line in priced.lines if line.flavour_id == 3)
    assert line.gpu_hours == Decimal("0.4286") and line.rate == Decimal("2.100000")


SHARED = pricing.Flavour(
    id=4, name="h100-shared", product="H100-80GB", capacity=8, cluster_id=1, shared=True
)


def test_a_share_pays_its_thousandths_of_a_gpu_hour_exactly() -> None:
    # a 470-milli pod for 10 hours holds 4.7 GPU-hours: 4.7 x 2.10 = 9.87; borrowed
    # thousandths pay on demand: 130 milli for 3 hours = 0.39 GPU-hours x 3.50 = 1.365,
    # 1.36 half-even
    flavours = {**FLAVOURS, SHARED.id: SHARED}
    priced = price(
        usage(1, SHARED, 470 * 10),
        usage(2, SHARED, 130 * 3, borrowed_hours=130 * 3),
        flavours=flavours,
    )
    assert amounts(priced) == {
        (1, "usage", 4): Decimal("9.87"),
        (2, "on_demand", 4): Decimal("1.36"),
    }
    line = next(line for line in priced.lines if line.tenant_id == 1)
    assert line.gpu_hours == Decimal("4.7000") and line.rate == Decimal("2.100000")
    assert SHARED.fraction == Fraction(1, 1000)


def test_a_profile_with_its_own_price_is_priced_per_instance_hour() -> None:
    own = pricing.RateCard(
        id=11,
        currency="EUR",
        reserved_price=Decimal("0.45"),
        on_demand_price=Decimal("0.70"),
        valid_from=FEB,
        product="H100-80GB",
        mig_profile="1g.10gb",
    )
    priced = price(usage(1, MIG_1G, 10), usage(1, MIG_3G, 7), cards=[CARD, own])
    # 10 x 0.45 = 4.50 (the profile's card wins); 3g still by fraction: 7 x 3/7 x 2.10 = 6.30.
    assert amounts(priced) == {(1, "usage", 2): Decimal("4.50"), (1, "usage", 3): Decimal("6.30")}
    per_gpu_hour = next(line.rate for line in priced.lines if line.flavour_id == 2)
    assert per_gpu_hour == Decimal("3.150000")  # 0.45 per 1/7 GPU


def test_borrowed_hours_pay_on_demand_and_priority_multipliers_apply() -> None:
    priced = price(usage(1, H100, 10, borrowed_hours=4, priority_class="spot"))
    assert amounts(priced) == {
        (1, "usage", 1): Decimal("7.56"),  # 6 h x 2.10 x 0.6
        (1, "on_demand", 1): Decimal("8.40"),  # 4 h x 3.50 x 0.6
    }
    assert {line.multiplier for line in priced.lines} == {Decimal("0.600")}


def test_a_class_multiplier_applies_when_the_card_names_none() -> None:
    priced = price(
        usage(1, H100, 1, priority_class="urgent"), default_multipliers={"urgent": Decimal("1.5")}
    )
    assert amounts(priced) == {(1, "usage", 1): Decimal("3.15")}


def test_reserved_charging_bills_the_guarantee_used_or_not_and_covers_own_usage() -> None:
    # 2 H100 reserved for February (672 h) = 1344 GPU-hours x 2.10 = 2822.40; 100 h used
    # within it are covered; 5 h borrowed are charged on demand (17.50).
    priced = price(
        usage(1, H100, 100, busy_device_seconds=Decimal(50 * H)),
        usage(1, H100, 5, borrowed_hours=5, at=FEB + timedelta(days=1)),
        reservations=[pricing.Reservation(tenant_id=1, flavour_id=1, devices=2)],
    )
    assert amounts(priced) == {
        (1, "reserved_capacity", 1): Decimal("2822.40"),
        (1, "on_demand", 1): Decimal("17.50"),
    }
    reserved = next(line for line in priced.lines if line.kind == Kind.RESERVED_CAPACITY)
    assert reserved.gpu_hours == Decimal("1344.0000") and reserved.gpu_hours_busy == Decimal(
        "50.0000"
    )


def test_idle_capacity_is_one_line_or_spread_by_guarantee_to_the_cent() -> None:
    # 8 H100 x 672 h = 5376 GPU-hours; 376 held -> 5000 idle x 2.10 = 10500.00.
    held = usage(1, H100, 376)
    line = price(held, idle_mode=IdleMode.LINE, flavours={1: H100})
    assert amounts(line)[(None, "idle", 1)] == Decimal("10500.00")
    spread = price(
        held,
        idle_mode=IdleMode.SPREAD,
        guarantees={(1, 1): 1, (2, 1): 1, (3, 1): 1},
        flavours={1: H100},
    )
    shares = {k: v for k, v in amounts(spread).items() if k[1] == "idle_share"}
    # 10500 / 3 = 3500 each, exactly.
    assert shares == {(t, "idle_share", 1): Decimal("3500.00") for t in (1, 2, 3)}
    uneven = price(
        usage(1, H100, Fraction(1, 3)),
        idle_mode=IdleMode.SPREAD,
        guarantees={(1, 1): 2, (2, 1): 1},
        flavours={1: H100},
    )
    parts = [line.amount for line in uneven.lines if line.kind == Kind.IDLE_SHARE]
    exact_idle = (Fraction(8 * 672) - Fraction(1, 3)) * Fraction("2.10")
    # 5375 2/3 GPU-hours x 2.10 = 11288.90; 2/3 and 1/3 of it, the odd cent to the larger
    # remainder.
    assert sum(parts) == pricing.round_half_even(exact_idle) == Decimal("11288.90")
    assert parts == [Decimal("7525.93"), Decimal("3762.97")]


def test_unreserved_idle_never_double_charges_a_reservation() -> None:
    # Tenant 1 reserves all 8 GPUs and uses 10 h: nothing is idle in the platform's eyes.
    priced = price(
        usage(1, H100, 10),
        reservations=[pricing.Reservation(tenant_id=1, flavour_id=1, devices=8)],
        idle_mode=IdleMode.LINE,
    )
    assert not [line for line in priced.lines if line.kind == Kind.IDLE and line.flavour_id == 1]


def test_a_price_change_mid_month_splits_the_line_by_card() -> None:
    old = pricing.RateCard(
        id=20,
        currency="EUR",
        reserved_price=Decimal("2"),
        on_demand_price=Decimal("3"),
        valid_from=FEB - timedelta(days=31),
        valid_to=FEB + timedelta(days=15),
    )
    new = pricing.RateCard(
        id=21,
        currency="EUR",
        reserved_price=Decimal("1"),
        on_demand_price=Decimal("3"),
        valid_from=FEB + timedelta(days=15),
    )
    priced = price(
        usage(1, H100, 10, at=FEB + timedelta(days=1)),
        usage(1, H100, 10, at=FEB + timedelta(days=20)),
        cards=[old, new],
    )
    assert sorted((line.rate_card_id, line.amount) for line in priced.lines) == [
        (20, Decimal("20.00")),
        (21, Decimal("10.00")),
    ]


def test_late_usage_of_a_closed_month_is_its_own_line() -> None:
    priced = price(usage(1, H100, 2, usage_period="2026-01", at=FEB - timedelta(days=2)))
    (line,) = priced.lines
    assert (line.kind, line.usage_period, line.amount) == (
        Kind.LATE_USAGE,
        "2026-01",
        Decimal("4.20"),
    )


def test_usage_without_a_rate_card_shows_at_zero_with_a_warning() -> None:
    other = pricing.Flavour(id=9, name="l4", product="L4", capacity=0)
    priced = price(usage(1, other, 3), flavours={**FLAVOURS, 9: other})
    assert priced.lines[0].amount == Decimal("0.00") and priced.lines[0].rate_card_id is None
    assert priced.warnings == ["no rate card covers l4; its usage is shown at a rate of 0"]


def test_the_most_specific_card_wins() -> None:
    everything = pricing.RateCard(
        id=30,
        currency="EUR",
        reserved_price=Decimal("9"),
        on_demand_price=Decimal("9"),
        valid_from=FEB,
    )
    flavour_card = pricing.RateCard(
        id=31,
        currency="EUR",
        reserved_price=Decimal("1"),
        on_demand_price=Decimal("1"),
        valid_from=FEB,
        flavour_id=H100.id,
    )
    assert pricing.resolve_card([everything, CARD, flavour_card], H100, FEB) is flavour_card
    assert pricing.resolve_card([everything, CARD], MIG_1G, FEB) is CARD
    assert pricing.resolve_card([everything], MIG_1G, FEB) is everything
    assert pricing.resolve_card([CARD], H100, FEB - timedelta(days=60)) is None


def test_half_even_rounding_to_cents() -> None:
    assert pricing.round_half_even(Fraction(1, 200)) == Decimal("0.00")  # 0.005 -> even 0.00
    assert pricing.round_half_even(Fraction(3, 200)) == Decimal("0.02")  # 0.015 -> 0.02
    assert pricing.round_half_even(Fraction(-5, 200)) == Decimal("-0.02")  # -0.025 -> -0.02
    assert pricing.round_half_even(Fraction(2, 3)) == Decimal("0.67")


# --- properties ------------------------------------------------------------------------

prices = st.decimals(min_value=Decimal("0"), max_value=Decimal("500"), places=4)
usages = st.lists(
    st.builds(
        lambda tenant, flavour, seconds, borrowed_share, cls, day: pricing.Usage(
            tenant_id=tenant,
            flavour_id=flavour,
            segment_start=FEB + timedelta(days=day),
            device_seconds=seconds,
            borrowed_device_seconds=seconds * borrowed_share // 4,
            priority_class=cls,
        ),
        st.integers(1, 5),
        st.sampled_from([1, 2, 3]),
        st.integers(0, 20_000_000),
        st.integers(0, 4),
        st.sampled_from(["", "spot", "urgent"]),
        st.integers(0, 27),
    ),
    max_size=25,
)


def _walk(value: Any) -> list[Any]:
    if isinstance(value, pricing.ChargeLine):
        return [getattr(value, f) for f in value.__dataclass_fields__]
    return [value]


@settings(max_examples=150, deadline=None)
@given(
    items=usages,
    reserved=prices,
    on_demand=prices,
    multiplier=st.decimals(min_value=Decimal("0"), max_value=Decimal("3"), places=3),
    idle=st.sampled_from(list(IdleMode)),
    guarantees=st.dictionaries(
        st.tuples(st.integers(1, 5), st.sampled_from([1, 2, 3])), st.integers(1, 8), max_size=6
    ),
    reserve=st.booleans(),
)
def test_totals_are_exact_sums_of_cent_rounded_lines_without_floats(
    items: list[pricing.Usage],
    reserved: Decimal,
    on_demand: Decimal,
    multiplier: Decimal,
    idle: IdleMode,
    guarantees: dict[tuple[int, int], int],
    reserve: bool,
) -> None:
    card = pricing.RateCard(
        id=1,
        currency="EUR",
        reserved_price=reserved,
        on_demand_price=on_demand,
        valid_from=FEB - timedelta(days=1),
        multipliers={"spot": multiplier},
    )
    reservations = (
        [pricing.Reservation(t, f, units) for (t, f), units in guarantees.items()]
        if reserve
        else []
    )
    priced = price(
        *items, cards=[card], idle_mode=idle, guarantees=guarantees, reservations=reservations
    )
    for line in priced.lines:
        for value in _walk(line):
            assert not isinstance(value, float)
        assert line.amount == line.amount.quantize(Decimal("0.01"))
        assert line.amount.as_tuple().exponent == -2
    totals = priced.totals()
    for tenant, total in totals.items():
        assert total == sum(
            (line.amount for line in priced.lines if line.tenant_id == tenant), Decimal("0.00")
        )
    assert sum(totals.values(), Decimal(0)) == sum(
        (line.amount for line in priced.lines), Decimal(0)
    )


@settings(max_examples=200, deadline=None)
@given(numerator=st.integers(-(10**12), 10**12), denominator=st.integers(1, 10**6))
def test_rounding_agrees_with_decimal_half_even_on_exact_values(
    numerator: int, denominator: int
) -> None:
    value = Fraction(numerator, denominator)
    # Scale so the exact value is representable, then let Decimal round it half-even.
    exact = (
        Decimal(numerator) / Decimal(denominator)
        if denominator in (1, 2, 4, 5, 8, 10, 16, 20, 25, 40, 50, 100, 1000)
        else None
    )
    rounded = pricing.round_half_even(value)
    assert abs(Fraction(rounded) - value) <= Fraction(1, 200)
    if exact is not None:
        assert rounded == exact.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)


@settings(max_examples=200, deadline=None)
@given(
    total=st.decimals(min_value=Decimal("-100000"), max_value=Decimal("100000"), places=2),
    weights=st.lists(st.integers(0, 1000), min_size=1, max_size=12),
)
def test_spreading_keeps_every_cent(total: Decimal, weights: list[int]) -> None:
    parts = pricing.split_exactly(total, [Fraction(w) for w in weights])
    if sum(weights) == 0:
        assert all(p == 0 for p in parts)
    else:
        assert sum(parts) == total
        assert all(
            abs(Fraction(p) - Fraction(total) * w / sum(weights)) < Fraction(1, 100)
            for p, w in zip(parts, weights, strict=True)
        )
