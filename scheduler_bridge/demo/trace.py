"""The living demo's work: the shipped Philly trace mapped onto the demo organisation and
cluster, and the virtual clock that says what is due between two virtual instants.

Pure: no Django. The service that applies it is ``scheduler_bridge.demo.clock``; the
demo's month of history replays the same mapping (``scheduler_bridge.demo.replay``).

The mapping (docs/portal.md, "The living demo"):

* every ``KEEP_EVERY``-th trace job is kept (the trace's 12 virtual clusters ran on some
  2,800 GPUs; the demo cluster has 68 whole GPUs and MIG slices);
* the trace's virtual clusters, busiest first (GPU time), go to the teams in turn
  (``teams`` in the organisation's order), so the two busiest land on the two teams
  with the largest guarantees and four teams take two virtual clusters each;
* a single-GPU job shorter than ``SLICE_BELOW_S`` runs on a MIG slice; a job of
  ``BIG_GPUS`` or more of a team in ``big_teams`` on whole big GPUs (H100: NVLink
  nodes); everything else on whole small GPUs (A100);
* a job larger than its team could ever hold of its flavour (guarantee plus borrow
  limit: ``ceilings``) is clipped to fit; sizes stay shapes people run: one pod of a
  power of two up to a node, whole nodes above. Nothing is dropped.

Virtual time is seconds since ``anchor``, a Monday 00:00 UTC, so the trace (which starts
on a Monday) keeps its weekdays. The trace repeats every ``span_s`` (two weeks): lap L
replays it shifted by L spans, its jobs named ``philly-<job>-<L>``.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from scheduler_bridge.replay.trace import TraceJob

HOUR_S = 3600.0
DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
KEEP_EVERY = 5
SLICE_BELOW_S = HOUR_S
BIG_GPUS = 8
GPUS_PER_NODE = 8
# annotations a demo workload carries: what the clock needs to finish it, and its origin
RUN_TIME_ANNOTATION = "demo.tidegate.io/run-time-seconds"
VIRTUAL_SUBMIT_ANNOTATION = "demo.tidegate.io/virtual-submit-seconds"
TRACE_JOB_ANNOTATION = "demo.tidegate.io/trace-job"


@dataclass(frozen=True, slots=True)
class DemoFlavours:
    """Flavour names of the demo cluster the trace's jobs are put on."""

    big: str  # whole H100
    small: str  # whole A100
    slice: str  # a 1g.10gb MIG slice


@dataclass(frozen=True, slots=True)
class DemoJob:
    """A trace job as the demo runs it: ``offset_s`` after the trace's first Monday."""

    trace_id: str
    team: str
    flavour: str
    count: int
    gpus_per_pod: int
    offset_s: float
    run_time_s: float
    trace_gpus: int

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_pod

    @property
    def clipped(self) -> bool:
        return self.gpus < self.trace_gpus


@dataclass(frozen=True, slots=True)
class Arrival:
    """One submission of a trace job, in lap ``lap``, at virtual instant ``at``."""

    job: DemoJob
    lap: int
    at: float

    @property
    def name(self) -> str:
        return f"philly-{self.job.trace_id}-{self.lap}"


@dataclass(frozen=True)
class DemoTrace:
    """The mapped trace: jobs in submit order, repeating every ``span_s``."""

    jobs: tuple[DemoJob, ...]
    span_s: float
    vc_teams: Mapping[str, str] = field(default_factory=dict)

    def arrivals(self, start: float, end: float) -> list[Arrival]:
        """Submissions due in the virtual interval (start, end], in order."""
        if end <= start or not self.jobs:
            return []
        due = []
        for lap in range(
            max(0, math.floor(start / self.span_s)), math.floor(end / self.span_s) + 1
        ):
            base = lap * self.span_s
            for job in self.jobs:
                at = base + job.offset_s
                if start < at <= end:
                    due.append(Arrival(job, lap, at))
        return due


def monday_before(moment: datetime) -> datetime:
    """00:00 UTC of the Monday on or before ``moment``: virtual time's origin."""
    day = moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


