"""Steps 3 and 4 of ``evaluate``: the due steps of each watch, the open tasks whose deal got a
newer summary, and watches that went quiet.

For a watch with due steps: settle any task that may exist already, re-read the deal in the CRM
(a step is never fired unverified), then create the latest due step's task and supersede the
older ones. A task is written from the deal as the CRM has it then, in the team's language
(docs/architecture.md §2, "Task text"). The database chooses the watches: those with a step due,
those whose open task shows an older summary than their deal's newest, and those that may be
exhausted.
"""

from collections.abc import Sequence, Set
from datetime import date
from typing import Literal

from followup_pipeline.defs.evaluate.ports import DealSource
from followup_pipeline.defs.evaluate.task_upkeep import TaskUpkeep, update_key
from followup_pipeline.defs.evaluate.tasks import WAITS, TaskLedger
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import due_through, local_date
from followup_pipeline.domain.registration import Observation
from followup_pipeline.domain.steps import is_exhausted, select_due
from followup_pipeline.domain.tasks import (
    Contact,
    TaskContent,
    TaskFacts,
    assignees_for,
    contact_of,
    render_task,
)
from followup_pipeline.engine.scope import Database, RunScope, Tally
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError
from followup_pipeline.integrations.espocrm_models import Deal
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit, steps, watches
from followup_pipeline.store.steps import TaskSummary
from followup_pipeline.store.watch_control import WatchControlError, resume_watch
from followup_pipeline.store.watches import Watch

GONE: Literal["gone"] = "gone"


