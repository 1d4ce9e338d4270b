"""What the reports show, read from the machine's tables (and Dagster's runs): shared by the
report jobs and ``followup report preview``."""

from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
import psycopg

from followup_pipeline.domain.localtime import local_date, start_of_day_utc
from followup_pipeline.domain.reports import (
    CrmReading,
    Health,
    MorningData,
    WeeklyData,
    lead_section,
)
from followup_pipeline.engine.runs import Ended, ended_of
from followup_pipeline.settings import LEAD_SOURCES, Settings
from followup_pipeline.store import reports as store
from followup_pipeline.store.enrichments import open_review_items
from followup_pipeline.store.events import gauges
from followup_pipeline.store.holidays import load_calendar
from followup_pipeline.store.report_deals import week_deals

#: A ClickUp task's page, for a step fired before its task's own ``url`` was kept on it.
CLICKUP_TASK_URL = "https://app.clickup.com/t/"


#: What ``evaluate`` says in its ``followup/degraded`` tag when the CRM did not answer its sync
#: (how a run from before the ``followup/crm`` tag is read).
CRM_UNREACHABLE = "CRM unreachable"
#: How many of ``evaluate``'s latest runs are read for the operations line (a week of hours).
RUNS_READ = 200


def _crm_state(ended: Ended, *, failed: bool) -> str | None:
    """How much of the CRM a finished ``evaluate`` read: ``full``, ``partial``, ``down``, or
    ``failed`` (the run failed); None: a ``skipped`` run, which read nothing and says nothing."""
    if failed:
        return "failed"
    if ended.outcome == "skipped":
        return None
    if ended.crm is not None:
        return ended.crm
    unreachable = ended.outcome == "partial" and CRM_UNREACHABLE in (ended.degraded or "")
    return "down" if unreachable else "full"


def crm_reading(instance: dg.DagsterInstance | None) -> CrmReading:
    """What ``evaluate``'s latest finished runs say of the CRM (Dagster's own record): when the
    last one that read it in full read it, and, when the latest did not (the CRM down, a listing
    unread, the run failed), since when and how: the first of that unbroken streak. Times are the
    runs' own clock (a simulated one's too), never later than Dagster's."""
    if instance is None:
        return CrmReading(None, None)
    records = instance.get_run_records(
        filters=dg.RunsFilter(
            job_name="evaluate",
            statuses=[dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE],
        ),
        limit=RUNS_READ,
        order_by="update_timestamp",
        ascending=False,
    )
    read = []  # (when it read, how much), newest first; each record read once
    for record in records:
        ended = ended_of(record)
        failed = record.dagster_run.status == dg.DagsterRunStatus.FAILURE
        state = _crm_state(ended, failed=failed)
        if state is not None:
            read.append((min(ended.at or ended.started, ended.ended), state))
    last_full = next((when for when, state in read if state == "full"), None)
    since, how = None, None
    for when, state in read:
        if state == "full":
            break
        since, how = when, how or state
    return CrmReading(last_full, since, how)


def morning_data(
    conn: psycopg.Connection[Any],
    settings: Settings,
    day: date,
    now: datetime,
    crm: CrmReading,
    *,
    preview: bool = False,
) -> MorningData:
    """The team's morning list of ``day``: due and overdue steps, what changed since the last
    list (``reports.personal`` cuts a salesperson's own out of it)."""
    zone = settings.timezone
    day_start = start_of_day_utc(day, zone)
    steps = store.morning_steps(
        conn,
        day=day,
        day_start=day_start,
        until=now,
        max_attempts=settings.action_max_attempts,
        task_url_prefix=CLICKUP_TASK_URL,
    )
    # Each list shows what changed since its own last send (a day, for a first one).
    sent = store.last_reports_sent(conn, "morning", now=now)
    first = now - timedelta(days=1)
    since = sent.get("", first)
    since_by_owner = {
        user: sent.get(f"to:{user}", first) for user in settings.salesperson_addresses
    }
    earliest = min([since, *since_by_owner.values()])
    pending = gauges(conn)["oldest_pending_s"]
    return MorningData(
        day=day,
        time_zone=zone,
        steps=steps,
        summaries=store.summaries_between(conn, since=earliest, until=now),
        closed=store.closed_between(conn, since=earliest, until=now),
        since=since,
        since_by_owner=since_by_owner,
        review_open=open_review_items(conn),
        health=Health(
            store.dead_letter_count(conn),
            crm.last_full,
            pending or None,
            crm_unreachable_since=crm.unreachable_since,
            crm_state=crm.how,
        ),
        late=not preview and day < local_date(now, zone),
        preview=preview,
    )


def weekly_data(
    conn: psycopg.Connection[Any],
    settings: Settings,
    friday: date,
    now: datetime,
    instance: dg.DagsterInstance | None,
    *,
    preview: bool = False,
) -> WeeklyData:
    """The week that ends on ``friday`` at the report's time: from the previous Friday's report
    time to this one's (``now`` at most), so consecutive overviews leave no gap. Its chart has
    the week's business days (and a day off only if a task was created on it). Its lead section
    is left out while lead intake has never taken in a lead (``lead_section``)."""
    zone = ZoneInfo(settings.timezone)
    first = friday - timedelta(days=6)
    at = settings.weekly_report_at
    start = datetime.combine(friday - timedelta(days=7), at, tzinfo=zone)
    until = min(now, datetime.combine(friday, at, tzinfo=zone))
    week = store.week_counts(conn, start=start, until=until, zone=settings.timezone)
    failed = (
        instance.get_run_records(
            filters=dg.RunsFilter(
                statuses=[dg.DagsterRunStatus.FAILURE], created_after=start, created_before=until
            )
        )
        if instance is not None
        else []
    )
    calendar = load_calendar(conn, settings.holiday_country, settings.holiday_subdivision)
    week_days = (first + timedelta(days=n) for n in range(7))
    days = {day: 0 for day in week_days if calendar.is_business_day(day)}
    return WeeklyData(
        start=first,
        end=friday,
        time_zone=settings.timezone,
        fired=week.fired,
        suppressed=week.skipped,
        opened=week.opened,
        closed=week.closed,
        open_by_stage=store.open_by_stage(conn, until=until),
        failed_runs=len(failed),
        dead_letters=store.dead_letters_between(conn, start=start, until=until),
        deals=week_deals(conn, start=start, until=until),
        tasks_per_day={**days, **week.tasks_per_day},
        late=not preview and friday < local_date(now, settings.timezone),
        preview=preview,
        leads=lead_section(store.lead_week(conn, start=start, until=until, sources=LEAD_SOURCES)),
    )
