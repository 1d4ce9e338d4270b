"""The one list of work waiting for a person (``work_items``, docs/architecture.md §12): what
failed or cannot be done, with its owner and backup, and where it stands (open, acknowledged,
closed with how). ``engine/work.py`` decides; this module reads and writes the table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.domain.work import ClosedHow, ItemKind, Pipeline, Selection
from followup_pipeline.store.db import fetch_all, require_transaction, storable
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class WorkItem:
    """A row of ``work_items``."""

    id: int
    subject: str
    pipeline: str
    kind: str
    tenant_id: str | None
    what: str
    reason: str
    step: str | None
    error: str | None
    event_id: int | None
    action_key: str | None
    owner: str
    backup: str | None
    state: str
    opened_at: datetime
    updated_at: datetime
    failed_at: datetime
    failures: int
    alerted: int
    acknowledged_by: str | None
    acknowledged_at: datetime | None
    replays: int
    replayed_by: str | None
    replayed_at: datetime | None
    closed_at: datetime | None
    closed_how: str | None
    closed_by: str | None
    closed_note: str | None

    @property
    def waiting(self) -> bool:
        """Open or acknowledged: it still waits for someone."""
        return self.state != "closed"


@dataclass(frozen=True)
class Found:
    """Something that failed, as the list takes it in: what it stands for, its pipeline and kind,
    what it is and why it waits, its raw data's place, when it failed, and whose it is."""

    subject: str
    pipeline: Pipeline
    kind: ItemKind
    what: str
    reason: str
    failed_at: datetime
    owner: str
    backup: str | None = None
    tenant_id: str | None = None
    step: str | None = None
    error: str | None = None
    event_id: int | None = None
    action_key: str | None = None


@dataclass(frozen=True)
class Settled:
    """A waiting item whose event or action ended since."""

    id: int
    kind: str
    replays: int
    failures: int
    event_status: str | None
    action_outcome: str | None
    action_reason: str | None
    gone: bool


@dataclass(frozen=True)
class Count:
    """Waiting items of one pipeline, kind, owner, state and tenant: how many, the oldest."""

    pipeline: str
    kind: str
    owner: str
    state: str
    tenant_id: str | None
    items: int
    oldest: datetime


def lock(conn: psycopg.Connection[Any]) -> None:
    """Take the list's lock for the caller's transaction."""
    require_transaction(conn, "work.lock")
    conn.execute(query("work_lock"))


def known_failures(conn: psycopg.Connection[Any], subjects: Sequence[str]) -> set[tuple[str, Any]]:
    """Of ``subjects``, each item's failure on record: (subject, when it failed)."""
    rows = conn.execute(query("work_known_failures"), {"subjects": list(subjects)}).fetchall()
    return {(str(row["subject"]), row["failed_at"]) for row in rows}


def found(
    conn: psycopg.Connection[Any], item: Found, *, at: datetime, known: bool
) -> tuple[bool, bool]:
    """Take in a failure: a new item (``known``: already alerted elsewhere, an upgrade), or a
    waiting one replayed since failed again; (whether a new item was made, whether one failed
    again)."""
    params = {
        "subject": item.subject,
        "pipeline": item.pipeline,
        "kind": item.kind,
        "tenant_id": item.tenant_id,
        "what": storable(item.what, 500),
        "reason": storable(item.reason, 1000),
        "step": item.step,
        "error": storable(item.error, 2000) if item.error else None,
        "event_id": item.event_id,
        "action_key": item.action_key,
        "owner": item.owner,
        "backup": item.backup,
        "failed_at": item.failed_at,
        "at": at,
        "known": known,
    }
    row = conn.execute(query("work_found"), params).fetchone()
    return (bool(row and row["new"]), bool(row and row["again"]))


def park(
    conn: psycopg.Connection[Any],
    *,
    action_key: str,
    pipeline: Pipeline,
    kind: ItemKind,
    tenant_id: str | None,
    what: str,
    reason: str,
    owner: str,
    backup: str | None,
    at: datetime,
    subject: str | None = None,
) -> bool:
    """A late action waits with its owner (once while it waits; never again once a person
    closed it with a decision); whether a new item was made. Its ``subject`` is
    ``action:<key>`` unless given (a step's is its own: its task's action may die apart)."""
    params = {
        "subject": subject or f"action:{action_key}",
        "action_key": action_key,
        "pipeline": pipeline,
        "kind": kind,
        "tenant_id": tenant_id,
        "what": storable(what, 500),
        "reason": storable(reason, 1000),
        "owner": owner,
        "backup": backup,
        "at": at,
    }
    return conn.execute(query("work_park"), params).fetchone() is not None


