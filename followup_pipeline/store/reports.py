"""What the reports read: the morning list's steps, summaries and closed watches, and when a
report was last sent. Rows come back as the domain's own report lines."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, LiteralString

import psycopg

from followup_pipeline.domain.reports import (
    ClosedLine,
    LeadCount,
    LeadWeek,
    StageLine,
    StepLine,
    SummaryLine,
)
from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query


def morning_steps(
    conn: psycopg.Connection[Any],
    *,
    day: date,
    day_start: datetime,
    until: datetime,
    max_attempts: int,
    task_url_prefix: str,
) -> list[StepLine]:
    """Steps due on ``day`` (or whose task was created in [``day_start``, ``until``]) and
    overdue ones, with why the overdue ones wait, each with its deal's newest summary written
    by ``until`` and its task's link (``task_url_prefix`` + the task's id)."""
    params = {
        "day": day,
        "day_start": day_start,
        "until": until,
        "max_attempts": max_attempts,
        "task_url_prefix": task_url_prefix,
    }
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


def last_reports_sent(
    conn: psycopg.Connection[Any], kind: str, *, now: datetime
) -> dict[str, datetime]:
    """Up to when the last report of ``kind`` that reached Graph was rendered, per recipient
    (``''``: the team's; ``to:{user id}``: a salesperson's own)."""
    params = {"prefix": f"report:{kind}:%", "now": now}
    rows = conn.execute(query("last_reports_sent"), params)
    return {row["recipient"]: row["sent_at"] for row in rows}


@dataclass(frozen=True)
class ReportKey:
    """An action of a report window: its key, outcome, and the run lineage that made it."""

    key: str
    outcome: str
    root_run_id: str | None


def report_keys(conn: psycopg.Connection[Any], key: str) -> list[ReportKey]:
    """A report window's actions: its key and its forced ``key#n``, oldest first."""
    # A key's own `_` and `%` are literal in the pattern (escaped with `!`).
    escaped = key.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    params = {"key": key, "forced": f"{escaped}#%"}
    return fetch_all(conn, ReportKey, query("report_keys"), params)


def dead_letter_count(conn: psycopg.Connection[Any]) -> int:
    """The deal follow-up's and lead intake's dead letters waiting in the work list."""
    row = conn.execute(query("dead_letter_count")).fetchone()
    return int(row["dead"]) if row else 0


@dataclass(frozen=True)
class WeekCounts:
    """What happened in a week, counted."""

    fired: int
    opened: int
    skipped: dict[str, int]
    closed: dict[str, int]
    tasks_per_day: dict[date, int]


def week_counts(
    conn: psycopg.Connection[Any], *, start: datetime, until: datetime, zone: str
) -> WeekCounts:
    """Steps fired and skipped by reason, watches opened and closed by reason, tasks per local
    day, in [``start``, ``until``)."""
    params = {"start": start, "until": until, "zone": zone}
    row = conn.execute(query("weekly_counts"), params).fetchone()
    assert row is not None

    def by_reason(name: LiteralString) -> dict[str, int]:
        return {r["reason"]: int(r["n"]) for r in conn.execute(query(name), params)}

    per_day = {r["day"]: int(r["n"]) for r in conn.execute(query("weekly_tasks_per_day"), params)}
    return WeekCounts(
        fired=int(row["fired"]),
        opened=int(row["opened"]),
        skipped=by_reason("weekly_skipped"),
        closed=by_reason("weekly_closed"),
        tasks_per_day=per_day,
    )


def open_by_stage(conn: psycopg.Connection[Any], *, until: datetime) -> list[StageLine]:
    """Open watches by stage with their ages at ``until``."""
    return fetch_all(conn, StageLine, query("weekly_open_by_stage"), {"until": until})


def dead_letters_between(conn: psycopg.Connection[Any], *, start: datetime, until: datetime) -> int:
    """Dead letters of the work list that last failed in [``start``, ``until``), those a person
    closed with a decision left out."""
    params = {"start": start, "until": until}
    row = conn.execute(query("weekly_dead_letters"), params).fetchone()
    return int(row["dead"]) if row else 0


def lead_week(
    conn: psycopg.Connection[Any], *, start: datetime, until: datetime, sources: Sequence[str]
) -> LeadWeek:
    """The lead intake of [``start``, ``until``) from the lead ``sources``: events by source
    and priority, people first seen, CRM writes by outcome and reason; and what waits now of
    what arose before ``until``: lead events in review, dead lead events by step."""
    params = {"start": start, "until": until, "sources": list(sources)}
    row = conn.execute(query("weekly_leads_figures"), params).fetchone()
    assert row is not None
    crm = conn.execute(query("weekly_lead_crm"), params)
    stuck = conn.execute(query("weekly_lead_stuck"), params)
    return LeadWeek(
        received=fetch_all(conn, LeadCount, query("weekly_leads_in"), params),
        new_people=int(row["new_people"]),
        crm={(r["outcome"], r["reason"]): int(r["n"]) for r in crm},
        in_review=int(row["in_review"]),
        stuck={r["step"]: int(r["n"]) for r in stuck},
        ever=bool(row["ever"]),
    )
