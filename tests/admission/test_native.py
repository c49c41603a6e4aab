"""The admission engine compiled by mypyc (scheduler_bridge/admission/_native.py): used when
built from the current sources and only then, and deciding exactly as the interpreter does."""

from __future__ import annotations

import ast
import hashlib
import importlib
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler_bridge.admission import (
    AdmissionEngine,
    ClusterSnapshot,
    CycleResult,
    EngineConfig,
    Flavour,
    Node,
    PendingWorkload,
    PodSet,
    Quota,
    Tenant,
    Topology,
    _native,
    core_of,
)
from scheduler_bridge.admission.simulator import apply_result

REPOSITORY = Path(__file__).resolve().parents[2]


CONSTANT = re.compile(r"_?[A-Z][A-Z0-9_]*")
SHORT_INT = 1 << 62  # mypyc's ints from here up are Python objects


def _is_final(annotation: ast.expr) -> bool:
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    return isinstance(annotation, ast.Name) and annotation.id == "Final"


def test_every_module_constant_of_the_compiled_engine_is_final_and_a_short_int() -> None:
    """A constant that is not Final is looked up in its module's dictionary at every
    read in compiled code (docs/admission.md, Writing for the compiled engine)."""
    package = REPOSITORY / "scheduler_bridge" / "admission"
    not_final: list[str] = []
    too_large: list[str] = []
    for name in _native.compiled_modules():
        tree = ast.parse((package / f"{name}.py").read_text())
        module = importlib.import_module(f"scheduler_bridge.admission.{name}")
        for statement in tree.body:
            if isinstance(statement, ast.Assign):
                targets = [t for t in statement.targets if isinstance(t, ast.Name)]
                targets += [
                    e
                    for t in statement.targets
                    if isinstance(t, ast.Tuple)
                    for e in t.elts
                    if isinstance(e, ast.Name)
                ]
                not_final += [f"{name}.{t.id}" for t in targets if CONSTANT.fullmatch(t.id)]
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                constant = statement.target.id
                if CONSTANT.fullmatch(constant) and not _is_final(statement.annotation):
                    not_final.append(f"{name}.{constant}")
                value = getattr(module, constant, None)
                if isinstance(value, int) and not -SHORT_INT <= value < SHORT_INT:
                    too_large.append(f"{name}.{constant}")
    assert not_final == [], "declare these Final (typing.Final)"
    assert too_large == [], "keep these below 2**62"


def test_the_engine_runs_compiled_exactly_when_built_for_its_sources() -> None:
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
    for name in _native.compiled_modules():
        module = importlib.import_module(f"scheduler_bridge.admission.{name}")
        assert str(module.__file__).endswith(suffix) == _native.active, name
        if _native.active:
            assert _native.used is not None and _native.used == _native.build_dir()
            assert Path(str(module.__file__)).is_relative_to(_native.used), name
    for name in (*_native.INTERPRETED, "_native"):
        module = importlib.import_module(f"scheduler_bridge.admission.{name}")
        assert str(module.__file__).endswith(".py"), name
    if os.environ.get("CI") and _native.wanted():
        # make test builds it first (make native): CI tests what the product runs
        assert _native.active, f"no build at {_native.build_dir()}: run make native"


def test_ci_runs_the_profile_guided_build_that_gcc_makes() -> None:
    """A build whose training run failed is made without a profile: it decides the same,
    only more slowly, so nothing else would notice. Where gcc builds it (CI), the engine
    under test must be the profile-guided one (toolchain/native.py)."""
    from toolchain import native

    if _native.used is None:  # (interpreted: the test above says whether it may be)
        return
    kind = (_native.used / _native.READY).read_text()
    assert native.PROFILE_GUIDED in kind or native.WITHOUT_PROFILE in kind, kind
    if os.environ.get("CI") and native.can_compile() is None and native.trains_a_profile():
        assert native.PROFILE_GUIDED in kind, (
            f"{_native.used} was built {kind.strip()}: the build's warning says why; "
            "delete the folder and run make native again"
        )


