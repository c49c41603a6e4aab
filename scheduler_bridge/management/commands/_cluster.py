"""Shared argument handling for commands that take `--cluster NAME`."""

from __future__ import annotations

from django.core.management.base import CommandError

from scheduler_bridge.inventory.models import Cluster


def cluster_named(name: str) -> Cluster:
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        known = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none yet"
        raise CommandError(f"No cluster named {name!r}; known clusters: {known}.")
    return cluster
