"""A virtual-time cluster that runs the admission engine forward.

Jobs arrive at their submit time; the engine runs a cycle whenever something changed
(an arrival, a finish, a preemption), at most once every ``cycle_interval_s``, the way
a periodic admission task with event triggers would; admitted jobs run for their run
time and leave; preempted jobs are stopped at once and queued again with their
original submit time. A preempted job resumes from its last checkpoint
(``SimJob.checkpoint_interval_s``, counted in its running time) or, without one, from
the start, as when a Kubernetes Job is suspended: the work thrown away is counted as
wasted GPU time. Usage history decays with the snapshot's half-life and feeds fair share.

Elastic jobs (a pod set with ``min_count``) run as a core plus elastic pods
(elastic.py). The speed-up model is linear: a job's ``run_time_s`` is its run time at
its full size, and with p of its n pods running it progresses at p / n of that speed.
Each grow or shrink costs ``resize_pause_s`` of the job's time (its workers restart
from a checkpoint taken at the change, as an elastic launcher such as torchrun's
does); that pause is counted as wasted GPU time too.

Used by tests (fair-share convergence, no preemption loops), by benchmarks/admission.py
and, later, by trace replay. Everything is deterministic: no wall clock enters a
decision, only the engine's own timing counters.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from time import perf_counter

from .elastic import ElasticPod, core_of, elastic_changes, elastic_parts, is_elastic
from .engine import AdmissionEngine
from .fairshare import decay_usage
from .model import (
    DAY_S,
    ClusterSnapshot,
    CycleResult,
    Flavour,
    Node,
    PendingWorkload,
    Placement,
    Quota,
    RunningWorkload,
    Tenant,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimJob:
    """A job of the simulation: ``workload.submitted_at`` is its arrival time,
    ``run_time_s`` its run time at full size; ``checkpoint_interval_s`` (None: never)
    how often it saves its progress while it runs."""

    workload: PendingWorkload
    run_time_s: float
    checkpoint_interval_s: float | None = None

    def __post_init__(self) -> None:
        if self.checkpoint_interval_s is not None and not self.checkpoint_interval_s > 0:
            raise ValueError(f"job {self.workload.id}: checkpoint interval must be positive")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOutcome:
    id: str
    tenant_id: str
    gpus: int
    submitted_at: float
    started_at: float | None  # first admission
    finished_at: float | None
    preemptions: int

    @property
    def wait_s(self) -> float | None:
        return None if self.started_at is None else self.started_at - self.submitted_at


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleSample:
    """The cluster right after a cycle's decisions were applied."""

    time: float
    utilization: float  # GPU-equivalents held / GPU-equivalents installed
    pending: int
    admitted: int
    preempted: int
    engine_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    jobs: tuple[JobOutcome, ...]
    samples: tuple[CycleSample, ...]
    cycles: int
    engine_s: float
    decisions: int
    admissions: int
    preemptions: int
    start_time: float
    end_time: float
    capacity_gpu_equivalents: float
    held_gpu_seconds: Mapping[str, float] = field(default_factory=dict)
    # GPU-equivalent seconds of work thrown away (by preemption, or resize pauses)
    wasted_gpu_seconds: float = 0.0
    grows: int = 0  # elastic pods started
    shrinks: int = 0  # elastic pods taken back
    # GPU-equivalent seconds each tenant held above its own guarantee (borrowed)
    borrowed_gpu_seconds: Mapping[str, float] = field(default_factory=dict)

    @property
    def mean_utilization(self) -> float:
        """Time-weighted utilisation over the whole run."""
        span = (self.end_time - self.start_time) * self.capacity_gpu_equivalents
        return sum(self.held_gpu_seconds.values()) / span if span > 0 else 0.0

    @property
    def goodput(self) -> float:
        """GPU time of work that counted over the GPU time the cluster offered."""
        span = (self.end_time - self.start_time) * self.capacity_gpu_equivalents
        useful = sum(self.held_gpu_seconds.values()) - self.wasted_gpu_seconds
        return useful / span if span > 0 else 0.0


