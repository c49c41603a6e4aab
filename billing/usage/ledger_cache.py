"""Reads of the hourly ledger kept in Django's cache while the ledger does not change.

The ledger is write-once and only grows (by the hour), so a read of it is current as
long as no row was added since: every key holds the newest row's id. A read bounded by
a moment after the newest row's start (``now``, which moves by the second) reads the
same rows as an unbounded one, so such a bound is left out of the key
(:meth:`LedgerMark.bound`). What else a read depends on (rate cards, flavours, the
tenants asked for) goes into the key by value, never by the caller's identity: callers
cache reads of data and filter them for the user afterwards.

Django's cache framework is used as configured (LocMem per process by default, Redis
where ``CACHES`` says so); without a shared cache each process keeps its own copy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.core.cache import cache
from django.db.models import Max

from billing.models import UsageRecord

# a read is recomputed at least this often even if the ledger stood still
LEDGER_CACHE_S = 3600

T = TypeVar("T")


@dataclass(frozen=True)
class LedgerMark:
    """Where the ledger stands: its newest row and the latest hour any row starts."""

    newest_id: int | None
    latest_start: datetime | None

    def bound(self, end: datetime) -> datetime | None:
        """``end`` as an upper bound of ``interval_start`` that changes what is read;
        None when every row starts before it (then it filters nothing)."""
        if self.latest_start is None or self.latest_start < end:
            return None
        return end


# Entries are pickled records that name their module: a new format (or a record moved to
# another module) must not read what an older release wrote into a shared cache.
CACHE_FORMAT = 2


def ledger_mark() -> LedgerMark:
    """One query (two index lookups)."""
    found = UsageRecord.objects.aggregate(newest=Max("id"), latest=Max("interval_start"))
    return LedgerMark(found["newest"], found["latest"])


def ledger_cached(
    name: str, mark: LedgerMark, parts: tuple[Any, ...], compute: Callable[[], T]
) -> T:
    """``compute()``, kept under ``name``, the ledger's ``mark`` and ``parts`` (whatever
    else the result depends on, compared by their ``repr``)."""
    digest = hashlib.sha256(repr((mark.newest_id, parts)).encode()).hexdigest()
    key = f"billing:ledger:{CACHE_FORMAT}:{name}:{digest}"
    found = cache.get(key)
    if found is None:
        found = compute()
        cache.set(key, found, LEDGER_CACHE_S)
    return found  # type: ignore[no-any-return]
