"""Pure builders for every object (and patch) Tidegate writes to a cluster.

The gateways send these, and ``export_manifests`` writes them as YAML for people who
review or GitOps their clusters, so they return plain dicts in Kubernetes' own JSON
shape and never touch the network. Sources for the field names: docs/mig.md#mig-parted-configs,
docs/gpu-labels.md#node-labels and docs/kubernetes.md (ResourceQuota and Job API).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import yaml

from .base import (
    MANAGED_BY_LABEL,
    ORIGINAL_SCHEDULING_ANNOTATION,
    TENANT_LABEL,
    Toleration,
)
from .patches import merge_diff

QUOTA_NAME = "tidegate-gpu"
MIG_CONFIG_MAP_NAME = "tidegate-mig-config"
MIG_CONFIG_KEY = "config.yaml"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_PARTED_VERSION = "v1"
# Scheduling fields of a pod template that Kubernetes lets us change while a Job is
# suspended and that admission touches (nodeAffinity lives under spec.affinity).
_SCHEDULING_FIELDS = ("nodeSelector", "tolerations", "nodeAffinity")


def managed_labels(tenant_slug: str | None = None) -> dict[str, str]:
    """Labels on every object Tidegate owns (plus the tenant, when it has one)."""
    labels = {MANAGED_BY_LABEL: "tidegate"}
    if tenant_slug:
        labels[TENANT_LABEL] = tenant_slug
    return labels


# --- ResourceQuota ------------------------------------------------------------------


def quota_hard(amounts: Mapping[str, int | str]) -> dict[str, str]:
    """``spec.hard`` for GPU amounts keyed by resource name.

    Extended resources can only be limited through the ``requests.`` prefix, so
    ``{"nvidia.com/gpu": 8}`` becomes ``{"requests.nvidia.com/gpu": "8"}``; keys that
    already carry the prefix are kept.
    """
    hard: dict[str, str] = {}
    for resource, amount in amounts.items():
        if isinstance(amount, int) and amount < 0:
            raise ValueError(f"quota for {resource} cannot be negative ({amount})")
        key = resource if resource.startswith("requests.") else f"requests.{resource}"
        hard[key] = str(amount)
    return dict(sorted(hard.items()))


def resource_quota(
    namespace: str,
    hard: Mapping[str, str],
    labels: Mapping[str, str],
    name: str = QUOTA_NAME,
) -> dict[str, Any]:
    """A ResourceQuota with exactly ``hard`` as its limits."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"hard": dict(hard)},
    }


def tenant_gpu_quota(
    namespace: str, tenant_slug: str, amounts: Mapping[str, int | str]
) -> dict[str, Any]:
    """The ``tidegate-gpu`` quota of one tenant's namespace."""
    return resource_quota(namespace, quota_hard(amounts), managed_labels(tenant_slug))


# --- MIG (mig-parted config and the node label that selects it) -------------------


@dataclass(frozen=True)
class MigDeviceGroup:
    """One entry of a mig-parted config: which GPUs of a node, and how to split them.

    ``devices`` is ``"all"`` or GPU indexes; ``mig_devices`` maps a profile
    (``"1g.10gb"``) to how many instances each of those GPUs gets; ``device_filter``
    restricts the entry to PCI device ids such as ``"0x233010DE"`` (H100 80GB).
    """

    devices: Literal["all"] | tuple[int, ...] = "all"
    mig_enabled: bool = False
    mig_devices: Mapping[str, int] = field(default_factory=dict)
    device_filter: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {}
        if self.device_filter:
            entry["device-filter"] = list(self.device_filter)
        entry["devices"] = self.devices if self.devices == "all" else list(self.devices)
        entry["mig-enabled"] = self.mig_enabled
        if self.mig_enabled:
            entry["mig-devices"] = dict(self.mig_devices)
        return entry


MigConfigs = Mapping[str, Sequence[MigDeviceGroup]]


def mig_parted_document(configs: MigConfigs) -> dict[str, Any]:
    """The mig-parted ``version: v1`` document holding the named ``mig-configs``."""
    return {
        "version": MIG_PARTED_VERSION,
        "mig-configs": {
            name: [group.to_dict() for group in groups] for name, groups in configs.items()
        },
    }


def mig_parted_yaml(configs: MigConfigs) -> str:
    return yaml.safe_dump(mig_parted_document(configs), sort_keys=False)


