"""Domain errors of the tenants app; the API layer maps them to HTTP once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.utils import translation
from django.utils.functional import Promise

Message = str | Promise  # a gettext_lazy template, or text already worded


class TidegateError(Exception):
    """Base of every domain error: the message tells the user what was wrong and what to do.

    ``message`` is a template marked with gettext_lazy and ``params`` fill its named
    placeholders, so the same error reads in the language of whoever sees it: ``.message``
    renders in the active language (the request's, in the API and the portal), ``str()``
    of the error is English (logs, tracebacks)."""

    status_code = 400
    field: str | None = None

    def __init__(
        self,
        message: Message,
        *,
        params: Mapping[str, object] | None = None,
        field: str | None = None,
        field_errors: Mapping[str, Sequence[Message]] | None = None,
    ) -> None:
        self.template = message
        self.params = dict(params or {})
        with translation.override("en"):
            english = self._render()
        super().__init__(english)
        if field is not None:
            self.field = field
        self._field_errors = dict(field_errors or {})

    def _render(self) -> str:
        # a lazy template's own % picks the plural form of an ngettext_lazy one
        return str(self.template % self.params) if self.params else str(self.template)

    @property
    def message(self) -> str:
        """The message in the active language."""
        return self._render()

    @property
    def field_errors(self) -> dict[str, list[str]]:
        """Field errors given at raise time, in the active language."""
        return {name: [str(m) for m in messages] for name, messages in self._field_errors.items()}

    def as_dict(self) -> dict[str, list[str]]:
        """Field errors as DRF and forms show them: {"field": ["message"]}."""
        if self._field_errors:
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
