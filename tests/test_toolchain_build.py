"""What decides that a toolchain module is built again."""

from __future__ import annotations

from pathlib import Path

from toolchain import build


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
