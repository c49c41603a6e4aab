"""`manage.py serve_demo [ADDRPORT] [--speed N]`: the demo's web server plus what Celery
beat does in production - a queue tick every few seconds (Job sync, then an admission
cycle per cluster) - so that a reclaim started by one cycle finishes in the next without
waiting for someone to click. The simulated cluster `demo` also runs on a virtual clock
(scheduler_bridge/demo/clock.py): each tick moves it on by the real time that passed
times ``--speed``, submitting the Philly trace's work as it falls due and finishing work
whose run time has elapsed. The simulated cluster lives in this process, so the tick
must too."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from scheduler_bridge import tasks
from scheduler_bridge.demo.clock import (
    DEFAULT_SPEED,
    DemoClock,
    demo_clock_advance,
    demo_clock_start,
)
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.replay.trace import PHILLY_ATTRIBUTION
from tenants.demo import DEMO_CLUSTER

logger = logging.getLogger(__name__)


class QueueTicker(threading.Thread):
    """Runs ``tick`` every ``every_s`` seconds until ``stop`` is called; with a
    ``speed``, the demo cluster's clock moves that many virtual seconds per real one."""

    def __init__(self, every_s: float, speed: float | None = None) -> None:
        super().__init__(name="tidegate-queue-tick", daemon=True)
        self.every_s = every_s
        self.speed = speed
        self.clock: DemoClock | None = None
        self._last = time.monotonic()
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
        for cluster in Cluster.objects.order_by("pk"):
            try:
                if self.speed and _runs_on_the_clock(cluster):
                    self._clock_step(cluster)  # its Job sync and cycle included
                else:
                    tasks.jobs_sync(cluster.pk)  # syncs Jobs, then queues a cycle
                ticked += 1
            except Exception:
                logger.exception("queue tick of cluster %s failed", cluster.pk)
        return ticked

    def _clock_step(self, cluster: Cluster) -> None:
        now = time.monotonic()
        if self.clock is None:
            self.clock = demo_clock_start(cluster, speed=self.speed or DEFAULT_SPEED)
        # a step that fails leaves its clock where it was: the next tick makes up its time
        step = demo_clock_advance(self.clock, now - self._last)
        self._last = now
        logger.info(
            "demo clock at %.1f h: %s submitted, %s finished, %s ledger rows",
            step.end / 3600,
            len(step.submitted),
            len(step.finished),
            step.metered,
        )
        for refusal in step.refused:
            logger.warning("demo work not submitted: %s", refusal)


def _runs_on_the_clock(cluster: Cluster) -> bool:
    return cluster.name == DEMO_CLUSTER and cluster.gateway == Cluster.Gateway.SIMULATED


class Command(BaseCommand):
    help = (
        "Serve the demo with a queue tick in the same process (tasks run in process) and "
        "the demo cluster on a virtual clock."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")
        parser.add_argument(
            "--tick", type=float, default=15.0, metavar="SECONDS", help="queue tick period"
        )
        parser.add_argument(
            "--speed",
            type=float,
            default=DEFAULT_SPEED,
            metavar="N",
            help="simulated seconds per real second on the demo cluster (60: an hour a minute)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["tick"] <= 0:
            raise CommandError("--tick must be a positive number of seconds.")
        speed = options["speed"]
        if not speed > 0:
            raise CommandError(
                f"--speed is {speed:g}; give a positive number of simulated seconds per real "
                "second, e.g. --speed 60 for an hour a minute."
            )
        ticker = QueueTicker(options["tick"], speed=speed)
        ticker.start()
        self.stdout.write(f"Queue tick every {options['tick']:g} s (Job sync and admission).")
        self.stdout.write(
            f"Demo clock: {speed:g} simulated seconds per real second (a real minute is "
            f"{speed / 60:g} simulated {'hour' if speed == 60 else 'hours'}); work arrives "
            f"from the shipped Philly trace. {PHILLY_ATTRIBUTION}"
        )
        try:
            call_command("runserver", options["addrport"], use_reloader=False)
        finally:
            ticker.stop()
