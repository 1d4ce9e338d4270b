"""The census of the watched stages (``stage_census``, docs/architecture.md §13): per day and
stage, how many deals the CRM listed and how many began their follow-up."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

import psycopg

from followup_pipeline.domain.localtime import local_to_utc
from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class CensusRow:
    """One day's census of one watched stage."""

    day: date
    stage: str
    listed: int
    entered: int


def record(
    conn: psycopg.Connection[Any], listed: Mapping[str, int], *, day: date, zone: str, at: datetime
) -> None:
    """Record ``day``'s census (a day of ``zone``): each stage's deals listed now, and the watches
    opened that day in it."""
    start = local_to_utc(day, time(0), zone)
    end = local_to_utc(day + timedelta(days=1), time(0), zone)
    params = {
        "day": day,
        "stages": list(listed),
        "listed": list(listed.values()),
        "day_start": start,
        "day_end": end,
        "at": at,
    }
    conn.execute(query("census_record"), params)


def since(conn: psycopg.Connection[Any], day: date) -> list[CensusRow]:
    """The census from ``day`` on, oldest first."""
    return fetch_all(conn, CensusRow, query("census_since"), {"since": day})
