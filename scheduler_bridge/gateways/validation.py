"""The API server's checks that Tidegate's writes depend on, for the simulated cluster.

A real API server rejects a bad name, label or quota value with 422 and a write into a
missing namespace with 404; the simulated cluster must refuse the same things, or the
demo would accept what production rejects. Rules: Kubernetes API conventions
(DNS-1123 names, qualified label keys, label values, quantities, ConfigMap keys).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from scheduler_bridge.quantity import is_quantity

from .errors import GatewayError, NamespaceMissing

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def is_dns_label(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS_LABEL.match(name))


def is_dns_subdomain(name: str) -> bool:
    return len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))


def is_qualified_name(key: str) -> bool:
    """A label or annotation key: optional DNS-subdomain prefix, then a name <= 63."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not is_dns_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def is_label_value(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def quota_hard_problems(hard: Mapping[str, Any]) -> list[str]:
    """What is wrong with a quota's ``spec.hard``: every value a non-negative quantity."""
    return [
        f"spec.hard[{key}]: Invalid value: {value!r}: must be a non-negative quantity"
        for key, value in hard.items()
        if not is_quantity(value) or str(value).lstrip().startswith("-")
    ]


def validate_object(obj: Mapping[str, Any], *, namespace_known: bool = True) -> None:
    """Raise like the API server would: NamespaceMissing for a namespaced object whose
    namespace does not exist, GatewayError listing every invalid field."""
    kind, meta = obj["kind"], obj.get("metadata") or {}
    name = meta.get("name", "")
    if not namespace_known:
        raise NamespaceMissing(meta.get("namespace", ""))
    problems: list[str] = []
    name_ok = is_dns_label(name) if kind == "Namespace" else is_dns_subdomain(name)
    if not name_ok:
        problems.append(f"metadata.name: Invalid value: {name!r}: must be a DNS-1123 name")
    for key, value in (meta.get("labels") or {}).items():
        if not is_qualified_name(key):
            problems.append(f"metadata.labels: Invalid value: {key!r}: not a qualified name")
        if not is_label_value(value):
            problems.append(f"metadata.labels: Invalid value: {value!r}: not a label value")
    for key in meta.get("annotations") or {}:
        if not is_qualified_name(key):
            problems.append(f"metadata.annotations: Invalid value: {key!r}: not a qualified name")
    if kind == "ResourceQuota":
        problems += quota_hard_problems((obj.get("spec") or {}).get("hard") or {})
    if kind == "ConfigMap":
        for key in obj.get("data") or {}:
            if len(key) > 253 or not _CONFIG_KEY.match(key):
                problems.append(f"data[{key}]: Invalid value: {key!r}: not a valid config key")
    if problems:
        raise GatewayError(f'{kind} "{name}" is invalid: ' + "; ".join(problems))


# Pod-template fields of a Job that may change while it is suspended and has no
# status.startTime (validatePodTemplateUpdate in pkg/apis/batch/validation/validation.go;
# validationOptionsForJob in pkg/registry/batch/job/strategy.go). Of spec.affinity only
# nodeAffinity.
_SCHEDULING_DIRECTIVES = (
    ("spec", "nodeSelector"),
    ("spec", "tolerations"),
    ("spec", "schedulingGates"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
)


def _fixed_part(template: Mapping[str, Any]) -> dict[str, Any]:
    fixed = {k: dict(v) if isinstance(v, Mapping) else v for k, v in template.items()}
    for section, key in _SCHEDULING_DIRECTIVES:
        if isinstance(fixed.get(section), dict):
            fixed[section].pop(key, None)
    spec = fixed.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("affinity"), Mapping):
        rest = {k: v for k, v in spec["affinity"].items() if k != "nodeAffinity"}
        if rest:
            spec["affinity"] = rest
        else:
            spec.pop("affinity")
    return fixed


def validate_job_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Raise GatewayError where Kubernetes refuses a Job update with 422: a pod template
    changed beyond its scheduling directives, or scheduling directives changed on a Job
    that is not suspended or still has ``status.startTime``; ``status.startTime``
    removed while the Job runs (ValidateJobStatusUpdate)."""
    name = (new.get("metadata") or {}).get("name", "")
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    old_template, template = old_spec.get("template") or {}, new_spec.get("template") or {}
    started = bool((old.get("status") or {}).get("startTime"))
    problems: list[str] = []
    if _fixed_part(old_template) != _fixed_part(template):
        problems.append("spec.template: Invalid value: field is immutable")
    elif old_template != template and (not old_spec.get("suspend") or started):
        problems.append(
            "spec.template: Invalid value: field is immutable: only a suspended Job that "
            "has not started may change scheduling directives"
        )
    new_start = (new.get("status") or {}).get("startTime")
    moved = new_start != (old.get("status") or {}).get("startTime")
    if started and moved and not new_spec.get("suspend"):
        problems.append(
            "status.startTime: Required value: startTime cannot be removed for unsuspended job"
        )
    if problems:
        raise GatewayError(f'Job "{name}" is invalid: ' + "; ".join(problems))
