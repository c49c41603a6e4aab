"""The allocation core alone (no database): lines split over their usage to the cent,
lines without usage kept with their tenant, idle capacity shared by each policy or kept
whole, readers' scope, efficiency from measured usage only, and the trend."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from billing.reporting.allocation_core import (
    IDLE,
    UNALLOCATED,
    AllocationInput,
    IdlePolicy,
    Line,
    Piece,
    allocate,
    totals,
    with_trend,
)

H100, MIG = 1, 2
SLUGS = {10: "vision", 20: "speech"}
FLAVOURS = {H100: "h100", MIG: "mig-1g"}


def piece(tenant: int, namespace: str, seconds: int, **kw: Any) -> Piece:
    values = {"namespace": namespace, **kw.pop("values", {})}
    return Piece(
        tenant_id=tenant,
        flavour_id=kw.pop("flavour", H100),
        kind=kw.pop("kind", "usage"),
        priority_class=kw.pop("priority", ""),
        card_id=kw.pop("card", 7),
        usage_period="",
        device_seconds=seconds,
        busy_device_seconds=kw.pop("busy", None),
        gpu_fraction=kw.pop("fraction", Fraction(1)),
        values=values,
    )


def line(tenant: int | None, amount: str, kind: str = "usage", flavour: int | None = H100) -> Line:
    return Line(tenant, kind, flavour, "", 7 if flavour else None, "", Decimal(amount))


def run(lines: list[Line], pieces: list[Piece], *aggregate: str, **kw: Any) -> dict[Any, Any]:
    rows = allocate(
        AllocationInput(
            lines=lines,
            pieces=pieces,
            aggregate=aggregate,
            idle_policy=kw.pop("idle", IdlePolicy.USAGE),
            tenant_slugs=SLUGS,
            flavour_names=FLAVOURS,
            **kw,
        )
    )
    return {row.keys if len(row.keys) > 1 else row.keys[0]: row for row in rows}


def test_a_line_is_split_over_its_usage_to_the_cent() -> None:
    pieces = [piece(10, "a", 3600), piece(10, "b", 3600), piece(10, "c", 3600)]
    rows = run([line(10, "10.00")], pieces, "namespace")
    assert sorted(r.cost for r in rows.values()) == [
        Decimal("3.33"),
        Decimal("3.33"),
        Decimal("3.34"),
    ]
    assert sum(r.cost for r in rows.values()) == Decimal("10.00")


def test_lines_without_usage_stay_with_their_tenant_unallocated() -> None:
    rows = run(
        [line(10, "5.00"), line(10, "-1.50", "adjustment", None)],
        [piece(10, "a", 3600)],
        "tenant",
        "namespace",
        "flavour",
    )
    assert rows[("vision", "a", "h100")].cost == Decimal("5.00")
    assert rows[("vision", UNALLOCATED, UNALLOCATED)].cost == Decimal("-1.50")


@pytest.mark.parametrize(
    ("policy", "vision", "speech"),
    [
        (IdlePolicy.EVEN, "50.00", "50.01"),  # a tied cent goes to the first group
        (IdlePolicy.USAGE, "75.01", "25.00"),
        (IdlePolicy.GUARANTEE, "20.00", "80.01"),
    ],
)
def test_idle_is_shared_by_policy_and_adds_up(policy: IdlePolicy, vision: str, speech: str) -> None:
    pieces = [piece(10, "a", 3 * 3600), piece(20, "b", 3600)]
    lines = [line(10, "6.00"), line(20, "2.00"), line(None, "100.01", "idle")]
    rows = run(lines, pieces, "tenant", idle=policy, guarantees={(10, H100): 1, (20, H100): 4})
    assert (rows["vision"].idle_cost, rows["speech"].idle_cost) == (
        Decimal(vision),
        Decimal(speech),
    )
    assert rows["vision"].total == rows["vision"].cost + rows["vision"].idle_cost
    assert totals(list(rows.values())).total == Decimal("108.01")


def test_idle_of_a_flavour_nobody_used_stays_on_an_idle_row() -> None:
    rows = run(
        [line(10, "6.00"), line(None, "9.00", "idle", MIG)],
        [piece(10, "a", 3600)],
        "namespace",
        "line_type",
    )
    assert rows[(IDLE, "idle")].idle_cost == Decimal("9.00")
    assert rows[("a", "in_quota")].idle_cost == Decimal("0.00")


def test_a_guarantee_nobody_used_keeps_its_idle_share_under_the_tenant() -> None:
    rows = run(
        [line(10, "6.00"), line(None, "10.00", "idle")],
        [piece(10, "a", 3600)],
        "tenant",
        "namespace",
        idle=IdlePolicy.GUARANTEE,
        guarantees={(10, H100): 1, (20, H100): 1},
    )
    assert rows[("vision", "a")].idle_cost == Decimal("5.00")
    assert rows[("speech", UNALLOCATED)].idle_cost == Decimal("5.00")


def test_shares_of_idle_on_statements_are_pooled_and_shared_again() -> None:
    lines = [
        line(10, "6.00"),
        line(10, "3.00", "idle_share"),
        line(20, "1.00", "idle_share"),
    ]
    rows = run(lines, [piece(10, "a", 3600)], "tenant")
    assert rows["vision"].idle_cost == Decimal("4.00") and rows["vision"].total == Decimal("10.00")


def test_readers_see_their_tenants_and_their_own_idle_share_as_cost() -> None:
    lines = [line(10, "6.00"), line(20, "2.00"), line(10, "3.00", "idle_share")]
    rows = run(
        lines,
        [piece(10, "a", 3600), piece(20, "b", 3600)],
        "tenant",
        visible=frozenset({10}),
        show_idle=False,
    )
    assert list(rows) == ["vision"]
    assert rows["vision"].cost == Decimal("9.00") and rows["vision"].idle_cost is None


def test_efficiency_counts_only_measured_usage() -> None:
    pieces = [
        piece(10, "a", 7200, busy=Fraction(1800), fraction=Fraction(1, 7), kind="usage"),
        piece(10, "a", 3600, priority="spot"),
    ]
    row = run([line(10, "1.00")], pieces, "namespace")["a"]
    assert row.efficiency == Decimal("0.2500")
    assert row.gpu_hours_allocated == Decimal("1.2857")
    assert run([line(10, "1.00")], [piece(10, "a", 3600)], "namespace")["a"].efficiency is None


def test_the_trend_keeps_groups_that_only_the_previous_window_had() -> None:
    now = run([line(10, "6.00")], [piece(10, "a", 3600)], "namespace")
    before = run(
        [line(10, "4.00"), line(20, "2.00")], [piece(10, "a", 1), piece(20, "b", 1)], "namespace"
    )
    trend = {r.keys[0]: r for r in with_trend(list(now.values()), list(before.values()))}
    assert (trend["a"].previous_total, trend["a"].change) == (Decimal("4.00"), Decimal("2.00"))
    assert (trend["b"].total, trend["b"].change) == (Decimal("0.00"), Decimal("-2.00"))


def test_an_unknown_dimension_is_refused() -> None:
    with pytest.raises(ValueError, match="colour"):
        run([], [], "colour")
