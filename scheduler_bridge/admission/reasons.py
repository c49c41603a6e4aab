"""Human-readable reasons, one function per situation.

The engine decides; these functions only word the decision, so that the portal, the API
and logs say the same thing. Keep numbers in the message (who holds what, how much is
missing): "why is my job pending" is the question users of Kueue ask most (kueue
issues #1657, #2833, #4046, #5622), and a reason without numbers does not answer it.
Codes live in model.ReasonCode; wording may change, codes may not.
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import Topology


def duration(seconds: float) -> str:
    """Short human duration: 45 s, 12 min, 3.5 h, 2.0 d."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class QuotaReasons:
    """Wordings for quota refusals (see quota.QuotaTree.explain)."""

    @staticmethod
    def no_quota(flavour: str, tenant: str) -> str:
        return f"no quota for {flavour}: neither {tenant} nor its parents have one"

    @staticmethod
    def never(flavour: str, tenant: str, need: int, ceiling: int) -> str:
        return (
            f"needs {need} {flavour} but quota lets {tenant} hold at most {ceiling} "
            "even with its whole cohort idle"
        )

    @staticmethod
    def own_limit(flavour: str, used: int, guaranteed: int, limit: int, need: int) -> str:
        return (
            f"quota of {flavour} used {used}/{guaranteed + limit} (guaranteed {guaranteed}, "
            f"borrowing limit {limit}); needs {need}"
        )

    @staticmethod
    def cohort_limit(flavour: str, cohort: str, room: int, need: int) -> str:
        return (
            f"cohort {cohort} is at its borrowing limit for {flavour}: {room} left to "
            f"borrow, needs {need}"
        )

    @staticmethod
    def cohort_exhausted(
        flavour: str, tenant: str, root: str, guaranteed: int, unused: int, total: int, need: int
    ) -> str:
        if total <= 0:
            if unused > 0:
                detail = f"{tenant}'s {unused} unused guaranteed are lent out"
            else:
                detail = f"{tenant}'s {guaranteed} guaranteed are in use"
            return f"cohort {root} has nothing to lend for {flavour} ({detail}; needs {need})"
        if total < unused:
            return (
                f"needs {need} {flavour}: {unused - total} of {tenant}'s {unused} unused "
                f"guaranteed are lent out and cohort {root} has nothing more to lend"
            )
        return (
            f"cohort {root} can lend only {total - unused} {flavour} ({tenant} has {unused} "
            f"guaranteed unused); needs {need}"
        )


def _where(topology: Topology) -> str:
    if topology is Topology.ONE_NODE:
        return "on one node"
    if topology is Topology.ONE_DOMAIN:
        return "in one NVLink domain"
    return ""


def _shape(count: int, per_pod: int, flavour: str, topology: Topology) -> str:
    if topology is Topology.NONE:
        return f"{_plural(count, 'pod')} x {per_pod} {flavour}"
    return f"{count * per_pod} {flavour} {_where(topology)}"


def node_shortage(
    flavour: str, count: int, per_pod: int, topology: Topology, largest: int, pods_fit: int
) -> str:
    """The shape does not fit the GPUs free right now."""
    shape = _shape(count, per_pod, flavour, topology)
    if topology is Topology.NONE and count > 1:
        return (
            f"needs {shape}; free {flavour} holds {_plural(pods_fit, 'such pod')} "
            f"(largest free block is {largest})"
        )
    return f"needs {shape}; largest free block is {largest}"


def node_never(
    flavour: str, count: int, per_pod: int, topology: Topology, largest: int, pods_cap: int
) -> str:
    """The shape does not fit even an empty cluster."""
    shape = _shape(count, per_pod, flavour, topology)
    if topology is Topology.ONE_DOMAIN:
        return f"needs {shape}; the largest domain has {largest}"
    if topology is Topology.NONE and count > 1:
        return f"needs {shape}; the whole cluster holds {_plural(pods_cap, 'such pod')}"
    return f"needs {shape}; the largest node has {largest}"


def multi_shortage(parts: Sequence[str]) -> str:
    return "needs " + " and ".join(parts) + " placed together; not enough free GPUs"


def waiting_priority(flavour: str) -> str:
    return (
        f"waiting behind higher priority: the {flavour} free at the start of this cycle "
        "went to higher-priority work"
    )


def waiting_fair_share(flavour: str) -> str:
    return (
        f"waiting behind fair share: the {flavour} free at the start of this cycle went "
        "to work ahead of it in the queue (within its guarantee or with a lower share)"
    )


