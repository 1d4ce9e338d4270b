"""The catch-up queue of learning reminders (``lms_queue``, docs/architecture.md §10): every open
action of a tenant that can be neither done nor suppressed waits here with the tenant's named
owner and backup (``followup lms queue``), is alerted through the alert checks, and is closed,
with how, when it is done or settled."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg

from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query

QueueKind = Literal["reminder", "certificate", "publication"]
#: Who owns a queued item when the tenant names nobody (the alert says to name one).
NOBODY = "nobody: set the tenant's owner"


@dataclass(frozen=True)
class QueueItem:
    """An open (or closed) item of the queue."""

    id: int
    tenant_id: str
    action_key: str
    kind: str
    what: str
    reason: str
    owner: str
    backup: str | None
    queued_at: datetime
    updated_at: datetime
    closed_at: datetime | None
    closed_how: str | None


@dataclass(frozen=True)
class Parked:
    """What parks an action: its tenant, key and kind, what it is and why it waits, and whose it
    is."""

    tenant_id: str
    action_key: str
    kind: QueueKind
    what: str
    reason: str
    owner: str | None
    backup: str | None


def park(conn: psycopg.Connection[Any], item: Parked, *, at: datetime) -> bool:
    """Queue the action (once per key while open); whether it is new."""
    params = {
        "tenant_id": item.tenant_id,
        "action_key": item.action_key,
        "kind": item.kind,
        "what": item.what[:500],
        "reason": item.reason[:1000],
        "owner": item.owner or NOBODY,
        "backup": item.backup,
        "at": at,
    }
    row = conn.execute(query("lms_queue_park"), params).fetchone()
    return bool(row and row["new"])


def close(conn: psycopg.Connection[Any], action_key: str, how: str, *, at: datetime) -> bool:
    """Close the open item of ``action_key`` (done, or settled), with how; whether one was."""
    params = {"action_key": action_key, "how": how[:200], "at": at}
    return conn.execute(query("lms_queue_close"), params).fetchone() is not None


def items(
    conn: psycopg.Connection[Any], *, tenant_id: str | None = None, closed_since: datetime | None
) -> list[QueueItem]:
    """The open items (and those closed since ``closed_since``), open first, oldest first."""
    params = {"tenant_id": tenant_id, "closed_since": closed_since}
    return fetch_all(conn, QueueItem, query("lms_queue_list"), params)


def open_keys(conn: psycopg.Connection[Any], tenant_id: str, kind: QueueKind) -> set[str]:
    """The keys of the tenant's open items of ``kind``."""
    params = {"tenant_id": tenant_id, "kind": kind}
    return {row["action_key"] for row in conn.execute(query("lms_queue_open_keys"), params)}


def open_action_keys(conn: psycopg.Connection[Any]) -> set[str]:
    """The keys of every open item."""
    return {row["action_key"] for row in conn.execute(query("lms_queue_all_open_keys"))}
