"""Checking objects against the official Kubernetes schemas (kubernetes-validate)."""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

from .store import ApiError

# The newest Kubernetes version whose schemas the installed kubernetes-validate ships.
SCHEMA_VERSION = kubernetes_validate.latest_version()


@functools.lru_cache(maxsize=64)
def _strict_validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    """kubernetes-validate's strict schema of one kind, loaded once: its ``validate``
    reads and parses the schema files on every call (tens of milliseconds each)."""
    version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{SCHEMA_VERSION}-local-strict"
    schema = schema_contents(f"{folder}/{kind.lower()}-{version}.json", SCHEMA_VERSION)
    definitions = schema_contents(f"{folder}/_definitions.json", SCHEMA_VERSION)
    registry: Registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def validate_strict(obj: dict[str, Any]) -> None:
    """What ``kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)`` checks,
    raising the same ``kubernetes_validate.ValidationError``."""
    try:
        _strict_validator(obj["kind"], obj["apiVersion"]).validate(obj)
    except jsonschema.ValidationError as exc:
        raise kubernetes_validate.ValidationError(exc, SCHEMA_VERSION) from exc


def assert_valid_kubernetes(obj: dict[str, Any]) -> None:
    """Fail with the schema error (and the object's kind/name) unless ``obj`` is valid
    in strict mode (no unknown fields)."""
    name = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
    try:
        validate_strict(obj)
    except kubernetes_validate.ValidationError as exc:
        raise AssertionError(
            f"{name} is not a valid {SCHEMA_VERSION} object: {exc.message} "
            f"at {'/'.join(map(str, exc.absolute_path))}"
        ) from exc


def refuse_unknown_fields(resource: Any, obj: dict[str, Any]) -> None:
    """fieldValidation=Strict: a field the schema does not declare is 400 BadRequest
    (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go and patch.go, strict
    decoding). Without it the API server drops such fields (Warn); the fake keeps them."""
    typed = {**obj, "kind": resource.kind, "apiVersion": resource.group_version}
    # Whether a field is declared depends on the keys and the kinds of values only, so an
    # object shaped like one that passed passes too (the schema check costs a millisecond
    # or two, and a sync writes hundreds of quotas of one shape).
    shape = _shape(typed)
    if shape in _STRICT_PASSED:
        return
    try:
        validate_strict(typed)
        if len(_STRICT_PASSED) < 10_000:
            _STRICT_PASSED.add(shape)
    except kubernetes_validate.ValidationError as exc:
        if exc.validator != "additionalProperties":
            return  # not a field-validation matter; the store's own checks answer it
        where = ".".join(str(p) for p in exc.absolute_path)
        raise ApiError(
            400, "BadRequest", f"strict decoding error: {exc.message} at {where or '.'}"
        ) from exc


_STRICT_PASSED: set[Any] = set()


def _shape(value: Any) -> Any:
    """The keys of ``value`` all the way down, with the types of its scalars."""
    if isinstance(value, dict):
        return tuple(sorted((k, _shape(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_shape(v) for v in value)
    return type(value).__name__
