"""What a namespace binding may name, and who hears about a change to one.

The tenants app knows the namespaces no tenant may own (Kubernetes' own, the GPU
operator's, Tidegate's). Higher apps register further checks (does the cluster exist,
is this its MIG ConfigMap namespace) and listeners (sync the cluster's ResourceQuotas)
in `AppConfig.ready`, so that this lower app never imports them
(docs/architecture.md#registries).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.utils.translation import gettext

# Namespaces Kubernetes itself uses (kube-system for control-plane add-ons, kube-public
# readable by all, kube-node-lease for node heartbeats, and every other "kube-" name,
# which Kubernetes keeps for itself), and "default", where anything created without a
# namespace lands: a quota there could stop the cluster's own pods, and binding it would
# hand a tenant everyone's unnamespaced work.
KUBERNETES_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "default")
KUBERNETES_PREFIX = "kube-"

# A check returns {field: message} for what is wrong with binding (cluster, namespace).
BindingCheck = Callable[[str, str], dict[str, str] | None]
# A listener hears the name of a cluster whose bindings changed (inside the transaction).
BindingListener = Callable[[str], None]

_checks: list[BindingCheck] = []
_listeners: list[BindingListener] = []


def reserved_namespaces() -> tuple[str, ...]:
    """Kubernetes' namespaces plus those configured (TIDEGATE["RESERVED_NAMESPACES"]):
    Tidegate's own and the GPU operator's by default."""
    configured = settings.TIDEGATE.get("RESERVED_NAMESPACES", ())
    return tuple(dict.fromkeys((*KUBERNETES_NAMESPACES, *configured)))


def is_reserved(namespace: str) -> bool:
    return namespace in reserved_namespaces() or namespace.startswith(KUBERNETES_PREFIX)


def _reserved(cluster_name: str, namespace: str) -> dict[str, str] | None:
    if is_reserved(namespace):
        return {
            "namespace": gettext(
                "%(namespace)s is a system namespace (Kubernetes, the GPU operator or "
                "Tidegate itself run there, and every kube-* name and default belong to "
                "Kubernetes) and cannot be bound to a tenant; bind the namespace the "
                "team's workloads run in."
            )
            % {"namespace": namespace}
        }
    return None


def register_binding_check(check: BindingCheck) -> None:
    if check not in _checks:
        _checks.append(check)


def register_binding_listener(listener: BindingListener) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


register_binding_check(_reserved)


def binding_problems(cluster_name: str, namespace: str) -> dict[str, list[str]]:
    """Field errors of binding ``namespace`` on ``cluster_name``; empty when allowed."""
    found: dict[str, list[str]] = {}
    for check in _checks:
        for name, message in (check(cluster_name, namespace) or {}).items():
            found.setdefault(name, []).append(message)
    return found


def bindings_changed(cluster_name: str) -> None:
    for listener in _listeners:
        listener(cluster_name)
