"""RBAC authorization of the fake API server: the rules of the ClusterRoles and Roles
given (as Tidegate's platform/rbac.yaml grants them) decide every request, as the RBAC
authorizer does (plugin/pkg/auth/authorizer/rbac/rbac.go; rule matching in
pkg/apis/rbac/v1/evaluation_helpers.go). Verbs are the request verbs of the API server
(staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go): an apply is a
``patch``, and creates the object only with ``create`` as well
(staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .store import ApiError

Grant = tuple[str, str, str]  # (API group, resource[/subresource], verb)


@dataclass
class Rules:
    cluster: list[Mapping[str, Any]] = field(default_factory=list)
    namespaced: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    used: set[Grant] = field(default_factory=set)

    @classmethod
    def from_documents(cls, documents: Iterable[Mapping[str, Any]]) -> Rules:
        """ClusterRoles apply everywhere, Roles in their namespace (bindings assumed)."""
        rules = cls()
        for doc in documents:
            if doc.get("kind") == "ClusterRole":
                rules.cluster.extend(doc.get("rules") or [])
            elif doc.get("kind") == "Role":
                namespace = doc["metadata"]["namespace"]
                rules.namespaced.setdefault(namespace, []).extend(doc.get("rules") or [])
        return rules

    def granted(self) -> set[Grant]:
        """Every (group, resource, verb) the rules name."""
        out = set()
        for rule in [*self.cluster, *(r for rs in self.namespaced.values() for r in rs)]:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        out.add((group, resource, verb))
        return out

    def allows(
        self, group: str, resource: str, verb: str, namespace: str | None, name: str
    ) -> bool:
        candidates = list(self.cluster)
        if namespace:
            candidates += self.namespaced.get(namespace, [])
        for rule in candidates:
            names = rule.get("resourceNames") or []
            if (
                group in (rule.get("apiGroups") or [])
                and resource in (rule.get("resources") or [])
                and verb in (rule.get("verbs") or [])
                and (not names or name in names)
            ):
                self.used.add((group, resource, verb))
                return True
        return False

    def check(
        self, group: str, resource: str, verb: str, namespace: str | None, name: str, user: str
    ) -> None:
        if self.allows(group, resource, verb, namespace, name):
            return
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        subject = f'{resource} "{name}"' if name else resource
        raise ApiError(
            403,
            "Forbidden",
            f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API '
            f'group "{group}"{where}',
        )
