"""The budget gate: how the admission engine asks billing whether money allows more work.

``scheduler_bridge`` must not import ``billing`` (dependencies point one way), so the
engine defines this small protocol and billing registers an implementation. The engine
calls it only for a workload that would otherwise start (or preempt others to start), so
an expensive gate costs one call per real decision, not one per pending workload.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .model import PendingWorkload


@runtime_checkable
class BudgetGate(Protocol):
    """Decides whether a tenant's budget lets ``workload`` start now.

    Return ``(True, None)`` to allow, or ``(False, reason)`` with a reason a team lead can
    act on, e.g. "team budget for 2026-11 is exhausted (hard)"; the engine shows it as
    "budget: <reason>". Must be deterministic for a given state: the engine relies on the
    same input giving the same decisions.
    """

    def may_start(self, tenant_id: str, workload: PendingWorkload) -> tuple[bool, str | None]:
        """Whether ``workload`` of ``tenant_id`` may start."""
        ...

    def blocked(self, tenant_id: str) -> str | None:
        """Why no work of ``tenant_id`` may start whatever it costs (a hard budget of it
        or an ancestor is spent), else None. A waiting workload shows this reason before
        any about GPUs: freeing GPUs would not start it."""
        ...


class AllowAllBudgetGate:
    """The default gate: budgets never stop admission."""

    def may_start(self, tenant_id: str, workload: PendingWorkload) -> tuple[bool, str | None]:
        return True, None

    def blocked(self, tenant_id: str) -> str | None:
        return None
