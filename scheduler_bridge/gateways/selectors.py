"""Kubernetes label selectors (``a=b,c!=d,e in (x,y),!f``) for the simulated cluster."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from .errors import GatewayError

_SET = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQUALITY = re.compile(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*(\S*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^=!\s(),]+)\s*$")

Requirement = Callable[[Mapping[str, str]], bool]


def _split(selector: str) -> list[str]:
    # Commas separate requirements except inside the parentheses of a set.
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def _requirement(text: str) -> Requirement:
    if match := _SET.match(text):
        key, op, raw = match.groups()
        values = {v.strip() for v in raw.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQUALITY.match(text):
        key, op, value = match.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS.match(text):
        negated, key = match.groups()
        return lambda labels: (key in labels) != bool(negated)
    raise GatewayError(f"invalid label selector requirement {text.strip()!r}")


def parse_label_selector(selector: str | None) -> list[Requirement]:
    """The requirements of ``selector``; raises GatewayError when it is malformed."""
    return [_requirement(part) for part in _split(selector or "")]


def matches_label_selector(selector: str | None, labels: Mapping[str, str]) -> bool:
    return all(requirement(labels) for requirement in parse_label_selector(selector))
