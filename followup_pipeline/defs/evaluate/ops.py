"""The two ops of ``evaluate``: ``sync`` (stage guard, the full reconciliation, in every run)
hands a ``Synced`` to ``evaluate_due`` (reset cadences from the activity since the cursor, and
from the tasks completed in ClickUp when ``FOLLOWUP_CLICKUP_COMPLETION_RESETS`` is on; due
steps, open tasks written again with newer summaries, exhausted watches, closing the tasks that
are superseded, overtaken or of closed watches). The work always uses the clock's now; the
partition is only a label."""

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import dagster as dg

from followup_pipeline.defs.evaluate.activity import CadenceResetter
from followup_pipeline.defs.evaluate.due import DueSteps
from followup_pipeline.defs.evaluate.reconcile import Reconciler
from followup_pipeline.defs.evaluate.tasks import TaskLedger
from followup_pipeline.engine.runs import CRM_TAG, RunCounts, calendar_of, outcome_output
from followup_pipeline.engine.scope import RunScope, Tally
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.integrations.resources import ClickUpResource, EspoCrmResource
from followup_pipeline.resources import ClockResource, PostgresResource, RunLockResource
from followup_pipeline.settings import Settings
from followup_pipeline.store.enrichments import cursor_of, set_cursor

LOCK_HELD_ELSEWHERE = "another evaluate run holds the lock"
#: The cursor of the activity ``evaluate`` has read (``job_cursors``).
CURSOR = "evaluate"
#: When an evaluate run last finished without a problem (its age on /metrics).
FINISHED = "evaluate_finished"
#: When the machine's first ``evaluate`` ran: no deal's cadence starts before it.
WATCHING_SINCE = "watching_since"
#: Read from this much before the cursor: clocks of the CRM and of this machine may differ.
CURSOR_OVERLAP = timedelta(minutes=5)


@dataclass(frozen=True)
class Synced:
    """What ``sync`` hands to ``evaluate_due``: when it read the CRM, from which cursor, whether
    it read every change, and its counts and problems so far; ``skipped`` when another run
    held the lock."""

    now: datetime
    since: datetime | None = None
    complete: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    skipped: bool = False
    #: What the reading skipped by vendor, the first error of each, the items it names.
    vendors: dict[str, int] = field(default_factory=dict)
    causes: dict[str, str] = field(default_factory=dict)
    items: dict[str, list[str]] = field(default_factory=dict)
    #: The CRM's answer when it could not be read at all (its vendor, the error's text): the
    #: run reads it no more, and tries again an hour later.
    crm_down: tuple[str, str] | None = None

    def crm_error(self) -> IntegrationError | None:
        """The error the CRM answered this run's first read with, if it could not be read."""
        if self.crm_down is None:
            return None
        vendor, text = self.crm_down
        return IntegrationError(text.removeprefix(f"{vendor}: "), vendor=vendor)


def _skipped(context: dg.OpExecutionContext, holder: str) -> dg.Output[RunCounts]:
    reason = f"{LOCK_HELD_ELSEWHERE}: {holder}" if holder else LOCK_HELD_ELSEWHERE
    context.log.info("skipped: %s", reason)
    return outcome_output(context, "skipped", {"skipped": 1, "reason": reason})


def crm_read(synced: "Synced", activity_complete: bool, down: bool) -> str:
    """How much of the CRM the run read: ``down`` (not even its stages), ``partial`` (a listing
    or the activity left unread), ``full``."""
    if down:
        return "down"
    return "full" if synced.complete and activity_complete else "partial"


