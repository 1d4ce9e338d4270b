"""Named SQL queries, kept in ``queries/*.sql`` and loaded once at import.

Each query starts with a ``-- name: <name>`` line, followed by comment lines that describe it,
then the statement, with named ``%(param)s`` placeholders. Look one up with ``query("name")``.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import LiteralString

_HEADER = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*$", re.MULTILINE)


@cache
def _all_queries() -> dict[str, LiteralString]:
    found: dict[str, LiteralString] = {}
    folder = resources.files("followup_pipeline.store") / "queries"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text(encoding="utf-8")
        headers = list(_HEADER.finditer(text))
        for index, header in enumerate(headers):
            end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
            name = header[1]
            if name in found:
                raise RuntimeError(f"query {name!r} is defined twice")
            # Our own packaged files: a trusted, constant source of SQL text.
            found[name] = text[header.end() : end].strip()
    return found


def query(name: str) -> LiteralString:
    """The SQL of the query called ``name``."""
    try:
        return _all_queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in store/queries/*.sql") from None


def query_names() -> list[str]:
    """Every query name, for tests and tooling."""
    return sorted(_all_queries())
