"""The engine is a pure core: importing and running it never pulls in Django."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import sys
from scheduler_bridge.admission import ClusterSnapshot, Flavour, Node, Quota, Tenant, run_cycle
run_cycle(ClusterSnapshot(now=0.0, tenants=(Tenant("t"),), flavours=(Flavour("H100"),),
          quotas=(Quota("t", "H100", 8),), nodes=(Node("n", {"H100": 8}),)))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"django", "rest_framework", "celery"})
print(",".join(loaded))
"""


def test_the_engine_imports_and_runs_without_django():
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout.strip() == ""
