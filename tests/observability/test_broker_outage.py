"""The broker stops: nothing is lost, nothing is doubled, and clients never see an error
for a write that committed.

Each test runs Redis of its own (on a free port, keeping nothing on disk, as the
shared one does), the production web server (gunicorn) and a real Celery worker
against it, then stops and restarts that Redis; the shared Redis is never touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from django.db import connection

from scheduler_bridge.workloads.models import Workload
from tenants.models import AuditEvent, OutboxMessage
from tenants.tokens import token_create
from tests.celery_worker import wait_for, workers
from tests.conftest import Cast
from tests.observability.server import ROOT, closed_port, gunicorn
from tests.workloads.conftest import FakeCluster, fake_cluster, kube_api, kubeconfig

__all__ = ["fake_cluster", "kube_api", "kubeconfig"]

pytestmark = [pytest.mark.celery_worker, pytest.mark.xdist_group("celery")]


class OwnRedis:
    """A redis-server on a port of its own that a test may stop and start again."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = closed_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = tmp_path / f"redis-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                str(self.log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        client = redis.Redis.from_url(self.url)
        assert wait_for(lambda: _answers(client), timeout=20), "redis-server did not start"

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=20)
            self.process = None


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def production(
    transactional_db: Any,
    own_redis: OwnRedis,
    fake_cluster: FakeCluster,
    cast: Cast,
    tmp_path: Path,
) -> Iterator[dict[str, Any]]:
    """gunicorn on the test database and the test's own Redis, tasks sent to a queue of
    the test's own; the member's API token."""
    settings = connection.settings_dict
    queue = f"tidegate-outage-{uuid.uuid4().hex[:8]}"
    env = {
        "DATABASE_URL": f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}"
        f"/{settings['NAME']}",
        "CELERY_BROKER_URL": own_redis.url,
        "CELERY_RESULT_BACKEND": own_redis.url,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "CELERY_TASK_DEFAULT_QUEUE": queue,
    }
    _, token = token_create(user=cast.member, name="outage test")
    with gunicorn(tmp_path, **env) as url:
        yield {"url": url, "env": env, "queue": queue, "auth": {"Authorization": f"Token {token}"}}


def _submit(production: dict[str, Any], name: str, key: str) -> requests.Response:
    return requests.post(
        f"{production['url']}/api/v1/workloads/",
        json={
            "cluster": "gpu-east",
            "tenant": "vision",
            "name": name,
            "pod_sets": [{"count": 1, "gpus_per_pod": 2, "flavour": "h100-80gb"}],
        },
        headers=production["auth"] | {"Idempotency-Key": key},
        timeout=60,
    )


