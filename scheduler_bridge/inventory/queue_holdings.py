"""What the admission queue holds on a cluster, as the syncs below the queue count it.

The queue (``scheduler_bridge/workloads``) sits above the inventory and the quotas, yet
the inventory sync must tell queue pods from others and the quota sync must count what
the queue admitted and lends. Their callers pass it in (``workloads.selectors``), so
neither sync reaches up for it: the quota sync takes the holdings themselves, the
inventory sync the function that reads the admitted objects, which it calls once it has
listed the pods (work admitted in between is then still the queue's, not foreign).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from scheduler_bridge.inventory.models import Cluster


@dataclass(frozen=True)
class AdmittedJob:
    """A workload object the queue admitted, as its namespace's ResourceQuota counts it:
    at its full size, whether its pods (and their claims) exist yet or not."""

    namespace: str
    job_name: str
    # its flavour's resource (None: admitted without a flavour) and the GPUs its pods
    # hold under it (those held through ResourceClaims left out)
    resource: str | None
    gpus_as_resource: int
    # devices its pods' own ResourceClaims hold, per device-class quota key
    claimed: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueHoldings:
    admitted: tuple[AdmittedJob, ...] = ()
    # tenant id -> flavour id -> units of the flavour's resource the queue lends it
    # above its guarantee
    lent: Mapping[int, Mapping[int, int]] = field(default_factory=dict)

    @property
    def jobs(self) -> set[tuple[str, str]]:
        """(namespace, object name) of every admitted object: their pods are the queue's."""
        return {(job.namespace, job.job_name) for job in self.admitted}


# reads (namespace, object name) of every object the queue admitted on a cluster
AdmittedJobs: TypeAlias = "Callable[[Cluster], Collection[tuple[str, str]]]"
