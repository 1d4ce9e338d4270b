"""Evaluation: hourly reconciliation with the CRM, then due steps to ClickUp (one run at a time).

Ops: ``sync`` (stage guard, reconcile) then ``evaluate_due`` (reset cadences, due steps,
exhausted watches, closing the tasks of closed watches). The partition is a label for the
operator; the work always uses the clock's now. ``build_defs(settings)`` makes the job and its
schedule from the one ``Settings``.
"""

from collections import Counter
from datetime import datetime
from zoneinfo import ZoneInfo

import dagster as dg

from followup_pipeline.defs.common import SINGLETON_TAG, RunCounts, outcome_output
from followup_pipeline.defs.evaluate.context import Evaluation
from followup_pipeline.defs.evaluate.due import close_exhausted, process_due_steps
from followup_pipeline.defs.evaluate.fire import close_tasks_of_closed_watches
from followup_pipeline.defs.evaluate.reconcile import check_stage_names, reconcile, reset_cadences
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.integrations.resources import ClickUpResource, EspoCrmResource
from followup_pipeline.resources import ClockResource, PostgresResource, RunLockResource
from followup_pipeline.settings import Settings
from followup_pipeline.store.db import StoreError
from followup_pipeline.store.watches import load_calendar

#: A hung run is failed after this many seconds (run monitoring, dagster.yaml).
MAX_RUNTIME_S = 45 * 60
PARTITIONS_START = "2026-01-01-00:00"
LOCK_HELD_ELSEWHERE = "another evaluate run holds the lock"


def hourly_partitions(zone: str) -> dg.HourlyPartitionsDefinition:
    """One partition per hour of the team's time zone: labels for the operator, not windows."""
    # end_offset=1: the hour in progress exists, so a tick at 07:00 runs partition 07:00.
    return dg.HourlyPartitionsDefinition(start_date=PARTITIONS_START, timezone=zone, end_offset=1)


def _skipped(context: dg.OpExecutionContext, holder: str) -> dg.Output[RunCounts]:
    reason = f"{LOCK_HELD_ELSEWHERE}: {holder}" if holder else LOCK_HELD_ELSEWHERE
    context.log.info("skipped: %s", reason)
    return outcome_output(context, "skipped", {"skipped": 1, "reason": reason})


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``evaluate`` job and its business-hours schedule, in the settings' time zone."""
    zone = settings.timezone
    partitions = hourly_partitions(zone)

    @dg.op
    def sync(
        context: dg.OpExecutionContext,
        postgres: PostgresResource,
        espocrm: EspoCrmResource,
        clickup: ClickUpResource,
        clock: ClockResource,
        evaluate_lock: RunLockResource,
    ) -> dg.Output[RunCounts]:
        """Check the stage names, then reconcile watches with the CRM."""
        if not evaluate_lock.held:
            return _skipped(context, evaluate_lock.holder)
        ev = Evaluation(
            postgres,
            espocrm.get_client(),
            clickup.get_client(),
            settings,
            clock.now(),
            context.log,
            context.run_id,
        )
        try:
            check_stage_names(ev)
        except IntegrationError as error:
            ev.problem(f"CRM unreachable, no reconciliation this run: {error}")
        else:
            reconcile(ev)
        state = {"now": ev.now.isoformat(), "counts": dict(ev.counts), "problems": ev.problems}
        return dg.Output(state, metadata=ev.metadata())

    @dg.op(name="evaluate_due")
    def evaluate_due(
        context: dg.OpExecutionContext,
        synced: RunCounts,
        postgres: PostgresResource,
        espocrm: EspoCrmResource,
        clickup: ClickUpResource,
        clock: ClockResource,
        evaluate_lock: RunLockResource,
    ) -> dg.Output[RunCounts]:
        """Reset cadences, fire due steps, close exhausted watches and the tasks of closed ones.

        The clock is read again: a retried or re-executed op works at its own now, not at the
        failed run's (the clock decides, ARCHITECTURE.md §2).
        """
        if synced.get("skipped") or not evaluate_lock.held:
            return _skipped(context, evaluate_lock.holder)
        ev = Evaluation(
            postgres,
            espocrm.get_client(),
            clickup.get_client(),
            settings,
            max(clock.now(), datetime.fromisoformat(synced["now"])),
            context.log,
            context.run_id,
            counts=Counter(synced["counts"]),
            problems=list(synced["problems"]),
        )
        reset_cadences(ev)
        process_due_steps(ev)
        close_exhausted(ev)
        close_tasks_of_closed_watches(ev)
        return outcome_output(context, "partial" if ev.problems else "ok", ev.metadata())

    @dg.job(
        name="evaluate",
        partitions_def=partitions,
        executor_def=dg.in_process_executor,
        tags={SINGLETON_TAG: "evaluate", "dagster/max_runtime": str(MAX_RUNTIME_S)},
        description="Reconcile with the CRM, reset cadences, fire due steps, close exhausted.",
    )
    def evaluate() -> None:
        evaluate_due(sync())

    def business_calendar(
        context: dg.ScheduleEvaluationContext, postgres: PostgresResource
    ) -> BusinessCalendar:
        """The calendar with the database's local overrides; the package's alone if unreachable
        (a run on a day off does no harm: there is simply nothing due)."""
        try:
            with postgres.connection() as conn:
                return load_calendar(conn, settings.holiday_country, settings.holiday_subdivision)
        except StoreError as error:
            context.log.warning("holiday overrides unreadable, public holidays only: %s", error)
            return BusinessCalendar(settings.holiday_country, settings.holiday_subdivision)

    hours = f"{settings.business_hours_start}-{settings.business_hours_end - 1}"

    @dg.schedule(
        job=evaluate,
        cron_schedule=f"0 {hours} * * 1-5",
        execution_timezone=zone,
        name="evaluate_business_hours",
    )
    def evaluate_business_hours(
        context: dg.ScheduleEvaluationContext, postgres: PostgresResource
    ) -> dg.RunRequest | dg.SkipReason:
        scheduled = context.scheduled_execution_time
        assert scheduled is not None
        day = scheduled.astimezone(ZoneInfo(zone)).date()
        if not business_calendar(context, postgres).is_business_day(day):
            return dg.SkipReason(f"{day} is not a business day")
        key = partitions.get_partition_key_for_timestamp(scheduled.timestamp())
        return dg.RunRequest(partition_key=key)

    return dg.Definitions(jobs=[evaluate], schedules=[evaluate_business_hours])
