"""schemathesis hooks for the contract run: every request carries a fresh Idempotency-Key,
so no answer is a replay of an earlier one (which would hide what the server does).

The run's workers are threads, and hypothesis parses source with ``ast.parse`` to describe
its strategies. On the Python 3.11 releases this project runs, two threads building ASTs
at once can corrupt the interpreter's shared recursion count and fail with "AST
constructor recursion depth mismatch" (CPython issue gh-106905, fixed by pull request
113035 in later releases): a harness error, not an answer of the server. Loaded before
the workers start, this module lets one thread parse at a time."""

from __future__ import annotations

import ast
import threading
import uuid
from typing import Any

import schemathesis

_parse = ast.parse
_parsing = threading.Lock()


def _parse_one_at_a_time(*args: Any, **kwargs: Any) -> Any:
    with _parsing:
        return _parse(*args, **kwargs)


ast.parse = _parse_one_at_a_time  # type: ignore[assignment]


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: Any) -> None:
    case.headers = {**(case.headers or {}), "Idempotency-Key": str(uuid.uuid4())}
