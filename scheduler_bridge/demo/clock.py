"""The living demo: a virtual clock that drives the simulated cluster `demo` with work
from the shipped Philly trace (mapping and clock: ``scheduler_bridge.demo.trace``).

Each step moves the clock on and applies what fell due meanwhile, through the same
services as real work: trace jobs are submitted with ``workload_submit`` (the API's
path), running work whose run time has elapsed in virtual time finishes through the
life cycle (``lifecycle.finish``, as the Job sync closes a completed Job), and an
admission cycle runs (admits, lends, reclaims). The GPUs held in each virtual hour are
handed to the registered meters (billing writes them to the ledger) once that hour is
over.

Virtual time only decides *what happens*; everything stored carries the real time it
happened at (workload transitions, audit events, ledger rows), so nothing is ever dated
in the future and the ledger only ever holds what the demo cluster could hold. A
workload's GPUs are metered for the real time it held them, in slices of
``METER_SLICE_S`` real seconds, each written once it is over: at the default speed a
trace job of ten virtual hours finishes in ten real minutes and is charged for ten
minutes, exactly what its admission and finish times on the workload page say.

The clock lives in the process that serves the demo (as the simulated cluster does). It
resumes after the latest trace job submitted (every demo workload records its virtual
submit instant); runs that were going on when the process stopped count from the
moment the new process first sees them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from scheduler_bridge import admission as engine
from scheduler_bridge.demo.replay import HeldRun, ReplayResult, replay
from scheduler_bridge.demo.trace import (
    RUN_TIME_ANNOTATION,
    TRACE_JOB_ANNOTATION,
    VIRTUAL_SUBMIT_ANNOTATION,
    Arrival,
    DemoFlavours,
    DemoTrace,
    Run,
    VirtualClock,
    busy_ratio,
    due_finishes,
    map_trace,
    slice_pieces,
)
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.replay.trace import PHILLY_JOBS, TraceJob, read_jobs
from scheduler_bridge.workloads import lifecycle
from scheduler_bridge.workloads import wording as worded
from scheduler_bridge.workloads.budget_gate import budget_gate_for
from scheduler_bridge.workloads.cycle import engine_config
from scheduler_bridge.workloads.history_trace import RecordedJob
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.services import PodSetSpec, workload_submit
from scheduler_bridge.workloads.snapshot import build_snapshot
from tenants.demo import DEMO_CLUSTER, DEPARTMENTS
from tenants.errors import Conflict, TidegateError
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# Virtual instant 0: a Monday 00:00 UTC, so the trace keeps its weekdays.
ANCHOR = datetime(2024, 1, 1, tzinfo=UTC)
DEFAULT_SPEED = 60.0  # virtual seconds per real second: an hour a minute
# the department whose teams train on H100s (the trace's jobs of 8 GPUs and more)
BIG_GPU_DEPARTMENT = "research"
TRACE_PRIORITY = "batch"


def virtual(moment: datetime) -> float:
    """The virtual instant of a real one (the history replays the trace this way)."""
    return (moment - ANCHOR).total_seconds()


METER_SLICE_S = 120  # real seconds metered per ledger row: spend moves every two minutes


@dataclass(frozen=True, slots=True)
class DemoUsage:
    """GPUs of one flavour one workload held during one slice of real time
    (``METER_SLICE_S`` seconds from ``slice_start``, a real epoch instant)."""

    workload_id: int
    tenant_id: int
    flavour_id: int
    name: str
    priority_class: str
    slice_start: int
    devices: int
    gpu_seconds: int
    busy_ratio: float


DemoMeter = Callable[[Sequence[DemoUsage]], int]
DEMO_METERS: list[DemoMeter] = []


def register_demo_meter(meter: DemoMeter) -> None:
    """Higher apps (billing) write what the demo's work held; see ``DemoUsage``."""
    if meter not in DEMO_METERS:
        DEMO_METERS.append(meter)


# --- the mapped trace ------------------------------------------------------------------


def demo_flavours(cluster: Cluster) -> DemoFlavours:
    """The whole H100, whole A100 and A100 1g.10gb flavours of the demo cluster."""
    names = {
        (f.product, f.mig_profile): f.name
        for f in Flavour.objects.filter(cluster=cluster, capacity__gt=0)
    }
    try:
        return DemoFlavours(
            big=names[("H100-80GB", "")],
            small=names[("A100-SXM4-80GB", "")],
            slice=names[("A100-SXM4-80GB", "1g.10gb")],
        )
    except KeyError as missing:
        raise LookupError(
            f"cluster {cluster.name} lacks the demo's flavour {missing}; "
            "run `manage.py seed_demo` on a fresh database"
        ) from None


