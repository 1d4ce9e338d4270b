"""The table of where the sources' names live (docs/architecture.md) cites only names the code has.

Its column *Here* is a list of items ``kind `name`, `name`; kind `name```. Each kind is checked
where the code keeps it: tables, columns and their allowed values in ``store/schema.sql`` (a
migrated database's dump, held to the migrations by ``store/test_migrate.py``), Dagster's names
in the loaded Definitions, settings in the settings model, modules and files in the package,
Python names by import (a class or function in the module that defines it), commands in the
``followup`` parser.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import followup_pipeline
from followup_pipeline.settings import ENV_PREFIX, Settings, load_settings
from followup_pipeline_tests.test_docs import _env_names

PACKAGE = Path(followup_pipeline.__file__).parent
SCHEMA = PACKAGE / "store" / "schema.sql"
#: The section's heading, whatever its number.
HEADING = re.compile(r"^## (?:\d+\. )?Where the sources' names live$", re.MULTILINE)
HERE = "Here"
#: What may stand before the names of an item, in the singular (a plural adds ``s`` or ``es``).
KINDS = (
    "table",
    "column",
    "value",
    "job",
    "op",
    "schedule",
    "sensor",
    "resource",
    "setting",
    "module",
    "file",
    "constant",
    "function",
    "class",
    "method",
    "command",
)
KIND_WORDS = {word: kind for kind in KINDS for word in (kind, f"{kind}s", f"{kind}es")}
ITEM = re.compile(r"([a-z]+) (`[^`]+`(?:, `[^`]+`)*)")
SPAN = re.compile(r"`([^`]+)`")
#: A value as ``table.column = value`` or ``table.column in (value, value)``.
VALUE = re.compile(r"(\w+)\.(\w+) (?:= (\w+)|in \((\w+(?:, \w+)*)\))")
CREATE_TABLE = re.compile(r"^CREATE TABLE followup\.(\w+) \((.*?)^\);", re.MULTILINE | re.DOTALL)
COLUMN = re.compile(r'^    "?(\w+)"? ', re.MULTILINE)
ANY_OF = re.compile(r"CHECK \(\((\w+) = ANY \(ARRAY\[([^\]]*)\]\)\)\)")


@dataclass(frozen=True)
class Citation:
    """One name of the column *Here*, of one kind, in the row of ``term``."""

    term: str
    kind: str
    name: str


@dataclass(frozen=True)
class Table:
    """The section's table: its citations, and the cells that do not parse as a list of items."""

    rows: int
    citations: tuple[Citation, ...]
    malformed: tuple[str, ...]

    def of(self, *kinds: str) -> list[Citation]:
        """The citations of ``kinds``."""
        return [citation for citation in self.citations if citation.kind in kinds]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@cache
def _table(repo_root: Path) -> Table:
    text = (repo_root / "docs" / "architecture.md").read_text(encoding="utf-8")
    heading = HEADING.search(text)
    assert heading, "docs/architecture.md has no section 'Where the sources' names live'"
    end = text.find("\n## ", heading.end())
    section = text[heading.end() : end if end != -1 else len(text)]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header, rows = _cells(lines[0]), lines[2:]
    here, term = header.index(HERE), header.index("Term there")
    citations, malformed = [], []
    for row in rows:
        cells = _cells(row)
        if len(cells) != len(header):
            malformed.append(row)
            continue
        for item in cells[here].split("; "):
            match = ITEM.fullmatch(item)
            if not match or match[1] not in KIND_WORDS:
                malformed.append(f"{cells[term]}: {item}")
                continue
            kind = KIND_WORDS[match[1]]
            citations += [Citation(cells[term], kind, name) for name in SPAN.findall(match[2])]
    return Table(len(rows), tuple(citations), tuple(malformed))


def _schema() -> dict[str, dict[str, set[str]]]:
    """Every table of the schema: its columns, each with the values its check allows (or none)."""
    tables: dict[str, dict[str, set[str]]] = {}
    for name, body in CREATE_TABLE.findall(SCHEMA.read_text(encoding="utf-8")):
        columns: dict[str, set[str]] = {
            column: set() for column in COLUMN.findall(body) if column != "CONSTRAINT"
        }
        for column, values in ANY_OF.findall(body):
            columns[column] |= set(re.findall(r"'([^']*)'::text", values))
        tables[name] = columns
    return tables


