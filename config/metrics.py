"""Prometheus metrics: the ``/metrics`` endpoint, request counts and latencies, and a
port of its own for Celery workers (docs/operations.md#metrics).

``/metrics`` is off (404) until ``TIDEGATE_METRICS_TOKEN`` is set; then it asks for
``Authorization: Bearer <token>`` (401 without it). It is answered by the first
middleware (config.health), whatever the Host header, like the probes: Prometheus scrapes
pods by IP over plain HTTP.

Several processes (gunicorn workers, Celery's prefork children) each count their own;
with ``PROMETHEUS_MULTIPROC_DIR`` set (an empty directory shared by the processes of
one pod, set before they start) prometheus_client keeps the counts in files there and a
scrape adds up every process's. Gauges read from the database (tenants.metrics) are
served by ``/metrics`` only, so a worker's port never repeats them.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Callable, Iterator

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from tenants.metrics import read_gauges, register_gauge

__all__ = ["register_gauge", "scrape", "serve_worker_metrics", "RequestMetricsMiddleware"]

PATH = "/metrics"

REQUESTS = Counter(
    "tidegate_http_requests_total",
    "HTTP requests answered, by route name, method and status code.",
    ["route", "method", "status"],
)
LATENCY = Histogram(
    "tidegate_http_request_duration_seconds",
    "Time to answer an HTTP request, by route name and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# anything else is counted as "other", so made-up methods cannot grow the series
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def _process_registry() -> CollectorRegistry:
    """What this process (or, in multiprocess mode, every process of the pod) counted."""
    if not multiprocess():
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    return registry


class _Scrape:
    """The counted series plus the gauges read from the database."""

    def __init__(self, counted: CollectorRegistry) -> None:
        self.counted = counted

    def collect(self) -> Iterator[Metric]:
        yield from self.counted.collect()
        yield from read_gauges.collect()


def scrape(request: HttpRequest) -> HttpResponse:
    """``/metrics``: 404 while no token is set, 401 without the right one."""
    token = settings.TIDEGATE_METRICS_TOKEN
    if not token:
        return HttpResponse("not found\n", status=404, content_type="text/plain")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), token):
        response = HttpResponse(
            "a bearer token is required (TIDEGATE_METRICS_TOKEN)\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body = generate_latest(_Scrape(_process_registry()))  # type: ignore[arg-type]
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def serve_worker_metrics(port: int) -> None:
    """Serve this worker's counts (all its pool processes' in multiprocess mode) on
    ``port`` (``TIDEGATE_METRICS_PORT``): a Celery worker has no HTTP of its own. The port
    has no token: keep it inside the cluster (no Service, a NetworkPolicy)."""
    start_http_server(port, registry=_process_registry())


class RequestMetricsMiddleware:
    """Counts and times every request by the name of the route that answered it
    (``workload-list``), not its path, so ids in URLs do not make new series."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        route = _route(request)
        method = request.method if request.method in METHODS else "other"
        LATENCY.labels(route, method).observe(time.perf_counter() - started)
        REQUESTS.labels(route, method, str(response.status_code)).inc()
        return response


def _route(request: HttpRequest) -> str:
    match = request.resolver_match
    if match is not None:
        return match.view_name or match.route or "unnamed"
    if request.path.startswith(settings.STATIC_URL):
        return "static"
    return "unmatched"
