"""Background work is queued once per transaction, after commit, never on rollback."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from tenants.transactions import queue_after_commit


@pytest.mark.django_db(transaction=True)
def test_many_requests_in_one_transaction_queue_the_task_once(monkeypatch: Any) -> None:
    from scheduler_bridge import tasks

    calls: list[int] = []
    monkeypatch.setattr(tasks.quota_sync, "delay", calls.append)
    with transaction.atomic():
        for _ in range(5):
            queue_after_commit("scheduler_bridge.tasks.quota_sync", 7)
        queue_after_commit("scheduler_bridge.tasks.quota_sync", 8)
        assert calls == []  # nothing before commit
    assert calls == [7, 8]
    with pytest.raises(RuntimeError), transaction.atomic():
        queue_after_commit("scheduler_bridge.tasks.quota_sync", 9)
        raise RuntimeError("rolled back")
    assert calls == [7, 8]
