"""Probes for the kubelet and the scrape for Prometheus: answered before host
validation and the HTTPS redirect.

The kubelet and Prometheus call a pod by its IP, over plain HTTP, so an ordinary page
answers 400 (DisallowedHost: the pod IP is not in ALLOWED_HOSTS) or 301 (the SSL
redirect). ``/healthz`` says the process serves requests (liveness: nothing else is
checked, so an outage elsewhere never restarts the pod); ``/readyz`` says whether the pod
can serve requests: it reaches the database and finds every migration applied
(readiness: a pod that cannot is taken out of the Service until it can). It also reports
whether the broker answers, without failing on it: while the broker is down every write
still commits and its background work waits in the outbox (tenants/outbox.py), so taking
the web tier out of rotation would refuse requests that succeed. ``/metrics`` is
config.metrics.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse

from config import metrics

LIVE, READY = "/healthz", "/readyz"

logger = logging.getLogger(__name__)

# Set once every migration was found applied: they are not unapplied under a running
# process, and loading the migration graph on every probe would cost a few ms each.
_migrated = False


class ProbeMiddleware:
    """First in MIDDLEWARE: answers the probe and metrics paths itself, whatever the Host."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == LIVE:
            return HttpResponse("ok\n", content_type="text/plain")
        if request.path == READY:
            return readiness()
        if request.path == metrics.PATH:
            return metrics.scrape(request)
        return self.get_response(request)


# What the pod needs to serve requests; the broker is reported, not required
REQUIRED = ("database", "migrations")


def readiness() -> HttpResponse:
    """200 when the database answers and its migrations are applied, with the broker's
    state beside them (``degraded`` names what answers badly without stopping the pod);
    otherwise 503 naming what is not fine, with Retry-After. Details of a failure go to
    the log only."""
    checks = {"database": _database(), "migrations": "", "broker": _broker()}
    checks["migrations"] = _migrations() if checks["database"] == "ok" else "not checked"
    ready = all(checks[name] == "ok" for name in REQUIRED)
    degraded = [name for name, state in checks.items() if state != "ok" and name not in REQUIRED]
    body: dict[str, object] = {"status": "ready" if ready else "unavailable", "checks": checks}
    if degraded:
        body["degraded"] = degraded
    response = HttpResponse(
        json.dumps(body) + "\n", status=200 if ready else 503, content_type="application/json"
    )
    if not ready:
        response["Retry-After"] = str(settings.TIDEGATE_RETRY_AFTER_S)
    return response


def _database() -> str:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as error:
        # (a broken persistent connection is closed when the request finishes)
        logger.warning("readiness: database unreachable: %s", error)
        return f"unreachable ({type(error).__name__})"
    return "ok"


def _migrations() -> str:
    global _migrated
    if _migrated:
        return "ok"
    try:
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        unapplied = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as error:
        logger.warning("readiness: migrations not readable: %s", error)
        return f"unreachable ({type(error).__name__})"
    if unapplied:
        logger.warning("readiness: %d migrations not applied", len(unapplied))
        return f"{len(unapplied)} not applied"
    _migrated = True
    return "ok"


def _broker() -> str:
    from config.celery_app import app

    timeout = float(settings.TIDEGATE_PROBE_TIMEOUT_S)
    try:
        with app.connection_for_write(connect_timeout=timeout) as connection:
            connection.ensure_connection(max_retries=1, timeout=math.ceil(timeout))
    except Exception as error:  # kombu raises its own and the transport's errors
        logger.warning("readiness: broker unreachable: %s", error)
        return f"unreachable ({type(error).__name__})"
    return "ok"
