"""A real Celery worker on Redis runs the tasks queued by the app, after commit."""

from __future__ import annotations

import pytest

from tenants import services
from tenants.tasks import heartbeat
from tests.celery_worker import Worker, celery_worker, wait_for
from tests.factories import TenantFactory, UserFactory

__all__ = ["celery_worker"]

pytestmark = [pytest.mark.celery_worker, pytest.mark.xdist_group("celery")]


def test_a_task_round_trips_through_redis_and_a_worker(celery_worker: Worker) -> None:
    assert heartbeat.apply_async(queue=celery_worker.queue).get(timeout=120) == "ok"


def test_adding_a_member_emails_them_from_the_worker_after_commit(celery_worker: Worker) -> None:
    root = UserFactory(username="root", is_staff=True)
    newcomer = UserFactory(username="newcomer", email="newcomer@example.com")
    team = TenantFactory(slug="vision", name="Vision")
    services.membership_create(actor=root, tenant=team, user=newcomer, role="lead")

    def mailed() -> bool:
        return celery_worker.mail_dir.exists() and any(celery_worker.mail_dir.iterdir())

    assert wait_for(mailed, timeout=120), "the worker sent no mail"
    mail = next(celery_worker.mail_dir.iterdir()).read_text()
    assert "To: newcomer@example.com" in mail
    assert "you are now Lead of Vision" in mail
