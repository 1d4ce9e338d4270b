"""The database itself holds the invariants of the flow state."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any, get_args

import psycopg
import pytest
from psycopg import errors

from followup_pipeline.store.ledger import FinalOutcome

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _open_watch(db: psycopg.Connection[Any], deal: str = "deal-1", **overrides: Any) -> int:
    values = {
        "subject_id": deal,
        "subject_name": "Acme offer",
        "stage": "Proposal",
        "cadence_name": "default",
        "offsets": [5, 12, 21],
        "time_zone": "Europe/Berlin",
        "base_on": date(2026, 3, 2),
        "registered_at": NOW,
        "registered_by": "webhook",
        "closed_at": None,
        "closed_reason": None,
        **overrides,
    }
    row = db.execute(
        "INSERT INTO watches (subject_id, subject_name, stage, cadence_name, offsets, time_zone,"
        " base_on, registered_at, registered_by, closed_at, closed_reason)"
        " VALUES (%(subject_id)s, %(subject_name)s, %(stage)s, %(cadence_name)s, %(offsets)s,"
        " %(time_zone)s, %(base_on)s, %(registered_at)s, %(registered_by)s, %(closed_at)s,"
        " %(closed_reason)s) RETURNING id",
        values,
    ).fetchone()
    assert row is not None
    return int(row["id"])


def test_schema_refuses_second_open_watch_for_one_deal(db: psycopg.Connection[Any]) -> None:
    _open_watch(db)
    with pytest.raises(errors.UniqueViolation, match="watches_one_open"):
        _open_watch(db)


def test_schema_allows_new_watch_after_the_last_closed(db: psycopg.Connection[Any]) -> None:
    first = _open_watch(db)
    db.execute(
        "UPDATE watches SET closed_at = %s, closed_reason = 'lost' WHERE id = %s", (NOW, first)
    )
    assert _open_watch(db) != first


@pytest.mark.parametrize("reason", ["cancelled", "WON", ""])
def test_schema_refuses_unknown_closed_reason(db: psycopg.Connection[Any], reason: str) -> None:
    with pytest.raises(errors.CheckViolation, match="watches_closed_reason_valid"):
        _open_watch(db, closed_at=NOW, closed_reason=reason)


def test_schema_refuses_closed_watch_without_reason(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(errors.CheckViolation, match="watches_closed_has_reason"):
        _open_watch(db, closed_at=NOW)


def _action(db: psycopg.Connection[Any], outcome: str, reason: str | None = None) -> None:
    db.execute(
        "INSERT INTO actions (idempotency_key, kind, due_at, time_zone, outcome, reason)"
        " VALUES (%s, 'task', %s, 'Europe/Berlin', %s, %s)",
        (f"task:1:{outcome}", NOW, outcome, reason),
    )


@pytest.mark.parametrize("outcome", ["sent", "done", "ACCEPTED"])
def test_schema_refuses_unknown_action_outcome(db: psycopg.Connection[Any], outcome: str) -> None:
    with pytest.raises(errors.CheckViolation, match="actions_outcome_valid"):
        _action(db, outcome)


# Every outcome the ledger writes: attempted first, then a final one; suppressed needs a reason.
KNOWN_OUTCOMES = [
    ("attempted", None),
    *((outcome, None) for outcome in get_args(FinalOutcome)),
    ("suppressed", "dry_run"),
]


@pytest.mark.parametrize(("outcome", "reason"), KNOWN_OUTCOMES)
def test_schema_accepts_every_known_outcome(
    db: psycopg.Connection[Any], outcome: str, reason: str | None
) -> None:
    _action(db, outcome, reason)
    row = db.execute("SELECT outcome, reason FROM actions WHERE outcome = %s", (outcome,))
    assert row.fetchall() == [{"outcome": outcome, "reason": reason}]
    # The same spelling in capitals is refused: the check constraint is there and exact.
    with pytest.raises(errors.CheckViolation, match="actions_outcome_valid"):
        _action(db, outcome.upper(), reason)


def test_schema_requires_a_reason_for_suppressed_actions(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(errors.CheckViolation, match="actions_suppressed_has_reason"):
        _action(db, "suppressed")
    _action(db, "suppressed", "dry_run")


def test_schema_refuses_duplicate_idempotency_key(db: psycopg.Connection[Any]) -> None:
    _action(db, "attempted")
    with pytest.raises(errors.UniqueViolation, match="actions_key_unique"):
        _action(db, "attempted")


def test_schema_refuses_duplicate_step_of_a_watch(db: psycopg.Connection[Any]) -> None:
    watch = _open_watch(db)
    insert = (
        "INSERT INTO watch_steps (watch_id, step_no, offset_days, due_on) VALUES (%s, 1, 5, %s)"
    )
    db.execute(insert, (watch, date(2026, 3, 9)))
    with pytest.raises(errors.UniqueViolation, match="watch_steps_unique_step"):
        db.execute(insert, (watch, date(2026, 3, 9)))


@pytest.mark.parametrize("task_ref", [None, "dry-run"])
def test_schema_keeps_a_task_url_only_with_a_real_task(
    db: psycopg.Connection[Any], task_ref: str | None
) -> None:
    watch = _open_watch(db)
    insert = (
        "INSERT INTO watch_steps (watch_id, step_no, offset_days, due_on, fired_at, task_ref,"
        " task_url) VALUES (%s, %s, 5, %s, %s, %s, %s)"
    )
    fired = None if task_ref is None else NOW
    with pytest.raises(errors.CheckViolation, match="watch_steps_task_url_has_task"):
        db.execute(insert, (watch, 1, date(2026, 3, 9), fired, task_ref, "https://x.test/t/1"))
    db.execute(insert, (watch, 2, date(2026, 3, 9), NOW, "86abc", "https://x.test/t/86abc"))


def test_schema_seeds_the_default_cadence(db: psycopg.Connection[Any]) -> None:
    row = db.execute("SELECT offsets FROM cadences WHERE name = 'default'").fetchone()
    assert row == {"offsets": [5, 12, 21]}
