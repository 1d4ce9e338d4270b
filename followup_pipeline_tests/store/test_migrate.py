"""Migrations: ordered, recorded, idempotent, safe to run twice at once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import psycopg

from followup_pipeline.store.embedded import _bin_path
from followup_pipeline.store.migrate import available_migrations, current_version, migrate


def _schema_dump(url: str) -> str:
    """The ``followup`` schema as pg_dump prints it, without the lines that name the database."""
    dump = subprocess.run(
        [str(_bin_path() / "pg_dump"), "--schema-only", "--schema=followup", "--no-owner", url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return "\n".join(
        line
        for line in dump.splitlines()
        if not line.startswith(("--", "\\restrict", "\\unrestrict"))
    )


def test_migrate_fresh_and_stepwise_end_in_same_schema(
    database_factory: Callable[..., str],
) -> None:
    fresh, stepwise = database_factory(), database_factory()
    migrate(fresh)
    for migration in available_migrations():
        migrate(stepwise, target=migration.version)
        assert current_version(stepwise) == migration.version
    assert _schema_dump(fresh) == _schema_dump(stepwise)
    assert "CREATE TABLE followup.watches" in _schema_dump(fresh)


def test_migrate_second_run_is_a_noop(database_factory: Callable[..., str]) -> None:
    url = database_factory()
    first = migrate(url)
    assert [m.version for m in first] == [m.version for m in available_migrations()]
    assert migrate(url) == []
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT count(*) FROM followup.schema_migrations").fetchone()
    assert rows == (len(available_migrations()),)


def test_migrate_two_commands_at_once_end_with_one_schema(
    database_factory: Callable[..., str],
) -> None:
    url = database_factory()
    env = {**os.environ, "FOLLOWUP_DATABASE_URL": url}
    command = [sys.executable, "-m", "followup_pipeline.cli", "migrate"]
    runs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    applied = [out.decode().count("applied ") for out, _ in outputs]
    assert sorted(applied) == [0, len(available_migrations())]
    assert current_version(url) == available_migrations()[-1].version


def test_migrations_are_numbered_without_gaps() -> None:
    versions = [m.version for m in available_migrations()]
    assert versions == list(range(1, len(versions) + 1))
