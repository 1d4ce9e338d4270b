"""Opening and closing watches: the one place that writes them and plans their steps."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg

from followup_pipeline.domain.cadence import plan_steps
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.decisions import CloseReason
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.settings import ConfigError
from followup_pipeline.store.queries import query

SUBJECT_TYPE = "Opportunity"
RegisteredBy = Literal["webhook", "reconcile", "operator"]


@dataclass(frozen=True)
class Subject:
    """What a watch copies from the CRM's deal."""

    subject_id: str
    name: str
    stage: str
    account_name: str | None = None
    assigned_user_id: str | None = None
    assigned_user_name: str | None = None
    crm_url: str | None = None


@dataclass(frozen=True)
class Plan:
    """How a new watch is planned: its cadence, the zone of its dates, the calendar."""

    cadence_name: str
    offsets: tuple[int, ...]
    time_zone: str
    calendar: BusinessCalendar


def load_calendar(
    conn: psycopg.Connection[Any], country: str, subdivision: str | None
) -> BusinessCalendar:
    """The business calendar with the ``holidays`` table's overrides."""
    rows = conn.execute(query("holiday_overrides")).fetchall()
    return BusinessCalendar.with_overrides(
        country, subdivision, [(r["day"], r["kind"]) for r in rows]
    )


class UnknownCadence(ConfigError):
    """The configured cadence name has no row in ``cadences``."""


def load_plan(
    conn: psycopg.Connection[Any],
    *,
    cadence_name: str,
    configured_offsets: tuple[int, ...] | None,
    time_zone: str,
    calendar: BusinessCalendar,
) -> Plan:
    """How new watches are planned now: the offsets of the cadence row ``cadence_name``.

    ``configured_offsets`` (``FOLLOWUP_CADENCE``, when it is set) define that row first, so the
    table holds what every plan was made from. A plan is fixed when made: a changed row applies
    to plans made after the change.
    """
    if configured_offsets is not None:
        conn.execute(
            query("upsert_cadence"), {"name": cadence_name, "offsets": list(configured_offsets)}
        )
    row = conn.execute(query("cadence_offsets"), {"name": cadence_name}).fetchone()
    if row is None:
        raise UnknownCadence(
            f"FOLLOWUP_CADENCE_NAME: no cadence named {cadence_name!r} in the table cadences; "
            "add the row, or set FOLLOWUP_CADENCE to define it"
        )
    return Plan(cadence_name, tuple(row["offsets"]), time_zone, calendar)


def open_watch(
    conn: psycopg.Connection[Any],
    *,
    subject: Subject,
    plan: Plan,
    registered_at: datetime,
    registered_by: RegisteredBy,
    source_event_id: int | None = None,
) -> int | None:
    """Open a watch with its steps planned; None when the deal already has an open one."""
    base_on = local_date(registered_at, plan.time_zone)
    with conn.transaction():
        row = conn.execute(
            query("insert_watch"),
            {
                "subject_type": SUBJECT_TYPE,
                "subject_id": subject.subject_id,
                "subject_name": subject.name,
                "account_name": subject.account_name,
                "assigned_user_id": subject.assigned_user_id,
                "assigned_user_name": subject.assigned_user_name,
                "stage": subject.stage,
                "cadence_name": plan.cadence_name,
                "offsets": list(plan.offsets),
                "time_zone": plan.time_zone,
                "base_on": base_on,
                "registered_at": registered_at,
                "registered_by": registered_by,
                "source_event_id": source_event_id,
                "crm_url": subject.crm_url,
            },
        ).fetchone()
        if row is None:
            return None
        watch_id = int(row["id"])
        for step in plan_steps(base_on, plan.offsets, plan.calendar):
            conn.execute(
                query("insert_step"),
                {
                    "watch_id": watch_id,
                    "step_no": step.step_no,
                    "offset_days": step.offset_days,
                    "due_on": step.due_on,
                },
            )
    return watch_id


def close_watch(
    conn: psycopg.Connection[Any], *, watch_id: int, reason: CloseReason, closed_at: datetime
) -> bool:
    """Close an open watch; False when it was closed already."""
    row = conn.execute(
        query("close_watch"), {"watch_id": watch_id, "reason": reason, "closed_at": closed_at}
    ).fetchone()
    return row is not None


def open_watch_of(conn: psycopg.Connection[Any], subject_id: str) -> dict[str, Any] | None:
    """The open watch of a deal."""
    row: dict[str, Any] | None = conn.execute(
        query("open_watch_of_subject"), {"subject_type": SUBJECT_TYPE, "subject_id": subject_id}
    ).fetchone()
    return row


def latest_watch_of(conn: psycopg.Connection[Any], subject_id: str) -> dict[str, Any] | None:
    """The most recent watch of a deal, open or closed."""
    row: dict[str, Any] | None = conn.execute(
        query("latest_watch_of_subject"), {"subject_type": SUBJECT_TYPE, "subject_id": subject_id}
    ).fetchone()
    return row


def steps_of(conn: psycopg.Connection[Any], watch_id: int) -> list[dict[str, Any]]:
    """Every step of a watch, in order."""
    return list(conn.execute(query("steps_of_watch"), {"watch_id": watch_id}).fetchall())
