"""A cycle's decisions are saved exactly, however many there are (bound parameters for a
few rows, COPY through a staging table for many)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.persist import COPY_FROM_ROWS, update_workloads
from tests.conftest import Cast
from tests.factories import ClusterFactory, FlavourFactory, WorkloadFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("count", [3, COPY_FROM_ROWS + 20])
def test_every_row_gets_its_own_values_null_and_json_included(cast: Cast, count: int) -> None:
    cluster = ClusterFactory()
    flavour = FlavourFactory(cluster=cluster)
    workloads = WorkloadFactory.create_batch(count, cluster=cluster, tenant=cast.team_a)
    now = timezone.now()
    rows = [
        {
            "id": w.pk,
            "state": "admitted" if i % 2 else "pending",
            "admitted_at": now - timedelta(seconds=i) if i % 2 else None,
            "flavour_id": flavour.pk if i % 2 else None,
            "placements": [{"node": f"n{i}", "flavour": "h100-80gb", "gpus": i % 8}],
            "reason": f"reason {i} with 'quotes', \\\\ and a\ttab",
        }
        for i, w in enumerate(workloads)
    ]
    update_workloads(rows, ["state", "admitted_at", "flavour_id", "placements", "reason"])
    saved = Workload.objects.in_bulk([w.pk for w in workloads])
    for i, row in enumerate(rows):
        workload = saved[row["id"]]
        assert workload.state == row["state"] and workload.admitted_at == row["admitted_at"]
        assert workload.flavour_id == row["flavour_id"]
        assert workload.placements == row["placements"] and workload.reason == row["reason"]
        assert workload.name == workloads[i].name  # columns not named are left alone
