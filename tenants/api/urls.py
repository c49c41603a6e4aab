from rest_framework.routers import DefaultRouter

from tenants.api import views

router = DefaultRouter()
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("memberships", views.MembershipViewSet, basename="membership")
router.register("namespace-bindings", views.NamespaceBindingViewSet, basename="binding")
router.register("audit-events", views.AuditEventViewSet, basename="audit-event")
router.register("tokens", views.ApiTokenViewSet, basename="api-token")
