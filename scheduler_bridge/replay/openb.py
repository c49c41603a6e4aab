"""Reading Alibaba's GPU-sharing trace ("openb", cluster-trace-gpu-v2023): the GPU node
list and the task (pod) list, as shipped in ``data/traces/openb/`` (columns, source and
terms: ``data/traces/README.md``). Results from them must carry ``OPENB_ATTRIBUTION``.

A task asks for ``num_gpu`` whole GPUs, or, with ``num_gpu`` 1, for ``gpu_milli``
thousandths of one GPU (a sharing task); ``requested_milli`` says which in one number.
Tasks without GPUs are read too (``num_gpu`` 0) and are left out by ``gpu_tasks``.

As for the other traces (trace.py), a bad row's error names the file, the line and the
field; with ``strict`` the first one is raised, otherwise the row is skipped and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from scheduler_bridge.replay.cluster import ReplayCluster, ReplayNode, node_list_cluster
from scheduler_bridge.replay.trace import SHIPPED_TRACES, TraceError, TraceJob, csv_rows

OPENB_NODES = SHIPPED_TRACES / "openb" / "openb_node_list_gpu_node.csv"
OPENB_TASKS = SHIPPED_TRACES / "openb" / "openb_pod_list_odd.csv"
OPENB_ATTRIBUTION = (
    "Trace: Alibaba Cluster Trace Program, cluster-trace-gpu-v2023 (openb); "
    "Weng et al., USENIX ATC 2023"
)

NODE_COLUMNS = ("sn", "gpu", "model")
TASK_COLUMNS = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time")
MILLI_PER_GPU = 1000
BEST_EFFORT = "BE"  # the QoS class of low-priority batch
MAX_GPUS_PER_TASK = 8  # the most any node of the trace holds


@dataclass(frozen=True, slots=True)
class OpenbNode:
    name: str
    gpus: int
    model: str  # P100, T4, V100M16, V100M32, A10, or the undisclosed G1, G2, G3
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class OpenbTask:
    name: str
    num_gpu: int  # whole GPUs; 1 with gpu_milli < 1000 is a share of one GPU
    gpu_milli: int  # thousandths of one GPU per GPU asked for
    created_at: float  # seconds from the start of the trace
    deleted_at: float
    gpu_models: tuple[str, ...] = ()  # the models it may run on; () for any
    qos: str = ""
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def requested_milli(self) -> int:
        """What the task holds, in thousandths of a GPU (a 470-milli task holds 0.47)."""
        if self.num_gpu == 1:
            return self.gpu_milli
        return self.num_gpu * MILLI_PER_GPU

    @property
    def sharing(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI_PER_GPU

    @property
    def run_time_s(self) -> float:
        return self.deleted_at - self.created_at


Row = TypeVar("Row")


@dataclass
class OpenbRead(Generic[Row]):
    """The rows read, in file order, and the rows skipped with why."""

    rows: list[Row] = field(default_factory=list)
    skipped: list[TraceError] = field(default_factory=list)


def read_openb_nodes(path: Path = OPENB_NODES, *, strict: bool = False) -> OpenbRead[OpenbNode]:
    """The GPU nodes of an openb node list (``sn,cpu_milli,memory_mib,gpu,model``)."""
    return _read(path, NODE_COLUMNS, _node, strict)


def read_openb_tasks(path: Path = OPENB_TASKS, *, strict: bool = False) -> OpenbRead[OpenbTask]:
    """The tasks of an openb pod list, in file order."""
    return _read(path, TASK_COLUMNS, _task, strict)


def gpu_tasks(tasks: list[OpenbTask]) -> list[OpenbTask]:
    """The tasks that ask for GPUs (whole or shared), in creation order."""
    return sorted((t for t in tasks if t.num_gpu > 0), key=lambda t: (t.created_at, t.name))


def openb_cluster(nodes: list[OpenbNode]) -> ReplayCluster:
    """The trace's GPU nodes as a replay cluster: one shared product per GPU model (every
    GPU may be shared, as in the trace's cluster), the most GPUs first."""
    return node_list_cluster(
        (ReplayNode(node.name, node.model, node.gpus) for node in nodes), shared=True
    )


