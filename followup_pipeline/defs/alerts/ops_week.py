"""The ``ops_weekly`` job: the weekly operations look (``domain/ops_week.py``), gathered from the
list of work, the account, the runs and the census, mailed on Monday morning to the operations
owner and backup, and each academy's own look to its owner, once per week (ledger keys
``ops:weekly:<week>`` and ``ops:weekly:<tenant>:<week>``)."""

from collections import Counter, defaultdict
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
import psycopg

from followup_pipeline.domain.census import views
from followup_pipeline.domain.ops_week import Cause, Degraded, OpsWeek, Owed, error_kind
from followup_pipeline.domain.ops_week import render_ops_week as render
from followup_pipeline.domain.work import STATES, Selection, tenant_of_key
from followup_pipeline.engine.account import account
from followup_pipeline.engine.mailer import Mailer
from followup_pipeline.engine.runs import (
    DEGRADED_TAG,
    OUTCOME_TAG,
    RunCounts,
    outcome_output,
    time_limit,
)
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.resources import OutlookResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import alerts as alert_store
from followup_pipeline.store import census, lms
from followup_pipeline.store import work as work_store
from followup_pipeline.store.alerts import FailedRun

#: The week a look covers, up to its run.
WEEK = timedelta(days=7)
#: Dagster's tag of a run its schedule launched.
SCHEDULE_TAG = "dagster/schedule_name"
#: A look that outlives this is failed by run monitoring.
MAX_RUNTIME_S = 15 * 60


def _causes(items: list[work_store.WorkItem]) -> list[Cause]:
    groups: dict[tuple[str, str | None, str], list[work_store.WorkItem]] = defaultdict(list)
    for item in items:
        said = item.error or item.reason
        groups[(item.pipeline, item.step, error_kind(said))].append(item)
    return [
        Cause(pipeline, step, kind, len(found), found[0].what, found[0].error or found[0].reason)
        for (pipeline, step, kind), found in groups.items()
    ]


def _failed_runs(runs: list[FailedRun]) -> list[Cause]:
    """The week's failed runs, by job and the first error's type."""
    groups: dict[tuple[str, str], list[FailedRun]] = defaultdict(list)
    for run in runs:
        groups[(run.job, run.message.split(":", 1)[0] or "RunFailure")].append(run)
    return [
        Cause("runs", job, kind, len(found), f"run {found[0].run_id or '?'}", found[0].message)
        for (job, kind), found in groups.items()
    ]


def _owed(counts: list[work_store.Count]) -> list[Owed]:
    by_owner: dict[str, Counter[str]] = defaultdict(Counter)
    oldest: dict[str, datetime] = {}
    for count in counts:
        by_owner[count.owner][count.kind] += count.items
        oldest[count.owner] = min(oldest.get(count.owner, count.oldest), count.oldest)
    return [Owed(owner, sum(k.values()), dict(k), oldest[owner]) for owner, k in by_owner.items()]


