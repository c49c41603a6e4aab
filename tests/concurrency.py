"""Running one call from several threads at the same moment, as two workers or two
requests would: each thread waits at a barrier, calls, and closes its own database
connection."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connections

T = TypeVar("T")


def at_once(call: Callable[[], T], times: int = 2, timeout_s: float = 120.0) -> list[T]:
    """``call()`` from ``times`` threads released together; what each returned (in the
    order they finished). Fails with the first error any of them raised."""
    start = threading.Barrier(times)
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            results.append(call())
        except BaseException as error:  # noqa: BLE001 - raised below, in the test
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    if errors:
        raise errors[0]
    assert len(results) == times, "a thread did not finish in time"
    return results
