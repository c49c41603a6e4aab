"""Where a portal page spends its time (benchmarks/portal.py with PORTAL_PROFILE=1): the
top functions of one request under cProfile and its slowest queries, each with
PostgreSQL's EXPLAIN ANALYZE, printed on standard error."""

from __future__ import annotations

import cProfile
import io
import pstats
from typing import Any

TOP_FUNCTIONS = 25
SLOWEST_QUERIES = 4


def profile_page(client: Any, path: str) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from benchmarks._support import progress

    profiler = cProfile.Profile()
    with CaptureQueriesContext(connection) as queries:
        profiler.enable()
        client.get(path)
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(TOP_FUNCTIONS)
    stats.sort_stats("tottime").print_stats(TOP_FUNCTIONS)
    progress(f"===== profile of {path}\n{out.getvalue()}")
    captured = sorted(queries.captured_queries, key=lambda q: -float(q["time"]))
    total = sum(float(q["time"]) for q in captured)
    progress(f"===== {len(captured)} queries, {total * 1000:.0f} ms in SQL, in order:")
    for query in queries.captured_queries:
        progress(f"  {float(query['time']) * 1000:6.1f} ms  {query['sql'][:240]}")
    progress("===== the slowest, explained:")
    for query in captured[:SLOWEST_QUERIES]:
        sql = query["sql"]
        progress(f"--- {float(query['time']) * 1000:.1f} ms: {sql[:1500]}")
        if sql.lstrip().upper().startswith("SELECT"):
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
                plan = "\n".join(row[0] for row in cursor.fetchall())
            progress(plan)
