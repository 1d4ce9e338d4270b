"""The package's import graph: no cycle, no module over its size, no private Dagster import."""

from __future__ import annotations

import re
from pathlib import Path

import grimp

import followup_pipeline

PACKAGE = Path(followup_pipeline.__file__).parent
#: The most lines a module of the package may have; the registrar has a tighter bound.
MAX_LINES = 400
MAX_REGISTRAR_LINES = 300
PRIVATE_DAGSTER = re.compile(r"^\s*(?:from|import)\s+dagster\._", re.MULTILINE)


def _cycle(graph: grimp.ImportGraph) -> list[str]:
    """One cycle among the package's modules (a package's ``__init__`` is a module too), or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        stack.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if state.get(imported) == 1:
                return [*stack[stack.index(imported) :], imported]
            if imported not in state and (found := visit(imported)):
                return found
        stack.pop()
        state[module] = 2
        return []

    for module in sorted(graph.modules):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_imports_form_no_cycle_between_any_two_modules() -> None:
    graph = grimp.build_graph("followup_pipeline", exclude_type_checking_imports=False)
    assert _cycle(graph) == []


def test_imports_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a")]:
        graph.add_import(importer=importer, imported=imported)
    assert _cycle(graph) == ["p.a", "p.b", "p.c", "p.a"]


def test_imports_no_module_is_over_its_size() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
    assert sizes["defs/register/registrar.py"] <= MAX_REGISTRAR_LINES


def test_imports_no_private_dagster_module() -> None:
    found = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if PRIVATE_DAGSTER.search(path.read_text(encoding="utf-8"))
    ]
    assert found == []
