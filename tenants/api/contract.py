"""The API keeps the contract /api/schema/ publishes.

Every API view checks a request against its operation in the published schema once the
caller is authenticated and allowed (``KeepsContract``): query parameters (type, enum,
format, pattern, bounds; a single parameter given once) and the JSON body (the request
schema, unknown fields included). What the schema refuses is a 400 naming each field.

A request the schema accepts can still be refused by what only the server knows: it
names an object that does not exist or that the caller may not see (404), it conflicts
with the current state such as a name already taken (409), or it breaks a rule between
its fields (422). ``refusal_status`` says which; the schema declares all three.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import EmailValidator
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext
from jsonschema import Draft4Validator, FormatChecker
from jsonschema.exceptions import ValidationError as SchemaError
from jsonschema.exceptions import best_match
from rest_framework import exceptions, serializers, status
from rest_framework.request import Empty, Request

from tenants.api.serializers import unknown_field_message

# DRF error codes for a value that names nothing the caller may see, or that another row
# already holds; every other refusal of a schema-valid request is a rule between fields
MISSING_CODES = frozenset({"does_not_exist", "not_found", "missing"})
CONFLICT_CODES = frozenset({"unique", "conflict"})
NUL_FREE = "^[^\\u0000]*$"  # free text in the schema: PostgreSQL stores no NUL
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
INTEGER = re.compile(r"^-?\d{1,4000}$")  # int() reads at most 4,300 digits
NUMBER = re.compile(r"^-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")


@dataclass(frozen=True, eq=False)  # one per operation (cached): hashed by identity
class Operation:
    """One operation of the published schema, as the check reads it."""

    query: Mapping[str, Mapping[str, Any]]  # name -> the parameter (schema, required)
    body: Mapping[str, Any] | None  # the JSON request body's schema
    body_required: bool


_PUBLISHING = threading.Lock()


@functools.cache
def _published() -> tuple[list[tuple[re.Pattern[str], str, Mapping[str, Any]]], dict[str, Any]]:
    """The schema's paths as patterns, fewest placeholders first, and its components as
    JSON Schema definitions: as /api/schema/ shows it to a platform admin, who sees every
    operation's body. Built once per process (``warm_up`` at start, else at first use)."""
    with _PUBLISHING:
        return _publish()


def _publish() -> tuple[list[tuple[re.Pattern[str], str, Mapping[str, Any]]], dict[str, Any]]:
    from django.contrib.auth import get_user_model
    from django.test import RequestFactory
    from drf_spectacular.generators import SchemaGenerator

    asking = Request(RequestFactory().get("/api/schema/"))
    asking.auth = None
    asking.user = get_user_model()(is_staff=True, is_superuser=True, is_active=True)
    schema = SchemaGenerator().get_schema(request=asking, public=True)
    paths = []
    for path, item in schema.get("paths", {}).items():
        pattern = re.compile("^" + re.sub(r"\\{\w+\\}", "[^/]+", re.escape(path)) + "$")
        paths.append((pattern, path, item))
    paths.sort(key=lambda entry: entry[1].count("{"))
    definitions = {
        k: _nullable(v) for k, v in schema.get("components", {}).get("schemas", {}).items()
    }
    return paths, definitions


def warm_up() -> None:
    """Build the published schema now (a web process's start), not at its first request."""
    _published()


def operation_of(path: str, method: str) -> Operation | None:
    """The published operation a request to ``path`` with ``method`` is, if any (one
    per route template and method, however many object ids the requests name)."""
    paths, _ = _published()
    for pattern, template, _ in paths:
        if pattern.match(path):
            return _operation(template, method.lower())
    return None


@functools.cache
def _operation(template: str, method: str) -> Operation | None:
    paths, definitions = _published()
    item = next(item for _, path, item in paths if path == template)
    found = item.get(method)
    if found is None:
        return None
    query = {p["name"]: p for p in found.get("parameters", []) if p.get("in") == "query"}
    content = (found.get("requestBody") or {}).get("content", {})
    body = content.get("application/json", {}).get("schema")
    # every body shares the one set of definitions (references resolve through them)
    resolved = {**_nullable(body), "definitions": definitions} if body is not None else None
    required = bool((found.get("requestBody") or {}).get("required"))
    return Operation(query=query, body=resolved, body_required=required)


