"""Navigation for the base layout, by role."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from django.utils.translation import gettext as _

from tenants import access
from tenants.models import Role

# Higher apps add their own navigation entries here from AppConfig.ready:
# (url name, label, the roles that see it; None = everyone signed in).
NAV_ENTRIES: list[tuple[str, Any, frozenset[str] | None]] = []


# url name -> how many things wait there for the user (shown after the label when > 0).
NAV_COUNTS: dict[str, Callable[[Any], int]] = {}


def register_nav_entry(
    url_name: str,
    label: Any,
    roles: frozenset[str] | None = None,
    count: Callable[[Any], int] | None = None,
) -> None:
    if all(entry[0] != url_name for entry in NAV_ENTRIES):
        NAV_ENTRIES.append((url_name, label, roles))
    if count is not None:
        NAV_COUNTS[url_name] = count


def _counted(url_name: str, label: Any, user: Any) -> Any:
    count = NAV_COUNTS.get(url_name)
    waiting = count(user) if count is not None else 0
    if not waiting:
        return label
    return _("%(label)s (%(count)s waiting)") % {"label": label, "count": waiting}


def navigation(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_entries": []}
    platform_admin = access.is_platform_admin(user)
    held = set(Role.values) if platform_admin else set(access.roles_held(user))
    entries = [
        (url_name, _counted(url_name, label, user))
        for url_name, label, roles in NAV_ENTRIES
        if roles is None or platform_admin or held & roles
    ]
    return {
        "nav_entries": entries,
        "is_platform_admin": platform_admin,
        "is_tenant_admin": platform_admin or Role.ADMIN in held,
    }
