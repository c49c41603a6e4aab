"""Additions to the published OpenAPI schema (drf-spectacular post-processing hooks)."""

from __future__ import annotations

from typing import Any

IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "Send a POST again with the same key (e.g. a UUID) after a timeout or a 503, and "
        "get the first answer instead of a second write. Kept 24 hours per credentials; "
        "reusing a key for another request is refused with 422."
    ),
    "schema": {"type": "string", "maxLength": 255},
}


def document_idempotency_keys(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """Every POST operation takes the optional Idempotency-Key header."""
    for path_item in result.get("paths", {}).values():
        operation = path_item.get("post")
        if operation is None:
            continue
        parameters = operation.setdefault("parameters", [])
        if not any(p.get("name") == IDEMPOTENCY_KEY["name"] for p in parameters):
            parameters.append(dict(IDEMPOTENCY_KEY))
    return result
