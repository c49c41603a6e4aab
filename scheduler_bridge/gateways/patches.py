"""JSON merge patches (RFC 7386) for Kubernetes-shaped dicts.

Tidegate computes the object it wants, then sends only the difference as a merge patch,
so a write never clobbers fields somebody else owns. ``null`` in a patch deletes a key;
lists are replaced whole.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """The result of applying ``patch`` to ``target`` (neither is modified)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(copy.deepcopy(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def merge_diff(live: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The smallest merge patch that turns ``live`` into ``desired`` ({} when equal)."""
    patch: dict[str, Any] = {}
    for key in live:
        if key not in desired:
            patch[key] = None
    for key, want in desired.items():
        have = live.get(key)
        if isinstance(want, Mapping) and isinstance(have, Mapping):
            sub = merge_diff(have, want)
            if sub:
                patch[key] = sub
        elif key not in live or have != want:
            patch[key] = copy.deepcopy(want)
    return patch
