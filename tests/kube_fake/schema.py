"""Checking objects against the official Kubernetes schemas (kubernetes-validate)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

# The newest Kubernetes version whose schemas the installed kubernetes-validate ships.
SCHEMA_VERSION = kubernetes_validate.latest_version()


def assert_valid_kubernetes(obj: dict[str, Any]) -> None:
    """Fail with the schema error (and the object's kind/name) unless ``obj`` is valid
    in strict mode (no unknown fields)."""
    name = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
    try:
        kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise AssertionError(
            f"{name} is not a valid {SCHEMA_VERSION} object: {exc.message} "
            f"at {'/'.join(map(str, exc.absolute_path))}"
        ) from exc