def _missing_in_schema(citation: Citation, tables: dict[str, dict[str, set[str]]]) -> bool:
    if citation.kind == "table":
        return citation.name not in tables
    if citation.kind == "column":
        table, _, column = citation.name.partition(".")
        return column not in tables.get(table, {})
    value = VALUE.fullmatch(citation.name)
    if not value:
        return True
    table, column, one, several = value.groups()
    allowed = tables.get(table, {}).get(column, set())
    return not set((several or one).split(", ")) <= allowed


def _python_object(dotted: str) -> tuple[str, object]:
    """The module and the object at ``dotted`` under the package: the longest module that
    imports, then attributes."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module = ".".join(["followup_pipeline", *parts[:split]])
        try:
            found: object = importlib.import_module(module)
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute)
        return module, found
    raise ModuleNotFoundError(dotted)


#: Whether an object is of the kind the table says (a class or function where it is defined, not
#: where it is imported).
PYTHON_KINDS: dict[str, Callable[[object], bool]] = {
    "class": inspect.isclass,
    "function": inspect.isfunction,
    "method": inspect.isfunction,
    "constant": lambda found: not callable(found),
}


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> set[str]:
    """Every command line of ``parser`` and its sub-commands, as words joined by spaces."""
    found = {" ".join(words)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _commands(sub, (*words, name))
    return found


def test_names_table_cells_are_lists_of_known_kinds(repo_root: Path) -> None:
    table = _table(repo_root)
    assert table.rows >= 25
    assert list(table.malformed) == []
    assert {citation.kind for citation in table.citations} == set(KINDS)


def test_names_table_tables_columns_and_values_exist_in_schema(repo_root: Path) -> None:
    tables = _schema()
    assert {"watches", "actions", "lms_reminders"} <= set(tables)
    cited = _table(repo_root).of("table", "column", "value")
    assert cited
    assert [c for c in cited if _missing_in_schema(c, tables)] == []


def test_names_table_settings_exist_in_settings_model(repo_root: Path) -> None:
    variables = {variable for _, variable in _env_names(Settings, ENV_PREFIX)}
    cited = _table(repo_root).of("setting")
    assert cited
    assert [c for c in cited if c.name not in variables] == []


def test_names_table_modules_and_files_exist(repo_root: Path) -> None:
    cited = _table(repo_root).of("module", "file")
    assert cited
    assert [c for c in cited if not (PACKAGE / c.name).is_file()] == []


def test_names_table_python_names_import(repo_root: Path) -> None:
    cited = _table(repo_root).of(*PYTHON_KINDS)
    assert cited
    missing = []
    for citation in cited:
        try:
            module, found = _python_object(citation.name)
        except (ImportError, AttributeError):
            missing.append(citation)
            continue
        defined_here = citation.kind == "constant" or getattr(found, "__module__", "") == module
        if not (PYTHON_KINDS[citation.kind](found) and defined_here):
            missing.append(citation)
    assert missing == []


def test_names_table_dagster_names_resolve_in_definitions(repo_root: Path) -> None:
    from followup_pipeline.defs import build_definitions  # the costly import: here alone

    defs = build_definitions(load_settings(env_file=False))
    repository = defs.get_repository_def()
    jobs = repository.get_all_jobs()
    names = {
        "job": {job.name for job in jobs},
        "op": {node.name for job in jobs for node in job.all_node_defs},
        "schedule": {schedule.name for schedule in repository.schedule_defs},
        "sensor": {sensor.name for sensor in repository.sensor_defs},
        "resource": set(defs.resources or {}),
    }
    cited = _table(repo_root).of(*names)
    assert cited
    assert [c for c in cited if c.name not in names[c.kind]] == []


def test_names_table_commands_exist_in_parser(repo_root: Path) -> None:
    from followup_pipeline.cli import build_parser  # imports every command module

    commands = _commands(build_parser(), ("followup",))
    cited = _table(repo_root).of("command")
    assert cited
    assert [c for c in cited if c.name not in commands] == []
