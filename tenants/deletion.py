"""What keeps a tenant from being deleted.

The tenants app knows about children and namespace bindings. Higher apps (quotas,
workloads, usage) register their own blockers in `AppConfig.ready`, so that this lower
app never imports them.
"""

from __future__ import annotations

from collections.abc import Callable

from tenants.models import Tenant

# A blocker returns a human-readable description of what blocks deletion, or None.
DeletionBlocker = Callable[[Tenant], str | None]

_blockers: list[DeletionBlocker] = []


def register_deletion_blocker(blocker: DeletionBlocker) -> None:
    if blocker not in _blockers:
        _blockers.append(blocker)


def _children(tenant: Tenant) -> str | None:
    slugs = list(tenant.children.order_by("slug").values_list("slug", flat=True)[:5])
    if not slugs:
        return None
    count = tenant.children.count()
    more = f" and {count - len(slugs)} more" if count > len(slugs) else ""
    return f"{count} sub-tenant(s): {', '.join(slugs)}{more}"


def _bindings(tenant: Tenant) -> str | None:
    names = [
        f"{c}/{n}"
        for c, n in tenant.bindings.order_by("cluster_name", "namespace").values_list(
            "cluster_name", "namespace"
        )[:5]
    ]
    if not names:
        return None
    return f"{tenant.bindings.count()} namespace binding(s): {', '.join(names)}"


register_deletion_blocker(_children)
register_deletion_blocker(_bindings)


def deletion_blockers(tenant: Tenant) -> list[str]:
    """Everything that still points to `tenant`; empty when it may be deleted."""
    return [reason for blocker in _blockers if (reason := blocker(tenant))]
