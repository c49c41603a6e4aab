"""The ResourceQuota rule, pure: what `tidegate-gpu` in each bound namespace must say.

Pods created outside Tidegate's queue must never take a tenant past its guarantee plus
what the queue has lent it. Kubernetes enforces quota per namespace, so a tenant's
ceiling is split over its namespaces:

    ceiling(tenant, resource) = sum of the tenant's guarantees of flavours with that
                                resource + GPUs the queue currently lends the tenant

(and likewise for the devices of each device class that serves GPUs, whose key is
``<class>.deviceclass.resource.k8s.io/devices``: the sum over the flavours of the
devices it admits; docs/dra.md#enforcement)
    hard(namespace) = used(namespace) + a share of the headroom,
    headroom = max(0, ceiling - sum of used over the tenant's namespaces),

shared evenly over the tenant's namespaces in name order, the first ones taking the
remainder. The limits of a tenant's namespaces therefore always add up to
max(ceiling, used): nothing new can start once the ceiling is reached, and running pods
are never pushed over their namespace's limit (Kubernetes would refuse none of them, but
the numbers stay honest). Every GPU resource of the cluster appears in every quota, with
0 where the tenant holds no guarantee, so an unbound resource cannot be taken at all.

Limits already in the cluster are kept while they still hold: they add up to
max(ceiling, used), no namespace is below what it uses, and every namespace keeps at
least half of its even share of the headroom (rounded up). A pod starting or finishing
inside those bounds changes no quota; the tenant's limits are split anew only when one
of the bounds breaks (a guarantee or loan changed, a namespace ran low on headroom, a
namespace was bound or unbound, somebody edited a quota). Every ResourceQuota write
costs the API server a write to etcd and a recount by the quota controller, so a busy
cluster's churn should not rewrite hundreds of them per sync.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler_bridge.dra.demand import DEVICE_CLASS_QUOTA_SUFFIX

QUOTA_NAME = "tidegate-gpu"


@dataclass(frozen=True)
class TenantNamespaces:
    tenant: str
    namespaces: tuple[str, ...]
    # resource name (or device-class key) -> guarantee + lent by the queue
    ceiling: Mapping[str, int]


def quota_key(resource: str) -> str:
    """Extended resources are limited only through the `requests.` prefix; a device
    class's key (``<class>.deviceclass.resource.k8s.io/devices``) is passed as it is."""
    if resource.endswith(DEVICE_CLASS_QUOTA_SUFFIX):
        return resource
    return f"requests.{resource}"


def desired_hard_limits(
    tenants: Iterable[TenantNamespaces],
    used: Mapping[str, Mapping[str, int]],
    resources: Iterable[str],
    current: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, dict[str, str]]:
    """`spec.hard` of the ResourceQuota of every namespace (values as quantity strings).

    `used` maps namespace -> resource -> GPUs requested by its running or pending pods;
    `current` maps namespace -> the `spec.hard` its quota has now (omit it, or leave a
    namespace out, to split anew).
    """
    resource_names = sorted(set(resources))
    current = current or {}
    desired: dict[str, dict[str, str]] = {}
    for tenant in tenants:
        namespaces = sorted(tenant.namespaces)
        if not namespaces:
            continue
        for namespace in namespaces:
            desired[namespace] = {}
        for resource in resource_names:
            key = quota_key(resource)
            in_use = {ns: used.get(ns, {}).get(resource, 0) for ns in namespaces}
            headroom = max(0, tenant.ceiling.get(resource, 0) - sum(in_use.values()))
            limits = _kept_limits(current, key, in_use, headroom)
            if limits is None:
                limits = _even_split(namespaces, in_use, headroom)
            for namespace in namespaces:
                desired[namespace][key] = str(limits[namespace])
    return desired


def _even_split(namespaces: list[str], in_use: dict[str, int], headroom: int) -> dict[str, int]:
    share, remainder = divmod(headroom, len(namespaces))
    return {
        namespace: in_use[namespace] + share + (1 if position < remainder else 0)
        for position, namespace in enumerate(namespaces)
    }


def _kept_limits(
    current: Mapping[str, Mapping[str, str]], key: str, in_use: dict[str, int], headroom: int
) -> dict[str, int] | None:
    """The namespaces' current limits of ``key`` if they still hold (see the module
    docstring), else None."""
    limits: dict[str, int] = {}
    for namespace in in_use:
        value = (current.get(namespace) or {}).get(key)
        if value is None or not value.isdigit():
            return None  # missing, or not written by this rule (e.g. "1k" by hand)
        limits[namespace] = int(value)
    if sum(limits.values()) != sum(in_use.values()) + headroom:
        return None
    floor = (headroom // len(in_use) + 1) // 2  # half the even share, rounded up
    if any(limits[ns] - in_use[ns] < floor for ns in in_use):
        return None
    return limits
