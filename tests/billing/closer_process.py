"""A period closer in a process of its own, stopped half-way for a test to kill.

Run as ``python -m tests.billing.closer_process <period name>`` with DATABASE_URL naming
the test database: it closes the period with a 1 s lease and two tenants per chunk,
prints "half-way" once the first chunk is written, and then waits, inside the second
chunk's transaction, for the test to kill it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def main(name: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    import django

    django.setup()
    from django.conf import settings

    from billing.models import BillingPeriod
    from billing.statements import periods

    settings.TIDEGATE_BILLING = {"CLOSE_CHUNK": 2, "CLOSE_LEASE_SECONDS": 1}
    write_chunk = periods._insert_statements
    chunks = 0

    def stop_at_the_second_chunk(*args: Any, **kwargs: Any) -> None:
        nonlocal chunks
        chunks += 1
        if chunks == 2:
            print("half-way", flush=True)
            time.sleep(3600)  # the test kills the process here
        write_chunk(*args, **kwargs)

    periods._insert_statements = stop_at_the_second_chunk  # type: ignore[assignment]
    periods.period_close(actor=None, period=BillingPeriod.objects.get(name=name), source="system")


if __name__ == "__main__":
    main(sys.argv[1])
