"""Custom resources in the fake API server, checked as the real one checks them.

A CRD is installed from its YAML (the vendored ones are in ``tests/data/crds/``). The
server then serves ``/apis/<group>/<version>/namespaces/<ns>/<plural>`` and checks
every write the way the apiextensions API server does:

* **structural schema validation** (``staging/src/k8s.io/apiextensions-apiserver/pkg/
  apiserver/validation/validation.go``): types, ``required``, ``enum``, ``minimum`` /
  ``maximum``, ``maxItems``, ``nullable``; a failure is 422 Invalid naming the field;
* **unknown fields**: with ``fieldValidation=Strict`` a field the schema does not
  declare is 400 (``strict decoding error: unknown field``); otherwise it is pruned
  (``.../apiserver/schema/pruning/algorithm.go``), unless the schema preserves unknown
  fields there;
* **defaults** from the schema on every write (``.../apiserver/schema/defaulting/
  algorithm.go``);
* **transition rules**: the ``x-kubernetes-validations`` rule ``self == oldSelf``
  (immutability) on updates; other CEL rules are not evaluated by the fake;
* **status subresource**: ``status`` is dropped on create and kept from the stored
  object on main-resource writes (``.../registry/customresource/strategy.go``).

Parts of the vendored schemas that are Kubernetes' own types (a pod template, a Job
template) carry ``x-tidegate-embedded: <definition>`` instead of the copied schema, and
are checked against Kubernetes' own definition with kubernetes-validate's schemas.

The operators' own admission webhooks that matter to Tidegate are played too, each
naming its source (see :func:`webhook_problems`).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import schema_contents
from referencing import Registry
from referencing import Resource as SchemaResource

# the Kubernetes version whose schemas check the embedded types (as in schema.py)
SCHEMA_VERSION = kubernetes_validate.latest_version()
CRD_DIR = Path(__file__).resolve().parent.parent / "data" / "crds"
_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
}


@dataclass(frozen=True)
class CustomKind:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    schema: dict[str, Any]
    has_status: bool

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}"


def load_crd(name: str) -> CustomKind:
    """The vendored CRD ``tests/data/crds/<name>.yaml`` (e.g. ``jobsets.jobset.x-k8s.io``)."""
    documents = [d for d in yaml.safe_load_all((CRD_DIR / f"{name}.yaml").read_text()) if d]
    return custom_kind(documents[0])


def custom_kind(crd: dict[str, Any]) -> CustomKind:
    spec = crd["spec"]
    version = next(v for v in spec["versions"] if v.get("storage", True))
    return CustomKind(
        group=spec["group"],
        version=version["name"],
        kind=spec["names"]["kind"],
        plural=spec["names"]["plural"],
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        schema=version["schema"]["openAPIV3Schema"],
        has_status="status" in (version.get("subresources") or {}),
    )


# --- writes ----------------------------------------------------------------------------


def prepare(
    kind: CustomKind, obj: dict[str, Any], old: dict[str, Any] | None, *, strict: bool
) -> tuple[dict[str, Any], list[str], list[tuple[str, str]]]:
    """The object as the server stores it (pruned, defaulted), the unknown fields it
    had, and every (field, message) the schema and its transition rules refuse."""
    obj = copy.deepcopy(obj)
    if old is None and kind.has_status:
        obj.pop("status", None)
    unknown: list[str] = []
    _prune(kind.schema, obj, "", unknown, top=True)
    _default(kind.schema, obj)
    problems: list[tuple[str, str]] = []
    _validate(kind.schema, obj, "", problems)
    if old is not None:
        old = copy.deepcopy(old)
        _default(kind.schema, old)  # as stored: defaulted when it was written
        _transition(kind.schema, obj, old, "", problems)
    problems += webhook_problems(kind.kind, obj, old)
    return obj, (unknown if strict else []), problems


def _prune(
    schema: dict[str, Any], value: Any, path: str, unknown: list[str], *, top: bool = False
) -> None:
    if schema.get("x-tidegate-embedded"):
        unknown += [f"{path}.{p}" if path else p for p in _embedded_unknown(schema, value)]
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key in list(value):
            where = f"{path}.{key}" if path else key
            if top and key in ("apiVersion", "kind", "metadata"):
                continue
            if properties is not None and key in properties:
                _prune(properties[key], value[key], where, unknown)
            elif isinstance(additional, dict):
                _prune(additional, value[key], where, unknown)
            elif additional is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            elif properties is not None or schema.get("type") == "object":
                unknown.append(where)
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _prune(schema["items"], item, f"{path}[{index}]", unknown)


def _default(schema: dict[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                _default(sub, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(schema["items"], item)


def _validate(
    schema: dict[str, Any], value: Any, path: str, problems: list[tuple[str, str]]
) -> None:
    where = path or "<root>"
    if value is None:
        if not schema.get("nullable") and schema.get("type"):
            problems.append(
                (where, f'Invalid value: "null": {where} in body must be of type {schema["type"]}')
            )
        return
    embedded = schema.get("x-tidegate-embedded")
    if embedded:
        for message in _embedded_errors(embedded, value):
            problems.append((where, message))
        return
    expected = schema.get("type")
    if expected and not _is_type(expected, value, schema):
        problems.append(
            (
                where,
                f'Invalid value: "{type(value).__name__}": {where} in body must be of type {expected}',
            )
        )
        return
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(f'"{v}"' for v in schema["enum"])
        problems.append((where, f'Unsupported value: "{value}": supported values: {options}'))
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(
                (
                    where,
                    f"Invalid value: {value}: {where} in body should be greater than or equal to {schema['minimum']}",
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(
                (
                    where,
                    f"Invalid value: {value}: {where} in body should be less than or equal to {schema['maximum']}",
                )
            )
    if isinstance(value, dict):
        for key in schema.get("required") or []:
            if key not in value:
                problems.append((f"{path}.{key}" if path else key, "Required value"))
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            sub = (
                properties.get(key)
                if key in properties
                else additional
                if isinstance(additional, dict)
                else None
            )
            if sub is not None and not (path == "" and key == "metadata"):
                _validate(sub, item, f"{path}.{key}" if path else key, problems)
    elif isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(
                (where, f"Too many: {len(value)}: must have at most {schema['maxItems']} items")
            )
        if isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                _validate(schema["items"], item, f"{path}[{index}]", problems)


def _is_type(expected: str, value: Any, schema: dict[str, Any]) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, int | str) and not isinstance(value, bool)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, _TYPES.get(expected, object))


def _transition(
    schema: dict[str, Any], new: Any, old: Any, path: str, problems: list[tuple[str, str]]
) -> None:
    """``self == oldSelf`` rules: where both the new and the old object have the field."""
    for rule in schema.get("x-kubernetes-validations") or []:
        if rule.get("rule", "").replace(" ", "") == "self==oldSelf" and new != old:
            problems.append(
                (
                    path or "<root>",
                    f'Invalid value: "object": {rule.get("message") or "Value is immutable"}',
                )
            )
            return
    if isinstance(new, dict) and isinstance(old, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in new and key in old:
                _transition(sub, new[key], old[key], f"{path}.{key}" if path else key, problems)


# --- Kubernetes' own types inside a custom resource -------------------------------------


@functools.lru_cache(maxsize=16)
def _embedded_validator(definition: str, strict: bool) -> jsonschema.protocols.Validator:
    folder = f"kubernetes-json-schema/v{SCHEMA_VERSION}-local{'-strict' if strict else ''}"
    definitions = schema_contents(f"{folder}/_definitions.json", SCHEMA_VERSION)
    registry: Registry = SchemaResource.from_contents(definitions) @ Registry()
    schema = {
        "$id": "https://kubernetes.io/api/tidegate-embedded",
        "$ref": f"/api/_definitions.json#/$defs/{definition}",
    }
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _embedded_errors(definition: str, value: Any) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '.'}: {e.message}"
        for e in _embedded_validator(definition, False).iter_errors(value)
    ]


def _embedded_unknown(schema: dict[str, Any], value: Any) -> list[str]:
    found = []
    for error in _embedded_validator(schema["x-tidegate-embedded"], True).iter_errors(value):
        if error.validator == "additionalProperties":
            found.append(f"{'.'.join(map(str, error.absolute_path))} ({error.message})")
    return found


# --- the operators' admission webhooks ---------------------------------------------------

# Pod-template fields a JobSet lets change while it is (or is being) suspended
# (kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go, ValidateUpdate).
_JOBSET_MUTABLE_TEMPLATE = (
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec", "nodeSelector"),
    ("spec", "tolerations"),
    ("spec", "schedulingGates"),
)


def webhook_problems(
    kind: str, obj: dict[str, Any], old: dict[str, Any] | None
) -> list[tuple[str, str]]:
    """What the installed operator's validating webhook refuses."""
    if kind == "JobSet" and old is not None:
        return _jobset_update(obj, old)
    if kind == "PyTorchJob":
        return _pytorchjob(obj)
    if kind == "RayJob":
        return _rayjob(obj)
    return []


