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
from followup_pipeline.defs.evaluate.activity import CadenceResetter
from followup_pipeline.defs.evaluate.due import DueSteps
from followup_pipeline.defs.evaluate.reconcile import Reconciler
from followup_pipeline.defs.evaluate.tally import Tally
from followup_pipeline.defs.evaluate.tasks import TaskLedger
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.integrations.resources import ClickUpResource, EspoCrmResource
from followup_pipeline.resources import ClockResource, PostgresResource, RunLockResource
from followup_pipeline.settings import Settings
from followup_pipeline.store.db import StoreError
from followup_pipeline.store.holidays import load_calendar

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

    def calendar_of(postgres: PostgresResource) -> BusinessCalendar:
        with postgres.connection() as conn:
            return load_calendar(conn, settings.holiday_country, settings.holiday_subdivision)

    def ledger_of(
        context: dg.OpExecutionContext,
        postgres: PostgresResource,
        clickup: ClickUpResource,
        now: datetime,
    ) -> TaskLedger:
        """The task ledger of one op at ``now``."""
        return TaskLedger(
            postgres,
            clickup.get_client(),
            settings,
            now=now,
            run_id=context.run_id,
            log=context.log,
        )

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
        now = clock.now()
        tasks = ledger_of(context, postgres, clickup, now)
        reconciler = Reconciler(
            postgres,
            espocrm.get_client(),
            tasks,
            settings,
            calendar=calendar_of(postgres),
            now=now,
            log=context.log,
        )
        tally = Tally(context.log)
        try:
            reconciler.check_stage_names()
        except IntegrationError as error:
            tally.problem(f"CRM unreachable, no reconciliation this run: {error}")
        else:
            tally.add(reconciler.run())
        tally.add(tasks.tally)
        state = {"now": now.isoformat(), "counts": dict(tally.counts), "problems": tally.problems}
        return dg.Output(state, metadata=tally.metadata())

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
        """Reset cadences, create due steps' tasks, close exhausted watches and the tasks of
        closed ones.

        The clock is read again: a retried or re-executed op works at its own now, not at the
        failed run's (the clock decides, ARCHITECTURE.md §2).
        """
        if synced.get("skipped") or not evaluate_lock.held:
            return _skipped(context, evaluate_lock.holder)
        now = max(clock.now(), datetime.fromisoformat(str(synced["now"])))
        crm = espocrm.get_client()
        calendar = calendar_of(postgres)
        tasks = ledger_of(context, postgres, clickup, now)
        tally = Tally(context.log, Counter(synced["counts"]), list(synced["problems"]))
        resets = CadenceResetter(postgres, crm, calendar, now=now, log=context.log).run()
        due = DueSteps(postgres, crm, tasks, settings, calendar=calendar, now=now, log=context.log)
        tally.add(resets.tally).add(due.run(unreadable=resets.unreadable))
        due.close_exhausted()
        tasks.close_tasks_of_closed_watches()
        tally.add(tasks.tally)
        return outcome_output(context, "partial" if tally.problems else "ok", tally.metadata())

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
            return calendar_of(postgres)
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