class Simulator:
    """Runs jobs through the engine in virtual time (see the module docstring)."""

    def __init__(
        self,
        *,
        tenants: Sequence[Tenant],
        flavours: Sequence[Flavour],
        quotas: Sequence[Quota],
        nodes: Sequence[Node],
        jobs: Sequence[SimJob],
        engine: AdmissionEngine | None = None,
        cycle_interval_s: float = 0.0,
        usage_half_life_s: float = 7 * DAY_S,
        explain_pending: bool = False,
        on_cycle: Callable[[ClusterSnapshot, CycleResult], None] | None = None,
        resize_pause_s: float = 60.0,
        observer: Callable[[float, Mapping[str, float], Mapping[str, float]], None] | None = None,
        guarantees: Mapping[str, float] | None = None,
    ) -> None:
        self.tenants = tuple(tenants)
        self.flavours = tuple(flavours)
        self.quotas = tuple(quotas)
        # the simulator's nodes only carry capacity: free GPUs follow from running work
        self.nodes = tuple(replace(n, free=None) for n in nodes)
        self.jobs = {job.workload.id: job for job in jobs}
        if len(self.jobs) != len(jobs):
            raise ValueError("duplicate job ids")
        self.elastic_ids = frozenset(
            wid for wid, job in self.jobs.items() if is_elastic(job.workload)
        )
        self.engine = engine or AdmissionEngine()
        self.interval = cycle_interval_s
        self.half_life = usage_half_life_s
        self.explain = explain_pending
        self.on_cycle = on_cycle
        self.resize_pause_s = resize_pause_s
        # called after each cycle with (now, GPU-equivalents held per tenant, GPU-equivalents
        # its queued and running jobs ask at full size); the mappings are live: copy to keep
        self.observer = observer
        self.equivalent = {f.name: f.gpu_equivalent for f in self.flavours}
        self.capacity = sum(
            gpus * self.equivalent.get(name, 0.0)
            for node in self.nodes
            for name, gpus in node.capacity.items()
        )
        # what each tenant holds beyond this (GPU-equivalents) counts as borrowed; by default
        # its quotas' guarantees (a policy without guarantees may pass the ones it ignores)
        self.guarantee: dict[str, float] = {}
        for quota in self.quotas:
            self.guarantee[quota.tenant_id] = self.guarantee.get(
                quota.tenant_id, 0.0
            ) + quota.guaranteed * self.equivalent.get(quota.flavour, 0.0)
        if guarantees is not None:
            self.guarantee = dict(guarantees)

    def run(self, until: float | None = None) -> SimulationResult:
        """Run until every job finished (or virtual time ``until``)."""
        run = _Run(self)
        return run.go(math.inf if until is None else until)


class _Progress:
    """Where a running job is: work left (seconds at full size) as of ``since``, its
    speed now (running pods / pods at full size), and what its last checkpoint saved."""

    __slots__ = ("checkpoint_at", "checkpoint_left", "left", "rate", "run_started", "since")

    def __init__(self, left: float, rate: float, now: float) -> None:
        self.left = left
        self.rate = rate
        self.since = now
        self.run_started = now
        self.checkpoint_at = now
        self.checkpoint_left = left

    def advance(self, now: float, interval: float | None) -> None:
        """Bring the work left up to ``now``, taking the checkpoints passed meanwhile."""
        if interval is not None:
            last = self.run_started + math.floor((now - self.run_started) / interval) * interval
            if last > self.checkpoint_at and last >= self.since:
                self.checkpoint_at = last
                self.checkpoint_left = max(0.0, self.left - (last - self.since) * self.rate)
        self.left = max(0.0, self.left - (now - self.since) * self.rate)
        self.since = now

    def finish_at(self) -> float:
        return self.since + self.left / self.rate if self.rate > 0 else math.inf


