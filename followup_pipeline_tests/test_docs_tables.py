"""docs/architecture.md's tables held against the code: the action kinds and the suppress
reasons (§4) against the ledger's, the capabilities (§7) against ``defs/`` and the contract that
keeps them apart."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import get_args

from followup_pipeline.store.ledger import Kind, SuppressReason

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _first_column(header: str) -> list[str]:
    """The backticked names in the first column of the table whose header row is ``header``."""
    start = ARCHITECTURE.index(header)
    names: list[str] = []
    for line in ARCHITECTURE[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        names.append(line.split("|")[1].strip().strip("`"))
    return names


def test_docs_tables_name_every_action_kind() -> None:
    kinds = _first_column("| Kind | Key | Written by |")
    assert sorted(kinds) == sorted(get_args(Kind))


def test_docs_tables_name_every_suppress_reason() -> None:
    reasons = _first_column("| Reason | Suppressed because |")
    assert sorted(reasons) == sorted(get_args(SuppressReason))


def test_docs_tables_name_every_capability() -> None:
    row = next(line for line in ARCHITECTURE.splitlines() if line.startswith("| `defs/<capab"))
    named = re.search(r"One folder per capability \(([^)]*)\)", row)
    assert named is not None
    listed = sorted(name.strip() for name in named[1].split(","))
    folders = sorted(
        p.name
        for p in (ROOT / "followup_pipeline" / "defs").iterdir()
        if (p / "__init__.py").exists()
    )
    assert listed == folders
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    independent = next(c for c in contracts if c["type"] == "independence")["modules"]
    assert sorted(m.rsplit(".", 1)[1] for m in independent) == folders
