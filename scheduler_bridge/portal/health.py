"""Sync health of a cluster, for platform admins: when inventory, quota and MIG syncs
last ran, how they ended and what went wrong. Higher apps add their own checks (billing:
usage collection and the DCGM labels it found) through ``register_cluster_health``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Max
from django.utils.translation import gettext as _

from scheduler_bridge.inventory.models import Cluster, Node
from tenants.models import NamespaceBinding


@dataclass(frozen=True)
class HealthCheck:
    """One sync's last run: ``ok`` None when it never ran."""

    name: str
    last_run: datetime | None
    ok: bool | None
    summary: str
    errors: list[str] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)


ClusterHealth = Callable[[Cluster], HealthCheck | None]
CLUSTER_HEALTH: list[ClusterHealth] = []


def register_cluster_health(check: ClusterHealth) -> None:
    """Add a check to every cluster's sync health (from a higher app's ready())."""
    if check not in CLUSTER_HEALTH:
        CLUSTER_HEALTH.append(check)


def inventory_health(cluster: Cluster) -> HealthCheck:
    if cluster.status == Cluster.Status.NEW:
        return HealthCheck(_("Inventory"), None, None, _("Not synced yet."))
    nodes = Node.objects.filter(cluster=cluster, present=True).count()
    ok = cluster.status == Cluster.Status.OK
    return HealthCheck(
        _("Inventory"),
        cluster.last_synced_at,
        ok,
        _("%(nodes)s nodes seen.") % {"nodes": nodes},
        [] if ok else [cluster.status_message or _("No message was recorded.")],
    )


def quota_sync_health(cluster: Cluster) -> HealthCheck:
    bindings = NamespaceBinding.objects.filter(cluster_name=cluster.name)
    states = dict(bindings.values_list("sync_state").annotate(n=Count("pk")))
    last_run = bindings.aggregate(last=Max("synced_at"))["last"]
    if not states:
        return HealthCheck(
            _("Quota sync"), None, None, _("No namespace is bound on this cluster yet.")
        )
    failing = list(
        bindings.exclude(sync_state__in=["ok", "pending"])
        .order_by("namespace")
        .values_list("namespace", "sync_message")[:5]
    )
    in_sync = states.get(NamespaceBinding.SyncState.OK, 0)
    summary = _("%(in_sync)s of %(total)s namespaces in sync.") % {
        "in_sync": in_sync,
        "total": sum(states.values()),
    }
    return HealthCheck(
        _("Quota sync"),
        last_run,
        None if last_run is None else not failing,
        summary,
        [f"{namespace}: {message}" for namespace, message in failing],
    )


def mig_health(cluster: Cluster) -> HealthCheck:
    nodes = list(
        Node.objects.filter(cluster=cluster, present=True, mig_capable=True)
        .order_by("name")
        .values_list("name", "mig_config_state", "mig_request_open", "mig_requested_config")
    )
    if not nodes:
        return HealthCheck(_("MIG layouts"), None, None, _("No node of this cluster can use MIG."))
    failed = [name for name, state, _open, _config in nodes if state == "failed"]
    waiting = [f"{name} → {config}" for name, _state, is_open, config in nodes if is_open]
    summary = _("%(nodes)s MIG-capable nodes, %(waiting)s changes being applied.") % {
        "nodes": len(nodes),
        "waiting": len(waiting),
    }
    errors = [
        _("%(node)s: MIG Manager reported a failure; pin a layout to retry.") % {"node": name}
        for name in failed
    ]
    return HealthCheck(
        _("MIG layouts"),
        cluster.last_synced_at,
        not failed,
        summary,
        errors,
        [(_("Being applied"), ", ".join(waiting))] if waiting else [],
    )


def cluster_health(cluster: Cluster) -> list[HealthCheck]:
    checks: list[HealthCheck | None] = [
        inventory_health(cluster),
        quota_sync_health(cluster),
        mig_health(cluster),
    ]
    checks += [check(cluster) for check in CLUSTER_HEALTH]
    return [check for check in checks if check is not None]
