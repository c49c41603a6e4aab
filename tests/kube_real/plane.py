"""One real control plane for each pytest process of a run (each xdist worker, or the
one process without xdist), started by the first test that needs it.

Tests in one process run one after another, so a test has its control plane to itself;
two workers never share one (xdist's groups do not keep tests on one worker with this
pytest). A control plane stops when the process that started it ends (Linux's parent-death
signal) and, at the latest, when the run ends (``stop_after_run``). A build or start
failure fails the test with the message of ``toolchain``, which says what failed and how
to fix it: the real cluster is never skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from toolchain.control_plane import ControlPlane

RUN_FOLDER_VARIABLE = "TIDEGATE_TEST_CLUSTER_DIR"
_attached: ControlPlane | None = None


def run_folder() -> Path:
    """The folder this run's control plane lives in (set before the workers start)."""
    folder = os.environ.get(RUN_FOLDER_VARIABLE)
    if not folder:
        folder = tempfile.mkdtemp(prefix="tidegate-cluster-")
        os.environ[RUN_FOLDER_VARIABLE] = folder
    return Path(folder)


def shared_control_plane() -> ControlPlane:
    """This process's control plane, started on first use."""
    global _attached
    if _attached is not None:
        return _attached
    folder = run_folder() / os.environ.get("PYTEST_XDIST_WORKER", "main")
    folder.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane.prepare(folder / "plane")
    plane.start()
    (folder / "state.json").write_text(json.dumps(plane.state()))
    _attached = plane
    return plane


def stop_after_run() -> None:
    """Stop the run's control planes that are still running, and remove their folder."""
    folder = os.environ.get(RUN_FOLDER_VARIABLE)
    if not folder:
        return
    for state_file in Path(folder).glob("*/state.json"):
        pids = json.loads(state_file.read_text()).get("pids", {})
        # stop the clients of the API server first, etcd last
        order = ["kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"]
        for name in order:
            pid = pids.get(name)
            if pid:
                _stop_group(pid)
    shutil.rmtree(folder, ignore_errors=True)


def _stop_group(pid: int, grace_s: float = 10.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