def demo_trace(cluster: Cluster) -> DemoTrace:
    """The shipped trace mapped onto the demo's teams and this cluster (see scheduler_bridge/demo/trace.py)."""
    flavours = demo_flavours(cluster)
    teams = [team for _name, _cc, dept_teams in DEPARTMENTS.values() for team in dept_teams]
    ceilings = tuple(
        sorted(
            (q.tenant.slug, q.flavour.name, q.guaranteed + _borrowable(q))
            for q in Quota.objects.filter(
                flavour__cluster=cluster, tenant__slug__in=teams
            ).select_related("tenant", "flavour")
        )
    )
    return _mapped(tuple(teams), flavours, ceilings)


def _borrowable(quota: Quota) -> int:
    if quota.borrow_limit is not None:
        return quota.borrow_limit
    return quota.flavour.capacity


@functools.lru_cache(maxsize=4)
def _mapped(
    teams: tuple[str, ...], flavours: DemoFlavours, ceilings: tuple[tuple[str, str, int], ...]
) -> DemoTrace:
    return map_trace(
        read_jobs(PHILLY_JOBS),
        teams=teams,
        flavours=flavours,
        big_teams=frozenset(DEPARTMENTS[BIG_GPU_DEPARTMENT][2]),
        ceilings={(team, flavour): most for team, flavour, most in ceilings},
    )


def history_replay(cluster: Cluster, start: datetime, end: datetime) -> ReplayResult:
    """The mapped trace from ``start`` to ``end`` (real instants) through the admission
    simulator on this cluster's tenants, quotas and nodes, with the live engine's
    configuration. Work arriving in the day before ``start`` is replayed too, so the
    cluster is already busy when the history begins."""
    snapshot = build_snapshot(cluster, now=end)
    trace = demo_trace(cluster)
    warm_up = virtual(start) - 86_400.0
    arrivals = tuple(trace.arrivals(warm_up, virtual(end)))
    nodes = tuple(engine.Node(n.name, n.capacity, None, n.domain) for n in snapshot.nodes)
    config = engine_config()
    # the same inputs give the same history: seeding twice in one process replays once
    key = repr((start, end, hash(trace.jobs), snapshot.tenants, snapshot.quotas, nodes, config))
    if key not in _REPLAYED:
        _REPLAYED.clear()
        _REPLAYED[key] = replay(
            arrivals,
            anchor=ANCHOR.timestamp(),
            end=end.timestamp(),
            tenants=snapshot.tenants,
            flavours=snapshot.flavours,
            quotas=snapshot.quotas,
            nodes=nodes,
            config=config,
        )
    return _REPLAYED[key]


_REPLAYED: dict[str, ReplayResult] = {}


# --- the clock -------------------------------------------------------------------------


@dataclass
class _Held:
    devices: int
    seconds: float = 0.0


@dataclass
class DemoClock:
    """The live clock of one cluster and what it remembers between steps: when each run
    began in virtual time, the real instant the clock stands at, and the GPU-seconds of
    slices of real time not over yet."""

    cluster: Cluster
    trace: DemoTrace
    clock: VirtualClock
    real: datetime = field(default_factory=timezone.now)
    # virtual instant the opening act counts from (when the demo was seeded); None: none
    opening_at: float | None = None
    # workload id -> (real admission instant identifying the run, the run in virtual time)
    runs: dict[int, tuple[datetime | None, Run]] = field(default_factory=dict)
    # slice index (real epoch // METER_SLICE_S) -> (workload id, flavour id) -> held
    slices: dict[int, dict[tuple[int, int], _Held]] = field(default_factory=dict)

    @property
    def now(self) -> float:
        return self.clock.now


@dataclass
class ClockStep:
    """What one step did: virtual interval, submitted and finished workload ids,
    ledger rows the meters wrote."""

    start: float
    end: float
    submitted: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    metered: int = 0


def demo_clock_start(
    cluster: Cluster, *, speed: float = DEFAULT_SPEED, at: datetime | None = None
) -> DemoClock:
    """A clock for ``cluster``, resuming after the latest demo work submitted, else at
    the real instant ``at`` (now) - where the seeded history ends."""
    submitted = _virtual_submits(cluster)
    real = at or timezone.now()
    start = max(submitted, default=virtual(real))
    clock = DemoClock(cluster, demo_trace(cluster), VirtualClock(start, speed), real)
    clock.opening_at = min(submitted, default=start)
    _observe(clock)
    return clock


