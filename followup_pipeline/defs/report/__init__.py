"""Reports: the morning list (daily partitions) and the Friday overview (weekly partitions).

Not built yet: each run says so (outcome ``skipped``, reason ``not built``) and sends nothing.
"""

import dagster as dg

from followup_pipeline.defs.common import RunCounts, not_built
from followup_pipeline.settings import Settings

PARTITIONS_START = "2026-01-01"


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
    morning_partitions = dg.DailyPartitionsDefinition(
        start_date=PARTITIONS_START, timezone=zone, end_offset=1
    )
    # Weeks start on Friday (day_offset=5), so the partition of a Friday is that Friday's overview.
    weekly_partitions = dg.WeeklyPartitionsDefinition(
        start_date=PARTITIONS_START, timezone=zone, day_offset=5, end_offset=1
    )

    @dg.job(partitions_def=morning_partitions, description="The morning list (not built yet).")
    def morning_report() -> None:
        send_morning_list()

    @dg.job(partitions_def=weekly_partitions, description="The Friday overview (not built yet).")
    def weekly_report() -> None:
        send_weekly_overview()

    morning_schedule = dg.build_schedule_from_partitioned_job(
        morning_report, name="morning_report_weekdays", hour_of_day=7, minute_of_hour=30
    )
    weekly_schedule = dg.build_schedule_from_partitioned_job(
        weekly_report, name="weekly_report_friday", hour_of_day=15, minute_of_hour=0
    )
    return dg.Definitions(
        jobs=[morning_report, weekly_report], schedules=[morning_schedule, weekly_schedule]
    )
