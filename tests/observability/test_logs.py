"""Log lines are JSON and say which request or task wrote them: the request id comes
from X-Request-ID (or is made up) and is echoed back; a worker's lines carry the task id
and the id of the request that queued the task."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from typing import Any

import pytest

from config import logs
from tenants.tasks import heartbeat
from tests.celery_worker import Worker, celery_worker
from tests.conftest import Cast, client_for

__all__ = ["celery_worker"]


@contextmanager
def json_lines() -> Iterator[list[dict[str, Any]]]:
    """The lines the configured console handler writes (its formatter and filters)."""
    root = logging.getLogger()
    console = next(h for h in root.handlers if isinstance(h.formatter, logging.Formatter))
    stream = StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(console.formatter)
    for log_filter in console.filters:
        handler.addFilter(log_filter)
    root.addHandler(handler)
    lines: list[dict[str, Any]] = []
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        lines.extend(json.loads(line) for line in stream.getvalue().splitlines())


@pytest.mark.django_db
def test_every_line_of_a_request_carries_the_request_id_it_was_given(cast: Cast) -> None:
    with json_lines() as lines:
        response = client_for(cast.member).get(
            "/api/v1/workloads/987654/", HTTP_X_REQUEST_ID="edge-7f3a.1"
        )
    assert response.status_code == 404 and response["X-Request-ID"] == "edge-7f3a.1"
    (not_found,) = [line for line in lines if line["message"].startswith("Not Found")]
    assert not_found["request_id"] == "edge-7f3a.1" and not_found["level"] == "WARNING"
    assert not_found["logger"] == "django.request" and not_found["task_id"] is None


@pytest.mark.django_db
@pytest.mark.parametrize("given", [None, "forged\nline", "x" * 300])
def test_a_request_without_a_usable_id_gets_a_fresh_one(cast: Cast, given: str | None) -> None:
    headers = {} if given is None else {"X-Request-ID": given}
    with json_lines() as lines:
        response = client_for(cast.member).get("/api/v1/workloads/987654/", headers=headers)
    made_up = response["X-Request-ID"]
    assert len(made_up) == 32 and made_up != given
    assert [line["request_id"] for line in lines] == [made_up]
    assert logs.current_request_id.get() is None  # nothing leaks into the next request


@pytest.mark.celery_worker
@pytest.mark.xdist_group("celery")
def test_a_workers_lines_carry_the_task_id_and_the_request_that_queued_it(
    celery_worker: Worker,
) -> None:
    token = logs.current_request_id.set("req-from-the-api")
    try:
        result = heartbeat.apply_async(queue=celery_worker.queue)
    finally:
        logs.current_request_id.reset(token)
    assert result.get(timeout=120) == "ok"
    written = (celery_worker.mail_dir.parent / "worker-0.log").read_text()
    lines = [json.loads(line) for line in written.splitlines() if line.startswith("{")]
    (beat,) = [line for line in lines if line["message"] == "heartbeat"]
    assert beat["task_id"] == result.id and beat["task_name"] == "tenants.tasks.heartbeat"
    assert beat["request_id"] == "req-from-the-api"
    ready = [line for line in lines if line["message"].endswith("ready.")]
    assert ready and ready[0]["task_id"] is None
