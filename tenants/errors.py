"""Domain errors of the tenants app; the API layer maps them to HTTP once."""

from __future__ import annotations


class TidegateError(Exception):
    """Base of every domain error: the message tells the user what was wrong and what to do."""

    status_code = 400
    field: str | None = None

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        field_errors: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if field is not None:
            self.field = field
        self.field_errors = field_errors or {}

    def as_dict(self) -> dict[str, list[str]]:
        """Field errors as DRF and forms show them: {"field": ["message"]}."""
        if self.field_errors:
            return self.field_errors
        return {self.field: [self.message]} if self.field else {}


class ValidationFailed(TidegateError):
    """Input broke a rule (HTTP 400)."""


class PermissionDenied(TidegateError):
    """The user may see the object but not do this to it (HTTP 403)."""

    status_code = 403


class Conflict(TidegateError):
    """The change conflicts with the current state (HTTP 409); nothing was written."""

    status_code = 409


class TreeCycle(ValidationFailed):
    field = "parent"


class TenantInUse(Conflict):
    """A tenant cannot be deleted while something still points to it."""


class NamespaceAlreadyBound(ValidationFailed):
    field = "namespace"
