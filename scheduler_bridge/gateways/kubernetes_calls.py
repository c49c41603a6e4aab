"""Calling the Kubernetes API: bounded retries with backoff, and the domain errors of
:mod:`.errors` for what retries do not cure.

Transient failures (429, 5xx, timeouts, refused connections, and 409 for
read-modify-write operations) are retried, re-running the operation so that it re-reads
what it needs; a 410 (an expired list continue token) is retried too, since listing
again from the start is the documented remedy.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from .errors import ClusterUnreachable, GatewayError, NamespaceMissing, ObjectConflict

T = TypeVar("T")
logger = logging.getLogger(__name__)
TRANSIENT = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: ``attempts`` tries in all, waiting ``base_delay`` seconds, then
    twice that, ... capped at ``max_delay``. Tests set ``base_delay=0``."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 10.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        wait = min(self.base_delay * 2 ** (attempt - 1), self.max_delay)
        if retry_after is not None:
            wait = min(max(wait, retry_after), self.max_delay)
        # A little jitter so many workers hitting the same outage do not retry in step.
        return wait + random.uniform(0, wait * 0.1)  # noqa: S311 - not cryptographic


def run_with_retries(
    what: str,
    operation: Callable[[], T],
    *,
    retry: RetryPolicy,
    server: str,
    namespace: str | None = None,
    retry_conflict: bool = False,
) -> T:
    """Run ``operation`` (which re-reads what it needs) with bounded retries and turn
    the final failure into a domain error. ``what`` names the call in messages and
    ``server`` the API server; 409 is retried only for read-modify-write operations
    (``retry_conflict``)."""
    retryable = TRANSIENT | ({409} if retry_conflict else set())
    attempts = retry.attempts
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except GatewayError:
            raise
        except ApiException as exc:
            # A 410 means a list continue token expired: listing again from the start
            # is the documented remedy.
            if (exc.status not in retryable and exc.status != 410) or attempt == attempts:
                raise translate(what, exc, attempt, namespace, server) from exc
            _back_off(what, server, retry, attempt, f"{exc.status} {exc.reason}", retry_after(exc))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if attempt == attempts:
                raise ClusterUnreachable(
                    f"{what}: the Kubernetes API at {server} did not answer after "
                    f"{attempts} attempts ({type(exc).__name__}: {exc})"
                ) from exc
            _back_off(what, server, retry, attempt, type(exc).__name__)
    raise AssertionError("unreachable")  # pragma: no cover - the loop always returns


def _back_off(
    what: str,
    server: str,
    retry: RetryPolicy,
    attempt: int,
    problem: str,
    wait_at_least: float | None = None,
) -> None:
    wait = retry.delay(attempt, wait_at_least)
    logger.warning(
        "%s on %s: attempt %d/%d failed (%s); retrying in %.2fs",
        what,
        server,
        attempt,
        retry.attempts,
        problem,
        wait,
    )
    time.sleep(wait)


def translate(
    what: str, exc: ApiException, attempts: int, namespace: str | None, server: str
) -> GatewayError:
    """The domain error for an API answer that retries did not cure."""
    status = _status_body(exc)
    message = status.get("message") or exc.reason or "no details"
    details = status.get("details") or {}
    code = exc.status
    if code == 404 and namespace and details.get("kind") == "namespaces":
        return NamespaceMissing(
            namespace,
            f"{what}: namespace {namespace!r} does not exist on {server}; create "
            "it or fix the tenant's namespace binding",
        )
    if code == 409:
        return ObjectConflict(
            f"{what}: still conflicting with other writers after {attempts} attempts ({message})"
        )
    if code in TRANSIENT:
        return ClusterUnreachable(
            f"{what}: the Kubernetes API at {server} answered {code} "
            f"{exc.reason} {attempts} times in a row ({message})"
        )
    if code in (401, 403):
        return GatewayError(
            f"{what}: the Kubernetes API at {server} refused access ({code}: "
            f"{message}); check Tidegate's credentials and RBAC"
        )
    if code == 0:
        return ClusterUnreachable(f"{what}: cannot talk to {server}: {exc.reason}")
    return GatewayError(f"{what}: the Kubernetes API rejected it ({code}: {message})")


def _status_body(exc: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After") if exc.headers else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
