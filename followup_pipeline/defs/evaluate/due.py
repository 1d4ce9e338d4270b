"""Steps 3 and 4 of ``evaluate``: the due steps of each watch, and watches that went quiet.

For a watch with due steps: settle any task that may exist already, re-read the deal in the CRM
(a step is never fired unverified), then create the latest due step's task and supersede the
older ones. The database chooses the watches: those with a step due, and those that may be
exhausted; no pass visits every open watch.
"""

from collections.abc import Set
from typing import Literal

from followup_pipeline.defs.evaluate.ports import DealSource
from followup_pipeline.defs.evaluate.tasks import WAITS, TaskLedger
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.domain.registration import Observation
from followup_pipeline.domain.steps import is_exhausted, select_due
from followup_pipeline.engine.scope import Database, RunScope, Tally
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError
from followup_pipeline.integrations.espocrm_models import Deal
from followup_pipeline.settings import Settings
from followup_pipeline.store import steps, watches
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
        self.settings = settings
        self.calendar = calendar
        self.now = run.now
        self.tally = Tally(run.log)

    def run(self, *, unreadable: Set[int]) -> Tally:
        """For each watch with a due step: re-check the deal, then create the latest step's task.

        The watches in ``unreadable`` (their activity could not be read) wait.
        """
        self.tally = Tally(self.tally.log)
        with self.db.connection() as conn:
            due = watches.due_watches(conn, now=self.now)
        for watch in due:
            self._process(watch.id, watch.id in unreadable)
        return self.tally

    def _process(self, watch_id: int, unreadable: bool) -> None:
        # Read fresh: an operator may have paused the watch while this run was going.
        with self.db.connection() as conn:
            watch = watches.watch_by_id(conn, watch_id)
            rows = steps.steps_of(conn, watch_id) if watch else []
        if watch is None or watch.closed_at is not None:
            return
        today = local_date(self.now, watch.time_zone)
        due_on = {step.step_no: step.due_on for step in rows}
        selection = select_due(steps.step_states(rows, watch.time_zone), today)
        if selection.fire is None:
            return
        due = [*selection.supersede, selection.fire]
        settled = [self.tasks.settle(watch, step_no) for step_no in due]
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
        if unreadable:
            self.tally.count("waiting_on_crm")
            return  # its activity could not be read: a reset might postpone the step
        deal = self._recheck(watch)
        if deal is None:
            return
        stage = None if deal == GONE else deal.stage
        if self.tasks.apply(watch, Observation(watch.subject_id, stage, self.now, "recheck")):
            return  # the deal left the watched stages, or is gone (subject_gone)
        assert isinstance(deal, Deal)
        for step_no in selection.supersede:
            self.tasks.skip(watch, step_no, due_on[step_no], "superseded")
        self.tasks.create_task(watch, deal, selection.fire, due_on[selection.fire], len(rows))

    def _recheck(self, watch: Watch) -> Deal | Literal["gone"] | None:
        """The deal as the CRM has it now (refreshing the watch's copy), ``GONE`` if it was
        deleted, None when the CRM cannot tell: then the step waits, the error kept on the watch."""
        try:
            deal = self.crm.get_deal(deal_id=watch.subject_id)
        except NotFoundError:
            return GONE
        except IntegrationError as error:
            self.tally.count("waiting_on_crm")
            self.tally.problem(
                f"deal {watch.subject_id}: CRM unreadable, its due step waits: {error}"
            )
            with self.db.connection() as conn:
                watches.set_watch_error(conn, watch_id=watch.id, error=str(error), at=self.now)
            return None
        with self.db.connection() as conn:
            watches.refresh_subject(
                conn, watch_id=watch.id, subject=deal.subject(self.settings.crm_deal_url(deal.id))
            )
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
