"""Probes for the kubelet: answered before host validation and the HTTPS redirect.

The kubelet calls a pod by its IP, over plain HTTP, so a probe of an ordinary page
answers 400 (DisallowedHost: the pod IP is not in ALLOWED_HOSTS) or 301 (the SSL
redirect). ``/healthz`` says the process serves requests (liveness); ``/readyz`` also
reaches the database (readiness: a pod that cannot is taken out of the Service).
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse

LIVE, READY = "/healthz", "/readyz"


class ProbeMiddleware:
    """First in MIDDLEWARE: answers the two probe paths itself, whatever the Host."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == LIVE:
            return HttpResponse("ok\n", content_type="text/plain")
        if request.path == READY:
            try:
                connection.ensure_connection()
            except DatabaseError as error:
                return HttpResponse(
                    f"database unreachable: {error}\n", status=503, content_type="text/plain"
                )
            return HttpResponse("ready\n", content_type="text/plain")
        return self.get_response(request)