def close_subject(
    conn: psycopg.Connection[Any], subject: str, how: ClosedHow, note: str, *, at: datetime
) -> bool:
    """Close the waiting item of ``subject`` (if any), with how; whether one was."""
    params = {"subject": subject, "how": how, "note": storable(note, 500), "at": at}
    return conn.execute(query("work_close_subject"), params).fetchone() is not None


def settled(conn: psycopg.Connection[Any]) -> list[Settled]:
    """Waiting items whose event or action ended since, by any path."""
    return fetch_all(conn, Settled, query("work_settled"))


def close(
    conn: psycopg.Connection[Any],
    ids: Sequence[int],
    how: ClosedHow,
    *,
    at: datetime,
    by: str | None = None,
    note: str | None = None,
) -> list[tuple[int, str, str, str | None]]:
    """Close waiting items; each closed one's id, subject, kind and action key."""
    params = {
        "ids": list(ids),
        "how": how,
        "by": by,
        "note": storable(note, 1000) if note else None,
        "at": at,
    }
    rows = conn.execute(query("work_close"), params).fetchall()
    return [(int(r["id"]), str(r["subject"]), str(r["kind"]), r["action_key"]) for r in rows]


def acknowledge(
    conn: psycopg.Connection[Any], ids: Sequence[int], *, by: str, at: datetime
) -> list[int]:
    """Acknowledge open items; the ids acknowledged."""
    rows = conn.execute(query("work_acknowledge"), {"ids": list(ids), "by": by, "at": at})
    return [int(r["id"]) for r in rows.fetchall()]


def replayed(
    conn: psycopg.Connection[Any], ids: Sequence[int], *, by: str, at: datetime
) -> list[int]:
    """Count a replay of waiting items; the ids counted."""
    rows = conn.execute(query("work_replayed"), {"ids": list(ids), "by": by, "at": at})
    return [int(r["id"]) for r in rows.fetchall()]


def select(
    conn: psycopg.Connection[Any], selection: Selection, *, limit: int = 10_000
) -> list[WorkItem]:
    """The items ``selection`` names, waiting ones first, oldest first."""
    params = {
        "states": list(selection.states),
        "ids": list(selection.ids),
        "names": list(selection.names),
        "pipeline": selection.pipeline,
        "kinds": list(selection.kinds),
        "step": selection.step,
        "error": selection.error,
        "owner": selection.owner,
        "since": selection.since,
        "tenant": selection.tenant,
        "subject": selection.subject,
        "limit": limit,
    }
    return fetch_all(conn, WorkItem, query("work_select"), params)


def to_alert(conn: psycopg.Connection[Any]) -> list[WorkItem]:
    """Open items with a failure not alerted yet."""
    return fetch_all(conn, WorkItem, query("work_to_alert"))


def mark_alerted(conn: psycopg.Connection[Any], item_id: int, failures: int) -> None:
    """The item's failures up to ``failures`` are alerted."""
    conn.execute(query("work_mark_alerted"), {"id": item_id, "failures": failures})


def closed_among(conn: psycopg.Connection[Any], ids: Sequence[int]) -> set[int]:
    """Which of ``ids`` are closed."""
    rows = conn.execute(query("work_closed_items"), {"ids": list(ids)}).fetchall()
    return {int(r["id"]) for r in rows}


def counts(conn: psycopg.Connection[Any]) -> list[Count]:
    """The waiting items by pipeline, kind, owner, state and tenant."""
    return fetch_all(conn, Count, query("work_counts"))


def closed_between(
    conn: psycopg.Connection[Any], since: datetime, until: datetime, *, pipeline: str | None
) -> dict[str, int]:
    """How many items closed in ``[since, until)``, by how."""
    params = {"since": since, "until": until, "pipeline": pipeline}
    rows = conn.execute(query("work_closed_between"), params).fetchall()
    return {str(r["how"]): int(r["items"]) for r in rows}


def open_action_keys(conn: psycopg.Connection[Any], tenant_id: str, kind: ItemKind) -> set[str]:
    """The action keys of a tenant's waiting items of ``kind``."""
    params = {"tenant_id": tenant_id, "kind": kind}
    return {str(r["action_key"]) for r in conn.execute(query("work_open_subjects"), params)}