def _jobset_update(obj: dict[str, Any], old: dict[str, Any]) -> list[tuple[str, str]]:
    """jobset_webhook.go ValidateUpdate: spec.replicatedJobs is immutable, except the
    pod templates' labels, annotations, nodeSelector, tolerations and schedulingGates
    while the old or the new JobSet is suspended."""
    suspended = bool((obj.get("spec") or {}).get("suspend")) or bool(
        (old.get("spec") or {}).get("suspend")
    )

    def munged(jobset: dict[str, Any]) -> Any:
        jobs = copy.deepcopy((jobset.get("spec") or {}).get("replicatedJobs"))
        if suspended:
            for job in jobs or []:
                template = ((job.get("template") or {}).get("spec") or {}).get("template") or {}
                for section, key in _JOBSET_MUTABLE_TEMPLATE:
                    (template.get(section) or {}).pop(key, None)
        return jobs

    if munged(obj) != munged(old):
        return [("spec.replicatedJobs", 'Invalid value: "array": field is immutable')]
    return []


def _pytorchjob(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """training-operator pkg/webhooks/pytorch/pytorchjob_webhook.go: a Master has
    exactly one replica; an elasticPolicy needs a Worker replica spec."""
    spec = obj.get("spec") or {}
    replicas = spec.get("pytorchReplicaSpecs") or {}
    found = []
    master = replicas.get("Master")
    if isinstance(master, dict) and master.get("replicas", 1) != 1:
        found.append(("spec.pytorchReplicaSpecs[Master].replicas", "Forbidden: must be 1"))
    if spec.get("elasticPolicy") is not None and "Worker" not in replicas:
        found.append(("spec.elasticPolicy", "Forbidden: must have a Worker replica spec"))
    return found


def _rayjob(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """kuberay ray-operator/pkg/webhooks/v1/rayjob_webhook.go (and utils validation): a
    suspended RayJob must shut its cluster down when it finishes."""
    spec = obj.get("spec") or {}
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        return [
            (
                "spec.shutdownAfterJobFinishes",
                "Invalid value: a RayJob with shutdownAfterJobFinishes set to false is not "
                "allowed to be suspended",
            )
        ]
    return []
