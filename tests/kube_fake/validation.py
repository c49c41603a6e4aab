"""The 422 checks of the fake API server (an independent re-statement of the API
server's rules, deliberately not sharing code with Tidegate's simulated cluster)."""

from __future__ import annotations

import re
from typing import Any

from kubernetes.utils.quantity import parse_quantity

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# Pod-template fields Kubernetes lets you change on a Job that is suspended and has not
# started yet ("mutable scheduling directives", validatePodTemplateUpdate in
# pkg/apis/batch/validation/validation.go); of spec.affinity only nodeAffinity.
_MUTABLE_TEMPLATE = (
    ("spec", "nodeSelector"),
    ("spec", "tolerations"),
    ("spec", "schedulingGates"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
)


def _qualified(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and bool(_NAME_PART.match(name))


def _label_value(value: Any) -> bool:
    return isinstance(value, str) and (
        value == "" or (len(value) <= 63 and bool(_NAME_PART.match(value)))
    )


def _quantity(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return False
    try:
        return parse_quantity(value) >= 0
    except ValueError:
        return False


def _without_mutable(template: dict[str, Any]) -> dict[str, Any]:
    stripped = {k: dict(v) if isinstance(v, dict) else v for k, v in template.items()}
    for section, key in _MUTABLE_TEMPLATE:
        if isinstance(stripped.get(section), dict):
            stripped[section].pop(key, None)
    spec = stripped.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("affinity"), dict):
        # podAffinity and podAntiAffinity stay immutable; an affinity left empty once
        # nodeAffinity is taken out counts as absent
        affinity = {k: v for k, v in spec["affinity"].items() if k != "nodeAffinity"}
        if affinity:
            spec["affinity"] = affinity
        else:
            spec.pop("affinity")
    return stripped


_QUANTITY_SYNTAX = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


def undecodable_quantity(kind: str, obj: dict[str, Any]) -> str | None:
    """Why ``obj`` cannot be decoded: a quota limit that is no quantity at all is refused
    while the body is read (apimachinery's Quantity UnmarshalJSON), before validation."""
    if kind != "ResourceQuota":
        return None
    for value in ((obj.get("spec") or {}).get("hard") or {}).values():
        if not re.match(_QUANTITY_SYNTAX, str(value)):
            return f"quantities must match the regular expression '{_QUANTITY_SYNTAX}'"
    return None


def canonical_quantity(value: str) -> str:
    """A whole decimal quantity as Kubernetes prints it back (``2000`` -> ``2k``); other
    forms as given."""
    if not re.fullmatch(r"[0-9]+", value) or value == "0":
        return value
    number, suffixes = int(value), ["", "k", "M", "G", "T", "P", "E"]
    step = 0
    while number % 1000 == 0 and step < len(suffixes) - 1:
        number //= 1000
        step += 1
    return f"{number}{suffixes[step]}"


def problems(
    kind: str,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    *,
    suspended_jobs_mutable: bool = True,
) -> list[tuple[str, str]]:
    """(field, message) for every rule ``obj`` breaks; ``old`` is the stored object on
    updates. ``suspended_jobs_mutable``: the rule of 1.36 and later for the template of a
    suspended Job (False: the rule before, see ``Store.suspended_jobs_mutable``)."""
    found: list[tuple[str, str]] = []
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    max_name = 63 if kind in ("Namespace", "Job") else 253
    pattern = _DNS_LABEL if kind in ("Namespace", "Job") else _SUBDOMAIN
    if len(name) > max_name or not pattern.match(name):
        found.append(
            ("metadata.name", f'Invalid value: "{name}": must be a lowercase RFC 1123 name')
        )
    for key, value in (meta.get("labels") or {}).items():
        if not _qualified(key):
            found.append(
                (
                    "metadata.labels",
                    f'Invalid value: "{key}": name part must consist of alphanumeric characters',
                )
            )
        if not _label_value(value):
            found.append(
                (
                    "metadata.labels",
                    f'Invalid value: "{value}": a valid label must be 63 characters or less',
                )
            )
    annotations = meta.get("annotations") or {}
    for key in annotations:
        if not _qualified(key):
            found.append(("metadata.annotations", f'Invalid value: "{key}": not a qualified name'))
    if sum(len(k) + len(str(v)) for k, v in annotations.items()) > 256 * 1024:
        found.append(("metadata.annotations", "Too long: must have at most 262144 bytes"))
    spec = obj.get("spec") or {}
    if kind == "ResourceQuota":
        for key, value in (spec.get("hard") or {}).items():
            if not _quantity(value):
                found.append(
                    (
                        f"spec.hard[{key}]",
                        f'Invalid value: "{value}": must be a non-negative quantity',
                    )
                )
    elif kind == "ConfigMap":
        # ValidateConfigMap (pkg/apis/core/validation/validation.go): keys and values of
        # data and binaryData together at most MaxSecretSize, 1 MiB.
        data = {**(obj.get("data") or {}), **(obj.get("binaryData") or {})}
        total = sum(len(str(v).encode()) for v in data.values())  # values only
        if total > 1024 * 1024:
            found.append(("", "Too long: may not be more than 1048576 bytes"))
        for key, value in (obj.get("data") or {}).items():
            if len(key) > 253 or not _CONFIG_KEY.match(key):
                found.append(
                    (
                        f"data[{key}]",
                        f'Invalid value: "{key}": a valid config key must consist of alphanumeric characters, "-", "_" or "."',
                    )
                )
            if not isinstance(value, str):
                found.append((f"data[{key}]", "Invalid value: must be a string"))
    elif kind == "Pod":
        if not spec.get("containers"):
            found.append(("spec.containers", "Required value"))
        found += _resource_problems(spec, "spec")
        found += _node_affinity_problems(spec, "spec")
        found += _pod_problems(obj, old)
    elif kind == "Job":
        found += _job_problems(obj, old, suspended_jobs_mutable)
    return found


def _extended(resource: str) -> bool:
    """IsExtendedResourceName (pkg/apis/core/helper/helpers.go): a domain-prefixed name
    outside kubernetes.io, such as nvidia.com/gpu or HAMi's nvidia.com/gpumem."""
    domain, slash, _name = resource.partition("/")
    return (
        bool(slash)
        and not domain.endswith("kubernetes.io")
        and not resource.startswith("requests.")
    )


def _resource_problems(pod_spec: dict[str, Any], path: str) -> list[tuple[str, str]]:
    """ValidateResourceRequirements (pkg/apis/core/validation/validation.go): an extended
    resource cannot be overcommitted - a request needs a limit of the same amount - and
    is a whole number."""
    found: list[tuple[str, str]] = []
    for section in ("containers", "initContainers"):
        for index, container in enumerate(pod_spec.get(section) or []):
            resources = (container or {}).get("resources") or {}
            requests = resources.get("requests") or {}
            limits = resources.get("limits") or {}
            where = f"{path}.{section}[{index}].resources"
            for kind, values in (("requests", requests), ("limits", limits)):
                for name, value in values.items():
                    if not _extended(name):
                        continue
                    try:
                        whole = parse_quantity(value) == int(parse_quantity(value))
                    except (ValueError, TypeError):
                        whole = False
                    if not whole:
                        found.append(
                            (
                                f"{where}.{kind}[{name}]",
                                f'Invalid value: "{value}": must be an integer',
                            )
                        )
            for name, value in requests.items():
                if not _extended(name):
                    continue
                if name not in limits:
                    found.append(
                        (
                            f"{where}.limits",
                            f"Required value: Limit must be set for non overcommitable resources ({name})",
                        )
                    )
                elif (
                    _quantity(value)
                    and _quantity(limits[name])
                    and parse_quantity(value) != parse_quantity(limits[name])
                ):
                    found.append(
                        (
                            f"{where}.requests[{name}]",
                            f'Invalid value: "{canonical_quantity(str(value))}": must be equal to {name} limit of {canonical_quantity(str(limits[name]))}',
                        )
                    )
    return found


def _gates(spec: dict[str, Any]) -> list[str]:
    return [str(g.get("name")) for g in spec.get("schedulingGates") or [] if isinstance(g, dict)]


def _node_affinity_problems(pod_spec: dict[str, Any], at: str) -> list[tuple[str, str]]:
    """validateNodeFieldSelectorRequirement (pkg/apis/core/validation/validation.go): a
    required node-affinity field requirement is on `metadata.name`, with In or NotIn and
    exactly one value."""
    found: list[tuple[str, str]] = []
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for i, term in enumerate(required.get("nodeSelectorTerms") or []):
        for j, field in enumerate(term.get("matchFields") or []):
            where = (
                f"{at}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                f".nodeSelectorTerms[{i}].matchFields[{j}]"
            )
            if field.get("key") != "metadata.name":
                found.append((f"{where}.key", f'Invalid value: "{field.get("key")}"'))
            if field.get("operator") in ("In", "NotIn") and len(field.get("values") or []) != 1:
                found.append(
                    (
                        f"{where}.values",
                        "Required value: must be only one value when `operator` is 'In' or "
                        "'NotIn' for node field selector",
                    )
                )
    return found


def _pod_problems(pod: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Scheduling gates and what may change on a pod (pkg/apis/core/validation/
    validation.go: validateSchedulingGates, ValidatePodCreate, ValidatePodUpdate)."""
    found: list[tuple[str, str]] = []
    spec = pod.get("spec") or {}
    gates = _gates(spec)
    for index, name in enumerate(gates):
        if not _qualified(name):
            found.append((f"spec.schedulingGates[{index}].name", f'Invalid value: "{name}"'))
        if name in gates[:index]:
            found.append((f"spec.schedulingGates[{index}].name", f'Duplicate value: "{name}"'))
    if old is None:
        if gates and spec.get("nodeName"):
            found.append(
                (
                    "spec.nodeName",
                    "Forbidden: cannot be set until all schedulingGates have been cleared",
                )
            )
        return found
    old_spec = old.get("spec") or {}
    old_gates = _gates(old_spec)
    for index, name in enumerate(gates):
        if name not in old_gates:
            found.append(
                (
                    f"spec.schedulingGates[{index}].name",
                    f"Forbidden: only deletion is allowed, but found new scheduling gate '{name}'",
                )
            )
    gated = bool(old_gates)
    new_selector, old_selector = spec.get("nodeSelector") or {}, old_spec.get("nodeSelector") or {}
    if new_selector != old_selector:
        if not gated:
            found.append(
                (
                    "spec.nodeSelector",
                    "Forbidden: pod updates may not change fields other than the allowed ones",
                )
            )
        elif any(new_selector.get(k) != v for k, v in old_selector.items()):
            found.append(
                (
                    "spec.nodeSelector",
                    "Invalid value: only additions to spec.nodeSelector are allowed (no mutations or deletions)",
                )
            )
    old_tolerations = old_spec.get("tolerations") or []
    if any(t not in (spec.get("tolerations") or []) for t in old_tolerations):
        found.append(
            (
                "spec.tolerations",
                "Forbidden: existing toleration can not be modified except its tolerationSeconds",
            )
        )
    node_affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    old_affinity = ((old_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if node_affinity != old_affinity and not (gated and old_affinity is None):
        found.append(
            ("spec.affinity.nodeAffinity", "Forbidden: may change only while the pod is gated")
        )

    def rest(s: dict[str, Any]) -> dict[str, Any]:
        kept = {
            k: v
            for k, v in s.items()
            if k
            not in (
                "schedulingGates",
                "nodeSelector",
                "tolerations",
                "activeDeadlineSeconds",
                "nodeName",
            )
        }
        affinity = dict(kept.get("affinity") or {})
        affinity.pop("nodeAffinity", None)
        if affinity:
            kept["affinity"] = affinity
        else:
            kept.pop("affinity", None)
        kept["containers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in kept.get("containers") or []
        ]
        return kept

    if len(spec.get("containers") or []) != len(old_spec.get("containers") or []):
        found.append(("spec.containers", "Forbidden: pod updates may not add or remove containers"))
    elif rest(spec) != rest(old_spec):
        found.append(
            (
                "spec",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
                "tolerations), `spec.schedulingGates` (only deletions) and, while gated, "
                "`spec.nodeSelector` (only additions) and `spec.affinity.nodeAffinity` (only narrowing)",
            )
        )
    return found


def _job_problems(
    job: dict[str, Any], old: dict[str, Any] | None, suspended_jobs_mutable: bool = True
) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    template = (job.get("spec") or {}).get("template") or {}
    pod_spec = template.get("spec") or {}
    if not pod_spec.get("containers"):
        found.append(("spec.template.spec.containers", "Required value"))
    found += _resource_problems(pod_spec, "spec.template.spec")
    found += _node_affinity_problems(pod_spec, "spec.template.spec")
    if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
        found.append(
            (
                "spec.template.spec.restartPolicy",
                'Unsupported value: supported values: "OnFailure", "Never"',
            )
        )
    if old is None:
        return found
    old_spec, new_spec = old.get("spec") or {}, job.get("spec") or {}
    # ValidateJobStatusUpdate (pkg/apis/batch/validation/validation.go,
    # RejectStartTimeUpdateForUnsuspendedJob): startTime stays while the Job runs.
    old_start = (old.get("status") or {}).get("startTime")
    moved = old_start != (job.get("status") or {}).get("startTime")
    if old_start and moved and not new_spec.get("suspend"):
        found.append(
            ("status.startTime", "Required value: startTime cannot be removed for unsuspended job")
        )
    if old_spec.get("selector") != new_spec.get("selector"):
        found.append(("spec.selector", "Invalid value: field is immutable"))
    # ValidateJobSpecUpdate (pkg/apis/batch/validation/validation.go): an Indexed Job
    # stays Indexed, and (without elastic indexed Jobs) keeps its completions
    if old_spec.get("completionMode") != new_spec.get("completionMode"):
        found.append(("spec.completionMode", "Invalid value: field is immutable"))
    if old_spec.get("completions") != new_spec.get("completions"):
        found.append(("spec.completions", "Invalid value: field is immutable"))
    old_template = old_spec.get("template") or {}
    if _without_mutable(old_template) != _without_mutable(template):
        found.append(("spec.template", "Invalid value: field is immutable"))
    elif old_template != template:
        # Scheduling directives may change only while the Job is suspended, the Job
        # controller counts no active pod, and it has no status.startTime or carries the
        # Suspended condition (shouldAllowMutablePodTemplate and validationOptionsForJob in
        # pkg/registry/batch/job/strategy.go, with MutableSchedulingDirectivesForSuspendedJobs,
        # on by default since 1.36). Before: only while suspended without startTime.
        old_status = old.get("status") or {}
        suspended = bool(old_spec.get("suspend"))
        started = bool(old_status.get("startTime"))
        marked = any(
            c.get("type") == "Suspended" and c.get("status") == "True"
            for c in old_status.get("conditions") or []
        )
        active = int(old_status.get("active") or 0)
        if suspended_jobs_mutable:
            frozen = not suspended or active or (started and not marked)
        else:
            frozen = not suspended or started
        if frozen:
            found.append(
                (
                    "spec.template",
                    "Invalid value: field is immutable: only a suspended Job whose pods have stopped may change scheduling directives",
                )
            )
    return found
