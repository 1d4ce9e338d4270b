"""The lead intake's CRM write as the store keeps it (docs/architecture.md §9, crm_upsert): what a
lead's CRM Lead should hold, which CRM Lead is the person's and when the CRM saved our write, the
writes recorded (live, or what shadow mode would have written), and a lead event put back after a
review decision so that it goes on to the CRM."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from followup_pipeline.domain.crm_lead import ClassificationFacts
from followup_pipeline.store.db import fetch_all, fetch_one
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class LeadForCrm:
    """A lead as its CRM write needs it."""

    id: int
    email: str
    name: str | None
    company: str | None
    phone: str | None
    first_source: str | None
    crm_lead_id: str | None
    crm_written_at: datetime | None
    crm_fields: dict[str, object]
    #: The newest payment's amount in its currency's major unit (None: no such payment).
    paid_amount: Decimal | None = None
    paid_currency: str | None = None


@dataclass(frozen=True)
class CrmWrite:
    """One crm_upsert action of a lead event (what it did, or in shadow what it would have)."""

    idempotency_key: str
    outcome: str
    reason: str | None
    provider_ref: str | None
    payload: dict[str, Any]
    created_at: datetime
    lead_id: int
    email: str


def lead_for_crm(conn: psycopg.Connection[Any], lead_id: int) -> LeadForCrm | None:
    """The lead ``lead_id``, if it exists."""
    return fetch_one(conn, LeadForCrm, query("lead_for_crm"), {"lead_id": lead_id})


def latest_classification(
    conn: psycopg.Connection[Any], lead_id: int
) -> ClassificationFacts | None:
    """The newest classification of any of the lead's events (None: none yet, or rejected)."""
    row = conn.execute(query("lead_latest_classification"), {"lead_id": lead_id}).fetchone()
    if row is None:
        return None
    return ClassificationFacts(
        segment=row["segment"],
        intent=row["intent"],
        priority=int(row["priority"]),
        summary=row["summary"],
        language=row["language"],
    )


def set_crm_lead(
    conn: psycopg.Connection[Any],
    lead_id: int,
    crm_lead_id: str,
    written_at: datetime | None,
    fields: Mapping[str, object],
) -> None:
    """The person's CRM Lead, when the CRM saved our write (None: nothing was written), and the
    classification's attributes it holds as ours."""
    params = {
        "lead_id": lead_id,
        "crm_lead_id": crm_lead_id,
        "written_at": written_at,
        "fields": Jsonb(dict(fields)),
    }
    conn.execute(query("lead_set_crm"), params)


def try_lock(conn: psycopg.Connection[Any], lead_id: int) -> bool:
    """Take the person's CRM-write lock (a session lock: the caller has no transaction open);
    False when another run holds it."""
    with conn.transaction():
        row = conn.execute(query("lead_crm_lock"), {"lead_id": lead_id}).fetchone()
    return bool(row and row["held"])


def unlock(conn: psycopg.Connection[Any], lead_id: int) -> None:
    """Release the person's CRM-write lock."""
    with conn.transaction():
        conn.execute(query("lead_crm_unlock"), {"lead_id": lead_id})


def other_in_flight(
    conn: psycopg.Connection[Any], *, lead_id: int, event_id: int, window_s: float
) -> bool:
    """Whether another event's write of the person lost its answer within ``window_s``."""
    params = {"lead_id": lead_id, "event_id": event_id, "window_s": window_s}
    row = conn.execute(query("lead_crm_other_in_flight"), params).fetchone()
    return bool(row and row["busy"])


def reopen_event(conn: psycopg.Connection[Any], event_id: int) -> bool:
    """Put a done lead event back to pending, due now: its next step runs."""
    return conn.execute(query("lead_event_reopen"), {"event_id": event_id}).fetchone() is not None


def crm_writes_since(
    conn: psycopg.Connection[Any], since: datetime, *, limit: int = 1000
) -> list[CrmWrite]:
    """The CRM writes of lead events recorded since ``since``, newest first."""
    return fetch_all(
        conn, CrmWrite, query("lead_crm_actions_since"), {"since": since, "limit": limit}
    )
