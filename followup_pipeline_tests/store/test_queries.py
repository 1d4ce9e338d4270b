"""Every named query parses in a real, migrated Postgres."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from followup_pipeline.store.queries import query, query_names


@pytest.mark.parametrize("name", query_names())
def test_queries_prepare_in_postgres(db: psycopg.Connection[Any], name: str) -> None:
    text = query(name).rstrip(";")
    statement = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    if statement.upper().startswith("SET "):  # a utility statement cannot be prepared: run it
        with db.transaction():
            db.execute(text.encode())
        return
    # PREPARE checks syntax, tables and columns without running the statement.
    params = sorted(set(re.findall(r"%\((\w+)\)s", text)))
    numbered = text
    for index, param in enumerate(params, start=1):
        numbered = numbered.replace(f"%({param})s", f"${index}")
    db.execute(f"PREPARE probe AS {numbered}".encode())
    db.execute("DEALLOCATE probe")


def test_queries_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="no query named 'nope'"):
        query("nope")
