"""Local corrections of the business calendar (``holidays``): days off and worked holidays."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import psycopg

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class Override:
    """A local correction of the calendar: a company day off, or a public holiday worked."""

    day: date
    kind: str
    name: str
    created_at: datetime


def load_calendar(
    conn: psycopg.Connection[Any], country: str, subdivision: str | None
) -> BusinessCalendar:
    """The business calendar of ``country`` with the ``holidays`` table's overrides."""
    rows = conn.execute(query("holiday_overrides")).fetchall()
    return BusinessCalendar.with_overrides(
        country, subdivision, [(r["day"], r["kind"]) for r in rows]
    )


def overrides(conn: psycopg.Connection[Any]) -> list[Override]:
    """Every local correction, in day order."""
    return fetch_all(conn, Override, query("holiday_list"))


def put_override(conn: psycopg.Connection[Any], day: date, kind: str, name: str) -> bool:
    """Make ``day`` a day off (``holiday``) or a working day (``workday``); whether it is new."""
    row = conn.execute(query("holiday_put"), {"day": day, "kind": kind, "name": name}).fetchone()
    return bool(row and row["new"])


def remove_override(conn: psycopg.Connection[Any], day: date) -> tuple[str, str] | None:
    """Remove the correction of ``day``; its kind and name, None when there was none."""
    row = conn.execute(query("holiday_remove"), {"day": day}).fetchone()
    return (str(row["kind"]), str(row["name"])) if row else None