def _nullable(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_nullable(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {
        key: _nullable(value)
        for key, value in schema.items()
        if key not in {"nullable", "readOnly", "writeOnly", "example", "discriminator"}
    }
    if "$ref" in converted:
        converted["$ref"] = converted["$ref"].replace("#/components/schemas/", "#/definitions/")
    if schema.get("nullable"):
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


FORMATS = FormatChecker(formats=())


@FORMATS.checks("date", raises=ValueError)
def _is_date(value: object) -> bool:
    return not isinstance(value, str) or _parsed(parse_date, value) is not None


@FORMATS.checks("date-time", raises=ValueError)
def _is_datetime(value: object) -> bool:
    return not isinstance(value, str) or _parsed(parse_datetime, value) is not None


@FORMATS.checks("uri", raises=ValueError)
def _is_uri(value: object) -> bool:
    """An absolute URI (RFC 3986: a scheme and an authority). Django's URLField asks more
    of the host (a known kind of domain), which is then a 422, not a malformed request."""
    if not isinstance(value, str):
        return True
    parts = urlsplit(value)
    return bool(parts.scheme and parts.netloc) and not any(c.isspace() for c in value)


@FORMATS.checks("email", raises=DjangoValidationError)
def _is_email(value: object) -> bool:
    if isinstance(value, str):
        EmailValidator()(value)
    return True


@FORMATS.checks("uuid", raises=ValueError)
def _is_uuid(value: object) -> bool:
    return not isinstance(value, str) or bool(UUID(value))


def _parsed(parse: Any, value: str) -> date | datetime | None:
    result: date | datetime | None = parse(value)
    return result


class KeepsContract:
    """Mixin for every API view: after authentication, permissions and rate limits, the
    request is checked against its published operation (tests/security/test_contract.py
    checks every API view has it)."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        self.refuse_outright(request)
        check_request(request, self)

    def refuse_outright(self, request: Request) -> None:
        """Raise here what the view answers whatever the request holds (a frozen row)."""

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        """A read whose query the schema refuses, and that the view answered anyway, is
        a 400 naming the parameters (the view's own refusal, when it has one, says more)."""
        errors = getattr(request, "_contract_errors", None)
        if errors and 200 <= response.status_code < 300:
            try:
                raise exceptions.ValidationError(errors)
            except exceptions.ValidationError as refused:
                response = self.handle_exception(refused)  # type: ignore[attr-defined]
        return super().finalize_response(request, response, *args, **kwargs)  # type: ignore[misc]


def check_request(request: Request, view: Any = None) -> None:
    """Raise a 400 naming each query parameter ``request`` gives that its operation
    refuses. A read (GET) runs anyway, so that its own refusal, which says more, is the
    answer (else ``finalize_response`` refuses it). The body is checked when the view
    reads it (``check_body``, from the JSON parser): after the view has found the object
    it acts on, so a caller who may not see that object gets 404 whatever the body."""
    operation = operation_of(request.path_info, request.method or "GET")
    if operation is None:
        return
    errors = dict(_query_errors(request, operation))
    if errors and request.method == "GET":
        request._contract_errors = errors  # type: ignore[attr-defined]
        return
    if errors:
        raise exceptions.ValidationError(errors)
    request._contract_query_kept = True  # type: ignore[attr-defined]
    if getattr(request, "_full_data", Empty) is not Empty and operation.body is not None:
        # already parsed (a session's CSRF check reads the body): check it now
        check_body(request.data, request, view)
        return
    if _sent_a_body(request) and not (operation.body is None and _empty_json(request)):
        return  # kept once check_body has read it (none taken: the view's NoInput refuses it)
    if operation.body is None or not operation.body_required:
        request._contract_kept = True  # type: ignore[attr-defined]


def check_body(data: Any, request: Any, view: Any) -> None:
    """Raise a 400 naming each field of the parsed body ``data`` its operation refuses,
    in the view's serializer's words where it has them."""
    if request is None or not getattr(request, "_contract_query_kept", False):
        return
    operation = operation_of(request.path_info, request.method or "GET")
    if operation is None or operation.body is None:
        return
    errors = dict(_body_errors(data, operation))
    if errors:
        _raise_serializer_errors(data, request, view)
        raise exceptions.ValidationError(errors)
    request._contract_kept = True


def _empty_json(request: Request) -> bool:
    """Whether the body is an empty JSON object (what an action without one may be sent)."""
    if not str(request.META.get("CONTENT_TYPE", "")).startswith("application/json"):
        return False
    return request.data == {}


def _sent_a_body(request: Request) -> bool:
    return request.method in BODY_METHODS and request.META.get("CONTENT_LENGTH") not in (
        None,
        "",
        "0",
    )


def kept_contract(request: Any) -> bool:
    """Whether ``request`` passed its schema check (a later refusal is about meaning)."""
    return bool(getattr(request, "_contract_kept", False))


def refusal_status(codes: Any) -> int:
    """The status of a refused request that matched its schema, by DRF's error codes."""
    found = set(_codes(codes))
    if found and found <= MISSING_CODES:
        return status.HTTP_404_NOT_FOUND
    if found & CONFLICT_CODES:
        return status.HTTP_409_CONFLICT
    return status.HTTP_422_UNPROCESSABLE_ENTITY


def _codes(codes: Any) -> Iterator[str]:
    if isinstance(codes, Mapping):
        for value in codes.values():
            yield from _codes(value)
    elif isinstance(codes, list | tuple):
        for value in codes:
            yield from _codes(value)
    elif codes is not None:
        yield str(codes)


def _raise_serializer_errors(data: Any, request: Any, view: Any) -> None:
    """Raise the view's serializer's own 400 for a body the schema refuses, if it has one."""
    get_serializer = getattr(view, "get_serializer", None)
    # the view's own serializer is the body's only for its model's writes, not its actions
    standard = getattr(view, "action", None) in {"create", "update", "partial_update"}
    if get_serializer is None or not standard or not isinstance(data, Mapping):
        return
    try:
        serializer = get_serializer(data=data, partial=request.method == "PATCH")
    except Exception:  # a view whose serializer needs more than the body: the schema speaks
        return
    if not serializer.is_valid():
        raise exceptions.ValidationError(serializer.errors)


def _query_errors(request: Request, operation: Operation) -> Iterator[tuple[str, list[str]]]:
    given = request.query_params
    for name, parameter in operation.query.items():
        schema = parameter.get("schema", {})
        values = given.getlist(name)
        if not values:
            if parameter.get("required"):
                yield name, [_drf("required")]
            continue
        if schema.get("type") != "array" and len(values) > 1:
            yield name, [gettext("Give this parameter once.")]
            continue
        if schema.get("type") == "array":
            items = schema.get("items", {})
            problems = [message for value in values for message in _value_errors(value, items)]
        else:
            problems = list(_value_errors(values[0], schema))
        if problems:
            yield name, problems[:1]


def _value_errors(text: str, schema: Mapping[str, Any]) -> Iterator[str]:
    kind = schema.get("type", "string")
    value: Any = text
    if kind == "integer":
        if not INTEGER.match(text):
            yield _drf("type:integer")
            return
        value = int(text)
    elif kind == "number":
        if not NUMBER.match(text):
            yield _drf("type:number")
            return
        value = float(text)
    elif kind == "boolean":
        if text not in {"true", "false"}:
            yield gettext("Give true or false.")
            return
        value = text == "true"
    for error in _validator(json.dumps(schema, sort_keys=True)).iter_errors(value):
        yield _message(error)
        return


@functools.lru_cache(maxsize=1024)
def _validator(schema: str) -> Draft4Validator:
    """A validator per distinct schema (given as its JSON text), built once."""
    return Draft4Validator(json.loads(schema), format_checker=FORMATS)


@functools.lru_cache(maxsize=512)
def _body_validator(operation: Operation) -> Draft4Validator:
    return Draft4Validator(operation.body, format_checker=FORMATS)


def _body_errors(data: Any, operation: Operation) -> Iterator[tuple[str, list[str]]]:
    if operation.body is None:
        return
    found: dict[str, Any] = {}
    validator = _body_validator(operation)
    for error in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.path]):
        for place, message in _located(error):
            _put(found, place, message)
    yield from found.items()


def _put(found: dict[str, Any], place: list[str], message: str) -> None:
    """File ``message`` under ``place`` as DRF nests errors: by field, then by index."""
    here = found
    for part in place[:-1]:
        inner = here.setdefault(part, {})
        if not isinstance(inner, dict):  # a message already stands for the whole value
            return
        here = inner
    slot = here.setdefault(place[-1], [])
    if isinstance(slot, list):
        slot.append(message)


def _located(error: SchemaError) -> Iterable[tuple[list[str], str]]:
    """Where in the body ``error`` is (field names and indexes), and what to fix there."""
    place = [str(part) for part in error.path]
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        known = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(known), key=str)
        return [([*place, str(name)], unknown_field_message(str(name), known)) for name in unknown]
    if error.validator == "required" and isinstance(error.validator_value, list):
        missing = [name for name in error.validator_value if name not in (error.instance or {})]
        return [([*place, name], _drf("required")) for name in missing]
    return [(place or ["non_field_errors"], _message(error))]


