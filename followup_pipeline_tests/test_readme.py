"""The README's layout section names every folder and module of the package."""

from __future__ import annotations

import re
from pathlib import Path

import followup_pipeline

PACKAGE = Path(followup_pipeline.__file__).parent
#: Folders whose modules the layout sums up in a phrase instead of naming each one.
SUMMED_UP = {"sandbox", "migrations"}


def _layout(repo_root: Path) -> str:
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    start = text.index("## Layout")
    return text[start : text.index("\n## ", start + 1)]


def test_readme_layout_names_every_folder_and_module(repo_root: Path) -> None:
    layout = _layout(repo_root)
    missing = []
    for path in sorted(PACKAGE.rglob("*")):
        relative = path.relative_to(PACKAGE)
        if "__pycache__" in relative.parts or path.name in ("__init__.py", "py.typed"):
            continue
        if path.is_dir():
            if f"{path.name}/" not in layout:
                missing.append(f"{relative}/")
        elif (
            path.suffix == ".py" and not SUMMED_UP & set(relative.parts) and path.name not in layout
        ):
            missing.append(str(relative))
    assert missing == []


def test_readme_layout_names_no_module_that_is_gone(repo_root: Path) -> None:
    named = set(re.findall(r"\b([a-z_]+\.py)\b", _layout(repo_root)))
    present = {path.name for path in PACKAGE.rglob("*.py")}
    assert named
    assert sorted(named - present) == []
