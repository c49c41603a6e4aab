"""Fair-share admission engine: pure Python, no Django.

Build a ClusterSnapshot, call ``AdmissionEngine().run_cycle(snapshot)`` (or
``run_cycle``), apply the CycleResult. See engine.py for the cycle, quota.py for
borrowing and lending, preemption.py for reclaim, reservation.py for backfill.
"""

from .budget import AllowAllBudgetGate, BudgetGate
from .engine import AdmissionEngine, run_cycle
from .fairshare import decay_usage
from .model import (
    Admission,
    AdmitCode,
    ClusterSnapshot,
    CycleResult,
    CycleStats,
    EngineConfig,
    Flavour,
    Node,
    PendingDecision,
    PendingWorkload,
    Placement,
    PodSet,
    Preemption,
    PreemptionCode,
    Quota,
    ReasonCode,
    Reservation,
    RunningWorkload,
    Tenant,
    Topology,
)

__all__ = [
    "Admission",
    "AdmissionEngine",
    "AdmitCode",
    "AllowAllBudgetGate",
    "BudgetGate",
    "ClusterSnapshot",
    "CycleResult",
    "CycleStats",
    "EngineConfig",
    "Flavour",
    "Node",
    "PendingDecision",
    "PendingWorkload",
    "Placement",
    "PodSet",
    "Preemption",
    "PreemptionCode",
    "Quota",
    "ReasonCode",
    "Reservation",
    "RunningWorkload",
    "Tenant",
    "Topology",
    "decay_usage",
    "run_cycle",
]
