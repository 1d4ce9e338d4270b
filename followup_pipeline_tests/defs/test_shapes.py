"""The shape of defs/ and store/: typed rows in every signature, no shared mutable context."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import followup_pipeline

PACKAGE = Path(followup_pipeline.__file__).parent
#: Annotations that mean "a row as a dict": what no signature in defs/ or store/ may take or give.
#: (``RunCounts``, a run's business counts for Dagster's metadata, is no row.)
UNTYPED_ROWS = ("dict[str, Any]", "Dict[str, Any]", "Mapping[str, Any]", "DictRow", "dict_row")


def _functions(
    tree: ast.AST, owner: str | None = None
) -> Iterator[tuple[str | None, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function, nested ones included, with the name of the class it is a method of."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, node.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield owner, node
            yield from _functions(node, None)
        else:
            yield from _functions(node, owner)


def _annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, ast.expr]]:
    args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
    found = [(a.arg, a.annotation) for a in args if a.annotation is not None]
    return found + ([("return", node.returns)] if node.returns is not None else [])


def _names(annotation: ast.expr) -> set[str]:
    """Every name an annotation mentions, in string annotations too."""
    names = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names |= _names(ast.parse(node.value, mode="eval").body)
    return names


def untyped_rows(source: str) -> list[str]:
    """``function(annotation)`` for each signature that takes or gives rows as dicts."""
    return [
        f"{node.name}({ast.unparse(annotation)})"
        for _, node in _functions(ast.parse(source))
        for _, annotation in _annotations(node)
        if any(marker in ast.unparse(annotation) for marker in UNTYPED_ROWS)
    ]


def context_parameters(source: str, mutable: set[str]) -> list[str]:
    """``function(parameter: Type)`` for each parameter whose type is a mutable dataclass; a
    class may take another of its own kind (a tally adds another's counts)."""
    return [
        f"{node.name}({arg}: {name})"
        for owner, node in _functions(ast.parse(source))
        for arg, annotation in _annotations(node)
        if arg != "return"
        for name in sorted(_names(annotation) & mutable)
        if name != owner
    ]


def _sources(folder: str) -> dict[str, str]:
    paths = sorted((PACKAGE / folder).rglob("*.py"))
    return {str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8") for p in paths}


def _mutable_dataclasses() -> set[str]:
    """The names of the non-frozen dataclasses defined in followup_pipeline.defs and .engine."""
    found = set()
    modules = [
        info
        for name in ("followup_pipeline.defs", "followup_pipeline.engine")
        for package in [importlib.import_module(name)]
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
    ]
    for info in modules:
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and value.__module__ == module.__name__
                and dataclasses.is_dataclass(value)
                and not value.__dataclass_params__.frozen  # type: ignore[attr-defined]
            ):
                found.add(value.__name__)
    return found


def test_shapes_checks_catch_what_they_are_for() -> None:
    source = (
        "def outer(x: int) -> None:\n"
        "    def inner(t: 'Tally | None', rows: list[dict[str, Any]]) -> Mapping[str, Any]: ...\n"
        "class Tally:\n"
        "    def add(self, other: Tally) -> Tally: ...\n"
    )
    assert untyped_rows(source) == [
        "inner(list[dict[str, Any]])",
        "inner(Mapping[str, Any])",
    ]
    assert context_parameters(source, {"Tally"}) == ["inner(t: Tally)"]


def test_shapes_no_signature_in_defs_or_store_takes_or_returns_dict_rows() -> None:
    sources = {**_sources("defs"), **_sources("engine"), **_sources("store")}
    assert len(sources) > 20
    found = [f"{path}: {hit}" for path, text in sources.items() for hit in untyped_rows(text)]
    assert found == []


def test_shapes_no_function_in_defs_takes_a_mutable_context() -> None:
    mutable = _mutable_dataclasses()
    assert {"Tally", "Resets"} <= mutable  # the check sees the mutable ones that exist
    found = [
        f"{path}: {hit}"
        for path, text in {**_sources("defs"), **_sources("engine")}.items()
        for hit in context_parameters(text, mutable)
    ]
    assert found == []
