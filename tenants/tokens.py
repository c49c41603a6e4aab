"""API tokens: created for the signed-in user with a name, stored only as a hash (the
secret is shown once), expiring after TIDEGATE_API_TOKEN_TTL days, listed and revoked by
their owner. Authentication is django-rest-knox's, on the `tenants.ApiToken` model."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from knox.auth import TokenAuthentication

from tenants.models import ApiToken

# A token's "last used" is written at most this often, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_ttl() -> timedelta:
    return timedelta(days=int(settings.TIDEGATE_API_TOKEN_TTL))


def token_create(*, user: Any, name: str) -> tuple[ApiToken, str]:
    """A new token for `user`; returns it and its secret (kept nowhere, shown once)."""
    token, secret = ApiToken.objects.create(user=user, expiry=token_ttl(), name=name)
    return token, secret


def tokens_of(user: Any) -> QuerySet[ApiToken]:
    """The tokens `user` owns that have not expired."""
    return ApiToken.objects.filter(user=user, expiry__gt=timezone.now())


def token_revoke(token: ApiToken) -> None:
    token.delete()


def tokens_revoke_all(user: Any) -> int:
    """Revoke every API token of ``user`` (a password change); returns how many."""
    deleted, _ = ApiToken.objects.filter(user=user).delete()
    return deleted


def tokens_forget_expired(now: Any = None) -> int:
    """Delete every expired token (beat, hourly). Returns how many."""
    deleted, _ = ApiToken.objects.filter(expiry__lt=now or timezone.now()).delete()
    return deleted


class ApiTokenAuthentication(TokenAuthentication):
    """knox's `Authorization: Token <secret>`, also noting when a token was last used."""

    def _cleanup_token(self, auth_token: ApiToken) -> bool:
        """Refuse (and delete) the presented token once expired. knox also reads every
        other token of the user on each request to delete its expired ones: a query per
        request, done instead by the hourly ``api_tokens_expire`` task."""
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            auth_token.delete()
            return True
        return False

    def validate_user(self, auth_token: ApiToken) -> tuple[Any, ApiToken]:
        user, token = super().validate_user(auth_token)
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return user, token


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """How the published schema describes ApiTokenAuthentication."""

    target_class = ApiTokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": 'An API token (/api/v1/tokens/) with the prefix "Token".',
        }
