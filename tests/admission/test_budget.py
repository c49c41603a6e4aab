"""The budget gate."""

from __future__ import annotations

from scheduler_bridge.admission import (
    AdmissionEngine,
    AllowAllBudgetGate,
    BudgetGate,
    PendingWorkload,
    ReasonCode,
)

from .factories import H100, nodes, running, snapshot, two_teams, workload


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

    def blocked(self, tenant_id: str) -> str | None:
        return (
            f"{tenant_id} budget for 2026-11 is exhausted (hard)"
            if tenant_id == self.broke
            else None
        )


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


def test_a_spent_hard_budget_is_the_reason_shown_before_any_about_gpus():
    """Vision's budget is spent and its guarantee in use: its new job waits because of the
    budget (freeing GPUs would not start it), not because nothing can be lent."""
    tree, quotas = two_teams(a=4, b=4, a_limit=0)
    busy = [running("a-all", "a", {"n000": 4}), running("b-all", "b", {"n000": 4})]
    snap = snapshot(tree, quotas, nodes(1), [workload("a1", "a", 1)], busy)
    result = AdmissionEngine(budget_gate=HardBudget("a")).run_cycle(snap)
    (why,) = result.pending
    assert why.code is ReasonCode.BUDGET
    assert why.message == "budget: a budget for 2026-11 is exhausted (hard)"
    assert why.position == 1  # still in line: it starts once the budget allows
    # with money left, the same job waits for GPUs
    (why,) = AdmissionEngine(budget_gate=HardBudget("nobody")).run_cycle(snap).pending
    assert why.code is not ReasonCode.BUDGET


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


class Recording:
    """Allows everything and remembers the flavours each workload was asked about with."""

    def __init__(self) -> None:
        self.flavours: dict[str, list[tuple[str, ...]]] = {}

    def may_start(self, tenant_id: str, workload: PendingWorkload) -> tuple[bool, str | None]:
        self.flavours[workload.id] = [ps.flavours for ps in workload.pod_sets]
        return True, None

    def blocked(self, tenant_id: str) -> str | None:
        return None


def test_gate_is_asked_about_the_flavour_the_workload_would_run_on():
    from scheduler_bridge.admission import Flavour

    tree, quotas = two_teams(a=8, b=8)
    gate = Recording()
    # a1 prefers A100 but only H100 nodes exist with room: it would run on H100
    snap = snapshot(
        tree,
        quotas,
        nodes(1),
        [workload("a1", "a", 4, flavour=("A100", H100))],
        flavours=(Flavour(H100), Flavour("A100")),
    )
    result = AdmissionEngine(budget_gate=gate).run_cycle(snap)
    assert [a.flavour for a in result.admissions] == [H100]
    assert gate.flavours == {"a1": [(H100,)]}