class _Run:
    """State of one simulation run."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.arrivals = sorted(
            sim.jobs.values(), key=lambda j: (j.workload.submitted_at, j.workload.id)
        )
        self.next_arrival = 0
        self.pending: dict[str, PendingWorkload] = {}
        self.running: dict[str, RunningWorkload] = {}
        self.left: dict[str, float] = {}  # work left of queued jobs (seconds at full size)
        self.progress: dict[str, _Progress] = {}
        # elastic jobs: their running elastic pods, and each pod set's flavour
        self.pods: dict[str, dict[tuple[str, int], ElasticPod]] = {}
        self.pod_flavours: dict[str, dict[str, str]] = {}
        self.finishes: list[tuple[float, str, int]] = []
        self.generation: dict[str, int] = {}
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.preempted: dict[str, int] = {}
        self.history: dict[str, float] = {}
        self.held: dict[str, float] = {}
        self.held_seconds: dict[str, float] = {}
        self.borrowed_seconds: dict[str, float] = {}
        self.demand: dict[str, float] = {}
        self.updated: dict[str, float] = {}
        self.samples: list[CycleSample] = []
        self.engine_s = 0.0
        self.decisions = 0
        self.admissions = 0
        self.preemptions = 0
        self.cycles = 0
        self.wasted = 0.0
        self.grows = 0
        self.shrinks = 0
        # arrivals whose reclaim wait may still end while they wait (in submit order,
        # so in the order their waits end)
        self.wait_s = sim.engine.config.reclaim_wait_s
        self.next_wait = 0

    def go(self, until: float) -> SimulationResult:
        start = self.arrivals[0].workload.submitted_at if self.arrivals else 0.0
        now = start
        last_cycle = -math.inf
        dirty = False
        while True:
            # a queued job's reclaim wait ends: the next cycle may let it reclaim, as
            # the product's periodic cycle would
            wait_ends = self._next_wait_end(last_cycle)
            if wait_ends <= now:
                dirty = True
            upcoming = min(self._next_arrival_time(), self._next_finish_time())
            if dirty:
                upcoming = min(upcoming, max(now, last_cycle + self.sim.interval))
            elif wait_ends < upcoming:
                upcoming = wait_ends
                dirty = True
            if upcoming == math.inf or upcoming > until:
                break
            now = upcoming
            dirty |= self._finish_until(now)
            dirty |= self._arrive_until(now)
            if dirty and now >= last_cycle + self.sim.interval:
                dirty = self._cycle(now)
                last_cycle = now
        end = now if until == math.inf else until
        for tenant in list(self.held):
            self._account(tenant, end)
        return self._result(start, end)

    # ----------------------------------------------------------------- events
    def _next_arrival_time(self) -> float:
        if self.next_arrival < len(self.arrivals):
            return self.arrivals[self.next_arrival].workload.submitted_at
        return math.inf

    def _next_finish_time(self) -> float:
        while self.finishes:
            at, wid, generation = self.finishes[0]
            if self.generation.get(wid) == generation and wid in self.running:
                return at
            heapq.heappop(self.finishes)
        return math.inf

    def _next_wait_end(self, last_cycle: float) -> float:
        """When the reclaim wait of the next queued job ends that no cycle has seen
        ended yet (inf without one, or without a reclaim wait)."""
        if self.wait_s <= 0:
            return math.inf
        while self.next_wait < self.next_arrival:
            workload = self.arrivals[self.next_wait].workload
            ends = workload.submitted_at + self.wait_s
            if ends > last_cycle and workload.id in self.pending:
                return ends
            self.next_wait += 1
        return math.inf

    def _finish_until(self, now: float) -> bool:
        changed = False
        while self._next_finish_time() <= now:
            at, wid, _ = heapq.heappop(self.finishes)
            self._stop_job(wid, at)
            del self.progress[wid]
            self.finished[wid] = at
            self._want(self.sim.jobs[wid].workload, -1)
            changed = True
        return changed

    def _arrive_until(self, now: float) -> bool:
        changed = False
        while self._next_arrival_time() <= now:
            job = self.arrivals[self.next_arrival]
            self.next_arrival += 1
            self.pending[job.workload.id] = core_of(job.workload)
            self.left[job.workload.id] = job.run_time_s
            self._want(job.workload, 1)
            changed = True
        return changed

    # ------------------------------------------------------------ accounting
    def _equivalents(self, placements: Sequence[Placement]) -> float:
        return sum(p.gpus * self.sim.equivalent.get(p.flavour, 0.0) for p in placements)

    def _want(self, request: PendingWorkload, sign: int) -> None:
        """A job arrives (+1) or leaves finished (-1): its tenant's demand at full size."""
        equivalent = self.sim.equivalent
        size = sum(
            ps.count * ps.gpus_per_pod * equivalent.get(ps.flavours[0], 0.0)
            for ps in request.pod_sets
        )
        self.demand[request.tenant_id] = self.demand.get(request.tenant_id, 0.0) + sign * size

    def _account(self, tenant: str, now: float) -> None:
        """Bring a tenant's decayed usage, held-seconds and borrowed-seconds integrals up
        to ``now``."""
        last = self.updated.get(tenant, now)
        held = self.held.get(tenant, 0.0)
        if now > last:
            self.history[tenant] = decay_usage(
                self.history.get(tenant, 0.0), held, now - last, self.sim.half_life
            )
            self.held_seconds[tenant] = self.held_seconds.get(tenant, 0.0) + held * (now - last)
            above = held - self.sim.guarantee.get(tenant, 0.0)
            if above > 1e-9:
                self.borrowed_seconds[tenant] = self.borrowed_seconds.get(tenant, 0.0) + above * (
                    now - last
                )
        self.updated[tenant] = now

    def _hold(self, tenant: str, placements: Sequence[Placement], now: float, sign: int) -> None:
        self._account(tenant, now)
        self.held[tenant] = self.held.get(tenant, 0.0) + sign * self._equivalents(placements)

    def _full_size(self, wid: str) -> float:
        """The GPU-equivalents the job holds at full size."""
        request = self.sim.jobs[wid].workload
        flavours = self.pod_flavours[wid]
        equivalent = self.sim.equivalent
        return sum(
            ps.count * ps.gpus_per_pod * equivalent.get(flavours[ps.name], 0.0)
            for ps in request.pod_sets
        )

    def _rate(self, wid: str) -> float:
        request = self.sim.jobs[wid].workload
        pods = sum(ps.count for ps in request.pod_sets)
        return (_core_pods(request) + len(self.pods.get(wid, {}))) / pods

    def _reschedule(self, wid: str) -> None:
        generation = self.generation.get(wid, 0) + 1
        self.generation[wid] = generation
        heapq.heappush(self.finishes, (self.progress[wid].finish_at(), wid, generation))

    def _stop_job(self, wid: str, now: float) -> None:
        """The job's core and elastic pods stop (finished or preempted)."""
        core = self.running.pop(wid)
        self._hold(core.tenant_id, core.placements, now, -1)
        for pod in self.pods.pop(wid, {}).values():
            self._hold(core.tenant_id, (pod.placement,), now, -1)

    def _resize(self, wid: str, now: float) -> None:
        """A grow or shrink: the job pauses ``resize_pause_s`` (wasted) at its new size."""
        progress = self.progress[wid]
        interval = self.sim.jobs[wid].checkpoint_interval_s
        progress.advance(now, interval)
        progress.rate = self._rate(wid)
        pause = self.sim.resize_pause_s
        progress.left += pause * progress.rate
        progress.checkpoint_at, progress.checkpoint_left = now, progress.left
        self.wasted += pause * progress.rate * self._full_size(wid)
        self._reschedule(wid)

    # ----------------------------------------------------------------- cycles
    def _snapshot(self, now: float) -> ClusterSnapshot:
        for tenant in self.held:
            self._account(tenant, now)
        sim = self.sim
        running: list[RunningWorkload] = list(self.running.values())
        pending: list[PendingWorkload] = list(self.pending.values())
        elastic_ids = sim.elastic_ids
        for wid, core in self.running.items():
            if wid in elastic_ids:
                request = sim.jobs[wid].workload
                pods = list(self.pods.get(wid, {}).values())
                up, wanted = elastic_parts(core, request, self.pod_flavours[wid], pods)
                running.extend(up)
                pending.extend(wanted)
        return ClusterSnapshot(
            now=now,
            tenants=sim.tenants,
            flavours=sim.flavours,
            quotas=sim.quotas,
            nodes=sim.nodes,
            running=tuple(running),
            pending=tuple(pending),
            usage_history=dict(self.history),
            usage_half_life_s=sim.half_life,
        )

    def _cycle(self, now: float) -> bool:
        """Run one cycle and apply it; True if another cycle is due (after preemptions,
        or when an elastic core started). With nothing queued and no elastic job that
        could grow, the engine would decide nothing, so it is not asked (only what
        observes the cluster is told): a trace at low load runs several times faster."""
        if not self.pending and not self._growable():
            for tenant in self.held:
                self._account(tenant, now)
            if self.sim.observer is not None:
                self.sim.observer(now, self.held, self.demand)
            return False
        snapshot = self._snapshot(now)
        started = perf_counter()
        result = self.sim.engine.run_cycle(snapshot, explain_pending=self.sim.explain)
        spent = perf_counter() - started
        self.engine_s += spent
        self.cycles += 1
        changes = elastic_changes(snapshot, result)
        whole = [p.victim_id for p in result.preemptions if p.victim_id in self.running]
        for wid in whole:
            self._preempt(wid, now)
        for wid, change in changes.items():
            if wid not in self.running:
                continue  # preempted whole in this cycle
            pods = self.pods.setdefault(wid, {})
            for pod_set, index in change.shrink:
                pod = pods.pop((pod_set, index))
                self._hold(self.running[wid].tenant_id, (pod.placement,), now, -1)
            for pod_set, index, placement in change.grow:
                pods[(pod_set, index)] = ElasticPod(pod_set, index, placement, now)
                self._hold(self.running[wid].tenant_id, (placement,), now, 1)
            self.shrinks += len(change.shrink)
            self.grows += len(change.grow)
            self._resize(wid, now)
        admitted = 0
        grow_due = False  # an elastic core started: its pods may grow in the next cycle
        for admission in result.admissions:
            workload = self.pending.pop(admission.workload_id, None)
            if workload is None:
                continue  # an elastic pod (applied above)
            admitted += 1
            running = RunningWorkload.from_admission(workload, admission, now)
            self.running[workload.id] = running
            self._hold(running.tenant_id, running.placements, now, 1)
            self.started.setdefault(workload.id, now)
            request = self.sim.jobs[workload.id].workload
            self.pod_flavours[workload.id] = {
                ps.name: flavour
                for ps, flavour in zip(request.pod_sets, admission.flavours, strict=True)
            }
            self.progress[workload.id] = _Progress(
                self.left.pop(workload.id), self._rate(workload.id), now
            )
            self._reschedule(workload.id)
            grow_due |= is_elastic(request)
        _carry_holds(self.pending, result)
        self.admissions += admitted
        preempted = len(whole)
        self.preemptions += preempted
        self.decisions += len(result.admissions) + len(result.preemptions) + len(result.pending)
        used = sum(self.held.values())
        self.samples.append(
            CycleSample(
                time=now,
                utilization=used / self.sim.capacity if self.sim.capacity else 0.0,
                pending=len(self.pending),
                admitted=admitted,
                preempted=preempted,
                engine_s=spent,
            )
        )
        if self.sim.on_cycle is not None:
            self.sim.on_cycle(snapshot, result)
        if self.sim.observer is not None:
            self.sim.observer(now, self.held, self.demand)
        return bool(result.preemptions) or grow_due

    def _growable(self) -> bool:
        """Is an elastic job running below its full size?"""
        elastic_ids = self.sim.elastic_ids
        if not elastic_ids:
            return False
        for wid in self.running:
            if wid in elastic_ids:
                request = self.sim.jobs[wid].workload
                full = sum(ps.count for ps in request.pod_sets)
                if _core_pods(request) + len(self.pods.get(wid, {})) < full:
                    return True
        return False

    def _preempt(self, wid: str, now: float) -> None:
        """Stop the whole job; it queues again and resumes from its last checkpoint."""
        job = self.sim.jobs[wid]
        progress = self.progress.pop(wid)
        progress.advance(now, job.checkpoint_interval_s)
        lost = progress.checkpoint_left - progress.left
        self.wasted += lost * self._full_size(wid)
        self._stop_job(wid, now)
        self.preempted[wid] = self.preempted.get(wid, 0) + 1
        self.left[wid] = progress.checkpoint_left
        self.pending[wid] = core_of(job.workload)

    def _result(self, start: float, end: float) -> SimulationResult:
        jobs = tuple(
            JobOutcome(
                id=job.workload.id,
                tenant_id=job.workload.tenant_id,
                gpus=job.workload.gpus,
                submitted_at=job.workload.submitted_at,
                started_at=self.started.get(job.workload.id),
                finished_at=self.finished.get(job.workload.id),
                preemptions=self.preempted.get(job.workload.id, 0),
            )
            for job in self.arrivals
        )
        return SimulationResult(
            jobs=jobs,
            samples=tuple(self.samples),
            cycles=self.cycles,
            engine_s=self.engine_s,
            decisions=self.decisions,
            admissions=self.admissions,
            preemptions=self.preemptions,
            start_time=start,
            end_time=end,
            capacity_gpu_equivalents=self.sim.capacity,
            held_gpu_seconds=dict(self.held_seconds),
            wasted_gpu_seconds=self.wasted,
            grows=self.grows,
            shrinks=self.shrinks,
            borrowed_gpu_seconds=dict(self.borrowed_seconds),
        )


