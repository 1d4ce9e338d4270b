"""Evaluation: hourly reconciliation with the CRM, then due steps to ClickUp (one run at a time)."""

from datetime import datetime
from zoneinfo import ZoneInfo

import dagster as dg

from followup_pipeline.defs.common import SINGLETON_TAG, RunCounts, outcome_output
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import get_settings

#: A hung run is failed after this many seconds (run monitoring, dagster.yaml).
MAX_RUNTIME_S = 45 * 60
PARTITIONS_START = "2026-01-01-00:00"

OPEN_WATCHES = "SELECT count(*) AS n FROM watches WHERE closed_at IS NULL"


def hourly_partitions(zone: str) -> dg.HourlyPartitionsDefinition:
    """One partition per hour of the team's time zone: labels for the operator, not windows."""
    # end_offset=1: the hour in progress exists, so a tick at 07:00 runs partition 07:00.
    return dg.HourlyPartitionsDefinition(start_date=PARTITIONS_START, timezone=zone, end_offset=1)


@dg.op
def sync(context: dg.OpExecutionContext, clock: ClockResource) -> datetime:
    """Reconcile watches with the CRM (lands with the evaluate issue); returns the run's now."""
    now = clock.now()
    context.log.info("evaluating at %s", now.isoformat())
    return now


@dg.op
def evaluate_due_steps(
    context: dg.OpExecutionContext, postgres: PostgresResource, now: datetime
) -> dg.Output[RunCounts]:
    """Fire due steps through the action ledger (lands with the evaluate issue)."""
    with postgres.connection() as conn:
        row = conn.execute(OPEN_WATCHES).fetchone()
    return outcome_output(context, "ok", {"open_watches": int(row["n"]) if row else 0})


def build(zone: str) -> tuple[dg.JobDefinition, dg.ScheduleDefinition]:
    """The ``evaluate`` job and its business-hours schedule in ``zone``."""
    partitions = hourly_partitions(zone)

    @dg.job(
        name="evaluate",
        partitions_def=partitions,
        executor_def=dg.in_process_executor,
        tags={SINGLETON_TAG: "evaluate", "dagster/max_runtime": str(MAX_RUNTIME_S)},
        description="Reconcile with the CRM, reset cadences, fire due steps, close exhausted.",
    )
    def evaluate() -> None:
        evaluate_due_steps(sync())

    settings = get_settings()
    calendar = BusinessCalendar(settings.holiday_country, settings.holiday_subdivision)
    hours = f"{settings.business_hours_start}-{settings.business_hours_end - 1}"

    @dg.schedule(
        job=evaluate,
        cron_schedule=f"0 {hours} * * 1-5",
        execution_timezone=zone,
        name="evaluate_business_hours",
    )
    def evaluate_business_hours(
        context: dg.ScheduleEvaluationContext,
    ) -> dg.RunRequest | dg.SkipReason:
        scheduled = context.scheduled_execution_time
        assert scheduled is not None
        day = scheduled.astimezone(ZoneInfo(zone)).date()
        if not calendar.is_business_day(day):
            return dg.SkipReason(f"{day} is not a business day")
        key = partitions.get_partition_key_for_timestamp(scheduled.timestamp())
        return dg.RunRequest(partition_key=key)

    return evaluate, evaluate_business_hours


evaluate_job, evaluate_schedule = build(get_settings().timezone)

definitions = dg.Definitions(jobs=[evaluate_job], schedules=[evaluate_schedule])
