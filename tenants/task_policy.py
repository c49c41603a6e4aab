"""How every Tidegate task behaves when something it needs is down.

``background_task`` is ``shared_task`` with the house policy:

- acknowledged late and rejected (so redelivered) when the worker dies mid-task: every
  task is safe to run twice (it takes ids and reads the current state);
- retried with exponential backoff and jitter when the database is unreachable (a
  PostgreSQL restart or failover) or any of ``retry_for`` happens, instead of failing
  and waiting for the next beat;
- bounded by the global time limits (CELERY_TASK_TIME_LIMIT), which also set the
  broker's visibility timeout (config.settings.base).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError

# What a database outage raises through Django: a refused or dropped connection.
DATABASE_OUTAGE = (OperationalError, InterfaceError)


def background_task(
    *, retry_for: tuple[type[BaseException], ...] = (), max_retries: int = 8, **options: Any
) -> Callable[[Callable[..., Any]], Any]:
    """Decorate a task function with the house policy (see the module's docstring)."""
    return shared_task(  # type: ignore[no-any-return]
        acks_late=True,
        reject_on_worker_lost=True,
        autoretry_for=DATABASE_OUTAGE + retry_for,
        retry_backoff=5,
        retry_backoff_max=300,
        retry_jitter=True,
        max_retries=max_retries,
        **options,
    )
