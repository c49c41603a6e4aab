"""Maps errors to HTTP once, for every API view: problem documents (tenants.api.problems)."""

from __future__ import annotations

import logging
import math
from typing import Any

from django.http import Http404
from django.utils.translation import gettext
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from tenants import throttles
from tenants.api import contract, problems
from tenants.errors import TidegateError

logger = logging.getLogger(__name__)

NOT_SIGNED_IN = (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus domain errors as 400/403/409 with field errors, and the
    database or broker down as 503 with Retry-After; every body a problem document.
    None (an unexpected error) lets Django answer 500 (config.errors, also problem JSON)."""
    request = context.get("request")
    headers: dict[str, str] = {}
    if isinstance(exc, TidegateError):
        code = exc.status_code
        body = problems.problem(code, exc.message, fields=exc.as_dict())
    elif isinstance(exc, Http404):
        code = status.HTTP_404_NOT_FOUND
        body = problems.problem(code, gettext("Not found."))
    elif (refused := problems.from_database_refusal(exc)) is not None:
        set_rollback()
        code, body = refused["status"], refused
    elif problems.is_unavailable(exc):
        logger.warning("API request answered 503: %s", exc, exc_info=exc)
        set_rollback()
        code = status.HTTP_503_SERVICE_UNAVAILABLE
        body = problems.problem(code, problems.unavailable_detail())
        headers["Retry-After"] = str(problems.retry_after_s())
    elif isinstance(exc, NOT_SIGNED_IN) and (wait := throttles.take_anonymous(request)):
        # the "anon" rate per address: guessing tokens or probing without one
        code = status.HTTP_429_TOO_MANY_REQUESTS
        body = problems.problem(code, str(exceptions.Throttled(wait).detail))
        headers["Retry-After"] = str(math.ceil(wait))
    else:
        response = drf_exception_handler(exc, context)
        if response is None:
            return None
        code = response.status_code
        body = problems.from_drf_data(code, response.data)
        headers = {name: value for name, value in response.items() if name != "Content-Type"}
    if code == status.HTTP_400_BAD_REQUEST and contract.kept_contract(request):
        # the request matched its schema: refused for what it names or a rule between fields
        code = contract.refusal_status(
            exc.get_codes() if isinstance(exc, exceptions.APIException) else None
        )
        body = {**body, "status": code, "type": problems.problem_type(code)}
        body["title"] = problems.title_of(body["type"], code)
    renderer = getattr(request, "accepted_renderer", None)
    # the browsable API (a browser asking for HTML) keeps its own page
    as_json = renderer is None or getattr(renderer, "format", "json") == "json"
    return Response(
        body,
        status=code,
        headers=headers,
        content_type=problems.PROBLEM_JSON if as_json else None,
    )
