"""The hourly borrowing rule, pure: a tenant's GPU-seconds up to its guarantee in each hour
and flavour are its own, only the excess is borrowed, attributed in reclaim order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from billing.usage.borrowing import FIRST_TAKEN_BACK, OUTSIDE_THE_QUEUE, Held, borrowed_seconds

H10 = datetime(2026, 11, 1, 10, tzinfo=UTC)
H11 = H10 + timedelta(hours=1)
VISION, SPEECH = 1, 2
H100, MIG = 10, 11


def guarantees(table: dict[tuple[int, int], int]):  # type: ignore[no-untyped-def]
    """Guarantee in GPUs per (tenant, flavour), as device-seconds of an hour."""

    def seconds(tenant: int, flavour: int, hour: datetime) -> int:
        return table.get((tenant, flavour), 0) * 3600

    return seconds


def test_a_job_alone_inside_its_teams_guarantee_borrows_nothing() -> None:
    """The demo's 05:00 on 1 November: Vision (5 H100s guaranteed) runs one 8-GPU job,
    admitted while Vision was over its guarantee: 5 of its 8 GPU-hours are Vision's own."""
    rows = [Held(VISION, H100, H10, 8 * 3600, priority=0, admitted_epoch=1.0, key="vit")]
    assert borrowed_seconds(rows, guarantees({(VISION, H100): 5})) == [3 * 3600]
    small = [Held(VISION, H100, H10, 4 * 3600, priority=0, key="vit")]
    assert borrowed_seconds(small, guarantees({(VISION, H100): 5})) == [0]


def test_the_excess_goes_to_the_work_reclaimed_first() -> None:
    """Lowest priority first, then the most recently admitted; pods outside the queue last."""
    rows = [
        Held(VISION, H100, H10, 4 * 3600, priority=100, admitted_epoch=1.0, key="prod"),
        Held(VISION, H100, H10, 2 * 3600, priority=0, admitted_epoch=1.0, key="old-spot"),
        Held(VISION, H100, H10, 2 * 3600, priority=0, admitted_epoch=2.0, key="new-spot"),
        Held(VISION, H100, H10, 3600, key="notebook", preemptible=False),  # outside the queue
    ]
    split = borrowed_seconds(rows, guarantees({(VISION, H100): 4}))
    # 9 GPU-hours held, 4 guaranteed: 5 borrowed: new-spot 2, old-spot 2, then prod 1
    assert split == [3600, 2 * 3600, 2 * 3600, 0]
    assert rows[3].priority == OUTSIDE_THE_QUEUE


def test_work_that_fills_idle_gpus_is_borrowed_first_and_unpreemptible_work_last() -> None:
    rows = [
        Held(VISION, H100, H10, 2 * 3600, priority=-5, preemptible=False, key="serving"),
        Held(VISION, H100, H10, 2 * 3600, priority=100, key="prod"),
        Held(VISION, H100, H10, 2 * 3600, priority=FIRST_TAKEN_BACK, key="filler"),
    ]
    assert borrowed_seconds(rows, guarantees({(VISION, H100): 3})) == [0, 3600, 2 * 3600]


def test_each_hour_and_flavour_and_tenant_is_netted_on_its_own() -> None:
    rows = [
        Held(VISION, H100, H10, 6 * 3600, key="a"),
        Held(VISION, H100, H11, 2 * 3600, key="a"),
        Held(VISION, MIG, H10, 3 * 3600, key="m"),
        Held(SPEECH, H100, H10, 3 * 3600, key="s"),
    ]
    table = {(VISION, H100): 4, (VISION, MIG): 7, (SPEECH, H100): 2}
    assert borrowed_seconds(rows, guarantees(table)) == [2 * 3600, 0, 0, 3600]


def test_rows_collected_late_take_only_what_the_hour_now_adds() -> None:
    """The ledger already holds 5 GPU-hours (1 borrowed) of Vision's hour; a pod found
    later adds 2: the hour's borrowed total becomes 3, so the new row carries 2."""
    late = [Held(VISION, H100, H10, 2 * 3600, key="late")]
    already = {(VISION, H100, H10): (5 * 3600, 3600)}
    assert borrowed_seconds(late, guarantees({(VISION, H100): 4}), already) == [2 * 3600]
    # inside the guarantee even with the late row: nothing borrowed
    assert borrowed_seconds(late, guarantees({(VISION, H100): 8}), already) == [0]


@given(
    st.lists(
        st.tuples(
            st.sampled_from([VISION, SPEECH]),
            st.sampled_from([H10, H11]),
            st.integers(0, 8 * 3600),
            st.integers(-5, 5),
        ),
        max_size=12,
    ),
    st.integers(0, 6),
    st.integers(0, 6),
)
def test_per_tenant_and_hour_the_borrowed_seconds_are_exactly_the_excess(
    held: list[tuple[int, datetime, int, int]], vision: int, speech: int
) -> None:
    rows = [
        Held(tenant, H100, hour, seconds, priority=priority, key=str(i))
        for i, (tenant, hour, seconds, priority) in enumerate(held)
    ]
    table = {(VISION, H100): vision, (SPEECH, H100): speech}
    split = borrowed_seconds(rows, guarantees(table))
    for row, borrowed in zip(rows, split, strict=True):
        assert 0 <= borrowed <= row.device_seconds
    for tenant in (VISION, SPEECH):
        for hour in (H10, H11):
            mine = [i for i, row in enumerate(rows) if (row.tenant_id, row.hour) == (tenant, hour)]
            total = sum(rows[i].device_seconds for i in mine)
            assert sum(split[i] for i in mine) == max(0, total - table[(tenant, H100)] * 3600)
