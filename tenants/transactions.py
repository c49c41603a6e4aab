"""The one way background work is queued: with the change that asks for it, once.

Every app queues its Celery tasks through ``queue_after_commit`` with the task's dotted
path. Naming the task instead of importing it keeps services from importing task
modules (which import services), so no import cycle can form. The request is written to
the outbox in the current transaction (tenants.outbox), so it commits or rolls back with
the change: a worker never looks for a row that a rolled-back transaction never wrote, a
broker outage delays the task but never loses it, and a committed write never turns into
an error because the broker was down.
"""

from __future__ import annotations

from collections.abc import Hashable

from django.db import transaction

from tenants import outbox
from tenants.outbox import task_for

__all__ = ["queue_after_commit", "queue_now", "task_for"]


class _RelayAfterCommit:
    """An on-commit callback that sends the outbox message `key`; two are equal when they
    would send the same message, which is what lets `queue_after_commit` dedupe them."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _RelayAfterCommit) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __call__(self) -> None:
        outbox.relay_keys([self.key])


def queue_after_commit(task_path: str, *args: Hashable) -> None:
    """Queue Celery task `task_path(*args)` once the current transaction commits (at once
    when none is open), at most once however many changes ask for it: one quota sync for
    a transaction that changed fifty quotas of one cluster, one admission cycle for a
    burst of submits that commit before the cycle starts."""
    task_for(task_path)  # refuse an unknown task now, where the caller can see it
    key = outbox.write(task_path, args)
    callback = _RelayAfterCommit(key)
    # Django keeps pending on-commit callbacks on the connection (and drops them on
    # rollback), so looking there dedupes without state of our own that could go stale.
    pending = transaction.get_connection().run_on_commit
    if any(func == callback for _, func, _ in pending):
        return
    transaction.on_commit(callback)


def queue_now(task_path: str, *args: Hashable) -> None:
    """Queue Celery task `task_path(*args)` from outside any change (a task, the queue
    watch): written to the outbox and sent at once, still at most once while one waits
    unstarted, and sent by the relay if the broker is down."""
    task_for(task_path)
    outbox.relay_keys([outbox.write(task_path, args)])