def map_trace(
    jobs: Sequence[TraceJob],
    *,
    teams: Sequence[str],
    flavours: DemoFlavours,
    big_teams: frozenset[str],
    ceilings: Mapping[tuple[str, str], int],
    keep_every: int = KEEP_EVERY,
) -> DemoTrace:
    """The demo's jobs from ``jobs`` (see the module docstring). ``ceilings`` maps
    (team, flavour) to the most GPUs the team could ever hold of it."""
    if not jobs or not teams:
        return DemoTrace((), 14 * DAY_S)
    first = datetime.fromtimestamp(jobs[0].submitted_at, UTC)
    origin = monday_before(first).timestamp()
    last = max(j.submitted_at for j in jobs)
    span = math.ceil((last - origin + 1) / WEEK_S) * WEEK_S
    load: dict[str, float] = defaultdict(float)
    for job in jobs:
        load[job.tenant] += job.gpus * job.run_time_s
    ranked = sorted(load, key=lambda vc: (-load[vc], vc))
    vc_teams = {vc: teams[i % len(teams)] for i, vc in enumerate(ranked)}
    mapped = []
    for index, job in enumerate(jobs):
        if index % keep_every:
            continue
        team = vc_teams[job.tenant]
        flavour = _flavour(job, team, flavours, big_teams)
        count, per_pod = _shape(job.gpus, ceilings.get((team, flavour), job.gpus))
        if count == 0:
            continue  # the team may hold none of this flavour
        mapped.append(
            DemoJob(
                trace_id=job.id,
                team=team,
                flavour=flavour,
                count=count,
                gpus_per_pod=per_pod,
                offset_s=round(job.submitted_at - origin),
                run_time_s=round(job.run_time_s),
                trace_gpus=job.gpus,
            )
        )
    return DemoTrace(tuple(mapped), span, vc_teams)


def _flavour(job: TraceJob, team: str, flavours: DemoFlavours, big_teams: frozenset[str]) -> str:
    if job.gpus == 1 and job.run_time_s < SLICE_BELOW_S:
        return flavours.slice
    if job.gpus >= BIG_GPUS and team in big_teams:
        return flavours.big
    return flavours.small


def _shape(gpus: int, ceiling: int) -> tuple[int, int]:
    """(pods, GPUs per pod) of a job of ``gpus`` clipped to ``ceiling``."""
    size = min(gpus, ceiling)
    if size >= GPUS_PER_NODE:
        return size // GPUS_PER_NODE, GPUS_PER_NODE
    if size <= 0:
        return 0, 0
    return 1, 1 << (size.bit_length() - 1)


def busy_ratio(name: str) -> float:
    """How busy a job keeps its GPUs, the same every time for one name (the trace has
    no utilisation and the demo no DCGM exporter to ask): one job in eight nearly idle
    (1 to 4 %, a hung or forgotten run), the others 35 to 95 %."""
    digest = hashlib.sha256(name.encode()).digest()
    spread = int.from_bytes(digest[1:5], "big") / 0xFFFFFFFF
    if digest[0] % 8 == 0:
        return 0.01 + 0.03 * spread
    return 0.35 + 0.6 * spread


@dataclass(frozen=True, slots=True)
class Run:
    """A workload holding GPUs: since virtual instant ``started``, for ``run_time_s``."""

    workload_id: int
    started: float
    run_time_s: float

    @property
    def ends(self) -> float:
        return self.started + self.run_time_s


def due_finishes(runs: Sequence[Run], end: float) -> list[Run]:
    """Runs whose run time has elapsed by virtual instant ``end``, first ending first."""
    return sorted((r for r in runs if r.ends <= end), key=lambda r: (r.ends, r.workload_id))


def hour_pieces(start: float, end: float) -> list[tuple[int, float]]:
    """(hour index, seconds) of the interval [start, end) in each hour it touches."""
    return slice_pieces(start, end, HOUR_S)


def slice_pieces(start: float, end: float, size_s: float) -> list[tuple[int, float]]:
    """(slice index, seconds) of [start, end) in each slice of ``size_s`` seconds (from
    instant 0) it touches."""
    pieces = []
    moment = start
    while moment < end:
        index = math.floor(moment / size_s)
        upto = min(end, (index + 1) * size_s)
        pieces.append((index, upto - moment))
        moment = upto
    return pieces


@dataclass
class VirtualClock:
    """Virtual seconds since the anchor; moves ``speed`` virtual seconds per real one."""

    now: float
    speed: float = 60.0

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise ValueError("the clock's speed must be a positive number")

    def advance(self, real_seconds: float) -> tuple[float, float]:
        """Move on by ``real_seconds`` of real time; returns (before, after)."""
        before = self.now
        self.now = before + max(0.0, real_seconds) * self.speed
        return before, self.now
