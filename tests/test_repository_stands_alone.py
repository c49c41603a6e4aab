"""A fresh clone is all a user gets: no tracked file may read or cite a path outside it.

What counts as outside: a folder beside the clone (the shared folder one level up, however
it is spelled), a handbook that is not in the repository (the upper-case design,
reference, style and benchmark pages; ours live in ``docs/`` in lower case), an absolute
path of a build machine (the work folder, a home directory) and, in product code, a
temporary folder. Container
manifests may name ``/tmp`` because it is the container's own scratch space, not a path
of the machine that built them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Built from pieces so that this file does not match its own rules.
_UP = re.escape("..") + "/"
OUTSIDE_EVERYWHERE: dict[str, re.Pattern[str]] = {
    "a folder beside the clone": re.compile(
        _UP + r"shared\b|parents?(\[\d+\])?\s*/\s*[\"']shared[\"']"
    ),
    "a handbook the repository does not ship": re.compile(
        r"\b(" + "REFER" + "ENCE|DES" + "IGN|STY" + "LE|BENCH" + r"MARKS)\.md\b"
    ),
    "an absolute path of a build machine": re.compile(
        r"(?<![\w.:/-])/(" + "work|home/[\\w.-]+|root|Users/[\\w.-]+" + r")/[\w.-]"
    ),
}
TEMPORARY_FOLDER = re.compile(r"(?<![\w.:/-])/(" + "tmp|var/tmp" + r")/[\w.-]")
# Files where /tmp means something other than the building machine's folder.
TEMPORARY_FOLDER_ALLOWED = ("tests/", "platform/", "docker-compose.yml", ".gitignore")
BINARY_SUFFIXES = {".png", ".jpg", ".ico", ".woff", ".woff2", ".mo", ".xlsx", ".pdf", ".gz"}


def offences(path: str, text: str) -> list[str]:
    """Each line of `text` that reaches outside the repository, as 'path:line: why'."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for why, pattern in OUTSIDE_EVERYWHERE.items():
            if pattern.search(line):
                found.append(f"{path}:{number}: {why}: {line.strip()}")
        if not path.startswith(TEMPORARY_FOLDER_ALLOWED) and TEMPORARY_FOLDER.search(line):
            found.append(f"{path}:{number}: a temporary folder in product code: {line.strip()}")
    return found


def tracked_files() -> list[str]:
    """What a clone holds: git's list when this is a checkout, else every file but caches."""
    if (ROOT / ".git").exists():
        listing = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
        )
        return [name for name in listing.stdout.split("\0") if name]
    skip = {".venv", "node_modules", "staticfiles", "__pycache__", ".mypy_cache", ".ruff_cache"}
    return [
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*")
        if path.is_file() and not skip.intersection(path.relative_to(ROOT).parts)
    ]


def test_no_tracked_file_reads_or_cites_a_path_outside_the_repository() -> None:
    found: list[str] = []
    for name in tracked_files():
        path = ROOT / name
        if path.suffix in BINARY_SUFFIXES or not path.is_file():
            continue
        found += offences(name, path.read_text(encoding="utf-8", errors="replace"))
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    "path, line",
    [
        ("scheduler_bridge/replay/x.py", 'TRACES = "' + ".." + '/shared/traces"'),
        ("benchmarks/replay.py", 'TRACES = ROOT.parent / "' + 'shared" / "traces"'),
        ("tests/replay/test_replay.py", 'TRACE = Path(__file__).parents[3] / "' + 'shared"'),
        ("billing/charging/pricing.py", "# see " + "REFERENCE" + ".md section 6"),
        ("billing/apps.py", "# see " + "DESIGN" + ".md"),
        ("scheduler_bridge/inventory/catalogue.py", "see /" + "work/shared/tables"),
        ("config/settings/base.py", 'KUBECONFIG = "/' + 'home/alice/.kube/config"'),
        ("config/settings/base.py", 'KUBECONFIG = "/' + 'root/.kube/config"'),
        ("billing/statements/exports.py", 'OUT = "/' + 'tmp/statements"'),
    ],
)
def test_the_guard_catches_each_kind_of_outside_path(path: str, line: str) -> None:
    assert offences(path, line)


@pytest.mark.parametrize(
    "path, line",
    [
        ("billing/charging/pricing.py", "# MIG pricing: docs/chargeback.md#mig-pricing"),
        ("scheduler_bridge/replay/trace.py", 'SHIPPED = Path(__file__).parents[2] / "data"'),
        ("docker-compose.yml", 'command: ["celery", "beat", "--schedule", "/' + 'tmp/beat"]'),
        ("tests/gateways/test_simulated.py", 'gateway_for("simulated", kubeconfig="/' + 'tmp/x")'),
        ("config/urls.py", 'path("api/v1/clusters/", include(router.urls))'),
        ("README.md", "see https://github.com/kubernetes/kubernetes/blob/master/pkg/x.go"),
        ("scheduler_bridge/tasks.py", "from celery import shared_task"),
    ],
)
def test_the_guard_lets_paths_inside_the_repository_pass(path: str, line: str) -> None:
    assert offences(path, line) == []