def _relay_once(production: dict[str, Any], **env: str) -> subprocess.CompletedProcess[str]:
    """``manage.py relay_outbox --once``, as an operator (or beat's relay) would."""
    return subprocess.run(
        [sys.executable, "manage.py", "relay_outbox", "--once"],
        cwd=ROOT,
        env=os.environ
        | {"DJANGO_SETTINGS_MODULE": "config.settings.test"}
        | production["env"]
        | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _admitted_once(pk: int) -> bool:
    admissions = AuditEvent.objects.filter(
        object_id=str(pk), object_type__iendswith="workload", after__transition="admit"
    ).count()
    return admissions == 1


def test_the_pod_stays_ready_and_serving_while_redis_is_stopped(
    production: dict[str, Any], own_redis: OwnRedis
) -> None:
    """Readiness depends on what the pod needs to serve (PostgreSQL); the broker's state
    is reported beside it, so a Redis outage never takes the web tier out of rotation."""
    url, auth = production["url"], production["auth"]
    kubelet = {"Host": "10.244.1.17:8000"}  # a pod IP, as the kubelet calls it
    before = requests.get(f"{url}/readyz", headers=kubelet, timeout=30)
    assert before.status_code == 200 and before.json()["checks"]["broker"] == "ok"
    assert "degraded" not in before.json()
    own_redis.stop()
    during = requests.get(f"{url}/readyz", headers=kubelet, timeout=30)
    assert during.status_code == 200, during.text
    assert during.json()["status"] == "ready" and during.json()["degraded"] == ["broker"]
    assert during.json()["checks"]["broker"].startswith("unreachable")
    # and it serves: reads, and a write whose background work waits in the outbox
    assert requests.get(f"{url}/api/v1/workloads/", headers=auth, timeout=60).status_code == 200
    answer = _submit(production, "while-redis-is-stopped", key="ready-1")
    assert answer.status_code == 201, answer.text
    assert OutboxMessage.objects.exists()


def test_submits_while_redis_is_down_answer_201_and_run_once_it_is_back(
    production: dict[str, Any], own_redis: OwnRedis, tmp_path: Path
) -> None:
    own_redis.stop()
    answers = [_submit(production, f"while-down-{i}", key=f"key-{i}") for i in range(4)]
    assert [a.status_code for a in answers] == [201] * 4, answers[0].text
    retried = _submit(production, "while-down-0", key="key-0")  # the client lost the answer
    assert retried.status_code == 201 and retried.json()["id"] == answers[0].json()["id"]
    assert retried.headers["Idempotent-Replayed"] == "true"
    ids = [a.json()["id"] for a in answers]
    assert Workload.objects.filter(name__startswith="while-down-").count() == 4
    waiting = OutboxMessage.objects.get(task="scheduler_bridge.tasks.admission_cycle")
    assert waiting.sent_at is None and waiting.last_error  # kept, not lost

    own_redis.start()
    with workers(tmp_path, count=1, broker=own_redis.url, queue=production["queue"]):
        relayed = _relay_once(production)
        assert relayed.returncode == 0, relayed.stderr
        assert wait_for(
            lambda: Workload.objects.filter(pk__in=ids, state="running").count() == 4, timeout=90
        )
    assert all(_admitted_once(pk) for pk in ids)
    assert not OutboxMessage.objects.exists()


def test_tasks_queued_before_a_redis_restart_are_sent_again_and_run(
    production: dict[str, Any], own_redis: OwnRedis, tmp_path: Path
) -> None:
    """No worker is running: the cycle the submit asked for waits in Redis, and Redis
    restarts, losing it. The outbox still has it and sends it again."""
    answer = _submit(production, "queued", key="queued-1")
    assert answer.status_code == 201, answer.text
    message = OutboxMessage.objects.get(task="scheduler_bridge.tasks.admission_cycle")
    assert message.sent_at is not None  # the broker took it
    own_redis.stop()
    own_redis.start()  # the queue lived in memory only: gone
    client = redis.Redis.from_url(own_redis.url)
    assert client.llen(production["queue"]) == 0

    with workers(tmp_path, count=1, broker=own_redis.url, queue=production["queue"]):
        too_early = _relay_once(production, TIDEGATE_OUTBOX_RESEND_AFTER_S="600")
        assert "sent 0 message(s)" in too_early.stdout  # not yet: it may still be queued
        time.sleep(1.5)
        relayed = _relay_once(production, TIDEGATE_OUTBOX_RESEND_AFTER_S="1")
        assert "sent 1 message(s)" in relayed.stdout, relayed.stdout + relayed.stderr
        pk = answer.json()["id"]
        assert wait_for(lambda: Workload.objects.get(pk=pk).state == "running", timeout=90)
    assert _admitted_once(answer.json()["id"])
    assert not OutboxMessage.objects.exists()


def _admission_lock_holders(cluster_id: int) -> int:
    from scheduler_bridge.workloads.locks import ADMISSION_LOCK_BASE

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objid = %s",
            [ADMISSION_LOCK_BASE >> 32, cluster_id],
        )
        return int(cursor.fetchone()[0])


def test_a_worker_killed_mid_cycle_releases_the_lock_and_the_next_cycle_admits_once(
    production: dict[str, Any], own_redis: OwnRedis, fake_cluster: FakeCluster, tmp_path: Path
) -> None:
    """The worker holds the cluster's admission lock and waits for a workload row the
    test holds; it is killed (SIGKILL) there. Its transaction never commits, the lock goes
    with its connection, and the cycle Redis delivers again admits the work once."""
    import psycopg

    settings = connection.settings_dict
    dsn = (
        f"postgresql://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    )
    cluster_id = fake_cluster.cluster.pk
    short_visibility = {"CELERY_VISIBILITY_TIMEOUT": "5"}
    with psycopg.connect(dsn) as holder:
        answer = _submit(production, "killed", key="killed-1")
        assert answer.status_code == 201, answer.text
        pk = answer.json()["id"]
        holder.execute("SELECT id FROM scheduler_bridge_workload WHERE id = %s FOR UPDATE", [pk])
        with workers(
            tmp_path, count=1, broker=own_redis.url, queue=production["queue"], **short_visibility
        ) as first:
            assert wait_for(lambda: _admission_lock_holders(cluster_id) == 1, timeout=60)
            first.processes[0].kill()  # mid-cycle: deciding, holding the lock
            first.processes[0].wait(timeout=20)
        holder.rollback()  # the row is free: the dead worker's session ends, unfinished
    assert wait_for(lambda: _admission_lock_holders(cluster_id) == 0, timeout=30)
    assert Workload.objects.get(pk=pk).state == "pending"  # nothing of it was saved

    second = tmp_path / "second"
    second.mkdir()
    with workers(
        second, count=1, broker=own_redis.url, queue=production["queue"], **short_visibility
    ) as started:
        running = wait_for(lambda: Workload.objects.get(pk=pk).state == "running", timeout=90)
        assert running, started.logs[0].read_text()
    assert _admitted_once(pk)
