"""Input every view would otherwise have to refuse on its own, refused once.

- A body larger than DATA_UPLOAD_MAX_MEMORY_SIZE (by its Content-Length): 413.
- A NUL character in a path or query parameter: 400 naming the parameter (PostgreSQL
  stores no NUL in text, so the lookup would fail as a database error).

API paths get problem documents (tenants.api.problems), other paths a plain page.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext

from tenants.api import problems
from tenants.api.parsers import NUL, nul_message, too_large_detail

API_PREFIX = "/api/"


class InputGuardMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        if _content_length(request) > limit:
            return _refuse(request, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, too_large_detail(limit))
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        named = [name for name, value in kwargs.items() if NUL in str(value)]
        if any(NUL in str(value) for value in args):
            named.append("path")
        for name, values in request.GET.lists():
            if NUL in name or any(NUL in value for value in values):
                named.append(name.replace(NUL, "\\u0000"))
        if not named:
            return None
        return _refuse(
            request,
            HTTPStatus.BAD_REQUEST,
            gettext("A parameter holds a NUL character: %(names)s.") % {"names": ", ".join(named)},
            fields={name: [nul_message()] for name in named},
        )


def _content_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _refuse(
    request: HttpRequest,
    status: int,
    detail: str,
    fields: dict[str, list[str]] | None = None,
) -> HttpResponse:
    if request.path.startswith(API_PREFIX):
        return JsonResponse(
            problems.problem(status, detail, fields=fields),
            status=status,
            content_type=problems.PROBLEM_JSON,
        )
    return HttpResponse(detail, status=status, content_type="text/plain; charset=utf-8")
