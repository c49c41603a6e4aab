"""The ledger's capacity invariant: what it says was held must have been possible.

Per cluster, flavour and hour, the device-seconds the ledger holds never exceed the
flavour's capacity over that hour (capacity x 3600 while it did not change; for a shared
flavour, in thousandths of a GPU). A breach means rows were written twice over or dated
wrongly; the collector checks each batch it writes and reports a breach as a problem, and
the tests check the demo's ledger.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Sum

from billing.charging.history import capacity_pieces
from billing.models import UsageRecord
from scheduler_bridge.inventory.models import SHARE_UNITS_PER_GPU, Flavour

HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class OverCapacity:
    cluster_id: int
    flavour: str
    hour: datetime
    held: int  # device-seconds in the ledger
    possible: int  # capacity over the hour, in device-seconds

    def __str__(self) -> str:
        return (
            f"{self.flavour} at {self.hour:%Y-%m-%d %H:00} UTC: the ledger holds "
            f"{self.held} device-seconds, more than its capacity allows ({self.possible})"
        )


def hours_over_capacity(
    start: datetime, end: datetime, cluster_ids: set[int] | None = None
) -> list[OverCapacity]:
    """The (cluster, flavour, hour) of [start, end) whose ledger rows hold more than the
    flavour's capacity allowed, oldest first."""
    rows = UsageRecord.objects.filter(interval_start__gte=start, interval_start__lt=end)
    if cluster_ids is not None:
        rows = rows.filter(cluster_id__in=cluster_ids)
    sums = list(
        rows.values("cluster_id", "flavour_id", "interval_start")
        .annotate(held=Sum("gpu_seconds_allocated"))
        .order_by("interval_start", "flavour_id")
    )
    if not sums:
        return []
    flavours = {
        f.pk: f
        for f in Flavour.objects.filter(pk__in={row["flavour_id"] for row in sums}).only(
            "pk", "name", "sharing", "capacity"
        )
    }
    pieces: dict[int, list[tuple[datetime, datetime, int]]] = defaultdict(list)
    for piece in capacity_pieces(start, end):
        pieces[piece.flavour_id].append((piece.start, piece.end, piece.units))
    found = []
    for row in sums:
        flavour = flavours.get(row["flavour_id"])
        if flavour is None:
            continue
        hour = row["interval_start"]
        seconds = 0
        for lo, hi, units in pieces.get(flavour.pk, ()):
            overlap = (min(hi, hour + HOUR) - max(lo, hour)).total_seconds()
            if overlap > 0:
                seconds += units * int(overlap)
        possible = seconds * (SHARE_UNITS_PER_GPU if flavour.sharing else 1)
        if int(row["held"]) > possible:
            found.append(OverCapacity(row["cluster_id"], flavour.name, hour, row["held"], possible))
    return found
