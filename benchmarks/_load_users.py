"""The simulated API clients of benchmarks/load.py (a locustfile; run by load.py).

Each user holds one demo login's API token and, between short pauses, lists what people
list most (workloads, quotas, tenants, statements, ...) or submits a one-GPU workload and
cancels it. The plan (tokens, tenants, cluster, flavour) comes from the JSON file named
by LOAD_PLAN.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from pathlib import Path
from typing import Any

from locust import FastHttpUser, between, task


@functools.cache
def plan() -> dict[str, Any]:
    """Read when the first user starts (``make bench`` runs this file alone: no plan)."""
    loaded: dict[str, Any] = json.loads(Path(os.environ["LOAD_PLAN"]).read_text())
    loaded["next_client"] = itertools.cycle(loaded["clients"]).__next__
    return loaded


LISTS = [
    "/api/v1/workloads/",
    "/api/v1/quotas/",
    "/api/v1/tenants/",
    "/api/v1/flavours/",
    "/api/v1/clusters/",
    "/api/v1/priority-classes/",
    "/api/v1/billing/statements/",
    "/api/v1/billing/periods/",
    "/api/v1/billing/budgets/",
    "/api/v1/me/",
]


class ApiClient(FastHttpUser):
    wait_time = between(0.1, 0.5)

    def on_start(self) -> None:
        client = plan()["next_client"]()
        self.tenant: str = client["tenant"]
        self.headers = {"Authorization": f"{plan()['scheme']} {client['token']}"}
        self.lists = itertools.cycle(LISTS)

    @task(8)
    def list_something(self) -> None:
        path = next(self.lists)
        self.client.get(path, headers=self.headers, name=path)

    @task(1)
    def submit_and_cancel(self) -> None:
        body = {
            "cluster": plan()["cluster"],
            "tenant": self.tenant,
            "name": "load-test",
            "pod_sets": [{"count": 1, "gpus_per_pod": 1, "flavour": plan()["flavour"]}],
        }
        with self.client.post(
            "/api/v1/workloads/",
            json=body,
            headers=self.headers,
            name="/api/v1/workloads/ [submit]",
            catch_response=True,
        ) as response:
            if response.status_code != 201:
                response.failure(f"submit answered {response.status_code}: {response.text}")
                return
            workload = response.json()["id"]
        self.client.post(
            f"/api/v1/workloads/{workload}/cancel/",
            headers=self.headers,
            name="/api/v1/workloads/{id}/cancel/",
        )
