from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from tenants import access
from tenants.models import DNS1123_LABEL, AuditEvent, Role, Tenant
from tenants.portal.audit_trail import OBJECT_LABELS, AuditFilters


class AddMemberForm(forms.Form):
    """A membership to add; ``roles`` are the ones the reader may hand out (a lead is never
    offered admin or finance, which would be refused)."""

    username = forms.CharField(label=_("User name"), max_length=150)
    role = forms.ChoiceField(label=_("Role"), choices=Role.choices, initial=Role.MEMBER)

    def __init__(self, *args: Any, roles: set[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if roles is not None:
            field = self.fields["role"]
            assert isinstance(field, forms.ChoiceField)
            field.choices = [(value, label) for value, label in Role.choices if value in roles]


class AddBindingForm(forms.Form):
    cluster_name = forms.CharField(label=_("Cluster"), max_length=63, validators=[DNS1123_LABEL])
    namespace = forms.CharField(label=_("Namespace"), max_length=63, validators=[DNS1123_LABEL])


class AuditFilterForm(forms.Form):
    """The audit trail's filters (a GET form; every field optional). The tenant choices are
    the reader's visible subtrees only, so a tenant outside them is a field error."""

    tenant = forms.ModelChoiceField(
        label=_("Tenant"),
        queryset=Tenant.objects.none(),
        required=False,
        to_field_name="slug",
        empty_label=_("All tenants"),
    )
    kind = forms.ChoiceField(label=_("Object kind"), required=False)
    action = forms.ChoiceField(label=_("Action"), required=False)
    actor = forms.CharField(label=_("Actor (user name)"), max_length=150, required=False)
    date_from = forms.DateField(
        label=_("From"), required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    date_to = forms.DateField(
        label=_("To"), required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    q = forms.CharField(label=_("Search message and object"), max_length=200, required=False)

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tenant_field = self.fields["tenant"]
        assert isinstance(tenant_field, forms.ModelChoiceField)
        tenant_field.queryset = access.tenants_visible_to(user).order_by("path")
        kind_choices = sorted(
            ((kind, str(label)) for kind, label in OBJECT_LABELS.items()), key=lambda c: c[1]
        )
        kind_field = self.fields["kind"]
        assert isinstance(kind_field, forms.ChoiceField)
        kind_field.choices = [("", _("All kinds")), *kind_choices]
        action_field = self.fields["action"]
        assert isinstance(action_field, forms.ChoiceField)
        action_field.choices = [("", _("All actions")), *AuditEvent.Action.choices]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("date_from"), cleaned.get("date_to")
        if start and end and end < start:
            self.add_error("date_to", _("The end date is before the start date."))
        return cleaned

    def filters(self) -> AuditFilters:
        """The valid form's choices as filters (call after `is_valid()`)."""
        data = self.cleaned_data
        return AuditFilters(
            tenant=data.get("tenant"),
            object_type=data.get("kind") or "",
            action=data.get("action") or "",
            actor=(data.get("actor") or "").strip(),
            date_from=data.get("date_from"),
            date_to=data.get("date_to"),
            text=(data.get("q") or "").strip(),
        )
