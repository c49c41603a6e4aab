"""While the database or the broker does not answer: the probes say which; without the
database the pod is not ready and the API answers 503 problem JSON with Retry-After
(never an HTML 500), the portal a 503 page; without the broker the pod stays ready.

Each test runs the production web server against a closed port in place of the
database or the broker; the shared PostgreSQL and Redis keep running."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from django.db import connection

from tests.observability.server import closed_port, gunicorn

REDIS = "redis://127.0.0.1:6379/15"
KUBELET = {"Host": "10.244.1.17:8000"}  # a pod IP: not in ALLOWED_HOSTS
TOKEN = {"Authorization": "Token " + "0" * 40}


def _database_url(name: str) -> str:
    settings = connection.settings_dict
    return f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{name}"


def test_with_the_database_down_readiness_fails_and_the_api_answers_503_problem_json(
    tmp_path: Path,
) -> None:
    down = f"postgres://postgres@127.0.0.1:{closed_port()}/tidegate"
    with gunicorn(tmp_path, DATABASE_URL=down, CELERY_BROKER_URL=REDIS) as url:
        assert requests.get(f"{url}/healthz", headers=KUBELET, timeout=10).status_code == 200
        ready = requests.get(f"{url}/readyz", headers=KUBELET, timeout=10)
        assert ready.status_code == 503 and ready.headers["Retry-After"] == "10"
        assert ready.json()["checks"]["database"] == "unreachable (OperationalError)"
        assert ready.json()["checks"]["broker"] == "ok"

        for method in ("get", "post"):
            api = requests.request(
                method, f"{url}/api/v1/workloads/", headers=TOKEN, json={}, timeout=10
            )
            assert api.status_code == 503, api.text
            assert api.headers["Content-Type"] == "application/problem+json"
            assert api.headers["Retry-After"] == "10"
            problem = api.json()
            assert problem["status"] == 503 and problem["type"].endswith("/unavailable")
            assert problem["title"] == "Temporarily unavailable"
            assert "try again in 10 seconds" in problem["detail"]
            assert api.headers["X-Request-ID"]

        # a signed-in browser: the session is read in a middleware, before any view
        page = requests.get(f"{url}/", cookies={"sessionid": "a" * 32}, timeout=10)
        assert page.status_code == 503 and page.headers["Retry-After"] == "10"
        assert "try again" in page.text


def test_with_the_broker_unreachable_the_pod_stays_ready_and_names_the_broker(
    db: Any, tmp_path: Path
) -> None:
    with gunicorn(
        tmp_path,
        DATABASE_URL=_database_url(connection.settings_dict["NAME"]),
        CELERY_BROKER_URL=f"redis://127.0.0.1:{closed_port()}/0",
        TIDEGATE_PROBE_TIMEOUT_S="1",
    ) as url:
        ready = requests.get(f"{url}/readyz", headers=KUBELET, timeout=30)
        assert ready.status_code == 200 and "Retry-After" not in ready.headers
        body = ready.json()
        assert body["status"] == "ready" and body["degraded"] == ["broker"]
        assert body["checks"]["database"] == "ok" and body["checks"]["migrations"] == "ok"
        assert body["checks"]["broker"].startswith("unreachable")


@pytest.fixture
def unmigrated_database() -> Iterator[str]:
    name = f"tidegate_unmigrated_{uuid.uuid4().hex[:8]}"
    admin_url = _database_url("postgres").replace("postgres://", "postgresql://")
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_database_without_the_migrations_is_not_ready(
    unmigrated_database: str, tmp_path: Path
) -> None:
    with gunicorn(
        tmp_path, DATABASE_URL=_database_url(unmigrated_database), CELERY_BROKER_URL=REDIS
    ) as url:
        ready = requests.get(f"{url}/readyz", headers=KUBELET, timeout=30)
        assert ready.status_code == 503
        checks = ready.json()["checks"]
        assert checks["database"] == "ok" and checks["broker"] == "ok"
        assert checks["migrations"].endswith("not applied")
