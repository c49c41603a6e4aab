"""The import graph stays a house people can live in: no module imports one that imports
it back, however long the loop. (Which way apps may depend, and which cores stay free of
Django, are import-linter contracts in pyproject.toml, run by `make lint`.)"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("config", "dashboard", "billing", "scheduler_bridge", "tenants", "i18n")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Groups of modules that import each other in a loop (strongly connected
    components of two or more modules; Tarjan's algorithm, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(modules)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if child < len(edges[node]):
                work.append((node, child + 1))
                target = edges[node][child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return cycles


def test_no_module_of_the_project_is_part_of_an_import_cycle() -> None:
    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_a_loop_of_three() -> None:
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z", "a.w"):
        graph.add_module(name)
    for importer, imported in [("a.x", "a.y"), ("a.y", "a.z"), ("a.z", "a.x"), ("a.w", "a.x")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["a.x", "a.y", "a.z"]]