def parse_mig_parted_yaml(text: str) -> dict[str, list[MigDeviceGroup]]:
    """Read a mig-parted config back. Raises ValueError when it is not one."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"mig-parted config is not YAML: {exc}") from exc
    if not isinstance(document, dict) or document.get("version") != MIG_PARTED_VERSION:
        raise ValueError("mig-parted config must be a mapping with 'version: v1'")
    raw_configs = document.get("mig-configs")
    if not isinstance(raw_configs, dict):
        raise ValueError("mig-parted config has no 'mig-configs' mapping")
    return {
        str(name): [_parse_group(name, g) for g in groups or []]
        for name, groups in raw_configs.items()
    }


def _parse_group(config_name: str, raw: Any) -> MigDeviceGroup:
    if not isinstance(raw, dict) or "devices" not in raw:
        raise ValueError(f"mig config {config_name!r}: every entry needs 'devices'")
    devices = raw["devices"]
    if devices != "all" and not (
        isinstance(devices, list) and all(isinstance(d, int) for d in devices)
    ):
        raise ValueError(f"mig config {config_name!r}: devices must be 'all' or indexes")
    device_filter = raw.get("device-filter") or ()
    if isinstance(device_filter, str):
        device_filter = (device_filter,)
    mig_devices = raw.get("mig-devices") or {}
    if not isinstance(mig_devices, dict) or not all(
        isinstance(v, int) and v >= 0 for v in mig_devices.values()
    ):
        raise ValueError(f"mig config {config_name!r}: mig-devices must map profiles to counts")
    return MigDeviceGroup(
        devices="all" if devices == "all" else tuple(devices),
        mig_enabled=bool(raw.get("mig-enabled", False)),
        mig_devices={str(k): v for k, v in mig_devices.items()},
        device_filter=tuple(str(f) for f in device_filter),
    )


def mig_config_map(
    namespace: str, configs: MigConfigs, name: str = MIG_CONFIG_MAP_NAME
) -> dict[str, Any]:
    """The ConfigMap MIG Manager reads (key ``config.yaml``)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": managed_labels()},
        "data": {MIG_CONFIG_KEY: mig_parted_yaml(configs)},
    }


def node_mig_config_labels(config_name: str) -> dict[str, str | None]:
    """Labels asking MIG Manager to apply ``config_name`` to a node."""
    return {MIG_CONFIG_LABEL: config_name}


def node_label_patch(labels: Mapping[str, str | None]) -> dict[str, Any]:
    """Merge patch setting node labels (``None`` removes a label)."""
    return {"metadata": {"labels": dict(labels)}}


# --- Job admission and preemption ----------------------------------------------------


def template_scheduling(template: Mapping[str, Any]) -> dict[str, Any]:
    """The scheduling fields of a pod template as they are now (a copy)."""
    pod_spec = template.get("spec") or {}
    snapshot = {k: pod_spec[k] for k in ("nodeSelector", "tolerations") if k in pod_spec}
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity")
    if node_affinity:
        snapshot["nodeAffinity"] = node_affinity
    return copy.deepcopy(snapshot)


def recorded_scheduling(obj: Mapping[str, Any]) -> Any:
    """The decoded original-scheduling annotation of ``obj``, or None when it has none.
    ValueError (saying how to repair it) when it is not JSON."""
    annotations = obj.get("metadata", {}).get("annotations") or {}
    if ORIGINAL_SCHEDULING_ANNOTATION not in annotations:
        return None
    try:
        return json.loads(annotations[ORIGINAL_SCHEDULING_ANNOTATION])
    except ValueError as exc:
        kind = obj.get("kind") or "object"
        raise ValueError(
            f"annotation {ORIGINAL_SCHEDULING_ANNOTATION} is not valid JSON ({exc}); "
            f"restore the {kind}'s pod templates by hand and remove the annotation"
        ) from exc


def only_scheduling_fields(recorded: Any) -> dict[str, Any]:
    if not isinstance(recorded, Mapping):
        raise ValueError(
            f"annotation {ORIGINAL_SCHEDULING_ANNOTATION} does not hold scheduling fields; "
            "restore the pod templates by hand and remove the annotation"
        )
    return {k: recorded[k] for k in _SCHEDULING_FIELDS if k in recorded}