class DueSteps:
    """Creates the tasks of due steps and closes watches that went quiet, at one instant."""

    def __init__(
        self,
        run: RunScope,
        db: Database,
        crm: DealSource,
        tasks: TaskLedger,
        settings: Settings,
        *,
        calendar: BusinessCalendar,
    ) -> None:
        self.db = db
        self.crm = crm
        self.tasks = tasks
        self.upkeep = TaskUpkeep(tasks)
        self.settings = settings
        self.calendar = calendar
        self.now = run.now
        self.tally = Tally(run.log)
        self.cause: IntegrationError | None = None

    def run(self, *, unreadable: Set[int], cause: IntegrationError | None = None) -> Tally:
        """For each watch with a due step: re-check the deal, then create the latest step's task.

        The watches in ``unreadable`` (their activity could not be read, for ``cause``) wait,
        each counted against the vendor as a deal skipped.
        """
        self.tally = Tally(self.tally.log)
        self.cause = cause
        self.resume_ended_pauses()
        with self.db.connection() as conn:
            due = watches.due_watches(conn, now=self.now)
        for watch in due:
            self._process(watch.id, watch.id in unreadable)
        return self.tally

    def resume_ended_pauses(self) -> None:
        """Resume each watch whose pause ended by today (``watches pause --until``), each in its
        own transaction under the watch's lock, recorded in the audit as the machine's doing; one
        an operator resumed or closed meanwhile is left as it is."""
        with self.db.connection() as conn:
            ended = watches.pauses_ended(conn, now=self.now)
        for watch in ended:
            try:
                with self.db.connection() as conn, conn.transaction():
                    planned = resume_watch(
                        conn, watch_id=watch.id, now=self.now, calendar=self.calendar
                    )
                    dates = ", ".join(f"step {p.step_no} on {p.due_on}" for p in planned)
                    audit.record(
                        conn,
                        actor="followup (evaluate)",
                        action="watch.resume",
                        subject=f"deal:{watch.subject_id}",
                        detail=f"watch {watch.id} resumed, its pause ended on "
                        f"{watch.paused_until}: {dates or 'no step left'}",
                    )
            except WatchControlError:
                continue  # resumed or closed by an operator meanwhile
            self.tally.count("pauses_ended")

    def _process(self, watch_id: int, unreadable: bool) -> None:
        # Read fresh: an operator may have paused the watch while this run was going.
        with self.db.connection() as conn:
            watch = watches.watch_by_id(conn, watch_id)
            rows = steps.steps_of(conn, watch_id) if watch else []
        if watch is None or watch.closed_at is not None:
            return
        # Due at the working day's start (the task's due time), not from midnight.
        through = due_through(self.now, watch.time_zone, self.settings.business_hours_start)
        due_on = {step.step_no: step.due_on for step in rows}
        selection = select_due(steps.step_states(rows, watch.time_zone), through)
        if selection.fire is None:
            return
        due = [*selection.supersede, selection.fire]
        settled = [self.tasks.settle(watch, step_no, due_on[step_no]) for step_no in due]
        if any(state in WAITS for state in settled):
            return
        if "fired" in settled:
            # A task of this catch-up exists already: it is the one task; the rest are superseded.
            for step_no, state in zip(due, settled, strict=True):
                if state == "nothing":
                    self.tasks.skip(watch, step_no, due_on[step_no], "superseded")
            return
        if watch.paused_at is not None:
            for step_no in due:
                self.tasks.skip(watch, step_no, due_on[step_no], "paused")
            return
        step, day = selection.fire, due_on[selection.fire]
        waiting = [(step_no, due_on[step_no]) for step_no in due]
        if unreadable:
            self.tally.count("waiting_on_crm")
            self.tally.skip(
                self.cause, f"deal {watch.subject_id}: activity unreadable, its due step waits",
                item=f"deal {watch.subject_id}",
            )  # fmt: skip
            why = f"the CRM's activity could not be read: {self.cause or watch.last_error}"
            self.late(watch, waiting, why)
            return  # its activity could not be read: a reset might postpone the step
        deal = self._current(watch, due=waiting)
        if deal is None:
            return
        for step_no in selection.supersede:
            self.tasks.skip(watch, step_no, due_on[step_no], "superseded")
        with self.db.connection() as conn:
            summary = steps.newest_summary(conn, watch.subject_id)
        content = self.content(watch, deal, step, day, len(rows), summary)
        settings = self.settings
        assignees = assignees_for(
            deal.assigned_user_id, settings.clickup_user_map, settings.clickup_default_assignee
        )
        shown = summary.input_hash if summary else None
        self.tasks.create_task(watch, step, day, content, shown, assignees)

    def refresh_summaries(self) -> Tally:
        """Write the open task of each open watch again when its deal got a newer summary than
        the task shows (one written before ``enrich`` ran): from the deal as the CRM has it now,
        through the ledger, once per summary."""
        self.tally = Tally(self.tally.log)
        with self.db.connection() as conn:
            stale = steps.tasks_to_update(conn)
        for row in stale:
            if self.tasks.rate_limited:
                break  # ClickUp's minute is spent: the next run writes them (no CRM reads now)
            with self.db.connection() as conn:
                watch = watches.watch_by_id(conn, row.watch_id)
            if watch is None or watch.closed_at is not None:
                continue
            if self.tasks.ledger.dead(update_key(watch.id, row.step_no, row.summary_hash)):
                continue  # a dead letter: no CRM read for it, run after run
            deal = self._current(watch)
            if deal is None:
                continue
            summary = TaskSummary(row.summary_hash, row.line1, row.line2)
            content = self.content(watch, deal, row.step_no, row.due_on, row.step_count, summary)
            self.upkeep.update_task(watch, row, content)
        return self.tally

    def content(
        self,
        watch: Watch,
        deal: Deal,
        step_no: int,
        due_on: date,
        total: int,
        summary: TaskSummary | None,
    ) -> TaskContent:
        """The text of a step's task: the deal as the CRM has it now, the last contact the
        machine knows (the activity that last reset the cadence, else none since it began), the
        summary; "days ago" counted in the watch's time zone; in the team's language."""
        with self.db.connection() as conn:
            known = steps.last_contact(conn, watch.id)
        today = local_date(self.now, watch.time_zone)
        if known is not None and known.last_reset_at is not None:
            reset_on = local_date(known.last_reset_at, watch.time_zone)
            contact = contact_of(known.last_reset_kind, reset_on)
        else:
            contact = Contact("none", known.base_on if known else today)
        facts = TaskFacts(
            deal_name=deal.name,
            account_name=deal.account_name,
            crm_url=self.settings.crm_deal_url(deal.id),
            stage=deal.stage,
            amount=deal.amount,
            currency=deal.amount_currency,
            step_no=step_no,
            step_count=total,
            due_on=due_on,
            today=today,
            contact=contact,
            summary=(summary.line1, summary.line2) if summary else None,
        )
        return render_task(facts, self.settings.report_language)

    def late(self, watch: Watch, due: Sequence[tuple[int, date]], why: str) -> None:
        """The ``due`` steps of ``watch`` (the one that fires and those it supersedes) wait on
        the CRM for ``why``: each later than its grace goes on the list of work."""
        for step_no, due_on in due:
            self.tasks.late(watch, step_no, due_on, why)

    def _current(self, watch: Watch, *, due: Sequence[tuple[int, date]] = ()) -> Deal | None:
        """The deal as the CRM has it now, if the watch stays open: None when the CRM cannot tell
        (the error kept on the watch; the ``due`` step, late past its grace, goes on the list of
        work), and when the deal left the watched stages or is gone (the watch is closed now)."""
        deal = self._recheck(watch, due)
        if deal is None:
            return None
        stage = None if deal == GONE else deal.stage
        if self.tasks.apply(watch, Observation(watch.subject_id, stage, self.now, "recheck")):
            return None  # the deal left the watched stages, or is gone (subject_gone)
        assert isinstance(deal, Deal)
        return deal

    def _recheck(
        self, watch: Watch, due: Sequence[tuple[int, date]]
    ) -> Deal | Literal["gone"] | None:
        """The deal as the CRM has it now (refreshing the watch's copy), ``GONE`` if it was
        deleted, None when the CRM cannot tell: then the step waits, the error kept on the watch."""
        try:
            deal = self.crm.get_deal(deal_id=watch.subject_id)
        except NotFoundError:
            return GONE
        except IntegrationError as error:
            self.tally.count("waiting_on_crm")
            self.tally.problem(
                f"deal {watch.subject_id}: CRM unreadable, its due step waits: {error}",
                error,
                item=f"deal {watch.subject_id}",
            )
            with self.db.connection() as conn:
                watches.set_watch_error(conn, watch_id=watch.id, error=str(error), at=self.now)
            self.late(watch, due, f"the CRM could not re-check the deal: {error}")
            return None
        with self.db.connection() as conn:
            subject = deal.subject(self.settings.crm_deal_url(deal.id))
            watches.refresh_subject(conn, watch_id=watch.id, subject=subject, at=self.now)
        return deal

    def close_exhausted(self) -> None:
        """Close watches whose last step fired ``exhaust_after`` business days ago, no reset
        since; the database offers the candidates, the business calendar decides (the closes
        are counted by the task ledger, which closes the watches)."""
        exhaust_after = self.settings.exhaust_after
        with self.db.connection() as conn:
            candidates = watches.quiet_watches(conn, now=self.now, min_days=exhaust_after)
        for watch in candidates:
            with self.db.connection() as conn:
                states = steps.step_states(steps.steps_of(conn, watch.id), watch.time_zone)
            reset = watch.last_reset_at
            if is_exhausted(
                states,
                local_date(self.now, watch.time_zone),
                exhaust_after=exhaust_after,
                calendar=self.calendar,
                last_reset_on=local_date(reset, watch.time_zone) if reset else None,
            ):
                self.tasks.close_watch(watch, "exhausted")
