"""Top-level URLs: the portal, the REST API v1, its schema and docs, the Django admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)
from rest_framework.routers import DefaultRouter

from billing.api import urls as billing_api
from scheduler_bridge import webhooks
from scheduler_bridge.api import urls as scheduler_api
from tenants.api import urls as tenants_api
from tenants.api.views import MeView
from tenants.languages import set_language
from tenants.portal.login import LoginView, ThrottledAdminAuthenticationForm

admin.site.login_form = ThrottledAdminAuthenticationForm

api_router = DefaultRouter()
api_router.registry.extend(tenants_api.router.registry)
api_router.registry.extend(scheduler_api.router.registry)
api_router.registry.extend(billing_api.router.registry)

urlpatterns = [
    path("", include("tenants.portal.urls")),
    path("", include("scheduler_bridge.portal")),
    path("", include("scheduler_bridge.portal.queue")),
    path("", include("billing.portal")),
    path("", include("dashboard.urls")),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/setlang/", set_language, name="set_language"),
    path("api/v1/me/", MeView.as_view(), name="api-me"),
    path("api/v1/", include(api_router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("admin/", admin.site.urls),
    # called by the Kubernetes API server (MutatingWebhookConfiguration in the chart)
    path("webhooks/v1/jobs/suspend", webhooks.suspend_queue_jobs, name="webhook-suspend-jobs"),
]

# an API path gets a problem document (JSON), never an HTML error page (config/errors.py)
handler404 = "config.errors.not_found"
handler500 = "config.errors.server_error"
