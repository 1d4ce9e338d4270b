"""Evaluation: hourly reconciliation with the CRM, then due steps to ClickUp (one run at a time).

The ops live in ``ops.py``; ``build_defs(settings)`` makes what Dagster needs at load time from
the one ``Settings``: the business-hour partitions, the job and its schedule.
"""

import dagster as dg

from followup_pipeline.defs.evaluate.ops import evaluate_due, sync
from followup_pipeline.engine.runs import SINGLETON_TAG, business_day_of, time_limit
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import Settings

#: A hung run is failed after this many seconds (run monitoring, dagster.yaml).
MAX_RUNTIME_S = 45 * 60


def evaluate_cron(settings: Settings) -> str:
    """Every full hour of ``evaluate``'s window (every hour by default), Monday to Friday
    (holidays are skipped by the schedule, since a cron cannot know them)."""
    return f"0 {settings.evaluate_hours_start}-{settings.evaluate_hours_end - 1} * * 1-5"


def evaluate_partitions(settings: Settings) -> dg.TimeWindowPartitionsDefinition:
    """One partition per hour of ``evaluate``'s window on weekdays, in the team's time zone,
    from ``partitions_start``: labels for the operator (the clock decides the work), so the
    Partitions tab shows the failed hours of business days, not weekends."""
    # end_offset=1: the hour in progress exists, so a tick at 07:00 runs partition 07:00.
    return dg.TimeWindowPartitionsDefinition(
        cron_schedule=evaluate_cron(settings),
        start=f"{settings.partitions_start_on():%Y-%m-%d}-{settings.evaluate_hours_start:02d}:00",
        fmt="%Y-%m-%d-%H:%M",
        timezone=settings.timezone,
        end_offset=1,
    )


def evaluate_tick(
    context: dg.ScheduleEvaluationContext, postgres: PostgresResource, settings: Settings
) -> dg.RunRequest | dg.SkipReason:
    """Each hour's partition on business days (weekends and holidays are skipped)."""
    day = business_day_of(context, postgres, settings)
    if isinstance(day, dg.SkipReason):
        return day
    scheduled = context.scheduled_execution_time
    assert scheduled is not None
    key = evaluate_partitions(settings).get_partition_key_for_timestamp(scheduled.timestamp())
    return dg.RunRequest(partition_key=key)


def build_defs(settings: Settings, *, cron: str | None = None) -> dg.Definitions:
    """The ``evaluate`` job and its hourly schedule on business days, in the settings' time zone
    (``cron`` replaces the schedule's for a daemon test that cannot wait for the next hour)."""

    @dg.job(
        name="evaluate",
        partitions_def=evaluate_partitions(settings),
        executor_def=dg.in_process_executor,
        tags={SINGLETON_TAG: "evaluate", **time_limit(MAX_RUNTIME_S)},
        description="Reconcile with the CRM, reset cadences, fire due steps, close exhausted.",
    )
    def evaluate() -> None:
        evaluate_due(sync())

    @dg.schedule(
        job=evaluate,
        cron_schedule=cron or evaluate_cron(settings),
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    def evaluate_business_hours(
        context: dg.ScheduleEvaluationContext, postgres: PostgresResource
    ) -> dg.RunRequest | dg.SkipReason:
        """Each hour's partition on business days (weekends and holidays are skipped)."""
        return evaluate_tick(context, postgres, settings)

    return dg.Definitions(
        jobs=[evaluate], schedules=[evaluate_business_hours], resources={"settings": settings}
    )