def test_an_edited_source_is_not_shadowed_by_the_build_of_its_older_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "scheduler_bridge" / "admission"
    shutil.copytree(_native.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    for relative in _native.DEPENDS_ON:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPOSITORY / relative, tmp_path / relative)
    before = _native.sources_digest(package, tmp_path)
    assert before == _native.sources_digest()  # the copy's text is the same
    with (package / "quota.py").open("a") as source:
        source.write("\n# edited\n")
    assert _native.sources_digest(package, tmp_path) != before
    # what compiled code is type-checked against and the recipe count too; the two
    # modules that choose do not
    toolchain = tmp_path / "toolchain"
    for changed in (
        package / "budget.py",
        toolchain / "native.py",
        toolchain / "native_training.py",
    ):
        edited = _native.sources_digest(package, tmp_path)
        with changed.open("a") as source:
            source.write("\n# edited\n")
        assert _native.sources_digest(package, tmp_path) != edited, changed
    edited = _native.sources_digest(package, tmp_path)
    with (package / "__init__.py").open("a") as source:
        source.write("\n# edited\n")
    assert _native.sources_digest(package, tmp_path) == edited
    assert "budget" not in _native.compiled_modules(package)
    assert "engine" in _native.compiled_modules(package)

    # only a complete build of the current digest is put on the package's path
    monkeypatch.setenv(_native.DIRECTORY_VARIABLE, str(tmp_path / "native"))
    monkeypatch.setattr(_native, "active", False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    other = tmp_path / "native" / "0123456789abcdef0123"
    (other / "scheduler_bridge" / "admission").mkdir(parents=True)
    (other / _native.READY).write_text("")
    path: list[str] = []
    assert not _native.use_compiled(path) and path == []
    current = _native.build_dir()
    modules = current / "scheduler_bridge" / "admission"
    modules.mkdir(parents=True)
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
    for name in _native.compiled_modules():
        (modules / f"{name}{suffix}").write_bytes(b"")
    library = current / f"tidegatetestlibrary{_native.SHARED}{suffix}"
    library.write_text("not a library")
    assert not _native.use_compiled(path) and path == []  # not marked ready: half-written
    (current / _native.READY).write_text("")
    monkeypatch.setenv(_native.ENGINE_VARIABLE, "python")
    assert not _native.use_compiled(path) and path == []
    monkeypatch.delenv(_native.ENGINE_VARIABLE)
    # complete in name, but its library does not load: interpreted, paths as they were
    assert not _native.use_compiled(path) and path == []
    assert str(current) not in sys.path and not _native.active
    assert _native.complete(current) == f"tidegatetestlibrary{_native.SHARED}"
    (modules / f"model{suffix}").unlink()  # a module missing: never imported at all
    assert _native.complete(current) is None
    assert not _native.use_compiled(path) and path == []
    # an unreadable cache (no home, a folder of another user) leaves it interpreted too
    monkeypatch.delenv(_native.DIRECTORY_VARIABLE)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", _no_home)
    assert not _native.use_compiled(path) and path == []


def _no_home() -> Path:
    raise RuntimeError("Could not determine home directory")


def decisions_digest() -> str:
    """Every decision of twelve cycles over a mixed queue, under reclaim with its waits
    and under priority preemption (two departments with borrowing and lending limits,
    two flavours, gangs in NVLink domains, elastic work, work that cannot be preempted,
    reservations for starving gangs), as one digest."""
    digest = hashlib.sha256()
    for config in (
        EngineConfig(reclaim_wait_s=120.0, reclaim_min_run_s=60.0, reservation_wait_s=600.0),
        EngineConfig(priority_preemption=True, reservation_wait_s=600.0),
    ):
        for result in _cycles(config):  # (its stats say how long it took: left out)
            decided = (result.admissions, result.preemptions, result.pending, result.reservations)
            digest.update(repr(decided).encode())
    return digest.hexdigest()


def _cycles(config: EngineConfig) -> list[CycleResult]:
    rng = random.Random(20261206)
    tenants = [Tenant("org")]
    quotas = [Quota("org", "H100", 96), Quota("org", "A100", 32)]
    for d in range(2):
        tenants.append(Tenant(f"dept-{d}", "org"))
        for t in range(5):
            team = f"dept-{d}-team-{t}"
            tenants.append(Tenant(team, f"dept-{d}", rng.choice([1.0, 2.0])))
            limit = rng.choice([None, 0, 8, 16])
            lend = rng.choice([None, 2])
            quotas.append(Quota(team, "H100", 8, borrow_limit=limit, lend_limit=lend))
            quotas.append(Quota(team, "A100", 3, borrow_limit=rng.choice([None, 4])))
    teams = [t.id for t in tenants if "-team-" in t.id]
    nodes = [Node(f"h100-{i:02d}", {"H100": 8}, None, f"nvl-{i // 4}") for i in range(12)]
    nodes += [Node(f"a100-{i:02d}", {"A100": 8}) for i in range(4)]
    snapshot = ClusterSnapshot(
        now=100_000.0,
        tenants=tuple(tenants),
        flavours=(Flavour("H100"), Flavour("A100", 0.6)),
        quotas=tuple(quotas),
        nodes=tuple(nodes),
        usage_history={t: rng.uniform(0, 50) for t in teams},
    )
    engine = AdmissionEngine(config)
    results = []
    serial = 0
    for cycle in range(12):
        # half the teams fill the cluster first; the others' work arrives later and
        # reclaims its guarantee
        arriving = teams[::2] if cycle == 0 else teams
        arrivals = []
        for _ in range(80 if cycle == 0 else 15):
            serial += 1
            arrivals.append(_workload(f"w{serial:04d}", rng.choice(arriving), rng, snapshot.now))
        snapshot = replace(snapshot, pending=snapshot.pending + tuple(arrivals))
        result = engine.run_cycle(snapshot)
        results.append(result)
        snapshot = apply_result(snapshot, result)
        ended = {r.id for r in snapshot.running if r.elastic_of is None and rng.random() < 0.15}
        snapshot = replace(
            snapshot,
            now=snapshot.now + 150.0,
            running=tuple(
                r for r in snapshot.running if r.id not in ended and r.elastic_of not in ended
            ),
        )
    return results


def _workload(wid: str, team: str, rng: random.Random, now: float) -> PendingWorkload:
    pods, per_pod, topology = rng.choice(
        [(1, 1, Topology.NONE), (1, 2, Topology.NONE), (1, 4, Topology.ONE_NODE),
         (1, 8, Topology.ONE_NODE), (2, 8, Topology.ONE_DOMAIN), (3, 2, Topology.NONE)]
    )  # fmt: skip
    flavours = rng.choice([("H100",), ("A100",), ("H100", "A100")])
    pod_set = PodSet(pods, per_pod, flavours)
    if rng.random() < 0.25:  # elastic: up to two more pods once its core runs
        pod_set = replace(pod_set, count=pods + rng.randint(1, 2), min_count=pods)
    workload = PendingWorkload(
        id=wid,
        tenant_id=team,
        pod_sets=(pod_set,),
        priority=rng.choice([0, 0, 50, 100]),
        submitted_at=now - rng.uniform(0, 3600.0),
        topology=topology,
        gang=pods > 1,
        max_run_time_s=rng.choice([None, 1800.0, 7200.0]),
        preemptible=rng.random() > 0.1,
    )
    return core_of(workload) if pod_set.min_count is not None else workload


def test_the_compiled_engine_decides_exactly_as_the_interpreted_one() -> None:
    if not _native.active:
        pytest.skip("the engine is not compiled here (make native); CI requires it")
    here = decisions_digest()
    interpreted = subprocess.run(
        [
            sys.executable,
            "-c",
            "from scheduler_bridge.admission import _native\n"
            "from tests.admission.test_native import decisions_digest\n"
            "print(_native.active, decisions_digest())",
        ],
        cwd=REPOSITORY,
        env={**os.environ, _native.ENGINE_VARIABLE: "python"},
        capture_output=True,
        text=True,
        check=True,
    )
    active, there = interpreted.stdout.split()
    assert active == "False"  # the interpreter's run, whatever this process runs
    assert here == there
