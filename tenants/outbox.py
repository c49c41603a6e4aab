"""The transactional outbox: background tasks survive a broker outage and never fail a write.

A change that needs background work writes an ``OutboxMessage`` row in its own
transaction (``write``); the row commits or rolls back with the change. After commit the
row is handed to the broker at once (``relay_keys``, the fast path); if the broker is
down the write has still succeeded, the error is recorded on the row, and the relay
(``relay_due``, a beat task every few seconds, or ``manage.py relay_outbox``) sends it
when the broker is back. A row stays until a worker starts its task (``task_started``),
so a message the broker lost (a Redis restart drops what it held in memory) is sent
again after ``OUTBOX_RESEND_AFTER_S``: every task runs at least once, and tasks are
written to be safe to run twice.

One row per task and arguments at a time: a burst of fifty submits to one cluster asks
for one admission cycle, not fifty. A task may also be given a shortest interval between
two runs (``TASK_MIN_INTERVAL_S``): it is then sent with a countdown, and changes made
while it waits join it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from datetime import datetime, timedelta
from importlib import import_module
from typing import Any

from celery.exceptions import Retry
from django.conf import settings
from django.db import DatabaseError, connections
from django.db.models import Count, F, Q
from django.utils import timezone

from tenants.models import OutboxMessage, TaskLastStart

logger = logging.getLogger(__name__)

# A message the on-commit fast path has not sent yet is left to it for this long before
# the relay sends it, so the two rarely send one message twice.
FAST_PATH_GRACE = timedelta(seconds=2)
# After the broker refused a send, the fast path stops trying for this long: requests
# answer at once and the relay sends what they wrote.
FAST_PATH_PAUSE_S = 10.0
RELAY_BATCH = 500

_fast_path_paused_until = 0.0


def message_key(task: str, args: Sequence[Any]) -> str:
    """The task and its JSON arguments; hashed when longer than the column."""
    encoded = json.dumps(list(args), separators=(",", ":"), sort_keys=True)
    key = f"{task}:{encoded}"
    if len(key) <= 500:
        return key
    return f"{task}:sha256={hashlib.sha256(encoded.encode()).hexdigest()}"


def write(task: str, args: Sequence[Hashable]) -> str:
    """Write the message for ``task(*args)`` in the current transaction; nothing when an
    unstarted one for the same task and arguments exists. Returns its key."""
    key = message_key(task, args)
    OutboxMessage.objects.bulk_create(
        [OutboxMessage(key=key, task=task, args=list(args))], ignore_conflicts=True
    )
    return key


def relay_keys(keys: Iterable[str]) -> int:
    """The fast path, after commit: send the unsent messages of ``keys`` now. Never raises
    for a broker or database outage (the write committed; the relay sends them later),
    and while the broker is known down it does not even try. Returns messages sent."""
    if _fast_path_paused() and not _eager():
        return 0
    try:
        messages = list(OutboxMessage.objects.filter(key__in=list(keys), sent_at__isnull=True))
    except DatabaseError:
        logger.warning("outbox: reading messages to send failed; the relay sends them")
        return 0
    return _send_all(messages, fast_path=True)


def relay_due(now: datetime | None = None, *, fresh_too: bool = False) -> int:
    """Send every message that is due: unsent ones the fast path left (older than a
    moment, or all with ``fresh_too``), and sent ones no worker started within
    ``OUTBOX_RESEND_AFTER_S`` (the broker lost them). Returns messages sent."""
    now = now or timezone.now()
    resend_before = now - timedelta(seconds=resend_after_s())
    unsent_before = now if fresh_too else now - FAST_PATH_GRACE
    due = OutboxMessage.objects.filter(
        Q(sent_at__isnull=True, created_at__lte=unsent_before) | Q(sent_at__lte=resend_before)
    )[:RELAY_BATCH]
    return _send_all(list(due), fast_path=False)


def task_started(task: str, args: Sequence[Any]) -> None:
    """A worker starts ``task(*args)``: its message is done (a later change asks anew),
    and a task with a shortest interval remembers when it last started."""
    key = message_key(task, args)
    try:
        OutboxMessage.objects.filter(key=key).delete()
    except DatabaseError:
        logger.warning("outbox: could not mark %s started", key, exc_info=True)
    if min_interval_s(task) > 0:
        try:
            TaskLastStart.objects.bulk_create(
                [TaskLastStart(key=key, started_at=timezone.now())],
                update_conflicts=True,
                unique_fields=["key"],
                update_fields=["started_at"],
            )
        except DatabaseError:  # the task's own queries will meet the outage too
            logger.warning("outbox: could not record the start of %s", key, exc_info=True)


def depth() -> dict[tuple[str, ...], float]:
    """Messages waiting per task and state (unsent, sent), for the /metrics gauge."""
    rows = OutboxMessage.objects.values("task").annotate(
        unsent=Count("pk", filter=Q(sent_at__isnull=True)),
        sent=Count("pk", filter=Q(sent_at__isnull=False)),
    )
    counts: dict[tuple[str, ...], float] = {}
    for row in rows:
        for state in ("unsent", "sent"):
            if row[state]:
                counts[(row["task"], state)] = row[state]
    return counts


def oldest_unsent_age_s(now: datetime | None = None) -> float:
    """Seconds the oldest unsent message has waited (0 when none): the relay's lag."""
    now = now or timezone.now()
    oldest = OutboxMessage.objects.filter(sent_at__isnull=True).order_by("created_at").first()
    return 0.0 if oldest is None else max(0.0, (now - oldest.created_at).total_seconds())


