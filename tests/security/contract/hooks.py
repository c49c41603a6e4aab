"""schemathesis hooks for the contract run: every request carries a fresh Idempotency-Key,
so no answer is a replay of an earlier one (which would hide what the server does)."""

from __future__ import annotations

import uuid
from typing import Any

import schemathesis


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: Any) -> None:
    case.headers = {**(case.headers or {}), "Idempotency-Key": str(uuid.uuid4())}
