"""The ResourceQuota rule, pure: what `tidegate-gpu` in each bound namespace must say.

Pods created outside Tidegate's queue must never take a tenant past its guarantee plus
what the queue has lent it. Kubernetes enforces quota per namespace, so a tenant's
ceiling is split over its namespaces:

    ceiling(tenant, resource) = sum of the tenant's guarantees of flavours with that
                                resource + GPUs the queue currently lends the tenant
    hard(namespace) = used(namespace) + a share of the headroom,
    headroom = max(0, ceiling - sum of used over the tenant's namespaces),

shared evenly over the tenant's namespaces in name order, the first ones taking the
remainder. The limits of a tenant's namespaces therefore always add up to
max(ceiling, used): nothing new can start once the ceiling is reached, and running pods
are never pushed over their namespace's limit (Kubernetes would refuse none of them, but
the numbers stay honest). Every GPU resource of the cluster appears in every quota, with
0 where the tenant holds no guarantee, so an unbound resource cannot be taken at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

QUOTA_NAME = "tidegate-gpu"


@dataclass(frozen=True)
class TenantNamespaces:
    tenant: str
    namespaces: tuple[str, ...]
    ceiling: Mapping[str, int]  # resource name -> guarantee + lent by the queue


def quota_key(resource: str) -> str:
    """Extended resources are limited only through the `requests.` prefix."""
    return f"requests.{resource}"


def desired_hard_limits(
    tenants: Iterable[TenantNamespaces],
    used: Mapping[str, Mapping[str, int]],
    resources: Iterable[str],
) -> dict[str, dict[str, str]]:
    """`spec.hard` of the ResourceQuota of every namespace (values as quantity strings).

    `used` maps namespace -> resource -> GPUs requested by its running or pending pods.
    """
    resource_names = sorted(set(resources))
    desired: dict[str, dict[str, str]] = {}
    for tenant in tenants:
        namespaces = sorted(tenant.namespaces)
        if not namespaces:
            continue
        for namespace in namespaces:
            desired[namespace] = {}
        for resource in resource_names:
            in_use = {ns: used.get(ns, {}).get(resource, 0) for ns in namespaces}
            headroom = max(0, tenant.ceiling.get(resource, 0) - sum(in_use.values()))
            share, remainder = divmod(headroom, len(namespaces))
            for position, namespace in enumerate(namespaces):
                limit = in_use[namespace] + share + (1 if position < remainder else 0)
                desired[namespace][quota_key(resource)] = str(limit)
    return desired
