"""The census's records on a real Postgres: a deal enters its stage when its watch opens and
again when the CRM moves it to another stage while it is followed (at the run's own moment, not
the database's clock); a day without a reading keeps its entries and says it has no reading."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.census import quiet_stages
from followup_pipeline.store import census
from followup_pipeline.store.cadences import Plan
from followup_pipeline.store.watches import (
    DealFacts,
    Subject,
    insert_watch,
    refresh_subject,
    set_facts,
)

PLAN = Plan("default", (5, 12, 21), "Europe/Berlin", BusinessCalendar("DE"))
#: Friday 27 February 2026, 10:00 in Berlin.
FRIDAY = datetime(2026, 2, 27, 9, 0, tzinfo=UTC)


def _facts(stage: str) -> DealFacts:
    return DealFacts("Deal", None, None, None, stage, None, None)


def test_census_a_deal_enters_its_stage_on_opening_and_on_each_move_while_followed(
    db: psycopg.Connection[Any],
) -> None:
    first = insert_watch(db, subject=Subject("d1", "Deal 1", "Proposal"), plan=PLAN,
                         registered_at=FRIDAY, registered_by="reconcile")  # fmt: skip
    second = insert_watch(db, subject=Subject("d2", "Deal 2", "Proposal"), plan=PLAN,
                          registered_at=FRIDAY, registered_by="webhook")  # fmt: skip
    assert first is not None
    assert second is not None
    census.record(db, {"Proposal": 2, "Negotiation": 0}, day=FRIDAY.date(), at=FRIDAY)
    sunday = FRIDAY + timedelta(days=2)  # a run on a day off moves one; no reading that day
    set_facts(db, {first: _facts("Negotiation"), second: _facts("Proposal")}, at=sunday)
    monday = FRIDAY + timedelta(days=3)
    refresh_subject(db, watch_id=second, subject=Subject("d2", "Deal 2", "Negotiation"), at=monday)
    refresh_subject(db, watch_id=second, subject=Subject("d2", "Deal 2", "Negotiation"), at=monday)
    census.record(db, {"Proposal": 0, "Negotiation": 2}, day=monday.date(), at=monday)
    rows = census.since(db, FRIDAY.date(), zone="Europe/Berlin")
    assert [(r.day.isoformat(), r.stage, r.listed, r.entered) for r in rows] == [
        ("2026-02-27", "Negotiation", 0, 0),
        ("2026-02-27", "Proposal", 2, 2),
        ("2026-03-01", "Negotiation", None, 1),
        ("2026-03-02", "Negotiation", 2, 1),
        ("2026-03-02", "Proposal", 0, 0),
    ]
    # Negotiation, reached only by moves, is not a stage nothing enters.
    days = [FRIDAY.date(), (FRIDAY + timedelta(days=3)).date()]
    assert quiet_stages(rows, ["Proposal", "Negotiation"], listed_days=[],
                        entered_days=days) == []  # fmt: skip
