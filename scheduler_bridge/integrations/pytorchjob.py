"""Kubeflow PyTorchJob (``kubeflow.org/v1``): one pod set per replica type (Master,
Worker), ``replicas`` pods each.

Suspended through ``spec.runPolicy.suspend`` (the training operator then deletes its
pods). With ``spec.elasticPolicy`` the Worker count may move between
``elasticPolicy.minReplicas`` and ``maxReplicas`` while the job runs (torchrun's
elastic rendezvous re-forms the group), so Tidegate takes ``minReplicas`` as the
Workers' core and changes ``pytorchReplicaSpecs.Worker.replicas`` to grow or shrink.
Finished and failed are its ``Succeeded`` and ``Failed`` conditions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from i18n.wording import gettext_noop, wording

from .base import Integration, IntegrationError, KindRef, child, ended_by_conditions, whole

WORKER = "Worker"


class PyTorchJobIntegration(Integration):
    ref = KindRef("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
    # Kubeflow training-operator v1 (JobNameLabel)
    pod_name_label = "training.kubeflow.org/job-name"
    suspend_field = "spec.runPolicy.suspend"

    def templates(self, obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        for name, replica in _replica_specs(obj).items():
            yield name, replica.setdefault("template", {})

    def counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        return {
            name: whole(replica.get("replicas"), 1) for name, replica in _replica_specs(obj).items()
        }

    def min_counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        policy = child(obj, "spec", "elasticPolicy")
        if not isinstance(policy, Mapping) or WORKER not in _replica_specs(obj):
            return {}
        minimum = policy.get("minReplicas")
        maximum = policy.get("maxReplicas")
        workers = self.counts(obj)[WORKER]
        if isinstance(maximum, int) and maximum < workers:
            raise IntegrationError(
                wording(
                    gettext_noop(
                        "elasticPolicy.maxReplicas is %(maximum)s, below the %(workers)s "
                        "Worker replicas asked for; raise maxReplicas or lower the replicas"
                    ),
                    maximum=maximum,
                    workers=workers,
                )
            )
        return {WORKER: minimum} if isinstance(minimum, int) else {}

    def elastic_pod_set(self, obj: Mapping[str, Any]) -> str | None:
        return WORKER if isinstance(child(obj, "spec", "elasticPolicy"), Mapping) else None

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool(child(obj, "spec", "runPolicy", "suspend"))

    def set_suspended(self, obj: dict[str, Any], suspended: bool) -> None:
        obj.setdefault("spec", {}).setdefault("runPolicy", {})["suspend"] = suspended

    def outcome(self, obj: Mapping[str, Any]) -> tuple[bool, bool]:
        return ended_by_conditions(obj, "Succeeded")

    def set_count(self, obj: dict[str, Any], pod_set: str, count: int) -> None:
        if pod_set != WORKER or self.elastic_pod_set(obj) is None:
            super().set_count(obj, pod_set, count)
        _replica_specs(obj)[pod_set]["replicas"] = count


def _replica_specs(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    specs = child(obj, "spec", "pytorchReplicaSpecs")
    if not isinstance(specs, dict):
        return {}
    # Master first, as the operator starts it first
    return {
        name: specs[name]
        for name in sorted(specs, key=lambda n: (n != "Master", n))
        if isinstance(specs[name], dict)
    }
