"""Server time and query count of the portal pages people live on, with a year of hourly
ledger data for 200 tenants and 5,000 queued workloads, and the same pages on a small
data set (20 tenants, five weeks, 50 queued) to show whether the query count grows.

Data (benchmarks/_portal_data.py): one organisation, 10 departments, 189 teams; one
cluster of 64 H100 nodes, 64 A100 nodes and 8 H100 nodes cut into 1g.10gb MIG slices;
about 2.1 million hourly ledger rows (every team trains in most hours on one flavour,
the big teams four jobs at once, notebooks in office hours, inference on MIG slices
for a third of the teams), every ended month closed by the product's period close,
budgets for the departments and every fifth team, 20,000 finished workloads, running
work filling most of the cluster and 5,000 queued workloads decided by the product's
admission cycle. The clock is set to the 28th of last month, 12:00 UTC, so the open
month and the budget window hold four weeks whatever day it runs.

Pages, each requested with Django's test client as the role that uses it (one warm-up,
then the median of RUNS requests; `queries` counted with CaptureQueriesContext):

- `lead-dashboard`: the lead of a big team on `/dashboard/<team>/` once that page is
  routed, else the tenant page `/tenants/<team>/` (quota, queue and budget panels);
  `path` says which. `lead-dashboard-subtree`: the same for a department's lead;
  `lead-dashboard-organisation`: for the lead of the whole organisation.
- `cluster-queue`: `/clusters/<name>/queue/` as a platform admin (every queued workload).
- `finance-statement`: `/billing/statements/<pk>/`, the big team's statement of the
  last closed month, as finance.
- `finance-home`: `/billing/` as finance (the open month, priced on the fly);
  `finance-home-closed`: the same for the last closed month.

Prints one JSON line per page: bench, scenario, page, path, role, server_ms, queries,
server_ms_min (the fastest request: the least disturbed by other work on a shared
machine), server_ms_cold (the warm-up request, made with an empty cache: what the first
reader pays with no ledger read kept), sql_ms (median time spent in the database), server_ms_small, queries_small,
the data sizes (tenants, rows, pending, running, workloads and their `_small` twins)
and status. PORTAL_PROFILE=1 also prints, on standard error, each page's top functions
(cProfile), every query it made and the slowest ones with their EXPLAIN ANALYZE;
PORTAL_LARGE_ONLY=1 skips the small data set (its figures are then null).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._portal_data import LARGE, SMALL, Built, Size, benchmark_now, build  # noqa: E402
from benchmarks._support import ROOT, bench_database, emit, progress  # noqa: E402

RUNS = 7
SCENARIO = "year-200-tenants"


@contextmanager
def shifted_clock(moment: datetime) -> Iterator[None]:
    """Django's clock (`timezone.now`, which all of Tidegate reads) runs from ``moment``."""
    from django.utils import timezone

    real = timezone.now
    shift = real() - moment
    timezone.now = lambda: real() - shift
    try:
        yield
    finally:
        timezone.now = real


def pages(built: Built) -> list[tuple[str, str, str]]:
    """(page, role, path) for every page measured on ``built``."""
    from django.urls import Resolver404, resolve

    def dashboard(slug: str) -> str:
        try:
            resolve(f"/dashboard/{slug}/")
        except Resolver404:
            return f"/tenants/{slug}/"
        return f"/dashboard/{slug}/"

    return [
        ("lead-dashboard", "lead", dashboard(built.team)),
        ("lead-dashboard-subtree", "dept", dashboard(built.department)),
        ("lead-dashboard-organisation", "org", dashboard(built.organisation)),
        ("cluster-queue", "admin", "/clusters/east/queue/"),
        ("finance-statement", "finance", f"/billing/statements/{built.statement_pk}/"),
        ("finance-home", "finance", "/billing/"),
        ("finance-home-closed", "finance", f"/billing/?period={built.last_closed}"),
    ]


def measure(username: str, path: str) -> dict[str, Any]:
    """Median server time of RUNS requests after one warm-up, and the queries of one."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1", raise_request_exception=False)
    client.force_login(get_user_model().objects.get(username=username))
    from django.core.cache import cache

    cache.clear()  # the first request reads the ledger with nothing kept
    started = time.perf_counter()
    response = client.get(path)  # warm caches (templates, plotly, URL resolver, ledger reads)
    cold_ms = (time.perf_counter() - started) * 1000
    timings, counts, in_sql = [], [], []
    for _ in range(RUNS):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(path)
            timings.append((time.perf_counter() - started) * 1000)
        counts.append(len(queries.captured_queries))
        in_sql.append(sum(float(q["time"]) for q in queries.captured_queries) * 1000)
    if response.status_code != 200:
        progress(f"!! {path} answered {response.status_code}")
    if os.environ.get("PORTAL_PROFILE"):
        from benchmarks._portal_profile import profile_page

        profile_page(client, path)
    return {
        "server_ms": round(statistics.median(timings), 1),
        "server_ms_min": round(min(timings), 1),
        "server_ms_cold": round(cold_ms, 1),
        "sql_ms": round(statistics.median(in_sql), 1),
        "queries": max(counts),
        "status": response.status_code,
        "bytes": len(response.content),
    }


def run(size: Size, now: datetime) -> tuple[Built, dict[str, dict[str, Any]]]:
    from rich.console import Console
    from rich.progress import track

    console = Console(stderr=True)

    def tracked(items: Any, description: str) -> Any:
        return track(items, description=description, console=console)

    started = time.perf_counter()
    built = build(size, now, tracked)
    progress(
        f"[{size.label}] built in {time.perf_counter() - started:.0f} s: {size.tenants} "
        f"tenants, {built.rows} ledger rows, {built.statements} statements, "
        f"{built.running} running, {built.pending} queued, {built.workloads} workloads"
    )
    figures = {}
    for page, role, path in tracked(pages(built), f"[{size.label}] pages"):
        figures[page] = {"path": path, "role": role, **measure(built.users[role], path)}
        progress(f"[{size.label}] {page} {path}: {figures[page]}")
    return built, figures


def flush() -> None:
    """Empty every table (the schema stays) between the two data sizes."""
    from django.core.management import call_command

    call_command("flush", interactive=False, verbosity=0)


def main() -> None:
    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]
    with bench_database(f"portal_{checkout}"):
        from django.utils import timezone

        now = benchmark_now(timezone.now())
        progress(f"the benchmark's clock starts at {now:%Y-%m-%d %H:%M} UTC")
        with shifted_clock(now):
            small: Built | None = None
            small_figures: dict[str, dict[str, Any]] = {}
            if not os.environ.get("PORTAL_LARGE_ONLY"):
                small, small_figures = run(SMALL, now)
                flush()
            large, large_figures = run(LARGE, now)
        for page, figures in large_figures.items():
            other = small_figures.get(page, {})
            emit(
                bench="portal",
                scenario=SCENARIO,
                page=page,
                path=figures["path"],
                role=figures["role"],
                server_ms=figures["server_ms"],
                queries=figures["queries"],
                server_ms_min=figures["server_ms_min"],
                server_ms_cold=figures["server_ms_cold"],
                sql_ms=figures["sql_ms"],
                server_ms_small=other.get("server_ms"),
                queries_small=other.get("queries"),
                status=figures["status"],
                bytes=figures["bytes"],
                tenants=LARGE.tenants,
                rows=large.rows,
                pending=large.pending,
                running=large.running,
                workloads=large.workloads,
                tenants_small=SMALL.tenants,
                rows_small=small.rows if small else None,
                pending_small=small.pending if small else None,
            )


if __name__ == "__main__":
    main()
