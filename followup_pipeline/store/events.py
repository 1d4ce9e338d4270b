"""The event log: deliveries stored with their raw bytes, claimed by runs, retried, dead-lettered.

A Standard Webhooks delivery carries a delivery id (``webhook-id``), the same on every retry of
one message: a redelivery of a source's id counts as a duplicate of the stored event whenever it
comes (senders retry for days; the id is kept with its event, which nothing deletes), and a
unique index makes two deliveries of one id at once end in one event.

An EspoCRM delivery has no such id. Its dedup key is a hash of its source, event type and raw
body; a redelivery of the same key within ``DEDUP_WINDOW`` counts as a duplicate of the stored
event and creates no work; the same body later is a new event (a stage going A→B→A). Concurrent
deliveries of the same body are serialised by a transaction advisory lock on the key.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from followup_pipeline.store.db import fetch_all, fetch_one, require_transaction, storable
from followup_pipeline.store.queries import query

#: EspoCRM retries for about 40 minutes; a redelivery within this window is a duplicate.
DEDUP_WINDOW = timedelta(hours=1)
#: How long a delivery id must at least be recognised: Standard Webhooks senders retry for days
#: (the specification's example schedule spans about 3). Its event row keeps it, and no purge
#: deletes an event row; whatever deletes events one day must keep those younger than this.
DELIVERY_ID_RETENTION = timedelta(days=7)
#: A delivery id longer than this is kept as its SHA-256 (an index entry must stay small).
DELIVERY_ID_MAX = 255
#: Namespace (first key) of the dedup advisory locks; the second key is the dedup key's hash.
DEDUP_LOCK_NAMESPACE = 0x46550001
#: Sources whose events a run knows how to process (EspoCRM's deal webhooks: ``register``; the
#: lead sources: ``lead_intake``); the others are stored as ``unhandled``.
HANDLED_SOURCES = ("espocrm", "site-form", "payment", "crm-changes")

StoredStatus = Literal["pending", "unhandled", "dead"]


@dataclass(frozen=True)
class Event:
    """A row of ``events``: one delivery with its raw bytes, and where its processing stands."""

    id: int
    source: str
    event_type: str | None
    dedup_key: str
    body: bytes
    headers: dict[str, str]
    received_at: datetime
    status: str
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    dead_step: str | None
    duplicate_count: int
    last_duplicate_at: datetime | None
    processed_at: datetime | None
    claimed_until: datetime | None
    claimed_by: str | None
    #: The Standard Webhooks ``webhook-id`` (``delivery_key``); None for EspoCRM.
    delivery_id: str | None = None


@dataclass(frozen=True)
class DueEvent:
    """An event the sensor sees as due: its id and the attempts made so far."""

    id: int
    attempts: int


@dataclass(frozen=True)
class DeadEvent:
    """A dead-lettered event, without its body."""

    id: int
    source: str
    event_type: str | None
    received_at: datetime
    attempts: int
    dead_step: str | None
    last_error: str | None
    #: When it became a dead letter (its last attempt; unset for one dead on arrival).
    processed_at: datetime | None = None


@dataclass(frozen=True)
class StepCompletion:
    """A finished step of an event's item (``{event_id}:{item}:{step}``) and what it did."""

    key: str
    completed_at: datetime
    result: dict[str, object]


@dataclass(frozen=True)
class InvalidItem:
    """An item of an event that could not be done (a malformed id or name): recorded, skipped."""

    event_id: int
    source: str
    event_type: str | None
    attempts: int
    key: str
    completed_at: datetime
    reason: str | None


@dataclass(frozen=True)
class Stored:
    """What became of a delivery: its event's id, its status, and whether it was a duplicate."""

    event_id: int
    status: str
    duplicate: bool


def dedup_key(source: str, event_type: str | None, body: bytes) -> str:
    """The hash of source, event type and raw body (hex SHA-256)."""
    digest = hashlib.sha256()
    for part in (source.encode(), (event_type or "").encode()):
        digest.update(len(part).to_bytes(4, "big") + part)
    digest.update(body)
    return digest.hexdigest()


def delivery_key(delivery_id: str) -> str:
    """A delivery id as it is kept: itself, or ``sha256:<hex>`` when it is longer than
    ``DELIVERY_ID_MAX`` or holds what Postgres text cannot (migration 0010 keys old ids alike)."""
    if storable(delivery_id, DELIVERY_ID_MAX) == delivery_id:
        return delivery_id
    return "sha256:" + hashlib.sha256(delivery_id.encode("utf-8", "surrogatepass")).hexdigest()


