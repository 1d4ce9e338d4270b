"""What the reports read: the morning list's steps, summaries and closed watches, and when a
report was last sent. Rows come back as the domain's own report lines."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import psycopg

from followup_pipeline.domain.reports import ClosedLine, StepLine, SummaryLine
from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query


def morning_steps(
    conn: psycopg.Connection[Any], *, day: date, day_start: datetime, max_attempts: int
) -> list[StepLine]:
    """Steps due on ``day`` and overdue ones, with why the overdue ones wait."""
    params = {"day": day, "day_start": day_start, "max_attempts": max_attempts}
    return fetch_all(conn, StepLine, query("morning_steps"), params)


def summaries_between(
    conn: psycopg.Connection[Any], *, since: datetime, until: datetime
) -> list[SummaryLine]:
    """Each open deal's newest summary written in (``since``, ``until``]."""
    params = {"since": since, "until": until}
    return fetch_all(conn, SummaryLine, query("morning_summaries"), params)


def closed_between(
    conn: psycopg.Connection[Any], *, since: datetime, until: datetime
) -> list[ClosedLine]:
    """Watches closed in (``since``, ``until``]."""
    params = {"since": since, "until": until}
    return fetch_all(conn, ClosedLine, query("morning_closed"), params)


def last_report_sent(conn: psycopg.Connection[Any], kind: str) -> datetime | None:
    """When a report of ``kind`` last reached Graph."""
    row = conn.execute(query("last_report_sent"), {"prefix": f"report:{kind}:%"}).fetchone()
    return row["sent_at"] if row else None


def report_sends(conn: psycopg.Connection[Any], key: str) -> int:
    """How many actions a report's window has (its key and its forced ``key#n``)."""
    row = conn.execute(query("report_sends"), {"key": key, "forced": f"{key}#%"}).fetchone()
    return int(row["sends"]) if row else 0


def dead_letter_count(conn: psycopg.Connection[Any], *, max_attempts: int) -> int:
    """Events and actions waiting for an operator."""
    row = conn.execute(query("dead_letter_count"), {"max_attempts": max_attempts}).fetchone()
    return int(row["dead"]) if row else 0