def _core_pods(request: PendingWorkload) -> int:
    return sum(ps.core for ps in request.pod_sets)


def apply_result(
    snapshot: ClusterSnapshot, result: CycleResult, *, evict: bool = False, requeue: bool = True
) -> ClusterSnapshot:
    """The snapshot after the caller carried out ``result``: admitted workloads run,
    victims are gone and (with ``requeue``) queued again with their original submit
    time, or, with ``evict``, still running but marked evicting, as between "suspend"
    and the pods really stopping. Explicit ``free`` figures on nodes are adjusted;
    derived ones follow by themselves."""
    pending = {wl.id: wl for wl in snapshot.pending}
    running = {wl.id: wl for wl in snapshot.running}
    delta: dict[tuple[str, str], int] = {}
    for preemption in result.preemptions:
        victim = running.pop(preemption.victim_id)
        if evict:
            running[victim.id] = replace(victim, evicting=True)
            continue
        for p in victim.placements:
            delta[(p.node, p.flavour)] = delta.get((p.node, p.flavour), 0) + p.gpus
        if requeue and victim.request is not None:
            pending[victim.id] = victim.request
    for admission in result.admissions:
        workload = pending.pop(admission.workload_id)
        running[workload.id] = RunningWorkload.from_admission(workload, admission, snapshot.now)
        for p in admission.placements:
            delta[(p.node, p.flavour)] = delta.get((p.node, p.flavour), 0) - p.gpus
    _carry_holds(pending, result)
    nodes = tuple(_adjust(node, delta) for node in snapshot.nodes)
    return replace(
        snapshot, running=tuple(running.values()), pending=tuple(pending.values()), nodes=nodes
    )


def _carry_holds(pending: dict[str, PendingWorkload], result: CycleResult) -> None:
    """What the caller keeps between cycles: where each preemptor will start."""
    held = {d.workload_id: d.held for d in result.pending}
    for wid, workload in pending.items():
        hold = held.get(wid, ())
        if workload.held != hold:
            pending[wid] = replace(workload, held=hold)


def _adjust(node: Node, delta: Mapping[tuple[str, str], int]) -> Node:
    if node.free is None:
        return node
    free = dict(node.free)
    for flavour in node.capacity:
        free[flavour] = free.get(flavour, 0) + delta.get((node.name, flavour), 0)
    return replace(node, free=free)
