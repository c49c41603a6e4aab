"""Re-derive the ledger's borrowed GPU-seconds by the hourly rule (billing.usage.borrowing).

Run once after upgrading from a release that fixed a workload's borrowed share at its
admission: every hour of the ledger (or of the months named) gets the borrowed seconds
the hourly rule gives it. Open periods show the corrected figures at once; a closed
period shows them when it is closed again, as a new revision.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.progress import track

from billing.models import UsageRecord
from billing.months import add_months, month_name, month_start
from billing.usage.hourly_borrowing import rederive_borrowed

MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


class Command(BaseCommand):
    help = "Re-derive the ledger's borrowed GPU-seconds hour by hour (billing.usage.borrowing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--period",
            action="append",
            default=[],
            metavar="YYYY-MM",
            help="a month of the ledger (repeat for several; default: every month it holds)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from datetime import UTC, datetime

        names: list[str] = options["period"]
        for name in names:
            if not MONTH.match(name):
                raise CommandError(f"--period {name!r}: give a month as YYYY-MM, e.g. 2026-11")
        if names:
            starts = sorted(datetime(int(n[:4]), int(n[5:]), 1, tzinfo=UTC) for n in set(names))
        else:
            first = UsageRecord.objects.order_by("interval_start").first()
            last = UsageRecord.objects.order_by("-interval_start").first()
            starts = []
            if first is not None and last is not None:
                moment = month_start(first.interval_start)
                while moment <= last.interval_start:
                    starts.append(moment)
                    moment = add_months(moment, 1)
        changed = 0
        for start in track(starts, description="months", disable=not starts):
            found = rederive_borrowed(start, add_months(start, 1))
            changed += found
            self.stdout.write(f"{month_name(start)}: {found} rows changed")
        self.stdout.write(self.style.SUCCESS(f"{changed} ledger rows re-derived"))
