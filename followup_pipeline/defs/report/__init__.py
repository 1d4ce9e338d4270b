"""Reports: the morning list (partitions of business days) and the Friday overview (weekly
partitions).

Not built yet: each run says so (outcome ``skipped``, reason ``not built``) and sends nothing.
"""

from zoneinfo import ZoneInfo

import dagster as dg

from followup_pipeline.defs.common import RunCounts, business_calendar, not_built
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import Settings

#: When the morning list goes out (local time), Monday to Friday; holidays are skipped.
MORNING_CRON = "30 7 * * 1-5"


@dg.op
def send_morning_list(context: dg.OpExecutionContext) -> dg.Output[RunCounts]:
    """Render and send the morning list of the partition's day: not built yet."""
    return not_built(context, "the morning list", partition=context.partition_key)


@dg.op
def send_weekly_overview(context: dg.OpExecutionContext) -> dg.Output[RunCounts]:
    """Render and send the Friday overview: not built yet."""
    return not_built(context, "the Friday overview", partition=context.partition_key)


def build_defs(settings: Settings) -> dg.Definitions:
    """The two report jobs, partitioned in the team's time zone, and their schedules."""
    zone = settings.timezone
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

    @dg.job(partitions_def=morning_partitions, description="The morning list (not built yet).")
    def morning_report() -> None:
        send_morning_list()

    @dg.job(partitions_def=weekly_partitions, description="The Friday overview (not built yet).")
    def weekly_report() -> None:
        send_weekly_overview()

    @dg.schedule(
        job=morning_report,
        cron_schedule=MORNING_CRON,
        execution_timezone=zone,
        name="morning_report_weekdays",
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    def morning_report_weekdays(
        context: dg.ScheduleEvaluationContext, postgres: PostgresResource
    ) -> dg.RunRequest | dg.SkipReason:
        """The morning list of each business day (weekends and holidays are skipped)."""
        scheduled = context.scheduled_execution_time
        assert scheduled is not None
        day = scheduled.astimezone(ZoneInfo(zone)).date()
        if not business_calendar(context, postgres, settings).is_business_day(day):
            return dg.SkipReason(f"{day} is not a business day")
        return dg.RunRequest(partition_key=f"{day:%Y-%m-%d}")

    weekly_schedule = dg.build_schedule_from_partitioned_job(
        weekly_report,
        name="weekly_report_friday",
        hour_of_day=15,
        minute_of_hour=0,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    return dg.Definitions(
        jobs=[morning_report, weekly_report], schedules=[morning_report_weekdays, weekly_schedule]
    )
