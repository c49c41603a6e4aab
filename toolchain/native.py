"""Compile the admission engine with mypyc (scheduler_bridge/admission/_native.py says how it
is picked up)::

    python -m toolchain.native            # build for the current sources, if not built yet
    python -m toolchain.native --print    # the folder the current sources' build is in

The build lands in ``~/.cache/tidegate/native/<digest of the sources>`` (or
``TIDEGATE_NATIVE_DIR``), written in a staging folder and renamed when complete. It needs
a C compiler and the interpreter's headers; without them it says so and exits 0 - the
engine then runs interpreted, as it would with ``TIDEGATE_ENGINE=python``. mypyc is part of
mypy, pinned in requirements.lock.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType

REPOSITORY = Path(__file__).resolve().parent.parent


def _load_native() -> ModuleType:
    """scheduler_bridge/admission/_native.py on its own: importing the package would load
    the build it is about to check, or fail on a damaged one before it can be rebuilt."""
    path = REPOSITORY / "scheduler_bridge" / "admission" / "_native.py"
    spec = importlib.util.spec_from_file_location("tidegate_native_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_native = _load_native()

# compiled in one C unit: calls between the engine's modules stay native
SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify

target, staging, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
setup(
    name="tidegate-admission-native",
    packages=[],
    py_modules=[],
    ext_modules=mypycify(paths, opt_level="3", target_dir=target),
    script_args=["build_ext", "--build-lib", staging, "--build-temp", target + "/objects"],
)
"""


class NativeBuildError(RuntimeError):
    """mypyc or the C compiler failed; the message carries their output."""


def can_compile() -> str | None:
    """Why this machine cannot build (None when it can)."""
    if os.environ.get("CC") is None and shutil.which("cc") is None and shutil.which("gcc") is None:
        return "no C compiler (install gcc)"
    for module, package in (("mypyc.build", "mypy"), ("setuptools", "setuptools")):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            return f"no {module} (pip install -r requirements.lock installs {package})"
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not include.is_file():
        return f"no Python headers ({include}; install python3-dev)"
    return None


def build(progress: bool = True) -> Path:
    """Build the current sources into their folder unless it is there; returns it."""
    folder = _native.build_dir()
    if _native.complete(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two builds at once: the second reuses the first
        if not _native.complete(folder):
            if folder.exists():  # damaged: set aside, then built again
                _discard(folder)
            _build_into(folder, progress)
    return folder


def _build_into(folder: Path, progress: bool) -> None:
    paths = [f"scheduler_bridge/admission/{name}.py" for name in _native.compiled_modules()]
    with tempfile.TemporaryDirectory(prefix="native-", dir=folder.parent) as work:
        staging = Path(work) / "build"
        command = [sys.executable, "-c", SETUP, str(Path(work) / "c"), str(staging), *paths]
        started = time.monotonic()
        process = subprocess.Popen(
            command,
            cwd=REPOSITORY,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output = _wait(process, len(paths), progress)
        if process.returncode != 0:
            raise NativeBuildError(f"mypyc build failed:\n{output[-4000:]}")
        (staging / _native.READY).write_text(f"built in {time.monotonic() - started:.0f} s\n")
        os.replace(staging, folder)
    _prune(folder)


def _wait(process: subprocess.Popen[str], modules: int, progress: bool) -> str:
    if not progress:
        return process.communicate()[0]
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=False
    ) as bar:
        bar.add_task(f"compiling the admission engine ({modules} modules) with mypyc", total=None)
        return process.communicate()[0]


def _prune(keep: Path, kept: int = 3) -> None:
    """Keep the newest few builds (older sources' builds are never used again)."""
    builds = sorted(
        (p for p in keep.parent.iterdir() if p.is_dir() and (p / _native.READY).is_file()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in builds[kept:]:
        if old != keep:
            _discard(old)


def _discard(folder: Path) -> None:
    """Take a build out of use at once (a rename), then delete it: a process starting
    meanwhile never finds half of one."""
    trash = folder.with_name(f".discarded-{folder.name}-{os.getpid()}")
    os.replace(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolchain.native", description=__doc__)
    parser.add_argument("--print", action="store_true", help="print the build folder")
    args = parser.parse_args(argv)
    if args.print:
        print(_native.build_dir())
        return 0
    if _native.complete(_native.build_dir()):
        print(f"admission engine compiled: {_native.build_dir()}", file=sys.stderr)
        return 0
    missing = can_compile()
    if missing is not None:
        print(f"admission engine left interpreted: {missing}", file=sys.stderr)
        return 0
    try:
        folder = build(progress=sys.stderr.isatty() or bool(os.environ.get("CI")))
    except NativeBuildError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"admission engine compiled: {folder}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
