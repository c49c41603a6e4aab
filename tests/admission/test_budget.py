"""The budget gate."""

from __future__ import annotations

from scheduler_bridge.admission import (
    AdmissionEngine,
    AllowAllBudgetGate,
    BudgetGate,
    PendingWorkload,
    ReasonCode,
)

from .factories import nodes, running, snapshot, two_teams, workload


class HardBudget:
    """Refuses everything of one tenant, and remembers whom it was asked about."""

    def __init__(self, broke: str) -> None:
        self.broke = broke
        self.asked: list[str] = []

    def may_start(self, tenant_id: str, workload: PendingWorkload) -> tuple[bool, str | None]:
        self.asked.append(workload.id)
        if tenant_id == self.broke:
            return False, f"{tenant_id} budget for 2026-11 is exhausted (hard)"
        return True, None


def test_default_gate_allows_everything_and_satisfies_the_protocol():
    assert isinstance(AllowAllBudgetGate(), BudgetGate)
    assert isinstance(HardBudget("x"), BudgetGate)


def test_budget_refusal_keeps_the_workload_pending_with_the_gates_reason():
    tree, quotas = two_teams(a=8, b=8)
    gate = HardBudget("a")
    snap = snapshot(tree, quotas, nodes(2), [workload("a1", "a", 4), workload("b1", "b", 4)])
    result = AdmissionEngine(budget_gate=gate).run_cycle(snap)
    assert [a.workload_id for a in result.admissions] == ["b1"]
    (why,) = result.pending
    assert why.code is ReasonCode.BUDGET
    assert why.message == "budget: a budget for 2026-11 is exhausted (hard)"


def test_budget_refusal_frees_the_capacity_for_the_next_in_line():
    tree, quotas = two_teams(a=4, b=4)
    snap = snapshot(
        tree,
        quotas,
        nodes(1, gpus=4),
        [workload("a1", "a", 4), workload("b1", "b", 4, submitted=1)],
    )
    result = AdmissionEngine(budget_gate=HardBudget("a")).run_cycle(snap)
    assert [a.workload_id for a in result.admissions] == ["b1"]


def test_gate_is_only_asked_about_workloads_that_would_start():
    tree, quotas = two_teams(a=8, b=8, a_limit=0)
    busy = [running("a-all", "a", {"n000": 8})]
    gate = HardBudget("nobody")
    snap = snapshot(tree, quotas, nodes(2), [workload(f"a{i}", "a", 1) for i in range(50)], busy)
    AdmissionEngine(budget_gate=gate).run_cycle(snap)
    assert gate.asked == []
