"""``followup purge``: past the retention exactly the processed webhooks' bodies, the settled
review items' e-mail text and the finished Dagster runs go; dead, pending and recent data stay,
and so does every event row with its delivery id; ``--dry-run`` changes nothing; a second purge
finds nothing more."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.cli import main
from followup_pipeline.machine import dagster_home, install_dagster_home, open_instance
from followup_pipeline.settings import load_settings
from followup_pipeline.store.events import store_delivery
from followup_pipeline.store.retention import describe_age, parse_age

from .conftest import with_database

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=100)
RECENT = NOW - timedelta(days=10)


@dg.op
def _nothing() -> None:
    """A step that does nothing: the run is what the test needs."""


@dg.job
def tiny() -> None:
    """A finished run in the machine's storage, with an event log."""
    _nothing()


@dataclass
class Machine:
    """The app database, Dagster's storage database and the machine's instance."""

    db: psycopg.Connection[Any]
    storage_url: str
    instance: Any

    def event(self, status: str, at: datetime, *, processed: bool = True) -> int:
        """A stored webhook with a body and headers, received (and processed) at ``at``."""
        row = self.db.execute(
            "INSERT INTO events (source, dedup_key, body, headers, status, received_at, "
            "processed_at) VALUES ('espocrm', %s, %s, %s, %s, %s, %s) RETURNING id",
            (
                f"key-{status}-{at:%s}-{processed}",
                b'[{"id": "d1", "name": "Acme"}]',
                json.dumps({"signature": "abc"}),
                status,
                at,
                at if processed else None,
            ),
        ).fetchone()
        assert row is not None
        return int(row["id"])

    def review_item(self, at: datetime, *, resolved: bool) -> int:
        """A review item created at ``at`` with the e-mail text it sent, settled or open."""
        row = self.db.execute(
            "INSERT INTO review_items (subject_id, input_hash, model, raw_output, error, "
            "created_at, resolved_at, resolution, source_text) VALUES "
            "('d1', %s, 'm', 'Buyer wrote: call me', 'too long', %s, %s, %s, 'Dear Sir, …') "
            "RETURNING id",
            (
                f"h-{at:%s}-{resolved}",
                at,
                at if resolved else None,
                "rejected" if resolved else None,
            ),
        ).fetchone()
        assert row is not None
        return int(row["id"])

    def bodies(self) -> dict[int, tuple[int, dict[str, Any]]]:
        """Each event's body length and headers."""
        rows = self.db.execute("SELECT id, octet_length(body) AS n, headers FROM events")
        return {row["id"]: (row["n"], row["headers"]) for row in rows}

    def texts(self) -> dict[int, tuple[str | None, str]]:
        """Each review item's ``source_text`` and ``raw_output``."""
        rows = self.db.execute("SELECT id, source_text, raw_output FROM review_items")
        return {row["id"]: (row["source_text"], row["raw_output"]) for row in rows}

    def run(self, ended: datetime, partition: str | None = None) -> str:
        """A finished run of ``tiny`` whose end (and last update) is ``ended``."""
        tags = {"dagster/partition": partition} if partition else None
        result = tiny.execute_in_process(instance=self.instance, tags=tags)
        self.age_run(result.run_id, ended)
        return str(result.run_id)

    def age_run(self, run_id: str, ended: datetime) -> None:
        """Move a run's times back, as Dagster stores them (epoch seconds, naive UTC)."""
        naive = ended.astimezone(UTC).replace(tzinfo=None)
        with psycopg.connect(self.storage_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE runs SET start_time = %s, end_time = %s, create_timestamp = %s, "
                "update_timestamp = %s WHERE run_id = %s",
                (ended.timestamp() - 1, ended.timestamp(), naive, naive, run_id),
            )

    def run_ids(self) -> set[str]:
        return {run.run_id for run in self.instance.get_runs()}

    def logged_runs(self) -> set[str]:
        """Runs that still have event-log rows."""
        with psycopg.connect(self.storage_url) as conn:
            rows = conn.execute("SELECT DISTINCT run_id FROM event_logs").fetchall()
        return {row[0] for row in rows}


