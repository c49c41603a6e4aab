"""Django's 404 and 500 answers (urls.handler404 / handler500).

Errors raised inside DRF's views are mapped by tenants.api.errors; these answer what
happens outside them: an API path no route matches, or an error in a middleware or an
unexpected one. An API path gets a problem document, never an HTML page; the database
or broker being down is a 503 with Retry-After everywhere (the portal too), because
the request may simply be tried again.
"""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse
from django.utils.html import escape
from django.utils.translation import gettext
from django.views import defaults

from tenants.api import problems

API_PREFIX = "/api/"


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith(API_PREFIX):
        return problems.problem_response(404, gettext("Not found."))
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    error = sys.exc_info()[1]
    unavailable = error is not None and problems.is_unavailable(error)
    if request.path.startswith(API_PREFIX):
        if unavailable:
            return problems.unavailable_response()
        return problems.problem_response(
            500, gettext("Tidegate failed to answer; the error is logged for its operators.")
        )
    if unavailable:
        # no template: rendering one would ask the database for the navigation again
        page = HttpResponse(
            f"<!doctype html><title>503</title><p>{escape(problems.unavailable_detail())}</p>",
            status=503,
        )
        page["Retry-After"] = str(problems.retry_after_s())
        return page
    return defaults.server_error(request)
