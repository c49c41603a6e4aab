"""Device selectors: Kubernetes' DRA CEL expressions, evaluated on published devices.

A DeviceClass and a request each carry CEL selectors over one ``device`` with the fields
Kubernetes gives them (``driver``, ``attributes``, ``capacity``,
``allowMultipleAllocations``), plus the quantity and semantic-version libraries selectors
compare capacities and versions with (``quantity("40Gi")``, ``.compareTo``,
``.isGreaterThan``, ``semver("12.0.0")``) and the string extensions (``lowerAscii``,
``upperAscii``, ``trim``). Source of the environment: the Kubernetes documentation of
Dynamic Resource Allocation (``resource.k8s.io/v1`` DeviceSelector) and of CEL in
Kubernetes (the quantity and semver libraries).

Evaluation uses cel-python. As in the scheduler, ``false && <error>`` is false, so
selectors that test the driver first skip other drivers' devices; an error that decides
the result (an attribute a device lacks) means the device does not match, and the error
is kept for the explanation of a request no device meets.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import celpy
from celpy import celtypes

from scheduler_bridge.quantity import InvalidQuantity, parse_quantity

from .objects import Device, DraError, Semver


class SelectorError(DraError):
    """A selector that is not valid CEL, or uses what the DRA environment lacks."""


class Quantity(celtypes.MessageType):
    """A Kubernetes quantity in CEL: compared with compareTo, isGreaterThan, isLessThan."""

    def __init__(self, value: Decimal) -> None:
        super().__init__()
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value


class Version(celtypes.MessageType):
    """A semantic version in CEL (a ``version`` attribute or ``semver("1.2.3")``)."""

    def __init__(self, version: Semver) -> None:
        super().__init__()
        self.version = version

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self.version.key == other.version.key


def _quantity(text: Any) -> Quantity:
    try:
        return Quantity(parse_quantity(str(text)))
    except InvalidQuantity as error:
        raise ValueError(str(error)) from error


def _semver(text: Any) -> Version:
    return Version(Semver.parse(str(text)))


def _order(left: Any, right: Any) -> int:
    if isinstance(left, Quantity) and isinstance(right, Quantity):
        a, b = left.value, right.value
    elif isinstance(left, Version) and isinstance(right, Version):
        a, b = left.version.key, right.version.key  # type: ignore[assignment]
    else:
        raise TypeError(f"cannot compare {type(left).__name__} with {type(right).__name__}")
    return (a > b) - (a < b)


def _is_quantity(text: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(text))
    except InvalidQuantity:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _is_semver(text: Any) -> celtypes.BoolType:
    try:
        Semver.parse(str(text))
    except DraError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": lambda a, b: celtypes.IntType(_order(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_order(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_order(a, b) < 0),
    "asInteger": lambda q: celtypes.IntType(int(q.value)),
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(q.value)),
    "major": lambda v: celtypes.IntType(v.version.key[0]),
    "minor": lambda v: celtypes.IntType(v.version.key[1]),
    "patch": lambda v: celtypes.IntType(v.version.key[2]),
    "lowerAscii": lambda s: celtypes.StringType(str(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(str(s).upper()),
    "trim": lambda s: celtypes.StringType(str(s).strip()),
}

_ENVIRONMENT = celpy.Environment()


@functools.lru_cache(maxsize=512)
def compiled(expression: str) -> Any:
    """The expression as a runnable program (each text compiled once per process)."""
    try:
        ast = _ENVIRONMENT.compile(expression)
    except celpy.CELParseError as error:
        raise SelectorError(f"selector {expression!r} is not valid CEL: {error}") from error
    return _ENVIRONMENT.program(ast, functions=FUNCTIONS)


def _cel_value(value: Any) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, Semver):
        return Version(value)
    if isinstance(value, Decimal):
        return Quantity(value)
    return celtypes.StringType(str(value))


def _device_activation(device: Device) -> dict[str, Any]:
    attributes = celtypes.MapType(
        {
            celtypes.StringType(domain): celtypes.MapType(
                {celtypes.StringType(k): _cel_value(v) for k, v in values.items()}
            )
            for domain, values in device.attributes.items()
        }
    )
    capacity = celtypes.MapType(
        {
            celtypes.StringType(domain): celtypes.MapType(
                {celtypes.StringType(k): Quantity(v) for k, v in values.items()}
            )
            for domain, values in device.capacity.items()
        }
    )
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("attributes"): _DefaultMap(attributes),
                celtypes.StringType("capacity"): _DefaultMap(capacity),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    device.multiple_allocations
                ),
            }
        )
    }


class _DefaultMap(celtypes.MapType):
    """``device.attributes[domain]`` of a domain the device has nothing in is an empty
    map, as in Kubernetes (then a missing name is an error, which does not match)."""

    def __getitem__(self, key: Any) -> Any:
        if key in self:
            return super().__getitem__(key)
        return celtypes.MapType({})


def evaluate(expression: str, device: Device) -> bool | str:
    """True or False, or the error text when evaluation failed on this device."""
    try:
        result = compiled(expression).evaluate(_device_activation(device))
    except celpy.CELEvalError as error:
        return str(error.args[0]) if error.args else str(error)
    if isinstance(result, celtypes.BoolType | bool):
        return bool(result)
    return f"selector {expression!r} gave {result!r}, not true or false"


def matches(expressions: Sequence[str], device: Device) -> bool:
    """Whether ``device`` meets every selector (an error is no match)."""
    return all(evaluate(expression, device) is True for expression in expressions)


def check(expressions: Sequence[str]) -> None:
    """SelectorError for the first selector that is not valid CEL."""
    for expression in expressions:
        compiled(expression)
