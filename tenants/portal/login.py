"""Signing in with a password, rate-limited: per address and per user name (the "login"
rate). A limited attempt is refused before the password is checked: the portal answers
429 with Retry-After and says when to try again; the admin's login form says the same."""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpResponse
from django.utils.translation import ngettext

from tenants.throttles import client_address, take


class ThrottledLoginMixin:
    """For an AuthenticationForm: each attempt counts against the "login" rate of the
    caller's address and of the user name tried."""

    request: Any
    data: Any
    retry_after: int = 0

    def clean(self) -> dict[str, Any]:
        username = str(self.data.get("username", "")).strip().lower()
        wait = max(
            take("login", f"address:{client_address(self.request)}"),
            take("login", f"user:{username}") if username else 0.0,
        )
        if wait:
            self.retry_after = math.ceil(wait)
            raise forms.ValidationError(
                ngettext(
                    "Too many sign-in attempts. Try again in %(seconds)d second.",
                    "Too many sign-in attempts. Try again in %(seconds)d seconds.",
                    self.retry_after,
                ),
                code="throttled",
                params={"seconds": self.retry_after},
            )
        return super().clean()  # type: ignore[misc,no-any-return]


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass


class LoginView(auth_views.LoginView):
    """The portal's login page: 429 with Retry-After while the rate is exceeded."""

    authentication_form = ThrottledAuthenticationForm

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if getattr(form, "retry_after", 0):
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after)
        return response