def reserved(job: str, start: float | None, now: float) -> str:
    if start is None:
        return f"reserved for job {job}"
    wait = duration(start - now)
    return (
        f"reserved for job {job} (expected start in ~{wait}); a declared max run time "
        f"under {wait} would let it backfill"
    )


def guarantee_only(flavour: str, tenant: str, pinned: int, guaranteed: int, need: int) -> str:
    return (
        f"cannot be preempted, so it runs only within {tenant}'s guarantee of {flavour}: "
        f"{pinned}/{guaranteed} held by work that cannot be preempted, needs {need}; "
        "choose a preemptible priority class to borrow"
    )


def reclaim_protected(min_run_s: float, left_s: float) -> str:
    return (
        f"borrowed work is not reclaimed in its first {duration(min_run_s)}: the guarantee "
        f"can be reclaimed in ~{duration(max(left_s, 0.0))}"
    )


def released_reservation() -> str:
    return (
        "fits on GPUs held for a job that started this cycle; they are free again in the "
        "next cycle, which will try it"
    )


def reservation_held(
    gpus: int, flavour: str, nodes: Sequence[str], start: float | None, now: float
) -> str:
    shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
    when = "unknown" if start is None else f"in ~{duration(start - now)}"
    return f"holding a reservation for {gpus} {flavour} on {shown}; expected start {when}"


def waiting_reclaim(
    reclaimers: Sequence[str], tenant: str, guaranteed: int, flavour: str, need: int
) -> str:
    who = ", ".join(reclaimers)
    return (
        f"waits for {who}'s reclaim: together they would pass {tenant}'s guarantee of "
        f"{guaranteed} {flavour} (it needs {need})"
    )


def borrowing_waits_for_reclaim(
    reclaimers: Sequence[str], tenant: str, guaranteed: int, flavour: str, need: int
) -> str:
    who = ", ".join(reclaimers)
    return (
        f"waits for {who}'s reclaim: {tenant} borrows no {flavour} beyond its guarantee of "
        f"{guaranteed} while it reclaims it (it needs {need})"
    )


def preempting(count: int, tenants: Sequence[str], flavour: str, reclaim: bool) -> str:
    who = ", ".join(tenants)
    if count == 0:
        if not tenants:
            return f"waiting for {flavour} being released by this cycle's preemptions"
        return f"waiting for preempted workloads of {who} to release {flavour}"
    if reclaim:
        return (
            f"preempting {_plural(count, 'workload')} of {who} to reclaim guaranteed "
            f"{flavour}; starts when they stop"
        )
    return (
        f"preempting {_plural(count, 'lower-priority workload')} of {who} for {flavour}; "
        "starts when they stop"
    )


def budget(reason: str | None) -> str:
    return f"budget: {reason or 'refused by the budget gate'}"


def unknown_tenant(tenant: str) -> str:
    return f"tenant {tenant} is not known to this cluster"


def unknown_flavour(flavours: Sequence[str]) -> str:
    return "no such flavour on this cluster: " + ", ".join(flavours)


def options(parts: Sequence[tuple[str, str]]) -> str:
    """Join the reasons of each acceptable flavour, in the order they were tried."""
    if len(parts) == 1:
        return parts[0][1]
    return "; ".join(f"{flavour}: {message}" for flavour, message in parts)


def admitted_within(flavour: str, used: int, guaranteed: int) -> str:
    return f"within guarantee: {used}/{guaranteed} {flavour} in use"


def admitted_borrowing(flavour: str, borrowed: int, used: int, guaranteed: int, root: str) -> str:
    return (
        f"borrows {borrowed} {flavour} from cohort {root} ({used} in use, {guaranteed} guaranteed)"
    )


def admitted_pinned(flavour: str, pinned: int, guaranteed: int) -> str:
    return (
        f"within guarantee (cannot be preempted): {pinned}/{guaranteed} {flavour} held by such work"
    )


def admitted_backfill(job: str) -> str:
    return f"backfill on GPUs reserved for job {job}: ends before its expected start"


def admitted_reservation() -> str:
    return "started on the GPUs reserved for it"


def preempted_reclaim(
    preemptor: str, preemptor_tenant: str, victim_tenant: str, flavour: str, borrowed: int
) -> str:
    return (
        f"reclaim: {preemptor_tenant} needs its guaranteed {flavour} for {preemptor}; "
        f"{victim_tenant} borrows {borrowed}"
    )


def preempted_priority(preemptor: str, preemptor_priority: int, priority: int) -> str:
    return (
        f"priority: {preemptor} (priority {preemptor_priority}) of the same tenant needs "
        f"the GPUs; this workload has priority {priority}"
    )
