"""Models of the scheduler bridge, defined per concern in its subpackages."""

from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from scheduler_bridge.workloads.models import PriorityClass, Workload

__all__ = ["Cluster", "Flavour", "Node", "PriorityClass", "Quota", "QuotaRequest", "Workload"]
