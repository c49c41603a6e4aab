from rest_framework.routers import DefaultRouter

from scheduler_bridge.api import views
from scheduler_bridge.api import workloads as workload_api

router = DefaultRouter()
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("flavours", views.FlavourViewSet, basename="flavour")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("quota-requests", views.QuotaRequestViewSet, basename="quota-request")
router.register("workloads", workload_api.WorkloadViewSet, basename="workload")
router.register("priority-classes", workload_api.PriorityClassViewSet, basename="priority-class")
