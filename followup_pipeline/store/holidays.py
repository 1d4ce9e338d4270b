"""Local corrections of the business calendar (``holidays``): days off and worked holidays."""

from __future__ import annotations

from typing import Any

import psycopg

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.store.queries import query


def load_calendar(
    conn: psycopg.Connection[Any], country: str, subdivision: str | None
) -> BusinessCalendar:
    """The business calendar of ``country`` with the ``holidays`` table's overrides."""
    rows = conn.execute(query("holiday_overrides")).fetchall()
    return BusinessCalendar.with_overrides(
        country, subdivision, [(r["day"], r["kind"]) for r in rows]
    )
