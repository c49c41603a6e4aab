"""Who may write through the scheduler-bridge API."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from tenants import access


class PlatformAdminWrites(BasePermission):
    """Signed-in users read what the queryset shows them; only platform admins write.
    Anonymous callers get nothing (401), not even the reads."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return access.is_platform_admin(request.user)
