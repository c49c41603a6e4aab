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

from .errors import GatewayError, NamespaceMissing
from .quantity import is_quantity

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
        for key, value in ((obj.get("spec") or {}).get("hard") or {}).items():
            if not is_quantity(value) or str(value).lstrip().startswith("-"):
                problems.append(
                    f"spec.hard[{key}]: Invalid value: {value!r}: must be a non-negative quantity"
                )
    if kind == "ConfigMap":
        for key in obj.get("data") or {}:
            if len(key) > 253 or not _CONFIG_KEY.match(key):
                problems.append(f"data[{key}]: Invalid value: {key!r}: not a valid config key")
    if problems:
        raise GatewayError(f'{kind} "{name}" is invalid: ' + "; ".join(problems))
