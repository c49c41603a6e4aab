"""Where the admission cycle gets its budget gate.

Billing sits above the bridge, so it registers a factory here from its AppConfig.ready;
without one, budgets never hold work back. The factory is called once per admission cycle
with the cluster, so it can load every tenant's budget state in a few queries.
Tenant ids handed to the gate are tenant slugs.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler_bridge.admission.budget import AllowAllBudgetGate, BudgetGate
from scheduler_bridge.inventory.models import Cluster

BudgetGateFactory = Callable[[Cluster], BudgetGate]

_factory: BudgetGateFactory | None = None


def register_budget_gate(factory: BudgetGateFactory) -> None:
    global _factory
    _factory = factory


def budget_gate_for(cluster: Cluster) -> BudgetGate:
    return _factory(cluster) if _factory is not None else AllowAllBudgetGate()
