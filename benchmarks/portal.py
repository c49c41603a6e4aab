"""Server time and query count of each portal page, on the demo data in PostgreSQL.

Prints one JSON line per page: bench, scenario, page, server_ms (median of 5 renders
after a warm-up), queries.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._support import bench_database, emit, progress  # noqa: E402

# (page name, user, path)
PAGES = [
    ("home", "research-admin", "/"),
    ("tenant", "research-admin", "/tenants/vision/"),
    ("tenant-lead", "vision-lead", "/tenants/vision/"),
    ("clusters", "admin", "/clusters/"),
    ("cluster", "admin", "/clusters/demo/"),
    ("queue", "admin", "/clusters/demo/queue/"),
    ("workload", "vision-lead", "/workloads/{resnet_sweep}/"),
    ("audit", "admin", "/audit/"),
    ("billing", "finance", "/billing/"),
]
RUNS = 5


def main() -> None:
    with bench_database("portal"):
        from django.contrib.auth import get_user_model
        from django.db import connection
        from django.test import Client
        from django.test.utils import CaptureQueriesContext

        from tenants.demo import seed_demo

        progress("seeding the demo data ...")
        seed_demo()
        from scheduler_bridge.workloads.models import Workload

        ids = {"resnet_sweep": Workload.objects.get(name="resnet-sweep").pk}
        users = get_user_model().objects
        for page, username, template in PAGES:
            path = template.format(**ids)
            client = Client(HTTP_HOST="127.0.0.1")
            client.force_login(users.get(username=username))
            client.get(path)  # warm caches (templates, plotly, URL resolver)
            timings = []
            for _ in range(RUNS):
                with CaptureQueriesContext(connection) as queries:
                    started = time.perf_counter()
                    response = client.get(path)
                    timings.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (path, response.status_code)
            emit(
                bench="portal",
                scenario=page,
                page=path,
                server_ms=round(statistics.median(timings), 1),
                queries=len(queries.captured_queries),
            )


if __name__ == "__main__":
    main()