def demo_clock_step(clock: DemoClock, seconds: float) -> ClockStep:
    """Move ``clock`` on by ``seconds`` of virtual time: finish work whose run time has
    elapsed, submit the trace work due, meter the slices of real time that ended, then
    run an admission cycle and note which work started running. A step whose transaction
    fails stores nothing and leaves the clock where it was: the next step starts from
    there, and none of the stretch's work is lost. A meter that fails keeps the slices it
    was given for the next step (the ledger skips rows it already holds)."""
    from scheduler_bridge import tasks

    start, end = clock.clock.now, clock.clock.now + max(0.0, seconds)
    step = ClockStep(start, end)
    before = _Remembered.of(clock)
    try:
        with transaction.atomic():  # one admission cycle after commit, however much changed
            _hold_until(clock, start, end)
            step.finished = _finish_due(clock, end)
            step.submitted = _submit_due(clock, start, end, step.refused)
    except BaseException:
        # nothing of the step was stored: the clock stays where it was, so the next
        # step submits, finishes and meters this stretch again (none of it is lost)
        before.restore(clock)
        raise
    clock.clock.now = end
    try:
        step.metered = _meter_ended_slices(clock)
    except Exception:  # the ledger's slices stay with the clock for the next step
        logger.exception("demo usage of cluster %s not metered yet", clock.cluster.pk)
    tasks.jobs_sync(clock.cluster.pk)  # Job sync, then an admission cycle
    _observe(clock)
    return step


@dataclass(frozen=True)
class _Remembered:
    """What a step changes of its clock before its transaction commits."""

    real: datetime
    runs: dict[int, tuple[datetime | None, Run]]
    slices: dict[int, dict[tuple[int, int], _Held]]

    @classmethod
    def of(cls, clock: DemoClock) -> _Remembered:
        slices = {
            index: {key: replace(held) for key, held in held_by.items()}
            for index, held_by in clock.slices.items()
        }
        return cls(clock.real, dict(clock.runs), slices)

    def restore(self, clock: DemoClock) -> None:
        clock.real, clock.runs, clock.slices = self.real, self.runs, self.slices


def demo_clock_advance(clock: DemoClock, real_seconds: float) -> ClockStep:
    """One step of ``real_seconds`` of real time at the clock's speed (the ticker's)."""
    return demo_clock_step(clock, max(0.0, real_seconds) * clock.clock.speed)


# Work a visitor submits to the demo cluster (through the API or the portal) declares no
# trace run time: it runs its time limit if it has one, else this long, then finishes and
# is charged like the trace's work.
SUBMITTED_RUN_S = 2 * 3600.0


def _active(cluster: Cluster) -> list[Workload]:
    """Admitted and running work of the demo cluster, the trace's and anybody's."""
    return list(
        Workload.objects.filter(cluster=cluster, state__in=Workload.ACTIVE_STATES)
        .select_related("flavour", "priority_class")
        .order_by("pk")
    )


def run_time_of(workload: Workload) -> float:
    """Virtual seconds a demo workload runs once admitted (see SUBMITTED_RUN_S)."""
    declared = workload.annotations.get(RUN_TIME_ANNOTATION)
    if declared is not None:
        return float(declared)
    return float(workload.max_run_time_s or SUBMITTED_RUN_S)


def _observe(clock: DemoClock) -> None:
    """Note runs that began since the last look (from now, in virtual time) and forget
    those that ended (finished, cancelled, preempted)."""
    seen = {}
    for workload in _active(clock.cluster):
        known = clock.runs.get(workload.pk)
        if known is not None and known[0] == workload.admitted_at:
            seen[workload.pk] = known
            continue
        seen[workload.pk] = (
            workload.admitted_at,
            Run(workload.pk, clock.now, run_time_of(workload)),
        )
    clock.runs = seen


