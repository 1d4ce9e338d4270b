"""``followup restore FILE [--force]``: a file of ``followup backup`` loaded into the machine at
``FOLLOWUP_HOME``, its app schema migrated to the latest version and Dagster's storage upgraded.

A machine that holds data is left alone unless ``--force``; a running one always. A restore that
fails halfway leaves the app schema as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psycopg import sql

from followup_pipeline.commands.archive import (
    APP_DUMP,
    DAGSTER_DUMP,
    BackupError,
    Database,
    holds,
    machine_databases,
    pg_tool,
    read_archive,
    run_tool,
)
from followup_pipeline.engine.work import after_migrate
from followup_pipeline.machine import NoInstance, dagster_home, install_dagster_home, open_instance
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.db import SCHEMA, connect, translated_errors
from followup_pipeline.store.migrate import current_version, migrate
from followup_pipeline.store.queries import query
from followup_pipeline.store.retention import dagster_run_count, machine_counts


def _sessions(database: Database) -> int:
    """Other sessions on ``database``: a running machine (its daemon, webserver, ingress)."""
    with translated_errors(), database.connect() as conn:
        row = conn.execute(query("retention_other_sessions")).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def _schema_set_aside(url: str) -> Iterator[None]:
    """Rename schema ``followup`` out of the way for the block; drop it when the block succeeds,
    put it back (dropping what the block restored) when it fails. So a restore that fails
    halfway leaves the machine as it was, and one that succeeds leaves no table of the old
    schema behind (e.g. of a newer migration the backup does not have)."""
    aside = f"{SCHEMA}_before_restore_{datetime.now(UTC):%Y%m%d%H%M%S}"
    with translated_errors(), connect(url, autocommit=True) as conn:
        present = conn.execute(query("retention_schema_exists"), {"schema": SCHEMA}).fetchone()
        moved = bool(present and present["present"])
        if moved:
            conn.execute(
                sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
                    sql.Identifier(SCHEMA), sql.Identifier(aside)
                )
            )
    try:
        yield
    except BaseException:
        with translated_errors(), connect(url, autocommit=True) as conn, conn.transaction():
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
            if moved:
                conn.execute(
                    sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
                        sql.Identifier(aside), sql.Identifier(SCHEMA)
                    )
                )
        raise
    if moved:
        with translated_errors(), connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(aside)))


def run_restore(args: argparse.Namespace, settings: Settings) -> int:
    """The handler of ``followup restore`` (``backup.py`` adds its parser beside ``backup``)."""
    source: Path = args.file.expanduser().absolute()
    if not source.is_file():
        print(f"followup: FILE {source}: no such file", file=sys.stderr)
        return 1
    settings.home.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix=".followup-restore-", dir=settings.home) as tmp:
            return _restore_from(
                Path(tmp), source, settings, force=args.force, by=args.by, reason=args.reason
            )
    except BackupError as error:
        print(f"followup: {error}", file=sys.stderr)
        return 1


def _restore_from(
    folder: Path, source: Path, settings: Settings, *, force: bool, by: str, reason: str | None
) -> int:
    manifest = read_archive(source, folder)
    app_url, app, storage = machine_databases(settings, create=True)
    with translated_errors(), connect(app_url, autocommit=True) as conn:
        counts = machine_counts(conn) or {}
    with translated_errors(), storage.connect() as conn:
        runs = dagster_run_count(conn) or 0
    if (any(counts.values()) or runs) and not force:
        held = holds({**counts, "Dagster runs": runs})
        print(
            f"followup: the machine at {settings.home} has data ({held}); restoring would "
            "replace it: stop the machine and add --force to overwrite it",
            file=sys.stderr,
        )
        return 1
    busy = {db.label: n for db in (app, storage) if (n := _sessions(db))}
    if busy:
        which = ", ".join(f"{n} on the {label} database" for label, n in busy.items())
        raise BackupError(f"the machine is running ({which} other session(s)): stop it first")
    pg_restore = pg_tool(settings, "pg_restore")
    flags = [
        "--clean",
        "--if-exists",
        "--no-owner",
        "--no-privileges",
        "--single-transaction",
        "--exit-on-error",
        "--no-password",
    ]
    with _schema_set_aside(app_url):
        run_tool(pg_restore, [*flags, str(folder / APP_DUMP)], app, "restore")
        run_tool(pg_restore, [*flags, str(folder / DAGSTER_DUMP)], storage, "restore")
    made = manifest.get("created_at", "?")
    print(
        f"restored {source} (made {made} by followup {manifest.get('package_version', '?')}, "
        f"schema version {manifest.get('schema_version', '?')})"
    )
    applied = migrate(app_url)
    for migration in applied:
        print(f"applied {migration.version:04d}_{migration.name}")
    after_migrate(app_url, settings, [m.version for m in applied])
    print(f"schema at version {current_version(app_url)}")
    with translated_errors(), connect(app_url, autocommit=True) as conn:
        now = machine_counts(conn) or {}
    print(f"  {'followup':<9} {holds(now)}")
    restored_runs = _dagster_after_restore(settings, manifest)
    print(f"  {'dagster':<9} {restored_runs} runs (Dagster's instance opens)")
    with translated_errors(), connect(app_url, autocommit=True) as conn, conn.transaction():
        audit.record(
            conn,
            actor=by,
            action="restore",
            detail=f"{source.name}, made {made}: {holds(now)}",
            reason=reason,
        )
    expected = manifest.get("counts", {})
    found = {**now, "dagster_runs": restored_runs}
    differ = [k for k, n in expected.items() if found.get(k) != n]
    if differ:
        print(f"warning: the backup's manifest counted {holds(expected)}; found {holds(found)}")
    return 0


def _dagster_after_restore(settings: Settings, manifest: dict[str, Any]) -> int:
    """Open the restored instance (installing ``DAGSTER_HOME`` on a new machine), upgrade its
    storage when the backup was made by another Dagster, and count its runs."""
    if not (dagster_home(settings) / "dagster.yaml").exists():
        install_dagster_home(settings)
    try:
        instance = open_instance(settings)
    except NoInstance as error:
        raise BackupError(f"restored, but {error}") from error
    with instance:
        made_by = manifest.get("dagster_version")
        if made_by != importlib.metadata.version("dagster"):
            print(f"upgrading Dagster's storage (the backup was made by Dagster {made_by})")
            try:
                instance.upgrade()
            except Exception as error:
                raise BackupError(
                    f"restored, but Dagster's storage could not be upgraded: {error}"
                ) from error
        return int(instance.get_runs_count())
