"""Reports: the morning list (partitions of business days) and the Friday overview (weekly
partitions keyed by their Friday), each sent once per partition (``ops.py``). A report sent
after its day says so in its subject.
"""

import dagster as dg

from followup_pipeline.defs.report.ops import send_morning_list, send_weekly_overview
from followup_pipeline.engine.runs import business_day_of, time_limit
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import Settings

#: A report run that outlives this is failed by run monitoring (a mail that hangs, a stuck CRM).
MAX_RUNTIME_S = 30 * 60


def build_defs(settings: Settings) -> dg.Definitions:
    """The two report jobs, partitioned in the team's time zone, and their schedules."""
    zone = settings.timezone
    at = settings.morning_report_at
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
        tags=time_limit(MAX_RUNTIME_S),
    )
    def morning_report() -> None:
        send_morning_list()

    @dg.job(
        partitions_def=weekly_partitions,
        description="The Friday overview of the week, sent once through Outlook.",
        tags=time_limit(MAX_RUNTIME_S),
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
        jobs=[morning_report, weekly_report],
        schedules=[morning_report_weekdays, weekly_schedule],
        resources={"settings": settings},
    )
