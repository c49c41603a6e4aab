"""API errors as problem documents (RFC 9457, ``application/problem+json``).

Every error body carries ``type`` (a URI naming the kind of problem), ``title`` (its
short summary), ``status`` and ``detail`` (what went wrong this time, and how to fix it).
Field errors keep the shape clients already read, one list of messages per field, both
at the top level (as before; not for a field named like a problem member) and under
``errors`` (all of them). ``about:blank`` means the status code says it all.

A database or broker that does not answer is a 503 with ``Retry-After``: the request may
be tried again as it is (docs/operations.md#errors).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.db import DataError, InterfaceError, OperationalError
from django.db.models import ProtectedError, RestrictedError
from django.http import JsonResponse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from kombu.exceptions import OperationalError as BrokerUnavailable

PROBLEM_JSON = "application/problem+json"
BLANK = "about:blank"
INVALID_INPUT = "https://tidegate.io/problems/invalid-input"
CONFLICT = "https://tidegate.io/problems/conflict"
UNAVAILABLE = "https://tidegate.io/problems/unavailable"
REFUSED = "https://tidegate.io/problems/refused"

# problem members that a field error must not overwrite at the top level
MEMBERS = frozenset({"type", "title", "status", "detail", "instance", "errors"})

TITLES = {
    INVALID_INPUT: _("Invalid input"),
    CONFLICT: _("Conflicts with the current state"),
    UNAVAILABLE: _("Temporarily unavailable"),
    REFUSED: _("Well formed, but cannot be done"),
}

# The errors that mean a dependency is down, not that the request is wrong: the database
# refusing or dropping connections (psycopg's OperationalError, which Django re-raises as
# its own), or Celery unable to reach the broker to queue a task.
UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (
    OperationalError,
    InterfaceError,
    BrokerUnavailable,
)


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database or the broker is down."""
    return isinstance(error, UNAVAILABLE_ERRORS)


def from_database_refusal(error: BaseException) -> dict[str, Any] | None:
    """The problem document for a change or a value the database refused (a row still
    used by others: 409; a value it cannot store: 400), or None for any other error."""
    if isinstance(error, ProtectedError | RestrictedError):
        return still_in_use(
            error.protected_objects
            if isinstance(error, ProtectedError)
            else error.restricted_objects
        )
    if isinstance(error, DataError):
        return problem(
            HTTPStatus.BAD_REQUEST,
            gettext(
                "A value in the request cannot be stored (too large, out of range or "
                "holding a NUL character); correct it and try again."
            ),
        )
    return None


def still_in_use(users: Any) -> dict[str, Any]:
    """409: what still refers to the row a request tried to delete, by kind and count."""
    counts: dict[str, int] = {}  # by model name (stable, for programs)
    names: dict[str, str] = {}  # and as people read it, in the request's language
    for row in users:
        kind = row._meta.model_name
        counts[kind] = counts.get(kind, 0) + 1
        names[kind] = str(row._meta.verbose_name_plural)
    named = ", ".join(f"{counts[kind]} {names[kind]}" for kind in sorted(counts))
    body = problem(
        HTTPStatus.CONFLICT,
        gettext("It is still used by %(users)s; delete or move those first, then try again.")
        % {"users": named},
    )
    body["used_by"] = counts
    return body


def retry_after_s() -> int:
    return int(settings.TIDEGATE_RETRY_AFTER_S)


def problem_type(status: int) -> str:
    if status == HTTPStatus.BAD_REQUEST:
        return INVALID_INPUT
    if status == HTTPStatus.CONFLICT:
        return CONFLICT
    if status == HTTPStatus.SERVICE_UNAVAILABLE:
        return UNAVAILABLE
    if status == HTTPStatus.UNPROCESSABLE_ENTITY:
        return REFUSED
    return BLANK


def title_of(kind: str, status: int) -> str:
    title = TITLES.get(kind)
    return str(title) if title is not None else HTTPStatus(status).phrase


def problem(
    status: int,
    detail: str,
    *,
    fields: Mapping[str, Sequence[Any]] | None = None,
    kind: str | None = None,
) -> dict[str, Any]:
    """The problem document for a ``status`` response saying ``detail``."""
    kind = kind or problem_type(status)
    body: dict[str, Any] = {
        "type": kind,
        "title": title_of(kind, status),
        "status": status,
        "detail": detail,
    }
    if fields:
        errors = {name: _messages(value) for name, value in fields.items()}
        body.update({name: value for name, value in errors.items() if name not in MEMBERS})
        body["errors"] = errors
    return body


def from_drf_data(status: int, data: Any) -> dict[str, Any]:
    """A problem document from the body DRF built for an APIException."""
    if isinstance(data, Mapping):
        data = dict(data)
        detail = data.pop("detail", None)
        if detail is not None and not data:
            return problem(status, str(detail))
        if detail is not None:
            data["detail"] = [detail]
        return problem(status, summary(data), fields=data)
    if isinstance(data, list):
        return problem(
            status, summary({"non_field_errors": data}), fields={"non_field_errors": data}
        )
    return problem(status, str(data))


def summary(fields: Mapping[str, Any]) -> str:
    """One line naming every field that was wrong and its first message."""
    parts = []
    for name, value in fields.items():
        text = _first_message(value)
        parts.append(text if name == "non_field_errors" else f"{name}: {text}")
    return "; ".join(parts) or HTTPStatus.BAD_REQUEST.phrase


def unavailable_response() -> JsonResponse:
    """503 problem JSON with Retry-After, for requests outside DRF's views."""
    response = JsonResponse(
        problem(HTTPStatus.SERVICE_UNAVAILABLE, unavailable_detail()),
        status=HTTPStatus.SERVICE_UNAVAILABLE,
        content_type=PROBLEM_JSON,
    )
    response["Retry-After"] = str(retry_after_s())
    return response


def unavailable_detail() -> str:
    return gettext(
        "Tidegate cannot reach its database or task queue right now; "
        "try again in %(seconds)s seconds."
    ) % {"seconds": retry_after_s()}


def problem_response(status: int, detail: str) -> JsonResponse:
    """A problem JSON response for requests outside DRF's views (404, 500)."""
    return JsonResponse(problem(status, detail), status=status, content_type=PROBLEM_JSON)


def _messages(value: Any) -> Any:
    """A field's errors: a list of messages, or as nested serializers give them (a dict
    by index or sub-field, kept as it is)."""
    if isinstance(value, Mapping):
        return {str(key): _messages(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [v if isinstance(v, Mapping | list) else str(v) for v in value]
    return [str(value)]


def _first_message(value: Any) -> str:
    if isinstance(value, Mapping):
        key, inner = next(iter(value.items()), ("", ""))
        return f"{key}: {_first_message(inner)}" if key != "" else ""
    if isinstance(value, list | tuple):
        return _first_message(value[0]) if value else ""
    return str(value)
