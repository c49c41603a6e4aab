"""The what-if API: 202 with the run's URL, progress and result, 400s that name the
field, and 404 for everyone but platform admins."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from billing.models import WhatIfRun
from tests.conftest import Cast, client_for
from tests.whatif.history import PROPOSAL_BODY, build_history, h100_rate_card

URL = "/api/v1/what-if/"
TENANT_USERS = ["dept_admin", "finance", "lead", "member", "outsider"]


def post(cast: Cast, body: dict[str, Any], capture: Any) -> Any:
    with capture(execute=True):
        return client_for(cast.platform_admin).post(URL, body, format="json")


def test_a_what_if_is_accepted_with_its_url_and_its_result_read_there(
    cast: Cast, django_capture_on_commit_callbacks: Any
) -> None:
    build_history(cast)
    body = {"cluster": "gpu-east", "days": 30, "kind": "whatif", "proposal": PROPOSAL_BODY}

    response = post(cast, body, django_capture_on_commit_callbacks)

    assert response.status_code == 202, response.json()
    created = response.json()
    assert created["url"].endswith(f"{URL}{created['id']}/")
    assert response["Location"] == created["url"]
    assert created["page"].endswith(f"/billing/what-if/{created['id']}/")
    run = client_for(cast.platform_admin).get(created["url"]).json()
    assert run["status"] == "done" and run["progress"] == 100
    assert run["params"]["proposal"]["weights"] == {"vision": 2.0}
    vision_today = run["result"]["today"]["tenant_waits"]["vision"]
    vision_proposed = run["result"]["proposed"]["tenant_waits"]["vision"]
    assert vision_proposed["mean_s"] < vision_today["mean_s"]
    for figure in (
        "utilization",
        "goodput",
        "wasted_gpu_hours",
        "borrowed_gpu_hours",
        "wait_p99_s",
    ):
        assert figure in run["result"]["proposed"]
    listed = client_for(cast.platform_admin).get(URL).json()
    assert [r["id"] for r in listed["results"]] == [created["id"]]


def test_savings_answers_with_gpus_and_money(
    cast: Cast, django_capture_on_commit_callbacks: Any
) -> None:
    build_history(cast)
    h100_rate_card()

    response = post(
        cast, {"cluster": "gpu-east", "kind": "savings"}, django_capture_on_commit_callbacks
    )

    run = client_for(cast.platform_admin).get(response.json()["url"]).json()
    assert run["status"] == "done"
    assert run["result"]["extra_gpus"] == 8
    assert run["result"]["monthly_by_currency"] == {"USD": "14600.00"}  # 8 x 2.50 x 730


def test_a_queued_run_shows_its_progress(cast: Cast) -> None:
    build_history(cast)
    response = client_for(cast.platform_admin).post(URL, {"cluster": "gpu-east"}, format="json")
    run_id = response.json()["id"]
    assert response.json()["status"] == "queued" and response.json()["progress"] == 0
    WhatIfRun.objects.filter(pk=run_id).update(
        status="running", progress=40, message="today: fair-share"
    )

    run = client_for(cast.platform_admin).get(f"{URL}{run_id}/").json()

    assert (run["status"], run["progress"], run["message"]) == ("running", 40, "today: fair-share")
    assert run["result"] is None


@pytest.mark.parametrize(
    ("body", "field", "words", "status"),
    [
        ({"cluster": "nowhere"}, "cluster", "does not exist", 404),
        ({"cluster": "gpu-east", "days": 0}, "days", "greater than or equal to 1", 400),
        ({"cluster": "gpu-east", "kind": "magic"}, "kind", "not a valid choice", 400),
        ({"cluster": "gpu-east", "days": 2}, "days", "no finished workloads", 422),
        (
            {
                "cluster": "gpu-east",
                "proposal": {
                    "quotas": [{"tenant": "nobody", "flavour": "h100-80gb", "guaranteed": 1}]
                },
            },
            "quotas",
            "nobody ran no work",
            422,
        ),
        (
            {
                "cluster": "gpu-east",
                "proposal": {"quotas": [{"tenant": "vision", "flavour": "v100", "guaranteed": 1}]},
            },
            "quotas",
            "v100 is not a flavour of gpu-east",
            422,
        ),
        (
            {
                "cluster": "gpu-east",
                "proposal": {
                    "quotas": [{"tenant": "vision", "flavour": "h100-80gb", "guaranteed": 9}]
                },
            },
            "quotas",
            "more than its capacity of 8",
            422,
        ),
        (
            {"cluster": "gpu-east", "proposal": {"weights": {"globex": 2}}},
            "weights",
            "globex ran no work",
            422,
        ),
        (
            {"cluster": "gpu-east", "proposal": {"policy": "lottery"}},
            "proposal",
            "not a valid choice",
            400,
        ),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    cast: Cast, body: dict[str, Any], field: str, words: str, status: int
) -> None:
    build_history(cast)

    response = client_for(cast.platform_admin).post(URL, body, format="json")

    assert response.status_code == status
    assert words in str(response.json()[field])
    assert not WhatIfRun.objects.exists()


@pytest.mark.parametrize(
    "proposal",
    [
        {"quotas": [{"tenant": "vision", "flavour": "h100-80gb", "guaranteed": -1}]},
        {"weights": {"vision": -1}},
        {"reclaim_min_run_s": -60},
        {"quotas": [{"tenant": "vision", "flavour": "h100-80gb"}]},
    ],
)
def test_negative_or_missing_numbers_are_a_400_inside_the_proposal(
    cast: Cast, proposal: dict[str, Any]
) -> None:
    build_history(cast)

    response = client_for(cast.platform_admin).post(
        URL, {"cluster": "gpu-east", "proposal": proposal}, format="json"
    )

    assert response.status_code == 400
    assert "proposal" in response.json()


@pytest.mark.parametrize("role", TENANT_USERS)
def test_tenant_users_get_404_on_every_what_if_endpoint(
    cast: Cast, role: str, django_capture_on_commit_callbacks: Any
) -> None:
    build_history(cast)
    created = post(cast, {"cluster": "gpu-east"}, django_capture_on_commit_callbacks).json()
    client = client_for(cast.user(role))

    assert client.get(URL).status_code == 404
    assert client.get(created["url"]).status_code == 404
    assert client.post(URL, {"cluster": "gpu-east"}, format="json").status_code == 404
    assert client.post(f"{created['url']}rerun/").status_code == 404
    assert WhatIfRun.objects.count() == 1


def test_a_run_is_run_again_from_its_request(
    cast: Cast, django_capture_on_commit_callbacks: Any
) -> None:
    build_history(cast)
    first = post(
        cast, {"cluster": "gpu-east", "days": 20}, django_capture_on_commit_callbacks
    ).json()

    with django_capture_on_commit_callbacks(execute=True):
        again = client_for(cast.platform_admin).post(f"{first['url']}rerun/")

    assert again.status_code == 202
    assert again.json()["id"] != first["id"]
    assert again.json()["params"] == first["params"]
    assert client_for(cast.platform_admin).get(again["Location"]).json()["status"] == "done"


@pytest.mark.django_db(transaction=True)
def test_in_the_demo_a_what_if_is_answered_at_once_and_runs_beside_the_request(
    cast: Cast, settings: Any
) -> None:
    """Tasks run eagerly in the demo; a what-if run still answers 202 with the run queued,
    as production does, and finishes on its own thread."""
    import time

    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.TIDEGATE_EAGER_IN_BACKGROUND = frozenset({"billing.tasks.whatif_run"})
    build_history(cast)
    body = {"cluster": "gpu-east", "days": 30, "kind": "whatif", "proposal": PROPOSAL_BODY}
    response = client_for(cast.platform_admin).post(URL, body, format="json")
    assert response.status_code == 202, response.json()
    assert response.json()["status"] == "queued"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = WhatIfRun.objects.get(pk=response.json()["id"])
        if run.status in ("done", "failed"):
            break
        time.sleep(0.2)
    for thread in threading.enumerate():  # the run's thread ends before the database goes
        if thread.name.startswith("tidegate-"):
            thread.join(timeout=120)
    assert run.status == "done", run.message
