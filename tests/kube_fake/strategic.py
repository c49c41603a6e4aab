"""Strategic merge patch for the kinds the fake serves.

Unlike a JSON merge patch, a strategic merge patch merges lists the Go types mark
``patchStrategy:"merge"``: lists of objects by their ``patchMergeKey`` (containers by
``name``, ownerReferences by ``uid``, conditions by ``type``) and lists of strings as
sets (finalizers). Every other list is replaced whole. The merge keys below are the
struct tags of ``staging/src/k8s.io/api/core/v1/types.go`` (ObjectMeta in
``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go``); the directives are those
of ``staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go``:
``$patch: replace`` and ``$patch: delete`` on a map or a list element,
``$deleteFromPrimitiveList/<field>``, ``$retainKeys`` and ``$setElementOrder/<field>``.
"""

from __future__ import annotations

from typing import Any

from .jsoncopy import clone
from .store import ApiError

# type -> field -> (merge key, or None for a list of strings; the elements' type)
_MERGE_LISTS: dict[str, dict[str, tuple[str | None, str]]] = {
    "ObjectMeta": {"finalizers": (None, ""), "ownerReferences": ("uid", "")},
    "PodSpec": {
        "containers": ("name", "Container"),
        "initContainers": ("name", "Container"),
        "ephemeralContainers": ("name", "Container"),
        "volumes": ("name", ""),
        "imagePullSecrets": ("name", ""),
        "hostAliases": ("ip", ""),
        "schedulingGates": ("name", ""),
        "resourceClaims": ("name", ""),
    },
    "Container": {
        "ports": ("containerPort", ""),
        "env": ("name", ""),
        "volumeMounts": ("mountPath", ""),
        "volumeDevices": ("devicePath", ""),
    },
    "PodStatus": {"conditions": ("type", "")},
    "NodeStatus": {"conditions": ("type", ""), "addresses": ("type", "")},
}
# type -> field -> the field's type (where a merge list may be found below)
_FIELDS: dict[str, dict[str, str]] = {
    "Pod": {"metadata": "ObjectMeta", "spec": "PodSpec", "status": "PodStatus"},
    "Job": {"metadata": "ObjectMeta", "spec": "JobSpec"},
    "JobSpec": {"template": "PodTemplateSpec"},
    "PodTemplateSpec": {"metadata": "ObjectMeta", "spec": "PodSpec"},
    "Node": {"metadata": "ObjectMeta", "status": "NodeStatus"},
    "Namespace": {"metadata": "ObjectMeta"},
    "ConfigMap": {"metadata": "ObjectMeta"},
    "ResourceQuota": {"metadata": "ObjectMeta"},
    "Event": {"metadata": "ObjectMeta"},
}

_DELETE_FROM = "$deleteFromPrimitiveList/"
_ORDER = "$setElementOrder/"


def strategic_merge_patch(kind: str, target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """``target`` (an object of ``kind``) with ``patch`` applied; 400 for a patch that
    is not an object or misuses a directive."""
    if not isinstance(patch, dict):
        raise ApiError(400, "BadRequest", "a strategic merge patch must be a JSON object")
    merged = _merge_map(clone(target), patch, kind)
    return merged if merged is not None else {}


def _merge_map(target: Any, patch: dict[str, Any], kind: str) -> dict[str, Any] | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    body = {k: v for k, v in patch.items() if k != "$patch"}
    if directive == "replace":
        return _without_directives(body)
    if directive is not None:
        raise ApiError(400, "BadRequest", f"unknown patch directive {directive!r}")
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    retain = body.pop("$retainKeys", None)
    lists = _MERGE_LISTS.get(kind, {})
    children = _FIELDS.get(kind, {})
    for key, value in body.items():
        if key.startswith(_DELETE_FROM):
            field = key.removeprefix(_DELETE_FROM)
            drop = set(value or [])
            result[field] = [v for v in result.get(field) or [] if v not in drop]
            continue
        if key.startswith(_ORDER):
            continue  # applied after the lists are merged
        if value is None:
            result.pop(key, None)
        elif key in lists and isinstance(value, list):
            merge_key, element = lists[key]
            result[key] = _merge_list(result.get(key), value, merge_key, element)
        elif isinstance(value, dict):
            merged = _merge_map(result.get(key), value, children.get(key, ""))
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = clone(value)  # scalars, and lists replaced whole
    for key, order in body.items():
        if key.startswith(_ORDER):
            field = key.removeprefix(_ORDER)
            if field in lists and isinstance(result.get(field), list):
                result[field] = _ordered(result[field], order, lists[field][0])
    if retain is not None:
        result = {k: v for k, v in result.items() if k in set(retain)}
    return result


def _merge_list(target: Any, patch: list[Any], merge_key: str | None, element: str) -> list[Any]:
    current = list(target) if isinstance(target, list) else []
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_without_directives(i) for i in patch if not _is_directive(i)]
    if merge_key is None:  # a set of strings: the patch's first, then the others kept
        return list(dict.fromkeys([*patch, *current]))
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            # a real API server answers this with a 500 (the patcher's error is not
            # classified as the client's)
            raise ApiError(
                500,
                "InternalError",
                f"map: {item!r} does not contain declared merge key: {merge_key}",
            )
        at = next(
            (
                i
                for i, c in enumerate(current)
                if isinstance(c, dict) and c.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if at is not None:
                del current[at]
            continue
        if at is None:
            current.append(_without_directives(item))
        else:
            merged = _merge_map(current[at], item, element)
            if merged is not None:
                current[at] = merged
    return current


def _ordered(items: list[Any], order: list[Any], merge_key: str | None) -> list[Any]:
    keys = [o.get(merge_key) if merge_key and isinstance(o, dict) else o for o in order]

    def rank(item: Any) -> int:
        key = item.get(merge_key) if merge_key and isinstance(item, dict) else item
        return keys.index(key) if key in keys else len(keys)

    return sorted(items, key=rank)


def _is_directive(item: Any) -> bool:
    return isinstance(item, dict) and set(item) == {"$patch"}


def _without_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _without_directives(v)
            for k, v in value.items()
            if not k.startswith("$") and v is not None
        }
    if isinstance(value, list):
        return [_without_directives(v) for v in value]
    return value