def _hold_until(clock: DemoClock, start: float, end: float) -> None:
    """Count the GPU-seconds each running demo workload held in the virtual interval
    (start, end], in the real time it took (the step moves the clock's real instant on
    by its length over the speed)."""
    speed = clock.clock.speed
    real_start = clock.real.timestamp()
    clock.real = datetime.fromtimestamp(real_start + (end - start) / speed, UTC)
    for workload in _active(clock.cluster):
        known = clock.runs.get(workload.pk)
        if known is None or known[0] != workload.admitted_at or workload.flavour is None:
            continue
        run = known[1]
        lo, hi = max(start, run.started), min(end, run.ends)
        if hi <= lo:
            continue
        real_lo = real_start + (lo - start) / speed
        real_hi = real_start + (hi - start) / speed
        key = (workload.pk, workload.flavour.pk)
        for index, seconds in slice_pieces(real_lo, real_hi, METER_SLICE_S):
            held = clock.slices.setdefault(index, {}).setdefault(key, _Held(workload.gpus))
            held.devices = max(held.devices, workload.gpus)  # elastic work grows
            held.seconds += seconds * workload.gpus


def _finish_due(clock: DemoClock, end: float) -> list[int]:
    finished = []
    due = due_finishes([run for _at, run in clock.runs.values()], end)
    for run in due:
        workload = Workload.objects.filter(pk=run.workload_id).first()
        if workload is None:
            continue
        try:
            lifecycle.finish(workload, worded.finished())
        except Conflict:
            continue  # it was cancelled or preempted meanwhile
        clock.runs.pop(run.workload_id, None)
        finished.append(run.workload_id)
    return finished


def _submit_due(clock: DemoClock, start: float, end: float, refused: list[str]) -> list[int]:
    submitted = _play_opening(clock, start, end, refused)
    due = _trace_due(clock, start, end)
    tenants = {t.slug: t for t in Tenant.objects.filter(slug__in={a.job.team for a in due})}
    for arrival in due:
        job = arrival.job
        try:
            workload = workload_submit(
                actor=None,
                cluster=clock.cluster,
                tenant=tenants[job.team],
                name=arrival.name,
                pod_sets=[
                    PodSetSpec(count=job.count, gpus_per_pod=job.gpus_per_pod, flavour=job.flavour)
                ],
                priority_class=TRACE_PRIORITY,
                audit_source="system",
                annotations=demo_annotations(arrival.at, job.run_time_s, job.trace_id),
            )
        except (TidegateError, KeyError) as error:  # the demo's quotas or flavours changed
            refused.append(f"{arrival.name}: {error}")
            continue
        submitted.append(workload.pk)
    return submitted


def demo_annotations(at: float, run_time_s: float, trace_job: str = "") -> dict[str, str]:
    """What a demo workload carries for the clock: its run time and virtual submit."""
    notes = {RUN_TIME_ANNOTATION: f"{run_time_s:g}", VIRTUAL_SUBMIT_ANNOTATION: f"{at:.0f}"}
    if trace_job:
        notes[TRACE_JOB_ANNOTATION] = trace_job
    return notes


def _meter_ended_slices(clock: DemoClock) -> int:
    """Hand the slices of real time that are over to the meters; returns rows written."""
    now = clock.real.timestamp()
    over = sorted(index for index in clock.slices if (index + 1) * METER_SLICE_S <= now)
    if not over:
        return 0
    details = {
        w.pk: w
        for w in Workload.objects.filter(
            pk__in={wid for index in over for wid, _f in clock.slices[index]}
        ).select_related("priority_class")
    }
    usage: list[DemoUsage] = []
    for index in over:
        for (workload_id, flavour_id), held in sorted(clock.slices[index].items()):
            workload = details.get(workload_id)
            if workload is None or round(held.seconds) <= 0:
                continue
            usage.append(
                DemoUsage(
                    workload_id=workload_id,
                    tenant_id=workload.tenant_id,
                    flavour_id=flavour_id,
                    name=workload.name,
                    priority_class=workload.priority_class.name if workload.priority_class else "",
                    slice_start=index * METER_SLICE_S,
                    devices=held.devices,
                    gpu_seconds=round(held.seconds),
                    busy_ratio=busy_ratio(workload.name),
                )
            )
    written = sum(meter(usage) for meter in DEMO_METERS) if usage else 0
    for index in over:  # forgotten once written (a meter that fails keeps them all)
        del clock.slices[index]
    return written


# --- the opening act ---------------------------------------------------------------------
# The trace's work arrives as it did at Microsoft, so a visitor might wait a long time for
# a reclaim or an elastic job. The opening act stages, in the first virtual hours after
# the demo was seeded (the first real minutes at the default speed), what Tidegate is for:
# an owner taking back the guarantee another team borrows (a reclaim, its reason on the
# borrower's page), work waiting in line with a position, an elastic job growing into
# idle GPUs and shrinking when their owner wants them. Each scene plays once: it is not
# submitted again when a workload of its name exists.

