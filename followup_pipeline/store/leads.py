"""The leads table and each lead's source events (lead intake, docs/architecture.md §9): one lead
per person by normalised e-mail address, each event linked once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg

from followup_pipeline.store.db import fetch_all, fetch_one, require_transaction
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class LeadRow:
    """What a source event says about a person, as the lead store takes it."""

    email: str
    source: str
    kind: str
    at: datetime
    name: str | None = None
    company: str | None = None
    phone: str | None = None
    consent: bool | None = None
    amount: Decimal | None = None
    currency: str | None = None
    #: ``major`` or ``minor`` (a currency not in ``domain/money.py``'s table); None: no amount.
    amount_unit: str | None = None
    page: str | None = None
    message: str | None = None
    crm_lead_id: str | None = None


@dataclass(frozen=True)
class Linked:
    """Where an event's person landed: the lead, whether it was new, whether the event was
    linked now (False: a replay found it linked already)."""

    lead_id: int
    created: bool
    linked: bool


def link_event(conn: psycopg.Connection[Any], *, event_id: int, lead: LeadRow) -> Linked:
    """The person's lead (made, or seen again) and the event linked to it, in the caller's
    transaction (with the step's completion key)."""
    require_transaction(conn, "link_event")
    params = {
        "email": lead.email,
        "name": lead.name,
        "company": lead.company,
        "phone": lead.phone,
        "consent": lead.consent,
        "source": lead.source,
        "at": lead.at,
        "crm_lead_id": lead.crm_lead_id,
    }
    row = conn.execute(query("lead_upsert"), params).fetchone()
    assert row is not None
    linked = conn.execute(
        query("lead_event_insert"),
        {
            "lead_id": row["id"],
            "event_id": event_id,
            "source": lead.source,
            "kind": lead.kind,
            "at": lead.at,
            "amount": lead.amount,
            "currency": lead.currency,
            "amount_unit": lead.amount_unit,
            "page": lead.page,
            "message": lead.message,
            "crm_lead_id": lead.crm_lead_id,
        },
    ).fetchone()
    return Linked(int(row["id"]), bool(row["created"]), linked is not None)


@dataclass(frozen=True)
class LeadListing:
    """A lead as ``followup leads list`` shows it."""

    id: int
    email: str
    name: str | None
    company: str | None
    first_source: str
    first_seen_at: datetime
    last_seen_at: datetime
    crm_lead_id: str | None
    events: int
    sources: str
    #: The intent and priority of the newest classified event (what the CRM's Lead shows);
    #: None: no event classified.
    intent: str | None
    priority: int | None


def list_leads(conn: psycopg.Connection[Any], *, limit: int = 200) -> list[LeadListing]:
    """The leads, newest first, with their events' count and sources, and the intent and
    priority the CRM's Lead shows."""
    return fetch_all(conn, LeadListing, query("leads_list"), {"limit": limit})


@dataclass(frozen=True)
class LeadDetail:
    """A lead as ``followup leads show`` shows it."""

    id: int
    email: str
    name: str | None
    company: str | None
    phone: str | None
    consent: bool | None
    consent_at: datetime | None
    first_source: str
    first_seen_at: datetime
    last_seen_at: datetime
    crm_lead_id: str | None
    crm_written_at: datetime | None
    company_domain: str | None


def lead_detail(conn: psycopg.Connection[Any], lead_id: int) -> LeadDetail | None:
    """One lead (None: there is no lead ``lead_id``)."""
    return fetch_one(conn, LeadDetail, query("lead_detail"), {"lead_id": lead_id})


@dataclass(frozen=True)
class LeadEvent:
    """A source event of a lead, as it was linked."""

    event_id: int
    source: str
    kind: str
    received_at: datetime
    amount: Decimal | None
    currency: str | None
    amount_unit: str | None
    page: str | None
    message: str | None
    crm_lead_id: str | None


def lead_events_of(conn: psycopg.Connection[Any], lead_id: int) -> list[LeadEvent]:
    """A lead's source events, oldest first."""
    return fetch_all(conn, LeadEvent, query("lead_events_of"), {"lead_id": lead_id})


def written_by_us(conn: psycopg.Connection[Any], crm_lead_id: str, modified_at: datetime) -> bool:
    """Whether the version ``modified_at`` of the CRM Lead ``crm_lead_id`` is our own write."""
    params = {"crm_lead_id": crm_lead_id, "modified_at": modified_at}
    row = conn.execute(query("lead_written_by_us"), params).fetchone()
    return bool(row and row["ours"])
