from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from tenants.models import DNS1123_LABEL, Role


class AddMemberForm(forms.Form):
    username = forms.CharField(label=_("User name"), max_length=150)
    role = forms.ChoiceField(label=_("Role"), choices=Role.choices, initial=Role.MEMBER)


class AddBindingForm(forms.Form):
    cluster_name = forms.CharField(label=_("Cluster"), max_length=63, validators=[DNS1123_LABEL])
    namespace = forms.CharField(label=_("Namespace"), max_length=63, validators=[DNS1123_LABEL])
