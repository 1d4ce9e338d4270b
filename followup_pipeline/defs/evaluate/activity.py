"""Step 2 of ``evaluate``: reset the cadence of deals with new activity.

Activity is an e-mail, or a call or meeting that was held, after the watch's last reset (or its
registration). A reset plans each open step again from the activity's local date.
"""

from dataclasses import dataclass, field
from datetime import datetime

from followup_pipeline.defs.evaluate.ports import Database, DealSource, Log
from followup_pipeline.defs.evaluate.tally import Tally
from followup_pipeline.domain.cadence import replan_steps
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.store import steps, watches
from followup_pipeline.store.watches import Watch

#: Calls and meetings count as activity once held; planned ones are not activity yet.
HELD = "Held"


@dataclass
class Resets:
    """What resetting found: its tally, and the watches whose activity could not be read (their
    due steps wait: a reset might have postponed them)."""

    tally: Tally
    unreadable: set[int] = field(default_factory=set)


class CadenceResetter:
    """Reads each open deal's activity and plans its open steps again after new activity."""

    def __init__(
        self,
        db: Database,
        crm: DealSource,
        calendar: BusinessCalendar,
        *,
        now: datetime,
        log: Log,
    ) -> None:
        self.db = db
        self.crm = crm
        self.calendar = calendar
        self.now = now
        self.log = log

    def latest_activity(self, subject_id: str, since: datetime) -> datetime | None:
        """The newest e-mail, held call or held meeting of a deal after ``since``."""
        emails = self.crm.list_emails(deal_id=subject_id, since=since).records
        moments = [e.date_sent for e in emails]
        for listing in (
            self.crm.list_calls(deal_id=subject_id),
            self.crm.list_meetings(deal_id=subject_id),
        ):
            moments += [r.date_start for r in listing.records if r.status == HELD]
        fresh = [m for m in moments if m is not None and since < m <= self.now]
        return max(fresh) if fresh else None

    def run(self) -> Resets:
        """Plan the open steps of every deal with new activity again from the activity's day."""
        resets = Resets(Tally(self.log))
        with self.db.connection() as conn:
            open_now = watches.open_watches(conn)
        for watch in open_now:
            try:
                moment = self.latest_activity(watch.subject_id, watch.active_since)
            except IntegrationError as error:
                resets.unreadable.add(watch.id)
                resets.tally.problem(
                    f"deal {watch.subject_id}: activity unreadable, no reset: {error}"
                )
                self._set_error(watch, str(error))
                continue
            if watch.last_error:
                self._set_error(watch, None)
            if moment is not None:
                self._reset(watch, moment)
                resets.tally.count("reset")
        return resets

    def _set_error(self, watch: Watch, error: str | None) -> None:
        with self.db.connection() as conn:
            watches.set_watch_error(
                conn, watch_id=watch.id, error=error, at=self.now if error else None
            )

    def _reset(self, watch: Watch, moment: datetime) -> None:
        reset_on = local_date(moment, watch.time_zone)
        with self.db.connection() as conn, conn.transaction():
            planned = [s.planned() for s in steps.steps_of(conn, watch.id) if s.open]
            for step in replan_steps(reset_on, planned, self.calendar):
                steps.replan_step(conn, watch_id=watch.id, step_no=step.step_no, due_on=step.due_on)
            watches.mark_reset(conn, watch_id=watch.id, at=moment)
