"""What /api/schema/ says beyond what drf-spectacular infers from the views: the error
answers every operation may give, as problem documents (tenants.api.problems), the
Idempotency-Key header every POST takes (tenants.idempotency), and the limits the
server keeps that drf-spectacular leaves out (a request body takes no unknown field,
free text holds no NUL character, a decimal holds a digit, a reference names something).
tenants.api.contract checks every request against this schema."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from tenants.api import problems
from tenants.api.contract import NUL_FREE

PROBLEM_COMPONENT = "Problem"

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An error (RFC 9457). Field errors appear under `errors`, one list of "
    "messages per field, and again at the top level.",
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {"type": "object", "additionalProperties": True},
    },
    "required": ["type", "title", "status", "detail"],
    "additionalProperties": True,
}

# status -> description; every operation may answer these
EVERY_OPERATION = {
    "400": "Invalid input: a field error or a bad query parameter.",
    "401": "Not authenticated.",
    "403": "The caller's role does not allow this.",
    "404": "Not found, or not visible to the caller (also a page beyond the last), or "
    "the request names an object that does not exist or that the caller may not see "
    "(the field is named under `errors`).",
    "422": "The request matches this schema but cannot be done as it is: a rule between "
    "its fields or against the current state (e.g. a window that ends before it starts, "
    "a guarantee above what the parent has left), or a NUL character where the schema "
    "cannot refuse one (an object's keys); the field is named under `errors`.",
    "429": "Too many requests: this user's rate, or, for requests without valid "
    "credentials, this address's (answered before the credentials are read, so guessing "
    "a token is slowed down); Retry-After says when to try again.",
    "503": "The database or the task queue is down; retry after Retry-After seconds.",
}
# and operations that change something
WRITES = {
    "409": "Conflicts with the current state (e.g. still in use, or a name another row "
    "already has), or a request with the same Idempotency-Key is still being answered.",
    "413": "The request body is larger than Tidegate accepts.",
}
WRITE_METHODS = frozenset({"post", "put", "patch", "delete"})
IDEMPOTENT_422 = (
    "The request matches this schema but cannot be done as it is: a rule between its "
    "fields, named under `errors`; or its Idempotency-Key was used for another request."
)


def add_error_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: document the problem documents."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas[PROBLEM_COMPONENT] = PROBLEM_SCHEMA
    reference = {"$ref": f"#/components/schemas/{PROBLEM_COMPONENT}"}
    for path, item in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            answers = dict(EVERY_OPERATION)
            if method in WRITE_METHODS:
                answers |= WRITES
            if method == "post":
                answers["422"] = IDEMPOTENT_422
            responses = operation["responses"]
            for status, description in answers.items():
                responses.setdefault(
                    status,
                    {
                        "description": description,
                        "content": {problems.PROBLEM_JSON: {"schema": reference}},
                    },
                )
    return result


IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "Send a POST again with the same key (e.g. a UUID) after a timeout or a 503, and "
        "get the first answer instead of a second write. Kept 24 hours per credentials; "
        "reusing a key for another request is refused with 422."
    ),
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}


def document_idempotency_keys(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every POST takes the optional Idempotency-Key
    header, and may answer 422 when the key was used for another request."""
    reference = {"$ref": f"#/components/schemas/{PROBLEM_COMPONENT}"}
    for path_item in result.get("paths", {}).values():
        operation = path_item.get("post")
        if operation is None:
            continue
        parameters = operation.setdefault("parameters", [])
        if not any(p.get("name") == IDEMPOTENCY_KEY["name"] for p in parameters):
            parameters.append(dict(IDEMPOTENCY_KEY))
        operation.setdefault("responses", {}).setdefault(
            "422",
            {
                "description": "The Idempotency-Key was used for a different request.",
                "content": {problems.PROBLEM_JSON: {"schema": reference}},
            },
        )
    return result


def drop_developer_descriptions(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Component schemas are described from their serializers' docstrings, and a
    serializer without one inherits its base class's: text about Tidegate's own code
    (the input-checking mixin every serializer shares), not about the data. Such
    inherited descriptions are dropped; a serializer's own description stays."""
    import inspect

    from tenants.api.serializers import RejectUnknownFields

    inherited = {inspect.cleandoc(RejectUnknownFields.__doc__ or "")}
    for component in (result.get("components") or {}).get("schemas", {}).values():
        description = component.get("description")
        if description is not None and inspect.cleandoc(description) in inherited:
            del component["description"]
    return result


class ContractSchema(AutoSchema):
    """drf-spectacular's schema with the limits of Tidegate's input fields it leaves out:
    a list of nested inputs holds at most its ``max_length`` items; a reference by name
    or slug names something (not empty); a decimal holds at least one digit, and no
    sign where the field takes no negative value."""

    def _map_serializer_field(
        self, field: Any, direction: str, bypass_extensions: bool = False
    ) -> dict[str, Any]:
        mapped: dict[str, Any] = super()._map_serializer_field(field, direction, bypass_extensions)
        if direction != "request" or not isinstance(mapped, dict):
            return mapped
        if isinstance(field, serializers.ListSerializer) and mapped.get("type") == "array":
            limit = getattr(field, "max_length", None)
            if limit is not None:
                mapped["maxItems"] = limit
            if not getattr(field, "allow_empty", True):
                mapped.setdefault("minItems", 1)
        if isinstance(field, serializers.SlugRelatedField) and mapped.get("type") == "string":
            mapped.setdefault("minLength", 1)
        if isinstance(field, serializers.DecimalField) and mapped.get("format") == "decimal":
            mapped["pattern"] = decimal_pattern(field)
        return mapped


def decimal_pattern(field: serializers.DecimalField) -> str:
    """The text a DecimalField takes: digits, at most its whole and decimal places."""
    whole = field.max_whole_digits if field.max_whole_digits is not None else 30
    places = field.decimal_places if field.decimal_places is not None else 30
    floor = field.min_value
    sign = "" if floor is not None and Decimal(str(floor)) >= 0 else "-?"
    if places == 0:
        return rf"^{sign}\d{{1,{whole}}}$"
    number = rf"\d{{1,{whole}}}(?:\.\d{{0,{places}}})?|\.\d{{1,{places}}}"
    if whole == 0:
        number = rf"0?\.\d{{1,{places}}}|0"
    return f"^{sign}(?:{number})$"


def state_input_limits(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: request bodies refuse unknown fields
    (tenants.api.serializers.RejectUnknownFields), and free text in them and in query
    parameters holds no NUL character (the parsers refuse it)."""
    for name, component in (result.get("components") or {}).get("schemas", {}).items():
        if name.endswith("Request") and component.get("type") == "object":
            if "properties" in component:
                component.setdefault("additionalProperties", False)
            for field in component.get("properties", {}).values():
                _refuse_nul(field)
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query":
                    _refuse_nul(parameter.get("schema", {}))
    return result


def _refuse_nul(schema: dict[str, Any]) -> None:
    if schema.get("type") == "array":
        _refuse_nul(schema.get("items", {}))
    elif schema.get("type") == "string" and not {"pattern", "enum", "format"} & set(schema):
        schema["pattern"] = NUL_FREE