def openb_jobs(
    tasks: list[OpenbTask], cluster: ReplayCluster, *, limit: int | None = None
) -> list[TraceJob]:
    """The GPU tasks as replay jobs, in creation order: the tenant is the task's QoS class
    (LS, BE, Burstable, Guaranteed), a share of one GPU keeps its thousandths, a task with
    several GPUs holds them whole on one node, and a task names the GPU models it may run
    on (none: any, tried largest product first). A best-effort (``BE``) share fills idle
    GPUs: it takes only fragments no other work waits for and is the first taken back.
    Tasks that ran for no time are left out."""
    any_model = tuple(p.flavor for p in cluster.products)
    jobs: list[TraceJob] = []
    for task in gpu_tasks(tasks):
        if task.run_time_s <= 0:
            continue
        models = tuple(m for m in any_model if m in task.gpu_models) or task.gpu_models
        jobs.append(
            TraceJob(
                id=task.name,
                tenant=task.qos or "default",
                submitted_at=task.created_at,
                run_time_s=task.run_time_s,
                gpus=task.num_gpu,
                gpu_milli=task.gpu_milli if task.sharing else None,
                flavors=models or any_model,
                fills_idle=task.sharing and task.qos == BEST_EFFORT,
            )
        )
        if limit is not None and len(jobs) >= limit:
            break
    return jobs


# --- helpers -----------------------------------------------------------------------------


class _BadField(Exception):
    def __init__(self, column: str, problem: str) -> None:
        super().__init__(problem)
        self.column, self.problem = column, problem


def _read(
    path: Path,
    required: tuple[str, ...],
    parse: Callable[[dict[str, str]], Row],
    strict: bool,
) -> OpenbRead[Row]:
    read: OpenbRead[Row] = OpenbRead()
    for line, row in csv_rows(path, required):
        try:
            read.rows.append(parse(row))
        except _BadField as bad:
            error = TraceError(path, line, bad.column, bad.problem)
            if strict:
                raise error from None
            read.skipped.append(error)
    return read


def _node(row: dict[str, str]) -> OpenbNode:
    name = _text(row, "sn")
    gpus = _integer(row, "gpu", low=0, high=MAX_GPUS_PER_TASK)
    return OpenbNode(
        name=name,
        gpus=gpus,
        model=_text(row, "model"),
        cpu_milli=_integer(row, "cpu_milli", low=0, default=0),
        memory_mib=_integer(row, "memory_mib", low=0, default=0),
    )


def _task(row: dict[str, str]) -> OpenbTask:
    num_gpu = _integer(row, "num_gpu", low=0, high=MAX_GPUS_PER_TASK)
    gpu_milli = _integer(row, "gpu_milli", low=0, high=MILLI_PER_GPU)
    if num_gpu == 1 and gpu_milli < 1:
        raise _BadField(
            "gpu_milli",
            f"{gpu_milli} is not a share of a GPU: a task with one GPU asks for 1 to "
            f"{MILLI_PER_GPU} thousandths of it",
        )
    if num_gpu > 1 and gpu_milli != MILLI_PER_GPU:
        raise _BadField(
            "gpu_milli",
            f"{gpu_milli}: a task with {num_gpu} GPUs holds them whole ({MILLI_PER_GPU})",
        )
    created = _integer(row, "creation_time", low=0)
    deleted = _integer(row, "deletion_time", low=0)
    if deleted < created:
        raise _BadField("deletion_time", f"{deleted} is before creation_time {created}")
    spec = row.get("gpu_spec", "")
    return OpenbTask(
        name=_text(row, "name"),
        num_gpu=num_gpu,
        gpu_milli=gpu_milli if num_gpu else 0,
        created_at=float(created),
        deleted_at=float(deleted),
        gpu_models=tuple(sorted(model for model in spec.split("|") if model)),
        qos=row.get("qos", ""),
        cpu_milli=_integer(row, "cpu_milli", low=0, default=0),
        memory_mib=_integer(row, "memory_mib", low=0, default=0),
    )


def _text(row: dict[str, str], column: str) -> str:
    value = row.get(column, "")
    if not value:
        raise _BadField(column, "empty; every row needs it")
    return value


def _integer(
    row: dict[str, str],
    column: str,
    *,
    low: int,
    high: int | None = None,
    default: int | None = None,
) -> int:
    raw = row.get(column, "")
    if raw == "" and default is not None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _BadField(column, f"{raw!r} is not a whole number") from None
    if value < low or (high is not None and value > high):
        bound = f"{low} to {high}" if high is not None else f"at least {low}"
        raise _BadField(column, f"{value} is out of range ({bound})")
    return value
