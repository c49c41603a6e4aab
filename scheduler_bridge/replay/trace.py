"""Reading the Philly trace (per-job CSV as in the Pollux artifact) and the virtual-cluster
node counts (Helios artifact). Both ship in ``data/traces/`` (columns, source and licence:
``data/traces/README.md``); results from them must carry ``PHILLY_ATTRIBUTION``."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

SHIPPED_TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
PHILLY_JOBS = SHIPPED_TRACES / "philly-2w.csv"
PHILLY_VC_NODES = SHIPPED_TRACES / "philly_vc_nodes.csv"
PHILLY_ATTRIBUTION = "Trace: Microsoft Philly, Jeon et al., USENIX ATC 2019, CC BY 4.0"


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: str
    tenant: str
    submitted_at: float  # seconds since the epoch, UTC
    run_time_s: float
    gpus: int


def read_jobs(path: Path, limit: int | None = None) -> list[TraceJob]:
    """Jobs in submit order; rows with no GPUs or no run time are skipped."""
    jobs: list[TraceJob] = []
    with path.open(newline="") as handle:
        for index, row in enumerate(csv.DictReader(handle)):
            gpus = int(float(row["num_gpus"]))
            duration = float(row["duration"])
            if gpus <= 0 or duration <= 0:
                continue
            moment = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
            jobs.append(
                TraceJob(
                    id=f"j{index}",
                    tenant=row["cluster"],
                    submitted_at=moment.timestamp(),
                    run_time_s=duration,
                    gpus=gpus,
                )
            )
            if limit is not None and len(jobs) >= limit:
                break
    return jobs


def read_vc_nodes(path: Path) -> dict[str, int]:
    """Virtual cluster -> nodes assigned to it."""
    with path.open(newline="") as handle:
        return {row["vc"]: int(row["node num"]) for row in csv.DictReader(handle)}
