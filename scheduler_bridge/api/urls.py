from rest_framework.routers import DefaultRouter

from scheduler_bridge.api import inventory, quotas
from scheduler_bridge.api import workloads as workload_api

router = DefaultRouter()
router.register("clusters", inventory.ClusterViewSet, basename="cluster")
router.register("nodes", inventory.NodeViewSet, basename="node")
router.register("flavours", inventory.FlavourViewSet, basename="flavour")
router.register("quotas", quotas.QuotaViewSet, basename="quota")
router.register("quota-requests", quotas.QuotaRequestViewSet, basename="quota-request")
router.register("workloads", workload_api.WorkloadViewSet, basename="workload")
router.register("priority-classes", workload_api.PriorityClassViewSet, basename="priority-class")
