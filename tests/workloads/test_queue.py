"""The queue through the API and the cycle: admit what fits, explain what waits, reclaim."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.workloads.cycle import admission_cycle, decide_and_persist, engine_for
from scheduler_bridge.workloads.locks import hold_admission_lock
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.snapshot import decayed_usage
from tenants.models import AuditEvent
from tests.concurrency import at_once
from tests.conftest import ROLE_NAMES, Cast, client_for
from tests.workloads.conftest import FakeCluster

pytestmark = pytest.mark.django_db


def submit(user: Any, tenant: str, gpus: int, count: int = 1, **extra: Any) -> Any:
    body = {
        "cluster": "gpu-east",
        "tenant": tenant,
        "name": extra.pop("name", f"job-{tenant}-{gpus}x{count}"),
        "pod_sets": [
            {"count": count, "gpus_per_pod": gpus, **extra.pop("pod", {"flavour": "h100-80gb"})}
        ],
        **extra,
    }
    return client_for(user).post("/api/v1/workloads/", body, format="json")


def test_work_within_guarantee_is_admitted_with_placements(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    response = submit(cast.member, "vision", 4)
    assert response.status_code == 201, response.content
    assert response.json()["state"] == "pending"
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(pk=response.json()["id"])
    assert outcome.admitted == [workload.pk]
    assert workload.state == "running" and workload.gpus == 4
    assert workload.flavour is not None and workload.flavour.name == "h100-80gb"
    assert sum(p["gpus"] for p in workload.placements) == 4
    assert workload.borrowed == {}
    assert workload.priority_class is not None and workload.priority_class.name == "batch"


def test_waiting_work_gets_a_position_and_a_precise_reason(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    # speech holds 2 H100 and may borrow at most 1 more
    from scheduler_bridge.quotas.models import Quota

    Quota.objects.filter(tenant=cast.team_b, flavour=fake_cluster.h100).update(borrow_limit=1)
    ids = [submit(cast.platform_admin, "speech", 2, name=f"s{i}").json()["id"] for i in range(3)]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    states = {w.pk: w for w in Workload.objects.filter(pk__in=ids)}
    assert states[ids[0]].state == "running"
    waiting = [states[i] for i in ids[1:]]
    assert [w.state for w in waiting] == ["pending", "pending"]
    assert [w.queue_position for w in waiting] == [1, 2]
    assert waiting[0].reason_code == "quota_limit"
    assert "h100-80gb" in waiting[0].reason and "2/" in waiting[0].reason


def test_a_borrower_is_preempted_when_the_owner_needs_its_guarantee(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """vision (guarantee 6) is idle; speech borrows the whole cluster; vision comes back."""
    borrower = submit(cast.platform_admin, "speech", 8, name="big").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    big = Workload.objects.get(pk=borrower)
    assert big.state == "running" and sum(big.borrowed.values()) > 0
    owner = submit(cast.lead, "vision", 6, name="owner").json()["id"]
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    big.refresh_from_db()
    assert outcome.preempted == [big.pk]
    # the victim says why it waits; the owner starts in the same cycle, on the GPUs freed
    assert big.state == "pending" and big.reason_code == "preempted" and big.preemptions == 1
    assert outcome.admitted == [owner]
    assert Workload.objects.get(pk=owner).state == "running"


def test_a_preempted_run_is_kept_and_counts_in_the_fair_share_history(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    borrower = submit(cast.platform_admin, "speech", 8, name="big").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    submit(cast.lead, "vision", 6, name="owner")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    big = Workload.objects.get(pk=borrower)
    assert big.state == "pending" and big.admitted_at is None
    [run] = big.past_runs
    assert run["flavour"] == "h100-80gb" and run["gpus"] == 8
    assert sum(p["gpus"] for p in run["placements"]) == 8 and sum(run["borrowed"].values()) > 0
    held_s = (
        datetime.fromisoformat(run["ended_at"]) - datetime.fromisoformat(run["admitted_at"])
    ).total_seconds()
    assert held_s > 0
    usage = decayed_usage(fake_cluster.cluster, timezone.now())
    assert usage["speech"] == pytest.approx(8 * held_s / 3600, rel=1e-3)
    shown = client_for(cast.platform_admin).get(f"/api/v1/workloads/{borrower}/").json()
    assert shown["preemptions"] == 1 and shown["past_runs"] == big.past_runs


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        (
            {"count": 3, "pod": {"flavour": "h100-80gb"}, "gpus": 8},
            "pod_sets",
            "the cluster has 16",
        ),
        (
            {"pod": {"flavour": "b200"}, "gpus": 1},
            "pod_sets",
            "available: a100-sxm4-40gb-mig-1g.5gb, h100-80gb",
        ),
        (
            {"pod": {"product": "A100-SXM4-40GB", "mig_profile": "2g.99gb"}, "gpus": 1},
            "pod_sets",
            "1g.5gb",
        ),
        ({"count": 2, "gpus": 8, "topology": "node"}, "topology", "largest node has 8"),
        ({"gpus": 16}, "pod_sets", "largest node offers 8"),
        ({"gpus": 1, "priority_class": "urgent"}, "priority_class", "use one of"),
    ],
)
def test_work_that_can_never_run_is_refused_at_submission(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict, extra: dict, field: str, words: str
) -> None:
    gpus = extra.pop("gpus")
    count = extra.pop("count", 1)
    response = submit(cast.member, "vision", gpus, count=count, **extra)
    assert response.status_code == 422, response.content
    assert words in " ".join(response.json()[field])
    assert not Workload.objects.exists()


SUBMIT = {
    "platform_admin": 201,
    "dept_admin": 201,
    "finance": 403,
    "lead": 201,
    "member": 201,
    "outsider": 404,  # vision is not a tenant they can see
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_members_submit_and_everyone_sees_only_their_subtrees_work(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    assert submit(cast.user(role), "vision", 1).status_code == SUBMIT[role]
    mine = submit(cast.member, "vision", 1, name="visible").json()["id"]
    client = client_for(cast.user(role))
    expected = 404 if role == "outsider" else 200
    assert client.get(f"/api/v1/workloads/{mine}/").status_code == expected
    names = {w["name"] for w in client.get("/api/v1/workloads/").json()["results"]}
    assert ("visible" in names) == (role != "outsider")


CANCEL = {
    "platform_admin": 200,
    "dept_admin": 200,
    "finance": 403,
    "lead": 200,
    "member": 200,
    "outsider": 404,
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_the_submitter_and_leads_cancel(fake_cluster: FakeCluster, cast: Cast, role: str) -> None:
    workload = submit(cast.member, "vision", 1).json()["id"]
    response = client_for(cast.user(role)).post(f"/api/v1/workloads/{workload}/cancel/")
    assert response.status_code == CANCEL[role]
    assert Workload.objects.get(pk=workload).state == (
        "cancelled" if CANCEL[role] == 200 else "pending"
    )


def test_finishing_api_work_frees_its_gpus(fake_cluster: FakeCluster, cast: Cast) -> None:
    first = submit(cast.platform_admin, "vision", 8, name="first").json()["id"]
    second = submit(cast.platform_admin, "vision", 8, name="next").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(pk=second).state == "pending"
    client = client_for(cast.platform_admin)
    assert client.post(f"/api/v1/workloads/{first}/finish/").json()["state"] == "finished"
    assert client.post(f"/api/v1/workloads/{first}/finish/").status_code == 409
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(pk=second).state == "running"


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_priority_classes_are_read_by_all_and_written_by_platform_admins(
    cast: Cast, priorities: dict, role: str
) -> None:
    client = client_for(cast.user(role))
    assert client.get("/api/v1/priority-classes/batch/").status_code == 200
    response = client.post(
        "/api/v1/priority-classes/",
        {"name": "urgent", "value": 500, "preemptible": False, "price_multiplier": "2"},
        format="json",
    )
    assert response.status_code == (201 if role == "platform_admin" else 403)


def test_a_priority_class_in_use_cannot_be_deleted(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    submit(cast.member, "vision", 1, priority_class="prod")
    response = client_for(cast.platform_admin).delete("/api/v1/priority-classes/prod/")
    assert response.status_code == 409 and "used by 1 workload" in response.json()["detail"]


def test_the_queue_command_prints_positions_and_reasons(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    submit(cast.platform_admin, "vision", 8, name="runs")
    submit(cast.platform_admin, "vision", 8, name="waits")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    out = StringIO()
    call_command("queue", "--cluster", "gpu-east", stdout=out)
    text = out.getvalue()
    assert "waits" in text and "pending" in text and "running" in text
    assert "h100-80gb on h100-" in text and "cohort acme can lend only 4 h100-80gb" in text


def test_the_queue_command_filters_a_subtree_and_speaks_json(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    submit(cast.platform_admin, "vision", 2, name="vision-job")
    submit(cast.platform_admin, "speech", 2, name="speech-job")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    out = StringIO()
    call_command("queue", "--cluster", "gpu-east", "--tenant", "research", "--json", stdout=out)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {r["name"] for r in records} == {"vision-job", "speech-job"}  # research's subtree
    assert all(r["state"] == "running" and r["where"].startswith("h100-80gb on") for r in records)
    assert all(r["age_s"] >= 0 and "priority" in r for r in records)
    only = StringIO()
    call_command("queue", "--cluster", "gpu-east", "--tenant", "speech", "--json", stdout=only)
    assert [json.loads(line)["name"] for line in only.getvalue().splitlines()] == ["speech-job"]
    with pytest.raises(CommandError, match="No tenant 'nope'"):
        call_command("queue", "--cluster", "gpu-east", "--tenant", "nope")


@pytest.mark.django_db(transaction=True)
def test_two_cycles_at_once_admit_no_more_than_fits(fake_cluster: FakeCluster, cast: Cast) -> None:
    """vision may hold acme's 12 H100: three 4-GPU jobs, whichever cycle admits them."""
    fake = fake_cluster
    for i in range(6):
        submit(cast.platform_admin, "vision", 4, name=f"w{i}")
    at_once(lambda: decide_and_persist(fake.cluster))
    admitted = Workload.objects.filter(state="running")
    assert admitted.count() == 3
    per_node: dict[str, int] = {}
    for workload in admitted:
        for p in workload.placements:
            per_node[p["node"]] = per_node.get(p["node"], 0) + p["gpus"]
    assert all(used <= 8 for used in per_node.values())