def _message(error: SchemaError) -> str:
    """What the value breaks, worded as DRF words the same refusal (and translated)."""
    if error.validator in {"anyOf", "oneOf"} and error.context:
        real = [e for e in error.context if e.validator != "type" or e.validator_value != "null"]
        return _message(best_match(real) if real else best_match(error.context))
    rule, limit, value = error.validator, error.validator_value, error.instance
    if rule == "type":
        if value is None:
            return _drf("null")
        wanted = limit if isinstance(limit, str) else next(iter(limit), "string")
        text = _drf(f"type:{wanted}" if f"type:{wanted}" in _SOURCES else "type:string")
        return text.format(input_type=type(value).__name__, input=value)
    if rule == "enum":
        return _drf("enum").format(input=value)
    if rule == "format":
        return _drf(f"format:{limit}" if f"format:{limit}" in _SOURCES else "pattern")
    if rule == "pattern":
        if error.schema.get("format") == "decimal":
            return _drf("type:number")
        if limit == NUL_FREE:
            return gettext("Text may not contain the NUL character (\\u0000).")
        return _drf("pattern")
    if rule == "minLength" and limit == 1:
        return _drf("blank")
    if rule in _SOURCES:
        return _drf(rule).format(limit=limit)
    return gettext("This value does not match the API schema (%(rule)s).") % {"rule": rule}


