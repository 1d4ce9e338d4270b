"""What lead intake's second part keeps (docs/architecture.md §9): company lookups cached per
domain with an expiry, what the lookup said of a lead's company, each lead event's checked
classification, and what the model cost in the last hour across all its uses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from followup_pipeline.domain.classification import LeadClassification
from followup_pipeline.domain.companies import CompanyFacts
from followup_pipeline.store.db import fetch_all, fetch_one
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class CachedCompany:
    """A domain's lookup while it holds: found (with what was found), or a remembered 404."""

    domain: str
    found: bool
    company: dict[str, Any] | None
    looked_up_at: datetime
    expires_at: datetime


def cached_company(
    conn: psycopg.Connection[Any], domain: str, *, now: datetime
) -> CachedCompany | None:
    """The lookup of ``domain`` if one holds at ``now``."""
    return fetch_one(conn, CachedCompany, query("company_cached"), {"domain": domain, "now": now})


def remember_company(
    conn: psycopg.Connection[Any],
    domain: str,
    company: CompanyFacts | None,
    *,
    now: datetime,
    keep: timedelta,
) -> None:
    """Keep a lookup (``company`` None: the vendor does not know the domain) for ``keep``."""
    conn.execute(
        query("company_remember"),
        {
            "domain": domain,
            "found": company is not None,
            "company": Jsonb(company.as_json()) if company is not None else None,
            "now": now,
            "expires_at": now + keep,
        },
    )


def set_lead_company(
    conn: psycopg.Connection[Any],
    *,
    lead_id: int,
    domain: str | None,
    facts: CompanyFacts | None,
) -> None:
    """What the lookup said of a lead's company (kept apart from what the person named)."""
    conn.execute(
        query("lead_set_company"),
        {
            "lead_id": lead_id,
            "domain": domain,
            "facts": Jsonb(facts.as_json()) if facts is not None else None,
        },
    )


@dataclass(frozen=True)
class LeadCompany:
    """What the lookup said of a lead's company."""

    id: int
    company_domain: str | None
    company_facts: dict[str, Any] | None


def lead_by_id(conn: psycopg.Connection[Any], lead_id: int) -> LeadCompany | None:
    """A lead's company facts."""
    return fetch_one(conn, LeadCompany, query("lead_company"), {"lead_id": lead_id})


@dataclass(frozen=True)
class Classified:
    """A checked classification of a lead event, as it is stored."""

    event_id: int
    lead_id: int
    segment: str
    intent: str
    priority: int
    summary: str
    language: str
    reasons: Sequence[str]
    model: str
    source: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: Whether the event had a message of its own (a payment has none).
    from_message: bool = True
    #: The model's answer as it came, where the person's classification differs from it.
    answer: dict[str, Any] | None = None

    @classmethod
    def of(
        cls,
        checked: LeadClassification,
        *,
        event_id: int,
        lead_id: int,
        model: str,
        source: str,
        tokens: tuple[int | None, int | None] = (None, None),
        from_message: bool = True,
        answer: LeadClassification | None = None,
    ) -> Classified:
        """A checked answer as it is stored, by the model (with its tokens) or by review;
        ``answer``: the model's own, when ``checked`` is the person's after it."""
        return cls(
            event_id=event_id,
            lead_id=lead_id,
            segment=checked.segment,
            intent=checked.intent,
            priority=checked.priority,
            summary=checked.summary,
            language=checked.language,
            reasons=list(checked.reasons),
            model=model,
            source=source,
            prompt_tokens=tokens[0],
            completion_tokens=tokens[1],
            from_message=from_message,
            answer=answer.model_dump() if answer is not None and answer != checked else None,
        )


def store_classification(
    conn: psycopg.Connection[Any], classified: Classified, *, now: datetime
) -> bool:
    """Store a lead event's classification once; False if it had one already."""
    answer = Jsonb(classified.answer) if classified.answer is not None else None
    params = {
        **classified.__dict__,
        "reasons": list(classified.reasons),
        "answer": answer,
        "created_at": now,
    }
    return conn.execute(query("classification_insert"), params).fetchone() is not None


@dataclass(frozen=True)
class StoredClassification:
    """A lead event's classification as ``followup leads show`` shows it."""

    event_id: int
    segment: str
    intent: str
    priority: int
    summary: str
    language: str
    reasons: list[str]
    model: str
    source: str
    created_at: datetime
    #: Whether the model's own answer was another (the person's earlier standing was kept).
    model_differed: bool


def classifications_of(conn: psycopg.Connection[Any], lead_id: int) -> list[StoredClassification]:
    """A lead's classifications, by when their events came (oldest first)."""
    return fetch_all(
        conn, StoredClassification, query("lead_classifications_of"), {"lead_id": lead_id}
    )


@dataclass(frozen=True)
class Spend:
    """Model calls and tokens spent in a window."""

    calls: int
    tokens: int


def model_spend_since(conn: psycopg.Connection[Any], since: datetime) -> Spend:
    """What the model cost since ``since``, across summaries, review items and classifications."""
    row = conn.execute(query("model_spend_since"), {"since": since}).fetchone()
    assert row is not None
    return Spend(int(row["calls"]), int(row["tokens"]))


def lead_of_event(conn: psycopg.Connection[Any], event_id: int) -> int | None:
    """The lead a source event was linked to."""
    row = conn.execute(query("lead_of_event"), {"event_id": event_id}).fetchone()
    return int(row["lead_id"]) if row else None


def lead_classified(conn: psycopg.Connection[Any], lead_id: int) -> bool:
    """Whether any event of the lead was classified already."""
    row = conn.execute(query("lead_classified"), {"lead_id": lead_id}).fetchone()
    return bool(row and row["classified"])


def defer_event(conn: psycopg.Connection[Any], event_id: int, *, wait: timedelta) -> None:
    """Put a claimed event back for ``wait`` (the database's clock, as the worker's due check)
    without charging its attempt."""
    conn.execute(query("event_defer"), {"event_id": event_id, "wait": wait})
