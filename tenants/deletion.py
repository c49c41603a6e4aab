"""What keeps a tenant from being deleted.

The tenants app knows about children and namespace bindings. Higher apps (quotas,
workloads, usage) register their own blockers in `AppConfig.ready`, so that this lower
app never imports them.

A blocker's description is read by whoever tried the deletion, in their language: a
blocker returns it as :func:`said` text (worded when it is read, not when it is made),
and :func:`blocker_list` joins them the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from django.utils.functional import Promise, lazy
from django.utils.translation import gettext

from tenants.models import Tenant

# A blocker returns a description of what blocks deletion (see said), or None.
Description = str | Promise
DeletionBlocker = Callable[[Tenant], Description | None]

_blockers: list[DeletionBlocker] = []


def said(render: Callable[[], str]) -> Promise:
    """Text worded by ``render`` (gettext, ngettext) in the language active when it is
    read: an error's message is read in the reader's language, its str() in English."""
    return cast(Promise, lazy(render, str)())


def register_deletion_blocker(blocker: DeletionBlocker) -> None:
    if blocker not in _blockers:
        _blockers.append(blocker)


def _names(shown: list[str], count: int) -> str:
    names = ", ".join(shown)
    if count <= len(shown):
        return names
    return gettext("%(names)s and %(more)s more") % {"names": names, "more": count - len(shown)}


def _children(tenant: Tenant) -> Description | None:
    slugs = list(tenant.children.order_by("slug").values_list("slug", flat=True)[:5])
    if not slugs:
        return None
    count = tenant.children.count()
    return said(
        lambda: (
            gettext("%(count)s sub-tenant(s): %(names)s")
            % {"count": count, "names": _names(slugs, count)}
        )
    )


def _bindings(tenant: Tenant) -> Description | None:
    names = [
        f"{c}/{n}"
        for c, n in tenant.bindings.order_by("cluster_name", "namespace").values_list(
            "cluster_name", "namespace"
        )[:5]
    ]
    if not names:
        return None
    count = tenant.bindings.count()
    return said(
        lambda: (
            gettext("%(count)s namespace binding(s): %(names)s")
            % {"count": count, "names": ", ".join(names)}
        )
    )


register_deletion_blocker(_children)
register_deletion_blocker(_bindings)


def deletion_blockers(tenant: Tenant) -> list[Description]:
    """Everything that still points to `tenant`; empty when it may be deleted."""
    return [reason for blocker in _blockers if (reason := blocker(tenant))]


def _join(parts: Sequence[Description]) -> str:
    text = str(parts[-1])
    for part in reversed(parts[:-1]):
        text = gettext("%(first)s; %(rest)s") % {"first": part, "rest": text}
    return text


def blocker_list(blockers: Sequence[Description]) -> Promise:
    """The blockers as one text (a; b; c), in the language active when it is read."""
    return said(lambda: _join(blockers))