OWNER_WITH_ROOM = "(a team whose unused guarantee is lent now)"


@dataclass(frozen=True)
class Scene:
    at_s: float  # virtual seconds after the demo was seeded
    team: str  # a team slug, or OWNER_WITH_ROOM
    name: str
    flavour: str
    count: int
    gpus_per_pod: int
    run_s: float
    min_count: int | None = None


# elastic: 2 pods guaranteed, up to 12 growing into idle A100s
ELASTIC_SCENE = Scene(30 * 60, "nlp", "elastic-pretrain", "a100-sxm4-80gb", 12, 1, 8 * 3600, 2)

OPENING = (
    # an owner's work inside its guarantee, while vision borrows its H100s: a reclaim
    Scene(10 * 60, OWNER_WITH_ROOM, "owner-takes-back", "h100-80gb", 1, 2, 3 * 3600),
    # more than the free H100s: waits in line with a position until work ends
    Scene(15 * 60, "search", "waits-its-turn", "h100-80gb", 2, 2, 2 * 3600),
    ELASTIC_SCENE,
    # an owner of those A100s wants them back: the elastic job shrinks, nothing is killed
    Scene(3 * 3600, OWNER_WITH_ROOM, "owner-wants-a100s", "a100-sxm4-80gb", 4, 1, 2 * 3600),
)


# The trace fills the A100s within minutes at a busy hour (a weekday afternoon's burst of
# one-GPU jobs), and an elastic job only grows into idle GPUs: so that it grows and then
# shrinks whatever hour the demo was seeded at, the trace's A100 work of the opening's
# first hour waits for the hour's end, by which the elastic job has grown.
LULL_FLAVOUR = ELASTIC_SCENE.flavour
LULL_S = 3600.0


def _play_opening(clock: DemoClock, start: float, end: float, refused: list[str]) -> list[int]:
    if clock.opening_at is None:
        return []
    due = [s for s in OPENING if start < clock.opening_at + s.at_s <= end]
    played = set(
        Workload.objects.filter(cluster=clock.cluster, name__in=[s.name for s in due]).values_list(
            "name", flat=True
        )
    )
    submitted = []
    for scene in due:
        if scene.name in played:
            continue
        cast = _cast(clock.cluster, scene)
        if cast is None:
            refused.append(
                f"{scene.name}: no team whose budget lets work start has "
                f"{scene.gpus_per_pod} {scene.flavour} of its guarantee unused"
            )
            continue
        tenant, count = cast
        try:
            workload = workload_submit(
                actor=None,
                cluster=clock.cluster,
                tenant=tenant,
                name=scene.name,
                pod_sets=[
                    PodSetSpec(
                        count=count,
                        gpus_per_pod=scene.gpus_per_pod,
                        flavour=scene.flavour,
                        min_count=scene.min_count,
                    )
                ],
                priority_class=TRACE_PRIORITY,
                audit_source="system",
                annotations=demo_annotations(clock.opening_at + scene.at_s, scene.run_s),
            )
        except (TidegateError, KeyError) as error:
            refused.append(f"{scene.name}: {error}")
            continue
        submitted.append(workload.pk)
    return submitted


def _trace_due(clock: DemoClock, start: float, end: float) -> list[Arrival]:
    """The trace's submissions due in (start, end], less those the opening act holds
    back: work for the elastic scene's flavour arriving in its first ``LULL_S`` is
    submitted together at the lull's end (its virtual submit instants kept)."""
    due = clock.trace.arrivals(start, end)
    if clock.opening_at is None:
        return due
    lull_start, lull_end = clock.opening_at, clock.opening_at + LULL_S

    def held(arrival: Arrival) -> bool:
        return arrival.job.flavour == LULL_FLAVOUR and lull_start < arrival.at <= lull_end

    due = [arrival for arrival in due if not held(arrival)]
    if start < lull_end <= end:
        released = [a for a in clock.trace.arrivals(lull_start, lull_end) if held(a)]
        known = set(
            Workload.objects.filter(
                cluster=clock.cluster, name__in=[a.name for a in released]
            ).values_list("name", flat=True)
        )  # a restart inside the step that released them already
        due = [a for a in released if a.name not in known] + due
    return due


