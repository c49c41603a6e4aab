"""What decides that a toolchain module is built again."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain import build, native


def _module(folder: Path) -> build.GoModule:
    return build.GoModule("example", folder, ("tidegate.local/example/cmd",), "v1.0.0")


def test_a_module_is_built_again_when_its_own_go_program_changes(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module tidegate.local/example\n")
    (tmp_path / "go.sum").write_text("")
    program = tmp_path / "cmd" / "main.go"
    program.parent.mkdir()
    program.write_text("package main\n\nfunc main() {}\n")
    before = _module(tmp_path).key
    assert _module(tmp_path).key == before  # unchanged: reused
    program.write_text("package main\n\nfunc main() { println() }\n")
    assert _module(tmp_path).key != before


def test_kueues_module_builds_the_fair_sharing_core_beside_its_performance_test() -> None:
    kueue = next(m for m in build.modules() if m.name == "kueue")
    assert "tidegate.local/toolchain/kueue/fairsharing" in kueue.tools
    assert kueue.binary_name("tidegate.local/toolchain/kueue/fairsharing") == "fairsharing"
    assert "kueue" in build.ON_REQUEST  # a benchmark's, never built by the tests


def test_a_failed_profile_training_falls_back_to_a_build_without_a_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    compiled: list[tuple[str, tuple[str, ...]]] = []

    def compile_(paths, work, name, flags, *, progress, what=""):  # type: ignore[no-untyped-def]
        compiled.append((name, tuple(flags)))
        (work / name).mkdir()
        if any(f.startswith("-fprofile-use") for f in flags):
            raise native.NativeBuildError("coverage mismatch")  # the profile-guided compile
        return work / name

    monkeypatch.setattr(native, "trains_a_profile", lambda: True)
    monkeypatch.setattr(native, "_train", lambda *args: None)
    monkeypatch.setattr(native, "_compile", compile_)
    staging, kind = native._build_kind(["engine.py"], tmp_path, "digest", progress=False)
    assert kind == native.WITHOUT_PROFILE
    assert staging == tmp_path / "build"
    # the half-made profile-guided build was cleared before the plain one went there
    assert [name for name, _ in compiled] == ["build", "build"]
    assert compiled[-1][1] == native.PRIVATE
    assert "building without a profile instead" in capsys.readouterr().err

    monkeypatch.setattr(native, "_compile", lambda paths, work, name, flags, **kw: work / name)
    assert native._build_kind(["engine.py"], tmp_path, "digest", progress=False)[1] == (
        native.PROFILE_GUIDED
    )


def test_no_profile_is_trained_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.PGO_VARIABLE, "0")
    assert not native.trains_a_profile()
