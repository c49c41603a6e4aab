"""JobSet (``jobset.x-k8s.io/v1alpha2``): one pod set per replicated Job, of
``replicas`` Jobs times the pods each runs at once.

A JobSet is suspended through ``spec.suspend`` (its controller then suspends every
child Job). Its replicated Jobs cannot change their replica count (the JobSet webhook
keeps ``spec.replicatedJobs`` immutable but for the pod templates' scheduling fields
while suspended), so a JobSet is never elastic. Finished and failed are its
``Completed`` and ``Failed`` conditions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .base import Integration, KindRef, SuspendedBySpec, child, ended_by_conditions, whole
from .job import pods_at_once


class JobSetIntegration(SuspendedBySpec, Integration):
    ref = KindRef("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")
    pins_nodes = False
    # JobSet api/jobset/v1alpha2 (JobSetNameKey); its pods are owned by its child Jobs
    pod_name_label = "jobset.sigs.k8s.io/jobset-name"
    makes = ("Job",)

    def templates(self, obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        for index, replicated in enumerate(_replicated_jobs(obj)):
            job_spec = replicated.setdefault("template", {}).setdefault("spec", {})
            yield _name(replicated, index), job_spec.setdefault("template", {})

    def counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        found = {}
        for index, replicated in enumerate(_replicated_jobs(obj)):
            job_spec = child(replicated, "template", "spec") or {}
            completions = job_spec.get("completions")
            per_job = pods_at_once(
                whole(job_spec.get("parallelism"), 1),
                completions if isinstance(completions, int) else None,
            )
            found[_name(replicated, index)] = whole(replicated.get("replicas"), 1) * per_job
        return found

    def outcome(self, obj: Mapping[str, Any]) -> tuple[bool, bool]:
        return ended_by_conditions(obj, "Completed")


def _replicated_jobs(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    items = child(obj, "spec", "replicatedJobs")
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _name(replicated: Mapping[str, Any], index: int) -> str:
    return str(replicated.get("name") or f"replicated-job-{index}")
