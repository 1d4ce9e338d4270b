"""Evaluation: hourly reconciliation with the CRM, then due steps to ClickUp (one run at a time).

Ops: ``sync`` (stage guard, reconcile) then ``evaluate_due`` (reset cadences, due steps,
exhausted watches, closing the tasks of closed watches). The partition is a label for the
operator; the work always uses the clock's now. ``build_defs(settings)`` makes the job and its
schedule from the one ``Settings``.
"""

from collections import Counter
from datetime import datetime, timedelta

import dagster as dg

from followup_pipeline.defs.common import (
    SINGLETON_TAG,
    RunCounts,
    business_day_of,
    calendar_of,
    outcome_output,
)
from followup_pipeline.defs.evaluate.activity import CadenceResetter
from followup_pipeline.defs.evaluate.due import DueSteps
from followup_pipeline.defs.evaluate.reconcile import Reconciler
from followup_pipeline.defs.evaluate.tally import Tally
from followup_pipeline.defs.evaluate.tasks import TaskLedger
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.integrations.resources import ClickUpResource, EspoCrmResource
from followup_pipeline.resources import ClockResource, PostgresResource, RunLockResource
from followup_pipeline.settings import Settings
from followup_pipeline.store.enrichments import cursor as job_cursor
from followup_pipeline.store.enrichments import set_cursor as set_job_cursor

#: A hung run is failed after this many seconds (run monitoring, dagster.yaml).
MAX_RUNTIME_S = 45 * 60
LOCK_HELD_ELSEWHERE = "another evaluate run holds the lock"


def business_hours_cron(settings: Settings) -> str:
    """Every full hour of the business hours, Monday to Friday (holidays are skipped by the
    schedule, since a cron cannot know them)."""
    return f"0 {settings.business_hours_start}-{settings.business_hours_end - 1} * * 1-5"


def business_hour_partitions(settings: Settings) -> dg.TimeWindowPartitionsDefinition:
    """One partition per business hour of the team's time zone, from ``partitions_start``:
    labels for the operator (the clock decides the work), so the Partitions tab shows failed
    business hours, not nights and weekends."""
    # end_offset=1: the hour in progress exists, so a tick at 07:00 runs partition 07:00.
    return dg.TimeWindowPartitionsDefinition(
        cron_schedule=business_hours_cron(settings),
        start=f"{settings.partitions_start_on():%Y-%m-%d}-{settings.business_hours_start:02d}:00",
        fmt="%Y-%m-%d-%H:%M",
        timezone=settings.timezone,
        end_offset=1,
    )


def _skipped(context: dg.OpExecutionContext, holder: str) -> dg.Output[RunCounts]:
    reason = f"{LOCK_HELD_ELSEWHERE}: {holder}" if holder else LOCK_HELD_ELSEWHERE
    context.log.info("skipped: %s", reason)
    return outcome_output(context, "skipped", {"skipped": 1, "reason": reason})


#: The cursor of the changes ``evaluate`` has read (``job_cursors``).
CURSOR = "evaluate"
#: Read from this much before the cursor: clocks of the CRM and of this machine may differ.
CURSOR_OVERLAP = timedelta(minutes=5)


class EvaluateConfig(dg.Config):
    """``full``: reconcile every deal in a watched stage and every open watch (as the first run
    of each business day does), not only what changed since the last run."""

    full: bool = False


def build_defs(settings: Settings, *, cron: str | None = None) -> dg.Definitions:
    """The ``evaluate`` job and its business-hours schedule, in the settings' time zone
    (``cron`` replaces the schedule's for a daemon test that cannot wait for the next hour)."""
    zone = settings.timezone
    partitions = business_hour_partitions(settings)

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
        config: EvaluateConfig,
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
            calendar=calendar_of(postgres, settings),
            now=now,
            log=context.log,
        )
        tally = Tally(context.log)
        with postgres.connection() as conn:
            position = job_cursor(conn, CURSOR)
        if position is not None and position > now:
            position = None  # a cursor from a clock set ahead: read everything once
        since = position - CURSOR_OVERLAP if position is not None else None
        full = (
            config.full or position is None or local_date(position, zone) != local_date(now, zone)
        )
        complete = True
        try:
            reconciler.check_stage_names()
        except IntegrationError as error:
            tally.problem(f"CRM unreachable, no reconciliation this run: {error}")
            complete = False
        else:
            if full or since is None:
                tally.count("full_reconciliation")
                tally.add(reconciler.run())
            else:
                tally.add(reconciler.run_changes(since))
            complete = reconciler.complete
        tally.add(tasks.tally)
        state = {
            "now": now.isoformat(),
            "since": since.isoformat() if since else None,
            "complete": complete,
            "counts": dict(tally.counts),
            "problems": tally.problems,
        }
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
        calendar = calendar_of(postgres, settings)
        tasks = ledger_of(context, postgres, clickup, now)
        tally = Tally(context.log, Counter(synced["counts"]), list(synced["problems"]))
        since = synced.get("since")
        resetter = CadenceResetter(postgres, crm, calendar, now=now, log=context.log)
        resets = resetter.run_changes(datetime.fromisoformat(str(since)) if since else None)
        due = DueSteps(postgres, crm, tasks, settings, calendar=calendar, now=now, log=context.log)
        tally.add(resets.tally).add(due.run(unreadable=resets.unreadable))
        due.close_exhausted()
        tasks.close_tasks_of_closed_watches()
        tally.add(tasks.tally)
        if synced.get("complete") and resets.complete and settings.now is None:
            # (A run on a clock set by FOLLOWUP_NOW reads, but never moves the cursor.)
            # Only a run that read every change moves the cursor: to when its reading began.
            with postgres.connection() as conn:
                set_job_cursor(conn, CURSOR, datetime.fromisoformat(str(synced["now"])))
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

    @dg.schedule(
        job=evaluate,
        cron_schedule=cron or business_hours_cron(settings),
        execution_timezone=zone,
        name="evaluate_business_hours",
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    def evaluate_business_hours(
        context: dg.ScheduleEvaluationContext, postgres: PostgresResource
    ) -> dg.RunRequest | dg.SkipReason:
        day = business_day_of(context, postgres, settings)
        if isinstance(day, dg.SkipReason):
            return day
        scheduled = context.scheduled_execution_time
        assert scheduled is not None
        key = partitions.get_partition_key_for_timestamp(scheduled.timestamp())
        return dg.RunRequest(partition_key=key)

    return dg.Definitions(jobs=[evaluate], schedules=[evaluate_business_hours])
