"""Send the outbox's waiting background tasks to the broker (tenants/outbox.py).

Beat already runs the relay every few seconds as a task; this command is for an operator
after a broker outage (``--once``) or for running the relay as a process of its own,
which keeps working while beat or the workers are down.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from tenants import outbox
from tenants.models import OutboxMessage


class Command(BaseCommand):
    help = "Send waiting outbox messages to the broker: once, or every --every seconds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Send what is due now, then exit.")
        parser.add_argument(
            "--every", type=float, default=2.0, help="Seconds between two passes (default 2)."
        )

    def handle(self, *args: Any, once: bool, every: float, **options: Any) -> None:
        if every <= 0:
            raise CommandError(f"--every must be a positive number of seconds, not {every}.")
        while True:
            try:
                sent = outbox.relay_due(fresh_too=once)
                waiting = OutboxMessage.objects.filter(sent_at__isnull=True).count()
            except DatabaseError as error:
                if once:
                    raise CommandError(f"The database did not answer: {error}") from error
                self.stderr.write(f"database unreachable ({error}); trying again")
                time.sleep(every)
                continue
            if once:
                self.stdout.write(f"sent {sent} message(s); {waiting} still waiting for the broker")
                if waiting and sent == 0:
                    raise CommandError(
                        f"{waiting} message(s) could not be sent: is the broker reachable?"
                    )
                return
            time.sleep(every)
