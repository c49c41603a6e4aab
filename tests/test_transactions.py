"""Background work goes through the outbox: written with the change, sent after commit,
never on rollback, once per burst, and kept while the broker is down."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnavailable

from config.celery_app import app as celery_app
from tenants import outbox
from tenants.models import OutboxMessage
from tenants.transactions import queue_after_commit

pytestmark = pytest.mark.django_db(transaction=True)

QUOTA_SYNC = "scheduler_bridge.tasks.quota_sync"
CYCLE = "scheduler_bridge.tasks.admission_cycle"


class Broker:
    """Records what is published, or refuses it while ``down`` (as kombu does)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any], dict[str, Any]]] = []
        self.down = False

    def publisher(self, task_path: str) -> Any:
        def apply_async(args: list[Any], **options: Any) -> None:
            if self.down:
                raise BrokerUnavailable(
                    "Error 111 connecting to 127.0.0.1:6379. Connection refused."
                )
            self.sent.append((task_path, list(args), options))

        return apply_async


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    from scheduler_bridge import tasks

    recorded = Broker()
    monkeypatch.setattr(outbox, "_fast_path_paused_until", 0.0)
    for name in ("quota_sync", "admission_cycle"):
        task = getattr(tasks, name)
        monkeypatch.setattr(task, "apply_async", recorded.publisher(f"{tasks.__name__}.{name}"))
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = False  # a broker, not tasks run in process
    try:
        yield recorded
    finally:
        celery_app.conf.task_always_eager = eager


def _sent_args(broker: Broker) -> list[list[Any]]:
    return [args for _, args, _ in broker.sent]


def test_many_requests_in_one_transaction_queue_the_task_once(broker: Broker) -> None:
    with transaction.atomic():
        for _ in range(5):
            queue_after_commit(QUOTA_SYNC, 7)
        queue_after_commit(QUOTA_SYNC, 8)
        assert broker.sent == []  # nothing before commit
        assert OutboxMessage.objects.count() == 2  # written with the change
    assert _sent_args(broker) == [[7], [8]]
    with pytest.raises(RuntimeError), transaction.atomic():
        queue_after_commit(QUOTA_SYNC, 9)
        raise RuntimeError("rolled back")
    assert _sent_args(broker) == [[7], [8]]
    assert not OutboxMessage.objects.filter(args=[9]).exists()  # gone with the change


def test_an_unknown_task_is_refused_where_it_is_queued() -> None:
    with pytest.raises(LookupError, match="no task 'scheduler_bridge.tasks.nope'"):
        queue_after_commit("scheduler_bridge.tasks.nope", 1)


def test_a_burst_of_changes_queues_one_run_until_a_worker_starts_it(broker: Broker) -> None:
    for _ in range(50):  # fifty submits, each its own transaction
        with transaction.atomic():
            queue_after_commit(CYCLE, 3)
    assert _sent_args(broker) == [[3]]
    outbox.task_started(CYCLE, [3])  # the worker starts the cycle
    assert not OutboxMessage.objects.exists()
    with transaction.atomic():
        queue_after_commit(CYCLE, 3)  # a change after the start asks for a new run
    assert _sent_args(broker) == [[3], [3]]


def test_with_the_broker_down_the_write_commits_and_the_relay_sends_it_later(
    broker: Broker,
) -> None:
    broker.down = True
    with transaction.atomic():
        queue_after_commit(QUOTA_SYNC, 5)  # no error reaches the caller
    message = OutboxMessage.objects.get()
    assert message.sent_at is None and "Connection refused" in message.last_error
    assert message.send_attempts == 1
    with transaction.atomic():
        queue_after_commit(QUOTA_SYNC, 6)
    # the fast path pauses after a refusal: the second write did not even try
    assert OutboxMessage.objects.get(args=[6]).send_attempts == 0
    assert outbox.relay_due(timezone.now() + timedelta(seconds=5)) == 0  # still down
    broker.down = False
    assert outbox.relay_due(timezone.now() + timedelta(seconds=5)) == 2
    assert sorted(_sent_args(broker)) == [[5], [6]]
    assert OutboxMessage.objects.filter(sent_at__isnull=True).count() == 0


def test_a_sent_message_no_worker_started_is_sent_again(broker: Broker, settings: Any) -> None:
    """The broker lost it (Redis restarted with the queue in memory): sent again once the
    resend time has passed, and not before."""
    settings.TIDEGATE = {**settings.TIDEGATE, "OUTBOX_RESEND_AFTER_S": 30}
    queue_after_commit(QUOTA_SYNC, 4)
    assert len(broker.sent) == 1
    assert outbox.relay_due(timezone.now() + timedelta(seconds=10)) == 0
    assert outbox.relay_due(timezone.now() + timedelta(seconds=31)) == 1
    assert _sent_args(broker) == [[4], [4]]
    assert OutboxMessage.objects.get().send_attempts == 2


def test_a_task_with_a_shortest_interval_waits_out_the_rest_of_it(
    broker: Broker, settings: Any
) -> None:
    settings.TIDEGATE = {**settings.TIDEGATE, "TASK_MIN_INTERVAL_S": {CYCLE: 5.0}}
    queue_after_commit(CYCLE, 9)
    assert "countdown" not in broker.sent[0][2]  # no cycle ran yet: at once
    outbox.task_started(CYCLE, [9])
    queue_after_commit(CYCLE, 9)
    countdown = broker.sent[1][2]["countdown"]
    assert 4.0 < countdown <= 5.0
    assert broker.sent[1][2]["retry"] is False  # a refused send is the relay's, not a wait


def test_an_eager_task_run_removes_its_message() -> None:
    """With tasks run in process (the demo), the run itself marks the message done."""
    assert celery_app.conf.task_always_eager
    with transaction.atomic():
        queue_after_commit("tenants.tasks.heartbeat")
    assert not OutboxMessage.objects.exists()


def test_the_outbox_depth_is_served_as_a_gauge(broker: Broker) -> None:
    broker.down = True
    queue_after_commit(QUOTA_SYNC, 1)
    queue_after_commit(CYCLE, 1)
    assert outbox.depth() == {(QUOTA_SYNC, "unsent"): 1, (CYCLE, "unsent"): 1}
    assert outbox.oldest_unsent_age_s(timezone.now() + timedelta(seconds=7)) >= 7


def test_relay_outbox_sends_what_waits_and_says_when_the_broker_still_refuses(
    broker: Broker,
) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    broker.down = True
    queue_after_commit(QUOTA_SYNC, 2)
    with pytest.raises(CommandError, match="could not be sent: is the broker reachable"):
        call_command("relay_outbox", "--once", stdout=StringIO())
    broker.down = False
    out = StringIO()
    call_command("relay_outbox", "--once", stdout=out)
    assert "sent 1 message(s); 0 still waiting" in out.getvalue()
    with pytest.raises(CommandError, match="--every must be a positive number of seconds"):
        call_command("relay_outbox", "--every", "0")
