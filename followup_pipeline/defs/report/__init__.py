"""Reports: the morning list (partitions of business days) and the Friday overview (weekly
partitions keyed by their Friday).

Each report is sent once per partition: its send is the ledger action
``report:{kind}:{partition}`` (``mailer.py``). A rerun, a run retry or a second backfill sends
nothing; run config ``force: true`` sends again under ``report:{kind}:{partition}#{n}``. A report
sent after its day says so in its subject.
"""

from datetime import date, datetime

import dagster as dg

from followup_pipeline.defs.common import (
    RunCounts,
    business_day_of,
    outcome_output,
)
from followup_pipeline.defs.report.gather import last_evaluate_ok, morning_data, weekly_data
from followup_pipeline.defs.report.mailer import Mailer, MailError, MailResult
from followup_pipeline.domain.reports import Rendered, render_morning, render_weekly
from followup_pipeline.integrations.resources import OutlookResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import reports as store


class ReportConfig(dg.Config):
    """``force``: send the partition's report again, though it went out already."""

    force: bool = False


def build_defs(settings: Settings) -> dg.Definitions:
    """The two report jobs, partitioned in the team's time zone, and their schedules."""
    zone = settings.timezone
    at = settings.morning_report_at

    def send(
        context: dg.OpExecutionContext,
        config: ReportConfig,
        postgres: PostgresResource,
        outlook: OutlookResource,
        *,
        kind: str,
        rendered: Rendered,
        now: datetime,
    ) -> MailResult:
        """Send a rendered report once per partition (again under ``key#n`` with ``force``)."""
        base = f"report:{kind}:{context.partition_key}"
        # A run and its retries share their root run id: a retried forced run reuses its key.
        root = context.run.tags.get("dagster/root_run_id") or context.run_id
        with postgres.connection() as conn:
            keys = store.report_keys(conn, base)
        sent = any(k.key == base and k.outcome in ("accepted", "confirmed") for k in keys)
        key = base
        if config.force and sent:
            forced = [k for k in keys if k.key != base]
            mine = next((k.key for k in forced if k.root_run_id == root), None)
            key = mine or f"{base}#{len(forced) + 1}"
        mailer = Mailer(
            postgres,
            outlook.get_client(),
            settings,
            now=now,
            run_id=context.run_id,
            log=context.log,
        )
        try:
            result = mailer.send_once(
                key=key,
                kind="report",
                to=settings.report_recipients,
                subject=rendered.subject,
                html=rendered.html,
                text=rendered.text,
                # What the next report's "since" is: up to when this one read the data.
                payload={"until": now.isoformat(), "root_run_id": root},
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

    def nobody(context: dg.OpExecutionContext) -> dg.Output[RunCounts] | None:
        if settings.report_recipients:
            return None
        reason = "FOLLOWUP_REPORT_RECIPIENTS is empty: nobody to send the report to"
        context.log.warning("skipped: %s", reason)
        return outcome_output(context, "skipped", {"reason": reason})

    def sent_counts(result: MailResult, **counts: int) -> RunCounts:
        return {
            "rendered": 1,
            result.outcome: 1,
            "key": result.key,
            "request_id": result.request_id or "",
            **counts,
        }

    @dg.op
    def send_morning_list(
        context: dg.OpExecutionContext,
        config: ReportConfig,
        postgres: PostgresResource,
        outlook: OutlookResource,
        clock: ClockResource,
    ) -> dg.Output[RunCounts]:
        """Render the partition's morning list and send it once (again with ``force``)."""
        skipped = nobody(context)
        if skipped is not None:
            return skipped
        now = clock.now()
        day = date.fromisoformat(context.partition_key)
        with postgres.connection() as conn:
            data = morning_data(conn, settings, day, now, last_evaluate_ok(context.instance))
        rendered = render_morning(data, settings.report_language)
        result = send(
            context, config, postgres, outlook, kind="morning", rendered=rendered, now=now
        )
        counts = sent_counts(
            result,
            due_today=len(data.due_today),
            overdue=len(data.overdue),
            summaries=len(data.summaries),
            closed=len(data.closed),
            late=int(data.late),
        )
        return outcome_output(context, "ok", counts)

    @dg.op
    def send_weekly_overview(
        context: dg.OpExecutionContext,
        config: ReportConfig,
        postgres: PostgresResource,
        outlook: OutlookResource,
        clock: ClockResource,
    ) -> dg.Output[RunCounts]:
        """Render the week's overview (the partition's Friday) and send it once."""
        skipped = nobody(context)
        if skipped is not None:
            return skipped
        now = clock.now()
        friday = date.fromisoformat(context.partition_key)
        with postgres.connection() as conn:
            data = weekly_data(conn, settings, friday, now, context.instance)
        rendered = render_weekly(data, settings.report_language)
        result = send(context, config, postgres, outlook, kind="weekly", rendered=rendered, now=now)
        counts = sent_counts(
            result, fired=data.fired, opened=data.opened, failed_runs=data.failed_runs
        )
        return outcome_output(context, "ok", counts)

    start = settings.partitions_start_on()
    # One partition per weekday; a holiday keeps its partition, and the schedule skips it.
    morning_partitions = dg.TimeWindowPartitionsDefinition(
        cron_schedule="0 0 * * 1-5",
        start=f"{start:%Y-%m-%d}",
        fmt="%Y-%m-%d",
        timezone=zone,
        end_offset=1,
    )
    # Weeks start on Friday (day_offset=5), so the partition of a Friday is that Friday's overview.
    weekly_partitions = dg.WeeklyPartitionsDefinition(
        start_date=f"{start:%Y-%m-%d}", timezone=zone, day_offset=5, end_offset=1
    )

    @dg.job(
        partitions_def=morning_partitions,
        description="The morning list of a business day, sent once through Outlook.",
    )
    def morning_report() -> None:
        send_morning_list()

    @dg.job(
        partitions_def=weekly_partitions,
        description="The Friday overview of the week, sent once through Outlook.",
    )
    def weekly_report() -> None:
        send_weekly_overview()

    @dg.schedule(
        job=morning_report,
        cron_schedule=f"{at.minute} {at.hour} * * 1-5",
        execution_timezone=zone,
        name="morning_report_weekdays",
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    def morning_report_weekdays(
        context: dg.ScheduleEvaluationContext, postgres: PostgresResource
    ) -> dg.RunRequest | dg.SkipReason:
        """The morning list of each business day (weekends and holidays are skipped)."""
        day = business_day_of(context, postgres, settings)
        if isinstance(day, dg.SkipReason):
            return day
        return dg.RunRequest(partition_key=f"{day:%Y-%m-%d}")

    weekly_schedule = dg.build_schedule_from_partitioned_job(
        weekly_report,
        name="weekly_report_friday",
        hour_of_day=settings.weekly_report_at.hour,
        minute_of_hour=settings.weekly_report_at.minute,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    return dg.Definitions(
        jobs=[morning_report, weekly_report], schedules=[morning_report_weekdays, weekly_schedule]
    )
