"""Borrowed GPU-seconds, hour by hour: the one rule behind every borrowed figure.

A tenant's guarantee is its own. In each hour and flavour, the device-seconds a tenant
held up to its net guarantee × 3600 (for a shared flavour, in thousandths of a GPU) are
in quota; only what it held beyond that is borrowed, billed at the on-demand rate. A job
admitted while its team was over its guarantee is therefore borrowed only in the hours
the team really was over it, and a team inside its guarantee never pays on-demand.
(Hourly netting against a commitment is how cloud savings plans apply, too.)

Within the hour the borrowed seconds are attributed to the tenant's rows in **reclaim
order**, the order in which the queue takes GPUs back: work that only fills idle GPUs
first, then preemptible work before work that cannot be preempted, lower priority before
higher, the most recently admitted before the older (``Run.order`` in
``scheduler_bridge/admission/state.py``; the queue's own "borrowed now",
``Engine.borrowing_after``, fills the guarantee in the opposite order), then the row held
longer, then its key (so the split is reproducible). Pods that run outside the queue are
never reclaimed, so they come last. Each row carries at most its own device-seconds.

Rows of an hour can arrive in more than one collection (a pod found late): the rows
already in the ledger keep what they were given, and the new ones take what the hour's
total now adds, so that per tenant, flavour and hour the ledger's borrowed seconds are
always max(0, held − guarantee × 3600).

Pure Python: the collector, the demo's generator and the migration that re-derives old
rows all call :func:`borrowed_seconds`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

HOUR_SECONDS = 3600
OUTSIDE_THE_QUEUE = 2**62  # the priority of rows no queue reclaims: after every other
FIRST_TAKEN_BACK = -OUTSIDE_THE_QUEUE  # the priority of work that only fills idle GPUs

HourKey = tuple[int, int, datetime]
"""(tenant id, flavour id, hour start)."""


@dataclass(frozen=True, slots=True)
class Held:
    """What one ledger row held, and where it stands in the reclaim order."""

    tenant_id: int
    flavour_id: int
    hour: datetime
    device_seconds: int
    # smaller is reclaimed sooner: (priority, -admitted epoch) as the queue orders its
    # victims; OUTSIDE_THE_QUEUE for pods the queue does not run
    priority: int = OUTSIDE_THE_QUEUE
    admitted_epoch: float = 0.0
    key: str = ""
    preemptible: bool = True

    @property
    def hour_key(self) -> HourKey:
        return (self.tenant_id, self.flavour_id, self.hour)

    def reclaim_order(self) -> tuple[bool, int, float, int, str]:
        return (
            not self.preemptible,
            self.priority,
            -self.admitted_epoch,
            -self.device_seconds,
            self.key,
        )


def borrowed_seconds(
    rows: Sequence[Held],
    guarantee_seconds: Callable[[int, int, datetime], int],
    already: Mapping[HourKey, tuple[int, int]] | None = None,
) -> list[int]:
    """The borrowed device-seconds of each row, in the order given.

    ``guarantee_seconds(tenant, flavour, hour)``: the tenant's net guarantee of the
    flavour in that hour, in device-seconds. ``already``: per hour key, the
    (held, borrowed) device-seconds of rows in the ledger before these."""
    already = already or {}
    by_hour: dict[HourKey, list[int]] = {}
    for index, row in enumerate(rows):
        by_hour.setdefault(row.hour_key, []).append(index)
    result = [0] * len(rows)
    for hour_key, members in by_hour.items():
        held_before, borrowed_before = already.get(hour_key, (0, 0))
        held = held_before + sum(rows[i].device_seconds for i in members)
        own = max(0, guarantee_seconds(*hour_key))
        to_attribute = max(0, held - own) - borrowed_before
        for index in sorted(members, key=lambda i: rows[i].reclaim_order()):
            if to_attribute <= 0:
                break
            taken = min(rows[index].device_seconds, to_attribute)
            result[index] = taken
            to_attribute -= taken
    return result