def original_scheduling(job: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template's scheduling fields before Tidegate touched them: from the
    annotation when the Job is (or was half-way) admitted, else from the template."""
    recorded = recorded_scheduling(job)
    if recorded is not None:
        return only_scheduling_fields(recorded)
    return template_scheduling(job.get("spec", {}).get("template", {}))


def schedule_template(
    template: dict[str, Any],
    original: Mapping[str, Any],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Toleration],
    node_names: Sequence[str] | None = None,
    *,
    owner: str = "Job",
) -> None:
    """Give ``template`` (in place) its ``original`` scheduling fields plus the
    flavour's selector and tolerations, pinned to ``node_names`` if given. ValueError
    when the owner's own node selector contradicts the flavour's."""
    own = original.get("nodeSelector", {})
    clashes = sorted(k for k, v in node_selector.items() if k in own and own[k] != v)
    if clashes:
        # never silently override what the owner asked for
        raise ValueError(
            f"the {owner}'s nodeSelector contradicts the chosen flavour: "
            + ", ".join(f"{k}={own[k]!r} (flavour needs {node_selector[k]!r})" for k in clashes)
        )
    selector = {**own, **node_selector}
    merged_tolerations = list(original.get("tolerations", []))
    merged_tolerations += [t for t in tolerations if t not in merged_tolerations]
    node_affinity = copy.deepcopy(original.get("nodeAffinity"))
    if node_names:
        node_affinity = pinned_to_nodes(node_affinity, node_names)
    _set_scheduling(template, selector, merged_tolerations, node_affinity)


def restore_template(template: dict[str, Any], original: Mapping[str, Any]) -> None:
    """Put ``template``'s scheduling fields back to ``original`` (in place)."""
    _set_scheduling(
        template,
        original.get("nodeSelector", {}),
        original.get("tolerations", []),
        original.get("nodeAffinity"),
    )


def record_scheduling(obj: dict[str, Any], recorded: Any) -> None:
    annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[ORIGINAL_SCHEDULING_ANNOTATION] = json.dumps(
        recorded, sort_keys=True, separators=(",", ":")
    )


def forget_scheduling(obj: dict[str, Any]) -> None:
    annotations = obj.get("metadata", {}).get("annotations") or {}
    annotations.pop(ORIGINAL_SCHEDULING_ANNOTATION, None)
    if not annotations:
        obj.get("metadata", {}).pop("annotations", None)


def admitted_job(
    job: Mapping[str, Any],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Toleration],
    node_names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """``job`` as it should look once admitted: flavour selector and tolerations added
    to the original template, pods pinned to ``node_names`` if given, the original kept
    in the annotation, ``spec.suspend: false``."""
    original = original_scheduling(job)
    result = copy.deepcopy(dict(job))
    template = result.setdefault("spec", {}).setdefault("template", {})
    schedule_template(template, original, node_selector, tolerations, node_names)
    record_scheduling(result, original)
    result["spec"]["suspend"] = False
    return result


def restored_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """``job`` with its template's scheduling fields put back from the annotation and
    the annotation removed (the second step of preemption, once suspended)."""
    original = original_scheduling(job)
    result = copy.deepcopy(dict(job))
    restore_template(result.setdefault("spec", {}).setdefault("template", {}), original)
    forget_scheduling(result)
    return result


def job_admission_patch(
    job: Mapping[str, Any],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Toleration],
    node_names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Merge patch admitting ``job`` (see :func:`admitted_job`), guarded by the Job's
    resourceVersion so a concurrent change makes it fail with 409 instead of merging."""
    return _guarded(job, admitted_job(job, node_selector, tolerations, node_names))


def job_restore_patch(job: Mapping[str, Any]) -> dict[str, Any]:
    """Merge patch restoring the template of a suspended, formerly admitted Job."""
    return _guarded(job, restored_job(job))


def job_suspend_patch(job: Mapping[str, Any]) -> dict[str, Any]:
    """Merge patch suspending ``job``; Kubernetes then deletes its running pods."""
    desired = copy.deepcopy(dict(job))
    desired["spec"]["suspend"] = True
    return _guarded(job, desired)


def _guarded(live: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    patch = merge_diff(live, desired)
    version = live.get("metadata", {}).get("resourceVersion")
    if patch and version:
        patch.setdefault("metadata", {})["resourceVersion"] = version
    return patch


def pinned_to_nodes(
    node_affinity: dict[str, Any] | None, node_names: Sequence[str]
) -> dict[str, Any]:
    # Required node-affinity terms are ORed and the requirements within a term ANDed, and
    # a `metadata.name` field requirement takes exactly one value (the API server refuses
    # more: validateNodeFieldSelectorRequirement in pkg/apis/core/validation). So each
    # existing term becomes one term per chosen node: that term and "is this node".
    node_affinity = node_affinity or {}
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    pinned = []
    for term in terms:
        for node in sorted(set(node_names)):
            pin = {"key": "metadata.name", "operator": "In", "values": [node]}
            pinned.append({**term, "matchFields": [*term.get("matchFields", []), pin]})
    required["nodeSelectorTerms"] = pinned
    return node_affinity


def _set_scheduling(
    template: dict[str, Any],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Toleration],
    node_affinity: Mapping[str, Any] | None,
) -> None:
    pod_spec = template.setdefault("spec", {})
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    else:
        pod_spec.pop("nodeSelector", None)
    if tolerations:
        pod_spec["tolerations"] = copy.deepcopy(list(tolerations))
    else:
        pod_spec.pop("tolerations", None)
    affinity = pod_spec.get("affinity") or {}
    if node_affinity:
        affinity["nodeAffinity"] = copy.deepcopy(dict(node_affinity))
    else:
        affinity.pop("nodeAffinity", None)
    if affinity:
        pod_spec["affinity"] = affinity
    else:
        pod_spec.pop("affinity", None)


EVENT_COMPONENT = "tidegate"


def job_event(
    namespace: str,
    job_name: str,
    job_uid: str,
    reason: str,
    message: str,
    *,
    warning: bool,
    at: datetime,
    suffix: str,
    kind: str = "Job",
    api_version: str = "batch/v1",
) -> dict[str, Any]:
    """A core/v1 Event on a Job, as `kubectl describe job` and `kubectl get events` show
    it: why Tidegate admitted, preempted or refused it. ``suffix`` makes the name unique
    (Events are named <object>.<unique>, as the kubelet and controllers name theirs)."""
    stamp = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{job_name[:200]}.{suffix}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            "name": job_name,
            "namespace": namespace,
            "uid": job_uid,
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": EVENT_COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
