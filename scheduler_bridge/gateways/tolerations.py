"""A flavour's tolerations: what an admin may give the pods admitted to it.

As with a Kueue ResourceFlavor, the tolerations injected into admitted pods are an
admin's choice, not every taint the flavour's nodes happen to carry: a node that is
cordoned, unreachable or under pressure is tainted by Kubernetes itself, and a pod that
tolerated those taints would be placed on a cordoned node or never evicted from a dead
one. Inventory records the taints it sees (``scheduling_taints``) so the admin can see
which ones the flavour's tolerations leave out (``untolerated``).

Rules for a toleration are Kubernetes' own (``validateTolerations`` in
``pkg/apis/core/validation/validation.go``); the node-condition taints are the
well-known ones of ``staging/src/k8s.io/api/core/v1/well_known_taints.go``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from i18n.wording import Param, gettext_noop, wording

from .base import Taint
from .placement import tolerates

# Taints the node lifecycle controller and the kubelet set for a node's condition.
NODE_CONDITION_TAINTS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/network-unavailable",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/out-of-service",
        "node.cloudprovider.kubernetes.io/uninitialized",
        "node.cloudprovider.kubernetes.io/shutdown",
    }
)
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")
_FIELDS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def _label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and bool(_NAME.match(value)))


def toleration_problems(tolerations: Any) -> list[str]:
    """Every reason ``tolerations`` cannot be a flavour's tolerations, each naming the
    entry and how to fix it; empty when they are fine. Each is a Wording (English text
    that the portal and the API say again in the reader's language)."""
    if not isinstance(tolerations, list):
        return [
            wording(
                gettext_noop("must be a list of tolerations, e.g. %(example)s"),
                example='[{"key": "nvidia.com/gpu", ...}]',
            )
        ]
    problems: list[str] = []
    for index, entry in enumerate(tolerations):
        where = wording(gettext_noop("toleration %(index)s"), index=index)

        def problem(template: str, **params: Param) -> None:
            problems.append(
                wording(
                    gettext_noop("%(where)s: %(problem)s"),
                    where=where,  # noqa: B023 - called in this iteration only
                    problem=wording(template, **params),
                )
            )

        if not isinstance(entry, Mapping):
            problem(gettext_noop("must be an object with key, operator, value, effect"))
            continue
        unknown = sorted(set(entry) - _FIELDS)
        if unknown:
            problem(
                gettext_noop(
                    "unknown field(s) %(fields)s; allowed: key, operator, value, effect, "
                    "tolerationSeconds"
                ),
                fields=", ".join(unknown),
            )
        key = entry.get("key") or ""
        operator = entry.get("operator") or "Equal"
        value = entry.get("value") or ""
        effect = entry.get("effect") or ""
        if not isinstance(key, str) or not isinstance(value, str):
            problem(gettext_noop("key and value must be strings"))
            continue
        if operator not in ("Equal", "Exists"):
            problem(
                gettext_noop('operator must be "Equal" or "Exists", not %(operator)s'),
                operator=repr(operator),
            )
        if not key:
            problem(
                gettext_noop(
                    "a toleration without a key would tolerate every taint, including those "
                    "of cordoned and unreachable nodes; name the taint's key"
                )
            )
        elif not _qualified_name(key):
            problem(gettext_noop("%(key)s is not a valid taint key"), key=repr(key))
        elif key in NODE_CONDITION_TAINTS:
            problem(
                gettext_noop(
                    "%(key)s is a node-condition taint Kubernetes sets itself; tolerating it "
                    "would place pods on cordoned, unready or unreachable nodes"
                ),
                key=key,
            )
        if operator == "Exists" and value:
            problem(gettext_noop('value must be empty when operator is "Exists"'))
        if operator == "Equal" and not _label_value(value):
            problem(gettext_noop("%(value)s is not a valid taint value"), value=repr(value))
        if effect and effect not in EFFECTS:
            problem(
                gettext_noop("effect must be one of %(effects)s or empty"),
                effects=", ".join(EFFECTS),
            )
        seconds = entry.get("tolerationSeconds")
        if seconds is not None:
            if effect != "NoExecute":
                problem(gettext_noop('tolerationSeconds needs effect "NoExecute"'))
            if isinstance(seconds, bool) or not isinstance(seconds, int):
                problem(gettext_noop("tolerationSeconds must be a whole number of seconds"))
    return problems


def normalised(tolerations: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tolerations with an explicit operator and no empty fields, sorted, duplicates
    dropped: what is stored and injected."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for entry in tolerations:
        clean: dict[str, Any] = {"key": entry["key"], "operator": entry.get("operator") or "Equal"}
        if clean["operator"] == "Equal":
            clean["value"] = entry.get("value") or ""
        if entry.get("effect"):
            clean["effect"] = entry["effect"]
        if entry.get("tolerationSeconds") is not None:
            clean["tolerationSeconds"] = entry["tolerationSeconds"]
        seen[tuple(sorted(clean.items()))] = clean
    return [seen[k] for k in sorted(seen)]


def scheduling_taints(taints: Iterable[Taint]) -> list[dict[str, str]]:
    """The taints that keep pods off a node (NoSchedule, NoExecute), node-condition
    taints left out (they come and go with the node's health), as taint objects."""
    found = {
        (t.key, t.value, t.effect): {"key": t.key, "value": t.value, "effect": t.effect}
        for t in taints
        if t.effect in _SCHEDULING_EFFECTS and t.key not in NODE_CONDITION_TAINTS
    }
    return [found[k] for k in sorted(found)]


def untolerated(
    taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The taints that ``tolerations`` leave out: pods admitted to the flavour cannot
    run on nodes carrying them."""
    return [dict(t) for t in taints if not tolerates(tolerations, t)]
