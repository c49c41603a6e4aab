"""`manage.py serve_demo [ADDRPORT]`: the demo's web server plus what Celery beat does in
production - a queue tick every few seconds (Job sync, then an admission cycle per
cluster) - so that a reclaim started by one cycle finishes in the next without waiting
for someone to click. The simulated cluster lives in this process, so the tick must too."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from scheduler_bridge import tasks
from scheduler_bridge.inventory.models import Cluster

logger = logging.getLogger(__name__)


class QueueTicker(threading.Thread):
    """Runs ``tick`` every ``every_s`` seconds until ``stop`` is called."""

    def __init__(self, every_s: float) -> None:
        super().__init__(name="tidegate-queue-tick", daemon=True)
        self.every_s = every_s
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(self.every_s):
            try:
                self.tick()
            except Exception:  # the thread must outlive a bad tick (a locked database...)
                logger.exception("queue tick failed; trying again in %s s", self.every_s)
            finally:
                connections.close_all()  # this thread's own connections

    def stop(self) -> None:
        self._stopped.set()

    def tick(self) -> int:
        """One tick over every cluster; a failing cluster is logged, never fatal."""
        ticked = 0
        for cluster_id in Cluster.objects.values_list("pk", flat=True):
            try:
                tasks.jobs_sync(cluster_id)  # syncs Jobs, then queues a cycle
                ticked += 1
            except Exception:
                logger.exception("queue tick of cluster %s failed", cluster_id)
        return ticked


class Command(BaseCommand):
    help = "Serve the demo with a queue tick in the same process (tasks run in process)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")
        parser.add_argument(
            "--tick", type=float, default=15.0, metavar="SECONDS", help="queue tick period"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["tick"] <= 0:
            raise CommandError("--tick must be a positive number of seconds.")
        ticker = QueueTicker(options["tick"])
        ticker.start()
        self.stdout.write(f"Queue tick every {options['tick']:g} s (Job sync and admission).")
        try:
            call_command("runserver", options["addrport"], use_reloader=False)
        finally:
            ticker.stop()
