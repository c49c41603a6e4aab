"""A what-if run through Celery: the task runs it (eagerly here), and a real worker on
Redis picks up the run queued by the API and keeps its result."""

from __future__ import annotations

import pytest

from billing.models import WhatIfRun
from billing.tasks import whatif_run, whatif_runs_fail_stalled
from billing.whatif import services
from billing.whatif.records import Proposal, QuotaEntry
from tests.celery_worker import Worker, celery_worker, wait_for
from tests.conftest import Cast, client_for
from tests.whatif.history import PROPOSAL_BODY, build_history

__all__ = ["celery_worker"]


def test_the_task_runs_a_queued_run_to_its_result(cast: Cast) -> None:
    history = build_history(cast)
    run = services.whatif_run_create(
        actor=cast.platform_admin,
        cluster=history.cluster,
        kind="whatif",
        days=30,
        proposal=Proposal(
            quotas=(QuotaEntry("vision", "h100-80gb", 6), QuotaEntry("speech", "h100-80gb", 2))
        ),
    )

    assert whatif_run.delay(run.pk).get(timeout=60) == "done"
    run.refresh_from_db()
    assert run.status == "done" and run.progress == 100 and run.finished_at is not None
    # delivered again (a retry, a duplicate): nothing happens to a finished run
    assert whatif_run.delay(run.pk).get(timeout=60) is None


def test_the_periodic_task_fails_no_run_that_is_still_moving(cast: Cast) -> None:
    history = build_history(cast)
    run = services.whatif_run_create(
        actor=cast.platform_admin,
        cluster=history.cluster,
        kind="whatif",
        days=30,
        proposal=Proposal(),
    )
    WhatIfRun.objects.filter(pk=run.pk).update(status="running")

    assert whatif_runs_fail_stalled.delay().get(timeout=60) == 0
    run.refresh_from_db()
    assert run.status == "running"


@pytest.mark.celery_worker
@pytest.mark.xdist_group("celery")
def test_a_worker_runs_the_what_if_the_api_queued(celery_worker: Worker, cast: Cast) -> None:
    build_history(cast)

    response = client_for(cast.platform_admin).post(
        "/api/v1/what-if/",
        {"cluster": "gpu-east", "kind": "whatif", "proposal": PROPOSAL_BODY},
        format="json",
    )

    assert response.status_code == 202
    run_id = response.json()["id"]
    assert wait_for(lambda: WhatIfRun.objects.get(pk=run_id).finished, timeout=120)
    run = client_for(cast.platform_admin).get(f"/api/v1/what-if/{run_id}/").json()
    assert run["status"] == "done", run["error"]
    waits = run["result"]["proposed"]["tenant_waits"]["vision"]["mean_s"]
    assert waits < run["result"]["today"]["tenant_waits"]["vision"]["mean_s"]