def delivery_params(
    *,
    source: str,
    event_type: str | None,
    body: bytes,
    headers: Mapping[str, str],
    status: StoredStatus = "pending",
    error: str | None = None,
    delivery_id: str | None = None,
    received_at: datetime | None = None,
) -> dict[str, object]:
    """The parameters of ``events_store`` for one delivery; ``delivery_id`` the Standard
    Webhooks ``webhook-id`` (None for EspoCRM, whose deliveries the body hash recognises);
    ``received_at`` the machine's clock (None: the database's)."""
    return {
        "source": source,
        "event_type": event_type,
        "dedup_key": dedup_key(source, event_type, body),
        "body": body,
        "headers": Jsonb(dict(headers)),
        "status": status,
        "last_error": error,
        "dead_step": "ingress" if status == "dead" else None,
        "window": DEDUP_WINDOW,
        "namespace": DEDUP_LOCK_NAMESPACE,
        "delivery_id": None if delivery_id is None else delivery_key(delivery_id),
        "received_at": received_at,
    }


def store_delivery(
    conn: psycopg.Connection[Any],
    *,
    source: str,
    event_type: str | None,
    body: bytes,
    headers: Mapping[str, str],
    status: StoredStatus = "pending",
    error: str | None = None,
    delivery_id: str | None = None,
    received_at: datetime | None = None,
) -> Stored:
    """Store one delivery, or count it as a duplicate of the stored one (the same source and
    ``delivery_id`` whenever it came; without an id, the same body within the window): one
    statement (``store_delivery`` in the database), its own transaction in autocommit.

    Answer the sender only after it returned: in autocommit, it has committed then.
    """
    params = delivery_params(source=source, event_type=event_type, body=body, headers=headers,
                             status=status, error=error, delivery_id=delivery_id,
                             received_at=received_at)  # fmt: skip
    stored = fetch_one(conn, Stored, query("events_store"), params)
    assert stored is not None  # the function answers one row, always
    return stored


def backoff(
    attempt: int, *, base_s: float, max_s: float, rng: random.Random | None = None
) -> timedelta:
    """The wait after failed attempt number ``attempt`` (1-based): doubling, ±25 % jitter."""
    ceiling = min(max_s, base_s * 2.0 ** (attempt - 1))
    jitter = (rng or random.Random()).uniform(0.75, 1.25)  # noqa: S311 (jitter, not crypto)
    return timedelta(seconds=min(max_s, ceiling * jitter))


def claim(
    conn: psycopg.Connection[Any],
    *,
    limit: int,
    lease: timedelta,
    run: str,
    sources: Sequence[str],
    exclude: Sequence[int] = (),
) -> list[Event]:
    """Lease up to ``limit`` due events of ``sources`` (not those in ``exclude``, seen by this
    run already), in id order. Commit the claim at once: it is a lease, not a lock held while
    the CRM is asked (call inside a transaction)."""
    require_transaction(conn, "claim")
    params = {
        "sources": list(sources),
        "limit": limit,
        "lease": lease,
        "run": run,
        "exclude": list(exclude),
    }
    rows = fetch_all(conn, Event, query("events_claim"), params)
    return sorted(rows, key=lambda event: event.id)


def claim_ids(
    conn: psycopg.Connection[Any], ids: Sequence[int], *, lease: timedelta, run: str
) -> list[Event]:
    """Lease the named pending events, due or not (a replay); commit it as ``claim``'s."""
    require_transaction(conn, "claim_ids")
    params = {"ids": list(ids), "lease": lease, "run": run}
    rows = fetch_all(conn, Event, query("events_claim_ids"), params)
    return sorted(rows, key=lambda event: event.id)


def due_events(
    conn: psycopg.Connection[Any], *, limit: int, sources: Sequence[str]
) -> list[DueEvent]:
    """Ids and attempts of the due events of ``sources``, oldest first."""
    params = {"sources": list(sources), "limit": limit}
    return fetch_all(conn, DueEvent, query("events_due"), params)


def start_attempt(conn: psycopg.Connection[Any], event_id: int) -> int:
    """Charge one attempt to an event as work on it starts; its attempts now. Commit it before
    the first item, so an event that kills the worker still reaches its limit."""
    row = conn.execute(query("events_start_attempt"), {"id": event_id}).fetchone()
    assert row is not None
    return int(row["attempts"])


def mark_done(conn: psycopg.Connection[Any], event_id: int) -> None:
    """Every item of the event is done."""
    conn.execute(query("events_mark_done"), {"id": event_id})