def _degraded(instance: dg.DagsterInstance, since: datetime) -> list[Degraded]:
    """The week's runs that ended ``partial`` for a vendor, by job and vendor (the one that
    skipped most in each run), with the first cause said."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={OUTCOME_TAG: "partial"}, updated_after=since), limit=5000
    )
    runs: Counter[tuple[str, str]] = Counter()
    first: dict[tuple[str, str], str] = {}
    for record in sorted(records, key=lambda r: r.create_timestamp):
        tag = record.dagster_run.tags.get(DEGRADED_TAG)
        if not tag:
            continue
        vendor = tag.split(":", 1)[0]
        key = (record.dagster_run.job_name, vendor)
        runs[key] += 1
        first.setdefault(key, tag.split("first error: ", 1)[-1])
    return [Degraded(job, vendor, n, first[(job, vendor)]) for (job, vendor), n in runs.items()]


def gather(
    conn: psycopg.Connection[Any],
    instance: dg.DagsterInstance,
    settings: Settings,
    *,
    now: datetime,
    tenant: lms.Tenant | None = None,
) -> OpsWeek:
    """The look at the week up to ``now``: the operations', or ``tenant``'s own."""
    since = now - WEEK
    zone = ZoneInfo(tenant.time_zone if tenant else settings.timezone)
    start, end = since.astimezone(zone).date(), (now - timedelta(days=1)).astimezone(zone).date()
    selection = Selection(states=STATES, since=since)
    failed = work_store.select(conn, selection)
    counts = work_store.counts(conn)
    week = account(conn, settings, since=since, until=now)
    if tenant is not None:
        mine = tenant.id
        failed = [item for item in failed if item.tenant_id == mine]
        counts = [count for count in counts if count.tenant_id == mine]
        status = {row.tenant_id: row for row in lms.status(conn, now, since=since)}.get(mine)
        suppressed = (
            {
                reason: n
                for reason, n in (
                    ("superseded", status.superseded),
                    ("opted_out", status.opted_out),
                    ("completed", status.completed),
                    ("expired", status.expired),
                    ("dry_run", status.dry_run),
                )
                if n
            }
            if status
            else {}
        )
        unaccounted = [e for e in week.unaccounted if tenant_of_key(e.name) == mine]
        return OpsWeek(
            start=start,
            end=end,
            zone=str(zone),
            failures=_causes(failed),
            waiting=_owed(counts),
            suppressed=suppressed,
            due=None,
            unaccounted=len(unaccounted),
            unaccounted_named=[e.name for e in unaccounted],
            tenant=mine,
        )
    by_reason: Counter[str] = Counter()
    for line in week.lines.values():
        by_reason.update(line.suppressed)
    rows = census.since(conn, (now - timedelta(weeks=5)).date(), zone=settings.timezone)
    return OpsWeek(
        start=start,
        end=end,
        zone=str(zone),
        failures=[
            *_failed_runs(alert_store.run_failures(conn, since=since, until=now)),
            *_causes(failed),
        ],
        waiting=_owed(counts),
        suppressed=dict(by_reason),
        degraded=_degraded(instance, since),
        census=views(rows, settings.watched_stages, end),  # (the week looked at, first)
        due=sum(line.due for line in week.lines.values()),
        unaccounted=week.total("unaccounted"),
        unaccounted_named=[f"{e.pipeline} {e.kind} {e.name}" for e in week.unaccounted],
    )


@dg.op
def mail_ops_week(
    context: dg.OpExecutionContext,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    outlook: OutlookResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """The week's look to the operations owner and backup, and each academy's to its owner;
    once per week each."""
    run = RunScope(clock.now(), context.run_id, context.log)
    # The week looked at: the one that began 7 days ago (Monday's run: last week). A run by hand
    # (not the schedule's) is its own look, never the scheduled one of its week.
    year, week_no, _ = (run.now - WEEK).astimezone(ZoneInfo(settings.timezone)).isocalendar()
    scheduled = context.run.tags.get(SCHEDULE_TAG) is not None
    week = f"{year}-W{week_no:02d}" + ("" if scheduled else f":run:{context.run_id}")
    mailer = Mailer(run, postgres, outlook.get_client(), settings)
    counts: Counter[str] = Counter()
    language = settings.report_language
    with postgres.connection() as conn:
        looks = [("", settings.ops_recipients(), gather(conn, context.instance, settings,
                                                         now=run.now))]  # fmt: skip
        for tenant in lms.tenants(conn):
            to = [a for a in (tenant.owner, tenant.backup) if a]
            if tenant.mode != "off" and to:
                own = gather(conn, context.instance, settings, now=run.now, tenant=tenant)
                looks.append((f"{tenant.id}:", to, own))
    for prefix, to, data in looks:
        if not to:
            counts["no_recipient"] += 1
            continue
        rendered = render(data, language)
        result = mailer.send_once(
            key=f"ops:weekly:{prefix}{week}",
            kind="report",
            to=to,
            subject=rendered.subject,
            html=rendered.html,
            text=rendered.text,
        )
        counts[result.outcome] += 1
    return outcome_output(context, "ok", dict(counts))


@dg.job(
    description="The weekly operations look: what failed and why, what waits for whom, mailed "
    "to the operations owner (and each academy's to its owner) once a week.",
    executor_def=dg.in_process_executor,
    tags=time_limit(MAX_RUNTIME_S),
)
def ops_weekly() -> None:
    mail_ops_week()
