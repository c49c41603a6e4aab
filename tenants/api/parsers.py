"""The API's JSON parser: bounded in size and nesting, and without NUL characters.

Python's json module recurses once per nested array or object, so a body nested
100,000 deep exhausts the interpreter's stack; PostgreSQL stores no NUL character in
text or jsonb. Both are refused here, before any view sees the data, as 400s naming
where they are; a body larger than DATA_UPLOAD_MAX_MEMORY_SIZE is a 413.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings
from django.utils.translation import gettext, gettext_lazy
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser

from tenants.api import contract

MAX_NESTING = 32
NUL = "\x00"

# a JSON string, escapes included; what is left once they are removed holds every bracket
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = gettext_lazy("The request body is too large.")
    default_code = "too_large"


def too_large_detail(limit: int) -> str:
    return gettext(
        "The request body is larger than the %(limit)s bytes Tidegate accepts; "
        "send less at once (e.g. split the change into several requests)."
    ) % {"limit": limit}


def nesting_exceeds(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether JSON ``text`` nests arrays and objects more than ``limit`` deep."""
    depth = 0
    for bracket in _BRACKET.finditer(_JSON_STRING.sub("", text)):
        if bracket.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def nul_location(data: Any) -> str | None:
    """Where parsed JSON ``data`` holds a NUL character, as a dotted path (``pod_sets.0.name``;
    the key itself when a key holds it), or None."""
    for path, value in _walk(data, ""):
        if isinstance(value, str) and NUL in value:
            return path or "non_field_errors"
    return None


def _walk(data: Any, path: str) -> Iterator[tuple[str, Any]]:
    stack: list[tuple[str, Any]] = [(path, data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, inner in value.items():
                inner_path = f"{where}.{key}" if where else str(key)
                yield inner_path, key
                stack.append((inner_path, inner))
        elif isinstance(value, list):
            stack.extend(
                (f"{where}.{index}" if where else str(index), inner)
                for index, inner in enumerate(value)
            )
        else:
            yield where, value


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, with the limits above."""

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise RequestTooLarge(too_large_detail(limit))
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as error:
            raise exceptions.ParseError(
                gettext("The body is not valid %(encoding)s text.") % {"encoding": encoding}
            ) from error
        if nesting_exceeds(text):
            raise exceptions.ParseError(
                gettext("The JSON body nests deeper than %(limit)s levels.")
                % {"limit": MAX_NESTING}
            )
        try:
            data = json.loads(text, parse_constant=_refuse_constant)
        except ValueError as error:
            raise exceptions.ParseError(
                gettext("The body is not valid JSON: %(error)s") % {"error": error}
            ) from error
        context = parser_context or {}
        # the schema first (a NUL in a declared string is a 400 there), then a NUL where
        # the schema cannot say it is refused (an object's keys, free-form values): 422
        contract.check_body(data, context.get("request"), context.get("view"))
        where = nul_location(data)
        if where is not None:
            raise exceptions.ValidationError({where: [nul_message()]})
        return data


def nul_message() -> str:
    return gettext("Text may not contain the NUL character (\\u0000).")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
