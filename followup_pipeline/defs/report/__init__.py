"""Reports: the morning list (daily partitions) and the Friday overview (weekly partitions)."""

import dagster as dg

from followup_pipeline.defs.common import RunCounts, outcome_output
from followup_pipeline.settings import get_settings

PARTITIONS_START = "2026-01-01"
ZONE = get_settings().timezone

morning_partitions = dg.DailyPartitionsDefinition(
    start_date=PARTITIONS_START, timezone=ZONE, end_offset=1
)
# Weeks start on Friday (day_offset=5), so the partition of a Friday is that Friday's overview.
weekly_partitions = dg.WeeklyPartitionsDefinition(
    start_date=PARTITIONS_START, timezone=ZONE, day_offset=5, end_offset=1
)


@dg.op
def send_morning_list(context: dg.OpExecutionContext) -> dg.Output[RunCounts]:
    """Render and send the morning list of the partition's day (lands with the report issue)."""
    return outcome_output(context, "ok", {"partition": context.partition_key})


@dg.op
def send_weekly_overview(context: dg.OpExecutionContext) -> dg.Output[RunCounts]:
    """Render and send the Friday overview (lands with the report issue)."""
    return outcome_output(context, "ok", {"partition": context.partition_key})


@dg.job(partitions_def=morning_partitions, description="The morning list of follow-ups.")
def morning_report() -> None:
    send_morning_list()


@dg.job(partitions_def=weekly_partitions, description="The Friday overview.")
def weekly_report() -> None:
    send_weekly_overview()


morning_schedule = dg.build_schedule_from_partitioned_job(
    morning_report, name="morning_report_weekdays", hour_of_day=7, minute_of_hour=30
)
weekly_schedule = dg.build_schedule_from_partitioned_job(
    weekly_report, name="weekly_report_friday", hour_of_day=15, minute_of_hour=0
)

definitions = dg.Definitions(
    jobs=[morning_report, weekly_report], schedules=[morning_schedule, weekly_schedule]
)
