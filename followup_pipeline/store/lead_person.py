"""What lead intake knows of a person when it classifies one of their events (docs/architecture.md
§9, classify): their earlier events, and what their classification stands on (the newest one from
a message of their own, and the most urgent priority they had)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.domain.crm_lead import ClassificationFacts
from followup_pipeline.domain.lead_text import EARLIER_MAX, EarlierEvent
from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class Standing:
    """The person's classification from their newest message (None: none yet), and the most
    urgent priority any of their events had (None: never classified)."""

    from_message: ClassificationFacts | None
    most_urgent: int | None


def standing(conn: psycopg.Connection[Any], lead_id: int) -> Standing:
    """What the person's classification stands on before this event's."""
    row = conn.execute(query("lead_person_standing"), {"lead_id": lead_id}).fetchone()
    assert row is not None  # the query returns one row, NULLs when there is nothing
    urgent = int(row["most_urgent"]) if row["most_urgent"] is not None else None
    if row["intent"] is None:
        return Standing(None, urgent)
    facts = ClassificationFacts(
        segment=row["segment"],
        intent=row["intent"],
        priority=int(row["priority"]),
        summary=row["summary"],
        language=row["language"],
    )
    return Standing(facts, urgent)


def earlier_events(
    conn: psycopg.Connection[Any], *, lead_id: int, event_id: int, before: datetime
) -> list[EarlierEvent]:
    """The person's newest events before ``event_id`` (received by ``before``), oldest first."""
    params = {"lead_id": lead_id, "event_id": event_id, "before": before, "limit": EARLIER_MAX}
    return list(reversed(fetch_all(conn, EarlierEvent, query("lead_earlier_events"), params)))


def has_message(conn: psycopg.Connection[Any], event_id: int) -> bool:
    """Whether the lead event brought a message of its own."""
    row = conn.execute(query("lead_event_has_message"), {"event_id": event_id}).fetchone()
    return bool(row and row["has_message"])
