"""Each person's language: remembered when they switch it in the portal, applied when they
sign in on another browser, and used for the e-mails they receive."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import translation
from django.views.i18n import set_language as django_set_language

from tenants.models import UserPreference

SUPPORTED = {code for code, _ in settings.LANGUAGES}


def language_for(user: Any) -> str:
    """The language ``user`` chose, else the site's default."""
    preference = UserPreference.objects.filter(user_id=user.pk).only("language").first()
    if preference is not None and preference.language in SUPPORTED:
        return preference.language
    return str(settings.LANGUAGE_CODE)


def remember_language(user: Any, code: str) -> None:
    if code in SUPPORTED:
        UserPreference.objects.update_or_create(user_id=user.pk, defaults={"language": code})


def emails_by_language(users: Iterable[Any]) -> dict[str, list[str]]:
    """The e-mail addresses of active ``users`` with an address, grouped by their language
    (one query for the preferences), each group sorted."""
    people = [u for u in users if u.email and u.is_active]
    chosen = dict(
        UserPreference.objects.filter(user_id__in=[u.pk for u in people]).values_list(
            "user_id", "language"
        )
    )
    groups: dict[str, set[str]] = defaultdict(set)
    for user in people:
        language = chosen.get(user.pk) or ""
        groups[language if language in SUPPORTED else settings.LANGUAGE_CODE].add(user.email)
    return {language: sorted(emails) for language, emails in sorted(groups.items())}


def set_language(request: HttpRequest) -> HttpResponse:
    """Django's language switch, which also remembers the choice for a signed-in person."""
    response = django_set_language(request)
    code = request.POST.get("language", "")
    if request.method == "POST" and request.user.is_authenticated:
        remember_language(request.user, code)
    return response


class PreferredLanguageMiddleware:
    """A signed-in person whose browser has not chosen a language gets the one they chose
    before (on another browser, say); placed after the authentication middleware."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        chosen = None
        if (
            user is not None
            and user.is_authenticated
            and settings.LANGUAGE_COOKIE_NAME not in request.COOKIES
        ):
            preference = UserPreference.objects.filter(user_id=user.pk).first()
            if preference is not None and preference.language in SUPPORTED:
                chosen = preference.language
        if chosen is None:
            return self.get_response(request)
        translation.activate(chosen)
        request.LANGUAGE_CODE = chosen
        response = self.get_response(request)
        response.set_cookie(
            settings.LANGUAGE_COOKIE_NAME,
            chosen,
            max_age=settings.LANGUAGE_COOKIE_AGE,
            samesite=settings.LANGUAGE_COOKIE_SAMESITE,
            secure=settings.LANGUAGE_COOKIE_SECURE,
        )
        return response