_SOURCES: dict[str, tuple[Any, str, str]] = {
    "null": (serializers.Field, "null", ""),
    "required": (serializers.Field, "required", ""),
    "blank": (serializers.CharField, "blank", ""),
    "type:string": (serializers.CharField, "invalid", ""),
    "type:integer": (serializers.IntegerField, "invalid", ""),
    "type:number": (serializers.DecimalField, "invalid", ""),
    "type:boolean": (serializers.BooleanField, "invalid", ""),
    "type:object": (serializers.DictField, "not_a_dict", ""),
    "type:array": (serializers.ListField, "not_a_list", ""),
    "enum": (serializers.ChoiceField, "invalid_choice", ""),
    "pattern": (serializers.RegexField, "invalid", ""),
    "format:date": (serializers.DateField, "invalid", ""),
    "format:date-time": (serializers.DateTimeField, "invalid", ""),
    "format:uuid": (serializers.UUIDField, "invalid", ""),
    "format:uri": (serializers.URLField, "invalid", ""),
    "format:email": (serializers.EmailField, "invalid", ""),
    "minimum": (serializers.IntegerField, "min_value", "min_value"),
    "maximum": (serializers.IntegerField, "max_value", "max_value"),
    "minLength": (serializers.CharField, "min_length", "min_length"),
    "maxLength": (serializers.CharField, "max_length", "max_length"),
    "minItems": (serializers.ListField, "min_length", "min_length"),
    "maxItems": (serializers.ListField, "max_length", "max_length"),
    "maxProperties": (serializers.ListField, "max_length", "max_length"),
}


def _drf(key: str) -> str:
    """DRF's own wording of a refusal (translated with DRF's catalogue)."""
    field, name, rename = _SOURCES[key]
    text = str(field.default_error_messages[name])
    return text.replace("{" + rename + "}", "{limit}") if rename else text
