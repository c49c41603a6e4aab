from django.urls import path

from tenants.portal import views
from tenants.portal.password import PasswordChangeView

urlpatterns = [
    path("", views.home, name="portal-home"),
    path("start/", views.landing, name="portal-landing"),
    path("tenants/<slug:slug>/", views.tenant_detail, name="portal-tenant"),
    path("tenants/<slug:slug>/members/add/", views.member_add, name="portal-member-add"),
    path(
        "tenants/<slug:slug>/members/<int:membership_id>/remove/",
        views.member_remove,
        name="portal-member-remove",
    ),
    path("tenants/<slug:slug>/bindings/add/", views.binding_add, name="portal-binding-add"),
    path(
        "tenants/<slug:slug>/bindings/<int:binding_id>/remove/",
        views.binding_remove,
        name="portal-binding-remove",
    ),
    path("accounts/password/", PasswordChangeView.as_view(), name="password-change"),
    path("audit/", views.audit_list, name="portal-audit"),
    path("audit/export/csv/", views.audit_csv, name="portal-audit-csv"),
]
