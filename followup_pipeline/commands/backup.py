"""``followup backup FILE`` and ``followup restore FILE [--force]``: the machine's two databases
in one file (``archive.py`` says what it holds), and back (``restore.py``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import tempfile
from datetime import UTC
from pathlib import Path
from typing import Any

from followup_pipeline.clock import build_clock
from followup_pipeline.commands import add_by
from followup_pipeline.commands.archive import (
    APP_DUMP,
    DAGSTER_DUMP,
    FORMAT,
    MANIFEST,
    PACKAGE,
    BackupError,
    holds,
    machine_databases,
    pg_tool,
    run_tool,
    sha256_of,
    size_text,
    write_archive,
)
from followup_pipeline.commands.restore import run_restore
from followup_pipeline.settings import Settings
from followup_pipeline.store.db import SCHEMA, connect, translated_errors
from followup_pipeline.store.migrate import current_version
from followup_pipeline.store.retention import dagster_run_count, machine_counts


def _backup(args: argparse.Namespace, settings: Settings) -> int:
    try:
        return _backup_to(args.file.expanduser().absolute(), settings)
    except BackupError as error:
        print(f"followup: {error}", file=sys.stderr)
        return 1


def _backup_to(target: Path, settings: Settings) -> int:
    """Write the backup at ``target``; 0, or 1 with a message when it cannot."""
    if target.exists():
        print(
            f"followup: FILE {target} exists: a backup never replaces one; name a new file",
            file=sys.stderr,
        )
        return 1
    if not target.parent.is_dir():
        print(f"followup: FILE {target}: folder {target.parent} does not exist", file=sys.stderr)
        return 1
    app_url, app, storage = machine_databases(settings, create=False)
    with translated_errors(), connect(app_url, autocommit=True) as conn:
        counts = machine_counts(conn)
    if counts is None:
        print(
            f"followup: the app database has no schema {SCHEMA!r}: nothing to back up "
            "(run `followup migrate` to create it)",
            file=sys.stderr,
        )
        return 1
    version = current_version(app_url)
    with translated_errors(), storage.connect() as conn:
        runs = dagster_run_count(conn) or 0
        server = conn.info.server_version
    pg_dump = pg_tool(settings, "pg_dump")
    with tempfile.TemporaryDirectory(prefix=".followup-backup-", dir=target.parent) as tmp:
        folder = Path(tmp)
        common = ["--format=custom", "--no-password"]
        run_tool(
            pg_dump, [*common, f"--schema={SCHEMA}", f"--file={folder / APP_DUMP}"], app, "backup"
        )
        run_tool(pg_dump, [*common, f"--file={folder / DAGSTER_DUMP}"], storage, "backup")
        manifest = {
            "format": FORMAT,
            "created_at": build_clock(settings.now).now().astimezone(UTC).isoformat(),
            "schema_version": version,
            "package_version": importlib.metadata.version(PACKAGE),
            "dagster_version": importlib.metadata.version("dagster"),
            "postgres_server_version": server,
            "embedded": settings.database_url is None,
            "counts": {**counts, "dagster_runs": runs},
            "files": {
                name: {"bytes": (folder / name).stat().st_size, "sha256": sha256_of(folder / name)}
                for name in (APP_DUMP, DAGSTER_DUMP)
            },
        }
        write_archive(target, folder, manifest)
    files: dict[str, Any] = manifest["files"]  # type: ignore[assignment]
    print(f"backup written to {target} ({size_text(target.stat().st_size)})")
    print(
        f"  {APP_DUMP:<14} schema {SCHEMA} at version {version}: {holds(counts)} "
        f"({size_text(files[APP_DUMP]['bytes'])})"
    )
    print(
        f"  {DAGSTER_DUMP:<14} Dagster's storage: {runs} runs "
        f"({size_text(files[DAGSTER_DUMP]['bytes'])})"
    )
    print(
        f"  {MANIFEST:<14} {manifest['created_at']}, followup {manifest['package_version']}, "
        f"Dagster {manifest['dagster_version']}"
    )
    return 0


def register(commands: Any) -> None:
    """Add ``backup`` and ``restore``."""
    backup = commands.add_parser(
        "backup",
        help="dump the app and Dagster databases into one file",
        description=(
            "Write FILE: a tar archive of pg_dump --format=custom dumps of the app database "
            "(schema followup) and Dagster's storage database, with a manifest. The file holds "
            "the machine's data (personal data included): keep it as safe as the machine."
        ),
    )
    backup.add_argument("file", type=Path, metavar="FILE", help="the backup file to write (new)")
    backup.set_defaults(handler=_backup)

    restore = commands.add_parser(
        "restore",
        help="load a backup into the machine at FOLLOWUP_HOME",
        description=(
            "Load FILE (from `followup backup`) into this machine, creating its embedded cluster "
            "if there is none, then migrate the app database to the latest version. A machine "
            "that holds data is left alone unless --force; a running one always."
        ),
    )
    restore.add_argument("file", type=Path, metavar="FILE", help="a file `followup backup` wrote")
    restore.add_argument(
        "--force", action="store_true", help="replace the data of a machine that has some"
    )
    add_by(restore, "who restores")
    restore.add_argument("--reason", help="why (kept in the audit)")
    restore.set_defaults(handler=run_restore)
