"""``followup backup`` and ``restore``: a machine's watches, ledger, events and Dagster runs come
back in a new machine (its embedded cluster created by the restore, or external databases), an
older backup is migrated, a machine with data or in use is not overwritten by mistake, and no
password reaches the file or the output."""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.cli import main
from followup_pipeline.machine import database_urls, install_dagster_home, open_instance
from followup_pipeline.settings import load_settings
from followup_pipeline.store.db import connection_kwargs
from followup_pipeline.store.embedded import EmbeddedCluster, bin_path
from followup_pipeline.store.migrate import available_migrations, current_version, migrate

from .conftest import with_database

PASSWORD = "S3cret-do-not-print"
LATEST = max(m.version for m in available_migrations())
#: What a round trip must bring back, row for row.
TABLES = ("watches", "watch_steps", "actions", "action_attempts", "events", "cadences")


@dg.op
def _nothing() -> None:
    """A step that does nothing: the run is what the test needs."""


@dg.job
def tiny() -> None:
    """A run, with its event log, in the machine's storage."""
    _nothing()


def _seed(url: str) -> None:
    """Two watches, one with a step and a task in the ledger with its attempt, and an event."""
    with psycopg.connect(url, autocommit=True, **connection_kwargs()) as conn:
        event = conn.execute(
            "INSERT INTO events (source, dedup_key, body, status, processed_at) "
            "VALUES ('espocrm', 'k1', %s, 'done', now()) RETURNING id",
            (b'[{"id": "d1"}]',),
        ).fetchone()
        assert event is not None
        watch: dict[str, Any] | None = None
        for deal in ("d1", "d2"):
            watch = conn.execute(
                "INSERT INTO watches (subject_id, subject_name, stage, cadence_name, offsets, "
                "time_zone, base_on, registered_at, registered_by, source_event_id) VALUES "
                "(%s, %s, 'Proposal', 'default', '{5,12,21}', 'Europe/Berlin', '2025-03-03', "
                "'2025-03-03 09:00+01', 'webhook', %s) RETURNING id",
                (deal, f"Deal {deal}", event["id"]),
            ).fetchone()
        assert watch is not None
        conn.execute(
            "INSERT INTO watch_steps (watch_id, step_no, offset_days, due_on) "
            "VALUES (%s, 1, 5, '2025-03-10')",
            (watch["id"],),
        )
        action = conn.execute(
            "INSERT INTO actions (idempotency_key, kind, watch_id, step_no, due_at, time_zone, "
            "outcome, provider_ref, payload, attempts) VALUES ('task:1:1', 'task', %s, 1, "
            "'2025-03-10 09:00+01', 'Europe/Berlin', 'confirmed', 'cu-1', '{\"a\": 1}', 1) "
            "RETURNING id",
            (watch["id"],),
        ).fetchone()
        assert action is not None
        conn.execute(
            "INSERT INTO action_attempts (action_id, attempt_no, started_at, outcome) "
            "VALUES (%s, 1, now(), 'confirmed')",
            (action["id"],),
        )


def _rows(url: str, like: str | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables a round trip must keep, in id order; with ``like``, only the
    columns that database has (a restore into a newer schema adds columns, never loses one)."""
    with psycopg.connect(url) as conn:
        return {
            table: conn.execute(
                sql.SQL("SELECT {} FROM followup.{} ORDER BY 1").format(
                    sql.SQL(", ").join(map(sql.Identifier, _columns(like or url, table))),
                    sql.Identifier(table),
                )
            ).fetchall()
            for table in TABLES
        }


def _columns(url: str, table: str) -> list[str]:
    """The columns of a table of the schema ``followup``, in order."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = 'followup' AND table_name = %s ORDER BY ordinal_position",
            (table,),
        ).fetchall()
    return [str(row[0]) for row in rows]


def _run_ids() -> set[str]:
    """The runs of the machine at FOLLOWUP_HOME, as its instance shows them."""
    with open_instance(load_settings()) as instance:
        return {run.run_id for run in instance.get_runs()}


def _make_run() -> str:
    """A finished run of ``tiny`` in the machine at FOLLOWUP_HOME."""
    settings = load_settings()
    install_dagster_home(settings)
    with open_instance(settings) as instance:
        return str(tiny.execute_in_process(instance=instance).run_id)


def _followup(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def embedded_homes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[Path]]:
    """Machines on their own embedded clusters (no external URL); stopped after the test."""
    for name in ("FOLLOWUP_DATABASE_URL", "FOLLOWUP_DAGSTER_PG_URL"):
        monkeypatch.delenv(name, raising=False)
    homes = [Path(os.environ["FOLLOWUP_HOME"]), tmp_path / "restored-home"]
    yield homes
    for home in homes:
        EmbeddedCluster(home).stop()


