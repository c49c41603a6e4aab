"""URL routing and discovery documents of the fake API server."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .store import RESOURCES, ApiError, Resource

_APPLY_TYPE = "application/apply-patch+yaml"
_STRATEGIC_TYPE = "application/strategic-merge-patch+json"
_MERGE_TYPES = ("application/merge-patch+json", _STRATEGIC_TYPE)


@dataclass
class Route:
    verb: str
    resource: Resource | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str = ""
    discovery: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def route_request(
    method: str,
    path: str,
    query: dict[str, str],
    content_type: str,
    resources: Mapping[str, Resource] = RESOURCES,
) -> Route:
    """The route of a request; ``resources`` are the kinds the server serves (by
    plural): the built-in ones and the installed custom resources."""
    path = path.rstrip("/") or "/"  # the client asks for "/version/"
    if path in _DISCOVERY:
        return Route("discovery", discovery=_DISCOVERY[path])
    discovery = _group_discovery(path, resources)
    if discovery is not None:
        return Route("discovery", discovery=discovery)
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group_version, rest = "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in resources:
        namespace, rest = rest[1], rest[2:]
    if not rest or rest[0] not in resources or resources[rest[0]].group_version != group_version:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    resource = resources[rest[0]]
    if resource.namespaced != (namespace is not None) and len(rest) > 1:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    if subresource not in ("", "status") or len(rest) > 3:
        raise ApiError(404, "NotFound", f"subresource {subresource!r} is not served by the fake")
    if name is None:
        verb = {
            "GET": "watch" if query.get("watch") in ("true", "1") else "list",
            "POST": "create",
            "DELETE": "deletecollection",
        }.get(method, "unsupported")
    elif method == "PATCH":
        media = content_type.split(";")[0].strip()
        verb = "apply" if media == _APPLY_TYPE else "patch"
        if verb == "patch" and media not in _MERGE_TYPES:
            verb = "unsupported-patch"
        if media == _STRATEGIC_TYPE:
            return Route(
                verb,
                resource,
                namespace,
                name,
                rest[2] if len(rest) > 2 else "",
                extra={"strategic": True},
            )
    else:
        verb = {"GET": "get", "PUT": "update", "DELETE": "delete"}.get(method, "unsupported")
    return Route(verb, resource, namespace, name, subresource)


def _resource_list(
    group_version: str, resources: Mapping[str, Resource] = RESOURCES
) -> dict[str, Any]:
    verbs = ["create", "delete", "get", "list", "patch", "update"]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {
                "name": r.plural,
                "singularName": r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": verbs,
            }
            for r in resources.values()
            if r.group_version == group_version
        ],
    }


# the built-in API groups the fake serves (batch/v1, apps/v1), beside the core v1
BUILT_IN_GROUPS = sorted({r.group_version for r in RESOURCES.values() if "/" in r.group_version})


def _group(group_version: str) -> dict[str, Any]:
    group, version = group_version.split("/")
    entry = {"groupVersion": group_version, "version": version}
    return {"name": group, "versions": [entry], "preferredVersion": entry}


def _answer(document: dict[str, Any]) -> Callable[[str], Any]:
    def answer(address: str) -> Any:
        return document

    return answer


def _group_discovery(path: str, resources: Mapping[str, Resource]) -> Callable[[str], Any] | None:
    """/apis, /apis/<group> and /apis/<group>/<version> with the installed custom
    resources (the built-in answers are in _DISCOVERY)."""
    custom = sorted({r.group_version for r in resources.values() if r.custom is not None})
    if path == "/apis":
        groups = [_group(gv) for gv in BUILT_IN_GROUPS + custom]
        return _answer({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    for group_version in BUILT_IN_GROUPS + custom:
        if path == f"/apis/{group_version.split('/')[0]}":
            return _answer({"kind": "APIGroup", "apiVersion": "v1", **_group(group_version)})
        if path == f"/apis/{group_version}":
            return _answer(_resource_list(group_version, resources))
    return None


_DISCOVERY: dict[str, Callable[[str], Any]] = {
    "/version": lambda address: {
        "major": "1",
        "minor": "37",
        "gitVersion": "v1.37.2-tidegate-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    },
    "/api": lambda address: {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    },
    "/api/v1": lambda address: _resource_list("v1"),
}
