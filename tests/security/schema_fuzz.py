"""Runs schemathesis over every operation of /api/schema/ inside the test process: the
Django WSGI application answers, on the test database, as a given user.

Every case of an operation is sent and checked; a failing case is recorded (the first
of each kind per operation) and generation moves on, so one run lists every broken
operation rather than stopping at the first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance]
SCHEMA_PATH = "/api/schema/"


@dataclass(frozen=True)
class Failure:
    operation: str
    message: str

    def __str__(self) -> str:
        return f"{self.operation}: {self.message}"


def load_schema(headers: dict[str, str]) -> Any:
    return schemathesis.openapi.from_wsgi(SCHEMA_PATH, WSGIHandler(), headers=headers)


def fuzz(
    headers: dict[str, str],
    *,
    examples_per_operation: int,
    skip: Callable[[str], bool] = lambda label: False,
) -> list[Failure]:
    """Send up to ``examples_per_operation`` generated requests to every operation, as
    the caller ``headers`` authenticate; the failures, one per operation and kind."""
    schema = load_schema(headers)
    operations = [result.ok() for result in schema.get_all_operations()]
    operations = [operation for operation in operations if not skip(operation.label)]
    failures = list(_read_plainly(operations, headers))
    for operation in operations:
        failures.extend(_fuzz_operation(operation, headers, examples_per_operation))
    return failures


def _read_plainly(operations: list[Any], headers: dict[str, str]) -> Iterable[Failure]:
    """GET every collection without parameters, then the first row of each through its
    detail operation: generated filters mostly find nothing, these answers hold real rows."""
    first_rows: dict[str, dict[str, Any]] = {}
    reads = sorted(
        (operation for operation in operations if operation.method.upper() == "GET"),
        key=lambda operation: operation.path.count("{"),
    )
    for operation in reads:
        names = re.findall(r"{(\w+)}", operation.path)
        parameters: dict[str, Any] = {}
        if names:
            row = first_rows.get(operation.path[: operation.path.index("{")])
            if row is None or len(names) > 1:
                continue
            parameters = {names[0]: row.get(names[0], row.get("id"))}
        case = operation.Case(path_parameters=parameters, query={})
        response = case.call(headers=headers)
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except (AssertionError, FailureGroup) as error:
            yield Failure(operation.label, f"{_summary(error)} ({_request(case)})")
            continue
        is_json = "json" in " ".join(response.headers.get("content-type", []))
        body = response.json() if response.status_code == 200 and is_json else None
        rows = body.get("results") if isinstance(body, dict) else body
        if isinstance(rows, list) and rows and isinstance(rows[0], dict):
            first_rows[operation.path] = rows[0]


def _fuzz_operation(operation: Any, headers: dict[str, str], examples: int) -> Iterable[Failure]:
    found: dict[str, Failure] = {}

    @given(case=operation.as_strategy())
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        response = case.call(headers=headers)
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except (AssertionError, FailureGroup) as error:
            found.setdefault(
                _kind(error), Failure(operation.label, f"{_summary(error)} ({_request(case)})")
            )

    run()
    return found.values()


def _kind(error: BaseException) -> str:
    """What went wrong, without the data that differs between cases."""
    lines = [line.strip() for line in str(error).splitlines()]
    return " ".join(line for line in lines if line.startswith(("- ST", "Received:")))


def _summary(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " | ".join(lines[:8])


def _request(case: Any) -> str:
    return f"{case.method} {case.formatted_path} query={case.query!r} body={str(case.body)[:200]!r}"
