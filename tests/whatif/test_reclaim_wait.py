"""A what-if can propose a reclaim wait (docs/what-if.md): owners inside their guarantee
wait that long for GPUs to free before they preempt. Today's run replays under today's
setting (TIDEGATE_RECLAIM_WAIT_S), the proposed run under the proposal's."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone, translation

from billing.models import WhatIfRun
from billing.whatif import services
from billing.whatif.records import Proposal, WhatIfParams
from scheduler_bridge.inventory.models import Cluster
from tenants.errors import ValidationFailed
from tests.conftest import Cast, client_for
from tests.factories import ClusterFactory, FinishedWorkloadFactory, FlavourFactory, QuotaFactory
from tests.tenants.test_portal import logged_in
from tests.whatif.test_page import FORM, PAGE, submit

API = "/api/v1/what-if/"
ROUNDS = 8


def churn_history(cast: Cast) -> None:
    """8 GPUs: speech (guarantee 6) submits four 2-GPU jobs of 50 minutes every hour,
    borrowing vision's 2 GPUs; vision (guarantee 2) submits one 2-GPU job of 30 minutes
    half-way through each hour. Reclaiming at once stops a speech job that would have
    ended 20 minutes later (and the job run again shifts the hours after it)."""
    cluster = ClusterFactory(name="gpu-east")
    flavour = FlavourFactory(cluster=cluster, name="h100-80gb", product="H100-80GB", capacity=8)
    QuotaFactory(tenant=cast.team_a, flavour=flavour, guaranteed=2)
    QuotaFactory(tenant=cast.team_b, flavour=flavour, guaranteed=6)
    start = timezone.now().replace(microsecond=0) - timedelta(days=3)
    for hour in range(ROUNDS):
        at = start + timedelta(hours=hour)
        for _ in range(4):
            FinishedWorkloadFactory(
                tenant=cast.team_b,
                flavour=flavour,
                gpus=2,
                submitted_at=at,
                ran=timedelta(minutes=50),
            )
        FinishedWorkloadFactory(
            tenant=cast.team_a,
            flavour=flavour,
            gpus=2,
            submitted_at=at + timedelta(minutes=30),
            ran=timedelta(minutes=30),
        )


def run_whatif(cast: Cast, proposal: Proposal) -> WhatIfRun:
    churn_history(cast)
    cluster = Cluster.objects.get(name="gpu-east")
    run = services.whatif_run_create(
        actor=cast.platform_admin, cluster=cluster, kind="whatif", days=30, proposal=proposal
    )
    executed = services.whatif_run_execute(run_id=run.pk)
    assert executed is not None and executed.status == "done", executed and executed.error
    return executed


def test_a_proposed_reclaim_wait_lets_owners_take_gpus_that_free_instead_of_preempting(
    cast: Cast,
) -> None:
    result = run_whatif(cast, Proposal(reclaim_wait_s=1800)).whatif_result()

    assert result is not None
    today, proposed = result.today, result.proposed
    assert today.preemptions >= 2 and today.wasted_gpu_hours > 0
    assert proposed.preemptions == 0 and proposed.wasted_gpu_hours == 0
    # speech's work is no longer stopped and run again
    assert proposed.tenant_waits["speech"].mean_s < today.tenant_waits["speech"].mean_s
    # vision waits for speech's jobs to end (20 minutes, plus a cycle) instead
    vision_today = today.tenant_waits["vision"].mean_s
    vision_proposed = proposed.tenant_waits["vision"].mean_s
    assert vision_today < 5 * 60
    assert 15 * 60 <= vision_proposed <= 25 * 60
    assert proposed.jobs_completed == today.jobs_completed == 5 * ROUNDS


def test_todays_run_replays_under_todays_reclaim_wait(cast: Cast, settings: Any) -> None:
    settings.TIDEGATE = {**settings.TIDEGATE, "RECLAIM_WAIT_S": 1800.0}

    result = run_whatif(cast, Proposal(reclaim_wait_s=0)).whatif_result()

    assert result is not None
    assert result.today.preemptions == 0  # today's setting already waits
    assert result.proposed.preemptions >= 2  # the proposal takes it away
    assert (
        result.proposed.tenant_waits["vision"].mean_s < result.today.tenant_waits["vision"].mean_s
    )


def test_a_proposal_without_a_reclaim_wait_replays_todays(cast: Cast, settings: Any) -> None:
    settings.TIDEGATE = {**settings.TIDEGATE, "RECLAIM_WAIT_S": 1800.0}

    result = run_whatif(cast, Proposal()).whatif_result()

    assert result is not None
    assert result.proposed.preemptions == result.today.preemptions == 0
    # the same figures, but for how long each replay took
    assert replace(result.proposed, wall_s=0.0) == replace(result.today, wall_s=0.0)


def test_a_run_kept_before_the_reclaim_wait_could_be_proposed_reads_as_todays() -> None:
    stored = Proposal(reclaim_min_run_s=60).as_json()
    del stored["reclaim_wait_s"]  # a run kept before the reclaim wait could be proposed
    assert Proposal.from_json(stored).reclaim_wait_s is None
    params = WhatIfParams(days=30, proposal=Proposal(reclaim_wait_s=600.0))
    assert WhatIfParams.from_json(params.as_json()).proposal.reclaim_wait_s == 600.0


@pytest.mark.parametrize("wait", [-1.0, services.MAX_RECLAIM_WAIT_S + 1])
def test_a_reclaim_wait_below_zero_or_over_a_day_is_a_field_error(cast: Cast, wait: float) -> None:
    churn_history(cast)
    cluster = Cluster.objects.get(name="gpu-east")
    with translation.override("en"), pytest.raises(ValidationFailed) as refused:
        services.whatif_run_create(
            actor=cast.platform_admin,
            cluster=cluster,
            kind="whatif",
            days=30,
            proposal=Proposal(reclaim_wait_s=wait),
        )
    assert "Give 0 to 86400 seconds" in str((refused.value.field_errors or {})["reclaim_wait_s"])
    assert not WhatIfRun.objects.exists()


@pytest.mark.parametrize("wait", [-60, 100_000, "soon"])
def test_the_api_refuses_a_bad_reclaim_wait_with_a_400_inside_the_proposal(
    cast: Cast, wait: Any
) -> None:
    churn_history(cast)

    response = client_for(cast.platform_admin).post(
        API, {"cluster": "gpu-east", "proposal": {"reclaim_wait_s": wait}}, format="json"
    )

    assert response.status_code == 400
    assert "reclaim_wait_s" in response.json()["proposal"]
    assert not WhatIfRun.objects.exists()


def test_the_api_keeps_a_proposed_reclaim_wait_with_the_run(
    cast: Cast, django_capture_on_commit_callbacks: Any
) -> None:
    churn_history(cast)

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(cast.platform_admin).post(
            API, {"cluster": "gpu-east", "proposal": {"reclaim_wait_s": 1800}}, format="json"
        )

    assert response.status_code == 202, response.json()
    run = WhatIfRun.objects.get()
    assert run.params_record().proposal.reclaim_wait_s == 1800.0
    result = run.whatif_result()
    assert result is not None and result.proposed.preemptions == 0


def test_the_page_offers_todays_reclaim_wait_and_shows_the_proposed_one(
    cast: Cast, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.TIDEGATE = {**settings.TIDEGATE, "RECLAIM_WAIT_S": 120.0}
    churn_history(cast)
    client = logged_in(cast.platform_admin)

    page = client.get(f"{PAGE}?cluster=gpu-east").content.decode()
    # today's wait is shown, not proposed: the field stays empty unless changed
    field = re.search(r'<input[^>]*name="reclaim_wait_s"[^>]*>', page)
    assert field is not None
    assert 'placeholder="120"' in field.group() and "value=" not in field.group()
    assert "Reclaim wait (seconds)" in page
    untouched = submit(client, django_capture_on_commit_callbacks)
    assert untouched.status_code == 302
    assert WhatIfRun.objects.get().params_record().proposal.reclaim_wait_s is None
    assert "Proposed reclaim wait" not in client.get(untouched["Location"]).content.decode()

    response = submit(client, django_capture_on_commit_callbacks, reclaim_wait_s="1800")
    assert response.status_code == 302
    run_page = client.get(response["Location"]).content.decode()
    assert "Proposed reclaim wait: 1800.0 s." in run_page
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    assert "提议的收回等待时间：1800.0 秒。" in client.get(response["Location"]).content.decode()


def test_the_page_refuses_a_negative_reclaim_wait_and_keeps_what_was_typed(cast: Cast) -> None:
    churn_history(cast)

    response = logged_in(cast.platform_admin).post(PAGE, {**FORM, "reclaim_wait_s": "-5"})

    assert response.status_code == 400
    page = response.content.decode()
    assert "greater than or equal to 0" in page
    assert 'name="reclaim_wait_s"' in page and 'value="-5"' in page
    assert not WhatIfRun.objects.exists()


def test_an_empty_reclaim_wait_on_the_page_proposes_todays(
    cast: Cast, django_capture_on_commit_callbacks: Any
) -> None:
    churn_history(cast)

    response = submit(
        logged_in(cast.platform_admin), django_capture_on_commit_callbacks, reclaim_wait_s=""
    )

    assert response.status_code == 302
    assert WhatIfRun.objects.get().params_record().proposal.reclaim_wait_s is None


def test_todays_run_replays_under_every_setting_the_queue_runs_with(settings: Any) -> None:
    settings.TIDEGATE = {
        **settings.TIDEGATE,
        "RECLAIM_MIN_RUN_S": 900.0,
        "RECLAIM_WAIT_S": 120.0,
        "SHARE_PACKING": "best-fit",
        "PRIORITY_PREEMPTION": True,
    }

    options = services.today_options()

    assert (
        options.reclaim_min_run_s,
        options.reclaim_wait_s,
        options.share_packing,
        options.priority_preemption,
    ) == (900.0, 120.0, "best-fit", True)


def test_a_result_keeps_the_settings_each_run_replayed_under_and_the_page_shows_them(
    cast: Cast, settings: Any
) -> None:
    settings.TIDEGATE = {**settings.TIDEGATE, "RECLAIM_WAIT_S": 120.0}
    run = run_whatif(cast, Proposal(reclaim_wait_s=1800))
    # the setting changes after the run was made: the run still says what today meant
    settings.TIDEGATE = {**settings.TIDEGATE, "RECLAIM_WAIT_S": 0.0}

    result = run.whatif_result()
    assert result is not None and result.today_settings and result.proposed_settings
    assert (result.today_settings.reclaim_wait_s, result.proposed_settings.reclaim_wait_s) == (
        120.0,
        1800.0,
    )
    assert result.today_settings.half_life_h == result.proposed_settings.half_life_h == 168.0
    client = logged_in(cast.platform_admin)
    page = client.get(f"/billing/what-if/{run.pk}/").content.decode()
    row = re.search(r'<tr id="setting-reclaim_wait_s">.*?</tr>', page, re.S)
    assert row is not None
    assert "120 s" in row.group() and "<strong>1800 s</strong>" in row.group()
    unchanged = re.search(r'<tr id="setting-reclaim_min_run_s">.*?</tr>', page, re.S)
    assert unchanged is not None and "<strong>" not in unchanged.group()
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    chinese = client.get(f"/billing/what-if/{run.pk}/").content.decode()
    assert "回放所用设置" in chinese and "收回等待时间" in chinese


def test_a_result_kept_before_settings_were_recorded_still_shows(cast: Cast) -> None:
    run = run_whatif(cast, Proposal())
    kept = dict(run.result or {})
    del kept["today_settings"], kept["proposed_settings"]
    WhatIfRun.objects.filter(pk=run.pk).update(result=kept)

    page = logged_in(cast.platform_admin).get(f"/billing/what-if/{run.pk}/")

    assert page.status_code == 200
    assert 'id="whatif-figures"' in page.content.decode()
    assert 'id="whatif-settings"' not in page.content.decode()


def test_the_run_page_counts_the_jobs_preempted_beside_the_preemptions(cast: Cast) -> None:
    run = run_whatif(cast, Proposal(reclaim_wait_s=1800))
    result = run.whatif_result()
    assert result is not None
    today = result.today
    assert today.preempted_jobs is not None and 1 <= today.preempted_jobs <= today.preemptions
    assert result.proposed.preempted_jobs == 0

    page = logged_in(cast.platform_admin).get(f"/billing/what-if/{run.pk}/").content.decode()

    row = re.search(r'<tr id="figure-preempted_jobs">.*?</tr>', page, re.S)
    assert row is not None
    assert "Jobs preempted (at least once)" in row.group()
    assert f"<td>{today.preempted_jobs}</td>" in row.group() and "<td>0</td>" in row.group()
    client = logged_in(cast.platform_admin)
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    assert "被抢占过的作业数" in client.get(f"/billing/what-if/{run.pk}/").content.decode()


def test_a_result_kept_before_preempted_jobs_were_counted_shows_a_dash(cast: Cast) -> None:
    run = run_whatif(cast, Proposal(reclaim_wait_s=1800))
    kept = dict(run.result or {})
    for side in ("today", "proposed"):
        kept[side] = {
            k: v
            for k, v in kept[side].items()
            if k not in ("preempted_jobs", "most_preemptions_of_a_job")
        }
    WhatIfRun.objects.filter(pk=run.pk).update(result=kept)

    page = logged_in(cast.platform_admin).get(f"/billing/what-if/{run.pk}/")

    assert page.status_code == 200
    row = re.search(r'<tr id="figure-preempted_jobs">.*?</tr>', page.content.decode(), re.S)
    assert row is not None and row.group().count("<td>—</td>") == 3
    preemptions = re.search(r'<tr id="figure-preemptions">.*?</tr>', page.content.decode(), re.S)
    assert preemptions is not None and "—" not in preemptions.group()


def test_a_result_with_a_figure_this_version_does_not_know_still_shows(cast: Cast) -> None:
    """A newer worker may keep a figure an older web process does not know yet."""
    run = run_whatif(cast, Proposal(reclaim_wait_s=1800))
    kept = dict(run.result or {})
    kept["today"] = {**kept["today"], "a_figure_from_a_newer_version": 7}
    WhatIfRun.objects.filter(pk=run.pk).update(result=kept)

    page = logged_in(cast.platform_admin).get(f"/billing/what-if/{run.pk}/")

    assert page.status_code == 200
    assert 'id="figure-preemptions"' in page.content.decode()
