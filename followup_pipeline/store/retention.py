"""What ``followup purge`` removes past a retention, and what ``backup``/``restore`` count.

Three kinds of data age out (each with its own ``FOLLOWUP_RETAIN_*_DAYS``):

* the raw bodies and headers of ``done`` webhooks: emptied, the row stays (ids, status, dedup
  keys are history); dead and unhandled events keep theirs for a replay. No event row is ever
  deleted, whatever ``--older-than`` says: its ``delivery_id`` (a Standard Webhooks
  ``webhook-id``, kept in its own column, not only in the headers) goes on recognising the
  sender's retries, which last days (``events.DELIVERY_ID_RETENTION``, 7 days at least);
* the e-mail text of settled review items (``source_text``, and ``raw_output``, the model's answer
  that may quote it): set to NULL / empty, the item stays;
* finished Dagster runs: deleted with their event logs (``instance.delete_run``).

Each batch is its own short transaction, so a purge never holds many rows locked and a purge
that is stopped keeps what it did. Rows already purged no longer match: a second purge counts
nothing.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from psycopg import sql

from followup_pipeline.settings import Settings
from followup_pipeline.store.queries import query

#: Rows (or runs) per batch unless ``--batch`` says otherwise.
DEFAULT_BATCH = 1000
_AGE = re.compile(r"^\s*(\d+)\s*([hdw])\s*$")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}
#: Dagster run statuses that are not finished: such runs are never deleted, however old.
OPEN_RUN_STATUSES = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


def parse_age(text: str, *, name: str = "--older-than") -> timedelta:
    """``90d``, ``12h`` or ``2w`` as a duration; ``ValueError`` naming ``name`` otherwise."""
    match = _AGE.match(text)
    if match is None or int(match[1]) == 0:
        raise ValueError(
            f"{name} {text!r}: give a positive whole number of hours, days or weeks, "
            "e.g. 12h, 90d or 2w"
        )
    return timedelta(**{_UNITS[match[2]]: int(match[1])})


def describe_age(age: timedelta) -> str:
    """A retention as an operator writes it: ``90d``, ``2w`` or ``36h``."""
    hours = int(age.total_seconds() // 3600)
    if hours % (24 * 7) == 0:
        return f"{hours // (24 * 7)}w"
    if hours % 24 == 0:
        return f"{hours // 24}d"
    return f"{hours}h"


@dataclass(frozen=True)
class Retention:
    """How long each kind of data is kept."""

    webhook_bodies: timedelta
    email_text: timedelta
    runs: timedelta

    @classmethod
    def of(cls, settings: Settings, *, older_than: timedelta | None = None) -> Retention:
        """The settings' retentions, or ``older_than`` for all three."""
        if older_than is not None:
            return cls(older_than, older_than, older_than)
        return cls(
            webhook_bodies=timedelta(days=settings.retain_webhook_bodies_days),
            email_text=timedelta(days=settings.retain_email_text_days),
            runs=timedelta(days=settings.retain_runs_days),
        )


def _check_batch(batch: int) -> None:
    if batch < 1:
        raise ValueError(f"--batch {batch}: give a whole number of rows of at least 1")


