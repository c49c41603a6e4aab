"""Reading traces for replay: the Philly per-job CSV (as in the Pollux artifact), a generic
CSV anyone can write, and the virtual-cluster node counts (Helios artifact). The shipped
files live in ``data/traces/`` (columns, source and licence: ``data/traces/README.md``);
results from them must carry ``PHILLY_ATTRIBUTION``.

A bad row never stops a read silently: its error names the file, the line and the field.
With ``strict`` the first one is raised; otherwise the row is skipped and counted.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

SHIPPED_TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
PHILLY_JOBS = SHIPPED_TRACES / "philly-2w.csv"
PHILLY_VC_NODES = SHIPPED_TRACES / "philly_vc_nodes.csv"
PHILLY_ATTRIBUTION = "Trace: Microsoft Philly, Jeon et al., USENIX ATC 2019, CC BY 4.0"

GENERIC_COLUMNS = ("submit_time", "duration_s", "gpus", "tenant")
GENERIC_OPTIONAL = ("flavor", "priority", "min_gpus", "checkpoint_s")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: str
    tenant: str
    submitted_at: float  # seconds since the epoch, UTC
    run_time_s: float
    gpus: int
    flavor: str | None = None  # None: the replay's only (or first) flavour
    priority: int = 0
    min_gpus: int | None = None  # elastic down to this many GPUs; None: not elastic
    checkpoint_s: float | None = None  # saves its progress this often; None: never
    # a share of one GPU in thousandths (1..999, ``gpus`` is then 1), on a shared product;
    # None: whole GPUs
    gpu_milli: int | None = None
    # the flavours it may run on, in the order tried; () for ``flavor`` alone
    flavors: tuple[str, ...] = ()
    fills_idle: bool = False  # only fills GPUs nobody else waits for; taken back first

    @property
    def gpu_equivalents(self) -> float:
        """GPUs it holds at full size (a 470-milli share holds 0.47)."""
        return self.gpu_milli / 1000 if self.gpu_milli is not None else float(self.gpus)


class TraceError(ValueError):
    """A trace (or quota or product file) that cannot be read as it stands."""

    def __init__(self, path: Path, line: int | None, column: str | None, problem: str) -> None:
        self.path, self.line, self.column, self.problem = path, line, column, problem
        where = f"{path}" + (f", line {line}" if line is not None else "")
        what = f", field '{column}'" if column else ""
        super().__init__(f"{where}{what}: {problem}")


@dataclass
class TraceRead:
    """The jobs read, in submit order, and the rows skipped with why."""

    jobs: list[TraceJob] = field(default_factory=list)
    skipped: list[TraceError] = field(default_factory=list)


def read_jobs(path: Path, limit: int | None = None) -> list[TraceJob]:
    """The Philly jobs of ``path`` in submit order (bad rows skipped)."""
    return read_trace(path, "philly", limit=limit).jobs


def read_trace(
    path: Path, fmt: str, *, strict: bool = False, limit: int | None = None
) -> TraceRead:
    """Read a ``philly`` or ``csv`` trace. Raises TraceError for a file that cannot be read
    at all (missing, no header, a required column absent) and, with ``strict``, for the
    first bad row."""
    parsers: dict[str, tuple[tuple[str, ...], Callable[[dict[str, str], str], TraceJob]]] = {
        "philly": (PHILLY_COLUMNS, _philly_job),
        "csv": (GENERIC_COLUMNS, _generic_job),
    }
    if fmt not in parsers:
        raise ValueError(f"unknown trace format {fmt!r}; use philly or csv")
    required, parse = parsers[fmt]
    read = TraceRead()
    for line, row in _rows(path, required):
        try:
            job = parse(row, f"j{line}")
        except _BadField as bad:
            error = TraceError(path, line, bad.column, bad.problem)
            if strict:
                raise error from None
            read.skipped.append(error)
            continue
        read.jobs.append(job)
        if limit is not None and len(read.jobs) >= limit:
            break
    read.jobs.sort(key=lambda j: (j.submitted_at, int(j.id[1:])))
    return read


def read_vc_nodes(path: Path) -> dict[str, int]:
    """Virtual cluster -> nodes assigned to it (Helios' ``vc,node num``)."""
    shares: dict[str, int] = {}
    for line, row in _rows(path, ("vc", "node num")):
        try:
            shares[row["vc"]] = _count(row, "node num", minimum=0)
        except _BadField as bad:
            raise TraceError(path, line, bad.column, bad.problem) from None
    return shares


def csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV file with a header holding ``required``."""
    return _rows(path, required)


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    if not path.is_file():
        raise TraceError(path, None, None, "no such file")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = [name.strip() for name in reader.fieldnames or ()]
        missing = [name for name in required if name not in header]
        if missing:
            raise TraceError(
                path,
                1,
                None,
                f"the header lacks {', '.join(missing)}; expected columns {', '.join(required)}",
            )
        reader.fieldnames = header
        for row in reader:
            yield reader.line_num, {k: (v or "").strip() for k, v in row.items() if k}


class _BadField(Exception):
    def __init__(self, column: str, problem: str) -> None:
        super().__init__(problem)
        self.column, self.problem = column, problem


def _philly_job(row: dict[str, str], job_id: str) -> TraceJob:
    return TraceJob(
        id=job_id,
        tenant=_text(row, "cluster"),
        submitted_at=_moment(row, "timestamp"),
        run_time_s=_seconds(row, "duration"),
        gpus=_count(row, "num_gpus", minimum=1),
    )


def _generic_job(row: dict[str, str], job_id: str) -> TraceJob:
    gpus = _count(row, "gpus", minimum=1)
    min_gpus = _count(row, "min_gpus", minimum=1) if row.get("min_gpus") else None
    if min_gpus is not None and min_gpus > gpus:
        raise _BadField("min_gpus", f"{min_gpus} is more than the job's {gpus} GPUs")
    checkpoint = _seconds(row, "checkpoint_s") if row.get("checkpoint_s") else None
    return TraceJob(
        id=job_id,
        tenant=_text(row, "tenant"),
        submitted_at=_moment(row, "submit_time"),
        run_time_s=_seconds(row, "duration_s"),
        gpus=gpus,
        flavor=row.get("flavor") or None,
        priority=_integer(row, "priority") if row.get("priority") else 0,
        min_gpus=None if min_gpus == gpus else min_gpus,
        checkpoint_s=checkpoint,
    )


def _text(row: dict[str, str], column: str) -> str:
    value = row.get(column, "")
    if not value:
        raise _BadField(column, "is empty")
    return value


def _moment(row: dict[str, str], column: str) -> float:
    """Seconds since the epoch: a number, or an ISO 8601 time (no zone means UTC)."""
    value = _text(row, column)
    try:
        return _finite(float(value), column)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _BadField(
            column, f"{value!r} is not a time; write seconds or 2017-11-13 00:02:12"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _seconds(row: dict[str, str], column: str) -> float:
    value = _text(row, column)
    try:
        seconds = _finite(float(value), column)
    except ValueError:
        raise _BadField(column, f"{value!r} is not a number of seconds") from None
    if seconds <= 0:
        raise _BadField(column, f"{value} must be more than 0 seconds")
    return seconds


def _integer(row: dict[str, str], column: str) -> int:
    value = _text(row, column)
    try:
        number = float(value)
    except ValueError:
        raise _BadField(column, f"{value!r} is not a whole number") from None
    if not number.is_integer():
        raise _BadField(column, f"{value!r} is not a whole number")
    return int(number)


def _count(row: dict[str, str], column: str, *, minimum: int) -> int:
    number = _integer(row, column)
    if number < minimum:
        raise _BadField(column, f"{number} must be at least {minimum}")
    return number


def _finite(number: float, column: str) -> float:
    if not math.isfinite(number):
        raise _BadField(column, f"{number} is not a finite number")
    return number
