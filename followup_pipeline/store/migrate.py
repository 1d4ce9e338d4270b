"""Versioned migrations: ``migrations/NNNN_name.sql`` applied in order, under an advisory lock.

Each file runs in its own transaction with ``search_path`` set to the ``followup`` schema, and
is recorded in ``followup.schema_migrations``. Two ``followup migrate`` at once serialise on the
lock; the second finds nothing left to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from psycopg import sql

from followup_pipeline.store.db import SCHEMA, connect, translated_errors

#: pg_advisory_lock key for migrations: the first 8 bytes of sha1("followup.migrate"), signed.
MIGRATION_LOCK_KEY = 0x5840_0F1E_D582_C9C5
_SCHEMA = sql.Identifier(SCHEMA)
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    """The packaged migrations, in version order."""
    folder = resources.files("followup_pipeline.store") / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a version: {versions}")
    return found


def migrate(url: str, *, target: int | None = None) -> list[Migration]:
    """Apply every pending migration up to ``target`` (all when None); return those applied."""
    applied_now: list[Migration] = []
    with translated_errors(), connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(_SCHEMA))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {}.schema_migrations ("
                    " version integer PRIMARY KEY,"
                    " name text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                ).format(_SCHEMA)
            )
            rows = conn.execute(
                sql.SQL("SELECT version FROM {}.schema_migrations").format(_SCHEMA)
            ).fetchall()
            done = {row["version"] for row in rows}
            for migration in available_migrations():
                if migration.version in done or (target is not None and migration.version > target):
                    continue
                with conn.transaction():
                    conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(_SCHEMA))
                    # The file is ours, packaged with the code; bytes skip placeholder parsing.
                    conn.execute(migration.sql.encode("utf-8"))
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {}.schema_migrations (version, name) VALUES (%s, %s)"
                        ).format(_SCHEMA),
                        (migration.version, migration.name),
                    )
                applied_now.append(migration)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    return applied_now


def current_version(url: str) -> int:
    """The highest applied migration, 0 for a fresh database."""
    with translated_errors(), connect(url) as conn:
        exists = conn.execute("SELECT to_regclass(%s) AS t", (f"{SCHEMA}.schema_migrations",))
        row = exists.fetchone()
        if row is None or row["t"] is None:
            return 0
        top = conn.execute(
            sql.SQL("SELECT coalesce(max(version), 0) AS v FROM {}.schema_migrations").format(
                _SCHEMA
            )
        )
        result = top.fetchone()
        return int(result["v"]) if result else 0
