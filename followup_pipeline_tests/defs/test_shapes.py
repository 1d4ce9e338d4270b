"""The shape of defs/ and store/: typed rows in every signature, no shared mutable context."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
from pathlib import Path

import pytest

import followup_pipeline

PACKAGE = Path(followup_pipeline.__file__).parent
#: Annotations that mean "a row as a dict": what no signature in defs/ or store/ may take or give.
UNTYPED_ROWS = ("dict[str, Any]", "Mapping[str, Any]", "DictRow", "dict_row")


def _modules(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def _signatures(path: Path) -> list[tuple[str, str]]:
    """(function, annotation) for every annotated parameter and return of every function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            annotations = [a.annotation for a in args if a.annotation is not None]
            if node.returns is not None:
                annotations.append(node.returns)
            found += [(node.name, ast.unparse(a)) for a in annotations]
    return found


@pytest.mark.parametrize("folder", ["defs", "store"])
def test_shapes_no_signature_takes_or_returns_dict_rows(folder: str) -> None:
    paths = _modules(folder)
    assert len(paths) > 5
    untyped = [
        f"{path.relative_to(PACKAGE)}: {name}({annotation})"
        for path in paths
        for name, annotation in _signatures(path)
        if any(marker in annotation for marker in UNTYPED_ROWS)
    ]
    assert untyped == []


def _mutable_dataclasses() -> dict[str, type]:
    """Every non-frozen dataclass defined in followup_pipeline.defs."""
    found: dict[str, type] = {}
    package = importlib.import_module("followup_pipeline.defs")
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and value.__module__ == module.__name__
                and dataclasses.is_dataclass(value)
                and not value.__dataclass_params__.frozen  # type: ignore[attr-defined]
            ):
                found[value.__name__] = value
    return found


def test_shapes_no_function_in_defs_takes_a_mutable_context() -> None:
    mutable = _mutable_dataclasses()
    assert "Tally" in mutable  # the check sees the mutable ones that exist
    taken = []
    for path in _modules("defs"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in [None, *[n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]]:
            body = tree.body if cls is None else cls.body
            for node in body:
                if not isinstance(node, ast.FunctionDef):
                    continue
                for arg in [*node.args.args, *node.args.kwonlyargs]:
                    name = ast.unparse(arg.annotation).strip("'\"") if arg.annotation else ""
                    # A class may take another of its own kind (a tally adds another's counts).
                    if name in mutable and (cls is None or cls.name != name):
                        taken.append(f"{path.relative_to(PACKAGE)}: {node.name}({arg.arg}: {name})")
    assert taken == []
