"""The census of the watched stages (``stage_census``, ``stage_entries``, docs/architecture.md
§13): per day and stage, how many deals the CRM listed, and how many entered it while followed
(a watch opened in it, or a followed deal moved to it)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, time
from typing import Any

import psycopg

from followup_pipeline.domain.census import Count
from followup_pipeline.domain.localtime import local_to_utc
from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query


def record(
    conn: psycopg.Connection[Any], listed: Mapping[str, int], *, day: date, at: datetime
) -> None:
    """Record ``day``'s reading: each watched stage's deals listed now."""
    params = {"day": day, "stages": list(listed), "listed": list(listed.values()), "at": at}
    conn.execute(query("census_record"), params)


def since(conn: psycopg.Connection[Any], day: date, *, zone: str) -> list[Count]:
    """The census from ``day`` on (days of ``zone``), oldest first."""
    params = {"since": day, "since_at": local_to_utc(day, time(0), zone), "zone": zone}
    return fetch_all(conn, Count, query("census_since"), params)
