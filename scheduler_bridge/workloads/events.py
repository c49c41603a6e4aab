"""Kubernetes Events on queue-managed Jobs: what `kubectl describe job` tells their owners
(admitted where and why, preempted by whom, refused and how to fix it)."""

from __future__ import annotations

import logging

from scheduler_bridge.gateways import ClusterGateway, GatewayError, JobRef
from scheduler_bridge.workloads.models import Workload

logger = logging.getLogger(__name__)


def admitted_message(workload: Workload) -> str:
    nodes = ", ".join(sorted({p["node"] for p in workload.placements}))
    flavour = workload.flavour.name if workload.flavour else ""
    return f"admitted by Tidegate onto {flavour} ({nodes}): {workload.reason}"


def job_event(
    gateway: ClusterGateway, workload: Workload, reason: str, message: str, *, warning: bool = False
) -> None:
    """Tell the Job's owner in Kubernetes what happened (best effort: the decision is
    already saved and visible in Tidegate, a lost Event only costs a log line)."""
    if not workload.job_uid:
        return
    try:
        gateway.record_job_event(
            JobRef(workload.namespace, workload.job_name, workload.job_uid),
            reason,
            message,
            warning=warning,
        )
    except GatewayError as error:
        logger.warning("no Event on Job %s/%s: %s", workload.namespace, workload.job_name, error)
