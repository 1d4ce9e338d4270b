"""The two report ops, made by one factory: gather the partition's data, render it, send it once.

Each report is sent once per partition: its send is the ledger action
``report:{kind}:{partition}`` (``engine/mailer.py``). A rerun, a run retry or a second backfill
sends nothing; run config ``force: true`` sends again under ``report:{kind}:{partition}#{n}``.
A run launched without a partition (``followup dagster job execute -j morning_report``) sends the
current window (``window.py``) under that window's key: the same once-per-window rule.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Generic, TypeVar

import dagster as dg
import psycopg

from followup_pipeline.defs.report.gather import last_evaluate_ok, morning_data, weekly_data
from followup_pipeline.defs.report.window import Kind, current_window
from followup_pipeline.domain.reports import (
    Language,
    MorningData,
    Rendered,
    WeeklyData,
    render_morning,
    render_weekly,
)
from followup_pipeline.engine.mailer import Mailer, MailError, MailResult
from followup_pipeline.engine.runs import RunCounts, outcome_output, skipped_output
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.resources import OutlookResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import reports as store

Data = TypeVar("Data")


class ReportConfig(dg.Config):
    """``force``: send the partition's report again, though it went out already."""

    force: bool = False


@dataclass(frozen=True)
class Report(Generic[Data]):
    """One kind of report: how its data is gathered, rendered and counted."""

    kind: Kind
    op_name: str
    description: str
    gather: Callable[[psycopg.Connection[Any], Settings, date, datetime, dg.DagsterInstance], Data]
    render: Callable[[Data, Language], Rendered]
    counts: Callable[[Data], dict[str, int]]


MORNING = Report[MorningData](
    kind="morning",
    op_name="send_morning_list",
    description="Render the partition's morning list and send it once (again with ``force``).",
    gather=lambda conn, settings, day, now, instance: morning_data(
        conn, settings, day, now, last_evaluate_ok(instance)
    ),
    render=render_morning,
    counts=lambda data: {
        "due_today": len(data.due_today),
        "overdue": len(data.overdue),
        "summaries": len(data.summaries),
        "closed": len(data.closed),
        "late": int(data.late),
    },
)
WEEKLY = Report[WeeklyData](
    kind="weekly",
    op_name="send_weekly_overview",
    description="Render the week's overview (the partition's Friday) and send it once.",
    gather=weekly_data,
    render=render_weekly,
    counts=lambda data: {
        "fired": data.fired,
        "opened": data.opened,
        "failed_runs": data.failed_runs,
    },
)


def send(
    context: dg.OpExecutionContext,
    config: ReportConfig,
    settings: Settings,
    mailer: Mailer,
    *,
    kind: str,
    partition: str,
    rendered: Rendered,
) -> MailResult:
    """Send a rendered report once per partition (again under ``key#n`` with ``force``)."""
    base = f"report:{kind}:{partition}"
    # A run and its retries share their root run id: a retried forced run reuses its key.
    root = context.run.tags.get("dagster/root_run_id") or context.run_id
    with mailer.db.connection() as conn:
        keys = store.report_keys(conn, base)
    sent = any(k.key == base and k.outcome in ("accepted", "confirmed") for k in keys)
    key = base
    if config.force and sent:
        forced = [k for k in keys if k.key != base]
        mine = next((k.key for k in forced if k.root_run_id == root), None)
        key = mine or f"{base}#{len(forced) + 1}"
    try:
        result = mailer.send_once(
            key=key,
            kind="report",
            to=settings.report_recipients,
            subject=rendered.subject,
            html=rendered.html,
            text=rendered.text,
            # What the next report's "since" is: up to when this one read the data.
            payload={"until": mailer.run.now.isoformat(), "root_run_id": root},
        )
    except MailError as error:
        raise dg.Failure(description=str(error)) from error
    if result.outcome == "in_flight":
        # The last send may still be on its way: neither sent nor known unsent. The run
        # fails, so the partition shows it; a rerun after the window settles it.
        raise dg.Failure(
            description=(
                f"{key}: the last send may still be on its way; run again after "
                f"{settings.in_flight_s():.0f} s (the partition is not known to be sent)"
            )
        )
    return result


def report_op(report: Report[Data]) -> dg.OpDefinition:
    """The op that sends ``report`` for its partition."""

    @dg.op(name=report.op_name, description=report.description)
    def send_report(
        context: dg.OpExecutionContext,
        config: ReportConfig,
        settings: dg.ResourceParam[Settings],
        postgres: PostgresResource,
        outlook: OutlookResource,
        clock: ClockResource,
    ) -> dg.Output[RunCounts]:
        if not settings.report_recipients:
            reason = "FOLLOWUP_REPORT_RECIPIENTS is empty: nobody to send the report to"
            context.log.warning("skipped: %s", reason)
            return skipped_output(context, reason)
        run = RunScope(clock.now(), context.run_id, context.log)
        if context.has_partition_key:
            partition = context.partition_key
        else:
            # Launched without a partition: the current window, not a failure.
            partition = current_window(report.kind, run.now, settings.timezone)
            context.log.info("no partition given: sending the current window %s", partition)
        day = date.fromisoformat(partition)
        with postgres.connection() as conn:
            data = report.gather(conn, settings, day, run.now, context.instance)
        rendered = report.render(data, settings.report_language)
        mailer = Mailer(run, postgres, outlook.get_client(), settings)
        result = send(
            context,
            config,
            settings,
            mailer,
            kind=report.kind,
            partition=partition,
            rendered=rendered,
        )
        counts = {
            "rendered": 1,
            result.outcome: 1,
            "key": result.key,
            "request_id": result.request_id or "",
            **report.counts(data),
        }
        return outcome_output(context, "ok", counts)

    return send_report


send_morning_list = report_op(MORNING)
send_weekly_overview = report_op(WEEKLY)
