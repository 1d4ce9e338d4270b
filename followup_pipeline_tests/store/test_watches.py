"""Opening and closing watches through the store."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import psycopg

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.store.cadences import Plan
from followup_pipeline.store.holidays import load_calendar
from followup_pipeline.store.steps import steps_of
from followup_pipeline.store.watches import (
    Subject,
    close_watch,
    insert_watch,
    latest_watch_of,
    open_watch_of,
)

PLAN = Plan("default", (5, 12, 21), "Europe/Berlin", BusinessCalendar("DE"))
DEAL = Subject("deal-1", "Acme offer", "Proposal", account_name="Acme GmbH")
FRIDAY_2330 = datetime(2026, 3, 6, 22, 30, tzinfo=UTC)


def _open(db: psycopg.Connection[Any], **kwargs: Any) -> int | None:
    """``insert_watch`` in a transaction of its own, as its callers do."""
    with db.transaction():
        return insert_watch(db, subject=DEAL, plan=PLAN, **kwargs)


def test_watches_open_plans_steps_from_local_registration_date(
    db: psycopg.Connection[Any],
) -> None:
    watch_id = _open(db, registered_at=FRIDAY_2330, registered_by="webhook")
    assert watch_id is not None
    steps = steps_of(db, watch_id)
    assert [(s.step_no, s.due_on) for s in steps] == [
        (1, date(2026, 3, 13)),
        (2, date(2026, 3, 24)),
        (3, date(2026, 4, 8)),
    ]
    watch = open_watch_of(db, "deal-1")
    assert watch is not None
    assert (watch.subject_name, watch.base_on, watch.time_zone) == (
        "Acme offer",
        date(2026, 3, 6),
        "Europe/Berlin",
    )


def test_watches_second_open_is_a_noop_keeping_the_cadence(db: psycopg.Connection[Any]) -> None:
    first = _open(db, registered_at=FRIDAY_2330, registered_by="webhook")
    later = datetime(2026, 3, 20, 9, 0, tzinfo=UTC)
    assert _open(db, registered_at=later, registered_by="reconcile") is None
    assert first is not None
    assert steps_of(db, first)[0].due_on == date(2026, 3, 13)
    count = db.execute("SELECT count(*) AS n FROM watch_steps").fetchone()
    assert count == {"n": 3}


def test_watches_close_then_reopen_is_a_new_stay(db: psycopg.Connection[Any]) -> None:
    first = _open(db, registered_at=FRIDAY_2330, registered_by="webhook")
    assert first is not None
    assert close_watch(db, watch_id=first, reason="out_of_scope", closed_at=FRIDAY_2330)
    assert not close_watch(db, watch_id=first, reason="lost", closed_at=FRIDAY_2330)
    latest = latest_watch_of(db, "deal-1")
    assert latest is not None
    assert latest.closed_reason == "out_of_scope"
    assert open_watch_of(db, "deal-1") is None
    again = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)
    second = _open(db, registered_at=again, registered_by="webhook")
    assert second not in (None, first)


def test_watches_calendar_reads_local_overrides(db: psycopg.Connection[Any]) -> None:
    db.execute("INSERT INTO holidays (day, kind, name) VALUES ('2026-03-09', 'holiday', 'Offsite')")
    calendar = load_calendar(db, "DE", None)
    assert not calendar.is_business_day(date(2026, 3, 9))
    assert calendar.add_business_days(date(2026, 3, 6), 1) == date(2026, 3, 10)
