"""Maps domain errors to HTTP once, for every API view."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from tenants.errors import TidegateError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus domain errors as 400/403/409 with field errors."""
    if isinstance(exc, TidegateError):
        body: dict[str, Any] = dict(exc.as_dict())
        body.setdefault("detail", exc.message)
        return Response(body, status=exc.status_code)
    if isinstance(exc, Http404):
        return Response({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    return drf_exception_handler(exc, context)
