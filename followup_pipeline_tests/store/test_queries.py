"""Every named query prepares in a real, migrated Postgres, with the shape its callers expect."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import psycopg
import pytest

from followup_pipeline.store.queries import query, query_names

_PARAM = re.compile(r"%\((\w+)\)s")
_SET_LOCAL = re.compile(r"^SET LOCAL (\w+) = '([^']*)'$")


def _statement(text: str) -> str:
    """The query without its comment lines and final semicolon."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";")


def test_queries_every_header_is_loaded() -> None:
    folder = resources.files("followup_pipeline.store") / "queries"
    headers = [
        line
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
        for line in entry.read_text(encoding="utf-8").splitlines()
        if line.startswith("-- name:")
    ]
    assert headers, "no query files found"
    assert len(query_names()) == len(headers)


@pytest.mark.parametrize("name", query_names())
def test_queries_prepare_in_postgres(db: psycopg.Connection[Any], name: str) -> None:
    statement = _statement(query(name))
    # Every placeholder is a named %(param)s (a literal % is %%); a stray %s or %(x)d is a bug.
    stray = _PARAM.sub("", statement).replace("%%", "")
    assert "%" not in stray, f"{name}: a placeholder is not %(name)s"
    setting = _SET_LOCAL.match(statement)
    if setting:  # a utility statement cannot be prepared: run it and read the setting back
        with db.transaction():
            db.execute(statement.encode())
            shown = db.execute(f"SHOW {setting[1]}".encode()).fetchone()
        assert shown == {setting[1]: setting[2]}
        return
    # PREPARE checks syntax, tables, columns and types without running the statement.
    params = list(dict.fromkeys(_PARAM.findall(statement)))
    numbered = statement
    for index, param in enumerate(params, start=1):
        numbered = numbered.replace(f"%({param})s", f"${index}")
    db.execute(f"PREPARE probe AS {numbered}".encode())
    try:
        described = db.pgconn.describe_prepared(b"probe")
    finally:
        db.execute("DEALLOCATE probe")
    # Postgres typed one parameter per distinct name: the numbering above is faithful.
    assert described.nparams == len(params), (name, params)
    columns = [(described.fname(i) or b"").decode() for i in range(described.nfields)]
    # A query returns rows exactly when it is a SELECT or has RETURNING ...
    returns_rows = statement.upper().startswith("SELECT") or "RETURNING" in statement.upper()
    assert bool(columns) == returns_rows, (name, columns)
    # ... and dict_row would silently drop a column whose name repeats.
    assert len(set(columns)) == len(columns), (name, columns)


def test_queries_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="no query named 'nope'"):
        query("nope")
