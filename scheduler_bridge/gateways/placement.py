"""Whether a pod may run on a node: node selector, taints and tolerations, required
node affinity (``matchExpressions`` on labels, ``matchFields`` on ``metadata.name``).

The simulated cluster's scheduler uses it; the rules are Kubernetes' own (Kubernetes
docs: "Assigning Pods to Nodes", "Taints and Tolerations").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and (t.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def node_accepts(node: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> bool:
    if node.get("spec", {}).get("unschedulable"):
        return False
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(
            pod_spec.get("tolerations") or [], taint
        ):
            return False
    required = (
        ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms")
    )
    if required:
        return any(_term_matches(term, node) for term in required)
    return True


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    checks = [(labels, e) for e in term.get("matchExpressions") or []]
    checks += [(fields, e) for e in term.get("matchFields") or []]
    for source, expr in checks:
        value, values, op = source.get(expr["key"]), expr.get("values") or [], expr["operator"]
        ok = {
            "In": value in values,
            "NotIn": value not in values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }.get(op, False)
        if not ok:
            return False
    return True
