"""The admission engine compiled to C by mypyc, used only when built from these sources.

The engine's modules are plain, fully typed Python. ``python -m toolchain.native`` (run by
``make demo``, ``make test`` and the image build) compiles them, unchanged, with mypyc into
extension modules, about a third faster over a deep queue (docs/benchmarks.md). The
build is kept outside the source tree, in a directory named by a digest of the sources it
was made from (this package's modules, the wording module they call, the interpreter's
ABI): an edited source has another digest, so it runs as written until it is built again,
never shadowed by a build of an older text. Without a build for the current digest (no C
compiler, or ``TIDEGATE_ENGINE=python``) the same modules run interpreted, deciding
exactly the same (tests/admission/test_native.py compares the two).

This module and ``__init__`` stay interpreted: they choose. So does ``budget`` (a runtime
protocol, which mypyc cannot compile).
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPOSITORY = PACKAGE_DIR.parent.parent
PACKAGE = "scheduler_bridge.admission"
NOT_COMPILED = frozenset({"__init__", "_native", "budget"})
# first-party modules outside the package that compiled code calls into
CALLED = ("i18n/wording.py",)
ENGINE_VARIABLE = "TIDEGATE_ENGINE"  # "python" keeps the interpreted engine
DIRECTORY_VARIABLE = "TIDEGATE_NATIVE_DIR"
READY = "ready"  # written last by a build: a half-written directory is never used

# whether this process runs the compiled engine (set by use_compiled)
active = False


def compiled_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The package's modules mypyc compiles, by file name without ``.py``, sorted."""
    return sorted(p.stem for p in package_dir.glob("*.py") if p.stem not in NOT_COMPILED)


def sources_digest(package_dir: Path = PACKAGE_DIR, repository: Path = REPOSITORY) -> str:
    """What a build is made from: each compiled module's text, the modules it calls
    outside the package, and the interpreter's ABI (the extension suffix)."""
    digest = hashlib.sha256()
    digest.update(str(sysconfig.get_config_var("EXT_SUFFIX")).encode())
    digest.update(sys.implementation.cache_tag.encode())
    files = [package_dir / f"{name}.py" for name in compiled_modules(package_dir)]
    files += [repository / relative for relative in CALLED]
    for path in files:
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def native_root() -> Path:
    """Where builds are kept: ``TIDEGATE_NATIVE_DIR``, else the user's cache."""
    configured = os.environ.get(DIRECTORY_VARIABLE)
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tidegate" / "native"


def build_dir(digest: str | None = None) -> Path:
    """The build of ``digest`` (the current sources' by default)."""
    return native_root() / (digest or sources_digest())


def wanted() -> bool:
    return os.environ.get(ENGINE_VARIABLE, "").strip().lower() != "python"


def use_compiled(package_path: list[str]) -> bool:
    """Put the build of the current sources, if there is one, first on the package's
    search path (``package_path``: the package's ``__path__``), so that its modules
    import compiled. Call before any engine module is imported."""
    global active
    if not wanted():
        return False
    try:
        found = build_dir()
    except OSError:  # a source cannot be read: run what can be imported
        return False
    modules = found / "scheduler_bridge" / "admission"
    if not (found / READY).is_file() or not modules.is_dir():
        return False
    # mypyc's shared library is a top-level module next to the package
    if str(found) not in sys.path:
        sys.path.append(str(found))
    package_path.insert(0, str(modules))
    active = True
    return True