def test_backup_and_restore_into_a_new_embedded_machine(
    embedded_homes: list[Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, new_home = embedded_homes
    assert main(["migrate"]) == 0
    source_url = database_urls(load_settings())[0]
    _seed(source_url)
    runs = {_make_run()}
    backup = tmp_path / "machine.tar"

    status, out, err = _followup(capsys, "backup", str(backup))

    assert status == 0, err
    assert f"backup written to {backup}" in out
    assert f"schema followup at version {LATEST}" in out
    assert "2 watches, 1 actions, 1 events" in out
    assert "Dagster's storage: 1 runs" in out
    assert backup.stat().st_mode & 0o777 == 0o600
    with tarfile.open(backup) as archive:
        assert sorted(archive.getnames()) == ["dagster.dump", "followup.dump", "manifest.json"]
        handle = archive.extractfile("manifest.json")
        assert handle is not None
        manifest = json.load(handle)
    assert manifest["schema_version"] == LATEST
    assert manifest["counts"] == {"watches": 2, "actions": 1, "events": 1, "dagster_runs": 1}
    assert _followup(capsys, "backup", str(backup))[0] == 1  # never replaces a file

    monkeypatch.setenv("FOLLOWUP_HOME", str(new_home))
    assert not EmbeddedCluster(new_home).exists()
    status, out, err = _followup(capsys, "restore", str(backup))

    assert status == 0, err
    assert EmbeddedCluster(new_home).exists()
    new_url = database_urls(load_settings())[0]
    assert _rows(new_url) == _rows(source_url)
    assert _run_ids() == runs
    assert f"schema at version {LATEST}" in out
    assert "1 runs (Dagster's instance opens)" in out

    # The new machine has data now: a second restore needs --force, and then replaces it.
    status, out, err = _followup(capsys, "restore", str(backup))
    assert status == 1
    assert "has data (2 watches, 1 actions, 1 events, 1 Dagster runs)" in err
    assert "--force" in err
    with psycopg.connect(new_url, autocommit=True) as conn:
        conn.execute("DELETE FROM followup.action_attempts")
    status, out, err = _followup(capsys, "restore", "--force", "--by", "dana", str(backup))
    assert status == 0, err
    assert _rows(new_url) == _rows(source_url)
    assert _run_ids() == runs
    with psycopg.connect(new_url) as conn:
        schemas = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'followup%'")
        assert schemas.fetchall() == [("followup",)]  # the set-aside schema is gone
        # The restores are in the audit (of the restored machine), with their actor.
        restores = conn.execute("SELECT actor, action FROM followup.audit_log ORDER BY id")
        assert restores.fetchall()[-1] == ("dana", "restore")


def _with_password(url: str, *, driver: str = "postgresql") -> str:
    """``url`` (a database of the test cluster) with a password in it, as an operator's
    external URL would have (the test cluster trusts loopback, so any password connects)."""
    name = str(conninfo_to_dict(url)["dbname"])
    plain = with_database(url, name, driver=driver)
    scheme, _, rest = plain.partition("://")
    user, _, host = rest.partition("@")
    return f"{scheme}://{user.split(':')[0]}:{PASSWORD}@{host}"


def test_backup_and_restore_between_external_databases(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    database_factory: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The external server's own tools: the test cluster is the wheel's Postgres.
    monkeypatch.setenv("PATH", f"{bin_path()}{os.pathsep}{os.environ['PATH']}")
    source_url, source_storage = database_factory(), database_factory()
    migrate(source_url, target=LATEST - 1)  # an older machine: restore must migrate it
    _seed(source_url)
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", _with_password(source_url))
    monkeypatch.setenv(
        "FOLLOWUP_DAGSTER_PG_URL", _with_password(source_storage, driver="postgresql+psycopg2")
    )
    runs = {_make_run()}
    backup = tmp_path / "external.tar"

    status, out, err = _followup(capsys, "backup", str(backup))

    assert status == 0, err
    assert PASSWORD not in out + err
    assert PASSWORD.encode() not in backup.read_bytes()
    assert f"at version {LATEST - 1}" in out

    target_url, target_storage = database_factory(), database_factory()
    monkeypatch.setenv("FOLLOWUP_HOME", str(tmp_path / "restored-home"))
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", _with_password(target_url))
    monkeypatch.setenv(
        "FOLLOWUP_DAGSTER_PG_URL", _with_password(target_storage, driver="postgresql+psycopg2")
    )
    status, out, err = _followup(capsys, "restore", str(backup))

    assert status == 0, err
    assert PASSWORD not in out + err
    assert f"applied {LATEST:04d}_" in out
    assert current_version(target_url) == LATEST
    assert _rows(target_url, like=source_url) == _rows(source_url)
    assert _run_ids() == runs

    # A machine in use is never overwritten, not even with --force.
    with psycopg.connect(target_url):
        status, _, err = _followup(capsys, "restore", "--force", str(backup))
    assert status == 1
    assert "the machine is running (1 on the app database other session(s))" in err


def test_restore_refuses_a_file_that_is_no_backup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.tar"
    with tarfile.open(junk, "w") as archive:
        archive.add(__file__, arcname="followup.dump")
    status, _, err = _followup(capsys, "restore", str(junk))
    assert status == 1
    assert "not a followup backup (missing dagster.dump, manifest.json)" in err
    status, _, err = _followup(capsys, "restore", str(tmp_path / "missing.tar"))
    assert status == 1
    assert "no such file" in err
