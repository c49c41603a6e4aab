"""``Idempotency-Key`` on the API's POSTs: a client that did not see the answer (a
timeout, a dropped connection, a 503 while the database restarted) sends the request
again with the same key and gets the first answer, not a second workload.

The behaviour follows the IETF draft "The Idempotency-Key HTTP Header Field"
(draft-ietf-httpapi-idempotency-key-header):

- the key is scoped to the credentials that sent it (a hash of the Authorization header
  or the session cookie), so two users never see each other's answers;
- the same key with the same request answers what the first request answered (any
  2xx or 4xx; a 5xx is not kept, so the request can be tried again), marked with the
  header ``Idempotent-Replayed: true``;
- the same key with another body or path is refused (422), and while the first request
  is still being answered a second one gets 409 with Retry-After;
- keys are kept ``TIDEGATE_IDEMPOTENCY_KEY_HOURS`` (24 h) and then forgotten.

A request without the header is not changed in any way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.utils.translation import gettext

from tenants.api.problems import PROBLEM_JSON, problem
from tenants.models import IdempotentRequest

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
# A first request that has not answered in this long died with its worker: its key is
# free again (the write, if it committed, is visible to the client's next GET).
ABANDONED_AFTER = timedelta(minutes=2)
# Answers larger than this are not kept (the API's creates answer a few kilobytes).
MAX_KEPT_BODY = 1024 * 1024


class IdempotencyKeyMiddleware:
    """Replays the answer of a POST to /api/ sent again with the same Idempotency-Key."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        key = request.headers.get(HEADER)
        if key is None or request.method != "POST" or not request.path.startswith("/api/"):
            return self.get_response(request)
        scope = _scope(request)
        if scope is None:
            return self.get_response(request)  # anonymous: refused by the view anyway
        if not key or len(key) > MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
            return _problem(
                400,
                gettext(
                    "The Idempotency-Key header must be 1 to %(max)s printable ASCII "
                    "characters, e.g. a UUID."
                )
                % {"max": MAX_KEY_LENGTH},
            )
        try:
            fingerprint = hashlib.sha256(request.body).hexdigest()
        except RequestDataTooBig:
            return self.get_response(request)  # refused as too large, with its own answer
        record, earlier = _begin(scope, key, request, fingerprint)
        if earlier is not None:
            return _answer_again(earlier, request, fingerprint)
        try:
            response = self.get_response(request)
        except BaseException:
            IdempotentRequest.objects.filter(pk=record.pk).delete()
            raise
        _keep(record, response)
        return response


def forget_expired() -> int:
    """Delete keys older than the retention (beat, hourly). Returns keys deleted."""
    cutoff = timezone.now() - timedelta(hours=settings.TIDEGATE_IDEMPOTENCY_KEY_HOURS)
    deleted, _ = IdempotentRequest.objects.filter(created_at__lt=cutoff).delete()
    return deleted


def _scope(request: HttpRequest) -> str | None:
    credentials = request.headers.get("Authorization") or request.COOKIES.get(
        settings.SESSION_COOKIE_NAME
    )
    if not credentials:
        return None
    return hashlib.sha256(credentials.encode()).hexdigest()


def _begin(
    scope: str, key: str, request: HttpRequest, fingerprint: str
) -> tuple[IdempotentRequest, IdempotentRequest | None]:
    """Claim the key (a row with no answer yet); or the earlier request that holds it."""
    cutoff = timezone.now() - timedelta(hours=settings.TIDEGATE_IDEMPOTENCY_KEY_HOURS)
    IdempotentRequest.objects.filter(scope=scope, key=key, created_at__lt=cutoff).delete()
    IdempotentRequest.objects.filter(
        scope=scope, key=key, status__isnull=True, created_at__lt=timezone.now() - ABANDONED_AFTER
    ).delete()
    record = IdempotentRequest(
        scope=scope,
        key=key,
        method=request.method or "POST",
        path=request.path[:2000],
        fingerprint=fingerprint,
    )
    try:
        with transaction.atomic():
            record.save()
    except IntegrityError:
        earlier = IdempotentRequest.objects.filter(scope=scope, key=key).first()
        if earlier is None:  # it finished with a 5xx and was forgotten meanwhile
            return _begin(scope, key, request, fingerprint)
        return record, earlier
    return record, None


def _answer_again(
    earlier: IdempotentRequest, request: HttpRequest, fingerprint: str
) -> HttpResponse:
    if earlier.path != request.path or earlier.fingerprint != fingerprint:
        return _problem(
            422,
            gettext(
                "This Idempotency-Key was already used for a different request; "
                "use a new key for a new request."
            ),
        )
    if earlier.status is None:
        response = _problem(
            409,
            gettext(
                "A request with this Idempotency-Key is still being answered; "
                "try again in a moment."
            ),
        )
        response["Retry-After"] = "1"
        return response
    replayed = HttpResponse(
        bytes(earlier.body), status=earlier.status, content_type=earlier.content_type or None
    )
    if earlier.location:
        replayed["Location"] = earlier.location
    replayed["Idempotent-Replayed"] = "true"
    return replayed


def _keep(record: IdempotentRequest, response: HttpResponse) -> None:
    """Keep the answer for the next request with this key; forget the key after a 5xx
    (the request did not happen and may be tried again) or a streamed or large answer."""
    body = b"" if response.streaming else response.content
    if response.status_code >= 500 or response.streaming or len(body) > MAX_KEPT_BODY:
        IdempotentRequest.objects.filter(pk=record.pk).delete()
        return
    IdempotentRequest.objects.filter(pk=record.pk).update(
        status=response.status_code,
        content_type=response.get("Content-Type", ""),
        location=response.get("Location", "")[:2000],
        body=body,
    )


def _problem(status: int, detail: str) -> JsonResponse:
    return JsonResponse(problem(status, detail), status=status, content_type=PROBLEM_JSON)
