"""Plain data in and out of the admission engine.

Everything here is a frozen dataclass without behaviour beyond validation and a few
conveniences, so that services can build snapshots from the ORM, tests can build them
by hand, and the simulator can build them from a trace, all in the same way.

Units: GPU counts are integers of the flavour's own unit (a whole GPU for
``nvidia.com/gpu``, one MIG device for ``nvidia.com/mig-1g.10gb``); ``gpu_equivalent``
converts a unit to whole GPUs for fair share. Times are seconds since the Unix epoch (UTC)
as floats: the engine does arithmetic on them millions of times per cycle, and services
convert from timezone-aware datetimes at the boundary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final

DAY_S: Final = 86_400.0
SHARE_PACKINGS: Final = ("best-fit", "fgd")


class Topology(StrEnum):
    """Where the pods of one workload must land together."""

    NONE = "none"
    ONE_NODE = "node"
    ONE_DOMAIN = "domain"


class ReasonCode(StrEnum):
    """Structured reason why a workload is still pending (stable: stored and filtered on)."""

    UNKNOWN_TENANT = "unknown_tenant"
    UNKNOWN_FLAVOUR = "unknown_flavour"
    NO_QUOTA = "no_quota"
    QUOTA_LIMIT = "quota_limit"
    COHORT_LIMIT = "cohort_limit"
    COHORT_EXHAUSTED = "cohort_exhausted"
    NODE_CAPACITY = "node_capacity"
    TOPOLOGY = "topology"
    NEVER_FITS = "never_fits"
    WAITING_PRIORITY = "waiting_priority"
    WAITING_FAIR_SHARE = "waiting_fair_share"
    RESERVED = "reserved"
    RESERVATION_HELD = "reservation_held"
    PREEMPTING = "preempting"
    WAITING_RECLAIM = "waiting_reclaim"
    BUDGET = "budget"


class AdmitCode(StrEnum):
    """How a workload got in."""

    WITHIN_GUARANTEE = "within_guarantee"
    BORROWING = "borrowing"
    BACKFILL = "backfill"


class PreemptionCode(StrEnum):
    """Why a running workload is being stopped."""

    RECLAIM = "reclaim"
    PRIORITY = "priority"


@dataclass(frozen=True, slots=True)
class Tenant:
    """A node of the tenant tree. Tenants without a parent are cohort roots: trees never
    lend to each other."""

    id: str
    parent_id: str | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"tenant {self.id}: weight must be positive, got {self.weight}")


@dataclass(frozen=True, slots=True)
class Flavour:
    """A schedulable GPU resource and its weight in whole-GPU equivalents per unit.

    ``shared``: several pods share one GPU (time-slicing, MPS, HAMi, fractions). Its unit
    is then a thousandth of a GPU everywhere (quotas, pod sets, node capacity: GPUs x
    1000), ``gpu_equivalent`` is per thousandth, and no share spans GPUs
    (admission/devices.py)."""

    name: str
    gpu_equivalent: float = 1.0
    shared: bool = False


@dataclass(frozen=True, slots=True)
class Quota:
    """Quota of one tenant for one flavour.

    ``guaranteed`` is nominal quota. A parent's guarantee contains its children's; what is
    left over is a pool its subtree shares. ``borrow_limit`` caps usage at
    guaranteed + borrow_limit (None: as far as the cohort allows). ``lend_limit`` caps how
    much of the guarantee others may use (None: all of it while unused).
    """

    tenant_id: str
    flavour: str
    guaranteed: int
    borrow_limit: int | None = None
    lend_limit: int | None = None

    def __post_init__(self) -> None:
        for name in ("guaranteed", "borrow_limit", "lend_limit"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"quota {self.tenant_id}/{self.flavour}: {name} is negative")


@dataclass(frozen=True, slots=True)
class Node:
    """A node's GPUs per flavour. ``free`` None means: total minus what the running
    workloads of the snapshot hold there (the simulator's way); a gateway that sees
    foreign pods passes what is really free."""

    name: str
    capacity: Mapping[str, int]
    free: Mapping[str, int] | None = None
    domain: str | None = None  # NVLink clique / topology block; None: the node alone
    # shared flavours: thousandths of each GPU held by pods Tidegate does not manage
    device_used: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` pods of ``gpus_per_pod`` GPUs of the first acceptable flavour that fits.

    ``min_count`` (None: ``count``) makes the pod set elastic: its first ``min_count``
    pods are the core, admitted under the usual rules; the pods above it are elastic,
    added one by one into capacity nobody else waits for and taken back first
    (admission/elastic.py).

    ``per_flavour`` (empty: ``gpus_per_pod`` on every flavour) says what a pod needs on
    each of ``flavours``, in order, when that differs: a prioritized list of DRA claims
    such as "two H100s, or else four MIG slices" (docs/dra.md). ``gpus_per_pod`` is then
    its first entry. ``flavours`` is a tuple, even of one (the compiled engine checks
    every field's type as it is made)."""

    count: int
    gpus_per_pod: int
    flavours: tuple[str, ...]
    name: str = "main"
    min_count: int | None = None
    per_flavour: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.count < 1 or self.gpus_per_pod < 1 or not self.flavours:
            raise ValueError(f"pod set {self.name}: needs count >= 1, gpus >= 1, a flavour")
        if self.min_count is not None and not 1 <= self.min_count <= self.count:
            raise ValueError(
                f"pod set {self.name}: min_count must be within 1..{self.count} (its count), "
                f"got {self.min_count}"
            )
        if self.per_flavour and (
            len(self.per_flavour) != len(self.flavours)
            or min(self.per_flavour) < 1
            or self.per_flavour[0] != self.gpus_per_pod
        ):
            raise ValueError(
                f"pod set {self.name}: per_flavour needs one amount of at least 1 per flavour, "
                f"the first its gpus_per_pod (got {self.per_flavour} for {self.flavours})"
            )

    def per_pod(self, flavour: str) -> int:
        """What one pod needs on ``flavour``."""
        if self.per_flavour and flavour in self.flavours:
            return self.per_flavour[self.flavours.index(flavour)]
        return self.gpus_per_pod

    @property
    def raw(self) -> tuple[int, int | tuple[int, ...], tuple[str, ...]]:
        """(count, per pod, flavours) as shapes are built from (pending.build_shape)."""
        return (self.count, self.per_flavour or self.gpus_per_pod, self.flavours)

    @property
    def core(self) -> int:
        """Pods that must run for the workload to run at all."""
        return self.count if self.min_count is None else self.min_count

    @property
    def elastic(self) -> bool:
        return self.core < self.count

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_pod


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingWorkload:
    """A job asking for GPUs. It is admitted whole (every pod set) or not at all; ``gang``
    marks pods that must start together and is what makes a workload eligible for a
    reservation. ``max_run_time_s`` (if declared) allows backfill on reserved GPUs."""

    id: str
    tenant_id: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    submitted_at: float = 0.0
    gang: bool = True
    topology: Topology = Topology.NONE
    max_run_time_s: float | None = None
    preemptible: bool = True
    # Where its preemption of the previous cycle planned it (PendingDecision.held): the
    # GPUs its victims freed are held for it at the start of the next cycle, so nothing
    # queued before it - a returning victim, a reservation, its own tenant's other work -
    # takes them (the caller keeps this from one cycle to the next).
    held: tuple[Placement, ...] = ()
    # An elastic pod of running workload ``elastic_of`` (admission/elastic.py builds
    # them): it queues after all other work, starts only where nobody else waits,
    # never preempts and never holds a reservation.
    elastic_of: str | None = None
    # Work that only fills what nobody else waits for (low-priority batch in the fragments
    # of shared GPUs, or idle guarantee): the engine treats it as an elastic pod without a
    # core - queued after all other work, never preempting, first to be taken back, and
    # not counted against its tenant's guarantee.
    fills_idle: bool = False

    def __post_init__(self) -> None:
        if not self.pod_sets:
            raise ValueError(f"workload {self.id}: no pod sets")
        if self.elastic_of is not None and not self.preemptible:
            raise ValueError(f"workload {self.id}: an elastic pod is always preemptible")
        if self.fills_idle and not self.preemptible:
            raise ValueError(f"workload {self.id}: work that fills idle GPUs is preemptible")

    @property
    def opportunistic(self) -> bool:
        """An elastic pod or work that fills idle GPUs: it takes only what is left and
        gives it back first."""
        return self.elastic_of is not None or self.fills_idle

    @property
    def gpus(self) -> int:
        return sum(ps.gpus for ps in self.pod_sets)


@dataclass(frozen=True, slots=True)
class Placement:
    """``gpus`` GPUs of ``flavour`` on ``node``; for a shared flavour, ``gpus`` thousandths
    of GPU number ``gpu`` of the node."""

    node: str
    flavour: str
    gpus: int
    gpu: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningWorkload:
    """An admitted workload. ``borrowed`` is what it borrows as last recorded (for
    chargeback; AdmissionEngine.borrowing_after keeps it current). Reclaim does not rely
    on it: the engine judges borrowing from the tenant's current usage, as Kueue does. ``evicting`` marks a victim
    that was told to stop but still holds its GPUs."""

    id: str
    tenant_id: str
    placements: tuple[Placement, ...]
    priority: int = 0
    admitted_at: float = 0.0
    borrowed: Mapping[str, int] = field(default_factory=dict)
    preemptible: bool = True
    max_run_time_s: float | None = None
    evicting: bool = False
    request: PendingWorkload | None = field(default=None, compare=False, repr=False)
    # An elastic pod of running workload ``elastic_of``: the first thing any reclaim
    # inside its tree takes back, its own tenant's included (admission/elastic.py).
    elastic_of: str | None = None
    fills_idle: bool = False  # as PendingWorkload.fills_idle: taken back first

    @property
    def opportunistic(self) -> bool:
        return self.elastic_of is not None or self.fills_idle

    @property
    def flavour(self) -> str:
        return self.placements[0].flavour if self.placements else ""

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.placements)

    @classmethod
    def from_admission(
        cls, workload: PendingWorkload, admission: Admission, admitted_at: float
    ) -> RunningWorkload:
        """The running form of an admitted workload, ready for the next snapshot."""
        return cls(
            id=workload.id,
            tenant_id=workload.tenant_id,
            placements=admission.placements,
            priority=workload.priority,
            admitted_at=admitted_at,
            borrowed=admission.borrowed,
            preemptible=workload.preemptible,
            max_run_time_s=workload.max_run_time_s,
            request=replace(workload, held=()) if workload.held else workload,
            elastic_of=workload.elastic_of,
            fills_idle=workload.fills_idle,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Knobs of the admission cycle; defaults and their reasons: docs/admission.md."""

    reclaim: bool = True
    priority_preemption: bool = False
    reservation_wait_s: float = 3600.0
    reservation_min_gpus: int = 8
    max_reservations: int = 8
    # Running work without a declared max run time is assumed to end this long after
    # admission when a reservation estimates its start (Slurm uses the partition limit).
    assumed_run_time_s: float = DAY_S
    # Share = (1 - usage_blend) x current holding + usage_blend x decayed history.
    usage_blend: float = 0.5
    # Borrowed work younger than this is not reclaimed: it gets to its first checkpoint
    # before an owner may stop it, and an owner waits at most this long (plus a cycle)
    # for its guarantee. 0 reclaims at once, as Kueue does; KAI's "min runtime" and
    # Slurm's PreemptExemptTime are the same idea.
    reclaim_min_run_s: float = 0.0
    # Work inside its guarantee waits this long after it was submitted for GPUs to free
    # on their own before it stops other tenants' borrowed work (elastic pods, whose
    # loss costs no work, are still taken back at once). On a busy cluster GPUs free
    # every few minutes and the owner's work queues first for them, so most reclaims
    # never need a preemption; an owner waits at most this long (plus a cycle). 0
    # reclaims at once, as Kueue does; YARN's capacity preemption likewise counts on
    # part of what a queue is owed being freed by containers that finish
    # (natural_termination_factor).
    reclaim_wait_s: float = 0.0
    # Which GPU a share of a shared flavour takes: "best-fit" (the fullest that holds it)
    # or "fgd" (the one whose free capacity the recent request mix could least use
    # anyway: fragmentation gradient descent, Weng et al., USENIX ATC 2023).
    share_packing: str = "best-fit"

    def __post_init__(self) -> None:
        if self.share_packing not in SHARE_PACKINGS:
            raise ValueError(
                f"share_packing must be one of {', '.join(SHARE_PACKINGS)}, "
                f"got {self.share_packing!r}"
            )
        if not 0.0 <= self.usage_blend <= 1.0:
            raise ValueError("usage_blend must be within 0..1")
        waits = (
            ("reclaim_min_run_s", self.reclaim_min_run_s),
            ("reclaim_wait_s", self.reclaim_wait_s),
            ("reservation_wait_s", self.reservation_wait_s),
        )
        for name, seconds in waits:
            if not seconds >= 0:  # (NaN too)
                raise ValueError(f"{name} must be 0 or more seconds, got {seconds}")
        if self.reservation_min_gpus < 0:
            raise ValueError("reservation_min_gpus must not be negative")
        if self.max_reservations < 0:
            raise ValueError("max_reservations must not be negative (0 reserves nothing)")
        if not self.assumed_run_time_s > 0:
            raise ValueError(
                f"assumed_run_time_s must be more than 0 seconds, got {self.assumed_run_time_s}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSnapshot:
    """Everything one admission cycle looks at. ``usage_history`` is each tenant's decayed
    usage in GPU-equivalent hours (see fairshare.decay_usage)."""

    now: float
    tenants: tuple[Tenant, ...]
    flavours: tuple[Flavour, ...]
    quotas: tuple[Quota, ...]
    nodes: tuple[Node, ...]
    running: tuple[RunningWorkload, ...] = ()
    pending: tuple[PendingWorkload, ...] = ()
    usage_history: Mapping[str, float] = field(default_factory=dict)
    usage_half_life_s: float = 7 * DAY_S


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """Start ``workload_id`` with these placements. ``flavours`` has one entry per pod set;
    ``borrowed`` is GPUs above the tenant's guarantee per flavour (non-zero only)."""

    workload_id: str
    tenant_id: str
    flavours: tuple[str, ...]
    placements: tuple[Placement, ...]
    borrowed: Mapping[str, int]
    code: AdmitCode
    message: str

    @property
    def flavour(self) -> str:
        return self.flavours[0]

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.placements)

    @property
    def borrowed_gpus(self) -> int:
        return sum(self.borrowed.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    """Stop ``victim_id`` so that ``preemptor_id`` can start."""

    victim_id: str
    victim_tenant_id: str
    preemptor_id: str
    preemptor_tenant_id: str
    flavour: str  # the flavour the preemptor needs
    code: PreemptionCode
    message: str


@dataclass(slots=True, init=False)
class PendingDecision:
    """Why ``workload_id`` waits and where it stands: ``position`` is 1-based in the whole
    queue (the order the next cycle will try), ``tenant_position`` within its tenant.
    Work that cannot run as things stand (larger than its quota or the cluster could ever
    give it, an unknown tenant or flavour) has no position: it is not in line for
    anything until its quota, the cluster or the request changes (Kueue: inadmissible).

    Read-only like the other records, but neither frozen nor keyword-only: a cycle
    makes one per pending workload (50,000 over a deep queue), and a frozen dataclass's
    constructor costs 2.5 times as much (one object.__setattr__ call per field), a
    keyword call twice as much again. Its constructor is written out rather than made
    by ``dataclass``, so that it is compiled with the engine (a generated one runs
    interpreted: a tenth of a deep queue's incremental cycle). Change it with
    ``dataclasses.replace``; outside the explainer's loop, name the fields."""

    workload_id: str
    tenant_id: str
    position: int | None
    tenant_position: int | None
    code: ReasonCode
    message: str
    flavour: str | None = None
    # for work preempting: where it will start once its victims stop (pass it back as
    # PendingWorkload.held next cycle)
    held: tuple[Placement, ...] = ()

    def __init__(
        self,
        workload_id: str,
        tenant_id: str,
        position: int | None,
        tenant_position: int | None,
        code: ReasonCode,
        message: str,
        flavour: str | None = None,
        held: tuple[Placement, ...] = (),
    ) -> None:
        self.workload_id = workload_id
        self.tenant_id = tenant_id
        self.position = position
        self.tenant_position = tenant_position
        self.code = code
        self.message = message
        self.flavour = flavour
        self.held = held


@dataclass(frozen=True, slots=True, kw_only=True)
class Reservation:
    """GPUs held for a starving workload. ``blocked`` are the GPUs kept idle now;
    ``expected_start`` is when the rest should be released (None if unknown)."""

    workload_id: str
    tenant_id: str
    placements: tuple[Placement, ...]
    blocked: tuple[Placement, ...]
    expected_start: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleStats:
    """Counters for benchmarks and logs (not part of the decisions)."""

    pending: int
    groups_evaluated: int
    groups_skipped: int  # failed again without a try: nothing they depend on changed
    workloads_skipped: int
    duration_s: float
    groups_failed_at_start: int = 0  # cannot start this cycle whatever happens in it
    # borrowing groups refused with their tenant's first to fail on quota, untried
    groups_failed_with_tenant: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleResult:
    """Decisions of one cycle. ``pending`` is empty when the cycle ran with
    ``explain_pending=False`` (the simulator's fast path)."""

    now: float
    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    pending: tuple[PendingDecision, ...]
    reservations: tuple[Reservation, ...]
    stats: CycleStats | None = field(default=None, compare=False)
