"""The living demo's work: the Philly trace mapped onto the demo's teams and flavours,
and the virtual clock that says what is due between two virtual instants."""

from __future__ import annotations

import pytest

from scheduler_bridge.demo.trace import (
    DAY_S,
    Arrival,
    DemoFlavours,
    DemoTrace,
    Run,
    VirtualClock,
    busy_ratio,
    due_finishes,
    hour_pieces,
    map_trace,
)
from scheduler_bridge.replay.trace import PHILLY_JOBS, TraceJob, read_jobs

TEAMS = ["vision", "nlp", "speech", "search", "recsys", "ads", "infra", "data"]
FLAVOURS = DemoFlavours(big="h100", small="a100", slice="a100-1g")
RESEARCH = frozenset({"vision", "nlp", "speech"})
CEILINGS = {(team, f): 21 if team in RESEARCH else 6 for team in TEAMS for f in ("h100", "a100")}
CEILINGS |= {(team, "a100-1g"): 16 for team in TEAMS}
MONDAY = 1_510_531_200.0  # 2017-11-13 00:00 UTC, the trace's first day


def mapped(jobs: list[TraceJob] | None = None) -> DemoTrace:
    return map_trace(
        jobs if jobs is not None else read_jobs(PHILLY_JOBS),
        teams=TEAMS,
        flavours=FLAVOURS,
        big_teams=RESEARCH,
        ceilings=CEILINGS,
    )


def job(gpus: int, run_time_s: float = 7200.0, tenant: str = "vc1", at: float = 60.0) -> TraceJob:
    return TraceJob(
        id="j0", tenant=tenant, submitted_at=MONDAY + at, run_time_s=run_time_s, gpus=gpus
    )


def test_the_twelve_virtual_clusters_land_on_the_eight_teams_busiest_first() -> None:
    trace = mapped()
    assert len(trace.vc_teams) == 12 and set(trace.vc_teams.values()) == set(TEAMS)
    assert trace.vc_teams["ee9e8c"] == "vision"  # the busiest virtual cluster
    assert trace.span_s == 14 * DAY_S
    assert {j.team for j in trace.jobs} == set(TEAMS)


def test_every_job_fits_its_team_and_runs_in_shapes_people_run() -> None:
    for demo_job in mapped().jobs:
        assert demo_job.gpus <= CEILINGS[(demo_job.team, demo_job.flavour)]
        if demo_job.count > 1:
            assert demo_job.gpus_per_pod == 8
        else:
            assert demo_job.gpus_per_pod in (1, 2, 4, 8)
        assert demo_job.clipped == (demo_job.gpus < demo_job.trace_gpus)


def test_a_job_larger_than_its_team_may_hold_is_clipped_not_dropped() -> None:
    (two_nodes,) = mapped([job(16, tenant="vc1")]).jobs
    assert two_nodes.team == "vision" and two_nodes.flavour == "h100"
    assert (two_nodes.count, two_nodes.gpus_per_pod) == (2, 8) and not two_nodes.clipped
    ceilings = {**CEILINGS, ("vision", "h100"): 6}
    (clipped,) = map_trace(
        [job(16)], teams=TEAMS, flavours=FLAVOURS, big_teams=RESEARCH, ceilings=ceilings
    ).jobs
    assert (clipped.count, clipped.gpus_per_pod, clipped.trace_gpus) == (1, 4, 16)


def test_short_single_gpu_jobs_get_a_mig_slice_big_research_jobs_an_h100() -> None:
    (short,) = mapped([job(1, run_time_s=600)]).jobs
    (long,) = mapped([job(1, run_time_s=7200)]).jobs
    (big,) = mapped([job(8)]).jobs
    assert (short.flavour, long.flavour, big.flavour) == ("a100-1g", "a100", "h100")


def test_arrivals_are_those_due_between_two_instants_and_the_trace_repeats() -> None:
    trace = mapped()
    first = trace.jobs[0]
    assert trace.arrivals(0, first.offset_s - 1) == []
    assert trace.arrivals(first.offset_s - 1, first.offset_s)[0] == Arrival(
        first, 0, first.offset_s
    )
    again = trace.arrivals(trace.span_s + first.offset_s - 1, trace.span_s + first.offset_s)
    assert again[0].job == first and again[0].name == f"philly-{first.trace_id}-1"
    # split anywhere, the same arrivals: nothing twice, nothing lost
    whole = trace.arrivals(1000.0, 3 * DAY_S)
    halves = trace.arrivals(1000.0, 1.5 * DAY_S) + trace.arrivals(1.5 * DAY_S, 3 * DAY_S)
    assert whole == halves and len({a.name for a in whole}) == len(whole)


def test_the_same_start_gives_the_same_events() -> None:
    one, two = mapped(), mapped()
    assert one == two
    clock_a, clock_b = VirtualClock(5 * DAY_S, speed=60), VirtualClock(5 * DAY_S, speed=60)
    for real in (15, 15, 30, 7.5):
        a, b = clock_a.advance(real), clock_b.advance(real)
        assert a == b and one.arrivals(*a) == two.arrivals(*b)
    assert busy_ratio("philly-j4-0") == busy_ratio("philly-j4-0")


def test_the_clock_moves_speed_simulated_seconds_per_real_second() -> None:
    clock = VirtualClock(0.0, speed=60)
    assert clock.advance(60) == (0.0, 3600.0)  # a real minute, a simulated hour
    assert clock.advance(-5) == (3600.0, 3600.0)  # never backwards
    with pytest.raises(ValueError, match="positive"):
        VirtualClock(0.0, speed=0)


def test_runs_finish_once_their_run_time_has_elapsed() -> None:
    runs = [Run(1, 0.0, 3600.0), Run(2, 600.0, 600.0), Run(3, 0.0, 7200.0)]
    assert [r.workload_id for r in due_finishes(runs, 3600.0)] == [2, 1]
    assert due_finishes(runs, 1000.0) == []


def test_held_time_is_split_at_virtual_hour_boundaries() -> None:
    assert hour_pieces(3000.0, 7300.0) == [(0, 600.0), (1, 3600.0), (2, 100.0)]
    assert hour_pieces(10.0, 10.0) == []


def test_one_job_in_about_eight_keeps_its_gpus_nearly_idle() -> None:
    ratios = [busy_ratio(f"philly-j{i}-0") for i in range(800)]
    idle = [r for r in ratios if r < 0.05]
    assert 60 < len(idle) < 140 and all(0.01 <= r <= 0.95 for r in ratios)