@pytest.fixture
def machine(
    monkeypatch: pytest.MonkeyPatch,
    db: psycopg.Connection[Any],
    db_url: str,
    database_factory: Callable[..., str],
) -> Iterator[Machine]:
    """A machine on the test's databases, with its DAGSTER_HOME and an open instance."""
    storage = database_factory()
    dagster_url = with_database(
        storage, str(conninfo_to_dict(storage)["dbname"]), driver="postgresql+psycopg2"
    )
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_DAGSTER_PG_URL", dagster_url)
    settings = load_settings()
    install_dagster_home(settings)
    with open_instance(settings) as instance:
        yield Machine(db=db, storage_url=storage, instance=instance)


def _purge(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, int], str]:
    """``followup purge ARGV``: its status, the count of each printed line, and its output."""
    status = main(["purge", *argv])
    out, err = capsys.readouterr()
    counts = {}
    for line in out.splitlines():
        if line.startswith(("webhook bodies", "e-mail texts", "dagster runs", "total")):
            what, _, rest = line.partition("  ")
            words = rest.split()
            counts[what.strip()] = int(words[0]) if words and words[0].isdigit() else -1
    return status, counts, out + err


def test_purge_removes_exactly_what_is_past_the_retention(
    machine: Machine, capsys: pytest.CaptureFixture[str]
) -> None:
    old_done = machine.event("done", OLD)
    old_unhandled = machine.event("unhandled", OLD)
    old_done_unprocessed = machine.event("done", OLD, processed=False)  # received_at counts
    old_dead = machine.event("dead", OLD)
    old_pending = machine.event("pending", OLD, processed=False)
    recent_done = machine.event("done", RECENT)
    old_settled = machine.review_item(OLD, resolved=True)
    old_open = machine.review_item(OLD, resolved=False)
    recent_settled = machine.review_item(RECENT, resolved=True)
    old_runs = {machine.run(OLD), machine.run(OLD)}
    recent_run = machine.run(RECENT)
    started = machine.instance.add_run(
        dg.DagsterRun(
            job_name="tiny", run_id="started-long-ago", status=dg.DagsterRunStatus.STARTED
        )
    ).run_id
    machine.age_run(started, OLD)
    bodies, texts, runs = machine.bodies(), machine.texts(), machine.run_ids()

    status, counts, out = _purge(capsys, "--older-than", "90d", "--batch", "2", "--dry-run")
    assert status == 0, out
    assert counts == {"webhook bodies": 2, "e-mail texts": 1, "dagster runs": 2, "total": 5}
    assert "nothing was changed" in out
    assert (machine.bodies(), machine.texts(), machine.run_ids()) == (bodies, texts, runs)

    status, counts, out = _purge(capsys, "--older-than", "90d", "--batch", "2")
    assert status == 0, out
    assert counts == {"webhook bodies": 2, "e-mail texts": 1, "dagster runs": 2, "total": 5}
    emptied = {old_done, old_done_unprocessed}
    after = machine.bodies()
    assert {i for i, (n, headers) in after.items() if n == 0 and headers == {}} == emptied
    # Dead and unhandled events may still be replayed: their bodies stay.
    for kept in (old_unhandled, old_dead, old_pending, recent_done):
        assert after[kept] == bodies[kept]
    assert machine.db.execute("SELECT count(*) AS n FROM events").fetchone() == {"n": 6}
    assert machine.texts() == {
        old_settled: (None, ""),
        old_open: texts[old_open],
        recent_settled: texts[recent_settled],
    }
    assert machine.run_ids() == {recent_run, started}
    assert not old_runs & machine.logged_runs()
    assert recent_run in machine.logged_runs()

    status, counts, out = _purge(capsys, "--older-than", "90d")
    assert status == 0, out
    assert counts == {"webhook bodies": 0, "e-mail texts": 0, "dagster runs": 0, "total": 0}