def _in_batches(
    conn: psycopg.Connection[Any],
    name: LiteralString,
    *,
    before: datetime,
    batch: int,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Run the keyset-batched ``UPDATE … RETURNING id`` called ``name`` until it finds no more
    rows, each batch in its own transaction; the number of rows changed."""
    _check_batch(batch)
    total, after = 0, 0
    while True:
        with conn.transaction():
            rows = conn.execute(
                query(name), {"after": after, "before": before, "limit": batch}
            ).fetchall()
        if not rows:
            return total
        total += len(rows)
        after = max(int(row["id"]) for row in rows)
        if on_batch is not None:
            on_batch(len(rows))
        if len(rows) < batch:
            return total


def _count(conn: psycopg.Connection[Any], name: LiteralString, *, before: datetime) -> int:
    row = conn.execute(query(name), {"before": before}).fetchone()
    return int(row["n"]) if row else 0


def empty_event_bodies(
    conn: psycopg.Connection[Any], *, before: datetime, batch: int = DEFAULT_BATCH, dry_run: bool
) -> int:
    """Empty the bodies and headers of done events processed before ``before`` (an
    autocommit connection: each batch commits); with ``dry_run`` only count them."""
    if dry_run:
        return _count(conn, "retention_count_event_bodies", before=before)
    return _in_batches(conn, "retention_empty_event_bodies", before=before, batch=batch)


def clear_email_text(
    conn: psycopg.Connection[Any], *, before: datetime, batch: int = DEFAULT_BATCH, dry_run: bool
) -> int:
    """Forget the e-mail text of review items created before ``before`` and settled (an
    autocommit connection: each batch commits); with ``dry_run`` only count them."""
    if dry_run:
        return _count(conn, "retention_count_email_text", before=before)
    return _in_batches(conn, "retention_clear_email_text", before=before, batch=batch)


def _ended_at(record: Any) -> datetime:
    """When a finished run ended: its ``end_time``, else its last update (a run that never
    started, e.g. canceled in the queue, has no end time)."""
    if record.end_time is not None:
        return datetime.fromtimestamp(float(record.end_time), UTC)
    stamp: datetime = record.update_timestamp
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def delete_old_runs(
    instance: Any,
    *,
    before: datetime,
    batch: int = DEFAULT_BATCH,
    dry_run: bool,
    storage: Path | None = None,
) -> int:
    """Delete the finished Dagster runs that ended before ``before``, with their event logs
    (``instance.delete_run``) and their folder under ``storage`` (step outputs, stdout and
    stderr), ``batch`` runs at a time; with ``dry_run`` only count them.

    Kept whatever their age: the latest run of each partition (the Partitions tab would show the
    hour as missing, and a "backfill missing" would run it again) and the runs of a backfill that
    has not finished.

    Runs are read oldest first through Dagster's storage, prefiltered on their last update
    (which a finished run's end never follows); a run whose end is in fact recent is kept, and
    the next page starts after it (a deleted run cannot serve as the cursor).
    """
    import dagster as dg

    _check_batch(batch)
    statuses = [s for s in dg.DagsterRunStatus if s.value not in OPEN_RUN_STATUSES]
    filters = dg.RunsFilter(statuses=statuses, updated_before=before.astimezone(UTC))
    total, cursor = 0, None
    latest: dict[tuple[str, str], str | None] = {}
    while True:
        records = instance.get_run_records(
            filters=filters, limit=batch, cursor=cursor, ascending=True
        )
        if not records:
            return total
        old = [
            r.dagster_run.run_id
            for r in records
            if _ended_at(r) < before and not _needed(instance, r.dagster_run, latest)
        ]
        kept = [r.dagster_run.run_id for r in records if r.dagster_run.run_id not in old]
        if not dry_run:
            for run_id in old:
                instance.delete_run(run_id)
                if storage is not None:
                    shutil.rmtree(storage / run_id, ignore_errors=True)
        total += len(old)
        if dry_run:
            cursor = records[-1].dagster_run.run_id
        elif kept:
            cursor = kept[-1]
        if len(records) < batch:
            return total


def _needed(instance: Any, run: Any, latest: dict[tuple[str, str], str | None]) -> bool:
    """Whether an old run must stay: the latest of its partition, or part of an open backfill."""
    import dagster as dg

    backfill_id = run.tags.get("dagster/backfill")
    if backfill_id:
        backfill = instance.get_backfill(backfill_id)
        if backfill is not None and backfill.status == dg.BulkActionStatus.REQUESTED:
            return True
    partition = run.tags.get("dagster/partition")
    if not partition:
        return False
    key = (run.job_name, partition)
    if key not in latest:
        newest = instance.get_run_records(
            filters=dg.RunsFilter(job_name=run.job_name, tags={"dagster/partition": partition}),
            limit=1,
        )
        latest[key] = newest[0].dagster_run.run_id if newest else None
    return bool(latest[key] == run.run_id)


def machine_counts(conn: psycopg.Connection[Any]) -> dict[str, int] | None:
    """The machine's watches, actions and events; None when its tables do not exist yet."""
    present = conn.execute(query("retention_schema_present")).fetchone()
    if present is None or not present["present"]:
        return None
    row = conn.execute(query("retention_machine_counts")).fetchone()
    return {str(k): int(v) for k, v in (row or {}).items()}


def dagster_run_count(conn: psycopg.Connection[Any]) -> int | None:
    """The runs in Dagster's storage database (a connection to it); None when Dagster never
    created its tables there. Dagster's tables are not ours: the SQL is composed here, not kept
    with our queries (which are checked against our schema)."""
    found = conn.execute("SELECT to_regclass('runs') IS NOT NULL AS present").fetchone()
    if found is None or not _first(found):
        return None
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("runs")))
    counted = row.fetchone()
    return int(_first(counted)) if counted is not None else 0


def _first(row: object) -> Any:
    """The first column of a row, whatever the connection's row factory (dict or tuple rows)."""
    if isinstance(row, Mapping):
        return next(iter(row.values()))
    if isinstance(row, tuple):
        return row[0]
    raise TypeError(f"not a row: {row!r}")
