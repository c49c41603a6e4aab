"""A real Celery worker process on Redis, for tests that need the whole round trip."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.result import allow_join_result
from django.db import connection

from config.celery_app import app as celery_app

ROOT = Path(__file__).resolve().parent.parent
BROKER = "redis://127.0.0.1:6379/15"


@dataclass
class Worker:
    queue: str
    mail_dir: Path
    process: subprocess.Popen[bytes]


@dataclass
class Workers:
    queue: str
    processes: list[subprocess.Popen[bytes]]
    logs: list[Path]


@pytest.fixture
def celery_worker(transactional_db: Any, tmp_path: Path) -> Iterator[Worker]:
    """Starts `celery worker` against the test database on a queue of its own."""
    with workers(tmp_path, count=1) as started:
        yield Worker(queue=started.queue, mail_dir=tmp_path / "mail", process=started.processes[0])


@pytest.fixture
def two_celery_workers(transactional_db: Any, tmp_path: Path) -> Iterator[Workers]:
    """Two worker processes on one queue: tasks queued at once run at the same time."""
    with workers(tmp_path, count=2) as started:
        yield started


@contextmanager
def workers(
    tmp_path: Path,
    count: int,
    broker: str = BROKER,
    queue: str | None = None,
    **extra_env: str,
) -> Iterator[Workers]:
    """``count`` worker processes on ``broker`` (the shared test Redis by default),
    consuming ``queue`` (a fresh one by default); ``extra_env`` on top of their settings."""
    redis.Redis.from_url(broker).ping()
    queue = queue or f"tidegate-test-{uuid.uuid4().hex[:8]}"
    env = (
        os.environ
        | {
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "CELERY_BROKER_URL": broker,
            "CELERY_RESULT_BACKEND": broker,
            "CELERY_TASK_DEFAULT_QUEUE": queue,
            "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "EMAIL_FILE_PATH": str(tmp_path / "mail"),
        }
        | extra_env
    )
    processes: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    files = []
    previous = (celery_app.conf.task_always_eager, celery_app.conf.task_default_queue)
    try:
        for number in range(count):
            log_path = tmp_path / f"worker-{number}.log"
            log = open(log_path, "wb")  # noqa: SIM115 - closed below
            files.append(log)
            processes.append(
                subprocess.Popen(
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
                        f"{queue}-{number}@%h",
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            logs.append(log_path)
        for log_path, process in zip(logs, processes, strict=True):
            _wait_until_ready(log_path, process)
        celery_app.conf.task_always_eager = False
        celery_app.conf.task_default_queue = queue
        # This process is a client of the workers, so it may wait for results. Celery's
        # "inside a task" flag is one global that eager tasks run by two threads at once
        # (the live server of the browser tests) can leave set; clear it for the test.
        with allow_join_result():
            yield Workers(queue=queue, processes=processes, logs=logs)
    finally:
        celery_app.conf.task_always_eager, celery_app.conf.task_default_queue = previous
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in files:
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
