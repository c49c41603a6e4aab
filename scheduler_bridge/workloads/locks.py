"""The admission lock: one cycle per cluster at a time, and cancels never land mid-cycle;
the sync lock: one Job sync per cluster at a time.

On PostgreSQL it is a transaction-scoped advisory lock keyed by the cluster, so it guards
the admission cycle only: the inventory sync, the billing collector and the portal still
update the cluster's row while a cycle runs. It is released when the transaction ends,
committed or rolled back. SQLite (the demo, one process) does not have it; there a second
writer at once fails with "database is locked" instead of waiting.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

# The lock's bigint key: "tidegate admission" in the high 32 bits (a constant no other
# lock of this database uses), the cluster's id in the low 32 bits.
ADMISSION_LOCK_BASE = 0x7464_6701 << 32
# The sync lock's: "tidegate Job sync", then the cluster's id.
SYNC_LOCK_BASE = 0x7464_6702 << 32


def hold_admission_lock(cluster_id: int) -> None:
    """Wait for, then hold until the end of the current transaction, the admission lock
    of ``cluster_id``. Call inside ``transaction.atomic()``."""
    if connection.vendor != "postgresql":
        return
    if not connection.in_atomic_block:
        raise RuntimeError("the admission lock is held for a transaction: open one first")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s::bigint)",
            [ADMISSION_LOCK_BASE + _cluster_key(cluster_id)],
        )


@contextmanager
def held_sync_lock(cluster_id: int) -> Iterator[None]:
    """Wait for, then hold for the block, the Job sync lock of ``cluster_id`` (a
    session lock: the sync commits as it goes). Two syncs of one cluster at once would
    both take a new Job for theirs; the second now waits and then finds it taken."""
    if connection.vendor != "postgresql":
        yield
        return
    key = SYNC_LOCK_BASE + _cluster_key(cluster_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s::bigint)", [key])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s::bigint)", [key])


@contextmanager
def sync_lock_if_free(cluster_id: int) -> Iterator[bool]:
    """Hold the Job sync lock of ``cluster_id`` for the block if no other sync holds it
    (True), else hold nothing (False): a worker never sits waiting behind another's
    sync. The sync inside takes the same lock again (PostgreSQL counts a session's
    holds)."""
    if connection.vendor != "postgresql":
        yield True
        return
    key = SYNC_LOCK_BASE + _cluster_key(cluster_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s::bigint)", [key])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s::bigint)", [key])


def _cluster_key(cluster_id: int) -> int:
    if not 0 < cluster_id < 1 << 32:
        raise ValueError(f"cluster id {cluster_id} does not fit the lock's key")
    return cluster_id
