"""What a sync of a tenant writes (docs/architecture.md §10), in sets: its assignments, its
planned reminders, those its plans no longer hold and those of assignments it did not see, each
in one statement for the whole tenant, whatever its size. A row that did not change is not
written again."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import date, datetime
from typing import Any

import psycopg

from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class Assignment:
    """A quiz assigned to a learner, as a sync read it."""

    learner_id: int
    quiz_id: int
    course_id: int
    coursemodule: int
    quiz_name: str
    due_at: datetime | None
    learner_name: str | None = None
    learner_email: str | None = None
    completed_at: datetime | None = None


@dataclass(frozen=True)
class Planned:
    """A reminder record to keep (planned once per key)."""

    learner_id: int
    quiz_id: int
    action_type: str
    due_at: datetime
    time_zone: str
    local_day: date
    key: str


@dataclass(frozen=True)
class Plan:
    """The keys of an assignment's whole plan (what it still holds)."""

    learner_id: int
    quiz_id: int
    keys: list[str]


def _json(rows: Sequence[Any]) -> str:
    """Rows as one JSON array (dates and instants in ISO 8601, as Postgres reads them)."""
    return json.dumps([asdict(row) for row in rows], default=_iso)


def _iso(value: object) -> str:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def save_assignments(
    conn: psycopg.Connection[Any], tenant_id: str, rows: Sequence[Assignment], at: datetime
) -> None:
    """What a sync at ``at`` read of the tenant's assignments."""
    params = {"tenant_id": tenant_id, "rows": _json(rows), "at": at}
    conn.execute(query("lms_assignments_save"), params)


def completed(conn: psycopg.Connection[Any], tenant_id: str) -> set[tuple[int, int]]:
    """The tenant's (learner, quiz) pairs known completed: planned by no run."""
    found = conn.execute(query("lms_assignments_completed"), {"tenant_id": tenant_id})
    return {(row["learner_id"], row["quiz_id"]) for row in found.fetchall()}


def plan(conn: psycopg.Connection[Any], tenant_id: str, rows: Sequence[Planned]) -> int:
    """Keep the planned reminders (moving what is still planned to a changed time or zone);
    how many were new."""
    if not rows:
        return 0
    params = {"tenant_id": tenant_id, "rows": _json(rows)}
    return sum(bool(row["new"]) for row in conn.execute(query("lms_reminders_plan_all"), params))


def drop_unplanned(
    conn: psycopg.Connection[Any],
    tenant_id: str,
    plans: Sequence[Plan],
    *,
    reason: str,
    at: datetime,
) -> int:
    """Suppress the assignments' planned reminders their plans no longer hold; how many."""
    if not plans:
        return 0
    params = {"tenant_id": tenant_id, "plans": _json(plans), "reason": reason, "at": at}
    return len(conn.execute(query("lms_reminders_replanned_all"), params).fetchall())


def retire_unseen(
    conn: psycopg.Connection[Any], tenant_id: str, seen: Sequence[tuple[int, int]], at: datetime
) -> int:
    """Suppress (``unassigned``) what is planned for the tenant's assignments not in ``seen``
    (learner, quiz): those the sync at ``at`` did not see; how many."""
    listed = json.dumps([{"learner_id": learner, "quiz_id": quiz} for learner, quiz in seen])
    params = {"tenant_id": tenant_id, "seen": listed, "at": at}
    return len(conn.execute(query("lms_reminders_unseen"), params).fetchall())
