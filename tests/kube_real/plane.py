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
_failure: Exception | None = None
_created_here: Path | None = None  # the run folder, in the process that made it


def run_folder() -> Path:
    """The folder this run's control planes live in (made before the workers start)."""
    global _created_here
    folder = os.environ.get(RUN_FOLDER_VARIABLE)
    if not folder:
        folder = tempfile.mkdtemp(prefix="tidegate-cluster-")
        os.environ[RUN_FOLDER_VARIABLE] = folder
        _created_here = Path(folder)
    return Path(folder)


def shared_control_plane() -> ControlPlane:
    """This process's control plane, started on first use."""
    global _attached, _failure
    if _attached is not None:
        return _attached
    if _failure is not None:  # one try per process: later tests fail at once, alike
        raise _failure
    folder = Path(
        tempfile.mkdtemp(
            prefix=f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-", dir=run_folder()
        )
    )
    try:
        plane = ControlPlane.prepare(folder / "plane")
        plane.start()
    except Exception as error:
        _failure = error
        raise
    state = folder / "state.json"
    state.write_text(json.dumps(plane.state()))
    state.chmod(0o600)
    _attached = plane
    return plane


def stop_after_run() -> None:
    """Stop the run's control planes that are still running (each component normally
    ended with the worker that started it) and remove the folder this process made."""
    if _created_here is None:
        return
    for state_file in _created_here.glob("*/state.json"):
        state = json.loads(state_file.read_text())
        # stop the clients of the API server first, etcd last
        order = ["kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"]
        for name in order:
            pid = state.get("pids", {}).get(name)
            if pid and _runs_in(pid, state["workdir"]):
                _stop_group(pid)
    shutil.rmtree(_created_here, ignore_errors=True)


def _runs_in(pid: int, workdir: str) -> bool:
    """Whether ``pid`` is still a component of the control plane in ``workdir`` (and not
    another process that got its number since)."""
    try:
        return workdir in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


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
