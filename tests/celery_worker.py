"""A real Celery worker process on Redis, for tests that need the whole round trip."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection

from config.celery_app import app as celery_app

ROOT = Path(__file__).resolve().parent.parent
BROKER = "redis://127.0.0.1:6379/15"


@dataclass
class Worker:
    queue: str
    mail_dir: Path
    process: subprocess.Popen[bytes]


@pytest.fixture
def celery_worker(transactional_db: Any, tmp_path: Path) -> Iterator[Worker]:
    """Starts `celery worker` against the test database on a queue of its own."""
    redis.Redis.from_url(BROKER).ping()
    queue = f"tidegate-test-{uuid.uuid4().hex[:8]}"
    mail_dir = tmp_path / "mail"
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "CELERY_BROKER_URL": BROKER,
        "CELERY_RESULT_BACKEND": BROKER,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "EMAIL_FILE_PATH": str(mail_dir),
    }
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            "solo",
            "--queues",
            queue,
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--hostname",
            f"{queue}@%h",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    previous = (celery_app.conf.task_always_eager, celery_app.conf.task_default_queue)
    celery_app.conf.task_always_eager = False
    celery_app.conf.task_default_queue = queue
    try:
        _wait_until_ready(tmp_path / "worker.log", process)
        yield Worker(queue=queue, mail_dir=mail_dir, process=process)
    finally:
        celery_app.conf.task_always_eager, celery_app.conf.task_default_queue = previous
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _wait_until_ready(log_path: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        if "ready." in text:
            return
        if process.poll() is not None:
            raise RuntimeError(f"celery worker exited early:\n{text}")
        time.sleep(0.2)
    raise RuntimeError("celery worker did not become ready within 180 s")


def wait_for(predicate: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False