@dg.op
def sync(
    context: dg.OpExecutionContext,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    espocrm: EspoCrmResource,
    clickup: ClickUpResource,
    clock: ClockResource,
    evaluate_lock: RunLockResource,
) -> dg.Output[Synced]:
    """Check the stage names, then reconcile watches with the CRM."""
    now = clock.now()
    if not evaluate_lock.held:
        return dg.Output(Synced(now=now, skipped=True))
    run = RunScope(now, context.run_id, context.log)
    tasks = TaskLedger(run, postgres, clickup.get_client(), settings)
    with postgres.connection() as conn:
        position = cursor_of(conn, CURSOR)
        watching_since = cursor_of(conn, WATCHING_SINCE)
        if watching_since is None:
            # The first run: deals that entered up to FOLLOWUP_ADOPT_DAYS before count from then.
            watching_since = now - timedelta(days=settings.adopt_days)
            if settings.now is None:  # (a clock set by FOLLOWUP_NOW sets nothing)
                set_cursor(conn, WATCHING_SINCE, watching_since)
    reconciler = Reconciler(
        run,
        postgres,
        espocrm.get_client(),
        tasks,
        settings,
        calendar=calendar_of(postgres, settings),
        watching_since=watching_since,
    )
    if position is not None and position > now:
        position = None  # a cursor from a clock set ahead: read all activity once
    since = position - CURSOR_OVERLAP if position is not None else None
    tally = Tally(context.log)
    complete = True
    crm_down: tuple[str, str] | None = None
    try:
        reconciler.check_stage_names()
    except IntegrationError as error:
        tally.problem(f"CRM unreachable, no reconciliation this run: {error}", error)
        complete = False
        crm_down = (error.vendor, str(error))
    else:
        tally.add(reconciler.run())
        complete = reconciler.complete
    tally.add(tasks.tally)
    synced = Synced(
        now=now,
        since=since,
        complete=complete,
        counts=dict(tally.counts),
        problems=tuple(tally.problems),
        vendors=dict(tally.skipped),
        causes=dict(tally.causes),
        items={vendor: list(named) for vendor, named in tally.items.items()},
        crm_down=crm_down,
    )
    return dg.Output(synced, metadata=tally.metadata())


@dg.op
def evaluate_due(
    context: dg.OpExecutionContext,
    synced: Synced,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    espocrm: EspoCrmResource,
    clickup: ClickUpResource,
    clock: ClockResource,
    evaluate_lock: RunLockResource,
) -> dg.Output[RunCounts]:
    """Reset cadences, create due steps' tasks, write open tasks again with newer summaries,
    close exhausted watches, and close the tasks superseded by a later step's, overtaken by
    activity, or of closed watches.

    The clock is read again: a retried or re-executed op works at its own now, not at the
    failed run's (the clock decides, docs/architecture.md).
    """
    if synced.skipped or not evaluate_lock.held:
        return _skipped(context, evaluate_lock.holder)
    run = RunScope(max(clock.now(), synced.now), context.run_id, context.log)
    crm = espocrm.get_client()
    calendar = calendar_of(postgres, settings)
    board = clickup.get_client()
    tasks = TaskLedger(run, postgres, board, settings)
    tally = Tally.of(
        context.log,
        synced.counts,
        list(synced.problems),
        synced.vendors,
        synced.causes,
        synced.items,
    )
    # Tasks completed in ClickUp count as follow-ups only when the setting says so (off by
    # default: ClickUp holds nothing the machine relies on).
    completed_in = board if settings.clickup_completion_resets else None
    resetter = CadenceResetter(run, postgres, crm, calendar, board=completed_in)
    # A CRM that did not answer sync (after its retries) is not asked again by this run.
    down = synced.crm_error()
    resets = resetter.run_changes(synced.since) if down is None else resetter.unreadable(down)
    due = DueSteps(run, postgres, crm, tasks, settings, calendar=calendar)
    tally.add(resets.tally).add(due.run(unreadable=resets.unreadable, cause=resets.error))
    if down is None:  # (writing a task again re-reads its deal: not from a CRM that is down)
        tally.add(due.refresh_summaries())
    due.close_exhausted()
    due.upkeep.close_tasks()
    tally.add(tasks.tally)
    if synced.complete and resets.complete and settings.now is None:
        # (A run on a clock set by FOLLOWUP_NOW reads, but never moves the cursor.)
        # Only a run that read every change moves the cursor: to when its reading began.
        with postgres.connection() as conn:
            set_cursor(conn, CURSOR, synced.now)
    if not tally.problems:
        with postgres.connection() as conn:
            # When a run last finished without a problem, by the wall clock (/metrics: its age).
            set_cursor(conn, FINISHED, datetime.now(UTC))
    return outcome_output(
        context,
        "partial" if tally.problems else "ok",
        tally.metadata(),
        degraded=tally.degraded(),
        at=run.now,
        extra_tags={CRM_TAG: crm_read(synced, resets.complete, down is not None)},
    )
