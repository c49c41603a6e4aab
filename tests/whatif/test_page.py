"""The what-if page: the proposal form filled with today's quotas, errors that keep what
was typed, results side by side after the POST, and 404 for everyone but platform admins."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from billing.models import WhatIfRun
from billing.whatif import services
from billing.whatif.records import Proposal
from tests.conftest import Cast
from tests.tenants.test_portal import logged_in
from tests.whatif.history import build_history, h100_rate_card
from tests.workloads.test_portal_languages import data_values, untranslated, visible_text

PAGE = "/billing/what-if/"
# grid cells: row 0 is speech, row 1 vision (tenants by name), column 0 h100-80gb
FORM = {
    "cluster": "gpu-east",
    "days": "30",
    "kind": "whatif",
    "policy": "fair-share",
    "reclaim_min_run_s": "0",
    "g_0_0": "2",
    "g_1_0": "6",
    "w_0": "1",
    "w_1": "2",
}


def submit(client: Client, capture: Any, **changes: str) -> Any:
    with capture(execute=True):
        return client.post(PAGE, {**FORM, **changes})


def test_the_form_is_filled_with_todays_guarantees_and_weights(cast: Cast) -> None:
    build_history(cast)
    client = logged_in(cast.platform_admin)
    assert f'href="{PAGE}"' in client.get("/").content.decode()  # in the navigation

    page = client.get(PAGE).content.decode()

    assert 'name="g_0_0" id="id_g_0_0" value="6"' in page  # speech's 6 GPUs today
    assert 'name="g_1_0" id="id_g_1_0" value="2"' in page  # vision's 2
    assert 'aria-label="Guarantee of vision on h100-80gb (GPUs)"' in page


def test_a_run_posted_from_the_page_shows_both_runs_side_by_side(
    cast: Cast, django_capture_on_commit_callbacks: Any
) -> None:
    build_history(cast)
    client = logged_in(cast.platform_admin)

    response = submit(client, django_capture_on_commit_callbacks)

    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"{PAGE}{run.pk}/"
    page = client.get(response["Location"]).content.decode()
    assert 'id="whatif-status">Done<' in page
    assert 'id="figure-wait_p95_s"' in page and 'id="figure-share_fairness"' in page
    assert 'id="tenant-vision"' in page and 'id="tenant-speech"' in page
    assert 'id="whatif-waits-chart"' in page
    assert "<code>vision</code> h100-80gb: 2 → 6" in page
    assert "hx-get" not in page  # nothing left to poll


def test_savings_from_the_page_says_how_many_gpus_and_what_they_cost(
    cast: Cast, django_capture_on_commit_callbacks: Any
) -> None:
    build_history(cast)
    h100_rate_card()
    client = logged_in(cast.platform_admin)

    response = submit(client, django_capture_on_commit_callbacks, kind="savings")

    page = client.get(response["Location"]).content.decode()
    assert "Static slices would need 8 more GPUs for the same p95 wait as" in page
    assert "14600.00 USD a month" in page
    assert 'id="whatif-savings-chart"' in page


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"g_1_0": "-3"}, "greater than or equal to 0"),
        ({"w_1": "0"}, "greater than or equal to 0.001"),
        ({"reclaim_min_run_s": "-1"}, "greater than or equal to 0"),
        ({"g_1_0": "7"}, "add up to 9 GPUs, more than its capacity of 8"),
    ],
)
def test_bad_input_is_a_400_that_keeps_what_was_typed(
    cast: Cast, changes: dict[str, str], error: str
) -> None:
    build_history(cast)

    response = logged_in(cast.platform_admin).post(PAGE, {**FORM, **changes})

    assert response.status_code == 400
    page = response.content.decode()
    assert error in page
    for name, value in changes.items():
        assert f'name="{name}"' in page and f'value="{value}"' in page
    assert not WhatIfRun.objects.exists()


def test_a_window_without_history_says_so(cast: Cast) -> None:
    build_history(cast, days_ago=10)

    page = logged_in(cast.platform_admin).get(f"{PAGE}?cluster=gpu-east&days=5").content.decode()

    assert "finished no workloads submitted in the last 5 days" in page
    assert 'id="whatif-form"' not in page


def test_a_running_run_polls_its_progress_and_the_page_reloads_when_done(cast: Cast) -> None:
    history = build_history(cast)
    run = services.whatif_run_create(
        actor=cast.platform_admin,
        cluster=history.cluster,
        kind="whatif",
        days=30,
        proposal=Proposal(),
    )
    WhatIfRun.objects.filter(pk=run.pk).update(status="running", progress=25)
    client = logged_in(cast.platform_admin)

    page = client.get(f"{PAGE}{run.pk}/").content.decode()
    assert f'hx-get="{PAGE}{run.pk}/progress/"' in page and 'value="25"' in page

    services.whatif_run_execute(run_id=run.pk)
    part = client.get(f"{PAGE}{run.pk}/progress/", HTTP_HX_REQUEST="true")
    assert part["HX-Refresh"] == "true"


def test_a_failed_run_shows_its_error_and_runs_again(
    cast: Cast, django_capture_on_commit_callbacks: Any
) -> None:
    history = build_history(cast)
    run = services.whatif_run_create(
        actor=cast.platform_admin,
        cluster=history.cluster,
        kind="whatif",
        days=30,
        proposal=Proposal(),
    )
    WhatIfRun.objects.filter(pk=run.pk).update(status="failed", error="The worker stopped.")
    client = logged_in(cast.platform_admin)
    assert "The worker stopped." in client.get(f"{PAGE}{run.pk}/").content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"{PAGE}{run.pk}/again/")

    again = WhatIfRun.objects.exclude(pk=run.pk).get()
    assert response["Location"] == f"{PAGE}{again.pk}/"
    again.refresh_from_db()
    assert again.status == "done"


@pytest.mark.parametrize("role", ["dept_admin", "finance", "lead", "member", "outsider"])
def test_tenant_users_get_404_on_every_what_if_page(cast: Cast, role: str) -> None:
    history = build_history(cast)
    run = services.whatif_run_create(
        actor=cast.platform_admin,
        cluster=history.cluster,
        kind="whatif",
        days=30,
        proposal=Proposal(),
    )
    client = logged_in(cast.user(role))

    assert client.get(PAGE).status_code == 404
    assert client.post(PAGE, FORM).status_code == 404
    assert client.get(f"{PAGE}{run.pk}/").status_code == 404
    assert client.get(f"{PAGE}{run.pk}/progress/").status_code == 404
    assert client.post(f"{PAGE}{run.pk}/again/").status_code == 404
    assert "/billing/what-if/" not in client.get("/").content.decode()  # not in the navigation
    assert WhatIfRun.objects.count() == 1


@pytest.mark.parametrize("kind", ["whatif", "savings"])
def test_a_run_reads_in_chinese_but_for_its_data(
    cast: Cast, kind: str, django_capture_on_commit_callbacks: Any
) -> None:
    build_history(cast)
    h100_rate_card()
    client = logged_in(cast.platform_admin)
    response = submit(client, django_capture_on_commit_callbacks, kind=kind)
    data = data_values() | {"fair-share", "H100 list price"}

    left = []
    for url in (PAGE, response["Location"]):
        page = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
        assert '<html lang="zh-hans">' in page
        left += [t for t in visible_text(page) if untranslated(t, data)]
    assert left == []
