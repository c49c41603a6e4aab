"""Fair-share admission engine: pure Python over plain dataclasses, no Django.

Build a ``ClusterSnapshot`` (tenants, quotas, flavours, nodes, running and pending
workloads, decayed usage, ``now``) and call ``AdmissionEngine(config, gate).run_cycle``
(or ``run_cycle`` for a one-off). The ``CycleResult`` lists admissions (flavour, node
placements, borrowed GPUs), preemptions (victim, preemptor, reason) and every pending
workload with its queue position and reason; reservations for starving gangs ride along.
Apply it (``simulator.apply_result`` shows how) and run the next cycle.

Where things live:

* model.py        - the input and output dataclasses, reason codes, EngineConfig
* quota.py        - cohort tree accounting: guarantees, borrowing, lending (Kueue KEP-79)
* fairshare.py    - weighted dominant share, usage decayed with a half-life
* placement.py    - node fit, gangs, topology, best-fit packing
* preemption.py   - reclaim and priority preemption, minimal victim sets
* reservation.py  - reservations for starving gangs, backfill
* engine.py       - the cycle itself; incremental.py what a warm engine may skip
* explain.py, reasons.py - queue positions and human-readable reasons
* (reasons are worded with i18n.wording: English text that keeps its template, said
  again in the reader's language by the portal)
* budget.py       - the BudgetGate protocol billing implements
* simulator.py    - virtual-time replay of jobs through the engine

The modules run compiled by mypyc when built for these very sources, interpreted
otherwise (_native.py).
"""

from . import _native

_native.use_compiled(__path__)

from .budget import AllowAllBudgetGate, BudgetGate
from .elastic import (
    ElasticChange,
    ElasticPod,
    core_of,
    elastic_changes,
    elastic_parts,
    elastic_reason,
    without_elastic_pods,
)
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
from .pending import fits_when_idle
from .simulator import SimJob, SimulationResult, Simulator, apply_result

__all__ = [
    "ElasticChange",
    "ElasticPod",
    "core_of",
    "elastic_changes",
    "elastic_parts",
    "elastic_reason",
    "without_elastic_pods",
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
    "SimJob",
    "SimulationResult",
    "Simulator",
    "Tenant",
    "Topology",
    "apply_result",
    "decay_usage",
    "fits_when_idle",
    "run_cycle",
]
