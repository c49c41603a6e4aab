"""Compile the admission engine with mypyc (scheduler_bridge/admission/_native.py says how it
is picked up)::

    python -m toolchain.native            # build for the current sources, if not built yet
    python -m toolchain.native --print    # the folder the current sources' build is in

The build lands in ``~/.cache/tidegate/native/<digest of the sources>`` (or
``TIDEGATE_NATIVE_DIR``), written in a staging folder and renamed when complete. It needs
a C compiler and the interpreter's headers; without them it says so and exits 0 - the
engine then runs interpreted, as it would with ``TIDEGATE_ENGINE=python``. mypyc is part of
mypy, pinned in requirements.lock.

With gcc the build is profile-guided: the engine is compiled with branch counters, runs
``toolchain/native_training.py`` (deep-queue cycles and a trace replay), and is compiled
again laid out for what that run did. ``TIDEGATE_NATIVE_PGO=0`` skips the training run
(a build about twice as fast, an engine 6 to 9 % slower); so does a training run that
fails, with a warning. The training needs the repository's ``benchmarks/`` and
``data/traces/`` beside ``toolchain/``. Every build keeps the engine's functions private to its library
(``-fvisibility=hidden``, ``-fno-semantic-interposition``), so that the C compiler may
inline calls between them instead of going through the library's symbol table.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
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
    script_args=[
        "build_ext", "--force", "--build-lib", staging, "--build-temp", target + "/objects"
    ],
)
"""
# calls between the engine's functions stay inside its library: the compiler may inline them
PRIVATE = ("-fno-semantic-interposition", "-fvisibility=hidden")
PGO_VARIABLE = "TIDEGATE_NATIVE_PGO"  # "0": no training run
TRAINING = "toolchain.native_training"
TRAINING_TIMEOUT_S = 1200.0
# what a build's ready file says it is
PROFILE_GUIDED, WITHOUT_PROFILE = "profile-guided", "without a profile"


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
    with tempfile.TemporaryDirectory(prefix="native-", dir=folder.parent) as temporary:
        work = Path(temporary)
        started = time.monotonic()
        staging, kind = _build_kind(paths, work, folder.name, progress)
        elapsed = time.monotonic() - started
        (staging / _native.READY).write_text(f"built in {elapsed:.0f} s, {kind}\n")
        os.replace(staging, folder)
    _prune(folder)


def _build_kind(paths: Sequence[str], work: Path, digest: str, progress: bool) -> tuple[Path, str]:
    """The build in ``work/build``, profile-guided when a profile can be trained (else,
    or when anything in that fails, without one), and which of the two it is."""
    if trains_a_profile():
        profile = work / "profile"
        try:
            _train(paths, work, profile, digest, progress)
            staging = _compile(
                paths, work, "build", (*PRIVATE, *_use_profile(profile)), progress=progress
            )
            return staging, PROFILE_GUIDED
        except (NativeBuildError, OSError) as error:
            print(f"{error}\nbuilding without a profile instead", file=sys.stderr)
            shutil.rmtree(work / "build", ignore_errors=True)
    return _compile(paths, work, "build", PRIVATE, progress=progress), WITHOUT_PROFILE


def _compile(
    paths: Sequence[str],
    work: Path,
    name: str,
    flags: Sequence[str],
    *,
    progress: bool,
    what: str = "compiling the admission engine",
) -> Path:
    """mypyc's C for ``paths``, compiled with ``flags`` into ``work/name``. Every compile of
    one build writes its C and objects in the same place (``work/c``), and mypyc writes
    the same C each time (the hash seed is fixed): the profile of one compile's objects is
    found by the next, and gcc refuses one that does not match its C."""
    command = [sys.executable, "-c", SETUP, str(work / "c"), str(work / name), *paths]
    # (setuptools adds CFLAGS to the link command too)
    cflags = " ".join([os.environ.get("CFLAGS", ""), *flags]).strip()
    env = dict(os.environ, PYTHONHASHSEED="0", CFLAGS=cflags)
    _run(command, env, f"{what} ({len(paths)} modules) with mypyc", progress)
    return work / name


def _train(paths: Sequence[str], work: Path, profile: Path, digest: str, progress: bool) -> None:
    """Compile with branch counters and run the training with that build loaded; the
    counts land in ``profile``, one file per compiled object."""
    generate = (f"-fprofile-generate={shlex.quote(str(profile))}", "-fprofile-update=single")
    instrumented = _compile(
        paths,
        work,
        "instrumented",
        (*PRIVATE, *generate),
        progress=progress,
        what="instrumenting the admission engine",
    )
    root = work / "training"
    root.mkdir()
    (instrumented / _native.READY).write_text("instrumented\n")
    os.replace(instrumented, root / digest)
    env = dict(os.environ, PYTHONHASHSEED="0")
    env[_native.DIRECTORY_VARIABLE] = str(root)
    env.pop(_native.ENGINE_VARIABLE, None)
    what = "training the engine's profile on deep queues and replays"
    _run([sys.executable, "-m", TRAINING], env, what, progress, timeout=TRAINING_TIMEOUT_S)
    objects = {p.stem for p in (work / "c" / "objects").rglob("*.o")}
    counted = {p.stem for p in profile.rglob("*.gcda")}
    if objects - counted:
        missing = ", ".join(sorted(objects - counted))
        raise NativeBuildError(f"the training run left no profile for {missing}")


def _use_profile(profile: Path) -> tuple[str, ...]:
    # every object has its counts (a function the training never ran has zeros); gcc
    # fails on a profile that does not match its C, and mypyc's -Werror makes a missing
    # one fail too: a build is profile-guided whole or not at all
    return (f"-fprofile-use={shlex.quote(str(profile))}", "-fprofile-partial-training")


def trains_a_profile() -> bool:
    """Whether a build trains a profile: not turned off, and the compiler is gcc (clang's
    profiles take another tool to merge)."""
    if os.environ.get(PGO_VARIABLE, "").strip() == "0":
        return False
    compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    try:
        version = subprocess.run(
            [*compiler, "--version"], capture_output=True, text=True, check=False, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Free Software Foundation" in version and "clang" not in version


def _run(
    command: list[str],
    env: dict[str, str],
    what: str,
    progress: bool,
    timeout: float | None = None,
) -> str:
    """Run a step of the build in the repository; its output, or NativeBuildError."""
    process = subprocess.Popen(
        command,
        cwd=REPOSITORY,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output = _wait(process, what, progress, timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise NativeBuildError(f"{what}: no end after {timeout:.0f} s") from None
    if process.returncode != 0:
        raise NativeBuildError(f"{what} failed:\n{output[-4000:]}")
    return output


def _wait(process: subprocess.Popen[str], what: str, progress: bool, timeout: float | None) -> str:
    if not progress:
        return process.communicate(timeout=timeout)[0]
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=False
    ) as bar:
        bar.add_task(what, total=None)
        return process.communicate(timeout=timeout)[0]


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
