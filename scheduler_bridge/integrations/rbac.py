"""The service account's rules for the integrated workload kinds, written from
``INTEGRATIONS`` into ``platform/rbac.yaml`` and the chart's ClusterRole (``make rbac``),
so a new kind's rules come from its adapter alone. ``tests/integrations/test_kind_facts.py``
fails while either file is out of date.

Usage: ``python -m scheduler_bridge.integrations.rbac [--check] FILE...``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import INTEGRATIONS

BEGIN = "  # the integrated workload kinds: written by `make rbac` from each adapter's verbs"
END = "  # end of the integrated workload kinds"
FILES = ("platform/rbac.yaml", "platform/helm/tidegate/templates/serviceaccount.yaml")


def rules() -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(API group, resources, verbs) of every kind, in INTEGRATIONS order; kinds of one
    group with the same verbs share a rule."""
    merged: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for integration in INTEGRATIONS:
        for group, resource, verbs in integration.rbac_rules():
            merged.setdefault((group, verbs), []).append(resource)
    return [(group, resources, verbs) for (group, verbs), resources in merged.items()]


def block() -> list[str]:
    lines = [BEGIN]
    for group, resources, verbs in rules():
        lines += [
            f"  - apiGroups: [{json.dumps(group)}]",
            f"    resources: [{', '.join(json.dumps(r) for r in resources)}]",
            f"    verbs: [{', '.join(json.dumps(v) for v in verbs)}]",
        ]
    return [*lines, END]


def rewritten(text: str) -> str:
    """``text`` with its block of the integrated kinds' rules written afresh. ValueError
    when it has no such block."""
    lines = text.split("\n")
    try:
        start, end = lines.index(BEGIN), lines.index(END)
    except ValueError:
        raise ValueError(f"no block between {BEGIN.strip()!r} and {END.strip()!r}") from None
    return "\n".join([*lines[:start], *block(), *lines[end + 1 :]])


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name in [a for a in argv if a != "--check"] or FILES:
        path = Path(name)
        text = path.read_text()
        fresh = rewritten(text)
        if fresh != text:
            stale.append(name)
            if not check:
                path.write_text(fresh)
    if check and stale:
        print(f"out of date: {', '.join(stale)}; run make rbac", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
