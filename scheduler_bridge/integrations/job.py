"""batch/v1 Job: one pod set, ``parallelism`` pods at once, elastic through
``parallelism`` (a Job's parallelism may change while it runs; Kueue's elastic jobs
rely on the same, KEP-77).

Suspending a Job makes its controller delete the running pods; its pod template may
change only while it is suspended (``validationOptionsForJob`` in
``pkg/registry/batch/job/strategy.go``), so stopping and restoring are two writes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from scheduler_bridge.gateways.base import JOB_KIND

from .base import Integration, SuspendedBySpec, child, ended_by_conditions, whole

MAIN = "main"


def pods_at_once(parallelism: int, completions: int | None) -> int:
    """How many pods of a Job run at once: the Job controller keeps at most
    ``parallelism`` active and never more than the completions still to go
    (``pkg/controller/job/job_controller.go``, ``manageJob``), so a Job of 8 parallel
    pods and 2 completions holds 2 pods' GPUs, not 8."""
    count = max(parallelism, 1)
    if completions is not None:
        count = min(count, max(completions, 1))
    return count


def reclaimable_pods(parallelism: int, completions: int | None, succeeded: int) -> int:
    """Pods of a running Job whose GPUs can go back: once the completions still to go
    are fewer than the pods it holds, the Job controller never runs more than those
    again (as Kueue's ``ReclaimablePods`` for batch/v1 Jobs, pkg/controller/jobs/job;
    without ``completions`` the Job ends when its pods do, so each success frees one)."""
    parallelism = max(parallelism, 1)
    if parallelism == 1 or succeeded == 0:
        return 0
    total = completions if completions is not None else parallelism
    remaining = max(total - succeeded, 0)
    return max(0, pods_at_once(parallelism, completions) - remaining)


class JobIntegration(SuspendedBySpec, Integration):
    ref = JOB_KIND
    restore_with_stop = False
    # update: elastic Jobs are scaled; patch: an announced preemption is written on the
    # Job; watch: the queue watch (manage.py watch_queues) follows queue-labelled Jobs
    verbs = ("get", "list", "watch", "patch", "update")

    def rbac_rules(self) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        # status.startTime is cleared before a preempted Job's placement is restored
        return (*super().rbac_rules(), (self.ref.group, f"{self.ref.plural}/status", ("patch",)))

    def templates(self, obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        template = obj.setdefault("spec", {}).setdefault("template", {})
        yield MAIN, template

    def counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        return {MAIN: pods_at_once(*_parallelism_completions(obj))}

    def elastic_pod_set(self, obj: Mapping[str, Any]) -> str | None:
        return MAIN

    def outcome(self, obj: Mapping[str, Any]) -> tuple[bool, bool]:
        return ended_by_conditions(obj, "Complete")

    def set_count(self, obj: dict[str, Any], pod_set: str, count: int) -> None:
        obj.setdefault("spec", {})["parallelism"] = count

    def reclaimable_pods(self, obj: Mapping[str, Any]) -> int:
        succeeded = whole(child(obj, "status", "succeeded"), 0)
        return reclaimable_pods(*_parallelism_completions(obj), succeeded)


def _parallelism_completions(obj: Mapping[str, Any]) -> tuple[int, int | None]:
    completions = child(obj, "spec", "completions")
    return (
        whole(child(obj, "spec", "parallelism"), 1),
        completions if isinstance(completions, int) else None,
    )
