"""Steps of watches: fire, skip, replan, and the reads that the evaluation needs."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import psycopg

from followup_pipeline.domain.localtime import local_date
from followup_pipeline.domain.steps import StepState
from followup_pipeline.store.queries import query
from followup_pipeline.store.watches import SUBJECT_TYPE


def step_states(rows: list[dict[str, Any]], zone: str) -> list[StepState]:
    """Store rows of steps as the domain sees them (fired dates local to ``zone``)."""
    return [
        StepState(
            step_no=row["step_no"],
            offset_days=row["offset_days"],
            due_on=row["due_on"],
            fired_on=local_date(row["fired_at"], zone) if row["fired_at"] else None,
            skipped=row["skipped_at"] is not None,
        )
        for row in rows
    ]


def open_watches(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Every open watch."""
    return list(conn.execute(query("open_watches")).fetchall())


def count_open_watches(conn: psycopg.Connection[Any]) -> int:
    """How many watches are open."""
    row = conn.execute(query("count_open_watches")).fetchone()
    return int(row["n"]) if row else 0


def fire_step(
    conn: psycopg.Connection[Any], *, watch_id: int, step_no: int, task_ref: str, at: datetime
) -> bool:
    """Mark a step fired with its task; False if it was not open."""
    params = {"watch_id": watch_id, "step_no": step_no, "task_ref": task_ref, "fired_at": at}
    return conn.execute(query("fire_step"), params).fetchone() is not None


def skip_step(
    conn: psycopg.Connection[Any], *, watch_id: int, step_no: int, reason: str, at: datetime
) -> bool:
    """Mark a step skipped for ``reason``; False if it was not open."""
    params = {"watch_id": watch_id, "step_no": step_no, "reason": reason, "skipped_at": at}
    return conn.execute(query("skip_step"), params).fetchone() is not None


def replan_step(
    conn: psycopg.Connection[Any], *, watch_id: int, step_no: int, due_on: date
) -> None:
    """Plan an unfired step again for ``due_on``."""
    conn.execute(query("replan_step"), {"watch_id": watch_id, "step_no": step_no, "due_on": due_on})


def mark_reset(conn: psycopg.Connection[Any], *, watch_id: int, at: datetime) -> None:
    """Remember that activity reset the watch's cadence at ``at``."""
    conn.execute(query("mark_reset"), {"watch_id": watch_id, "reset_at": at})


def set_paused(conn: psycopg.Connection[Any], *, watch_id: int, at: datetime | None) -> bool:
    """Pause (``at``) or resume (None) an open watch; False if it is not open."""
    return (
        conn.execute(query("set_paused"), {"watch_id": watch_id, "paused_at": at}).fetchone()
        is not None
    )


def watch_by_id(conn: psycopg.Connection[Any], watch_id: int) -> dict[str, Any] | None:
    """One watch."""
    row: dict[str, Any] | None = conn.execute(
        query("watch_by_id"), {"watch_id": watch_id}
    ).fetchone()
    return row


def latest_summary(conn: psycopg.Connection[Any], subject_id: str) -> tuple[str, str] | None:
    """The newest two-line summary of a deal."""
    row = conn.execute(
        query("latest_summary"), {"subject_type": SUBJECT_TYPE, "subject_id": subject_id}
    ).fetchone()
    return (row["line1"], row["line2"]) if row else None


def tasks_to_close(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Fired tasks of closed watches that were not closed in ClickUp yet."""
    return list(conn.execute(query("tasks_to_close")).fetchall())


def set_watch_error(
    conn: psycopg.Connection[Any], *, watch_id: int, error: str | None, at: datetime | None
) -> None:
    """Remember the CRM error that holds the watch back; None clears it."""
    conn.execute(query("set_watch_error"), {"watch_id": watch_id, "error": error, "at": at})


def actions_of_watch(conn: psycopg.Connection[Any], watch_id: int) -> dict[int, dict[str, Any]]:
    """The task actions of a watch, keyed by step number."""
    rows = conn.execute(query("actions_of_watch"), {"watch_id": watch_id}).fetchall()
    return {row["step_no"]: row for row in rows}


def list_watches(
    conn: psycopg.Connection[Any], *, include_closed: bool = False, limit: int = 200
) -> list[dict[str, Any]]:
    """Watches for the operator, newest first, with their next due date."""
    params = {"all": include_closed, "limit": limit}
    return list(conn.execute(query("list_watches"), params).fetchall())


def refresh_subject(conn: psycopg.Connection[Any], *, watch_id: int, deal: Any) -> None:
    """Copy a CRM deal's current names and stage onto its watch; clear its CRM error."""
    conn.execute(
        query("refresh_subject"),
        {
            "watch_id": watch_id,
            "name": deal.name,
            "account_name": deal.account_name,
            "assigned_user_id": deal.assigned_user_id,
            "assigned_user_name": deal.assigned_user_name,
            "stage": deal.stage,
        },
    )