def mark_failed(
    conn: psycopg.Connection[Any],
    *,
    event: Event,
    step: str,
    error: str,
    max_attempts: int,
    delay: timedelta,
) -> bool:
    """A failed attempt (charged when it started): wait ``delay``, or dead-letter it; True if
    dead."""
    params = {"id": event.id, "step": step, "error": error}
    if event.attempts >= max_attempts:
        conn.execute(query("events_mark_dead"), params)
        return True
    conn.execute(query("events_mark_retry"), {**params, "delay": delay})
    return False


def completed_keys(conn: psycopg.Connection[Any], event_id: int) -> set[str]:
    """The keys of the steps of event ``event_id`` that are finished."""
    rows = conn.execute(query("step_completion_keys"), {"event_id": event_id}).fetchall()
    return {str(row["key"]) for row in rows}


def completions_of(conn: psycopg.Connection[Any], event_id: int) -> list[StepCompletion]:
    """The finished steps of one event, in order."""
    return fetch_all(
        conn, StepCompletion, query("step_completions_of_event"), {"event_id": event_id}
    )


def event_by_id(conn: psycopg.Connection[Any], event_id: int) -> Event | None:
    """One event, whole."""
    return fetch_one(conn, Event, query("event_by_id"), {"id": event_id})


def dead_events(conn: psycopg.Connection[Any]) -> list[DeadEvent]:
    """Dead-lettered events, oldest first."""
    return fetch_all(conn, DeadEvent, query("events_dead_letters"))


def invalid_items(conn: psycopg.Connection[Any]) -> list[InvalidItem]:
    """Items recorded as invalid and skipped, oldest first."""
    return fetch_all(conn, InvalidItem, query("invalid_items"))


@dataclass(frozen=True)
class WebhookSilence:
    """When the last EspoCRM webhook arrived, and how many watches reconciliation opened since."""

    last_webhook_at: datetime | None
    reconciled_since: int


def webhook_silence(conn: psycopg.Connection[Any], *, since: datetime) -> WebhookSilence:
    """The last EspoCRM delivery, and the watches reconciliation opened since ``since``."""
    row = fetch_one(conn, WebhookSilence, query("webhook_silence"), {"since": since})
    assert row is not None
    return row


def requeue(conn: psycopg.Connection[Any], event_id: int) -> bool:
    """Put a dead or unhandled event back to pending with fresh attempts; False if it changed."""
    return conn.execute(query("events_requeue"), {"id": event_id}).fetchone() is not None


def complete(
    conn: psycopg.Connection[Any], *, key: str, event_id: int, result: Mapping[str, object]
) -> None:
    """Record a finished step (a second record of the same key changes nothing)."""
    complete_many(conn, event_id=event_id, results={key: result})


def complete_many(
    conn: psycopg.Connection[Any], *, event_id: int, results: Mapping[str, Mapping[str, object]]
) -> None:
    """Record finished steps of one event, by key, in one statement."""
    if not results:
        return
    params = {
        "event_id": event_id,
        "keys": list(results),
        "results": [Jsonb(dict(result)) for result in results.values()],
    }
    conn.execute(query("step_completion_insert"), params)


@dataclass(frozen=True)
class Gauges:
    """A row of ``events_gauges``."""

    dead: int
    pending: int
    oldest_pending_s: float | None
    review_open: int

    def values(self) -> dict[str, float]:
        """As /metrics shows them (no pending event: an age of 0)."""
        return {
            "dead": float(self.dead),
            "pending": float(self.pending),
            "oldest_pending_s": float(self.oldest_pending_s or 0.0),
            "review_open": float(self.review_open),
        }


def gauges(conn: psycopg.Connection[Any]) -> dict[str, float]:
    """Dead letters, pending events, the age in seconds of the oldest pending one, and the open
    review items."""
    row = fetch_one(conn, Gauges, query("events_gauges"))
    assert row is not None
    return row.values()


def supersedes(
    conn: psycopg.Connection[Any], *, deal_id: str, event_id: int, received_at: datetime
) -> bool:
    """Whether a newer event was applied to the deal already; else mark this one as the newest.

    Call inside the item's transaction: the mark stays locked until it ends.
    """
    marked = claim_marks(conn, deal_ids=[deal_id], event_id=event_id, received_at=received_at)
    return deal_id not in marked


def claim_marks(
    conn: psycopg.Connection[Any], *, deal_ids: Sequence[str], event_id: int, received_at: datetime
) -> set[str]:
    """Mark this event as the newest applied to each of ``deal_ids`` unless a newer one was, in
    one statement: the deals marked (the others are superseded). Inside the event's
    transaction: the marks stay locked until it ends."""
    params = {"deal_ids": list(deal_ids), "event_id": event_id, "received_at": received_at}
    rows = conn.execute(query("deal_marks_claim"), params).fetchall()
    return {str(row["subject_id"]) for row in rows}
