"""Changing a password revokes what the old one let out: on the portal's page the user
chooses whether their API tokens go too (ticked by default); a platform admin setting
someone's password in the admin always revokes that user's tokens."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import views as auth_views
from django.db import transaction
from django.urls import reverse_lazy
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from tenants.tokens import tokens_revoke_all


class OwnPasswordChangeForm(auth_forms.PasswordChangeForm):
    revoke_api_tokens = forms.BooleanField(
        label=_("Also revoke my API tokens"),
        help_text=_("Programs using them stop working until given a new token."),
        required=False,
        initial=True,
    )

    def save(self, commit: bool = True) -> Any:
        with transaction.atomic():
            user = super().save(commit=commit)
            self.revoked = (
                tokens_revoke_all(user) if self.cleaned_data.get("revoke_api_tokens") else 0
            )
        return user


class ResetPasswordForm(auth_forms.AdminPasswordChangeForm):
    """The admin's "change password" of another user: their API tokens go as well."""

    def save(self, commit: bool = True) -> Any:
        with transaction.atomic():
            user = super().save(commit=commit)
            self.revoked = tokens_revoke_all(user)
        return user


class PasswordChangeView(auth_views.PasswordChangeView):
    form_class = OwnPasswordChangeForm
    template_name = "registration/password_change.html"
    success_url = reverse_lazy("portal-home")

    def form_valid(self, form: Any) -> Any:
        response = super().form_valid(form)
        revoked = getattr(form, "revoked", 0)
        text = gettext("Your password was changed.")
        if revoked:
            text += " " + ngettext(
                "%(count)d API token was revoked.", "%(count)d API tokens were revoked.", revoked
            ) % {"count": revoked}
        messages.success(self.request, text)
        return response
