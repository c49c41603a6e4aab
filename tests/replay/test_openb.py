"""The shipped openb (GPU-sharing) trace reads whole, and a bad row says what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_bridge.replay.openb import (
    OPENB_ATTRIBUTION,
    gpu_tasks,
    read_openb_nodes,
    read_openb_tasks,
)
from scheduler_bridge.replay.trace import TraceError

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def test_the_shipped_nodes_and_tasks_read_without_a_bad_row() -> None:
    nodes = read_openb_nodes(strict=True).rows
    assert len(nodes) == 1213 and sum(node.gpus for node in nodes) == 6212
    assert {node.model for node in nodes} >= {"T4", "P100", "V100M16", "V100M32", "G2"}
    tasks = read_openb_tasks(strict=True).rows
    assert len(tasks) == 4076
    wanting = gpu_tasks(tasks)
    assert len(wanting) == 4076 - 547  # tasks without GPUs are left out
    shares = [t for t in wanting if t.sharing]
    assert len(shares) == 1529
    assert all(1 <= t.requested_milli < 1000 for t in shares)
    assert [t.created_at for t in wanting] == sorted(t.created_at for t in wanting)
    assert "Weng et al., USENIX ATC 2023" in OPENB_ATTRIBUTION


def test_a_task_holds_its_share_or_its_whole_gpus() -> None:
    tasks = {t.name: t for t in read_openb_tasks().rows}
    share = tasks["openb-pod-0001"]  # one GPU, 460 thousandths of it
    assert (share.num_gpu, share.requested_milli, share.sharing) == (1, 460, True)
    assert share.run_time_s == 12902960 - 427061
    whole = tasks["openb-pod-0007"]
    assert (whole.requested_milli, whole.sharing) == (1000, False)
    eight = next(t for t in tasks.values() if t.num_gpu == 8)
    assert eight.requested_milli == 8000


@pytest.mark.parametrize(
    ("row", "column", "problem"),
    [
        ("t,1,1,1,0,,LS,Running,5,9,5", "gpu_milli", "is not a share of a GPU"),
        ("t,1,1,1,1001,,LS,Running,5,9,5", "gpu_milli", "out of range (0 to 1000)"),
        ("t,1,1,2,500,,LS,Running,5,9,5", "gpu_milli", "holds them whole"),
        ("t,1,1,9,1000,,LS,Running,5,9,5", "num_gpu", "out of range (0 to 8)"),
        ("t,1,1,one,1000,,LS,Running,5,9,5", "num_gpu", "'one' is not a whole number"),
        ("t,1,1,1,500,,LS,Running,9,5,9", "deletion_time", "is before creation_time 9"),
        (",1,1,1,500,,LS,Running,5,9,5", "name", "empty"),
    ],
)
def test_a_bad_task_row_names_its_line_and_field(
    tmp_path: Path, row: str, column: str, problem: str
) -> None:
    trace = tmp_path / "pods.csv"
    trace.write_text(HEADER + "ok,1,1,1,500,,LS,Running,1,2,1\n" + row + "\n")
    read = read_openb_tasks(trace)
    assert [t.name for t in read.rows] == ["ok"]
    (error,) = read.skipped
    assert (error.line, error.column) == (3, column)
    assert problem in str(error) and "pods.csv, line 3" in str(error)
    with pytest.raises(TraceError, match=f"line 3, field '{column}'"):
        read_openb_tasks(trace, strict=True)


def test_a_node_list_without_its_columns_is_refused(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu\nn1,4\n")
    with pytest.raises(TraceError, match="the header lacks gpu, model"):
        read_openb_nodes(nodes)
