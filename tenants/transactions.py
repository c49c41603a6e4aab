"""The one way background work is queued: after the current transaction commits, once.

Every app queues its Celery tasks through ``queue_after_commit`` with the task's dotted
path. Naming the task instead of importing it keeps services from importing task
modules (which import services), so no import cycle can form; queuing after commit means
a worker never looks for a row that a rolled-back transaction never wrote, and never runs
twice for one change.
"""

from __future__ import annotations

from collections.abc import Hashable
from importlib import import_module
from typing import Any

from django.db import transaction


class _QueueTask:
    """An on-commit callback that queues `task_path` with `args`; two are equal when they
    would queue the same thing, which is what lets `queue_after_commit` dedupe them."""

    def __init__(self, task_path: str, args: tuple[Hashable, ...]) -> None:
        self.key = (task_path, args)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _QueueTask) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __call__(self) -> None:
        task_path, args = self.key
        task_for(task_path).delay(*args)


def task_for(task_path: str) -> Any:
    """The Celery task at ``task_path`` ("app.tasks.name"); LookupError naming the path
    when there is none (a typo fails loudly in tests, not silently in production)."""
    module_path, _, name = task_path.rpartition(".")
    try:
        task = getattr(import_module(module_path), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise LookupError(f"no task {task_path!r}: {error}") from error
    if not hasattr(task, "delay"):
        raise LookupError(f"{task_path!r} is not a Celery task")
    return task


def queue_after_commit(task_path: str, *args: Hashable) -> None:
    """Queue Celery task `task_path(*args)` after the current transaction commits (at
    once when none is open), at most once however many changes in the transaction ask
    for it: one quota sync for a transaction that changed fifty quotas of one cluster."""
    task_for(task_path)  # refuse an unknown task now, where the caller can see it
    callback = _QueueTask(task_path, tuple(args))
    # Django keeps pending on-commit callbacks on the connection (and drops them on
    # rollback), so looking there dedupes without state of our own that could go stale.
    pending = transaction.get_connection().run_on_commit
    if any(func == callback for _, func, _ in pending):
        return
    transaction.on_commit(callback)
