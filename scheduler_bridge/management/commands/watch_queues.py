"""`manage.py watch_queues`: admission on events (scheduler_bridge/workloads/queue_watch.py).

Runs until SIGTERM or SIGINT, beside Celery's worker and beat (the chart's ``watch``
Deployment). More than one copy is harmless: the outbox queues one sync per cluster.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_bridge.workloads.queue_watch import QueueWatcher


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise CommandError(f"{text!r} is not a number of seconds; give 0 or more, e.g. 0.5")
    return value


class Command(BaseCommand):
    help = (
        "Watch every Kubernetes cluster's queue-labelled workloads and ask for a Job sync "
        "and an admission cycle as soon as work is created or ends, instead of waiting for "
        "the queue tick. Runs until stopped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--settle",
            default="0.05",
            help="seconds to wait after the first change of a burst for the rest (0.05)",
        )
        parser.add_argument(
            "--gap", default="0.5", help="fewest seconds between two syncs of a cluster (0.5)"
        )
        parser.add_argument(
            "--refresh", default="30", help="seconds between readings of the cluster list (30)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        settle, gap = _seconds(options["settle"]), _seconds(options["gap"])
        refresh = _seconds(options["refresh"])
        if refresh == 0:
            raise CommandError("--refresh must be more than 0 seconds, e.g. 30")
        stopping = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopping.set())
        self.stderr.write(f"watching queues (settle {settle:g} s, gap {gap:g} s); Ctrl-C stops")
        QueueWatcher(settle_s=settle, gap_s=gap).run(stopping, refresh_s=refresh)
        self.stderr.write("stopped")
