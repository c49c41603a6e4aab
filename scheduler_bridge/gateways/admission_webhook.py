"""The mutating admission webhook that holds queue work before it can start.

A Job created with the queue label but without ``spec.suspend: true`` would start its
pods at once, outside the queue. The API server sends every such create to Tidegate as
an ``AdmissionReview`` (``admission.k8s.io/v1``); the answer allows it with a JSON Patch
setting ``spec.suspend`` to true, so the Job controller never sees it running.

A pod created with the queue label that asks for a GPU and is not made by a kind the
queue admits as a whole (a Job, a PyTorchJob, a Ray cluster: those are held by their
own suspend) gets Tidegate's scheduling gate ``tidegate.io/admission``: the pods of
Deployments, StatefulSets, LeaderWorkerSets or plain pods then wait, unscheduled, until
the queue admits them and removes the gate (Kubernetes' pod scheduling readiness, as
Kueue's pod integration does). Nothing else is changed, and nothing is ever refused
here: work that should not run at all is rejected by the queue with a reason, where its
owner can see it.

Format: Kubernetes docs "Dynamic Admission Control" (request.uid echoed in
response.uid; ``patchType: JSONPatch``; ``patch`` base64-encoded). Pure Python.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from scheduler_bridge.integrations import SUSPENDED_AS_A_WHOLE

from .base import QUEUE_LABEL
from .pod_resources import may_hold_gpus

API_VERSION = "admission.k8s.io/v1"


class BadAdmissionReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer (HTTP 400)."""


def review_response(review: Any) -> dict[str, Any]:
    """The AdmissionReview answering ``review``: always allowed, with a patch that
    suspends a queue-labelled Job created running. Raises BadAdmissionReview."""
    if not isinstance(review, Mapping) or review.get("kind") != "AdmissionReview":
        raise BadAdmissionReview("expected an AdmissionReview object")
    if review.get("apiVersion") != API_VERSION:
        raise BadAdmissionReview(
            f"apiVersion {review.get('apiVersion')!r} is not supported; register the webhook "
            f"with admissionReviewVersions: [v1]"
        )
    request = review.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise BadAdmissionReview("request.uid is missing")
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    patch = suspend_patch(request) or gate_patch(request)
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def suspend_patch(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON Patch operations for one admission request (empty: nothing to change)."""
    kind = request.get("kind") or {}
    if (kind.get("group"), kind.get("kind")) != ("batch", "Job"):
        return []
    if request.get("operation") != "CREATE":
        return []
    job = request.get("object")
    if not isinstance(job, Mapping):
        raise BadAdmissionReview("request.object is missing")
    labels = (job.get("metadata") or {}).get("labels") or {}
    spec = job.get("spec")
    if QUEUE_LABEL not in labels or not isinstance(spec, Mapping):
        return []
    if spec.get("suspend") is True:
        return []
    op = "replace" if "suspend" in spec else "add"
    return [{"op": op, "path": "/spec/suspend", "value": True}]


GATE = "tidegate.io/admission"


def gate_patch(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON Patch gating a queue-labelled pod that asks for GPUs, as resources or through
    ResourceClaims (empty: nothing to change)."""
    kind = request.get("kind") or {}
    if (kind.get("group"), kind.get("kind")) != ("", "Pod") or request.get("operation") != "CREATE":
        return []
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        raise BadAdmissionReview("request.object is missing")
    meta = pod.get("metadata") or {}
    spec = pod.get("spec")
    if QUEUE_LABEL not in (meta.get("labels") or {}) or not isinstance(spec, Mapping):
        return []
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    # held by their owner's own suspend, never gated
    if any(o.get("kind") in SUSPENDED_AS_A_WHOLE for o in owners):
        return []
    if not may_hold_gpus(spec):
        return []  # no GPU, nothing to queue: it starts as any pod (docs/dra.md for claims)
    gates = spec.get("schedulingGates") or []
    if any(g.get("name") == GATE for g in gates if isinstance(g, Mapping)):
        return []
    if "schedulingGates" in spec:
        return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]
    return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]
