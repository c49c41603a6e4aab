"""The admission engine compiled to C by mypyc, used only when built from these sources.

The engine's modules are plain, fully typed Python. ``python -m toolchain.native`` (run by
``make demo``, ``make test``, ``make bench`` and the image build) compiles them, as they
are, with mypyc into extension modules: over a deep queue a cycle takes about 0.6 to 0.7
of the interpreter's time, and a trace replay half (docs/admission.md#compiled). The
build is kept outside the source tree, in a directory named by a digest of what it was
made from (this package's modules, the wording module they call, the build recipe and its
profile's training run, the mypy that compiled it, the interpreter's ABI and the C
library): an edited source has another digest, so it runs as written until it is built
again, never shadowed by a build of an older text. Without a complete build for the current digest (no C compiler,
``TIDEGATE_ENGINE=python``, a cache that cannot be read) the same modules run
interpreted and decide the same (tests/admission/test_native.py compares the two); the
compiled modules check the type of every value they are given, as their annotations say.

This module and ``__init__`` stay interpreted: they choose. So does ``budget`` (a runtime
protocol, which mypyc cannot compile). This module imports nothing but the standard
library, and ``toolchain/native.py`` loads it on its own, without the package.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPOSITORY = PACKAGE_DIR.parent.parent
PACKAGE = "scheduler_bridge.admission"
NOT_COMPILED = frozenset({"__init__", "_native"})
INTERPRETED = frozenset({"budget"})  # in the package, type-checked with it, not compiled
# files outside the package that a build depends on: the wording module compiled code
# calls into, the recipe that builds it and the run its profile is trained on
DEPENDS_ON = ("i18n/wording.py", "toolchain/native.py", "toolchain/native_training.py")
ENGINE_VARIABLE = "TIDEGATE_ENGINE"  # "python" keeps the interpreted engine
DIRECTORY_VARIABLE = "TIDEGATE_NATIVE_DIR"
READY = "ready"  # written last by a build: a half-written directory is never used
SHARED = "__mypyc"  # mypyc's library of the compiled code: <hash>__mypyc<suffix>

# whether this process runs the compiled engine, and from where (set by use_compiled)
active = False
used: Path | None = None


def compiled_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The package's modules mypyc compiles, by file name without ``.py``, sorted."""
    skipped = NOT_COMPILED | INTERPRETED
    return sorted(p.stem for p in package_dir.glob("*.py") if p.stem not in skipped)


def sources_digest(package_dir: Path = PACKAGE_DIR, repository: Path = REPOSITORY) -> str:
    """What a build is made from: every module of the package but the two that choose
    (compiled or type-checked with them), the files it depends on outside the package,
    the mypy that compiles it, the interpreter's ABI and the C library."""
    digest = hashlib.sha256()
    digest.update(str(sysconfig.get_config_var("EXT_SUFFIX")).encode())
    digest.update(sys.implementation.cache_tag.encode())
    digest.update(_libc().encode())
    mypy = importlib.util.find_spec("mypy")
    if mypy is not None and mypy.origin is not None:  # its version module names it
        version = Path(mypy.origin).with_name("version.py")
        digest.update(version.read_bytes() if version.is_file() else b"")
    names = sorted(compiled_modules(package_dir) + sorted(INTERPRETED))
    files = [package_dir / f"{name}.py" for name in names]
    files += [repository / relative for relative in DEPENDS_ON]
    for path in files:
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def _libc() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):  # not glibc, or not POSIX
        return ""


def native_root() -> Path:
    """Where builds are kept: ``TIDEGATE_NATIVE_DIR``, else the user's cache."""
    configured = os.environ.get(DIRECTORY_VARIABLE)
    if configured:
        return Path(configured).expanduser().absolute()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).absolute() / "tidegate" / "native"


def build_dir(digest: str | None = None) -> Path:
    """The build of ``digest`` (the current sources' by default)."""
    return native_root() / (digest or sources_digest())


def wanted() -> bool:
    return os.environ.get(ENGINE_VARIABLE, "").strip().lower() != "python"


def complete(found: Path) -> str | None:
    """The name of the build's shared library if ``found`` holds a whole build (marked
    ready, every compiled module and the library there), else None."""
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
    if not (found / READY).is_file():
        return None
    modules = found / "scheduler_bridge" / "admission"
    if any(not (modules / f"{name}{suffix}").is_file() for name in compiled_modules()):
        return None
    shared = [p.name[: -len(suffix)] for p in found.glob(f"*{SHARED}{suffix}")]
    return shared[0] if len(shared) == 1 else None


def use_compiled(package_path: list[str]) -> bool:
    """Put the build of the current sources, if a whole one is there, first on the
    package's search path (``package_path``: the package's ``__path__``), so that its
    modules import compiled. Call before any engine module is imported. Anything amiss
    (no build, a cache that cannot be read, a library that does not load) leaves the
    engine interpreted."""
    global active, used
    if not wanted():
        return False
    try:
        found = build_dir()
        shared = complete(found)
    except Exception:  # noqa: BLE001 - an unreadable cache or source: run interpreted
        return False
    if shared is None:
        return False
    sys.path.insert(0, str(found))  # mypyc's library is a top-level module there
    try:
        importlib.import_module(shared)
    except Exception:  # noqa: BLE001 - built for another machine, or damaged
        sys.path.remove(str(found))
        sys.modules.pop(shared, None)
        return False
    package_path.insert(0, str(found / "scheduler_bridge" / "admission"))
    active, used = True, found
    return True
