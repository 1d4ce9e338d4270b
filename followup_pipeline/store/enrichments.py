"""Two-line summaries of deals (``enrichments``), the deals waiting for one (``enrich_queue``),
the model answers an operator must look at (``review_items``) and the jobs' cursors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.store.db import fetch_all, fetch_one
from followup_pipeline.store.queries import query
from followup_pipeline.store.watches import SUBJECT_TYPE


@dataclass(frozen=True)
class Summary:
    """A deal's summary as stored."""

    line1: str
    line2: str
    created_at: datetime


@dataclass(frozen=True)
class Queued:
    """A deal waiting for a summary since its e-mails changed (or its watch opened)."""

    subject_id: str
    changed_at: datetime


@dataclass(frozen=True)
class OpenWatch:
    """What enrichment needs of an open watch."""

    subject_id: str
    subject_name: str
    registered_at: datetime


@dataclass(frozen=True)
class ReviewItem:
    """A model answer that failed the check, with what was sent and why it failed."""

    id: int
    subject_id: str
    deal_name: str | None
    model: str
    error: str
    raw_output: str
    input_hash: str
    source_text: str | None
    created_at: datetime
    resolved_at: datetime | None
    resolution: str | None
    subject_type: str = SUBJECT_TYPE


@dataclass(frozen=True)
class NewSummary:
    """A summary to store: the checked lines, the input they summarise, what the call cost."""

    subject_id: str
    input_hash: str
    line1: str
    line2: str
    model: str
    prompt_tokens: int | None
    completion_tokens: int | None
    source: str = "model"


def latest_summary(conn: psycopg.Connection[Any], subject_id: str) -> tuple[str, str] | None:
    """The newest two-line summary of a deal."""
    row = fetch_one(
        conn,
        Summary,
        query("latest_summary"),
        {"subject_type": SUBJECT_TYPE, "subject_id": subject_id},
    )
    return (row.line1, row.line2) if row else None


def latest_input_hash(conn: psycopg.Connection[Any], subject_id: str) -> str | None:
    """The input hash of the deal's latest summary or review item."""
    row = conn.execute(
        query("latest_input_hash"), {"subject_type": SUBJECT_TYPE, "subject_id": subject_id}
    ).fetchone()
    return str(row["input_hash"]) if row else None


def store_summary(conn: psycopg.Connection[Any], summary: NewSummary, *, now: datetime) -> None:
    """Keep a checked summary (the deal's newest from now on)."""
    conn.execute(
        query("enrichment_insert"),
        {
            "subject_type": SUBJECT_TYPE,
            "subject_id": summary.subject_id,
            "input_hash": summary.input_hash,
            "line1": summary.line1,
            "line2": summary.line2,
            "model": summary.model,
            "prompt_tokens": summary.prompt_tokens,
            "completion_tokens": summary.completion_tokens,
            "source": summary.source,
            "created_at": now,
        },
    )


def store_review_item(
    conn: psycopg.Connection[Any],
    *,
    subject_id: str,
    deal_name: str,
    input_hash: str,
    model: str,
    raw_output: str,
    reason: str,
    source_text: str,
    tokens: tuple[int | None, int | None],
    now: datetime,
    subject_type: str = SUBJECT_TYPE,
) -> int:
    """Keep a model answer that failed the check; its id (``subject_type``: a deal's summary,
    or a lead event's classification)."""
    row = conn.execute(
        query("review_item_insert"),
        {
            "subject_type": subject_type,
            "subject_id": subject_id,
            "input_hash": input_hash,
            "model": model,
            "raw_output": raw_output,
            "error": reason,
            "deal_name": deal_name,
            "source_text": source_text,
            "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1],
            "created_at": now,
        },
    ).fetchone()
    assert row is not None
    return int(row["id"])


def review_items(conn: psycopg.Connection[Any], *, include_resolved: bool) -> list[ReviewItem]:
    """Review items, open ones first, newest first."""
    return fetch_all(conn, ReviewItem, query("review_items_list"), {"all": include_resolved})


def review_item(
    conn: psycopg.Connection[Any], item_id: int, *, lock: bool = False
) -> ReviewItem | None:
    """One review item (with ``lock``, locked until the transaction ends)."""
    sql = query("review_item_lock") if lock else query("review_item_by_id")
    return fetch_one(conn, ReviewItem, sql, {"id": item_id})


def resolve_review_item(
    conn: psycopg.Connection[Any], item_id: int, *, resolution: str, now: datetime
) -> bool:
    """Mark an open item accepted or rejected; False if it was resolved already."""
    params = {"id": item_id, "resolution": resolution, "now": now}
    return conn.execute(query("review_item_resolve"), params).fetchone() is not None


def open_review_items(conn: psycopg.Connection[Any]) -> int:
    """How many review items wait for an operator."""
    row = conn.execute(query("review_items_open_count")).fetchone()
    assert row is not None
    return int(row["open"])


def enqueue(conn: psycopg.Connection[Any], subject_id: str, *, changed_at: datetime) -> None:
    """Let a deal wait for a summary (keeping its oldest change)."""
    params = {"subject_type": SUBJECT_TYPE, "subject_id": subject_id, "changed_at": changed_at}
    conn.execute(query("enrich_enqueue"), params)


def queued(conn: psycopg.Connection[Any]) -> list[Queued]:
    """The deals waiting for a summary, oldest change first."""
    return fetch_all(conn, Queued, query("enrich_queue_oldest"), {"subject_type": SUBJECT_TYPE})


def dequeue(conn: psycopg.Connection[Any], subject_id: str) -> None:
    """A deal no longer waits (summarised, unchanged, without e-mails, or closed)."""
    params = {"subject_type": SUBJECT_TYPE, "subject_id": subject_id}
    conn.execute(query("enrich_dequeue"), params)


def watches_to_summarise(
    conn: psycopg.Connection[Any], *, subject_ids: list[str], every: bool = False
) -> list[OpenWatch]:
    """Open watches among ``subject_ids``, or every open watch (a read)."""
    params = {"subject_ids": subject_ids, "every": every}
    return fetch_all(conn, OpenWatch, query("enrich_open_watches"), params)


def watch_to_summarise(conn: psycopg.Connection[Any], subject_id: str) -> OpenWatch | None:
    """The open watch of a deal, if any (a read)."""
    return fetch_one(conn, OpenWatch, query("enrich_open_watch"), {"subject_id": subject_id})


def cursor_of(conn: psycopg.Connection[Any], name: str) -> datetime | None:
    """Where job ``name`` stopped reading changes, or None before its first success."""
    row = conn.execute(query("job_cursor"), {"name": name}).fetchone()
    return row["position"] if row else None


def set_cursor(conn: psycopg.Connection[Any], name: str, position: datetime) -> None:
    """Move job ``name``'s cursor."""
    conn.execute(query("job_cursor_set"), {"name": name, "position": position})