def task_for(task_path: str) -> Any:
    """The Celery task at ``task_path`` ("app.tasks.name"); LookupError naming the path
    when there is none (a typo fails loudly in tests, not silently in production)."""
    module_path, _, name = task_path.rpartition(".")
    try:
        task = getattr(import_module(module_path), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise LookupError(f"no task {task_path!r}: {error}") from error
    if not hasattr(task, "apply_async"):
        raise LookupError(f"{task_path!r} is not a Celery task")
    return task


def resend_after_s() -> float:
    return float(settings.TIDEGATE.get("OUTBOX_RESEND_AFTER_S", 120))


def min_interval_s(task: str) -> float:
    intervals = settings.TIDEGATE.get("TASK_MIN_INTERVAL_S", {})
    return float(intervals.get(task, 0))


# --- helpers -----------------------------------------------------------------------------


def _send_all(messages: list[OutboxMessage], *, fast_path: bool) -> int:
    sent = 0
    for message in messages:
        if not _claim(message):
            continue  # the other path sent it meanwhile, or a worker already started it
        error = _send(message)
        if error is None:
            sent += 1
            continue
        _release(message, error)
        if fast_path:
            _pause_fast_path()
            logger.warning("outbox: broker refused %s (%s); the relay sends it", message.key, error)
            break
        logger.warning("outbox: broker refused %s (%s); trying again later", message.key, error)
        break  # the broker is down for the rest as well
    return sent


def _claim(message: OutboxMessage) -> bool:
    """Mark ``message`` sent unless someone else did first (a conditional update, so the
    fast path and the relay never hold a lock while they talk to the broker)."""
    now = timezone.now()
    try:
        return (
            OutboxMessage.objects.filter(pk=message.pk, sent_at=message.sent_at).update(
                sent_at=now, send_attempts=F("send_attempts") + 1
            )
            == 1
        )
    except DatabaseError:
        logger.warning("outbox: could not claim %s", message.key, exc_info=True)
        return False


def _release(message: OutboxMessage, error: str) -> None:
    try:
        OutboxMessage.objects.filter(pk=message.pk).update(
            sent_at=message.sent_at, last_error=error[:2000]
        )
    except DatabaseError:
        logger.warning("outbox: could not record the failed send of %s", message.key)


def _send(message: OutboxMessage) -> str | None:
    """Hand ``message`` to the broker; the error's text when the broker refused it. An
    eager task (the demo, the tests) runs here, and its own errors propagate, except a
    task asking to be tried again later (a Prometheus it cannot reach): in production
    the request that queued it has its answer long before, so here too it is logged."""
    task = task_for(message.task)
    options: dict[str, Any] = {"retry": False, "ignore_result": True}
    countdown = _countdown(message)
    if countdown > 0:
        options["countdown"] = countdown
    if _eager():
        if message.task in settings.TIDEGATE_EAGER_IN_BACKGROUND:
            threading.Thread(
                target=_run_on_own_thread,
                args=(task, message.task, message.args, options),
                name=f"tidegate-{message.task}",
                daemon=True,
            ).start()
        else:
            _run_eagerly(task, message.task, message.args, options)
        return None
    try:
        task.apply_async(args=message.args, **options)
    except Exception as error:  # any failure to publish; the row keeps the work
        return f"{type(error).__name__}: {error}"
    return None


def _run_eagerly(task: Any, name: str, args: Sequence[Any], options: dict[str, Any]) -> None:
    """Run ``task`` here and now (the demo, the tests). A task that asks to be tried
    again later is logged: in production the request that queued it has long had its
    answer."""
    try:
        task.apply_async(args=args, **options)
    except Retry as retry:
        logger.warning("task %s asked to be tried again later: %s", name, retry)


def _run_on_own_thread(task: Any, name: str, args: Sequence[Any], options: dict[str, Any]) -> None:
    """``_run_eagerly`` off the request's thread, closing this thread's connections after."""
    try:
        _run_eagerly(task, name, args, options)
    except Exception:  # nobody waits for this thread: the run records its own failure
        logger.exception("task %s failed", name)
    finally:
        connections.close_all()


def _countdown(message: OutboxMessage) -> float:
    interval = min_interval_s(message.task)
    if interval <= 0:
        return 0.0
    started = (
        TaskLastStart.objects.filter(key=message.key).values_list("started_at", flat=True).first()
    )
    if started is None:
        return 0.0
    return max(0.0, (started - timezone.now()).total_seconds() + interval)


def _eager() -> bool:
    from celery import current_app

    return bool(current_app.conf.task_always_eager)


def _fast_path_paused() -> bool:
    return time.monotonic() < _fast_path_paused_until


def _pause_fast_path() -> None:
    global _fast_path_paused_until
    _fast_path_paused_until = time.monotonic() + FAST_PATH_PAUSE_S
