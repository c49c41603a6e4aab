"""Queuing background work once per transaction, after it commits."""

from __future__ import annotations

from collections.abc import Hashable
from importlib import import_module

from django.db import transaction


class _QueueTask:
    """An on-commit callback that queues `task_path` with `argument`; two are equal when
    they would queue the same thing, which is what lets `queue_once` dedupe them."""

    def __init__(self, task_path: str, argument: Hashable) -> None:
        self.key = (task_path, argument)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _QueueTask) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __call__(self) -> None:
        task_path, argument = self.key
        module, name = task_path.rsplit(".", 1)
        getattr(import_module(module), name).delay(argument)


def queue_once(task_path: str, argument: Hashable) -> None:
    """Queue Celery task `task_path(argument)` after the current transaction commits, at
    most once however many changes in the transaction ask for it (e.g. one quota sync
    for a transaction that changed fifty quotas of one cluster)."""
    callback = _QueueTask(task_path, argument)
    # Django keeps pending on-commit callbacks on the connection (and drops them on
    # rollback), so looking there dedupes without state of our own that could go stale.
    pending = transaction.get_connection().run_on_commit
    if any(func == callback for _, func, _ in pending):
        return
    transaction.on_commit(callback)