def test_a_run_time_past_the_limit_is_a_400(fake_cluster: FakeCluster, cast: Cast) -> None:
    response = submit(cast.member, "vision", 1, max_run_time_s=99999999999)
    assert response.status_code == 400 and "max_run_time_s" in response.json()


def test_cancelled_work_is_not_brought_back_by_the_next_cycle(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    workload = submit(cast.member, "vision", 2).json()["id"]
    client_for(cast.member).post(f"/api/v1/workloads/{workload}/cancel/")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(pk=workload).state == "cancelled"


@contextmanager
def _cycle_in_progress(cluster_id: int) -> Iterator[list[BaseException]]:
    """Another connection holds the cluster's admission lock, as a cycle deciding does,
    until the block ends; yields the errors that thread met (none expected)."""
    holding, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def cycle() -> None:
        try:
            with transaction.atomic():
                hold_admission_lock(cluster_id)
                holding.set()
                release.wait(30)
        except BaseException as error:  # noqa: BLE001 - reported to the test
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=cycle)
    thread.start()
    try:
        assert holding.wait(10)
        yield errors
    finally:
        release.set()
        thread.join()


def _queue_cycles_without_running_them(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The cycles a cancel or submit queues are recorded, not run in the request (tasks
    are eager in tests): the test runs the cycle itself, from another connection."""
    from scheduler_bridge import tasks

    queued: list[Any] = []
    monkeypatch.setattr(tasks.admission_cycle, "apply_async", lambda args, **_: queued.append(args))
    return queued


@pytest.mark.django_db(transaction=True)
def test_a_cancel_does_not_wait_for_a_running_cycle(
    fake_cluster: FakeCluster, cast: Cast, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a cycle holds the cluster's admission lock, a cancel still answers at once."""
    _queue_cycles_without_running_them(monkeypatch)
    cluster = fake_cluster.cluster
    workload = submit(cast.member, "vision", 2).json()["id"]
    with _cycle_in_progress(cluster.pk) as errors:
        with connection.cursor() as cursor:  # a wait for the lock would fail, not hang
            cursor.execute("SET lock_timeout = '2s'")
        try:
            response = client_for(cast.member).post(f"/api/v1/workloads/{workload}/cancel/")
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
        assert response.status_code == 200, response.content
        assert Workload.objects.get(pk=workload).state == "cancelled"
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_work_cancelled_while_a_cycle_decides_is_not_admitted_by_it(
    fake_cluster: FakeCluster, cast: Cast, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cycle read the workload as pending and decided to admit it; the cancel commits
    before the cycle saves: the cycle decides again, and the work stays cancelled with the
    words of its cancel, not a queue position."""
    from scheduler_bridge.workloads import cycle

    _queue_cycles_without_running_them(monkeypatch)
    workload = submit(cast.member, "vision", 2).json()["id"]
    other = submit(cast.member, "vision", 2, name="other").json()["id"]
    real_snapshot = cycle.build_snapshot
    cancelled: list[int] = []

    def snapshot_then_cancel(*args: Any, **kwargs: Any) -> Any:
        snapshot = real_snapshot(*args, **kwargs)
        if not cancelled:

            def cancel() -> None:
                try:
                    response = client_for(cast.member).post(f"/api/v1/workloads/{workload}/cancel/")
                    cancelled.append(response.status_code)
                finally:
                    connection.close()

            thread = threading.Thread(target=cancel)
            thread.start()
            thread.join(30)
        return snapshot

    monkeypatch.setattr(cycle, "build_snapshot", snapshot_then_cancel)
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert cancelled == [200]
    assert outcome.admitted == [other]
    withdrawn = Workload.objects.get(pk=workload)
    assert withdrawn.state == "cancelled" and withdrawn.queue_position is None
    assert withdrawn.placements == [] and withdrawn.reason_code != "pending"
    assert Workload.objects.get(pk=other).state == "running"


@pytest.mark.django_db(transaction=True)
def test_a_cycle_holds_the_admission_lock_but_not_the_cluster_row(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """While a cycle decides, a second cycle of that cluster waits, but the inventory
    sync and the billing collector can still write the cluster's row."""
    cluster = fake_cluster.cluster
    with _cycle_in_progress(cluster.pk) as errors:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '300ms'")
            Cluster.objects.filter(pk=cluster.pk).update(name=cluster.name)
        with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '300ms'")
            hold_admission_lock(cluster.pk)
    assert errors == []
    with transaction.atomic():
        hold_admission_lock(cluster.pk)  # free again once the first transaction ended


def test_the_reclaim_minimum_run_comes_from_settings(
    fake_cluster: FakeCluster, settings: Any
) -> None:
    assert engine_for(fake_cluster.cluster).config.reclaim_min_run_s == 0.0
    settings.TIDEGATE = {**settings.TIDEGATE, "RECLAIM_MIN_RUN_S": 900.0}
    assert engine_for(fake_cluster.cluster).config.reclaim_min_run_s == 900.0


def test_an_owner_waits_out_the_reclaim_wait_from_settings_then_reclaims(
    fake_cluster: FakeCluster, cast: Cast, settings: Any
) -> None:
    """TIDEGATE_RECLAIM_WAIT_S: the owner's work waits that long for GPUs to free, says
    so, then preempts the borrower as usual."""
    settings.TIDEGATE = {**settings.TIDEGATE, "RECLAIM_WAIT_S": 600.0}
    assert engine_for(fake_cluster.cluster).config.reclaim_wait_s == 600.0
    borrower = submit(cast.platform_admin, "speech", 8, name="big").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    owner = submit(cast.lead, "vision", 6, name="owner").json()["id"]
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert outcome.preempted == []
    waiting = client_for(cast.lead).get(f"/api/v1/workloads/{owner}/").json()
    assert waiting["state"] == "pending" and waiting["queue_position"] == 1
    assert "inside its guarantee, it waits up to 10 min for GPUs to free" in waiting["reason"]
    Workload.objects.filter(pk=owner).update(submitted_at=timezone.now() - timedelta(seconds=601))
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert outcome.preempted == [borrower]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(pk=owner).state == "running"


def test_work_past_its_declared_max_run_time_is_stopped_and_its_gpus_reused(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """Backfill trusts declared run times; the cycle holds work to them, as Slurm does."""
    short = submit(cast.platform_admin, "vision", 8, name="short", max_run_time_s=600).json()
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    late = submit(cast.platform_admin, "vision", 8, name="waits").json()["id"]
    again = submit(cast.platform_admin, "vision", 4, name="also-waits").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(pk=late).state == "pending"
    Workload.objects.filter(pk=short["id"]).update(
        admitted_at=timezone.now() - timedelta(seconds=601)
    )
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    stopped = Workload.objects.get(pk=short["id"])
    assert stopped.state == "timed_out" and stopped.finished_at is not None
    assert stopped.reason == "stopped: ran past its declared max run time of 10 min"
    assert Workload.objects.get(pk=late).state == "running"  # in the same cycle
    assert Workload.objects.get(pk=again).state in ("running", "pending")
    event = AuditEvent.objects.filter(object_id=str(stopped.pk)).latest("created_at")
    assert event.actor is None and "max run time" in event.message


def test_work_within_its_max_run_time_or_without_one_keeps_running(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    timed = submit(cast.platform_admin, "vision", 2, name="timed", max_run_time_s=3600).json()
    untimed = submit(cast.platform_admin, "vision", 2, name="untimed").json()
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    Workload.objects.filter(pk__in=[timed["id"], untimed["id"]]).update(
        admitted_at=timezone.now() - timedelta(seconds=3000)
    )
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    states = set(
        Workload.objects.filter(pk__in=[timed["id"], untimed["id"]]).values_list("state", flat=True)
    )
    assert states == {"running"}


def test_borrowing_of_running_work_follows_its_tenant_after_a_reclaim(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """speech (guarantee 2) runs an older 2-GPU job, then a newer 4-GPU job that borrows
    4. When the older one finishes, the newer holds 2 within the guarantee and borrows
    only 2: chargeback and the ResourceQuota ceiling see the new figure."""
    older = submit(cast.platform_admin, "speech", 2, name="older").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    newer = submit(cast.platform_admin, "speech", 4, name="newer").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(pk=newer).borrowed == {"nvidia.com/gpu": 4}
    client_for(cast.platform_admin).post(f"/api/v1/workloads/{older}/finish/")
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert outcome.rebalanced == [newer]
    moved = Workload.objects.get(pk=newer)
    assert moved.borrowed == {"nvidia.com/gpu": 2}
    assert moved.reason == "borrows 2 of its 4 GPUs now (its tenant's work changed)"
    quota = fake_cluster.api.get_object("ResourceQuota", "speech-train", "tidegate-gpu")
    assert quota is not None and int(quota["spec"]["hard"]["requests.nvidia.com/gpu"]) == 4


def post_body(user: Any, **body: Any) -> Any:
    base = {"cluster": "gpu-east", "tenant": "vision", "name": "job"}
    return client_for(user).post("/api/v1/workloads/", {**base, **body}, format="json")


@pytest.mark.parametrize(
    ("body", "field", "words", "status"),
    [
        (  # each pod set fits the cluster, both together do not (16 H100 in all)
            {
                "pod_sets": [
                    {"name": "a", "count": 2, "gpus_per_pod": 8},
                    {"name": "b", "count": 2, "gpus_per_pod": 8},
                ]
            },
            "pod_sets",
            "cannot be placed together even with every GPU free: they need 32 h100-80gb",
            422,
        ),
        (
            {
                "topology": "node",
                "pod_sets": [
                    {"name": "a", "count": 1, "gpus_per_pod": 8},
                    {"name": "b", "count": 1, "gpus_per_pod": 8},
                ],
            },
            "pod_sets",
            "need 16 h100-80gb on one node; the largest node has 8 h100-80gb",
            422,
        ),
        (
            {"topolgy": "domain", "pod_sets": [{"gpus_per_pod": 1}]},
            "topolgy",
            "Unknown field. Did you mean 'topology'?",
            400,
        ),
        (
            {"pod_sets": [{"gpus_per_pod": 1, "flavour": "h100-80gb", "mig_profile": "1g.5gb"}]},
            "pod_sets",
            "Give a flavour, or a product and/or a MIG profile, not both",
            422,
        ),
        (
            {"pod_sets": [{"name": "x", "gpus_per_pod": 1}, {"name": "x", "gpus_per_pod": 1}]},
            "pod_sets",
            "used more than once: x",
            422,
        ),
        ({"pod_sets": []}, "pod_sets", "Give at least one pod set.", 422),
        ({"pod_sets": [{"gpus_per_pod": "two"}]}, "pod_sets", "valid integer", 400),
    ],
)
def test_bad_submissions_are_refused_with_what_to_fix(
    fake_cluster: FakeCluster, cast: Cast, body: dict, field: str, words: str, status: int
) -> None:
    response = post_body(cast.member, **body)
    assert response.status_code == status, response.content
    assert words in str(response.json()[field]), response.json()
    assert not Workload.objects.exists()


def test_work_larger_than_its_quota_could_ever_give_has_no_place_in_line(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """acme's 12 H100 are the most vision could ever hold: 14 waits without a position,
    listed after the work that is in line."""
    big = submit(cast.member, "vision", 7, count=2, name="too-big").json()["id"]
    submit(cast.platform_admin, "vision", 8, name="first")
    in_line = submit(cast.platform_admin, "vision", 8, name="in-line").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    waiting = Workload.objects.get(pk=big)
    assert waiting.queue_position is None and waiting.reason_code == "never_fits"
    assert Workload.objects.get(pk=in_line).queue_position == 1
    out = StringIO()
    call_command("queue", "--cluster", "gpu-east", "--json", stdout=out)
    names = [json.loads(line)["name"] for line in out.getvalue().splitlines()]
    assert names[-1] == "too-big"


def test_work_that_cannot_be_preempted_is_admitted_inside_the_guarantee_not_as_borrowing(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    """vision (guarantee 6) runs 6 preemptible GPUs; a 2-GPU "prod" job still starts in
    vision's guarantee and the batch work is what borrows: counted once, not twice."""
    batch = submit(cast.platform_admin, "vision", 6, name="batch").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    prod = submit(cast.platform_admin, "vision", 2, name="prod", priority_class="prod").json()
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    started = Workload.objects.get(pk=prod["id"])
    assert started.state == "running" and started.borrowed == {}
    assert started.reason.startswith("within guarantee (cannot be preempted): 2/6")
    assert Workload.objects.get(pk=batch).borrowed == {"nvidia.com/gpu": 2}
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)  # and it stays that way
    assert Workload.objects.get(pk=prod["id"]).reason == started.reason


def test_a_time_limit_is_checked_again_under_the_lock(
    fake_cluster: FakeCluster, cast: Cast, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cycle may preempt the workload between the pick and the stop: then it is left
    alone (pending, not timed_out)."""
    from scheduler_bridge.workloads import lifecycle, services

    pk = submit(cast.platform_admin, "vision", 2, name="short", max_run_time_s=60).json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    Workload.objects.filter(pk=pk).update(admitted_at=timezone.now() - timedelta(seconds=61))
    real_lock = lifecycle.hold_admission_lock

    def preempted_meanwhile(cluster_id: int) -> None:
        Workload.objects.filter(pk=pk).update(state="pending", admitted_at=None)
        real_lock(cluster_id)

    monkeypatch.setattr(lifecycle, "hold_admission_lock", preempted_meanwhile)
    assert services.stop_overrunning(fake_cluster.cluster) == []
    # (the simulated preemption was made in the refused transaction, so it is undone too)
    assert Workload.objects.get(pk=pk).state != "timed_out"


def test_a_reclaimer_keeps_the_gpus_it_freed_from_one_cycle_to_the_next(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """The preemption's planned placement is saved on the workload, the next cycle holds
    those GPUs for it and starts it there, and the hold is dropped once it runs."""
    borrower = submit(cast.platform_admin, "speech", 8, name="big").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    big_nodes = {p["node"] for p in Workload.objects.get(pk=borrower).placements}
    owner = submit(cast.lead, "vision", 6, name="owner").json()["id"]
    decide_and_persist(fake_cluster.cluster)  # one decision: preempt, and hold the GPUs
    waiting = Workload.objects.get(pk=owner)
    assert waiting.reason_code == "preempting"
    held = {p["node"] for p in waiting.held_placements}
    assert held and held <= big_nodes
    assert sum(p["gpus"] for p in waiting.held_placements) == 6
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    started = Workload.objects.get(pk=owner)
    assert started.state == "running" and started.held_placements == []
    assert {p["node"] for p in started.placements} == held


def test_an_elastic_api_workload_shows_its_pods_and_grows_then_shrinks_for_the_owner(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    from scheduler_bridge.quotas.models import Quota

    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(guaranteed=8)
    response = submit(
        cast.platform_admin, "speech", 1, count=8, pod={"flavour": "h100-80gb", "min_count": 4}
    )
    assert response.status_code == 201, response.content
    assert response.json()["elastic"] is True
    assert response.json()["pods"] == [{"pod_set": "main", "current": 0, "min": 4, "max": 8}]
    workload_id = response.json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    shown = client_for(cast.platform_admin).get(f"/api/v1/workloads/{workload_id}/").json()
    assert shown["pods"] == [{"pod_set": "main", "current": 8, "min": 4, "max": 8}]
    assert shown["reason"] == "running 8 of 8 pods: at its maximum"
    assert len(shown["elastic_pods"]) == 4
    quotas = (
        client_for(cast.platform_admin)
        .get("/api/v1/quotas/", {"tenant__slug": "speech", "flavour__name": "h100-80gb"})
        .json()["results"]
    )
    assert [(q["held_core"], q["held_elastic"]) for q in quotas] == [(4, 4)]
    # the owner reclaims: the elastic pods go, the core stays
    assert submit(cast.member, "vision", 4, count=2).status_code == 201
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert outcome.preempted == [] and outcome.resized == [workload_id]
    shown = client_for(cast.platform_admin).get(f"/api/v1/workloads/{workload_id}/").json()
    assert shown["pods"][0]["current"] == 4 and shown["state"] == "running"
    # another tenant's user sees none of it
    assert client_for(cast.member).get(f"/api/v1/workloads/{workload_id}/").status_code == 404


@pytest.mark.parametrize(
    ("pod", "field", "status"),
    [  # 400: the schema refuses it; 422: above this pod set's count
        ({"flavour": "h100-80gb", "min_count": 5}, "min_count", 422),
        ({"flavour": "h100-80gb", "min_count": 0}, "min_count", 400),
        ({"flavour": "h100-80gb", "min_count": "some"}, "min_count", 400),
    ],
)
def test_a_minimum_outside_the_pod_count_is_refused_and_nothing_is_queued(
    fake_cluster: FakeCluster, cast: Cast, pod: dict, field: str, status: int
) -> None:
    response = submit(cast.member, "vision", 1, count=4, pod=pod)
    assert response.status_code == status, response.content
    assert field in response.json()["pod_sets"]["0"]
    assert not Workload.objects.exists()


def test_a_cycles_snapshot_reads_the_same_few_queries_however_many_workloads_are_open(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """The snapshot leaves columns the engine never reads undecoded; reading one of them
    per workload would cost a query per workload, which this would show."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler_bridge.workloads.snapshot import build_snapshot

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            build_snapshot(fake_cluster.cluster)
        return len(captured.captured_queries)

    submit(cast.member, "vision", 2, name="first")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    few = queries()
    for n in range(6):
        submit(cast.member, "vision", 2, name=f"more-{n}")
        submit(cast.platform_admin, "speech", 4, name=f"other-{n}")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.filter(state="running").count() > 1
    assert Workload.objects.filter(state="pending").count() > 1
    assert queries() == few