def _cast(cluster: Cluster, scene: Scene) -> tuple[Tenant, int] | None:
    """Who plays the scene, with how many of its pods. A named team plays it whole. For
    OWNER_WITH_ROOM: the team whose guarantee of the flavour minus what it holds covers
    the most of the scene's pods (the whole scene if any can; then by slug), among those
    whose budget lets that work start (the demo's hard budget can run out late in the
    month): its work starts inside its guarantee, taking back what was lent."""
    if scene.team != OWNER_WITH_ROOM:
        team = Tenant.objects.filter(slug=scene.team).first()
        return (team, scene.count) if team is not None else None
    held: dict[int, int] = {}
    for workload in Workload.objects.filter(
        cluster=cluster, state__in=Workload.ACTIVE_STATES, flavour__name=scene.flavour
    ):
        held[workload.tenant_id] = held.get(workload.tenant_id, 0) + workload.gpus
    quotas = Quota.objects.filter(
        flavour__cluster=cluster, flavour__name=scene.flavour, tenant__children__isnull=True
    ).select_related("tenant")
    by_room = sorted(
        (
            (
                min(scene.count, (q.guaranteed - held.get(q.tenant_id, 0)) // scene.gpus_per_pod),
                q.tenant,
            )
            for q in quotas
        ),
        key=lambda pods_team: (-pods_team[0], pods_team[1].slug),
    )
    for pods, team in by_room:
        if pods < 1:
            return None
        # a gate of its own for each ask: a gate counts what it lets start
        allowed, _why = budget_gate_for(cluster).may_start(
            team.slug, _scene_work(scene, team, pods)
        )
        if allowed:
            return team, pods
    return None


def _scene_work(scene: Scene, team: Tenant, pods: int) -> engine.PendingWorkload:
    """The scene's work as the budget gate prices it (its run time declared)."""
    return engine.PendingWorkload(
        id=scene.name,
        tenant_id=team.slug,
        pod_sets=(
            engine.PodSet(count=pods, gpus_per_pod=scene.gpus_per_pod, flavours=(scene.flavour,)),
        ),
        max_run_time_s=scene.run_s,
    )


# --- the demo's recorded history, for the what-if ------------------------------------


def demo_history_jobs(
    cluster: Cluster, since: datetime, until: datetime
) -> list[RecordedJob] | None:
    """The seeded history of a cluster on the demo clock as the jobs it ran: the trace's
    arrivals of [since, until) as the history replay ran them (the same replay that wrote
    the seeded ledger), each with its submit instant, its last run's length and its first
    start. None for any other cluster. Hours are whole, so a page that asks twice within
    an hour replays once."""
    if cluster.name != DEMO_CLUSTER or cluster.gateway != Cluster.Gateway.SIMULATED:
        return None
    seeded_until = _seeded_until(cluster)
    hi = min(until, seeded_until).replace(minute=0, second=0, microsecond=0)
    lo = since.replace(minute=0, second=0, microsecond=0)
    if hi <= lo:
        return []
    result = history_replay(cluster, lo, hi)
    anchor = ANCHOR.timestamp()
    submitted = {
        arrival.name: anchor + arrival.at
        for arrival in demo_trace(cluster).arrivals(virtual(lo) - 86_400.0, virtual(hi))
    }
    runs: dict[str, list[HeldRun]] = {}
    for run in result.runs:
        runs.setdefault(run.name, []).append(run)
    jobs = []
    for name, held in sorted(runs.items()):
        held.sort(key=lambda r: (r.run, r.start))
        last = held[-1]
        at = submitted.get(name)
        if at is None or not lo.timestamp() <= at < hi.timestamp() or last.end >= hi.timestamp():
            continue  # submitted outside the window, or still running at its end
        jobs.append(
            RecordedJob(
                TraceJob(
                    id=name,
                    tenant=last.team,
                    submitted_at=at,
                    run_time_s=last.end - last.start,
                    gpus=last.devices,
                    flavor=last.flavour,
                    priority=0,
                ),
                first_start=held[0].start,
            )
        )
    return jobs


def _seeded_until(cluster: Cluster) -> datetime:
    """Where the seeded history ends: the virtual instant the demo's own work was
    submitted at (the hour seed_demo ran), as a real instant."""
    submitted = _virtual_submits(cluster)
    return ANCHOR + timedelta(seconds=min(submitted)) if submitted else timezone.now()


def _virtual_submits(cluster: Cluster) -> list[float]:
    """The virtual instants the cluster's demo work was submitted at."""
    return [
        float(notes[VIRTUAL_SUBMIT_ANNOTATION])
        for notes in Workload.objects.filter(
            cluster=cluster, annotations__has_key=VIRTUAL_SUBMIT_ANNOTATION
        ).values_list("annotations", flat=True)
    ]
