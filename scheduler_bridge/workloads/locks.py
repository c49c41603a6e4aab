"""The admission lock: one cycle per cluster at a time, and cancels never land mid-cycle.

On PostgreSQL it is a transaction-scoped advisory lock keyed by the cluster, so it guards
the admission cycle only: the inventory sync, the billing collector and the portal still
update the cluster's row while a cycle runs. It is released when the transaction ends,
committed or rolled back. SQLite (the demo) has a single writer anyway, so there it is
not needed and not taken.
"""

from __future__ import annotations

from django.db import connection

# First key of the two-key advisory lock space: "tidegate admission" (any stable int4
# that no other lock of this database uses); the second key is the cluster's id.
ADMISSION_LOCK_CLASS = 0x7464_6701


def hold_admission_lock(cluster_id: int) -> None:
    """Wait for, then hold until the end of the current transaction, the admission lock
    of ``cluster_id``. Call inside ``transaction.atomic()``."""
    if connection.vendor != "postgresql":
        return
    if not connection.in_atomic_block:
        raise RuntimeError("the admission lock is held for a transaction: open one first")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [ADMISSION_LOCK_CLASS, cluster_id])