def test_purge_takes_each_retention_from_the_settings(
    monkeypatch: pytest.MonkeyPatch,
    db: psycopg.Connection[Any],
    db_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    machine = Machine(db=db, storage_url="", instance=None)
    twenty_days = NOW - timedelta(days=20)
    event = machine.event("done", twenty_days)
    item = machine.review_item(twenty_days, resolved=True)
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_DAGSTER_PG_URL", "postgresql+psycopg2://nobody@127.0.0.1/none")
    monkeypatch.setenv("FOLLOWUP_RETAIN_WEBHOOK_BODIES_DAYS", "14")
    monkeypatch.setenv("FOLLOWUP_RETAIN_EMAIL_TEXT_DAYS", "30")

    status, counts, out = _purge(capsys)

    assert status == 0, out
    assert counts == {"webhook bodies": 1, "e-mail texts": 0, "dagster runs": -1, "total": 1}
    assert "older than 2w" in out
    assert "older than 30d" in out
    # No DAGSTER_HOME here: the runs are skipped, and the command says why.
    assert "dagster runs    skipped: no instance at" in out
    assert machine.bodies()[event][0] == 0
    assert machine.texts()[item][0] is not None


@pytest.mark.parametrize("given", ["90", "90x", "-1d", "0d", "d", "1.5d", "90 days"])
def test_purge_refuses_a_malformed_older_than(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["purge", f"--older-than={given}"])
    out, err = capsys.readouterr()
    assert status == 2
    assert f"--older-than {given!r}" in err
    assert "12h, 90d or 2w" in err
    assert out == ""


@pytest.mark.parametrize(
    ("given", "days", "shown"), [("12h", 0.5, "12h"), ("90d", 90, "90d"), ("2w", 14, "2w")]
)
def test_purge_ages_in_hours_days_and_weeks(given: str, days: float, shown: str) -> None:
    assert parse_age(given) == timedelta(days=days)
    assert describe_age(parse_age(given)) == shown


def test_purge_keeps_a_partitions_latest_run_and_a_week_of_runs(
    machine: Machine, capsys: pytest.CaptureFixture[str]
) -> None:
    superseded = machine.run(OLD, partition="2026-01-05-09:00")
    latest = machine.run(OLD + timedelta(hours=1), partition="2026-01-05-09:00")
    three_days = machine.run(datetime.now(UTC) - timedelta(days=3))
    storage = dagster_home(load_settings()) / "storage"
    for run_id in (superseded, latest):
        (storage / run_id).mkdir(parents=True, exist_ok=True)
        (storage / run_id / "stdout").write_text("a step's output")
    status, counts, out = _purge(capsys, "--older-than", "1d")
    assert status == 0, out
    assert counts["dagster runs"] == 1
    assert "kept for 1w at least" in out
    # The hour keeps its status on the Partitions tab; the week's run stays; the folder goes.
    assert machine.run_ids() == {latest, three_days}
    assert not (storage / superseded).exists()
    assert (storage / latest / "stdout").exists()


def test_purge_keeps_the_delivery_id_that_recognises_a_retry(
    monkeypatch: pytest.MonkeyPatch,
    db: psycopg.Connection[Any],
    db_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A Standard Webhooks message done two hours ago; its sender retries for days.
    stored = store_delivery(
        db,
        source="forms",
        event_type="form.submitted",
        body=b'{"type": "form.submitted"}',
        headers={"webhook-id": "msg_A"},
        delivery_id="msg_A",
    )
    db.execute(
        "UPDATE events SET status = 'done', received_at = now() - interval '2 hours',"
        " processed_at = now() - interval '2 hours'"
    )
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_DAGSTER_PG_URL", "postgresql+psycopg2://nobody@127.0.0.1/none")

    status, counts, out = _purge(capsys, "--older-than", "1h")

    assert status == 0, out
    assert counts["webhook bodies"] == 1
    # The body and headers went; the row and its delivery id stay, whatever --older-than says.
    row = db.execute("SELECT octet_length(body) AS n, headers, delivery_id FROM events")
    assert row.fetchall() == [{"n": 0, "headers": {}, "delivery_id": "msg_A"}]
    retry = store_delivery(
        db,
        source="forms",
        event_type="form.submitted",
        body=b'{"type": "form.submitted"}',
        headers={"webhook-id": "msg_A"},
        delivery_id="msg_A",
    )
    assert (retry.event_id, retry.duplicate) == (stored.event_id, True)
