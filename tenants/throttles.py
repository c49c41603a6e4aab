"""Rate limits: logins, token creation and the API per user and per anonymous address.

Rates are settings (TIDEGATE_THROTTLE_RATES: "<count>/<s|min|hour|day>"), read on every
request. Counts live in the Django cache (a shared Redis cache in production, so every
web process counts together). A cache that does not answer lets requests through: a
Redis outage must not take the API down with it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

logger = logging.getLogger(__name__)


def rate_of(scope: str) -> str | None:
    rates: dict[str, str | None] = settings.TIDEGATE_THROTTLE_RATES
    return rates.get(scope)


def parse_rate(rate: str) -> tuple[int, int]:
    """'10/min' -> (10, 60): how many requests in how many seconds."""
    count, period = rate.split("/")
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}[period.strip()[0]]
    return int(count), seconds


def client_address(request: Any) -> str:
    """The caller's address: the peer the web server saw (REMOTE_ADDR), or, behind
    TIDEGATE_NUM_PROXIES trusted proxies, the address the farthest of them saw - counted
    from the right of X-Forwarded-For, so what a client writes there itself is ignored."""
    proxies = int(getattr(settings, "TIDEGATE_NUM_PROXIES", 0))
    if proxies > 0:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if hops:
            return str(hops[-min(proxies, len(hops))])
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def _wait_after(history: list[float], count: int, seconds: int, now: float) -> float:
    return max(seconds - (now - history[count - 1]), 1.0) if len(history) >= count else 0.0


def take(scope: str, ident: str) -> float:
    """Count one request of `ident` against `scope`'s rate; 0 when allowed, else the
    seconds until the next would be."""
    rate = rate_of(scope)
    if not rate:
        return 0.0
    count, seconds = parse_rate(rate)
    key = f"tidegate-throttle:{scope}:{ident}"
    now = time.time()
    try:
        history = [t for t in cache.get(key, []) if t > now - seconds]
        wait = _wait_after(history, count, seconds, now)
        if wait:
            return wait
        cache.set(key, [now, *history], seconds)
    except Exception:  # the cache is down: let the request through
        logger.warning("rate limit %s not checked: the cache does not answer", scope, exc_info=True)
    return 0.0


def take_anonymous(request: Any) -> float:
    """Count a request refused for want of (valid) credentials against the "anon" rate
    of its address; the seconds to wait once that is exceeded, else 0."""
    return take("anon", f"address:{client_address(request)}") if request is not None else 0.0


class _SettingsRate(SimpleRateThrottle):
    """DRF's throttle with the rate read from TIDEGATE_THROTTLE_RATES on each request
    (DRF reads its own setting once, at import) and a cache failure failing open."""

    def get_rate(self) -> str | None:
        return rate_of(str(self.scope))

    def allow_request(self, request: Request, view: Any) -> bool:
        try:
            return bool(super().allow_request(request, view))
        except Exception:  # the cache is down: let the request through
            logger.warning("rate limit %s not checked", self.scope, exc_info=True)
            return True


class ApiUserThrottle(_SettingsRate):
    """Every API request of a signed-in user (scope "user")."""

    scope = "user"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not (request.user and request.user.is_authenticated):
            return None  # counted by ApiAnonThrottle
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


class ApiAnonThrottle(_SettingsRate):
    """Every API request without credentials, per address (scope "anon")."""

    scope = "anon"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}


class TokenCreateThrottle(_SettingsRate):
    """Creating API tokens, per user (scope "token_create")."""

    scope = "token_create"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.method != "POST":
            return None
        ident = request.user.pk if request.user.is_authenticated else client_address(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}
